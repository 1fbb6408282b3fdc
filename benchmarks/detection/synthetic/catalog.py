"""What the corpus holds: trainer families, the keys each logs, and the labelled pathologies.

Each pathology says which trainer families can have it, which gauges should catch it (the benchmark's
recall counts a warn/stop finding from any of them at or after onset), what kind of signal it is, and
where its onset may fall. The kinds group the benchmark's targets:

* ``trend``: a level moving against the run's own history (a slope, an acceleration, a shift or a
  plateau), long before any fixed line is crossed: clip fraction growing, KL accelerating, length
  creeping, margins plateauing or converging, reward shifting, proxy and gold reward parting;
* ``spread``: the noise or the within-batch spread changing while the level stays: KL turning noisy,
  length variance collapsing or growing, reward variance, ratio variance, a loss oscillating;
* ``level``: a quantity crossing a line the posts name (KL > 1, clip > 30 %, length 2x, ...);
* ``event``: NaN, a dead run, a loss spike;
* ``config``: present from the first step (KL ~ 0 throughout, a learning rate that never reaches its
  peak); its "delay" is measured from the first row.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EVAL_KEYS",
    "FAMILIES",
    "FAMILY_KEYS",
    "GOLD_FUNC",
    "KINDS",
    "PATHOLOGIES",
    "REWARD_FUNCS",
    "SUMMARY_KEYS",
    "COMPOUND",
    "DIAGNOSIS",
    "Pathology",
    "combinations",
    "expected_gauges",
]

FAMILIES: tuple[str, ...] = ("grpo", "grpo_kl", "dpo", "ppo", "sft")
"""``grpo`` is TRL's default (beta = 0: no ``kl`` key; on-policy unless the run draws num_iterations > 1,
then its clip ratios are non-zero); ``grpo_kl`` has beta > 0 and logs the per-token ``kl``."""

REWARD_FUNCS: tuple[str, ...] = ("accuracy_reward", "format_reward")
"""The trained reward functions of the GRPO runs (weights 1, 1)."""
GOLD_FUNC = "hidden_tests"
"""A held-out check logged with weight 0 (``reward_weights=[1, 1, 0]``): ``rewards/hidden_tests/mean``
is in the log but not in ``reward``. Present on about half the GRPO runs and on every ``gold_divergence``
run; ``SyntheticRun.gold`` names it when it is there."""

KINDS: tuple[str, ...] = ("trend", "spread", "level", "event", "config")

_COMMON_KEYS = ("loss", "grad_norm", "learning_rate")
_GRPO_KEYS = (
    "num_tokens",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
    *(f"rewards/{fn}/{stat}" for fn in REWARD_FUNCS for stat in ("mean", "std")),
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_mean",
    "clip_ratio/high_max",
    "clip_ratio/region_mean",
    "step_time",
)
GRPO_GOLD_KEYS: tuple[str, ...] = (f"rewards/{GOLD_FUNC}/mean", f"rewards/{GOLD_FUNC}/std")
_DPO_KEYS = (
    "entropy",
    "num_tokens",
    "logits/chosen",
    "logits/rejected",
    "mean_token_accuracy",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)
_PPO_KEYS = (
    "eps",
    "objective/kl",
    "objective/entropy",
    "objective/non_score_reward",
    "objective/rlhf_reward",
    "objective/scores",
    "policy/approxkl_avg",
    "policy/clipfrac_avg",
    "loss/policy_avg",
    "loss/value_avg",
    "val/clipfrac_avg",
    "policy/entropy_avg",
    "val/ratio",
    "val/ratio_var",
    "val/num_eos_tokens",
    "episode",
)
_SFT_KEYS = ("entropy", "num_tokens", "mean_token_accuracy")
_TAIL_KEYS = ("epoch", "step")

FAMILY_KEYS: dict[str, tuple[str, ...]] = {
    "grpo": (*_COMMON_KEYS, *_GRPO_KEYS, *_TAIL_KEYS),
    "grpo_kl": (*_COMMON_KEYS, *_GRPO_KEYS[:-7], "kl", *_GRPO_KEYS[-7:], *_TAIL_KEYS),
    "dpo": (*_COMMON_KEYS, *_DPO_KEYS, *_TAIL_KEYS),
    "ppo": (*_COMMON_KEYS, *_PPO_KEYS, *_TAIL_KEYS),
    "sft": (*_COMMON_KEYS, *_SFT_KEYS, *_TAIL_KEYS),
}
"""Keys of every train row per family, in TRL's order (a GRPO run with a gold reward adds
``GRPO_GOLD_KEYS`` after the trained functions' keys; eval and summary rows carry their own keys)."""

