"""Rollout statistics: judging the completions GRPO/RLOO already generated (pure Python, stdlib only).

Every GRPO/RLOO step samples ``num_generations`` completions per prompt and scores each with every
reward function; the trainer logs only their means. The batch itself is the best evidence there is:
whether length is paid *inside* groups (before the mean length moves), whether a group's completions
are all the same text, whether most completions hit a reward function's ceiling. This module turns
one batch into a handful of numbers per step (:class:`RolloutStats`), picks the completions that
show a problem (:meth:`RolloutStats.evidence`), and holds the gauge rules that read those numbers.
The live callback feeds it from the trainer (``trainer/trl_rollouts.py``), ``rlcluster analyze`` from
the completions table TRL logs to W&B with ``log_completions=True`` (``rollouts_offline.py``).

Canonical row keys, the one place they are defined (values per logged step, from the last
generation batch before the log; see :data:`ROLLOUT_KEYS` for each key's meaning):

=================================================  =========================================================
``rollouts/completions``, ``rollouts/groups``      batch size, prompt groups
``rollouts/mean_length``                           tokens live, characters from a W&B completions table
``rollouts/length_reward_corr``                    pooled within-group length-reward correlation
``rollouts/length_reward_dof``                     completions behind it (n - groups, groups with spread)
``rollouts/identical_group_frac``                  groups whose completions are all the same text
``rollouts/near_identical_group_frac``             ... all (nearly) the same text
``rollouts/distinct_frac``                         distinct texts / completions
``rollouts/empty_frac``                            empty completions
``rollouts/no_eos_frac``                           completions cut without EOS (live only)
``rollouts/repetition_mean``                       mean repeated-n-gram rate
``rollouts/repetitive_frac``                       completions repeating over half their n-grams
``rollouts/reward_outlier_frac``, ``..._z``        total rewards far above the batch median
``rollouts/reward/<fn>/ceiling_frac``              completions at reward function <fn>'s ceiling
``rollouts/reward/<fn>/advantage_share``           <fn>'s share of the within-group reward variance
``rollouts/ceiling_frac_max``                      the largest per-function ceiling_frac
``rollouts/advantage_share_max``                   the largest per-function advantage_share
=================================================  =========================================================

The gauges read them through the ``*_rules`` functions at the bottom (samples, length, reward,
reward_signal): each gauge calls one of them from ``observe``, so its findings, statuses and alert
rules work as for any other input. Their thresholds are ordinary gauge parameters
(:data:`ROLLOUT_DEFAULTS`), their derived values are listed in :data:`ROLLOUT_OUTPUTS`.

In the cross-gauge diagnoses (``core/diagnosis.py``): ``length/length-paid`` is length moving with the
reward (reward hacking's drift group), ``reward/reward-outliers`` a rise a loophole pays (its rising
group), ``samples/identical-groups`` and ``samples/rollout-repetition`` the answers converging (a group of
their own in mode collapse); diagnosis alerts carry the examples too.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .gauge import Gauge, finite
from .keys import Row
from .rule import INSTRUMENTS, Example, Rule
from .streams import after, grpo
from .text import clean_text

__all__ = [
    "EVIDENCE_FOCUS",
    "ROLLOUT_DEFAULTS",
    "ROLLOUT_GAUGES",
    "ROLLOUT_KEYS",
    "ROLLOUT_OUTPUTS",
    "RolloutBatch",
    "RolloutStats",
    "as_text",
    "batch_from_table",
    "evidence_focus",
    "evidence_lines",
    "evidence_table",
    "length_rules",
    "repetition_rate",
    "reward_rules",
    "reward_signal_rules",
    "samples_rules",
]

PREFIX = "rollouts/"

#: Every canonical key with what it means (``<fn>``: a reward function's name as TRL logs it).
ROLLOUT_KEYS: dict[str, str] = {
    "rollouts/completions": "completions judged at this step (the last generation batch before the log row)",
    "rollouts/groups": "prompt groups in the batch (num_generations completions of one prompt each)",
    "rollouts/mean_length": "mean completion length: tokens in a live run, characters when read from a W&B "
                            "completions table (TRL does not log token counts there)",
    "rollouts/length_reward_corr": "pooled within-group Pearson correlation of completion length and total reward "
                                   "(each group centred on its own means): is length paid inside groups? The "
                                   "earliest length-hacking signal, before the mean length moves",
    "rollouts/length_reward_dof": "completions that inform that correlation (completions minus groups, over the groups "
                                  "with spread in both length and reward)",
    "rollouts/identical_group_frac": "share of groups whose completions are all exactly the same text",
    "rollouts/near_identical_group_frac": "share of groups whose completions are all the same or nearly "
                                          "(n-gram Jaccard >= 0.8 with the group's first completion)",
    "rollouts/distinct_frac": "distinct completion texts / completions",
    "rollouts/empty_frac": "share of empty (whitespace-only) completions",
    "rollouts/no_eos_frac": "share of completions that end without EOS (cut at max_completion_length); live only",
    "rollouts/repetition_mean": "mean repeated-n-gram rate, 1 - distinct/total (word 3-grams; character 4-grams for "
                                "short or space-less text; over each completion's last 256 words / 1024 characters)",
    "rollouts/repetitive_frac": "share of completions whose repeated-n-gram rate is above 0.5 (looping)",
    "rollouts/reward_outlier_frac": "share of completions whose total reward is more than 6 robust sigmas "
                                    "(median/MAD) above the batch median (continuous rewards only)",
    "rollouts/reward_outlier_z": "the largest robust z of a total reward above the batch median",
    "rollouts/reward/<fn>/ceiling_frac": "share of completions at <fn>'s ceiling: a declared ceiling, else the "
                                         "highest value <fn> has given in this run (once it has shown any spread)",
    "rollouts/reward/<fn>/advantage_share": "<fn>'s share of the within-group variance of the weighted rewards "
                                            "(two or more functions): 1.0 means <fn> alone decides the advantage",
    "rollouts/ceiling_frac_max": "the largest ceiling_frac over the reward functions",
    "rollouts/advantage_share_max": "the largest advantage_share over the reward functions",
}

#: Gauges whose alerts carry rollout evidence (examples of completions): the four the statistics feed, and the
#: cross-gauge diagnoses ("reward hacking?" is the alert that most needs the completions that earned the reward).
ROLLOUT_GAUGES = frozenset({"samples", "length", "reward", "reward_signal", "diagnosis"})

REPETITIVE = 0.5  # a completion repeating over half its n-grams is looping
NEAR_IDENTICAL = 0.8  # n-gram Jaccard to the group's first completion
OUTLIER_Z = 6.0
MIN_DISTINCT_FOR_OUTLIERS = 5  # binary / few-valued rewards have no meaningful outliers
MAX_EXAMPLES = 4
MAX_UNITS = 256  # n-grams over at most the last 256 words (1024 characters) of a completion: bounded work


def as_text(value: Any) -> str:
    """A prompt or completion as text: a string, or a conversation (list of messages) joined by role."""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        parts = []
        for m in value:
            if isinstance(m, Mapping):
                content = m.get("content", "")
                if not isinstance(content, str):  # multimodal: [{"type": "text", "text": ...}, {"type": "image"}]
                    content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, Mapping)) \
                        if isinstance(content, Sequence) else str(content)
                parts.append(f"{m.get('role', '')}: {content}" if len(value) > 1 else content)
            else:
                parts.append(str(m))
        return "\n".join(parts)
    return "" if value is None else str(value)


def _units(text: str) -> tuple[Sequence[Any], int]:
    """(units, n): whitespace words and word 3-grams for prose; characters and 4-grams otherwise.

    Characters for short or space-less text: ``"aaaaaaaa"`` or a CJK answer repeat at the character level.
    Only the tail is used (:data:`MAX_UNITS`), where a loop that has set in runs on to the length limit.
    """
    words = text.split()
    if len(words) >= 6 and len(text) <= 12 * len(words):
        return words[-MAX_UNITS:], 3
    return text.strip()[-4 * MAX_UNITS:], 4


def _grams(text: str) -> tuple[set[Any], int]:
    units, n = _units(text)
    total = len(units) - n + 1
    if total <= 0:
        return set(), 0
    return set(zip(*(units[i:] for i in range(n)), strict=False)), total


def _counts(text: str) -> Counter[Any]:
    units, n = _units(text)
    return Counter(zip(*(units[i:] for i in range(n)), strict=False))


def _near(a: str, b: str, ga: set[Any], gb: set[Any], ra: float, rb: float) -> bool:
    """Nearly the same text: n-gram Jaccard >= 0.8; for two looping texts, counted (multiset) Jaccard.

    ``"seaaaaaaaa"`` and ``"staaaaaaaa"`` share one distinct 4-gram of three, but nearly all of their
    4-grams by count: loops are compared by counts (few distinct n-grams, so it stays cheap).
    """
    if not gb:
        return False
    inter = len(ga & gb)
    if inter >= NEAR_IDENTICAL * (len(ga) + len(gb) - inter):
        return True
    if ra <= REPETITIVE or rb <= REPETITIVE:
        return False
    ca, cb = _counts(a), _counts(b)
    both = sum(min(c, cb[k]) for k, c in ca.items() if k in cb)
    return both >= NEAR_IDENTICAL * (sum(ca.values()) + sum(cb.values()) - both)


def repetition_rate(text: str) -> float:
    """Share of repeated n-grams in one completion, 1 - distinct/total (0 for text too short to tell)."""
    grams, total = _grams(text)
    return 1.0 - len(grams) / total if total else 0.0


def _nan(x: Any) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return math.nan
    return f


@dataclass
class RolloutBatch:
    """One generation batch: every completion of every prompt group with its rewards.

    ``rewards`` holds each reward function's raw value per completion (NaN where the function returned
    None); the total reward is their ``weights``-weighted sum, as TRL computes it. Completions of one
    prompt are consecutive, ``group_size`` at a time (TRL's ``num_generations``); with ``group_size`` 0
    they are grouped by prompt text. ``lengths`` are token counts (None: characters are used) and
    ``eos`` whether each completion ended with EOS (None where unknown).
    """

    step: int
    prompts: list[str]
    completions: list[str]
    rewards: dict[str, list[float]] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    advantages: list[float] | None = None
    lengths: list[float] | None = None
    eos: list[bool | None] | None = None
    group_size: int = 0

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def length_unit(self) -> str:
        return "tokens" if self.lengths is not None else "chars"

    def totals(self) -> list[float]:
        n = len(self.completions)
        out = [0.0] * n
        seen = [False] * n
        for fn, vals in self.rewards.items():
            w = self.weights.get(fn, 1.0)
            for i in range(min(n, len(vals))):
                v = vals[i]
                if v == v:  # NaN (a function that returned None) is skipped, like torch.nansum
                    out[i] += w * v
                    seen[i] = True
        return [t if s else math.nan for t, s in zip(out, seen, strict=True)]

    def groups(self) -> list[list[int]]:
        n = len(self.completions)
        g = self.group_size
        if g > 0 and n % g == 0:
            return [list(range(s, s + g)) for s in range(0, n, g)]
        by_prompt: dict[str, list[int]] = {}
        for i, p in enumerate(self.prompts[:n]):
            by_prompt.setdefault(p, []).append(i)
        return list(by_prompt.values())


@dataclass
class _Judged:
    """What the last update kept for evidence: the batch and its per-completion numbers (no n-gram sets)."""

    batch: RolloutBatch
    lengths: list[float]
    totals: list[float]
    repetition: list[float]
    groups: list[list[int]]
    identical_groups: list[int]  # indices into groups: near-identical ones
    ceilings: dict[str, float]
    outlier_z: list[float]


def _group_stats(texts: list[str], grams: list[set[Any]], reps: list[float], groups: list[list[int]],
                 lengths: list[float], totals: list[float], out: dict[str, float]) -> list[int]:
    """Groups: identical texts, near-identical texts, length paid inside the group (into ``out``); the
    near-identical groups' indices."""
    # groups: identical texts, near-identical texts, length paid inside the group
    identical = near = 0
    near_groups: list[int] = []
    sxx = syy = sxy = 0.0
    dof = 0
    for gi, members in enumerate(groups):
        if len(members) < 2:
            continue
        first = members[0]
        t0 = texts[first].strip()
        same = all(texts[j].strip() == t0 for j in members[1:])
        close = same or (bool(grams[first]) and all(
            texts[j].strip() == t0 or _near(texts[first], texts[j], grams[first], grams[j], reps[first], reps[j])
            for j in members[1:]))  # stops at the first completion that differs: healthy groups cost one test
        identical += same
        near += close
        if close:
            near_groups.append(gi)
        idx = [i for i in members if totals[i] == totals[i]]
        if len(idx) < 2:
            continue
        k = len(idx)
        ml = sum(lengths[i] for i in idx) / k
        mr = sum(totals[i] for i in idx) / k
        gxx = gyy = gxy = 0.0
        for i in idx:
            dl, dr = lengths[i] - ml, totals[i] - mr
            gxx += dl * dl
            gyy += dr * dr
            gxy += dl * dr
        sxx += gxx
        syy += gyy
        sxy += gxy
        if gxx > 0 and gyy > 0:
            dof += k - 1
    counted = sum(1 for m in groups if len(m) >= 2)
    if counted:
        out["rollouts/identical_group_frac"] = identical / counted
        out["rollouts/near_identical_group_frac"] = near / counted
    out["rollouts/length_reward_dof"] = float(dof)
    if sxx > 0 and syy > 0:
        out["rollouts/length_reward_corr"] = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    return near_groups


def _outliers(totals: list[float], n: int, out: dict[str, float]) -> list[float]:
    """Reward outliers: the robust z of each completion's total reward, high side (into ``out``); the z's."""
    # reward outliers (robust z of the total reward, high side)
    fin = sorted(t for t in totals if t == t and not math.isinf(t))
    zs = [0.0] * n
    if len(fin) >= 8 and len(set(fin)) >= MIN_DISTINCT_FOR_OUTLIERS:
        med = _median_sorted(fin)
        mad = _median_sorted(sorted(abs(t - med) for t in fin))
        if mad > 0:
            scale = 1.4826 * mad
            zs = [(t - med) / scale if t == t and not math.isinf(t) else 0.0 for t in totals]
            out["rollouts/reward_outlier_z"] = max(zs)
            out["rollouts/reward_outlier_frac"] = sum(1 for z in zs if z > OUTLIER_Z) / n
    return zs


class RolloutStats:
    """Per-step rollout statistics, with the little run-level state they need (each function's range).

    ``update(batch)`` returns the ``rollouts/...`` values for that batch; ``evidence(...)`` then picks
    example completions from it. Work is bounded: one n-gram set per completion and at most
    ``group_size - 1`` set comparisons per group (each against the group's first completion).

    Args:
        ceilings: known ceilings per reward function (``{"accuracy": 1.0}``); other functions use the
            highest value they have given so far, once they have shown any spread.
    """

    def __init__(self, ceilings: Mapping[str, float] | None = None) -> None:
        self.declared = {str(k): float(v) for k, v in (ceilings or {}).items()}
        self.lo: dict[str, float] = {}
        self.hi: dict[str, float] = {}
        self.batches = 0
        self.last: _Judged | None = None

    # -- statistics ------------------------------------------------------------------------------
    def update(self, batch: RolloutBatch) -> dict[str, float]:
        n = len(batch.completions)
        if n == 0:
            return {}
        self.batches += 1
        texts = batch.completions
        lengths = [float(x) for x in batch.lengths] if batch.lengths is not None and len(batch.lengths) == n \
            else [float(len(t)) for t in texts]
        totals = batch.totals()
        grams: list[set[Any]] = []
        reps: list[float] = []
        for t in texts:
            g, total = _grams(t)
            grams.append(g)
            reps.append(1.0 - len(g) / total if total else 0.0)
        groups = batch.groups()
        out: dict[str, float] = {
            "rollouts/completions": float(n),
            "rollouts/groups": float(len(groups)),
            "rollouts/mean_length": sum(lengths) / n,
            "rollouts/distinct_frac": len({t.strip() for t in texts}) / n,
            "rollouts/empty_frac": sum(1 for t in texts if not t.strip()) / n,
            "rollouts/repetition_mean": sum(reps) / n,
            "rollouts/repetitive_frac": sum(1 for r in reps if r > REPETITIVE) / n,
        }
        if batch.eos is not None:
            known = [e for e in batch.eos[:n] if e is not None]
            if known:
                out["rollouts/no_eos_frac"] = sum(1 for e in known if not e) / len(known)
        near_groups = _group_stats(texts, grams, reps, groups, lengths, totals, out)
        zs = _outliers(totals, n, out)
        ceilings = self._functions(batch, groups, n, out)
        self.last = _Judged(batch, lengths, totals, reps, groups, near_groups, ceilings, zs)
        return out

    def _functions(self, batch: RolloutBatch, groups: list[list[int]], n: int, out: dict[str, float]
                   ) -> dict[str, float]:
        """Per reward function: ceiling share and share of the within-group variance (into ``out``); the
        ceilings."""
        # per reward function: ceiling share and share of the within-group variance
        ceilings: dict[str, float] = {}
        shares: dict[str, float] = {}
        for fn, vals in batch.rewards.items():
            v = [x for x in vals[:n] if x == x and not math.isinf(x)]
            if not v:
                continue
            lo, hi = min(v), max(v)
            self.lo[fn] = min(self.lo.get(fn, lo), lo)
            self.hi[fn] = max(self.hi.get(fn, hi), hi)
            ceiling = self.declared.get(fn)
            if ceiling is None and self.hi[fn] > self.lo[fn]:
                ceiling = self.hi[fn]
            if ceiling is not None:
                tol = 1e-6 * max(1.0, abs(ceiling))
                frac = sum(1 for x in v if x >= ceiling - tol) / len(v)
                ceilings[fn] = ceiling
                out[f"rollouts/reward/{fn}/ceiling_frac"] = frac
            if len(batch.rewards) >= 2:
                w = batch.weights.get(fn, 1.0)
                var = 0.0
                for members in groups:
                    gv = [w * vals[i] for i in members if i < len(vals) and vals[i] == vals[i]]
                    if len(gv) >= 2:
                        m = sum(gv) / len(gv)
                        var += sum((x - m) * (x - m) for x in gv)
                shares[fn] = var
        fracs = [out[f"rollouts/reward/{fn}/ceiling_frac"] for fn in ceilings]
        if fracs:
            out["rollouts/ceiling_frac_max"] = max(fracs)
        total_var = sum(shares.values())
        if total_var > 0:
            for fn, var in shares.items():
                out[f"rollouts/reward/{fn}/advantage_share"] = var / total_var
            out["rollouts/advantage_share_max"] = max(shares.values()) / total_var
        return ceilings

    # -- evidence ----------------------------------------------------------------------------------
    def evidence(self, focus: str | None = None, *, max_examples: int = MAX_EXAMPLES, max_chars: int = 300,
                 redact: Callable[[str], str | None] | None = None) -> list[dict[str, Any]]:
        """Example completions from the last batch: what an alert should show a person.

        ``focus`` (see :func:`evidence_focus`) puts the completions that show the problem first (the most
        repetitive, an identical group, an empty one, the longest paid...); the top-reward completions
        follow. Texts go through ``redact`` (None from it withholds the text; an exception withholds it
        too), are cut to ``max_chars`` and have control characters escaped.
        """
        j = self.last
        if j is None or not j.batch.completions:
            return []
        b = j.batch
        n = len(b.completions)
        finite_idx = [i for i in range(n) if j.totals[i] == j.totals[i]]
        by_reward = sorted(finite_idx, key=lambda i: -j.totals[i])
        picks: list[tuple[int, str]] = []

        def add(i: int | None, why: str) -> None:
            if i is not None and all(i != p for p, _ in picks) and len(picks) < max_examples:
                picks.append((i, why))

        kind, _, arg = (focus or "").partition(":")
        if kind == "repetitive":
            top = max(range(n), key=lambda i: j.repetition[i])
            add(top, f"most repetitive ({j.repetition[top]:.0%} repeated n-grams)")
        elif kind == "identical" and j.identical_groups:
            members = j.groups[j.identical_groups[0]]
            add(members[0], f"group of {len(members)} (nearly) identical completions")
        elif kind == "empty":
            add(next((i for i in range(n) if not b.completions[i].strip()), None), "empty completion")
        elif kind == "no_eos" and b.eos is not None:
            cut = [i for i in range(min(n, len(b.eos))) if b.eos[i] is False]
            add(max(cut, key=lambda i: j.lengths[i]) if cut else None, "no EOS (cut at the length limit)")
        elif kind == "outlier" and by_reward:
            add(by_reward[0], f"reward outlier (robust z {j.outlier_z[by_reward[0]]:.1f})")
        elif kind == "ceiling":
            fn = arg or next(iter(j.ceilings), "")
            c = j.ceilings.get(fn)
            vals = b.rewards.get(fn, [])
            at = [i for i in range(min(n, len(vals))) if c is not None and vals[i] >= c - 1e-6 * max(1.0, abs(c))]
            add(at[0] if at else None, f"at the ceiling of {fn} ({c:.4g})" if c is not None else "at the ceiling")
        elif kind == "length" and by_reward:
            best = by_reward[0]
            add(best, "top reward")
            group = next((g for g in j.groups if best in g), [])
            if len(group) > 1:
                add(min(group, key=lambda i: j.lengths[i]), "shortest in the same group")
        for i in by_reward[:2]:
            add(i, "top reward")
        if n:
            rep = max(range(n), key=lambda i: j.repetition[i])
            if j.repetition[rep] >= 0.3:
                add(rep, f"most repetitive ({j.repetition[rep]:.0%} repeated n-grams)")
        return [self._example(i, why, max_chars, redact) for i, why in picks]

    def _example(self, i: int, why: str, max_chars: int, redact: Callable[[str], str | None] | None) -> dict[str, Any]:
        j = self.last
        assert j is not None
        b = j.batch
        group = next((gi for gi, g in enumerate(j.groups) if i in g), -1)
        ex: dict[str, Any] = {
            "why": why,
            "step": b.step,
            "group": group,
            "prompt": _safe(b.prompts[i] if i < len(b.prompts) else "", redact, min(max_chars, 120)),
            "completion": _safe(b.completions[i], redact, max_chars),
            "reward": _round(j.totals[i]),
            "rewards": {fn: _round(vals[i]) if i < len(vals) else None for fn, vals in b.rewards.items()},
            "length": _round(j.lengths[i]),
            "length_unit": b.length_unit,
            "repetition": round(j.repetition[i], 3),
        }
        if b.advantages is not None and i < len(b.advantages):
            ex["advantage"] = _round(b.advantages[i])
        if b.eos is not None and i < len(b.eos) and b.eos[i] is not None:
            ex["eos"] = bool(b.eos[i])
        return ex

    # -- checkpointing -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"lo": dict(self.lo), "hi": dict(self.hi), "batches": self.batches}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.lo = {str(k): float(v) for k, v in (state.get("lo") or {}).items()}
        self.hi = {str(k): float(v) for k, v in (state.get("hi") or {}).items()}
        self.batches = int(state.get("batches", 0))


def _median_sorted(v: list[float]) -> float:
    k = len(v)
    return v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2


def _round(x: float) -> float | None:
    return None if x is None or x != x or math.isinf(x) else round(float(x), 4)


def _safe(text: str, redact: Callable[[str], str | None] | None, limit: int) -> str:
    """The text as it may be shown: redacted (by the caller's hook), cut, control characters escaped."""
    if redact is not None:
        try:
            red = redact(text)
        except Exception:  # noqa: BLE001 - a failing hook must withhold the text, never leak it
            return "[text withheld: the redaction hook failed]"
        if red is None:
            return "[text withheld]"
        text = str(red)
    return clean_text(text, limit)


def batch_from_table(columns: Sequence[str], data: Iterable[Sequence[Any]], *, step: int | None = None,
                     reward_names: Sequence[str] | None = None, weights: Sequence[float] | None = None,
                     group_size: int = 0) -> RolloutBatch | None:
    """A batch from TRL's completions table (``log_completions=True``): step, prompt, completion, one column
    per reward function (then any extra columns), advantage. ``reward_names`` picks the reward columns
    (default: the numeric columns between ``completion`` and ``advantage``)."""
    cols = list(columns)
    if "prompt" not in cols or "completion" not in cols:
        return None
    rows = [r for r in data if isinstance(r, Sequence) and len(r) == len(cols)]
    if not rows:
        return None
    ip, ic = cols.index("prompt"), cols.index("completion")
    ia = cols.index("advantage") if "advantage" in cols else None
    if reward_names is None:
        end = ia if ia is not None else len(cols)
        reward_names = [c for k, c in enumerate(cols[ic + 1:end], start=ic + 1)
                        if all(isinstance(r[k], (int, float)) or r[k] is None for r in rows)]
    names = [c for c in reward_names if c in cols]
    w = list(weights) if weights is not None and len(weights) == len(names) else [1.0] * len(names)
    rewards = {c: [_nan(r[cols.index(c)]) for r in rows] for c in names}
    if step is None and "step" in cols:
        step = int(_nan(rows[0][cols.index("step")]) or 0)
    return RolloutBatch(
        step=int(step or 0),
        prompts=[as_text(r[ip]) for r in rows],
        completions=[as_text(r[ic]) for r in rows],
        rewards=rewards,
        weights=dict(zip(names, (float(x) for x in w), strict=True)),
        advantages=[_nan(r[ia]) for r in rows] if ia is not None else None,
        group_size=group_size,
    )


# -- what people read ------------------------------------------------------------------------------

#: Which completions an alert's examples lead with, by the metric the alert reports (others: top reward).
EVIDENCE_FOCUS: dict[str, str] = {
    "rollouts/repetitive_frac": "repetitive", "rollouts/repetition_mean": "repetitive",
    "samples/repetition_rate": "repetitive",
    "rollouts/near_identical_group_frac": "identical", "rollouts/identical_group_frac": "identical",
    "rollouts/distinct_frac": "identical",
    "rollouts/empty_frac": "empty",
    "rollouts/no_eos_frac": "no_eos", "completions/clipped_ratio": "no_eos", "val/num_eos_tokens": "no_eos",
    "rollouts/reward_outlier_z": "outlier", "rollouts/reward_outlier_frac": "outlier",
    "rollouts/length_reward_corr": "length", "completions/mean_length": "length", "completions/max_length": "length",
}


#: ... and by the finding a diagnosis leads with (its metric is ``gauge/rule``).
RULE_FOCUS: dict[str, str] = {
    "length-paid": "length", "length-grew": "length", "length-explosion": "length", "length-trend-up": "length",
    "reward-hacking": "length", "rollout-repetition": "repetitive", "identical-groups": "identical",
    "entropy-collapse": "identical", "length-variance-collapse": "identical", "zero-std-high": "identical",
    "reward-outliers": "outlier", "empty-completions": "empty", "truncation": "no_eos",
}


def evidence_focus(metric: str) -> str | None:
    """The evidence focus for an alert's metric (``rollouts/reward/acc/ceiling_frac`` -> ``ceiling:acc``;
    a diagnosis led by ``samples/identical-groups`` -> ``identical``)."""
    metric = metric.removeprefix("train/")
    if metric.startswith("rollouts/reward/") and metric.endswith("/ceiling_frac"):
        return "ceiling:" + metric[16:-13]
    return EVIDENCE_FOCUS.get(metric) or RULE_FOCUS.get(metric.partition("/")[2].partition(":")[0])


def evidence_lines(evidence: Iterable[Mapping[str, Any]], *, with_text: bool = True, width: int = 300) -> list[str]:
    """One line per example, for a terminal, an e-mail or a chat message (text already escaped)."""
    lines = []
    for ex in evidence:
        parts = [str(ex.get("why", "example"))]
        r = ex.get("reward")
        rewards = ex.get("rewards") or {}
        if r is not None:
            per = ", ".join(f"{clean_text(fn, 40)} {v:.3g}" for fn, v in rewards.items() if v is not None)
            parts.append(f"reward {r:.3g}" + (f" ({per})" if per and len(rewards) > 1 else ""))
        if ex.get("advantage") is not None:
            parts.append(f"adv {ex['advantage']:+.2f}")
        if ex.get("length") is not None:
            parts.append(f"{ex['length']:.0f} {ex.get('length_unit', 'tokens')}")
        if "eos" in ex:
            parts.append("EOS" if ex["eos"] else "no EOS")
        if ex.get("repetition"):
            parts.append(f"repeats {ex['repetition']:.0%}")
        line = " · ".join(parts)
        if with_text:
            line += f': "{clean_text(ex.get("completion", ""), width)}"'
        lines.append(line)
    return lines


def evidence_table(events: Iterable[Any]) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of a table with one row per example of each alert (objects with ``rule``, ``step``,
    ``evidence``), per-function rewards as ``reward:<fn>`` columns: the W&B table logged at the alert's step."""
    events = list(events)
    fns: list[str] = []
    for e in events:
        for ex in e.evidence:
            fns += [fn for fn in ex.get("rewards", {}) if fn not in fns]
    columns = ["step", "alert", "why", "prompt", "completion", "reward", *(f"reward:{fn}" for fn in fns),
               "advantage", "length", "length_unit", "eos", "repetition"]
    data = []
    for e in events:
        for ex in e.evidence:
            per = ex.get("rewards", {})
            data.append([ex.get("step", e.step), e.rule, ex.get("why"), ex.get("prompt"), ex.get("completion"),
                         ex.get("reward"), *(per.get(fn) for fn in fns), ex.get("advantage"), ex.get("length"),
                         ex.get("length_unit"), ex.get("eos"), ex.get("repetition")])
    return columns, data


# -- gauge rules ------------------------------------------------------------------------------------

#: Parameters of the rollout rules, merged into each gauge's ``defaults`` (tunable like any other).
ROLLOUT_DEFAULTS: dict[str, dict[str, Any]] = {
    "samples": {"rollout_repetitive": 0.5, "rollout_repetitive_for": 2, "rollout_identical": 0.5,
                "rollout_identical_for": 3, "rollout_empty": 0.25, "rollout_empty_for": 2},
    "length": {"rollout_paid_corr": 0.5, "rollout_paid_dof": 6.0, "rollout_paid_for": 3},
    "reward": {"rollout_outlier_z": 8.0, "rollout_outlier_frac": 0.1, "rollout_outlier_for": 2},
    "reward_signal": {"rollout_ceiling": 0.8, "rollout_ceiling_for": 5, "rollout_decides": 0.9,
                      "rollout_decides_for": 5},
}

#: Derived values the rollout rules write, per gauge (``rlcluster/<gauge>/<name>``).
ROLLOUT_OUTPUTS: dict[str, tuple[str, ...]] = {
    "samples": ("rollout_repetitive_frac", "rollout_repetition_mean", "rollout_identical_groups",
                "rollout_empty_frac", "rollout_distinct_frac"),
    "length": ("group_length_reward_corr", "rollout_no_eos_frac"),
    "reward": ("rollout_outlier_z",),
    "reward_signal": ("rollout_ceiling_frac", "rollout_advantage_share"),
}

#: The row keys each gauge's rollout rules read (a gauge that lists them as inputs observes such rows).
ROLLOUT_INPUTS: dict[str, tuple[str, ...]] = {
    "samples": ("rollouts/repetitive_frac", "rollouts/near_identical_group_frac", "rollouts/empty_frac"),
}


def samples_rules(g: Gauge, row: Row) -> None:
    """Generation quality from the training completions themselves: loops, collapsed groups, empty answers."""
    v, p, d = row.values, g.p, g.derived
    rep = v.get("rollouts/repetitive_frac")
    if rep is not None and finite(rep):
        mean = v.get("rollouts/repetition_mean", math.nan)
        d["rollout_repetitive_frac"] = rep
        d["rollout_repetition_mean"] = mean
        g.check("rollout-repetition", rep > p["rollout_repetitive"], "warn", "rollouts/repetitive_frac", rep,
                lambda: f"{rep:.0%} of this step's training completions repeat over half of their n-grams (mean "
                f"repetition {mean:.0%}): generations are looping, and the reward is paying for it or not "
                "stopping it. Read the most repetitive completion below; a repetition penalty or a reward that "
                "does not count repeats helps.", for_=p["rollout_repetitive_for"])
    same = v.get("rollouts/near_identical_group_frac")
    if same is not None and finite(same):
        exact = v.get("rollouts/identical_group_frac", math.nan)
        d["rollout_identical_groups"] = same
        g.check("identical-groups", same > p["rollout_identical"], "warn", "rollouts/near_identical_group_frac", same,
                lambda: f"in {same:.0%} of prompt groups every completion is the same text or nearly "
                f"({exact:.0%} exactly identical): the policy answers each prompt one way (mode collapse). Those "
                "groups have no reward spread and teach nothing; raise the temperature, use clip-higher or an "
                "entropy bonus, or drop prompts the model always answers alike.", for_=p["rollout_identical_for"])
    empty = v.get("rollouts/empty_frac")
    if empty is not None and finite(empty):
        d["rollout_empty_frac"] = empty
        g.check("empty-completions", empty > p["rollout_empty"], "warn", "rollouts/empty_frac", empty,
                lambda: f"{empty:.0%} of completions are empty: an immediate EOS is scoring well enough (a reward "
                "that does not punish empty answers, or a format reward met by nothing).",
                for_=p["rollout_empty_for"])
    distinct = v.get("rollouts/distinct_frac")
    if distinct is not None and finite(distinct):
        d["rollout_distinct_frac"] = distinct


#: The samples gauge's rules on the training completions.
SAMPLES_ROLLOUT_RULES: tuple[Rule, ...] = (
    Rule(
        "samples", "rollout-repetition", severities=("warn",),
        reads="rollouts/repetitive_frac (the training completions)",
        test="level above a line, held `rollout_repetitive_for` rows",
        params=("rollout_repetitive", "rollout_repetitive_for"),
        means="training completions repeat over half their n-grams",
        fix="repetition penalty, or a reward that does not count repeats",
        seed="repetition loops, format drift", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/repetitive_frac": 0.05 + 0.6 * after(i, 60)},
            lambda i, g: {**grpo(i, g), "rollouts/repetitive_frac": 0.05}, 100, 60, 61, "rollouts/repetitive_frac"),
    ),
    Rule(
        "samples", "identical-groups", severities=("warn",),
        reads="rollouts/near_identical_group_frac",
        test="level above a line, held `rollout_identical_for` rows",
        params=("rollout_identical", "rollout_identical_for"),
        means="the policy answers each prompt one way (mode collapse)",
        fix="raise the temperature, clip-higher, entropy bonus",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/near_identical_group_frac": 0.1 + 0.6 * after(i, 60)},
            lambda i, g: {**grpo(i, g), "rollouts/near_identical_group_frac": 0.1}, 100, 60, 62,
            "rollouts/near_identical_group_frac"),
    ),
    Rule(
        "samples", "empty-completions", severities=("warn",),
        reads="rollouts/empty_frac",
        test="level above a line, held `rollout_empty_for` rows",
        params=("rollout_empty", "rollout_empty_for"),
        means="an immediate EOS scores well enough",
        fix="make the reward punish empty answers",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/empty_frac": 0.4 * after(i, 60)},
            lambda i, g: {**grpo(i, g), "rollouts/empty_frac": 0.0}, 100, 60, 61, "rollouts/empty_frac"),
    ),
)


