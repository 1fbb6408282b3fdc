"""The fault-injection benchmark's causes: what each one breaks, how, and what counts as its damage.

Every cause is a real mechanism switched on by a ``TrainerCallback`` at a known step of a real TRL run -- the
optimizer's learning rate, the trainer's KL coefficient or sampling temperature, the reward function, the gradients,
the data the collator hands the trainer -- never an edit of a logged metric. A cause names the healthy base it
breaks (``BASES``: the trainer and task its twin runs), the gauges a monitor should warn from, and its *damage*:
the first step where a user would see harm without any monitor (the task's gold reward 10 % below its peak, KL past
1.0, a non-finite loss or gradient norm, completions at the length cap, held-out accuracy at chance, held-out loss
10 % above its best; learning that stopped: 10 % of the twin's gain behind the twin). A curve is read as a user's
eye or a smoothed panel reads it: a rolling mean of ``ROLL`` rows, a drop held ``HOLD`` rows. The damage rules
live here, apart from the detectors, and ``record.refresh_damage`` re-reads every saved run with them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from transformers import TrainerCallback

Row = Mapping[str, Any]

# -- the tasks ---------------------------------------------------------------------------------------------------


def _texts(completions: Sequence[Any]) -> list[str]:
    return [c if isinstance(c, str) else " ".join(m.get("content", "") for m in c) for c in completions]


def gold_score(text: str) -> float:
    """The task: answer with a word whose letters overlap "ocean" (Jaccard of the first word's letters).

    Dense, so a tiny policy's group of completions always has spread, and learnable from the pretrained policy's
    twelve answer words (0.11-0.43; "ocean" scores 1)."""
    words = text.split()
    answer = set(words[0].lower()) if words else set()
    target = set("ocean")
    return len(target & answer) / len(target | answer)


def _o_share(text: str) -> float:
    letters = [c for c in text.lower() if c.isalpha()]
    return letters.count("o") / len(letters) if letters else 0.0


class GoldReward:
    """The held-out gold reward: trained with weight 0, logged beside the proxy as ``rewards/gold/mean``."""

    __name__ = "gold"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [gold_score(t) for t in _texts(completions)]


class ProxyReward:
    """The trained reward: the gold task plus a shortcut it also pays (the share of the letter 'o').

    A policy held near its reference learns the task (gold rises with the proxy); one let loose collapses onto
    whatever pays most, far from its reference (KL past 1.0), and an 'o'-heavy answer is paid beyond its gold.
    ``mode`` is what a fault switches: ``length`` adds pay per character, ``constant`` / ``nan`` / ``flip`` break
    the function (a reward server returning a default, a NaN, a sign bug); ``rescaled`` is the same function on
    another scale (a reward server's new version), ``rubric`` drops the task term and pays the shortcut alone (a
    rubric deployed without its main criterion), ``noisy`` adds a judge's noise (sd ``noise_sd``, seeded)."""

    __name__ = "proxy"
    SHORTCUT = 0.5
    RESCALE = 0.55
    """The rescaled reward's factor: the logged reward falls by 45 % in one step (GRPO's group-normalised advantage
    is unchanged by it, so the policy learns on)."""

    def __init__(self, seed: int = 0) -> None:
        self.mode = "ok"
        self.noise_sd = 0.0
        self.rng = random.Random(seed * 104729 + 17)
        self.recent: list[float] = []
        """The last few batches' rewards before any fault: the judge's own spread, which ``noisy`` multiplies."""

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        out = []
        for t in _texts(completions):
            r = gold_score(t) + self.SHORTCUT * _o_share(t)
            if self.mode == "ok":
                self.recent = (self.recent + [r])[-256:]
            elif self.mode == "rescaled":
                r = self.RESCALE * r
            elif self.mode == "rubric":
                r = self.SHORTCUT * _o_share(t)
            elif self.mode == "noisy":
                r += self.rng.gauss(0.0, self.noise_sd)
            elif self.mode == "length":
                r += len(t) / 2.0
            elif self.mode == "constant":
                r = 0.5
            elif self.mode == "nan":
                r = math.nan
            elif self.mode == "flip":
                r = -r
            out.append(r)
        return out


SHIFTED_WORDS = ("red", "blue", "green", "pink", "gray", "teal", "gold", "navy")


class SwitchableCollator:
    """Wraps the trainer's collator (before ``train()`` builds its data loader) so a fault can corrupt the batches
    the trainer is handed: GRPO/RLOO prompts from another distribution, DPO pairs with chosen and rejected swapped
    (a column-mapping bug), SFT rows replaced by random bytes (a corrupted shard).  Off, it is the
    trainer's own collator, unchanged."""

    def __init__(self, inner: Callable[[list[dict[str, Any]]], Any], seed: int) -> None:
        self.inner = inner
        self.mode = "ok"
        self.rng = random.Random(seed)

    def install(self, trainer: Any) -> None:
        """Wrap ``trainer``'s training batches only: held-out batches stay clean (they measure the damage), so the
        evaluation data loader, made at each evaluation, is built with the trainer's own collator."""
        trainer.data_collator = self
        make_eval = trainer.get_eval_dataloader

        def clean_eval_dataloader(*args: Any, **kwargs: Any) -> Any:
            trainer.data_collator = self.inner
            try:
                return make_eval(*args, **kwargs)
            finally:
                trainer.data_collator = self

        trainer.get_eval_dataloader = clean_eval_dataloader

    def __call__(self, examples: list[dict[str, Any]]) -> Any:
        if self.mode == "prompt_shift":
            examples = [{**e, "prompt": f"Pick a color like {self.rng.choice(SHIFTED_WORDS)}:"} for e in examples]
        elif self.mode == "pair_swap":
            examples = [{**e, "chosen_ids": e["rejected_ids"], "rejected_ids": e["chosen_ids"]} for e in examples]
        elif self.mode == "corrupt":
            examples = [{**e, "input_ids": [self.rng.randrange(4, 260) for _ in e["input_ids"]]} for e in examples]
        return self.inner(examples)


# -- the faults --------------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a fault can reach: the trainer and the switchable pieces the base built into it."""

    trainer: Any
    proxy: ProxyReward | None
    collator: SwitchableCollator
    hooks: list[Any] = field(default_factory=list)
    grad_scale: list[float] = field(default_factory=lambda: [1.0])
    seed: int = 0


def _scale_lr(ctx: Ctx, factor: float) -> None:
    """Multiply the optimizer's learning rate from now on (the scheduler's base too, so the schedule keeps it)."""
    sched = ctx.trainer.lr_scheduler
    sched.base_lrs = [b * factor for b in sched.base_lrs]
    for g in ctx.trainer.optimizer.param_groups:
        g["lr"] = g["lr"] * factor


def _hook_grads(ctx: Ctx, fn: Callable[[Any], Any]) -> None:
    for p in ctx.trainer.model.parameters():
        if p.requires_grad:
            ctx.hooks.append(p.register_hook(fn))


def _lr_spike(ctx: Ctx) -> None:
    _scale_lr(ctx, 25.0)


def _kl_removed(ctx: Ctx) -> None:
    # the penalty's weight to ~0; not exactly 0, so TRL still computes and logs the KL it no longer pays for
    ctx.trainer.beta = 1e-9


def _length_reward(ctx: Ctx) -> None:
    assert ctx.proxy is not None
    ctx.proxy.mode = "length"


def _reward_mode(mode: str) -> Callable[[Ctx], None]:
    def switch(ctx: Ctx) -> None:
        assert ctx.proxy is not None
        ctx.proxy.mode = mode
    return switch


def _temperature(ctx: Ctx) -> None:
    t = ctx.trainer
    t.temperature = 0.3
    t.generation_config.temperature = 0.3
    if isinstance(getattr(t, "generation_kwargs", None), dict):
        t.generation_kwargs["temperature"] = 0.3


def _grads_cut(ctx: Ctx) -> None:
    # a module detached from the graph: every gradient arrives as zero from now on
    _hook_grads(ctx, lambda g: g * 0.0)


def _grad_explosion(ctx: Ctx) -> None:
    # a loss scale that compounds (a scaler never unscaling) with clipping off: gradients grow 30x a step, Adam's
    # second moment lags behind them (updates grow) until the squared norm overflows and the weights turn NaN
    ctx.trainer.args.max_grad_norm = 0.0
    ctx.trainer.add_callback(_GrowScale(ctx.grad_scale, 30.0))
    _hook_grads(ctx, lambda g: g * ctx.grad_scale[0])


class _GrowScale(TrainerCallback):
    """Grows the compounding loss scale once per optimizer step."""

    def __init__(self, scale: list[float], growth: float) -> None:
        self.scale, self.growth = scale, growth

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        self.scale[0] *= self.growth


def _collator_mode(mode: str) -> Callable[[Ctx], None]:
    def switch(ctx: Ctx) -> None:
        ctx.collator.mode = mode
    return switch


JUDGE_NOISE = 2.5
"""The noisy judge's spread as a multiple of the reward's own per-completion spread before onset."""


def _judge_noisy(ctx: Ctx) -> None:
    # a judge whose sampling temperature was raised (or a smaller judge swapped in): every score gets independent
    # noise, sd chosen so the per-completion spread is JUDGE_NOISE x what it was (var adds: sd_n = sd sqrt(k^2 - 1))
    assert ctx.proxy is not None
    vals = ctx.proxy.recent
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / max(len(vals) - 1, 1))
    ctx.proxy.noise_sd = sd * math.sqrt(JUDGE_NOISE ** 2 - 1.0)
    ctx.proxy.mode = "noisy"


