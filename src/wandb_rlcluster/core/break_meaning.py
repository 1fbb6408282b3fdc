"""What an abrupt break in each quantity means: which direction harms the run, and what usually breaks it that way.

``core/breaks.py`` decides *that* a series broke; this module says what the gauges' quantities are (the canonical
keys each series is read from), which direction of a break is a warning (reward or gold down, KL, grad norm, loss,
clipping or truncation up, entropy or length either way) and which is news only, and the causes a practitioner
checks first, told apart by what broke with it: a policy that moved at once (KL, entropy, length breaking on the
same row as the reward) is a restore or an optimizer or sampler change; a reward that broke alone is the reward
function or the prompts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Meaning:
    """A quantity: its label, the direction of a harmful break (-1 down, +1 up, 0 either, 2 neither), whether it is
    the policy's own behaviour (it moves when the weights or the sampler change) and what usually breaks it.

    A break a user would act on is material, not only improbable: it moves the level by ``min_share`` of itself
    (where the level stands clear of 0) and by ``min_abs`` in the quantity's units; a positive quantity that grows
    by multiples (KL, the gradient norm) is tested on its logarithm (``log``), where a run's early growth is a
    trend and a doubling is a step; ``confirm``: rows a break must hold before it warns (a gradient norm spikes for
    a row or three and comes back)."""

    label: str
    harmful: int
    policy: bool
    causes: str
    min_share: float = 0.1
    min_abs: float = 0.0
    log: bool = False
    confirm: int = 1


REWARD_CAUSES = ("a restore from other weights, a reward function or verifier change, a change of prompts or data "
                 "(a harder slice), or a sampler or config change (temperature, max length)")
MEANINGS: dict[str, Meaning] = {
    "reward": Meaning("the trained reward", -1, False, REWARD_CAUSES),
    "component": Meaning("a reward function", -1, False, REWARD_CAUSES),
    "gold": Meaning("the gold reward", -1, False, "a restore from other weights, a data change, or the policy losing "
                                                  "what it had learned"),
    "kl": Meaning("the KL to the reference", 1, True, "a learning-rate or KL-coefficient change, a restore from other "
                                                      "weights, or a reference-model swap", min_share=1.0,
                    min_abs=0.01, log=True),
    "entropy": Meaning("the policy entropy", 0, True, "a sampling temperature or top-p change, a restore, or a "
                                                      "learning-rate change", min_share=0.3),
    "length": Meaning("the mean completion length", 0, True, "a max-length or stop-token change, a reward that pays "
                                                             "for length, a restore, or a prompt change",
                      min_share=0.15),
    "length_spread": Meaning("the completion length spread", 0, True, "a max-length or sampler change, or a "
                                                                      "restore", min_share=0.3),
    "clip": Meaning("the clipped share of the policy ratio", 1, True, "a learning-rate or update-count change, or a "
                                                                     "restore", min_abs=0.05),
    "truncation": Meaning("the share of completions cut at max length", 1, True, "a lower max length, or a policy "
                                                                                 "that started writing longer",
                          min_abs=0.05),
    "grad_norm": Meaning("the gradient norm", 1, True, "a learning-rate change, a data change (a bad shard), or a "
                                                      "restore", min_share=1.0, log=True, confirm=5),
    "loss": Meaning("the loss", 1, True, "a data change, a restore from other weights, or a learning-rate change",
                    min_share=0.2),
    "margins": Meaning("the DPO reward margin", -1, True, "a data change (swapped or relabelled pairs), a restore, "
                                                          "or a beta change"),
    # DPO's chosen and rejected rewards drift by design (both often fall): a break in either is news, the margin and
    # the accuracy say whether it harms
    "chosen": Meaning("the chosen responses' reward", 2, True, "a data change or a restore"),
    "rejected": Meaning("the rejected responses' reward", 2, True, "a data change (swapped pairs) or a restore"),
    "accuracy": Meaning("the preference accuracy", -1, True, "a data change (swapped or relabelled pairs) or a "
                                                             "restore"),
}
"""Each kind of series the break test reads."""

SERIES_KEYS: tuple[tuple[str, str, str], ...] = (
    # (canonical key, series name, meaning)
    ("reward", "reward", "reward"),
    ("objective/scores", "reward", "reward"),
    ("kl", "kl", "kl"),
    ("objective/kl", "kl", "kl"),
    ("entropy", "entropy", "entropy"),
    ("objective/entropy", "entropy", "entropy"),
    ("completions/mean_length", "length", "length"),
    ("clip_ratio/region_mean", "clip", "clip"),
    ("policy/clipfrac_avg", "clip", "clip"),
    ("completions/clipped_ratio", "truncation", "truncation"),
    ("grad_norm", "grad_norm", "grad_norm"),
    ("loss", "loss", "loss"),
    ("rewards/margins", "margins", "margins"),
    ("rewards/chosen", "chosen", "chosen"),
    ("rewards/rejected", "rejected", "rejected"),
    ("rewards/accuracies", "accuracy", "accuracy"),
)
"""The keys read, in order; where two keys name one series (TRL's and PPO's), the first one logged counts."""


def cause_text(meaning: Meaning, sign: int, moved: list[str], quiet: list[str]) -> str:
    """What usually breaks ``meaning``'s quantity this way, narrowed by what broke with it (``moved``: policy
    quantities that moved at once) and what did not (``quiet``: those logged that held)."""
    if not meaning.policy and moved:
        return (f"{', '.join(moved)} moved on the same rows: the policy itself changed at once, as after a restore "
                "from other weights or an optimizer or sampler config change")
    if not meaning.policy and quiet:
        return (f"{', '.join(quiet)} did not move: the policy did not change, what scores it did: a reward function "
                "or verifier change, or a change of prompts or data")
    if meaning.policy and moved:
        return f"{', '.join(moved)} moved on the same rows: usually {meaning.causes}"
    return f"usually {meaning.causes}"