def length_rules(g: Gauge, row: Row) -> None:
    """Length paid inside groups: longer completions score higher than their siblings, step after step."""
    v, p, d = row.values, g.p, g.derived
    no_eos = v.get("rollouts/no_eos_frac")
    if no_eos is not None and finite(no_eos):
        d["rollout_no_eos_frac"] = no_eos
    corr = v.get("rollouts/length_reward_corr")
    if corr is None or not finite(corr):
        return
    dof = v.get("rollouts/length_reward_dof", 0.0)
    d["group_length_reward_corr"] = corr
    paid = corr > p["rollout_paid_corr"] and dof >= p["rollout_paid_dof"]
    g.check("length-paid", paid, "warn", "rollouts/length_reward_corr", corr,
            lambda: f"inside each prompt group the longer completions get the higher reward (within-group "
            f"length-reward correlation {corr:.2f} over {dof:.0f} completions, {g.held('length-paid')} logged steps "
            "running): the reward pays for length, so the mean length will follow. Unless longer answers are "
            "genuinely better here (read the examples), add a length penalty or cap (DAPO-style overlong shaping).",
            for_=p["rollout_paid_for"], clear=5)


#: The length gauge's rule on the training completions.
LENGTH_ROLLOUT_RULES: tuple[Rule, ...] = (
    Rule(
        "length", "length-paid", severities=("warn",),
        reads="rollouts/length_reward_corr within groups (the training completions)",
        test="above `rollout_paid_corr` over `rollout_paid_dof` completions, held `rollout_paid_for`",
        params=("rollout_paid_corr", "rollout_paid_dof", "rollout_paid_for"),
        means="the reward pays for length",
        fix="a length penalty or cap (DAPO-style overlong shaping)",
        seed="Length–reward correlation: length hacking.", seed_source=INSTRUMENTS,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/length_reward_corr": 0.1 + 0.6 * after(i, 60),
                                  "rollouts/length_reward_dof": 14.0},
            lambda i, g: {**grpo(i, g), "rollouts/length_reward_corr": 0.1, "rollouts/length_reward_dof": 14.0},
            100, 60, 62, "rollouts/length_reward_corr"),
    ),
)