CHECKPOINT_NOISE = 0.7
"""The damaged checkpoint's noise, per tensor, as a multiple of that tensor's own standard deviation."""


def _checkpoint_noise(ctx: Ctx) -> None:
    # the policy restored from a damaged checkpoint (a partial write, a bad merge of shards): every weight tensor
    # gets Gaussian noise of CHECKPOINT_NOISE x its own spread; optimizer state and reference model untouched
    import torch

    gen = torch.Generator().manual_seed(int(ctx.seed) * 7727 + 3)
    with torch.no_grad():
        for p in ctx.trainer.model.parameters():
            if p.numel() > 1 and p.dtype.is_floating_point:
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * CHECKPOINT_NOISE * p.std())


def _ref_swapped(ctx: Ctx) -> None:
    # the reference model reloaded from the wrong checkpoint: the base model before supervised pretraining (the
    # tiny model's own initial weights) instead of the SFT model the policy started from; the KL term now pulls
    # the policy toward a model that never learned the format
    import torch

    from wandb_rlcluster import tiny

    ref = ctx.trainer.ref_model
    assert ref is not None, "ref_swapped needs a reference model (beta > 0)"
    base = tiny.build_model(tiny.build_tokenizer(), seed=int(ctx.seed)).state_dict()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(base[name].to(p.dtype))


