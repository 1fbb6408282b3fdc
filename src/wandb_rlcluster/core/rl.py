"""Gauges 9-12 and the GRPO extras: reward, KL, policy ratio, length, entropy, reward signal."""

from __future__ import annotations

import math

from .gauge import Gauge, finite
from .keys import Row
from .rollouts import ROLLOUT_DEFAULTS, length_rules, reward_rules, reward_signal_rules
from .stats import Baseline, Ewma, RollingCorrelation, RollingSlope, RollingWindow, RunningRegression, robust_z

PREFERENCE_FAMILIES = frozenset({"dpo", "kto", "orpo"})
GROUP_FAMILIES = frozenset({"grpo"})


class RewardGauge(Gauge):
    """Gauge 9 — reward dynamics.

    GRPO/RLOO/PPO: is the reward improving, flat-lined, or climbing suspiciously
    together with length (hacking)? DPO family: margin and accuracy together —
    never the chosen reward alone, which often falls in healthy runs.
    """

    id = "reward"
    title = "Reward dynamics"
    inputs = ("reward", "objective/scores", "objective/rlhf_reward", "rewards/margins", "rewards/chosen",
              "rewards/accuracies", "accuracy", "margin")
    defaults = {
        "window": 15, "min_rows": 50, "plateau_t": 1.0, "plateau_for": 20,
        "flat_span": 1e-2, "flat_rows": 20, "flat_stop_rows": 50,
        "hack_length_ratio": 1.5, "hack_corr": 0.6, "hack_gain_sigma": 3.0,
        "margin_collapse": 0.5, "margin_peak_min": 0.2, "accuracy_chance": 0.55, "dpo_min_rows": 30,
        "margin_learning_t": 2.0, **ROLLOUT_DEFAULTS["reward"],
    }

    def setup(self) -> None:
        w = self.p["window"]
        self.first = RollingWindow(w)  # frozen once full: the start of the run
        self.trend = RunningRegression()
        self.flat = RollingWindow(self.p["flat_rows"])
        self.flat_rows = 0
        self.ewma = Ewma(0.1)
        self.len_base = Baseline(10)
        self.rl = RollingCorrelation(30)  # (reward, length) pairs
        self.margin = Ewma(0.1)
        self.margin_peak = -math.inf
        self.margin_trend = RunningRegression()  # is the margin still rising? (slow learners sit near chance)
        self.acc = Ewma(0.1)
        self.chosen = Ewma(0.1)
        self.chosen_start = Baseline(5)
        self.pref_rows = 0

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        reward_rules(self, row)
        v = row.values
        if self.family in PREFERENCE_FAMILIES or "rewards/margins" in v:
            self._preference(row)
            return
        if self.family == "reward":
            acc = v.get("accuracy")
            if acc is not None and finite(acc):
                a = self.acc.push(acc)
                self.derived["accuracy_ewma"] = a
                chance = self.rows_seen >= self.p["dpo_min_rows"] and a < self.p["accuracy_chance"]
                self.check("accuracy-chance", chance, "warn", "accuracy", acc,
                           lambda: f"reward-model accuracy {a:.2f} is near chance after {self.rows_seen} steps.",
                           for_=10)
            return
        key = "reward" if "reward" in v else ("objective/scores" if "objective/scores" in v else None)
        if key is None:
            return
        r = v[key]
        if not finite(r):
            return
        d = self.derived
        d["reward"] = r
        d["reward_ewma"] = self.ewma.push(r)
        if not self.first.full:
            self.first.push(r)
        self.flat.push(r)
        # Flat-lined reward: no learning signal at all.
        span = self.p["flat_span"] * max(1.0, abs(r))
        # the O(1) variance rules most rows out before the O(window) min/max is needed
        flat = self.flat.full and self.flat.var() <= span * span and (self.flat.max() - self.flat.min()) <= span
        self.flat_rows = self.flat_rows + 1 if flat else 0
        self.check("reward-flatline", flat, "warn", key, r,
                   lambda: f"{key} has been pinned at {r:.4g} for {self.p['flat_rows']} logged steps: every "
                   "completion gets the same score (format penalty? broken reward function?). There is no "
                   "learning signal.")
        long_flat = flat and self.flat_rows + self.p["flat_rows"] >= self.p["flat_stop_rows"]
        self.check("reward-flatline-persistent", long_flat, "stop", key, r,
                   lambda: f"{key} has not moved for {self.p['flat_stop_rows']} logged steps: the run cannot learn. "
                   "Stop and fix the reward before spending more compute.")
        # Plateau: no significant upward trend over the whole run so far.
        self.trend.push(float(self.rows_seen), r)
        if self.rows_seen >= self.p["min_rows"]:
            t = self.trend.t_stat()
            d["trend_t"] = t
            m1 = self.first.mean()
            self.check("reward-plateau", t < self.p["plateau_t"] and not flat, "warn", key, r,
                       lambda: f"reward is not improving: no upward trend over {self.rows_seen} logged steps "
                       f"(t={t:.1f}; started near {m1:.3g}, now {d['reward_ewma']:.3g}). The policy is stable but "
                       "not learning; check the learning rate, the task's difficulty and frac_reward_zero_std.",
                       for_=self.p["plateau_for"], clear=10)
        # Hacking: reward gains far beyond its start, length growing with it.
        length = v.get("completions/mean_length")
        if length is not None and finite(length) and length > 0:
            self.len_base.push(length)
            self.rl.push(r, length)
            if self.len_base.ready and self.first.full and self.rl.full:
                lr = self.rl.mean_y() / max(self.len_base.value, 1e-9)
                sigma = max(self.first.std(), 1e-3 * max(1.0, abs(self.first.mean())))
                gain = (self.rl.mean_x() - self.first.mean()) / sigma
                corr = self.rl.corr()
                d["length_corr"] = corr
                p = self.p
                hack = lr > p["hack_length_ratio"] and corr > p["hack_corr"] and gain > p["hack_gain_sigma"]
                self.check("reward-hacking", hack, "warn", key, r,
                           lambda: f"reward is up {gain:.1f} sigma while completions grew {lr:.1f}x and track it "
                           f"(corr {corr:.2f}): the policy may be paying for length, not quality. Read samples; "
                           "check KL; add a length penalty.",
                           for_=3)

    def _preference(self, row: Row) -> None:
        v = row.values
        d = self.derived
        m = v.get("rewards/margins")
        c, rj = v.get("rewards/chosen"), v.get("rewards/rejected")
        if m is None and c is not None and rj is not None:
            m = c - rj
        acc = v.get("rewards/accuracies")
        if m is None or not finite(m):
            return
        self.pref_rows += 1
        self.margin_trend.push(float(self.pref_rows), m)
        me = self.margin.push(m)
        d["margin"] = m
        d["margin_ewma"] = me
        warm = self.pref_rows >= self.p["dpo_min_rows"]
        if warm:
            self.margin_peak = max(self.margin_peak, me)
        d["margin_peak"] = self.margin_peak if self.margin_peak > -math.inf else me
        peak = self.margin_peak
        collapsed = warm and peak >= self.p["margin_peak_min"] and me < self.p["margin_collapse"] * peak
        self.check("margin-collapse", collapsed, "warn", "rewards/margins", m,
                   lambda: f"reward margin fell to {me:.3g} from a peak of {peak:.3g}: chosen and rejected are "
                   "converging and the preference signal is being undone (LR too high, noisy pairs, beta too low).",
                   for_=5)
        self.check("margin-negative", warm and me < 0, "warn", "rewards/margins", m,
                   lambda: f"reward margin is negative ({me:.3g}): the policy now prefers the rejected answers. "
                   "Check that chosen/rejected are not swapped.", for_=5)
        if acc is not None and finite(acc):
            a = self.acc.push(acc)
            d["accuracy_ewma"] = a
            # Near chance while the margin still climbs is a slow start, not a failure to learn.
            learning = self.margin_trend.t_stat() > self.p["margin_learning_t"]
            chance = warm and a < self.p["accuracy_chance"] and not learning
            self.check("accuracy-chance", chance, "warn", "rewards/accuracies", acc,
                       lambda: f"preference accuracy {a:.2f} is near chance after {self.pref_rows} steps: the model "
                       "is not learning the preference.", for_=10)
        if c is not None and finite(c):
            ce = self.chosen.push(c)
            self.chosen_start.push(c)
            d["chosen_ewma"] = ce
            # The trap: chosen reward falling while the margin grows is common and often harmless.
            healthy_margin = me > 0 and not collapsed
            falling = self.chosen_start.ready and ce < self.chosen_start.value - 0.1 and healthy_margin
            self.check("chosen-reward-falling", warm and falling, "info", "rewards/chosen", c,
                       lambda: f"chosen reward drifts down ({ce:.3g}) while the margin grows ({me:.3g}): likelihood "
                       "displacement, common in DPO and usually harmless. Watch logps/chosen.", for_=10, clear=20)