def reward_rules(g: Gauge, row: Row) -> None:
    """A few completions scoring far above the rest: a loophole the policy has just found?"""
    v, p, d = row.values, g.p, g.derived
    z = v.get("rollouts/reward_outlier_z")
    if z is None or not finite(z):
        return
    frac = v.get("rollouts/reward_outlier_frac", 0.0)
    d["rollout_outlier_z"] = z
    few = 0 < frac <= p["rollout_outlier_frac"]
    g.check("reward-outliers", few and z > p["rollout_outlier_z"], "warn", "rollouts/reward_outlier_z", z,
            lambda: f"{frac:.0%} of completions score far above the rest of the batch (up to {z:.0f} robust sigmas "
            "over the median) for consecutive steps: the policy may have found a loophole in the reward that "
            "the rest will soon copy. Read the outliers below before they become the norm.",
            for_=p["rollout_outlier_for"], clear=5)


#: The reward gauge's rule on the training completions.
REWARD_ROLLOUT_RULES: tuple[Rule, ...] = (
    Rule(
        "reward", "reward-outliers", severities=("warn",),
        reads="rollouts/reward_outlier_z and _frac (the training completions)",
        test="a few completions past `rollout_outlier_z` robust sigmas, held `rollout_outlier_for` rows",
        params=("rollout_outlier_z", "rollout_outlier_frac", "rollout_outlier_for"),
        means="the policy may have found a loophole the rest will copy",
        fix="read the outliers",
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/reward_outlier_z": 3.0 + 9.0 * after(i, 60),
                                  "rollouts/reward_outlier_frac": 0.05},
            lambda i, g: {**grpo(i, g), "rollouts/reward_outlier_z": 3.0, "rollouts/reward_outlier_frac": 0.05},
            100, 60, 61, "rollouts/reward_outlier_z"),
    ),
)


