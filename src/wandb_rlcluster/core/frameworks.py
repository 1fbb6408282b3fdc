"""Key profiles for RL engines beyond TRL: verl and OpenRLHF, mapped onto the gauges by meaning.

The gauges read TRL's canonical names (``core/keys.py``). verl and OpenRLHF log the same quantities under
other names, and some of their names mean something else than the TRL name they look like. Each profile
below says, per raw key, which canonical quantity it IS (read from the frameworks' own sources), and which
of their keys no gauge reads (dropped before the gauges see the row, which also keeps per-row work small).
A key a profile does not name passes through under its own name (``core/keys.py``), so an alert rule may
still be written on any raw verl or OpenRLHF key.

The traps, from verl's code (``verl/trainer/ppo/core_algos.py``, ``metric_utils.py``, ``ray_trainer.py``,
``workers/actor/dp_actor.py``):

- ``actor/ppo_kl`` is the KL between the policy that sampled the batch and the one being updated (a
  ratio-health number, TRL PPO's ``policy/approxkl_avg``), NOT the KL to the reference. KL to the reference
  is ``actor/kl_loss`` (``use_kl_loss``: added to the loss, per token, ``low_var_kl`` etc.) or, when the KL
  sits inside the reward (``use_kl_in_reward``), ``critic/kl`` (older verl) / ``actor/reward_kl_penalty``.
  All three are per-token means, as TRL GRPO's ``kl``: the per-token thresholds apply (family ``grpo``).
- ``critic/score/*`` is the task score (the reward function's output); ``critic/rewards/*`` is that score
  after the KL penalty, the quantity PPO maximises. The trained reward is the proxy, the score the gold:
  the profile names the score as a gold reward (``rewards/score/mean``), so the reward gauge's proxy/gold
  rules see a shaped reward that rises while the task score falls.
- ``response_length/clip_ratio`` is the share of responses cut at ``max_response_length`` (truncation,
  TRL's ``completions/clipped_ratio``); ``actor/entropy`` was ``actor/entropy_loss`` in older verl (the
  entropy itself, not a loss); ``actor/lr(1e-4)`` (older verl) is the learning rate in units of 1e-4 and is
  not read (a learning rate off by 1e4 would be silently wrong); ``timing_s/*`` was ``timing/*``;
  ``val-core/<data>/<var>/mean@N`` (was ``val/test_score/<data>``) is evaluation, which no gauge reads.

OpenRLHF (``openrlhf/trainer/ppo_trainer.py``, ``ray/ppo_actor.py``, ``ray/ppo_critic.py``) logs
``train/<key>`` on ``train/global_step``: ``reward`` is the reward model's (or verifier's) score and
``return`` the shaped return with the KL penalty in it (proxy/gold as verl's score/rewards); ``kl`` is the
per-token KL to the reference; ``ppo_kl`` old-vs-new policy; ``ppo_clip_ratio`` the clipped-token share;
``entropy_loss`` the entropy itself; ``policy_loss``, ``actor_lr``, ``actor_grad_norm``, ``critic_loss``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: The name a profile gives the task score as a gold reward (``rewards/<GOLD>/mean``).
GOLD = "score"


@dataclass(frozen=True)
class Profile:
    """One framework's vocabulary: raw key -> canonical key (None: not read), plus how to read the run."""

    name: str
    label: str
    #: the trainer family whose semantics the framework's numbers share (per-token KL, entropy, lengths)
    family: str
    aliases: Mapping[str, str | None]
    #: raw-key prefixes no gauge reads (timings, batch bookkeeping): dropped before the gauges see the row
    drop_prefixes: tuple[str, ...] = ()
    #: evaluation keys: kept as ``eval_<raw key>``, so a row of them alone is an evaluation row, not a training row
    eval_prefixes: tuple[str, ...] = ()
    #: gauge parameters the framework implies, under the user's own (``{"reward": {"gold": ["score"]}}``)
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: raw keys that say a row comes from this framework
    markers: frozenset[str] = frozenset()

    def canonical(self, raw: str) -> tuple[bool, str | None]:
        """(known, canonical key): known is False for a key this profile says nothing about."""
        if raw in self.aliases:
            return True, self.aliases[raw]
        if raw.startswith(self.eval_prefixes):
            return True, "eval_" + raw
        if raw.startswith(self.drop_prefixes):
            return True, None
        return False, None



_VERL_ALIASES: dict[str, str | None] = {
    # reward: the shaped reward is what PPO maximises (proxy); the task score is the gold
    "critic/rewards/mean": "reward",
    "critic/score/mean": f"rewards/{GOLD}/mean",
    # KL to the reference, per token: as a loss, or inside the reward (old and new names)
    "actor/kl_loss": "kl",
    "actor/reward_kl_penalty": "kl",
    "critic/kl": "kl",
    # old-vs-new policy KL: a ratio-health number, never the KL to the reference
    "actor/ppo_kl": "policy/approxkl_avg",
    "actor/pg_clipfrac": "policy/clipfrac_avg",
    "actor/entropy": "entropy",
    "actor/entropy_loss": "entropy",  # verl < 0.3: the entropy itself under a loss's name
    "actor/pg_loss": "loss",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "learning_rate",
    "actor/lr(1e-4)": None,  # in units of 1e-4: never read as a learning rate
    "critic/lr(1e-4)": None,
    "critic/vf_loss": "loss/value_avg",
    "critic/vf_clipfrac": "val/clipfrac_avg",
    "response_length/mean": "completions/mean_length",
    "response_length/max": "completions/max_length",
    "response_length/min": "completions/min_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    "timing_s/step": "step_time",
    "timing/step": "step_time",
    # the reference's log-prob pass and the policy's own, over the same batch: their ratio is the models' cost ratio
    "timing_s/ref": "ref_logprob_time",
    "timing_s/old_log_prob": "policy_logprob_time",
    "perf/throughput": "efficiency/tokens_per_s",
    "training/global_step": "step",
    "training/epoch": "epoch",
}
_VERL_DROP = (
    "timing_s/", "timing/", "timing_per_token_ms/", "perf/", "global_seqlen/", "prompt_length/",
    "response_length_non_aborted/", "critic/advantages/", "critic/returns/", "critic/values/", "critic/kl_coeff",
    "actor/kl_coef", "actor/reward_kl_penalty_coeff", "num_turns/", "tool_call_counts/",
)
_VERL_EVAL = ("val-core/", "val-aux/", "val/", "test_score/")