class KLGauge(Gauge):
    """Gauge 10 — KL to the reference policy: level, growth, spikes, sign.

    GRPO/RLOO log a per-token ``kl`` only when beta > 0; PPO and Online DPO log
    a per-sequence ``objective/kl``. Thresholds are per family because the two
    are not the same quantity.
    """

    id = "kl"
    title = "KL health"
    inputs = ("kl", "objective/kl")
    defaults = {"warn": 0.5, "stop": 1.0, "for": 3, "clear": 10, "near_zero": 1e-4, "near_zero_rows": 50,
                "negative": -0.01, "spike_z": 10.0, "spike_min": 0.1, "start_rows": 5}
    family_defaults = {
        # per-sequence sums: values scale with completion length
        "ppo": {"warn": 6.0, "stop": 20.0, "near_zero": 1e-3, "negative": -0.5, "spike_min": 2.0},
        "online_dpo": {"warn": 6.0, "stop": 20.0, "near_zero": 1e-3, "negative": -0.5, "spike_min": 2.0},
    }

    def setup(self) -> None:
        self.win = RollingWindow(30)
        self.start = Baseline(self.p["start_rows"])
        self.ewma = Ewma(0.2)
        self.slope = RollingSlope(20)
        self.start_checked = False
        self.note = ""

    def applies(self) -> bool:
        return self.family not in ("dpo", "orpo", "sft", "reward", "kto")

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        v = row.values
        key = "objective/kl" if "objective/kl" in v else "kl"
        kl = v[key]
        if not finite(kl) or not self.applies():
            return
        p = self.p
        d = self.derived
        d["kl"] = kl
        e = self.ewma.push(kl)
        d["kl_ewma"] = e
        self.slope.push(row.step, kl)
        d["kl_slope"] = self.slope.slope()
        self.check("kl-stop", kl > p["stop"], "stop", key, kl,
                   lambda: f"{key} {kl:.3g} has been above {p['stop']} for {p['for']} logged steps: the policy has "
                   "run away from the reference and reward gains are likely over-optimisation. Stop, then raise "
                   "beta or lower the learning rate and resume from an earlier checkpoint.",
                   for_=p["for"], clear=p["clear"])
        self.check("kl-warn", kl > p["warn"], "warn", key, kl,
                   lambda: f"{key} {kl:.3g} is above {p['warn']} for {p['for']} logged steps: drifting far from the "
                   "reference. Watch whether reward still improves; consider a larger beta.",
                   for_=p["for"], clear=p["clear"])
        self.check("kl-negative", e < p["negative"], "warn", key, kl,
                   lambda: f"{key} is negative on average ({e:.3g}): the estimator is being fed mismatched "
                   "log-probs (sampling temperature/top-k differ from the training forward pass, or the "
                   "reference model differs).", for_=5)
        if len(self.win) >= 10:
            z = robust_z(kl, self.win, floor=1e-6)
            d["kl_z"] = z
            self.check("kl-spike", z > p["spike_z"] and kl > p["spike_min"], "warn", key, kl,
                       lambda: f"{key} spiked to {kl:.3g} ({z:.0f} robust sigmas above its recent median): a "
                       "sudden jump often precedes instability. Check the batch at this step.", clear=3)
        self.win.push(kl)
        self.start.push(kl)
        if self.start.ready and not self.start_checked:
            self.start_checked = True
            s = self.start.value
            self.check("kl-high-at-start", s > p["warn"], "warn", key, s,
                       lambda: f"{key} is already {s:.3g} in the first {p['start_rows']} logged steps, before the "
                       "policy has had time to move: the reference model is not the initial policy, or "
                       "generation settings (temperature, chat template) differ between sampling and scoring.")
        if self.rows_seen >= p["near_zero_rows"]:
            med = self.win.robust()[0]
            self.check("kl-near-zero", abs(med) < p["near_zero"], "warn", key, kl,
                       lambda: f"{key} has stayed ~0 (median {med:.2g}) for {self.rows_seen} logged steps: the policy "
                       "is not moving away from the reference (beta too high, LR too low, or the reference is "
                       "updated with the policy).", for_=20, clear=10)


