"""Keys by meaning for any training loop: the user's own mapping, and common custom names recognised.

TRL, verl and OpenRLHF are read through their own vocabularies (``keys.py``, ``frameworks.py``). A hand-written
loop logs the same quantities under names of its author's choosing (``reward/mean``, ``train_reward``,
``policy/entropy``, ``optim/lr``, ``completion_tokens``), and a log read by TRL's names alone then looks like no
training log at all, or like SFT with nothing to judge. Two things fix that:

- a user mapping (``--map reward=reward/g``, ``keys:`` in alerts.yaml, ``watch(run, keys=...)``), which always
  wins: the mapped key is read, and any other key that would have meant the same thing is not;
- names recognised by pattern, each with a confidence: at :data:`APPLY` or above the key is read as that
  quantity (and the output says so); below, it is only offered as a ``--map`` suggestion. A held-out score is never
  taken for the gold by its name alone: whether a score was trained on is not in its name, and a gold that was in
  fact trained on would hide the reward hacking it is there to reveal, so gold names are only suggested.

Nothing here imports wandb or torch.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .text import clean_text, did_you_mean

#: The quantities a user may name (``--map ROLE=KEY``) and the canonical key each becomes. ``gold`` is apart:
#: each gold key becomes a held-out reward function ``rewards/<name>/mean`` that the reward gauge reads against
#: the trained reward.
ROLES: dict[str, str] = {
    "reward": "reward",
    "reward_std": "reward_std",
    "kl": "kl",
    "entropy": "entropy",
    "length": "completions/mean_length",
    "clipped_ratio": "completions/clipped_ratio",
    "lr": "learning_rate",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "eval_loss": "eval_loss",
    "clip_ratio": "clip_ratio/region_mean",
    "old_policy_kl": "policy/approxkl_avg",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "step": "step",
}
GOLD_ROLE = "gold"
ROLE_ALIASES = {"learning_rate": "lr", "completion_length": "length", "response_length": "length",
                "true_score": "gold", "grad": "grad_norm", "reward_mean": "reward"}
ALL_ROLES: tuple[str, ...] = (*ROLES, GOLD_ROLE)

#: At or above this confidence a recognised name is read; below it is only suggested.
APPLY = 0.5

# (pattern, role, confidence), matched in order on the lower-cased key; the first match wins. Patterns are
# fnmatch globs. Exclusions come first: a coefficient, a bound or a teacher's KL is not the quantity itself.
_EXCLUDE = ("*coef*", "*beta*", "*target*", "*/max", "*/min", "*_max", "*_min", "*max_*", "*min_*", "*teacher*",
            "*distill*", "*critic*", "*value*", "*vf_*", "*reward_model*", "*rm_*", "eval_*", "*/eval*", "val/*",
            "val_*", "test*", "*/count", "*_count", "*time*", "*timestamp*", "*throughput*", "*minus*", "*_diff*",
            "*/diff*", "*gap*", "*delta*")
_PATTERNS: tuple[tuple[str, str, float], ...] = (
    # reward spread before reward: train_reward_std is the spread, not the reward
    ("reward/std", "reward_std", 0.9), ("train_reward_std", "reward_std", 0.9), ("rewards/std", "reward_std", 0.85),
    ("std_reward", "reward_std", 0.8), ("reward_stdev", "reward_std", 0.8), ("*/reward_std", "reward_std", 0.8),
    ("*/reward/std", "reward_std", 0.8), ("*reward*std*", "reward_std", 0.4),
    # held-out scores: suggested as the gold, never read as it by name
    ("true_score", GOLD_ROLE, 0.8), ("*true_reward*", GOLD_ROLE, 0.8), ("*true_score*", GOLD_ROLE, 0.8),
    ("gold*", GOLD_ROLE, 0.8), ("*/gold*", GOLD_ROLE, 0.8), ("*_gold*", GOLD_ROLE, 0.8),
    ("*oracle*", GOLD_ROLE, 0.8), ("*held*out*", GOLD_ROLE, 0.7), ("*hidden*test*", GOLD_ROLE, 0.7),
    ("score", GOLD_ROLE, 0.4), ("*/score", GOLD_ROLE, 0.4), ("*correct*", GOLD_ROLE, 0.4),
    # the trained reward
    ("reward/mean", "reward", 0.9), ("rewards/mean", "reward", 0.9), ("reward_mean", "reward", 0.9),
    ("mean_reward", "reward", 0.85), ("train_reward", "reward", 0.9), ("train_reward_mean", "reward", 0.9),
    ("train_mean_reward", "reward", 0.9), ("reward/avg", "reward", 0.85), ("avg_reward", "reward", 0.85),
    ("reward_avg", "reward", 0.85), ("reward/total", "reward", 0.8), ("total_reward", "reward", 0.7),
    # a namespaced reward's total or mean (`train/reward/total`, `rollout/rewards/mean`, `env/reward/avg`): the
    # reward by meaning, whatever the loop calls its namespace; a component (`.../reward/<name>/mean`) is not it
    ("*/reward/total", "reward", 0.8), ("*/rewards/total", "reward", 0.8), ("rewards/total", "reward", 0.8),
    ("*/rewards/mean", "reward", 0.8), ("*/reward/avg", "reward", 0.8), ("*/rewards/avg", "reward", 0.8),
    ("*/reward/average", "reward", 0.8), ("reward/average", "reward", 0.8), ("*/reward_total", "reward", 0.7),
    ("reward_total", "reward", 0.7),
    ("*/reward_mean", "reward", 0.8), ("*/reward/mean", "reward", 0.8), ("*/mean_reward", "reward", 0.8),
    ("*/reward", "reward", 0.7), ("*/train_reward", "reward", 0.8), ("*reward*", "reward", 0.3),
    # entropy of the policy's tokens
    ("policy/entropy", "entropy", 0.9), ("entropy_mean", "entropy", 0.85), ("mean_entropy", "entropy", 0.85),
    ("policy_entropy", "entropy", 0.85), ("token_entropy", "entropy", 0.8), ("*/token_entropy", "entropy", 0.8),
    ("train_entropy", "entropy", 0.85), ("*_entropy_mean", "entropy", 0.75),
    ("*/entropy", "entropy", 0.7), ("*/entropy_mean", "entropy", 0.7), ("*/policy_entropy", "entropy", 0.8),
    ("*entropy*", "entropy", 0.3),
    # KL between the policy and the one it is sampled from: a ratio-health number, not the KL to the reference
    ("*ppo_kl*", "old_policy_kl", 0.7), ("*approx*kl*", "old_policy_kl", 0.7),
    ("*old*kl*", "old_policy_kl", 0.6), ("*kl*old*", "old_policy_kl", 0.6),
    # KL to the reference
    ("kl_mean", "kl", 0.9), ("mean_kl", "kl", 0.9), ("kl/mean", "kl", 0.9), ("*/kl", "kl", 0.8),
    ("*/kl_mean", "kl", 0.8), ("kl_div", "kl", 0.85), ("kl_divergence", "kl", 0.85), ("*_kl_div*", "kl", 0.8),
    ("*kl_divergence*", "kl", 0.8), ("*/kl_div*", "kl", 0.8), ("ref_kl", "kl", 0.85), ("*_kl", "kl", 0.6),
    ("*_kl_*", "kl", 0.5), ("kl_*", "kl", 0.5), ("*kl*", "kl", 0.2),
    # learning rate
    ("optim/lr", "lr", 0.95), ("*/lr", "lr", 0.8), ("*/learning_rate", "lr", 0.85), ("*_lr", "lr", 0.4),
    # completion length in tokens (means only; bounds are excluded above)
    ("completion_tokens", "length", 0.8), ("*/completion_tokens", "length", 0.75),
    ("mean_completion_tokens", "length", 0.8), ("response_len*", "length", 0.8), ("*/response_len*", "length", 0.7),
    ("*completion_len*", "length", 0.8), ("gen_len*", "length", 0.75), ("*generation_len*", "length", 0.75),
    ("*/gen_len*", "length", 0.7), ("mean_length", "length", 0.6), ("*/mean_length", "length", 0.6),
    ("*tokens*", "length", 0.2), ("*len*", "length", 0.2),
    # optimisation
    ("optim/grad_norm", "grad_norm", 0.9), ("*/grad_norm", "grad_norm", 0.85), ("gradient_norm", "grad_norm", 0.85),
    ("*/gradient_norm", "grad_norm", 0.8), ("grad_norm_*", "grad_norm", 0.3),
    ("loss/mean", "loss", 0.8), ("total_loss", "loss", 0.7), ("*/total_loss", "loss", 0.7),
    ("policy_loss", "loss", 0.6), ("*/policy_loss", "loss", 0.6), ("pg_loss", "loss", 0.6), ("*/pg_loss", "loss", 0.6),
    ("*/loss", "loss", 0.5), ("*loss*", "loss", 0.2),
)


@dataclass(frozen=True, slots=True)
class Guess:
    """What a custom key's name says it is: a role (``reward``, ``entropy``, ``gold`` ...) and how sure that is."""

    role: str
    confidence: float

    @property
    def applied(self) -> bool:
        """Read as that quantity (a gold is only ever suggested)."""
        return self.confidence >= APPLY and self.role != GOLD_ROLE