HOT_TEMPERATURE = 2.0


def _temperature_up(ctx: Ctx) -> None:
    # a sampler config changed on resume: generation at temperature 2.0 instead of 1.0 (scoring unchanged)
    t = ctx.trainer
    t.generation_config.temperature = HOT_TEMPERATURE
    if isinstance(getattr(t, "generation_kwargs", None), dict):
        t.generation_kwargs["temperature"] = HOT_TEMPERATURE


CUT_COMPLETION = 6


def _completion_cut(ctx: Ctx) -> None:
    # a config change on resume: max_completion_length 24 -> 6 tokens, so most completions are cut mid-answer
    t = ctx.trainer
    t.max_completion_length = CUT_COMPLETION
    t.generation_config.max_new_tokens = CUT_COMPLETION
    if isinstance(getattr(t, "generation_kwargs", None), dict):
        t.generation_kwargs["max_new_tokens"] = CUT_COMPLETION


# -- damage: what a user sees without a monitor ------------------------------------------------------------------

ROLL = 5
"""Rows in the rolling mean a user's eye (or a smoothed W&B panel) reads a noisy curve with."""
HOLD = 3
"""Rows a drop must hold to be seen as one (a single noisy dip of a 16-sample mean is not harm)."""


def _series(rows: Sequence[Row], key: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[key])) for r in rows if key in r and isinstance(r[key], (int, float))]


