"""The entropy gauge: sharpening or mode collapse, told apart by the run around it, and spikes (forgetting).

Entropy falls in every policy that learns; falling while the reward still rises is sharpening (``info``), falling
while it is flat is collapse.
"""

from __future__ import annotations

from collections.abc import Mapping

from .bounded import RewardLevel
from .gauge import Gauge, finite
from .keys import Row
from .reward_progress import RewardProgress
from .rule import INSTRUMENTS, Example, Rule
from .stats import Baseline, DiffNoise, Ewma, RollingWindow, StepGaps, robust_z
from .streams import grpo, ramp


class EntropyGauge(Gauge):
    """Policy entropy: sharpening or collapse (by context), and spikes (forgetting).

    Entropy falls in every policy that learns; what it means depends on the run around it. Falling
    while the reward (and the gold reward, when logged) keeps rising is sharpening: ``info``.
    Falling while the reward is flat, or while nearly every group has lost its reward spread (zero-std
    groups also pile up when prompts get solved, so below 90 % they count only with a flat reward), is
    mode collapse: ``warn``, then ``stop`` if it goes on; a collapsing length spread is reported with it.
    Below ``deep_ratio`` (0.2x) of its start it warns while most completions still fail (the task score's level
    under ``failing_level``: the policy settled on a template that does not work, however the reward creeps), or
    while it is still falling and the reward has stopped rising now; a fall that went with a climb past half the
    task stays sharpening once both level off. The start is the first ``baseline_rows`` rows before any gap in the
    log (``StepGaps``: a trimmed or resumed log's late rows are not its start). There is deliberately no absolute
    floor (Part III's "below 1.0"): where entropy starts is a property
    of the model family (a base model near 1.5, an instruct model near 0.3), not of the run's health —
    on real healthy GRPO runs that floor was most of the false alarms. The warning holds ``for`` (8) rows:
    a noisy reward's trend dips under the line for a few rows now and then while a policy sharpens.
    A reward that has stopped rising because it sits near its ceiling (a [0, 1] success rate smoothed at or above
    ``saturated_level``) is not "not improving": a solved task leaves little to explore, and real healthy GRPO runs
    at 0.85-0.93 sharpen exactly so.
    """

    id = "entropy"
    title = "Policy entropy"
    inputs = ("entropy", "objective/entropy", "policy/entropy_avg")
    outputs = ("entropy", "entropy_ewma", "vs_start")
    defaults = {"collapse_ratio": 0.7, "sharpening_ratio": 0.5, "deep_ratio": 0.2, "stop_ratio": 0.2, "stop_for": 20,
                "for": 8,
                "smooth": 0.2, "spike_z": 8.0, "baseline_rows": 10, "zero_std_rise": 0.3, "zero_std_alone": 0.9,
                "saturated_level": 0.8, "collapse_se": 3.0, "failing_level": 0.5, "deep_for": 1, "fall_now": 0.2,
                "fast_share": 0.33, "fast_climb": 0.2,
                "gold": []}

    def setup(self) -> None:
        self.level = RewardLevel()
        self.base = Baseline(self.p["baseline_rows"])
        self.ewma = Ewma(self.p["smooth"])
        self.win = RollingWindow(30)
        self.noise = DiffNoise(20)  # the entropy's row noise and its AR(1): how far a smoothed fall can wander
        self.progress = RewardProgress(self.p["gold"])
        self.zero = Ewma(0.3)
        self.zero_base = Baseline(self.p["baseline_rows"])
        self.spread = Ewma(0.2)
        self.spread_base = Baseline(self.p["baseline_rows"])
        self.recent = RollingWindow(30)  # the smoothed level over the last 30 rows: is it falling now?
        self.gaps = StepGaps()  # the start is the run's first steps: a gap in the log closes it
        self.fall_row = -1  # the row the smoothed entropy went under collapse_ratio x its start (-1: it is above)
        self.fall_level = float("nan")  # the task score's smoothed level on that row
        self.fall_verdict: str | None = None  # the fall's reading once it went under deep_ratio ("": not too fast)

    def applies(self) -> bool:
        return self.family in ("grpo", "ppo", "online_dpo")

    def plan_short(self) -> None:
        self.progress = RewardProgress.shortened(self)

    def _context(self, v: Mapping[str, float]) -> None:
        """The signals that say whether a falling entropy is sharpening or collapse."""
        self.progress.push(v)
        # the level of the task score where one is logged beside a shaped reward (verl's critic/score): a shaped
        # reward carries a KL penalty, which a success rate does not
        gold = next((v[k] for k in self.progress.gold_keys if k in v), None)
        self.level.push(gold if gold is not None else v.get("reward", v.get("objective/scores")))
        f = v.get("frac_reward_zero_std")
        if f is not None and finite(f):
            self.zero.push(f)
            self.zero_base.push(f)
        L, mn, mx = v.get("completions/mean_length"), v.get("completions/min_length"), v.get("completions/max_length")
        if L and mn is not None and mx is not None and finite(L) and finite(mn) and finite(mx) and L > 0:
            c = v.get("completions/clipped_ratio")
            if c is None or not finite(c) or c < 0.95:
                s = (mx - mn) / L
                self.spread.push(s)
                self.spread_base.push(s)

    def _why_collapse(self) -> list[str]:
        """The collapse signs present now (empty: the context says sharpening)."""
        reasons = []
        prog = self.progress
        sat = self.level.smooth
        saturated = sat == sat and sat >= self.p["saturated_level"]  # near the ceiling: nothing left to climb
        flat = prog.known() and not prog.improving() and not saturated
        if flat:
            reasons.append("the reward is not improving" + (" (or the gold reward is not)" if prog.gold_keys else ""))
        zb, ze = self.zero_base.value, self.zero.mean
        # zero-std groups piling up while the reward still rises are mostly solved prompts: they count on their
        # own only once nearly every group has lost its signal
        if zb == zb and ze >= max(0.5, zb + self.p["zero_std_rise"]) and (flat or ze >= self.p["zero_std_alone"]):
            reasons.append(f"zero-std groups rose to {ze:.0%} (from {zb:.0%})")
        if reasons:
            sb = self.spread_base.value
            if sb == sb and sb > 1e-3 and self.spread.mean < 0.5 * sb:
                reasons.append(f"the length spread fell to {self.spread.mean / sb:.2f}x its start")
        return reasons

    def _track_fall(self, rel: float) -> None:
        """Where the current fall began: the row the smoothed entropy went under ``collapse_ratio`` x its start."""
        if rel >= self.p["collapse_ratio"]:
            self.fall_row = -1
            self.fall_verdict = None
        elif self.fall_row < 0:
            self.fall_row = self.rows_seen
            self.fall_level = self.level.smooth

    def _fast_fall(self, rel: float) -> str:
        """Too far, too fast for sharpening: from ``collapse_ratio`` to under ``deep_ratio`` x its start within
        ``fast_share`` of the run left when the fall began (of the rows before it, where the run's length is not
        known), while the task score climbed less than ``fast_climb`` of its range. Sharpening goes with learning
        and takes the run to do it; a policy that drops most of its entropy in a few dozen rows while the reward
        only creeps has settled on one answer. Empty: not such a fall."""
        p = self.p
        start = self.fall_row
        if start < 0:
            return ""
        if self.fall_verdict is not None:  # judged on the fall's first row under deep_ratio: it stays so
            return self.fall_verdict
        span = self.rows_seen - start
        left = self.planned_rows - start if self.planned_rows > self.rows_seen else float(start)
        climb = self.level.smooth - self.fall_level
        # near its ceiling a task is solved: a policy sharpens on the answers it has, however fast (as for a flat
        # reward above `saturated_level`)
        solved = self.level.smooth >= p["saturated_level"]
        if not (span <= p["fast_share"] * max(left, 1.0) and climb < p["fast_climb"]) or solved:
            self.fall_verdict = ""  # a nan climb (no task score to read) is not a reason
            return ""
        self.fall_verdict = (f"it fell from {p['collapse_ratio']}x to {rel:.2f}x its start within {span} logged rows "
                f"({span / max(left, 1.0):.0%} of the run left when the fall began) while the task score rose only "
                f"{climb:+.2f}: too far and too fast for sharpening, which goes with learning")
        return self.fall_verdict

    def observe(self, row: Row) -> None:
        if row.kind != "train" or not self.applies():
            return
        v = row.values
        if self.gaps.push(row.step):
            for base in (self.base, self.zero_base, self.spread_base):
                base.close()
            for s in (self.ewma, self.zero, self.spread):
                s.restart()
            self.recent = RollingWindow(30)
            self.fall_row = -1  # a fall across a gap in the log is not timed
            self.fall_verdict = None
        self._context(v)
        key = next((k for k in self.inputs if k in v), None)
        if key is None:
            return
        h = v[key]
        if not finite(h):
            return
        p = self.p
        d = self.derived
        d["entropy"] = h
        e = self.ewma.push(h)
        d["entropy_ewma"] = e
        self.recent.push(e)
        self.base.push(h)
        self.noise.push(h)
        b = self.base.value
        if b == b and b > 0:
            self._vs_start(key, h, e, b)
        if len(self.win) >= 10:
            z = robust_z(h, self.win, floor=1e-6)
            self.check("entropy-spike", z > p["spike_z"], "info", key, h,
                       lambda: f"entropy jumped ({z:.0f} robust sigmas): possible forgetting or a bad batch.",
                       clear=3)
        self.win.push(h)


    def _vs_start(self, key: str, h: float, e: float, b: float) -> None:
        """The smoothed entropy against its start: a collapse (with what it goes with), or sharpening."""
        p = self.p
        d = self.derived
        rel = e / b
        d["vs_start"] = rel
        falling = rel < p["collapse_ratio"]
        if falling and p["collapse_se"] > 0 and len(self.noise) >= 10:
            # a fall the smoothed level's own noise could make is not one yet: a per-step entropy of 0.04 over
            # a small batch swings 0.55-0.75x its start from row to row (issue #28: a real healthy run warned)
            falling = b - e >= p["collapse_se"] * self.noise.level_se(p["smooth"], p["baseline_rows"])
        context = self._why_collapse() if falling else []
        if not self.level.n:  # no reward logged at all: no context, only a halving counts
            halved = rel < p["sharpening_ratio"]
            context = ["no reward is logged to tell sharpening from collapse"] if halved else []
        reasons = list(context)
        # Deep below its start while most completions still fail: the policy has settled on answers that do
        # not work (a template), not sharpened on ones that do -- a reward that crept up from 0.02 to 0.2 is
        # still "rising". Read from the level alone, so it holds on the first row after a gap in the log.
        fail = self.level.smooth
        self._track_fall(rel)
        deep = rel < p["deep_ratio"] and not reasons
        deep_failing = deep and fail == fail and fail < p["failing_level"]
        fast = self._fast_fall(rel) if deep and not deep_failing else ""
        if deep_failing:
            reasons.append(f"it is below {p['deep_ratio']}x its start while most completions still fail (the "
                           f"score's level {fail:.0%}): the policy hardly samples alternatives any more, so it "
                           "cannot find the answers it is missing")
        elif deep and fast:
            reasons.append(fast)
        elif deep and self.recent.max() - e >= p["fall_now"] * b and not self.progress.improving(now=True):
            # falling now, deep, while the reward does not rise now: what the fall goes with is what it means (a
            # fall that went with a climb stays sharpening once both have levelled off)
            reasons.append(f"it is below {p['deep_ratio']}x its start and still falling while the reward has "
                           "stopped rising")
        why = "; ".join(reasons)
        self.check("entropy-collapse", bool(reasons), "warn", key, h,
                   lambda: f"entropy fell to {rel:.2g}x its start ({b:.3g} -> {e:.3g}) and {why}: mode collapse, "
                   "the policy has stopped exploring. Raise the temperature, use clip-higher (epsilon_high), "
                   "add an entropy bonus, or filter prompts by difficulty.",
                   for_=p["deep_for"] if deep_failing else p["for"])
        self.check("entropy-collapse-persistent", bool(context) and rel < p["stop_ratio"], "stop", key, h,
                   lambda: f"entropy has stayed below {p['stop_ratio']}x its start ({e:.3g}) for {p['stop_for']} "
                   f"logged steps and {why}: the policy has collapsed and further steps learn nothing. Stop and "
                   "resume from an earlier checkpoint with more exploration.", for_=p["stop_for"])
        self.check("entropy-sharpening", rel < p["sharpening_ratio"] and not reasons, "info", key, h,
                   lambda: f"entropy fell to {rel:.2f}x its start ({b:.3g} -> {e:.3g}) while the reward keeps "
                   "improving: the policy is sharpening on what it learned. Normal; watch for the reward "
                   "stalling.", for_=p["for"], clear=10)