EVAL_KEYS: tuple[str, ...] = ("eval_loss", "eval_runtime", "eval_samples_per_second", "epoch", "step")
SUMMARY_KEYS: tuple[str, ...] = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "total_flos",
    "train_loss",
    "epoch",
    "step",
)


@dataclass(frozen=True)
class Pathology:
    """A labelled failure mode: where it can occur, which gauges should catch it, what kind it is."""

    name: str
    families: tuple[str, ...]
    gauges: tuple[str, ...]
    """Gauge ids expected to flag it (union over families; any one of them counts)."""
    kind: str
    description: str
    onset: tuple[float, float] | None = None
    """Where the onset may fall (fractions of the run) when it is not the benchmark's default range;
    ``(0, 0)`` means present from the first logged row."""

    @property
    def from_start(self) -> bool:
        return self.onset == (0.0, 0.0)


_ALL = FAMILIES
_GRPOS = ("grpo", "grpo_kl")
_RL = ("grpo", "grpo_kl", "ppo")
_KL = ("grpo_kl", "ppo")

PATHOLOGIES: dict[str, Pathology] = {
    p.name: p
    for p in (
        # -- the first release's corpus ------------------------------------------------------------
        Pathology("kl_runaway", _KL, ("kl",), "level",
                  "KL accelerates without bound: past 1.0 per token (GRPO) or ~30 per sequence (PPO) within "
                  "20-40 % of the remaining run."),
        Pathology("kl_near_zero", _KL, ("kl",), "config",
                  "KL stays ~1e-5 from the first step while training proceeds (beta too high or the reference "
                  "model is the policy).", onset=(0.0, 0.0)),
        Pathology("negative_kl", ("ppo",), ("kl",), "level",
                  "objective/kl turns clearly negative (-0.5 .. -2): sampling and scoring disagree."),
        Pathology("reward_hacking", _RL, ("reward", "length", "kl"), "level",
                  "Reward climbs well beyond its trend while completions grow 2-3x longer (PPO: fewer EOS tokens, "
                  "longer sequences) and KL, where logged, rises."),
        Pathology("margin_collapse", ("dpo",), ("reward",), "level",
                  "DPO margins shrink back towards 0, chosen and rejected rewards converge, accuracy drops towards "
                  "0.5."),
        Pathology("reward_std_collapse", _GRPOS, ("reward_signal",), "level",
                  "Every completion of a group earns the same reward: reward_std < 0.02, frac_reward_zero_std > "
                  "0.9, learning stalls."),
        Pathology("entropy_collapse", _GRPOS, ("entropy",), "level",
                  "Entropy falls to 5-25 % of its start over 15-25 % of the run WITH the reward flat, zero-std "
                  "groups rising and the length spread shrinking (the healthy controls sharpen too, but with the "
                  "reward rising)."),
        Pathology("length_explosion", _GRPOS, ("length",), "level",
                  "Mean completion length grows 3x or more; clipped_ratio rises."),
        Pathology("length_collapse", _GRPOS, ("length",), "level",
                  "Terse collapse: mean length < 40 % of baseline, min_length 1-5, length spread collapses."),
        Pathology("truncation", _GRPOS, ("length",), "level",
                  "Most completions hit max_completion_length: clipped_ratio > 0.5, mean_length pinned at the cap, "
                  "mean_terminated_length well below it."),
        Pathology("ratio_blowup", _RL, ("policy_ratio",), "level",
                  "Importance ratio runs away: PPO val/ratio leaves [0.5, 2.0] with clipfrac > 0.4; GRPO "
                  "(num_iterations > 1, clip ratios 5-15 % before onset) clip_ratio/region_mean > 0.4."),
        Pathology("loss_spike", ("sft", "dpo"), ("loss",), "event",
                  "Loss jumps to 3-10x its running level at onset, stays elevated 5-15 rows, then partly "
                  "recovers."),
        Pathology("nan", _ALL, ("loss", "gradients"), "event",
                  "loss and grad_norm become NaN (grad_norm sometimes inf) from onset to the end."),
        Pathology("dead_run", _ALL, ("gradients", "reward_signal"), "event",
                  "grad_norm exactly 0.0 and loss frozen from onset (GRPO: reward, stds and lengths frozen, "
                  "frac_reward_zero_std 1.0)."),
        Pathology("eval_divergence", ("sft",), ("convergence",), "trend",
                  "Train loss keeps falling while eval_loss rises from onset (overfitting); forces with_eval."),
        # -- trends the seed post names ("what to watch for") ------------------------------------------
        Pathology("clip_growing", _RL, ("policy_ratio",), "trend",
                  "Clip fraction grows from ~6 % to 33-40 % over 50-90 % of the remaining run (PPO "
                  "policy/clipfrac_avg; off-policy GRPO clip_ratio/region_mean); KL follows late. The post: "
                  "'often precedes a KL explosion'. marks['clip_crosses_0.30'] is where the trend crosses 30 %."),
        Pathology("kl_growing", _KL, ("kl",), "trend",
                  "KL's slope jumps 5-20x at onset (linear to accelerating) and reaches the warn line (0.5 per token "
                  "/ 6 per sequence) only near the end: marks['kl_crosses_warn']."),
        Pathology("length_creep_up", _GRPOS, ("length",), "trend",
                  "Mean length creeps up linearly, +70-110 % by the end of the run (verbosity is being paid for: a "
                  "logged gold reward stops rising)."),
        Pathology("length_creep_down", _GRPOS, ("length",), "trend",
                  "Mean length creeps down linearly, -40-55 % by the end of the run, and the reward stops "
                  "improving (short answers avoid penalties; a run that gets concise while learning is healthy)."),
        Pathology("length_shift", _GRPOS, ("length",), "trend",
                  "Mean length moves 45-80 % up (a gold reward stops rising) or 35-50 % down (the reward stops "
                  "improving) within 2-6 % "
                  "of the run, then stays: the post's '> 30 % change in mean vs baseline'."),
        Pathology("truncation_gap", _GRPOS, ("length",), "trend",
                  "The gap between mean_length and mean_terminated_length opens: clipped_ratio creeps to 8-18 % "
                  "(under the 20 % truncation line)."),
        Pathology("margin_plateau", ("dpo",), ("reward",), "trend",
                  "DPO margin plateaus early at 0.3-0.5 with accuracy ~0.6: the preference signal is exhausted "
                  "(healthy controls keep climbing or level off at >= 0.7 with accuracy >= 0.7).",
                  onset=(0.1, 0.35)),
        Pathology("rewards_converging", ("dpo",), ("reward",), "trend",
                  "Chosen and rejected rewards drift back towards each other: the margin loses 40-65 % of its level "
                  "gradually over the rest of the run."),
        Pathology("chosen_runaway", ("dpo",), ("reward",), "trend",
                  "rewards/chosen climbs without bound (+2..+6 by the end, linear to accelerating): the post's "
                  "'unbounded reward growth'."),
        Pathology("reward_shift_up", _RL, ("reward", "length", "kl"), "trend",
                  "Reward steps up by 0.15-0.3 (PPO 1-2) within 2-8 % of the run WITH length (+30-60 %) or KL (x3-6) "
                  "up, and the gold reward, where logged, flat: the shape reward hacking takes."),
        Pathology("reward_shift_down", _RL, ("reward",), "trend",
                  "Reward drops within 2-8 % of the run and stays down (GRPO: accuracy -0.15..-0.3 and the format "
                  "reward -10..-30 %; PPO: score -1..-2)."),
        Pathology("gold_divergence", _GRPOS, ("reward",), "trend",
                  "Over-optimisation: the proxy reward keeps rising while the held-out gold reward stalls and then "
                  "falls (length or KL up with it); the run logs the gold function with weight 0."),
        Pathology("value_blowup", ("ppo",), ("policy_ratio",), "trend",
                  "PPO's value function diverges: loss/value_avg grows 5-30x (exponential) and val/clipfrac_avg "
                  "rises to 0.5-0.8."),
        Pathology("convergence_oscillation", ("sft", "dpo"), ("convergence", "loss"), "spread",
                  "The loss stops converging and swings +-25-50 % with a period of 4-12 logged rows (LR too high); "
                  "eval_loss, where logged, oscillates with it."),
        # -- spreads ---------------------------------------------------------------------------------
        Pathology("kl_noisy", _KL, ("kl",), "spread",
                  "KL turns noisy around the same level: its log-spread x3-5 within a few rows; PPO's estimate goes "
                  "negative on many rows (the post: 'KL noisy with high variance')."),
        Pathology("kl_noise_ramp", _KL, ("kl",), "spread",
                  "KL's noise ramps up steadily over the rest of the run (log-spread x3-6 by the end) around a stable "
                  "level."),
        Pathology("length_variance_collapse", _GRPOS, ("length",), "spread",
                  "Within-batch length spread (max-min)/mean collapses to 12-20 % of its level (e.g. 2.0 -> 0.34) "
                  "while the mean stays put and the reward stops improving: mode collapse onto a template."),
        Pathology("length_variance_shift", _GRPOS, ("length",), "spread",
                  "Within-batch length spread grows 1.5-1.9x (variance > +100 %) with a stable mean: the post's "
                  "'> 50 % change in variance'."),
        Pathology("reward_variance_high", ("grpo", "grpo_kl", "ppo", "dpo"), ("reward",), "spread",
                  "Reward (DPO: margin) row-to-row noise grows 3-5x around an unchanged trend: unstable "
                  "optimisation."),
        Pathology("ratio_variance", ("ppo",), ("policy_ratio",), "spread",
                  "val/ratio_var grows 100-1000x while val/ratio stays within [0.8, 1.25]."),
        # -- configuration ---------------------------------------------------------------------------
        Pathology("lr_peak_not_reached", _ALL, ("learning_rate",), "config",
                  "The warm-up is longer than the run (warmup_steps 1.2-3x max_steps): the learning rate rises all "
                  "run long and never reaches its peak.", onset=(0.0, 0.0)),
    )
}