class PolicyRatioGauge(Gauge):
    """Gauge 11 — importance ratio and clip fractions (PPO; off-policy GRPO only).

    Default GRPO is on-policy (num_iterations=1): the ratio is exactly 1 and
    every clip fraction 0, so clip rules stay silent until clipping is seen.
    """

    id = "policy_ratio"
    title = "Policy ratio & clipping"
    inputs = ("val/ratio", "policy/clipfrac_avg", "clip_ratio/region_mean", "clip_ratio/low_mean",
              "clip_ratio/high_mean")
    defaults = {"ratio_warn": (0.7, 1.5), "ratio_stop": (0.5, 2.0), "clip_warn": 0.3, "clip_stop": 0.5,
                "clip_low": 0.01, "for": 3, "warn_for": 1}  # stop after 3 rows out of range, warn after 2
    family_defaults = {"grpo": {"clip_warn": 0.4, "clip_stop": 0.6}}

    def setup(self) -> None:
        self.off_policy = False
        self.clip_ewma = Ewma(0.2)
        self.clip_slope = RollingSlope(20)
        self.note = ""

    def applies(self) -> bool:
        return self.family in ("ppo", "grpo", "online_dpo")

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        v = row.values
        p = self.p
        d = self.derived
        ratio = v.get("val/ratio")
        if ratio is not None and finite(ratio):
            d["ratio"] = ratio
            dev = abs(ratio - 1.0)
            d["ratio_deviation"] = dev
            lo, hi = p["ratio_stop"]
            self.check("ratio-stop", not lo <= ratio <= hi, "stop", "val/ratio", ratio,
                       lambda: f"policy ratio {ratio:.3g} is outside [{lo}, {hi}] for {p['for']} logged steps: "
                       "updates are far off-policy and the trust region is gone. Stop; lower LR or epochs.",
                       for_=p["for"])
            lo, hi = p["ratio_warn"]
            self.check("ratio-warn", not lo <= ratio <= hi, "warn", "val/ratio", ratio,
                       lambda: f"policy ratio {ratio:.3g} is outside [{lo}, {hi}]: updates are drifting off-policy.",
                       for_=p["warn_for"])
        key = "policy/clipfrac_avg" if "policy/clipfrac_avg" in v else "clip_ratio/region_mean"
        clip = v.get(key)
        if clip is None and "clip_ratio/low_mean" in v and "clip_ratio/high_mean" in v:
            clip = v["clip_ratio/low_mean"] + v["clip_ratio/high_mean"]
        lo_c, hi_c = v.get("clip_ratio/low_mean"), v.get("clip_ratio/high_mean")
        if lo_c is not None and hi_c is not None and finite(lo_c) and finite(hi_c) and lo_c + hi_c > 0:
            d["clip_asymmetry"] = (hi_c - lo_c) / (hi_c + lo_c)
        if clip is None or not finite(clip):
            return
        if clip > 0 or self.family == "ppo":
            self.off_policy = True
        if not self.off_policy:
            self.note = "on-policy (ratio = 1, clip fractions 0): nothing to judge"
            d["clip"] = clip
            return
        self.note = ""
        d["clip"] = clip
        ce = self.clip_ewma.push(clip)
        d["clip_ewma"] = ce
        self.clip_slope.push(row.step, clip)
        self.check("clip-stop", clip > p["clip_stop"], "stop", key, clip,
                   lambda: f"{clip:.0%} of tokens are clipped for {p['for']} logged steps: each update is far too "
                   "large; KL explosion usually follows. Stop; lower LR or num_iterations.", for_=p["for"])
        self.check("clip-high", clip > p["clip_warn"], "warn", key, clip,
                   lambda: f"clip fraction {clip:.0%} is above {p['clip_warn']:.0%}: updates are too aggressive.",
                   for_=p["warn_for"])
        self.check("clip-low", self.rows_seen > 20 and ce < p["clip_low"], "info", key, clip,
                   lambda: f"clip fraction ~{ce:.2%} on an off-policy run: updates are very timid; a larger LR "
                   "would learn faster.", for_=10)