#: The entropy gauge's rules (``core/catalog.py`` collects every module's).
RULES: tuple[Rule, ...] = (
    Rule(
        "entropy", "entropy-collapse", severities=("warn",),
        reads="EWMA of entropy / its first `baseline_rows`, with the reward's progress",
        test="below `collapse_ratio`, the fall `collapse_se` standard errors of the smoothed level (AR(1)-aware) out "
             "of the row noise, with a collapse sign (reward flat and not near its ceiling: smoothed level under "
             "`saturated_level`; zero-std up), held `for`; or below `deep_ratio` while the task score's level is "
             "under `failing_level` (most completions still fail: a template, not sharpening), held `deep_for`; or a "
             "fall from `collapse_ratio` to under `deep_ratio` within `fast_share` of the run left when it began "
             "while the task score climbed under `fast_climb` and sits under `saturated_level` (too far, too fast for "
             "sharpening), held `for`. The "
             "start is the first `baseline_rows` rows before any gap in the log (a row more than 4 logging intervals "
             "after the last: a trimmed or resumed log), and the smoothed level starts over after such a gap",
        params=("collapse_ratio", "collapse_se", "deep_ratio", "failing_level", "deep_for", "fast_share",
                "fast_climb", "zero_std_rise", "saturated_level", "for", "baseline_rows"),
        means="mode collapse: the policy stopped exploring",
        fix="raise the temperature, clip-higher, an entropy bonus, or filter prompts",
        seed="Collapse is entropy falling *with* the reward signal drying up", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.5 * ramp(i, 100, 100))),
            lambda i, g: grpo(i, g, reward=0.4), 200, 100, 180, "entropy"),
    ),
    Rule(
        "entropy", "entropy-collapse-persistent", severities=("stop",),
        reads="as entropy-collapse",
        test="below `stop_ratio` with collapse signs, held `stop_for` (stop)",
        params=("stop_ratio", "stop_for"),
        means="the policy has collapsed",
        fix="stop; resume earlier with more exploration",
        seed="Collapse is entropy falling *with* the reward signal drying up", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.92 * ramp(i, 100, 40)),
                                      zero_std=0.1 + 0.85 * ramp(i, 100, 100)),
            lambda i, g: grpo(i, g, reward=0.4), 200, 100, 180, "entropy"),
    ),
    Rule(
        "entropy", "entropy-sharpening", severities=("info",),
        reads="as entropy-collapse",
        test="below `sharpening_ratio` with no collapse sign (info)",
        params=("sharpening_ratio", "for"),
        means="the policy sharpens on what it learned",
        fix="nothing; watch the reward",
        seed="a learning GRPO run sharpens", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.3 + 0.5 * i / 200, entropy=1.2 * (1 - 0.6 * ramp(i, 60, 80))),
            lambda i, g: grpo(i, g, reward=0.3 + 0.5 * i / 200), 200, 60, 150, "entropy"),
    ),
    Rule(
        "entropy", "entropy-spike", severities=("info",),
        reads="entropy",
        test="robust z above `spike_z` vs the last 30 rows (info)",
        params=("spike_z",),
        means="possible forgetting or a bad batch",
        fix="read samples at that step",
        seed="a spike can mean forgetting", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: grpo(i, g, entropy=1.0 + (1.0 if i == 60 else 0.0)),
            lambda i, g: grpo(i, g, entropy=1.0),
            100, 60, 60, "entropy"),
    ),
)