# Gauges that can see a pathology depend on what the family logs.
_FAMILY_GAUGES: dict[tuple[str, str], tuple[str, ...]] = {
    ("reward_hacking", "grpo"): ("reward", "length"),
    ("reward_hacking", "grpo_kl"): ("reward", "length", "kl"),
    ("reward_hacking", "ppo"): ("reward", "kl"),
    ("reward_shift_up", "grpo"): ("reward", "length"),
    ("reward_shift_up", "grpo_kl"): ("reward", "length", "kl"),
    ("reward_shift_up", "ppo"): ("reward", "kl"),
    ("dead_run", "grpo"): ("gradients", "reward_signal"),
    ("dead_run", "grpo_kl"): ("gradients", "reward_signal"),
    ("dead_run", "dpo"): ("gradients",),
    ("dead_run", "ppo"): ("gradients",),
    ("dead_run", "sft"): ("gradients",),
}

DIAGNOSIS = "diagnosis"
"""The pseudo-gauge of the cross-gauge diagnoses (findings with ``gauge: "diagnosis"``)."""
COMPOUND: frozenset[str] = frozenset({
    "reward_hacking", "reward_shift_up",  # reward hacking: reward up with length or KL up
    "gold_divergence", "kl_runaway",  # over-optimisation: proxy up, gold down; KL climbing, reward not
    "entropy_collapse", "reward_std_collapse", "length_variance_collapse",  # mode collapse
    "clip_growing", "ratio_blowup", "kl_noisy", "kl_noise_ramp",  # unstable updates
    "dead_run",
})
"""Pathologies a named diagnosis describes: a warn/stop diagnosis at or after onset counts as a detection."""


def expected_gauges(pathology: str | None, family: str) -> tuple[str, ...]:
    """Gauge ids that should flag ``pathology`` on a ``family`` run (empty for healthy runs)."""
    if pathology is None:
        return ()
    gauges = _FAMILY_GAUGES.get((pathology, family), PATHOLOGIES[pathology].gauges)
    return (*gauges, DIAGNOSIS) if pathology in COMPOUND else gauges


def combinations(include_healthy: bool = True) -> list[tuple[str, str | None]]:
    """Every allowed ``(family, pathology)`` pair, healthy (``None``) first per family."""
    out: list[tuple[str, str | None]] = []
    for fam in FAMILIES:
        if include_healthy:
            out.append((fam, None))
        out.extend((fam, name) for name, p in PATHOLOGIES.items() if fam in p.families)
    return out