class LengthGauge(Gauge):
    """Gauge 12 — generation length: drift, explosion, collapse, truncation."""

    id = "length"
    title = "Generation length"
    inputs = ("completions/mean_length", "completions/clipped_ratio", "val/num_eos_tokens")
    # A 2x / 0.5x ratio is far outside healthy drift, so a light EWMA (0.5) held 3 rows is enough; heavier
    # smoothing only delayed detection (benchmarks/detection, tuning seeds) and bought no fewer false alarms.
    defaults = {"explode": 2.0, "collapse": 0.5, "drift": 0.3, "for": 3, "smooth": 0.5, "truncation": 0.2,
                "truncation_for": 3, "spread_collapse": 0.05, "baseline_rows": 10, **ROLLOUT_DEFAULTS["length"]}

    def setup(self) -> None:
        self.base = Baseline(self.p["baseline_rows"])
        self.spread_base = Baseline(self.p["baseline_rows"])
        self.ewma = Ewma(self.p["smooth"])

    def applies(self) -> bool:
        return self.family in ("grpo", "ppo", "online_dpo")

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        length_rules(self, row)
        v = row.values
        p = self.p
        d = self.derived
        L = v.get("completions/mean_length")
        if L is not None and finite(L) and L >= 0:
            d["mean_length"] = L
            e = self.ewma.push(L)
            self.base.push(L)
            term = v.get("completions/mean_terminated_length")
            if term is not None and finite(term):
                d["truncation_gap"] = L - term
            if self.base.ready and self.base.value > 0:
                ratio = e / self.base.value
                d["vs_baseline"] = ratio
                self.check("length-explosion", ratio > p["explode"], "warn", "completions/mean_length", L,
                           lambda: f"completions are {ratio:.1f}x their starting length ({self.base.value:.0f} -> "
                           f"{e:.0f} tokens): length bias. If reward rose with it, the policy is being paid for "
                           "verbosity; add a length penalty or check the reward.", for_=p["for"])
                self.check("length-collapse", ratio < p["collapse"], "warn", "completions/mean_length", L,
                           lambda: f"completions shrank to {ratio:.2f}x their starting length "
                           f"({self.base.value:.0f} -> {e:.0f} tokens): terse collapse, often a reward that "
                           "punishes length or rewards an empty answer.", for_=p["for"])
                self.check("length-drift", abs(ratio - 1) > p["drift"], "info", "completions/mean_length", L,
                           lambda: f"mean length moved {ratio - 1:+.0%} from its start.", for_=10, clear=10)
            mn, mx = v.get("completions/min_length"), v.get("completions/max_length")
            if mn is not None and mx is not None and finite(mn) and finite(mx) and L > 0:
                spread = (mx - mn) / L
                d["spread"] = spread
                self.spread_base.push(spread)
                sb = self.spread_base.value
                collapsed = sb == sb and sb > 4 * p["spread_collapse"] and spread < p["spread_collapse"]
                clipped_all = (v.get("completions/clipped_ratio") or 0.0) >= 0.95
                self.check("length-variance-collapse", collapsed and not clipped_all, "warn",
                           "completions/max_length", spread,
                           lambda: f"min and max completion length are within {spread:.0%} of the mean: every "
                           "answer has the same length, a sign of mode collapse onto a template.", for_=p["for"])
        c = v.get("completions/clipped_ratio")
        if c is not None and finite(c):
            d["clipped_ratio"] = c
            self.check("truncation", c > p["truncation"], "warn", "completions/clipped_ratio", c,
                       lambda: f"{c:.0%} of completions hit max_completion_length: rewards are computed on cut-off "
                       "answers. Raise max_completion_length, or penalise overlong answers (DAPO-style).",
                       for_=p["truncation_for"], clear=5)
        eos = v.get("val/num_eos_tokens")
        if eos is not None and finite(eos):
            d["num_eos_tokens"] = eos
            self.check("no-eos", eos <= 0, "warn", "val/num_eos_tokens", eos,
                       lambda: "no completion ends with an EOS token: every sample is truncated, so the reward "
                       "model scores unfinished text (check the stop token / generation config).", for_=10)