def _rolled(pts: list[tuple[int, float]]) -> list[tuple[int, float]]:
    out = []
    for i in range(len(pts)):
        w = [v for _, v in pts[max(0, i - ROLL + 1): i + 1]]
        out.append((pts[i][0], sum(w) / len(w)))
    return out


def damage_nan(rows: Sequence[Row], onset: int) -> int | None:
    """The first row after onset with a non-finite loss, reward or gradient norm."""
    for r in rows:
        if r.get("step", 0) >= onset and any(isinstance(r.get(k), float) and not math.isfinite(r[k])
                                             for k in ("loss", "reward", "grad_norm")):
            return int(r["step"])
    return None


def damage_drop(key: str, frac: float = 0.10, higher_is_better: bool = True
                ) -> Callable[[Sequence[Row], int], int | None]:
    """The first step after onset where ``key``'s rolling mean is ``frac`` worse than its best so far."""
    def rule(rows: Sequence[Row], onset: int) -> int | None:
        pts = _rolled(_series(rows, key))
        best = -math.inf if higher_is_better else math.inf
        held = 0
        for step, v in pts:
            if not math.isfinite(v):
                return step if step >= onset else None
            bad = v < best - frac * abs(best) if higher_is_better else v > best + frac * abs(best)
            held = held + 1 if bad and step >= onset else 0
            if held >= HOLD:
                return step
            if not bad:
                best = max(best, v) if higher_is_better else min(best, v)
        return None
    return rule


def damage_above(key: str, limit: float) -> Callable[[Sequence[Row], int], int | None]:
    """The first step after onset where ``key`` passes ``limit``."""
    def rule(rows: Sequence[Row], onset: int) -> int | None:
        return next((s for s, v in _series(rows, key) if s >= onset and v > limit), None)
    return rule


def damage_at_most(key: str, limit: float) -> Callable[[Sequence[Row], int], int | None]:
    """The first step after onset where ``key`` is at ``limit`` or below (held-out accuracy at chance)."""
    def rule(rows: Sequence[Row], onset: int) -> int | None:
        return next((s for s, v in _series(rows, key) if s >= onset and v <= limit), None)
    return rule