def guess_key(key: str) -> Guess | None:
    """The role a custom key's name suggests, with a confidence in (0, 1); None when the name says nothing."""
    k = key.strip().lower()
    if not k or len(k) > 200 or any(fnmatch.fnmatchcase(k, p) for p in _EXCLUDE):
        return None
    for pattern, role, confidence in _PATTERNS:
        if fnmatch.fnmatchcase(k, pattern):
            return Guess(role, confidence)
    return None


def gold_name(raw: str) -> str:
    """The reward-function name a gold key is read under (``rewards/<name>/mean``): its characters that are safe
    in such a name, so ``reward/f`` is the gold ``reward_f``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw.strip()).strip("_")[:80] or "gold"


def canonical_role(role: object) -> str | None:
    """``'LR'`` -> ``'lr'``; None for a role this tool does not know."""
    if not isinstance(role, str):
        return None
    r = role.strip().lower().replace("-", "_")
    r = ROLE_ALIASES.get(r, r)
    return r if r in ROLES or r == GOLD_ROLE else None


def role_problem(role: object, value: object, where: str = "keys") -> str | None:
    """What is wrong with one ``role: key`` entry of a mapping, or None. ``gold`` takes one key or a list."""
    r = canonical_role(role)
    if r is None:
        name = clean_text(str(role), 40)
        example = ("--map reward=reward/mean --map gold=true_score" if where.startswith("--") else
                   f"{where}: {{reward: reward/mean, gold: true_score}}")
        return (f"{where}: unknown quantity {name!r}{did_you_mean(name.lower(), ALL_ROLES)}; name one of "
                f"{', '.join(ALL_ROLES)} (e.g. {example})")
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        return f"{where}.{r} is an empty list; name the logged key(s), e.g. {r}: {_EXAMPLE.get(r, 'my/metric')}"
    if len(values) > 1 and r != GOLD_ROLE:  # only the gold may be several scores (averaged); one reward is read
        return (f"{where}.{r} names {len(values)} keys; name the one your loop logs it under, e.g. "
                f"{r}: {_EXAMPLE.get(r, 'my/metric')}")
    for v in values:
        if not isinstance(v, str) or not v.strip():
            shown = clean_text(repr(v), 60)
            what = "a logged key or a list of them" if r == GOLD_ROLE else "one logged key (a string)"
            return f"{where}.{r} must be {what}, not {shown}; e.g. {r}: {_EXAMPLE.get(r, 'my/metric')}"
        if len(v) > 300:
            return f"{where}.{r}: a key of {len(v)} characters is not a logged metric name"
    return None


_EXAMPLE = {"reward": "reward/mean", "gold": "true_score", "entropy": "policy/entropy", "lr": "optim/lr",
            "kl": "kl_divergence", "length": "completion_tokens"}


def check_keys(keys: object, where: str = "keys") -> tuple[dict[str, list[str]], list[str]]:
    """``{role: [raw keys]}`` from a user mapping (``{role: key}``; ``gold`` may be a list), and every problem,
    so a typo fails before the first row with all of them named. A key named for two quantities is a problem:
    one number cannot be both."""
    out: dict[str, list[str]] = {}
    problems: list[str] = []
    if keys is None:
        return out, problems
    if not isinstance(keys, Mapping):
        return out, [f"{where} must map a quantity to the key your loop logs it under, e.g. "
                     f"{{'reward': 'reward/mean', 'gold': 'true_score'}}, not {clean_text(repr(keys), 60)}"]
    owner: dict[str, str] = {}
    for role, value in keys.items():
        problem = role_problem(role, value, where)
        if problem:
            problems.append(problem)
            continue
        r = canonical_role(role)
        assert r is not None
        raws = [v.strip() for v in (value if isinstance(value, (list, tuple)) else [value])]
        for raw in raws:
            if raw in owner and owner[raw] != r:
                problems.append(f"{where}: {clean_text(raw, 60)!r} is named both {owner[raw]} and {r}; one logged key "
                                "is one quantity")
            owner[raw] = r
        out.setdefault(r, []).extend(x for x in raws if x not in out.get(r, []))
    return out, problems


def merge_keys(*layers: Mapping[str, object] | None) -> dict[str, object] | None:
    """User mappings, later layers winning per quantity (a ``--map`` over the alert file's ``keys:``)."""
    out: dict[str, object] = {}
    for layer in layers:
        for role, value in (layer or {}).items():
            out[canonical_role(role) or str(role)] = value
    return out or None


class KeyMap:
    """A user's mapping, checked: raw key -> canonical key, the canonical keys it claims, and the gold names.

    Raises ValueError naming every problem (an unknown quantity, a key that is not a string)."""

    __slots__ = ("roles", "raw", "claimed", "gold")

    def __init__(self, keys: Mapping[str, object] | None = None, where: str = "keys") -> None:
        roles, problems = check_keys(keys, where)
        if problems:
            raise ValueError("; ".join(problems))
        self.roles = roles
        self.raw: dict[str, str] = {}
        self.gold: list[str] = []
        for role, raws in roles.items():
            for raw in raws:
                if role == GOLD_ROLE:
                    name = gold_name(raw)
                    self.gold.append(name)
                    self.raw[raw] = f"rewards/{name}/mean"
                else:
                    self.raw[raw] = ROLES[role]
        #: canonical keys the user named: no other spelling and no guess may feed them
        self.claimed = frozenset(self.raw.values())

    def __bool__(self) -> bool:
        return bool(self.raw)

    def as_dict(self) -> dict[str, object]:
        """The mapping as given (``gold`` a list), for a checkpoint or the output."""
        return {r: (list(v) if r == GOLD_ROLE else v[0]) for r, v in self.roles.items()}


def readers(canonical: str, gauge_inputs: Mapping[str, Iterable[str]]) -> list[str]:
    """Ids of the gauges that read a canonical key (``gauge_inputs``: gauge id -> its inputs); a reward function's
    statistics go to the reward gauge (and its spread to the reward-signal gauge)."""
    out = [gid for gid, inputs in gauge_inputs.items() if canonical in inputs]
    if canonical.startswith("rewards/") and canonical.endswith("/mean"):
        out.append("reward")
    elif canonical.startswith("rewards/") and canonical.endswith("/std"):
        out.append("reward_signal")
    return out


def suggest_map(unread: Iterable[str], mapped_roles: Iterable[str] = ()) -> list[str]:
    """``role=key`` for the unread keys whose names suggest a quantity not read yet: the best-named key per
    quantity, and for the gold a held-out-looking key (or, where the trained reward is one of several ``reward``
    keys, another of them: a loop that logs ``reward/g`` and ``reward/f`` often trains on one and checks the
    other)."""
    taken = set(mapped_roles)
    best: dict[str, tuple[float, int, str]] = {}
    reward_like: list[str] = []
    for n, key in enumerate(unread):
        if type(key) is not str:
            continue
        g = guess_key(key)
        if g is None:
            continue
        if "reward" in key.lower() and g.role in ("reward", GOLD_ROLE):
            reward_like.append(key)
        if g.role in taken:
            continue
        score = (g.confidence, -n, key)
        if g.role not in best or score[:2] > best[g.role][:2]:
            best[g.role] = score
    out = [f"{role}={best[role][2]}" for role in (*ROLES, GOLD_ROLE) if role in best]
    chosen = {s.split("=", 1)[1] for s in out}
    if GOLD_ROLE not in best and GOLD_ROLE not in taken:
        others = [k for k in reward_like if k not in chosen]
        if others and (len(reward_like) > 1 or "reward" in taken):
            out.append(f"{GOLD_ROLE}={others[0]}")
    return out