class EntropyGauge(Gauge):
    """Policy entropy: collapse (lost exploration) and spikes (forgetting)."""

    id = "entropy"
    title = "Policy entropy"
    inputs = ("entropy", "objective/entropy", "policy/entropy_avg")
    defaults = {"floor": 1.0, "floor_for": 2, "collapse_ratio": 0.5, "for": 5, "smooth": 0.2, "spike_z": 8.0,
                "baseline_rows": 10}

    def setup(self) -> None:
        self.base = Baseline(self.p["baseline_rows"])
        self.ewma = Ewma(self.p["smooth"])
        self.win = RollingWindow(30)

    def applies(self) -> bool:
        return self.family in ("grpo", "ppo", "online_dpo")

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        v = row.values
        key = next(k for k in self.inputs if k in v)
        h = v[key]
        if not finite(h):
            return
        p = self.p
        d = self.derived
        d["entropy"] = h
        e = self.ewma.push(h)
        d["entropy_ewma"] = e
        self.base.push(h)
        b = self.base.value
        if b == b and b > 0:
            rel = e / b
            d["vs_start"] = rel
            self.check("entropy-collapse", rel < p["collapse_ratio"], "warn", key, h,
                       lambda: f"entropy fell to {rel:.2f}x its start ({b:.3g} -> {e:.3g}): the policy is "
                       "collapsing onto few answers and has stopped exploring. Consider a higher temperature, "
                       "clip-higher (epsilon_high), an entropy bonus, or more diverse prompts.", for_=p["for"])
            # The blog's absolute floor only means something for per-token entropy that started above it.
            # A level crossing like KL > 0.5: raw values held for floor_for rows, no smoothing lag on top.
            if key == "entropy":
                self.check("entropy-low", b >= p["floor"] and h < p["floor"], "warn", key, h,
                           lambda: f"token entropy {h:.3g} fell below {p['floor']} (started at {b:.3g}): "
                           "exploration is drying up.", for_=p["floor_for"])
        if len(self.win) >= 10:
            z = robust_z(h, self.win, floor=1e-6)
            self.check("entropy-spike", z > p["spike_z"], "info", key, h,
                       lambda: f"entropy jumped ({z:.0f} robust sigmas): possible forgetting or a bad batch.",
                       clear=3)
        self.win.push(h)


