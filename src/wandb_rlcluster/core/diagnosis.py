"""Diagnoses across gauges: the seed post's "failure pattern gallery" as named findings.

"It's rare for one thing to go wrong in neat isolation": a reward that jumps while length and KL
climb is reward hacking, not three separate oddities; entropy falling while zero-std groups pile up
and the length spread narrows is mode collapse. The :class:`Diagnoser` watches which rules of the
other gauges are firing and names the pattern, with what to do about it. Its findings are plain
findings with ``gauge: "diagnosis"``, so every consumer of the JSON contract keeps working.

It reads the other gauges only through the transitions they publish (a rule starting to fire or
resolving, with the logged row it happened on), never their live state: the batch path, which runs
one gauge over all rows before the next, then gives exactly the diagnoses the row-by-row path gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .findings import Finding
from .gauge import Gauge
from .keys import Row
from .rule import POST, Example, Rule
from .streams import GOLD, grpo, ppo, ramp, with_gold

DIAGNOSIS_ID = "diagnosis"

# One published transition: (row index, gauge position, gauge id, rule, finding when it starts firing / None).
Transition = tuple[int, int, str, str, "Finding | None"]


@dataclass(frozen=True)
class Pattern:
    """A named failure pattern: which findings make it up, and what to do."""

    name: str
    title: str
    #: Alternatives; each is (groups, at_least): the pattern holds when at least ``at_least`` groups
    #: have a firing rule. A group lists ``gauge/rule`` names; a trailing ``*`` matches a prefix.
    when: tuple[tuple[tuple[tuple[str, ...], ...], int], ...]
    todo: str
    #: Firing rules that explain the evidence away (e.g. KL high from the first step is a reference mismatch).
    unless: tuple[str, ...] = ()
    #: A stream the pattern must be named on, by a given row, and a healthy one it must stay quiet on.
    example: Example = field(kw_only=True, compare=False)


_RISING = ("reward/reward-shift-up", "reward/reward-hacking", "reward/reward-component-dominant:*",
           "reward/chosen-reward-runaway", "reward/reward-outliers")
# length-paid: longer completions win inside their groups (rollouts, RLClusterCallback.attach), before the mean moves
_DRIFT = ("length/length-trend-up", "length/length-grew", "length/length-explosion", "kl/kl-growing", "kl/kl-warn",
          "kl/kl-stop", "reward_signal/length-reward-correlation", "length/length-paid")
_KL_UP = ("kl/kl-growing", "kl/kl-warn", "kl/kl-stop")
# the gold's gain a small fraction of the proxy's, each in shares of its headroom: hacking the gold itself names
_OUTPACED = "reward/proxy-outpaces-gold"
# what a gold reward says against the proxy: either confirms the hacking whatever else fires
_GOLD_DISAGREES = ("reward/proxy-gold-divergence", _OUTPACED)

PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        "dead-run", "Dead run",
        (((("gradients/grad-zero", "reward_signal/zero-std-dead", "reward/reward-flatline-persistent",
             "learning_rate/lr-zero-early", "gradients/grad-nonfinite-persistent",
             "loss/loss-nonfinite-persistent"),), 1),),
        "the run is burning compute without learning: fix the cause (frozen or NaN weights, a constant reward, "
        "prompts every group solves or fails alike, a schedule at zero) before resuming from the last good "
        "checkpoint.",
        example=Example(
            "grpo",
            lambda i, g: {**grpo(i, g), **({"frac_reward_zero_std": 1.0, "grad_norm": 0.0} if i >= 100 else {})},
            grpo, 200, 100, 115, "frac_reward_zero_std"),
    ),
    Pattern(
        "over-optimisation", "Over-optimisation",
        (((("reward/proxy-gold-divergence",),), 1),
         ((_KL_UP, ("reward/reward-plateau",)), 2)),
        "the policy keeps moving while the reward that matters does not improve: keep the checkpoint from before "
        "the divergence, raise beta (the KL penalty) or lower the learning rate, and fix the proxy's loophole.",
        unless=("kl/kl-high-at-start",),
        example=Example(
            "grpo", with_gold(True), with_gold(False),
            200, 100, 160, "rewards/gold/mean", GOLD),
    ),
    Pattern(
        "reward-hacking", "Reward hacking",
        (((_RISING, _DRIFT), 2), (((_OUTPACED,),), 1)),
        "the reward rose the way a loophole pays, with length or KL moving with it: read samples from the first "
        "step named here, add a length penalty or cap, raise beta; log a held-out gold reward (weight 0 in "
        "reward_weights) so the next run can tell hacking from learning.",
        example=Example(
            "grpo",
            lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 100, 10), length=200 * (1 + 1.5 * ramp(i, 100, 40))),
            lambda i, g: grpo(i, g, reward=0.3 + 0.4 * ramp(i, 100, 10)), 200, 100, 150, "completions/mean_length"),
    ),
    Pattern(
        "mode-collapse", "Mode collapse",
        (((("entropy/entropy-collapse", "entropy/entropy-collapse-persistent"),
           ("length/length-variance-collapse",), ("reward_signal/zero-std-high", "reward_signal/zero-std-dead"),
           ("samples/identical-groups", "samples/rollout-repetition")), 2),),
        "the policy converges on a few answers and the group signal dries up: raise the sampling temperature, "
        "use clip-higher (epsilon_high) or an entropy bonus, and filter prompts the model always gets right or "
        "always gets wrong.",
        # entropy and the within-batch length spread collapse together while the reward is flat
        example=Example(
            "grpo", lambda i, g: grpo(i, g, reward=0.4, entropy=1.2 * (1 - 0.5 * ramp(i, 100, 100)),
                                      spread=1.2 - 1.0 * ramp(i, 100, 40)),
            lambda i, g: grpo(i, g, reward=0.4), 200, 100, 190, "entropy"),
    ),
    Pattern(
        "unstable-updates", "Unstable updates",
        (((("policy_ratio/clip-growing", "policy_ratio/clip-high", "policy_ratio/clip-stop"),
           ("policy_ratio/ratio-variance", "policy_ratio/ratio-warn", "policy_ratio/ratio-stop"),
           ("kl/kl-noisy", "kl/kl-spike-repeated"), ("reward/reward-volatile",),
           ("gradients/grad-explosion",), ("loss/loss-spike", "loss/loss-spike-repeated"),
           ("policy_ratio/value-loss-growing", "policy_ratio/value-clip-high")), 2),),
        "each update moves the policy too far: lower the learning rate (or PPO epochs / num_iterations), tighten "
        "max_grad_norm, raise beta; a KL explosion usually follows if nothing changes.",
        example=Example(
            "ppo",
            lambda i, g: ppo(i, g, clip=0.06 + 0.2 * ramp(i, 100, 100), ratio_var=0.001 + 0.02 * ramp(i, 100, 60)),
            ppo, 200, 100, 180, "policy/clipfrac_avg"),
    ),
)

_GALLERY = "what you get is a picture of multiple interacting failures that create a tableau of pathology."


def _alternative_text(groups: tuple[tuple[str, ...], ...], at_least: int) -> str:
    """One way a pattern holds, in words: "a rule of each of these 2 groups fires at once: (a | b); (c | d)"."""
    listed = "; ".join("(" + " | ".join(grp) + ")" for grp in groups)
    if len(groups) == 1:
        return f"{groups[0][0]} fires" if len(groups[0]) == 1 else f"any of these rules fires: {listed}"
    if at_least == len(groups):
        return f"a rule of each of these {len(groups)} groups fires at once: {listed}"
    return f"rules of at least {at_least} of these {len(groups)} groups fire at once: {listed}"


def _pattern_rule(p: Pattern) -> Rule:
    """A pattern as the catalog lists it: it reads the rules its groups name, and its fix is its ``todo``."""
    return Rule(
        DIAGNOSIS_ID, p.name, severities=("warn",),
        reads="which rules of the other gauges are firing",
        test=". Or: ".join(_alternative_text(groups, n) for groups, n in p.when)
        + (f". Not while {', '.join(p.unless)} fires" if p.unless else ""),
        means=f"the failure pattern '{p.title}' across gauges",
        fix=p.todo, seed=_GALLERY, seed_source=POST, example=p.example,
    )


#: The diagnoses as rules (``core/catalog.py`` collects them after every gauge's).
RULES: tuple[Rule, ...] = tuple(_pattern_rule(p) for p in PATTERNS)


def _matches(pattern: str, key: str) -> bool:
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern


class Diagnoser(Gauge):
    """Names cross-gauge failure patterns from the rules that are firing together.

    Not one of the fourteen gauges (it reads no metric); the cluster runs it after them on every
    row. A diagnosis fires once when its pattern holds and resolves after it has not held for a
    few rows, like any rule. With gold rewards configured, a rise the gold reward confirms is
    learning, not hacking: ``reward-hacking`` stands down while the gold rises with the proxy
    (``reward/gold-rising``); a gold that is merely logged and flat confirms nothing, and a proxy far outpacing
    its gold (``reward/proxy-outpaces-gold``) is reward hacking by itself.
    """

    id = DIAGNOSIS_ID
    title = "Diagnoses"
    inputs = ()
    outputs = ("active_findings", "diagnoses")
    defaults = {"clear": 5, "gold": []}

    def setup(self) -> None:
        self.inbox: list[Transition] = []
        self.active: dict[str, list[Any]] = {}  # "gauge/rule" -> [step, severity, message]
        self._sorted = 0
        self._dirty = False  # the firing set changed since the last evaluation
        self._settling = False  # a diagnosis is firing while its pattern no longer holds (counting to resolve)

    def observe(self, row: Row) -> None:
        self._consume(row.index)
        if self._dirty or self._settling:  # otherwise nothing any pattern reads has changed
            self._evaluate()

    def finish(self) -> None:
        self._consume(None)
        if self._dirty or self._settling:
            self._evaluate()

    def _consume(self, upto: int | None) -> None:
        bus = self.inbox
        if not bus:
            return
        if self._sorted != len(bus):  # the batch path appends gauge by gauge: put them in row order once
            bus.sort(key=lambda t: (t[0], t[1]))
            self._sorted = len(bus)
        used = 0
        for idx, _pos, gid, rule, finding in bus:
            if upto is not None and idx > upto:
                break
            used += 1
            key = f"{gid}/{rule}"
            if finding is None:
                self.active.pop(key, None)
            else:
                self.active[key] = [finding.step, finding.severity, finding.message]
        if used:
            del bus[:used]
            self._sorted = len(bus)
            self._dirty = True

    def _holding(self, pattern: Pattern) -> list[str] | None:
        """The firing rules that make ``pattern`` hold now, or None."""
        if any(k in self.active for k in pattern.unless):
            return None
        for groups, at_least in pattern.when:
            hits: list[str] = []
            satisfied = 0
            for group in groups:
                found = [k for k in self.active if any(_matches(g, k) for g in group)]
                if found:
                    hits.extend(found)
                    satisfied += 1
            if satisfied >= at_least:
                return hits
        return None

    def _evaluate(self) -> None:
        gold = bool(self.p["gold"])
        self._dirty = False
        settling = False
        for pat in PATTERNS:
            hits = self._holding(pat)
            if (hits and pat.name == "reward-hacking" and gold and not self._gold_disagrees()
                    and "reward/gold-rising" in self.active):
                hits = None  # the gold reward rises with the proxy: the gains are real (a flat gold says nothing)
            first = min((self.active[k][0] for k in hits), default=self.step) if hits else self.step
            lead = min(hits, key=lambda k: self.active[k][0]) if hits else ""
            firing = self.check(pat.name, hits is not None, "warn", lead, None,
                                lambda pat=pat, hits=hits, first=first: self._message(pat, hits or [], first),
                                clear=self.p["clear"])
            settling = settling or (firing and hits is None)
        self._settling = settling
        self.derived["active_findings"] = float(len(self.active))
        self.derived["diagnoses"] = float(len(self.firing()))

    def _gold_disagrees(self) -> bool:
        return any(k in self.active for k in _GOLD_DISAGREES)

    def _message(self, pat: Pattern, hits: list[str], first: int) -> str:
        hits = sorted(set(hits), key=lambda k: (self.active[k][0], k))
        evidence = "; ".join(f"{k} since step {self.active[k][0]}" for k in hits)
        qualifier = ""
        if pat.name == "reward-hacking":
            qualifier = (" (confirmed: the gold reward disagrees)" if self._gold_disagrees()
                         else " (likely: the gold reward does not rise with it)" if self.p["gold"]
                         else " (likely; no gold reward logged to confirm)")
        detail = "".join(" " + self.active[k][2] for k in _GOLD_DISAGREES if k in hits)
        return (f"{pat.title}{qualifier}, since step {first}: {evidence}.{detail} What to do: {pat.todo}")

    # the inbox is transient (emptied every row); the firing set is what a resumed run needs
    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out.pop("inbox", None)
        out["_sorted"] = 0
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict({k: v for k, v in state.items() if k != "inbox"})
        self.inbox.clear()  # in place: every gauge publishes into this very list
        self._sorted = 0


def publish(gauges: Mapping[str, Gauge], diagnoser: Diagnoser) -> None:
    """Wire every gauge's rule transitions into the diagnoser's bus."""
    for pos, g in enumerate(gauges.values()):
        if g is not diagnoser:
            g.bus = diagnoser.inbox
            g.bus_pos = pos