def reward_signal_rules(g: Gauge, row: Row) -> None:
    """Per-function reward shape: most completions at a function's ceiling; one function deciding alone."""
    v, p, d = row.values, g.p, g.derived
    cmax = v.get("rollouts/ceiling_frac_max")
    if cmax is not None and finite(cmax):
        d["rollout_ceiling_frac"] = cmax
    smax = v.get("rollouts/advantage_share_max")
    if smax is not None and finite(smax):
        d["rollout_advantage_share"] = smax
    if cmax is None and smax is None:
        return
    for key, x in v.items():
        if not key.startswith("rollouts/reward/") or not finite(x):
            continue
        fn, _, stat = key[16:].rpartition("/")
        if stat == "ceiling_frac":
            g.check(f"reward-ceiling:{fn}", x >= p["rollout_ceiling"], "warn", key, x,
                    lambda fn=fn, x=x: f"{x:.0%} of completions get the highest score reward function '{fn}' gives: "
                    "it no longer tells completions apart (the task is solved for these prompts, or the policy "
                    "found how to max it out). Groups where every completion is at the ceiling have no advantage "
                    "signal; read the examples, then use harder prompts or fix the loophole.",
                    for_=p["rollout_ceiling_for"], clear=5)
        elif stat == "advantage_share":
            g.check(f"advantage-decided-by:{fn}", x >= p["rollout_decides"], "info", key, x,
                    lambda fn=fn, x=x: f"reward function '{fn}' carries {x:.0%} of the within-group reward variance: "
                    "it alone decides which completions are reinforced; the other reward functions barely move "
                    "the advantage.", for_=p["rollout_decides_for"], clear=5)