_OPENRLHF_KEYS: dict[str, str | None] = {
    "return": "reward",  # the shaped return (KL penalty inside): what PPO maximises, the proxy
    "reward": f"rewards/{GOLD}/mean",  # the reward model's / verifier's score: the gold
    "kl": "kl",
    "ppo_kl": "policy/approxkl_avg",
    "ppo_clip_ratio": "policy/clipfrac_avg",
    "entropy_loss": "entropy",
    "policy_loss": "loss",
    "actor_lr": "learning_rate",
    "actor_grad_norm": "grad_norm",
    "critic_loss": "loss/value_avg",
    "response_length": "completions/mean_length",
    "total_length": None,
    "values": None,
    "critic_lr": None,
    "critic_grad_norm": None,
    "logprobs_diff": None,
    "vllm_kl": None,
}
_OPENRLHF_ALIASES: dict[str, str | None] = {
    **{f"train/{k}": v for k, v in _OPENRLHF_KEYS.items()},
    "train/global_step": "step",
}

VERL = Profile(
    name="verl", label="verl", family="grpo",
    aliases=MappingProxyType(_VERL_ALIASES), drop_prefixes=_VERL_DROP, eval_prefixes=_VERL_EVAL,
    params=MappingProxyType({"reward": {"gold": [GOLD]}}),
    markers=frozenset({"critic/score/mean", "critic/rewards/mean", "actor/pg_loss", "actor/ppo_kl",
                       "actor/kl_loss", "actor/entropy", "actor/entropy_loss", "response_length/mean",
                       "actor/pg_clipfrac"}),
)
OPENRLHF = Profile(
    name="openrlhf", label="OpenRLHF", family="grpo",
    aliases=MappingProxyType(_OPENRLHF_ALIASES),
    params=MappingProxyType({"reward": {"gold": [GOLD]}}),
    markers=frozenset({"train/policy_loss", "train/actor_lr", "train/ppo_clip_ratio", "train/return",
                       "train/ppo_kl", "train/actor_grad_norm", "train/critic_loss"}),
)

PROFILES: dict[str, Profile] = {p.name: p for p in (VERL, OPENRLHF)}
#: every framework name accepted: ``trl`` (the default vocabulary, no profile) and the profiles
FRAMEWORKS: tuple[str, ...] = ("trl", *PROFILES)
FRAMEWORK_LABELS: dict[str, str] = {"trl": "TRL / transformers", **{p.name: p.label for p in PROFILES.values()}}


def get_profile(name: str | None) -> Profile | None:
    """The profile for ``name`` (case-insensitive), None for ``trl``/None; ValueError naming the choices."""
    if name is None:
        return None
    key = str(name).strip().lower()
    if key in ("trl", "transformers", "hf"):
        return None
    if key not in PROFILES:
        raise ValueError(f"unknown framework {name!r}; expected one of: {', '.join(FRAMEWORKS)}")
    return PROFILES[key]


def detect_framework(keys: Iterable[str]) -> str:
    """``verl``, ``openrlhf`` or ``trl`` from the raw keys of a log's first rows."""
    ks = {k for k in keys if type(k) is str}
    best, hits = "trl", 0
    for p in PROFILES.values():
        n = len(p.markers & ks)
        if n > hits:
            best, hits = p.name, n
    return best


def detect_framework_rows(rows: Iterable[Mapping[str, object]], limit: int = 16) -> str:
    """:func:`detect_framework` over the keys of the first ``limit`` mapping rows."""
    keys: set[str] = set()
    for n, row in enumerate(rows):
        if n >= limit:
            break
        if isinstance(row, Mapping):
            keys.update(k for k in row if type(k) is str)
    return detect_framework(keys)


def profile_params(profile: Profile | None, params: Any) -> Any:
    """The framework's implied gauge parameters under the user's (the user's win per gauge and name). Without a
    profile, or with parameters of the wrong shape, ``params`` comes back as given: the cluster's own check names
    what is wrong with them."""
    if profile is None or not profile.params or (params is not None and not isinstance(params, Mapping)):
        return params
    out: dict[str, Any] = {g: dict(ps) for g, ps in profile.params.items()}
    for g, ps in (params or {}).items():
        if isinstance(ps, Mapping) and isinstance(out.get(g), dict):
            out[g].update(ps)
        else:  # a malformed layer: left for the cluster's own check to name
            out[g] = ps
    return out
