"""Key registry: one vocabulary for what every TRL trainer (and older TRL) logs.

Trainers log the same quantity under different names (``completion_length``
vs ``completions/mean_length``, ``clip_ratio`` vs ``clip_ratio/region_mean``,
W&B's ``train/loss`` vs ``loss``). Gauges read canonical names only; this
module maps a raw row onto them and guesses the trainer family from the keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .keymap import ROLES, KeyMap, guess_key

# Raw name -> canonical name. Canonical names are TRL 1.x's own.
ALIASES: dict[str, str] = {
    "completion_length": "completions/mean_length",
    "clip_ratio": "clip_ratio/region_mean",
    "lr": "learning_rate",
    "global_step": "step",
    "_step": "step",
    "Step": "step",
    # TRL < 0.12 PPOTrainer (PPOv1) names.
    "env/reward_mean": "objective/scores",
    "ppo/mean_scores": "objective/scores",
    "ppo/mean_non_score_reward": "objective/non_score_reward",
    "ppo/policy/clipfrac": "policy/clipfrac_avg",
    "ppo/policy/approxkl": "policy/approxkl_avg",
    "ppo/policy/entropy": "policy/entropy_avg",
    "ppo/val/clipfrac": "val/clipfrac_avg",
    "ppo/loss/value": "loss/value_avg",
    "ppo/loss/policy": "loss/policy_avg",
    "ppo/loss/total": "loss",
}

REWARD_TOTAL_NAMES = frozenset({"total", "mean", "avg", "average"})
"""``rewards/<x>`` where x says "all of it": the reward itself (a loop's total), not a reward function named x."""
# ``rewards/<x>`` keys that are DPO-family statistics, not reward functions.
PREFERENCE_REWARD_KEYS = frozenset(
    {"chosen", "rejected", "margins", "accuracies", "chosen_sum", "rejected_sum"}
)

# Inputs that only a live run can measure; the callback logs them as ``rlcluster/<key>``.
LIVE_INPUT_KEYS = frozenset({
    "attention_entropy/mean", "attention_entropy/head_std", "attention_entropy/max_possible",
    "lora/norm_mean", "lora/effective_rank", "lora/rank", "lora/rel_change", "lora/norm_cv",
    "samples/repetition_rate", "samples/distinct_2", "samples/mean_chars",
    "gradients/nonfinite", "gradients/layer_spread", "gradients/sparsity",
    "efficiency/tokens_per_s", "efficiency/steps_per_s", "efficiency/mem_frac", "efficiency/util",
    "efficiency/rss_gb",
    # rollout statistics (RLClusterCallback.attach, or TRL's completions table offline): what they mean is in
    # core/rollouts.py ROLLOUT_KEYS, with the per-reward-function ones; tests/test_rollouts.py keeps both lists equal
    "rollouts/completions", "rollouts/groups", "rollouts/mean_length", "rollouts/length_reward_corr",
    "rollouts/length_reward_dof", "rollouts/identical_group_frac", "rollouts/near_identical_group_frac",
    "rollouts/distinct_frac", "rollouts/empty_frac", "rollouts/no_eos_frac", "rollouts/repetition_mean",
    "rollouts/repetitive_frac", "rollouts/reward_outlier_frac", "rollouts/reward_outlier_z",
    "rollouts/ceiling_frac_max", "rollouts/advantage_share_max",
})
LIVE_INPUT_PREFIXES = frozenset(k.split("/", 1)[0] for k in LIVE_INPUT_KEYS)

# What TRL 1.16 / transformers 5 trainers log, by name (the per-reward-function keys ``rewards/<fn>/mean`` and
# ``rewards/<fn>/std`` are open-ended: see ``is_reward_function_key``). Alert-rule validation uses this list to
# tell a typo from a metric rlcluster knows; nothing is read from it at training time.
TRL_LOGGED_KEYS = frozenset({
    # every trainer (transformers' Trainer), eval and end-of-run summary rows
    "loss", "grad_norm", "learning_rate", "epoch", "num_tokens", "mean_token_accuracy", "entropy",
    "eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second",
    "train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss",
    # GRPO / RLOO
    "reward", "reward_std", "frac_reward_zero_std", "kl", "step_time",
    "completions/mean_length", "completions/min_length", "completions/max_length", "completions/clipped_ratio",
    "completions/mean_terminated_length", "completions/min_terminated_length", "completions/max_terminated_length",
    "clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max",
    "clip_ratio/region_mean",
    # DPO / KTO / ORPO / reward model
    "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
    "logps/chosen", "logps/rejected", "logits/chosen", "logits/rejected", "accuracy", "margin",
    # PPO (objective/kl is a per-sequence sum)
    "eps", "episode", "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
    "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "policy/entropy_avg", "loss/policy_avg",
    "loss/value_avg", "val/clipfrac_avg", "val/ratio", "val/ratio_var", "val/num_eos_tokens",
})


def is_reward_function_key(key: str) -> bool:
    """``rewards/<fn>/mean`` or ``rewards/<fn>/std``: one reward function's statistics (GRPO/RLOO)."""
    parts = key.split("/")
    return len(parts) == 3 and parts[0] == "rewards" and bool(parts[1]) and parts[2] in ("mean", "std")
SUMMARY_KEYS = frozenset({"train_runtime", "train_loss", "total_flos"})

#: Canonical keys a gauge, TRL or a framework profile gives a meaning: a key outside these (and the prefixes below)
#: is a custom loop's own name, which is read by what its name means (``keymap.py``) or reported as unread.
KNOWN_KEYS = TRL_LOGGED_KEYS | LIVE_INPUT_KEYS | frozenset(ALIASES.values()) | frozenset({
    "step", "policy/entropy_avg", "val/contain_eos_token", "efficiency/tokens_per_s", "log_odds_ratio",
    "log_odds_chosen", "nll_loss", "mean_reward"})
KNOWN_PREFIXES = ("eval_", "rewards/", "rollouts/", "rlcluster/")
#: Canonical keys that only a training row carries: a row with one of them and an ``eval_*`` key (a custom loop
#: that logs its evaluation beside its training numbers) is a training row.
TRAIN_ONLY_KEYS = frozenset({"loss", "reward", "kl", "entropy", "grad_norm", "learning_rate"})
#: Keys whose resolution is recorded for the output (a hostile log with a new key on every row stays bounded).
KEY_REPORT_MAX = 512


def is_known_key(canonical: str) -> bool:
    """True for a canonical key that TRL, a gauge or a framework profile gives a meaning."""
    return canonical in KNOWN_KEYS or canonical.startswith(KNOWN_PREFIXES)

FAMILIES = ("grpo", "dpo", "kto", "orpo", "online_dpo", "ppo", "reward", "sft")

FAMILY_LABELS = {
    "grpo": "GRPO / RLOO",
    "dpo": "DPO",
    "kto": "KTO",
    "orpo": "ORPO / CPO",
    "online_dpo": "Online DPO",
    "ppo": "PPO",
    "reward": "Reward model",
    "sft": "SFT",
}

_TRAINER_ALIASES = {
    "rloo": "grpo",
    "grpo": "grpo",
    "cpo": "orpo",
    "orpo": "orpo",
    "onlinedpo": "online_dpo",
    "online-dpo": "online_dpo",
    "online_dpo": "online_dpo",
    "xpo": "online_dpo",
    "nash_md": "online_dpo",
    "rewardtrainer": "reward",
}


def canonical_family(name: str) -> str:
    """``'RLOO'`` -> ``'grpo'``; raises ValueError on an unknown trainer name."""
    key = name.strip().lower().replace("trainer", "") or name.lower()
    key = _TRAINER_ALIASES.get(key, key)
    if key not in FAMILIES:
        raise ValueError(f"unknown trainer {name!r}; expected one of: {', '.join(FAMILIES)} (or rloo, cpo)")
    return key


def _canonical_key(raw: str) -> str | None:
    """Canonical name of a raw key, or None for keys that carry no signal."""
    key = raw.strip()
    if " - " in key:  # W&B CSV export: "<run name> - train/loss"
        key = key.rsplit(" - ", 1)[1]
    if key.endswith("__MIN") or key.endswith("__MAX"):
        return None
    if key.startswith("train/"):
        key = key[6:]
        if key == "global_step":
            return "step"
    elif key.startswith("eval/"):
        key = "eval_" + key[5:]
    if key.startswith("rlcluster/"):
        # Our own W&B keys: the live probes' raw inputs feed the live-only gauges when a run is
        # analysed offline; derived values and statuses are outputs, not inputs.
        rest = key[10:]
        if rest.startswith("rollouts/reward/"):  # per-reward-function rollout statistics (attach())
            return rest
        return rest if rest.split("/", 1)[0] in LIVE_INPUT_PREFIXES and rest in LIVE_INPUT_KEYS else None
    if key in ALIASES:
        return ALIASES[key]
    if (key.startswith("_") and key != "_step") or key.startswith("profiling/"):
        return None  # W&B bookkeeping, TRL's per-function timings
    if key.startswith("rewards/"):
        rest = key[8:]
        if rest in REWARD_TOTAL_NAMES:  # `rewards/total`, `train/rewards/mean`: the reward, not a function so named
            return "reward"
        if "/" not in rest and rest not in PREFERENCE_REWARD_KEYS:
            return f"rewards/{rest}/mean"  # older TRL: rewards/<fn> without /mean
    return key


def to_float(value: object) -> float | None:
    """A float for anything number-like (``"0.5"``, ``"NaN"``, True); None otherwise.

    A number too large for a float (``10**400``, ``"1e999"``) is infinite, with its sign: a gauge
    treats it as non-finite, like NaN, instead of failing on it. Nothing here raises.
    """
    t = type(value)
    if t is float:
        return value  # type: ignore[return-value]
    if t is int:
        return _int_to_float(value)  # type: ignore[arg-type]
    if t is bool:
        return 1.0 if value else 0.0
    if t is str:
        s = value.strip().lower()  # type: ignore[attr-defined]
        if s in ("nan", "+nan", "-nan"):
            return math.nan
        if s in ("inf", "+inf", "infinity", "+infinity"):
            return math.inf
        if s in ("-inf", "-infinity"):
            return -math.inf
        try:
            return float(s)
        except ValueError:
            return None
    if isinstance(value, int):  # int subclasses (IntEnum, numpy ints that subclass int)
        return _int_to_float(int(value))
    try:  # numpy scalars, torch 0-d tensors' .item() results, Decimals
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return None
    except Exception:  # noqa: BLE001 - a foreign object's __float__ may raise anything: skip the value
        return None


def _int_to_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


@dataclass(slots=True)
class Row:
    """A normalised log row: canonical keys, float values (NaN/inf kept)."""

    step: int
    kind: str  # "train" | "eval" | "summary"
    values: dict[str, float]
    index: int = 0

    def get(self, key: str) -> float | None:
        return self.values.get(key)


@dataclass
class Normalizer:
    """Maps raw rows to :class:`Row`, keeping steps monotonic.

    A step counter that restarts (two logs concatenated, a second stage that
    counts from zero) is shifted so that steps keep increasing; ``restarts``
    records where that happened. Rows without a step get the previous step
    plus one.
    """

    _key_cache: dict[str, str | None] = field(default_factory=dict)
    #: a framework's key profile (``core/frameworks.py``), consulted before the TRL vocabulary
    profile: Any = None
    #: the user's mapping (``keymap.KeyMap``): consulted first, and what it names no other key feeds
    keymap: KeyMap | None = None
    #: read a custom loop's keys by what their names mean (``keymap.guess_key``)
    recognise: bool = True
    #: raw key -> (canonical key, how: ``map`` or ``name``, confidence) for every key read by the user's mapping or
    #: by its name; and the keys read under no meaning: raw key -> (the role its name suggests, confidence) or None
    read_by_meaning: dict[str, tuple[str, str, float]] = field(default_factory=dict, repr=False, compare=False)
    unread: dict[str, tuple[str, float] | None] = field(default_factory=dict, repr=False, compare=False)
    #: raw keys the user's mapping replaced (another key was named for what they mean)
    replaced: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    last_step: int = 0
    offset: int = 0
    count: int = 0
    restarts: list[int] = field(default_factory=list)
    _raw_last: float | None = None
    #: the last row shape's keys, and its plan: (raw key, canonical key) for every key read, None where the shape
    #: needs the general path (a key that is not a string, two raw keys for one canonical name)
    _shape: tuple[object, ...] = field(default=(), repr=False, compare=False)
    _plan: tuple[tuple[str, str], ...] | None = field(default=None, repr=False, compare=False)
    _plan_kind: str = field(default="", repr=False, compare=False)
    #: plans of the shapes seen (a live run alternates train, eval and end-of-training rows), bounded
    _plans: dict[tuple[object, ...], tuple[tuple[tuple[str, str], ...] | None, str]] = field(
        default_factory=dict, repr=False, compare=False)

    def key(self, raw: str) -> str | None:
        try:
            return self._key_cache[raw]
        except KeyError:
            canon = self._resolve(raw)
            self._key_cache[raw] = canon
            return canon

    def _resolve(self, raw: str) -> str | None:
        """The canonical key of a raw key: the user's mapping, else the framework's or TRL's name, else (for a
        name none of them knows) what the name means, when it says so with confidence."""
        keymap = self.keymap
        room = len(self.read_by_meaning) + len(self.unread) < KEY_REPORT_MAX
        if keymap is not None and raw in keymap.raw:
            canon: str | None = keymap.raw[raw]
            if room:
                self.read_by_meaning[raw] = (canon, "map", 1.0)  # type: ignore[assignment]
            return canon
        known, canon = self.profile.canonical(raw) if self.profile is not None else (False, None)
        if not known:
            canon = _canonical_key(raw)
        if canon is None:
            return None
        if keymap is not None and canon in keymap.claimed:
            if room:
                self.replaced[raw] = canon
            return None  # the user named another key for this: theirs is read
        if not self.recognise or is_known_key(canon):
            return canon
        guess = guess_key(canon)
        if guess is not None and guess.applied:
            target = ROLES[guess.role]
            if keymap is None or target not in keymap.claimed:
                if room:
                    self.read_by_meaning[raw] = (target, "name", guess.confidence)
                return target
            if room:  # the user named another key for what this name means: kept under its own name, unread
                self.replaced[raw] = target
            return canon
        if room:
            self.unread[raw] = (guess.role, guess.confidence) if guess is not None else None
        return canon

    def normalize(self, raw: Mapping[str, object]) -> Row | None:
        """A Row, or None if the mapping holds nothing usable."""
        shape = tuple(raw)
        try:
            same = shape == self._shape
        except Exception:  # noqa: BLE001 - a hostile key's __eq__: such a row takes the general path
            same, self._shape, self._plan = True, (), None
        if not same:
            self._set_shape(shape)
        plan = self._plan
        if plan is None:
            values = self._values(raw)
            kind = ""
        else:  # the rows of a log mostly share one shape: its keys are resolved once
            values = {}
            kind = self._plan_kind
            for k, canon in plan:
                v = raw[k]
                if type(v) is float:
                    values[canon] = v
                else:
                    f = to_float(v)
                    if f is None:
                        kind = ""  # one odd value is skipped: the row's keys are not the shape's
                        continue
                    values[canon] = f
        raw_step = values.pop("step", None)
        if "train/global_step" in raw:  # W&B rows carry both _step and the trainer's step: the trainer's wins
            raw_step = to_float(raw["train/global_step"])
        if not values:
            return None
        self.count += 1
        step = self._step_for(raw_step)
        if not kind:
            kind = _row_kind(values)
        return Row(step, kind, values, self.count - 1)

    def _set_shape(self, shape: tuple[object, ...]) -> None:
        """Switch to another row shape's plan, resolving its keys the first time it is seen."""
        try:
            known = self._plans.get(shape)
        except Exception:  # noqa: BLE001 - a key that cannot be hashed or compared (a hostile mapping)
            known = (None, "")
        if known is None:
            known = self._new_plan(shape)
            if len(self._plans) >= 64:  # a log whose every row has new keys: bounded memory
                self._plans.clear()
            self._plans[shape] = known
        self._shape = shape
        self._plan, self._plan_kind = known

    def _new_plan(self, shape: tuple[object, ...]) -> tuple[tuple[tuple[str, str], ...] | None, str]:
        """A row shape's plan: (raw key, canonical key) for every key read, and the row kind those keys give;
        None where the shape needs the general path (a key that is not a string, two raw keys for one name)."""
        plan: list[tuple[str, str]] = []
        canons: set[str] = set()
        for k in shape:
            if type(k) is not str:
                return None, ""
            canon = self.key(k)
            if canon is None:
                continue
            if canon in canons:
                return None, ""  # an alias and its canonical spelling in one row: the general path decides
            canons.add(canon)
            plan.append((k, canon))
        canons.discard("step")
        return tuple(plan), (_row_kind(canons) if canons else "")

    def _values(self, raw: Mapping[str, object]) -> dict[str, float]:
        """The general path: every key resolved and every value converted on its own."""
        values: dict[str, float] = {}
        cache = self._key_cache
        for k, v in raw.items():
            if type(k) is not str:
                continue
            canon = cache[k] if k in cache else self.key(k)
            if canon is None:
                continue
            t = type(v)
            f = v if t is float else to_float(v)  # one odd value is skipped; the rest of the row counts
            if f is None:
                continue
            if canon in values and canon != k:
                continue  # the canonical spelling wins over an alias in the same row
            values[canon] = f  # type: ignore[assignment]
        return values

    def _step_for(self, raw_step: float | None) -> int:
        if raw_step is None or not math.isfinite(raw_step) or not -(2**53) < raw_step < 2**53:
            step = self.last_step + (1 if self.count > 1 else 0)
        else:
            step = int(raw_step) + self.offset
            if self._raw_last is not None and step < self.last_step:
                # The counter went backwards: a restart, not a time machine.
                self.restarts.append(self.count - 1)
                self.offset = self.last_step - int(raw_step) + 1
                step = int(raw_step) + self.offset
            self._raw_last = raw_step
        self.last_step = max(self.last_step, step)
        return step

    def state_dict(self) -> dict[str, object]:
        return {"last_step": self.last_step, "offset": self.offset, "count": self.count,
                "restarts": list(self.restarts), "raw_last": self._raw_last}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.last_step = int(state.get("last_step", 0))
        self.offset = int(state.get("offset", 0))
        self.count = int(state.get("count", 0))
        self.restarts = [int(x) for x in state.get("restarts", [])]
        raw_last = state.get("raw_last")
        self._raw_last = float(raw_last) if raw_last is not None else None


def _row_kind(keys: Iterable[str]) -> str:
    """``summary`` (the trainer's end-of-training row), ``eval`` or ``train``, from a row's canonical keys."""
    if not SUMMARY_KEYS.isdisjoint(keys) and "loss" not in keys:
        return "summary"
    if TRAIN_ONLY_KEYS.isdisjoint(keys) and any(k.startswith("eval_") for k in keys):
        return "eval"
    return "train"


def detect_family(keys: Iterable[str]) -> str:
    """Guess the trainer family from the canonical keys seen in a log."""
    ks = set(keys)
    has = ks.__contains__
    if has("log_odds_ratio") or has("log_odds_chosen") or (has("nll_loss") and has("rewards/margins")):
        return "orpo"
    if has("objective/kl") or has("objective/scores") or has("objective/rlhf_reward"):
        if has("rewards/margins") or has("rewards/chosen") or has("val/contain_eos_token"):
            return "online_dpo"
        return "ppo"
    if has("val/ratio") or has("policy/approxkl_avg") or has("policy/clipfrac_avg") or has("loss/value_avg"):
        return "ppo"
    if has("rewards/margins") or has("rewards/chosen") or has("rewards/accuracies"):
        if has("kl") and not has("rewards/accuracies"):
            return "kto"
        return "dpo"
    if (
        has("frac_reward_zero_std")
        or has("reward_std")
        or has("completions/mean_length")
        or has("clip_ratio/region_mean")
        or any(k.startswith("rewards/") and k.endswith("/mean") for k in ks)
    ):
        return "grpo"
    if has("reward") and (has("kl") or has("entropy")):
        return "grpo"
    if has("accuracy") and (has("margin") or has("mean_reward")):
        return "reward"
    if has("reward") or has("reward_std"):  # no supervised trainer logs a policy's reward: an RL loop
        return "grpo"
    return "sft"