def damage_entropy_collapse(frac: float = 0.5) -> Callable[[Sequence[Row], int], int | None]:
    """The first step after onset where the rolling entropy is below ``frac`` of its median before onset."""
    def rule(rows: Sequence[Row], onset: int) -> int | None:
        pts = _series(rows, "entropy")
        pre = sorted(v for s, v in pts if s < onset)
        if not pre:
            return None
        ref = pre[len(pre) // 2]
        return next((s for s, v in _rolled(pts) if s >= onset and v < frac * ref), None)
    return rule


def damage_any(*rules: Callable[[Sequence[Row], int], int | None]) -> Callable[[Sequence[Row], int], int | None]:
    """The earliest of several kinds of harm."""
    def rule(rows: Sequence[Row], onset: int) -> int | None:
        hits = [s for s in (r(rows, onset) for r in rules) if s is not None]
        return min(hits) if hits else None
    return rule


def damage_behind_twin(key: str, frac: float = 0.10, also: Callable[[Sequence[Row], int], int | None] | None = None,
                       higher_is_better: bool = True) -> Callable[[Sequence[Row], int, Sequence[Row]], int | None]:
    """Learning stopped: the first step after onset where the rolling ``key`` trails the healthy twin's by ``frac``
    of the twin's own gain since its first row (what the run should have learned and did not)."""
    def rule(rows: Sequence[Row], onset: int, twin: Sequence[Row]) -> int | None:
        mine = dict(_rolled(_series(rows, key)))
        theirs = _rolled(_series(twin, key))
        other = also(rows, onset) if also is not None else None
        if not theirs:
            return other
        start = theirs[0][1]
        held = 0
        sign = 1.0 if higher_is_better else -1.0
        for step, v in theirs:
            gap = sign * (v - mine[step]) if step in mine else 0.0
            behind = step >= onset and gap > frac * max(abs(v - start), 1e-9) and gap > 0.02 * max(abs(v), 1e-9)
            held = held + 1 if behind else 0
            if held >= HOLD:
                return step if other is None else min(step, other)
        return other
    return rule


def damage_decoupled(key: str = "rewards/proxy/mean", gold: str = "rewards/gold/mean", frac: float = 0.25
                     ) -> Callable[[Sequence[Row], int], int | None]:
    """The reward stopped measuring the task: the first step after onset where the rolling ``key`` / ``gold`` ratio
    is ``frac`` away from its median over the ``2 * ROLL`` rows before onset, held ``HOLD`` rows (a user plotting
    the trained reward beside the gold sees the two part)."""
    def rule(rows: Sequence[Row], onset: int) -> int | None:
        proxy, ref = dict(_rolled(_series(rows, key))), _rolled(_series(rows, gold))
        ratios = [(s, proxy[s] / g) for s, g in ref if s in proxy and abs(g) > 1e-9]
        pre = sorted(r for _, r in [x for x in ratios if x[0] < onset][-2 * ROLL:])
        if not pre:
            return None
        base = pre[len(pre) // 2]
        held = 0
        for step, r in ratios:
            if not math.isfinite(r):
                return step if step >= onset else None
            held = held + 1 if step >= onset and abs(r / base - 1.0) > frac else 0
            if held >= HOLD:
                return step
        return None
    return rule


GOLD = "rewards/gold/mean"
GOLD_DROP = damage_drop(GOLD)
HARM = damage_any(GOLD_DROP, damage_above("kl", 1.0), damage_nan)
DECOUPLED = damage_decoupled()


@dataclass(frozen=True)
class Cause:
    name: str
    base: str
    what: str
    switch: Callable[[Ctx], None]
    expected: tuple[str, ...]
    damage_rule: str
    damage: Callable[..., int | None]
    needs_twin: bool = False


@dataclass(frozen=True)
class Base:
    """A healthy run: its trainer kind, its steps and its config overrides."""

    kind: str
    steps: int
    overrides: dict[str, Any]
    gold: bool = True


MAX_COMPLETION = 24
BASES: dict[str, Base] = {
    "grpo": Base("grpo_kl", 60, {"learning_rate": 5e-4, "beta": 0.2, "num_generations": 8,
                                 "per_device_train_batch_size": 16, "max_completion_length": MAX_COMPLETION,
                                 "reward_weights": [1.0, 0.0]}),
    "rloo": Base("rloo", 60, {"learning_rate": 5e-4, "beta": 0.2, "num_generations": 8,
                              "per_device_train_batch_size": 16, "max_completion_length": MAX_COMPLETION,
                              "reward_weights": [1.0, 0.0]}),
    "dpo": Base("dpo", 60, {"learning_rate": 3e-4, "eval_steps": 3}, gold=False),
    "sft": Base("sft", 60, {"learning_rate": 1e-3, "eval_steps": 3}, gold=False),
}

_RL = ("reward", "reward_signal")
CAUSES: dict[str, Cause] = {c.name: c for c in (
    Cause("lr_spike", "grpo", "learning rate x25 (a schedule or config error)", _lr_spike,
          ("kl", "reward", "entropy", "gradients", "policy_ratio", "length", "loss"),
          "gold 10 % below peak, KL > 1.0 or NaN", HARM),
    Cause("kl_removed", "grpo", "KL coefficient 0.2 -> ~0 with a hackable proxy ('o' share pays)", _kl_removed,
          ("kl", "reward", "entropy", "length"), "gold 10 % below peak or KL > 1.0", HARM),
    Cause("length_reward", "grpo", "reward starts paying per character", _length_reward,
          ("length", "reward", "kl"), f"mean length at the cap ({MAX_COMPLETION}) or gold 10 % below peak",
          damage_any(damage_above("completions/mean_length", 0.95 * MAX_COMPLETION), GOLD_DROP)),
    Cause("reward_constant", "grpo", "reward function returns a constant (a reward server's default)",
          _reward_mode("constant"), _RL, "learning stopped: gold 10 % behind the twin's gain",
          damage_behind_twin(GOLD), needs_twin=True),
    Cause("reward_nan", "grpo", "reward function returns NaN (TRL's nansum turns it into 0)", _reward_mode("nan"),
          (*_RL, "loss", "gradients", "kl", "entropy"), "NaN loss / reward / grad norm, or gold 10 % behind the twin",
          damage_behind_twin(GOLD, also=damage_nan), needs_twin=True),
    Cause("reward_flip", "grpo", "reward sign flipped", _reward_mode("flip"), ("reward", "kl", "entropy", "length"),
          "gold 10 % below peak", HARM),
    Cause("temperature", "grpo", "sampling temperature 1.0 -> 0.3, the trainer still scoring at 1.0 (sharpening)",
          _temperature, ("entropy", "reward_signal", "kl", "length"),
          "entropy below half its pre-onset median, gold 10 % below peak or KL > 1.0",
          damage_any(HARM, damage_entropy_collapse())),
    Cause("grads_cut", "grpo", "every gradient zero (a detached module: learning stopped)", _grads_cut,
          ("gradients", "reward", "reward_signal", "loss"), "learning stopped: gold 10 % behind the twin's gain",
          damage_behind_twin(GOLD), needs_twin=True),
    Cause("grad_explosion", "grpo", "compounding loss scale, clipping off", _grad_explosion,
          ("gradients", "loss", "kl", "reward", "entropy"),
          "non-finite grad norm or loss, KL > 1.0 or gold 10 % below peak", HARM),
    Cause("prompt_shift", "grpo", "prompts from another distribution ('Pick a color like ...')",
          _collator_mode("prompt_shift"), ("reward", "length", "kl", "entropy", "reward_signal"),
          "gold 10 % below peak or KL > 1.0", HARM),
    Cause("rloo_reward_flip", "rloo", "RLOO: reward sign flipped", _reward_mode("flip"),
          ("reward", "kl", "entropy", "length"), "gold 10 % below peak", HARM),
    Cause("dpo_pair_swap", "dpo", "DPO: chosen and rejected swapped (a column-mapping bug)",
          _collator_mode("pair_swap"),
          ("reward", "loss", "convergence"), "held-out accuracy at chance (<= 0.5) or eval loss 10 % above best",
          damage_any(damage_at_most("eval_rewards/accuracies", 0.5), damage_drop("eval_loss", higher_is_better=False))),
    Cause("sft_corruption", "sft", "SFT: rows replaced by random bytes (a corrupted shard)",
          _collator_mode("corrupt"), ("loss", "convergence", "gradients"),
          "held-out loss 10 % above its best, or 10 % of the twin's gain behind it",
          damage_behind_twin("eval_loss", also=damage_drop("eval_loss", higher_is_better=False),
                             higher_is_better=False), needs_twin=True),
    # -- abrupt breaks (issue 47): a step change at onset that a person sees at once on the panel --------------------
    Cause("reward_rescaled", "grpo", "reward function swapped for the same one on another scale "
          f"(x{ProxyReward.RESCALE}: a reward server's new version); the logged reward falls 45 % in one step, "
          "the gold does not",
          _reward_mode("rescaled"), _RL, "the trained reward parts from the gold: rolling reward/gold ratio 25 % off "
          "its pre-onset median, held 3 rows", DECOUPLED),
    Cause("reward_rubric_changed", "grpo", "reward rubric changed: the task term dropped, only the 'o' shortcut paid "
          "(the reward falls ~70 % at once, the gold does not move, then the policy chases the shortcut)",
          _reward_mode("rubric"), _RL, "reward/gold ratio 25 % off its pre-onset median held 3 rows, or gold 10 % "
          "below peak", damage_any(DECOUPLED, GOLD_DROP)),
    Cause("judge_noisy", "grpo", f"the judge turns noisy: independent noise takes the reward's per-completion spread "
          f"to x{JUDGE_NOISE}", _judge_noisy, _RL, "learning slowed: gold 10 % of the twin's gain behind the twin",
          damage_behind_twin(GOLD), needs_twin=True),
    Cause("checkpoint_noise", "grpo", f"policy restored from a damaged checkpoint (every weight tensor + noise of "
          f"{CHECKPOINT_NOISE} x its spread): reward and gold fall at once", _checkpoint_noise,
          ("reward", "kl", "entropy", "length", "loss", "gradients", "policy_ratio"),
          "gold 10 % below peak or NaN (the KL jumps at onset by construction: not the harm)",
          damage_any(GOLD_DROP, damage_nan)),
    Cause("ref_swapped", "grpo", "reference model reloaded from the wrong checkpoint (the base model before SFT): "
          "KL jumps, the penalty pulls the policy off its task", _ref_swapped,
          ("kl", "reward", "entropy", "length", "loss", "gradients"), "gold 10 % below peak or NaN",
          damage_any(GOLD_DROP, damage_nan)),
    Cause("temperature_up", "grpo", f"sampler config changed on resume: temperature 1.0 -> {HOT_TEMPERATURE} "
          "(scoring unchanged)", _temperature_up, ("entropy", "length", "reward", "kl", "reward_signal"),
          "gold 10 % below peak, KL > 1.0 or NaN", HARM),
    Cause("completion_cut", "grpo", f"config changed on resume: max_completion_length {MAX_COMPLETION} -> "
          f"{CUT_COMPLETION} (answers cut)", _completion_cut, ("length", "reward", "entropy", "kl", "reward_signal"),
          "gold 10 % below peak, KL > 1.0 or NaN", HARM),
)}

BREAKS = ("reward_rescaled", "reward_rubric_changed", "judge_noisy", "checkpoint_noise", "ref_swapped",
          "temperature_up", "completion_cut")
"""The abrupt-break causes (issue 47 item 4). They are left out of the default cause list (``bench.py --causes``
defaults to the others, whose seeds 0-9 results are committed) and scored in their own folder with their own seeds:
tuning seeds 0-2 (recorded, looked at, ``benchmarks/faults/breaks/RESULTS.md``) and fresh seeds 100-104 (recorded
and scored once, at the end, by the lead; nobody tunes on them)."""
# The break watcher (core/breaks_gauge.py) names what broke in any series a cause moves: for the abrupt breaks it is
# an expected gauge beside the cause's own (the 13 causes above keep theirs: seeds 0-9 were scored without it)
for _name in BREAKS:
    CAUSES[_name] = replace(CAUSES[_name], expected=(*CAUSES[_name].expected, "breaks"))
TUNING_SEEDS = range(0, 3)
FRESH_SEEDS = range(100, 105)


def onset_for(seed: int, base: str) -> int:
    """The switch step: drawn per seed in the run's middle third, so no detector can learn one fixed step."""
    n = BASES[base].steps
    return random.Random(seed * 7919 + n).randint(int(0.35 * n), int(0.5 * n))


def damage_step(cause: Cause, rows: Sequence[Row], onset: int, twin: Sequence[Row]) -> int | None:
    """The cause's damage step on a recorded run (None: no harm visible before the run ended)."""
    return cause.damage(rows, onset, twin) if cause.needs_twin else cause.damage(rows, onset)