#: The reward-signal gauge's rules on the training completions.
REWARD_SIGNAL_ROLLOUT_RULES: tuple[Rule, ...] = (
    Rule(
        "reward_signal", "reward-ceiling", severities=("warn",),
        reads="rollouts/reward/<fn>/ceiling_frac (the training completions)",
        test="at least `rollout_ceiling`, held `rollout_ceiling_for`",
        params=("rollout_ceiling", "rollout_ceiling_for"),
        means="the function no longer tells completions apart",
        fix="harder prompts, or fix the loophole",
        per_function=True,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/ceiling_frac_max": 0.3 + 0.6 * after(i, 60),
                                  "rollouts/reward/fmt/ceiling_frac": 0.3 + 0.6 * after(i, 60)},
            lambda i, g: {**grpo(i, g), "rollouts/ceiling_frac_max": 0.3, "rollouts/reward/fmt/ceiling_frac": 0.3},
            100, 60, 64, "rollouts/reward/fmt/ceiling_frac"),
    ),
    Rule(
        "reward_signal", "advantage-decided-by", severities=("info",),
        reads="rollouts/reward/<fn>/advantage_share",
        test="at least `rollout_decides`, held `rollout_decides_for` (info)",
        params=("rollout_decides", "rollout_decides_for"),
        means="one function alone decides the advantage",
        fix="check the other functions' weights",
        per_function=True,
        example=Example(
            "grpo", lambda i, g: {**grpo(i, g), "rollouts/advantage_share_max": 0.6 + 0.35 * after(i, 60),
                                  "rollouts/reward/acc/advantage_share": 0.6 + 0.35 * after(i, 60)},
            lambda i, g: {**grpo(i, g), "rollouts/advantage_share_max": 0.6,
                          "rollouts/reward/acc/advantage_share": 0.6},
            100, 60, 64, "rollouts/reward/acc/advantage_share"),
    ),
)