class RewardSignalGauge(Gauge):
    """GRPO extras: is there still a learning signal inside the groups?

    With group-relative advantages a group whose rewards are all equal
    contributes nothing; ``frac_reward_zero_std`` is the robust measure (the
    meaning of ``reward_std`` changed across TRL versions, so it is used only
    when the fraction is not logged).
    """

    id = "reward_signal"
    title = "Reward signal (GRPO)"
    inputs = ("frac_reward_zero_std", "reward_std")
    defaults = {"zero_std_warn": 0.5, "zero_std_stop": 0.99, "for": 5, "stop_for": 10, "smooth": 0.3,
                "std_low": 0.05, "component_dead": 0.01, "component_for": 10, **ROLLOUT_DEFAULTS["reward_signal"]}

    def setup(self) -> None:
        self.zero = Ewma(self.p["smooth"])
        self.std_ewma = Ewma(self.p["smooth"])
        self.comp_fns: list[str] = []
        self.corr = RollingCorrelation(30)
        self._components: tuple[tuple[str, str, str], ...] = ()
        self._row_width = -1

    def applies(self) -> bool:
        return self.family in GROUP_FAMILIES

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        reward_signal_rules(self, row)
        v = row.values
        p = self.p
        d = self.derived
        f = v.get("frac_reward_zero_std")
        std = v.get("reward_std")
        if std is not None and finite(std):
            d["reward_std"] = std
        has_frac = f is not None and finite(f)
        if has_frac:
            ze = self.zero.push(f)
            d["frac_zero_std"] = f
            d["frac_zero_std_ewma"] = ze
            self.check("zero-std-dead", f >= p["zero_std_stop"], "stop", "frac_reward_zero_std", f,
                       lambda: f"every group has identical rewards for {p['stop_for']} logged steps: advantages "
                       "are all zero and the policy receives no gradient. The task is either solved or "
                       "impossible for this model: change the prompts or the reward.", for_=p["stop_for"])
            self.check("zero-std-high", ze > p["zero_std_warn"], "warn", "frac_reward_zero_std", f,
                       lambda: f"{ze:.0%} of groups have zero reward variance: the learning signal is vanishing "
                       "(prompts too easy or too hard). Filter prompts by difficulty or raise num_generations.",
                       for_=p["for"], clear=5)
        # One unambiguous row: no group had any reward spread and the optimizer got a zero gradient —
        # the step changed nothing (the seed's dead-run signal, made specific to group-relative training).
        g = v.get("grad_norm")
        no_spread = (has_frac and f >= p["zero_std_stop"]) or (not has_frac and std is not None and std == 0.0)
        self.check("no-update-step", no_spread and g is not None and g == 0.0, "warn", "grad_norm", g,
                   lambda: f"at step {self.step} every group scored its completions identically and grad_norm is 0: "
                   "this step changed nothing. If it repeats, the run is dead (prompts too easy/hard, reward "
                   "constant).")
        if not has_frac and std is not None and finite(std):  # older TRL: reward_std is all there is
            se = self.std_ewma.push(std)
            self.check("reward-std-low", se < p["std_low"], "warn", "reward_std", std,
                       lambda: f"reward_std has averaged {se:.3g} < {p['std_low']}: completions in a group score "
                       "alike, so there is little signal left to learn from.", for_=p["for"])
        # Partial rewards: a component whose std stays ~0 is dead weight.
        if len(v) != self._row_width:  # re-scan for reward components only when the row's shape changes
            self._row_width = len(v)
            self._components = tuple(
                (k, k[8:-4], f"rewards/{k[8:-4]}/mean") for k in v if k.startswith("rewards/") and k.endswith("/std")
            )
        dead = 0
        for k, fn, mean_key in self._components:
            val = v.get(k)
            if val is None or not finite(val):
                continue
            mean = v.get(mean_key)
            is_dead = val < p["component_dead"]
            dead += is_dead
            self.check(f"reward-component-dead:{fn}", is_dead, "warn", k, val,
                       lambda fn=fn, mean=mean: f"reward function '{fn}' has had std < {p['component_dead']} "
                       f"(mean {mean if mean is None else round(mean, 4)}) for {p['component_for']} logged steps: "
                       "it scores every completion alike and adds no signal.",
                       for_=p["component_for"], clear=10)
        d["dead_components"] = float(dead)
        r, L = v.get("reward"), v.get("completions/mean_length")
        if r is not None and L is not None and finite(r) and finite(L):
            self.corr.push(r, L)
            if self.corr.full:
                corr = self.corr.corr()
                d["length_reward_corr"] = corr
                self.check("length-reward-correlation", corr > 0.8, "info", "completions/mean_length", L,
                           lambda: f"reward and completion length move together (corr {corr:.2f}): check for "
                           "length hacking.", for_=5, clear=10)
