"""GRPO extras: is there still a learning signal inside the groups (reward spread, zero-std groups, components)?

With group-relative advantages a group whose rewards are all equal contributes nothing, so the share of such groups
and each reward function's spread are what keeps GRPO learning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .bounded import RewardLevel
from .gauge import Gauge, finite
from .keys import Row
from .reward_progress import RewardProgress
from .rollouts import REWARD_SIGNAL_ROLLOUT_RULES, ROLLOUT_DEFAULTS, ROLLOUT_OUTPUTS, reward_signal_rules
from .rule import INSTRUMENTS, Example, Rule
from .stats import Ewma, RollingCorrelation
from .streams import grpo, ramp, reward_components

GROUP_FAMILIES = frozenset({"grpo"})


class RewardSignalGauge(Gauge):
    """GRPO extras: is there still a learning signal inside the groups?

    With group-relative advantages a group whose rewards are all equal
    contributes nothing; ``frac_reward_zero_std`` is the robust measure (the
    meaning of ``reward_std`` changed across TRL versions, so it is used only
    when the fraction is not logged). Over half the groups without spread is a
    warning only when they are mostly failed prompts and the reward is not
    rising: with a fraction f uniform at success rate p, at least f - p of the
    groups failed every completion whatever the prompt mix, half the uniform
    ones once p <= f / 2. Above 1/2 (a group is all-correct with chance p^G and
    all-wrong with (1-p)^G, so the uniform ones are mostly solved, whatever G),
    or while the reward rises (the entropy gauge's test of progress), they are
    prompts being solved: ``info``. A signed reward has no level: the fixed line
    decides, as before.
    """

    id = "reward_signal"
    title = "Reward signal (GRPO)"
    inputs = ("frac_reward_zero_std", "reward_std")
    outputs = ("reward_std", "frac_zero_std", "frac_zero_std_ewma", "dead_components", "length_reward_corr",
               *ROLLOUT_OUTPUTS["reward_signal"])
    defaults = {"zero_std_warn": 0.5, "zero_std_stop": 0.99, "for": 5, "stop_for": 10, "smooth": 0.3,
                "no_update_for": 3, "std_low": 0.05, "std_low_alpha": 1e-4, "component_dead": 0.01, "component_for": 10,
                "gold": [],
                **ROLLOUT_DEFAULTS["reward_signal"]}

    def setup(self) -> None:
        self.progress = RewardProgress(self.p["gold"])
        self.level = RewardLevel(self.p["smooth"])
        self.zero = Ewma(self.p["smooth"])
        self.low_streak = 0  # reward_std rows under std_low in a row, now
        self.low_rows = 0  # ... and before this streak: rows under it, of std_rows read
        self.std_rows = 0
        self.comp_fns: list[str] = []
        self.corr = RollingCorrelation(30)
        self._components: tuple[tuple[str, str, str], ...] = ()
        self._row_width = -1
        # [lowest, highest, rows at the highest] per function: a list, as a checkpoint's JSON gives it back (a compiled
        # core checks a tuple's type on every read)
        self._comp_range: dict[str, list[float]] = {}

    def applies(self) -> bool:
        return self.family in GROUP_FAMILIES

    def plan_short(self) -> None:
        self.progress = RewardProgress.shortened(self)

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["_row_width"] = -1  # the component key cache is not saved: a resumed gauge must scan the next row
        return out

    def _std_low(self, std: float) -> None:
        """``reward-std-low`` as a runs test: a streak of k rows under the floor when this run's rows fall under
        it at rate q (counted before the streak, Laplace-smoothed) has chance q^k; it warns past the declared
        false-alarm rate ``std_low_alpha`` per row, while the reward is not rising. A small batch's reward_std is a
        mean of a few group stds that are 0 by chance (4 groups of 2 at p = 0.3: 15 % of rows all zero), so its
        own rate, not the fixed floor alone, says when a streak is news: 3 rows where batches never dip under it,
        14 where half the rows do."""
        p = self.p
        if std < p["std_low"]:
            self.low_streak += 1
        else:
            self.low_rows += self.low_streak
            self.std_rows += self.low_streak + 1
            self.low_streak = 0
        k = self.low_streak
        q = (self.low_rows + 1.0) / (self.std_rows + 2.0)
        news = k > 0 and k * math.log(1.0 / q) >= math.log(1.0 / p["std_low_alpha"])
        self.check("reward-std-low", news and not self.progress.improving(), "warn", "reward_std", std,
                   lambda: f"reward_std has stayed under {p['std_low']} for {k} logged steps in a row (this run's "
                   f"batches dip under it on {q:.0%} of steps: chance {q ** k:.1g}): completions in a group score "
                   "alike, so there is little signal left to learn from.", clear=p["for"])

    def _zero_std(self, f: float) -> None:
        """The share of groups whose completions all scored alike: dead (every group), high (mostly failing
        prompts), or solved (the reward on its success side or rising)."""
        p = self.p
        d = self.derived
        ze = self.zero.push(f)
        d["frac_zero_std"] = f
        d["frac_zero_std_ewma"] = ze
        # message closures only for a rule that holds this row (a quiet rule never reads one)
        dead_all = f >= p["zero_std_stop"]
        self.check("zero-std-dead", dead_all, "stop", "frac_reward_zero_std", f,
                   (lambda: f"every group has identical rewards for {p['stop_for']} logged steps: advantages "
                    "are all zero and the policy receives no gradient. The task is either solved or "
                    f"impossible for this model: {self.fix('zero-std-dead')}.") if dead_all else "",
                   for_=p["stop_for"])
        # groups losing their spread are mostly prompts being solved when the (smoothed) reward sits on the
        # success side of its range, or has been rising over the run (the entropy gauge's test of progress)
        high = ze > p["zero_std_warn"]  # only then do the two rules below read `solved`
        solved = high and (self.level.success_side(smoothed=True) or self.progress.improving())
        # ... and mostly failed prompts when the level leaves no other reading: a reward p >= the all-correct
        # share a (p = a + the mixed groups' mean x their share), so at least f - p of the groups failed every
        # completion, whatever the mix of prompt difficulties; p <= f / 2 makes those at least half the uniform
        # groups. Without a reward level the fixed line alone decides, as before.
        lv = self.level.smooth
        failing = lv != lv or lv <= ze / 2
        self.check("zero-std-high", high and failing and not solved, "warn",
                   "frac_reward_zero_std", f,
                   (lambda: f"{ze:.0%} of groups have zero reward variance"
                    + (f" at a success rate near {lv:.0%}: most of them fail every completion, so the learning "
                       "signal is vanishing (prompts too hard for the model)" if lv == lv else
                       ": the learning signal is vanishing (prompts too easy or too hard)")
                    + ". Filter prompts by difficulty or raise num_generations.") if high else "",
                   for_=p["for"], clear=5)
        self.check("zero-std-solved", solved, "info", "frac_reward_zero_std", f,
                   (lambda: f"{ze:.0%} of groups have zero reward variance while the reward "
                    + ("keeps climbing" if lv != lv or lv <= 0.5 else f"sits near {lv:.0%} of its range")
                    + ": prompts are being solved and stop teaching anything. "
                    + self.fix("zero-std-solved", sentence=True)) if solved else "",
                   for_=p["for"], clear=5)

    def _dead_components(self, v: Mapping[str, float]) -> None:
        """Partial rewards: a component whose std stays ~0 is dead weight."""
        p = self.p
        d = self.derived
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
            solved = self._at_ceiling(fn, mean)  # read on every row: the range is the function's whole run
            is_dead = val < p["component_dead"] and not solved
            dead += is_dead
            self.check(f"reward-component-dead:{fn}", is_dead, "warn", k, val,
                       (lambda fn=fn, mean=mean: f"reward function '{fn}' has had std < "
                        f"{p['component_dead']} (mean {mean if mean is None else round(mean, 4)}) for "
                        f"{self.held(f'reward-component-dead:{fn}')} logged steps: it scores every completion alike "
                        "and adds no signal.") if is_dead else "",
                       for_=p["component_for"], clear=10, long_hold=False)
        d["dead_components"] = float(dead)

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        reward_signal_rules(self, row)
        v = row.values
        p = self.p
        d = self.derived
        self.progress.push(v)
        self.level.push(v.get("reward"))
        f = v.get("frac_reward_zero_std")
        std = v.get("reward_std")
        if std is not None and finite(std):
            d["reward_std"] = std
        has_frac = f is not None and finite(f)
        if has_frac and f is not None:
            self._zero_std(f)
        # One unambiguous row: no group had any reward spread and the optimizer got a zero gradient —
        # the step changed nothing (the seed's dead-run signal, made specific to group-relative training).
        g = v.get("grad_norm")
        # A small batch scores every group alike by chance ((p^G + (1-p)^G)^groups: 6 % of rows at p = 1/2 with 4
        # groups of 2), so one such row is no evidence: three in a row are (chance 2e-4 per row there). On the
        # success side with the reward still moving they are solved batches (gradients/grad-zero-saturated says
        # so), not a stalled run.
        no_spread = (has_frac and f >= p["zero_std_stop"]) or (not has_frac and std is not None and std == 0.0)
        solved_batch = self.level.success_side() and not self.level.frozen
        stalled = no_spread and g is not None and g == 0.0 and not solved_batch
        self.check("no-update-step", stalled, "warn",
                   "grad_norm", g,
                   (lambda: f"at step {self.step} every group scored its completions identically and grad_norm is 0, "
                    f"for {self.held('no-update-step')} logged steps in a row: these steps changed nothing. If it "
                    "goes on, the run is dead (prompts too easy/hard, reward constant).") if stalled else "",
                   for_=p["no_update_for"])
        if not has_frac and std is not None and finite(std):  # older TRL: reward_std is all there is
            self._std_low(std)
        self._dead_components(v)
        r, L = v.get("reward"), v.get("completions/mean_length")
        if r is not None and L is not None and finite(r) and finite(L):
            self.corr.push(r, L)
            if self.corr.full:
                corr = self.corr.corr()
                d["length_reward_corr"] = corr
                together = corr > 0.8
                self.check("length-reward-correlation", together, "info", "completions/mean_length", L,
                           (lambda: f"reward and completion length move together (corr {corr:.2f}): check for "
                            "length hacking.") if together else "", for_=5, clear=10)

    def _at_ceiling(self, fn: str, mean: float | None) -> bool:
        """The function's batch mean sits exactly at the highest it has reached, for the second row or more, having
        been lower: every completion passes a check the policy learned (a format reward at 1.0 on a small batch).
        Solved, not dead: a function that scores everything alike because it is broken never climbed to where it
        sits."""
        if mean is None or not finite(mean):
            return False
        lo, hi, at_hi = self._comp_range.get(fn, [mean, mean, 0.0])
        if mean > hi:
            hi, at_hi = mean, 0.0
        at_hi += mean == hi
        lo = min(lo, mean)
        self._comp_range[fn] = [lo, hi, at_hi]
        # the very same top value again: the score every completion gets (a noisy mean never repeats its maximum)
        return hi > lo and mean == hi and at_hi >= 2


_ALL_FAILED = {"reward": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0}

#: The reward-signal gauge's rules (``core/catalog.py`` collects every module's).
RULES: tuple[Rule, ...] = (
    Rule(
        "reward_signal", "zero-std-dead", severities=("stop",),
        reads="frac_reward_zero_std",
        test="at least `zero_std_stop`, held `stop_for` (stop)",
        params=("zero_std_stop", "stop_for"),
        means="every group scores alike: no gradient",
        fix="change the prompts or the reward",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, zero_std=1.5 if i >= 60 else 0.1), grpo, 100, 60, 69,
            "frac_reward_zero_std"),
    ),
    Rule(
        "reward_signal", "zero-std-high", severities=("warn",),
        reads="EWMA of frac_reward_zero_std, the reward's smoothed level as a success rate (core/bounded.py), its "
              "progress",
        test="above `zero_std_warn` with the level at most half of it (the uniform groups mostly failures; a signed "
             "reward: the line alone) and the reward not rising, held `for`",
        params=("zero_std_warn", "for", "smooth"),
        means="the learning signal is vanishing: most uniform groups fail every completion (prompts too hard)",
        fix="filter prompts by difficulty (drop the ones it always fails) or raise num_generations",
        seed="`frac_reward_zero_std` (share of groups whose rewards are all equal) is the robust form of the same "
             "signal.",
        seed_source=INSTRUMENTS,
        # a run failing its prompts (success rate 0.2, flat): the uniform groups are failures, and they spread
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.2, zero_std=0.2 + 0.6 * ramp(i, 100, 60)),
            lambda i, g: grpo(i, g, reward=0.2, zero_std=0.2), 200, 100, 160, "frac_reward_zero_std"),
    ),
    Rule(
        "reward_signal", "zero-std-solved", severities=("info",),
        reads="as zero-std-high",
        test="above `zero_std_warn` with the smoothed level above 1/2 or the reward rising (info)",
        params=("zero_std_warn", "for", "smooth"),
        means="prompts are being solved",
        fix="add harder prompts when it nears 100 %",
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.03 * i / 200, zero_std=0.2 + 0.4 * ramp(i, 100, 100)),
            lambda i, g: grpo(i, g, reward=0.3 + 0.03 * i / 200), 200, 100, 190, "frac_reward_zero_std"),
    ),
    Rule(
        "reward_signal", "no-update-step", severities=("warn",),
        reads="frac_reward_zero_std (or reward_std = 0 where it is not logged), grad_norm and the reward's level",
        test="every group uniform (at least `zero_std_stop`) and grad_norm 0, `no_update_for` rows in a row, unless "
             "the reward sits on the success side and still moves (solved batches)",
        params=("zero_std_stop", "no_update_for"),
        means="these steps changed nothing: the groups fail alike and the optimizer gets no gradient",
        fix="if it goes on the run is dead: change the prompts or the reward",
        origin="one such row is chance on a small batch (4 groups of 2 at p = 1/2: 6 % of rows)",
        # every group fails every completion (reward 0) with a zero gradient for 5 rows; the healthy run has one such
        # row, which a small batch gives by chance
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), **(_ALL_FAILED if 60 <= i < 65 else {})},
            lambda i, g: {**grpo(i, g), **(_ALL_FAILED if i == 60 else {})}, 100, 60, 62, "grad_norm"),
    ),
    Rule(
        "reward_signal", "reward-std-low", severities=("warn",),
        reads="reward_std where frac_reward_zero_std is not logged (older TRL)",
        test="a runs test: k rows in a row under `std_low` whose chance q^k (q: this run's own rate of such rows "
             "before the streak) is under `std_low_alpha`, while the reward is not rising",
        params=("std_low", "std_low_alpha"),
        means="little signal left to learn from",
        fix="filter prompts by difficulty",
        seed="Reward std is the primary GRPO gauge: warn when it falls below 0.05 (no signal left to learn from).",
        seed_source=INSTRUMENTS,
        # older TRL (no frac_reward_zero_std): reward_std sinks to 0.02 and stays there while the reward is flat
        example=Example(
            "grpo", lambda i, g: {k: v for k, v in grpo(i, g, reward=0.4).items() if k != "frac_reward_zero_std"}
            | {"reward_std": 0.3 - 0.28 * ramp(i, 60, 10)},
            lambda i, g: {k: v for k, v in grpo(i, g, reward=0.4).items() if k != "frac_reward_zero_std"}, 100, 60, 80,
            "reward_std"),
    ),
    Rule(
        "reward_signal", "reward-component-dead", severities=("warn",),
        reads="rewards/<fn>/std per reward function",
        test="below `component_dead`, held `component_for`, except on rows where its mean sits exactly at the highest "
             "it has reached (again) after being lower (a learned check every completion passes: solved, not dead)",
        params=("component_dead", "component_for"),
        means="the function scores every completion alike",
        fix="fix or drop the function",
        seed="a component whose std stays below 0.01 is dead.", seed_source=INSTRUMENTS,
        per_function=True,
        example=Example(
            "grpo",
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=0.5, acc=0.3, fmt_std=0.002 if i >= 60 else 0.3)},
            lambda i, g: {**grpo(i, g), **reward_components(i, g, fmt=0.5, acc=0.3)}, 100, 60, 69, "rewards/fmt/std"),
    ),
    Rule(
        "reward_signal", "length-reward-correlation", severities=("info",),
        reads="correlation of reward and mean length over 30 rows",
        test="above 0.8, held 5 (info)",
        means="length may be what is paid",
        fix="read samples; see length-paid",
        seed="Length–reward correlation: length hacking.", seed_source=INSTRUMENTS,
        example=Example(
            "grpo",
            lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 60, 40), length=200 * (1 + 0.5 * ramp(i, 60, 40))),
            grpo, 150, 60, 100, "completions/mean_length"),
    ),
    *REWARD_SIGNAL_ROLLOUT_RULES,
)
