"""The rule catalog: one declared entry per rule id the core can raise, like ruff's rule list.

An entry says what the rule reads, how it decides today (its noise model and test, in a phrase), the parameters
its thresholds come from (their values are read from the gauge's ``defaults`` / ``family_defaults`` when asked,
never copied here), the seed's words it implements (a verbatim quote of the Part II post or of
``shared/INSTRUMENTS.md``, or none), what a firing means, the fix, and its example streams
(``core/rule_examples.py``). Its severities are read from the source (``raised_rules``), so the catalog cannot
drift from the code: ``tests/test_rule_catalog.py`` fails when a rule the code can raise has no entry, an entry
names a rule the code cannot raise, or an example stops firing by its row or starts firing on its healthy stream.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import GAUGE_CLASSES
from .diagnosis import PATTERNS, Diagnoser
from .gauge import Gauge
from .rule_examples import EXAMPLES, Example
from .sanity import RANGES
from .sanity import RULE as RANGE_RULE

POST = "post"
"""The seed: Part II of "The Post-Training Instrument Cluster" (``shared/seed/``)."""
INSTRUMENTS = "INSTRUMENTS.md"
"""The domain reference (``shared/INSTRUMENTS.md``), which carries Part I (SFT) and Part III (GRPO)."""

ANY_GAUGE = "*"
"""The gauge of a rule every gauge can raise on the keys it reads (``value-out-of-range``)."""


@dataclass(frozen=True)
class Rule:
    """One rule: what it reads and decides, where its numbers come from, what to do, and its example."""

    gauge: str
    id: str
    reads: str
    test: str
    params: tuple[str, ...]
    means: str
    fix: str
    seed: str = ""
    seed_source: str = ""
    #: One rule per reward function: the id it raises is ``<id>:<function name>``.
    per_function: bool = False
    #: Where a number differs from the seed's, or has no seed line: why.
    origin: str = ""
    #: The rule decides by a sequential test whose threshold comes from the false-alarm budget
    #: (``core.sequential.arl_for``): its budget is shown in the reference.
    budgeted: bool = False
    #: The gauge parameter holding the rule's own ARL0 budget (empty: the engine's ``BASE_ARL``).
    budget_param: str = ""

    def budget(self) -> str:
        """The false-alarm budget as the reference shows it: '-' for a rule held k rows (no budget declared)."""
        if not self.budgeted:
            return "-"
        from .sequential import SOONER_FACTOR, arl_for

        arl = float(gauge_class(self.gauge).defaults[self.budget_param]) if self.budget_param else arl_for(0)  # type: ignore[union-attr]
        return f"ARL0 {arl:,.0f} rows (÷{SOONER_FACTOR:g} per warn_sooner)"

    @property
    def key(self) -> tuple[str, str]:
        return (self.gauge, self.id)

    @property
    def example(self) -> Example:
        return EXAMPLES[self.key]

    @property
    def severities(self) -> tuple[str, ...]:
        return tuple(sorted(raised_rules().get(self.id, set()), key=("info", "warn", "stop").index))

    def thresholds(self) -> dict[str, dict[str, Any]]:
        """``{param: {"default": value, <family>: value, ...}}`` read from the gauge class now."""
        cls = gauge_class(self.gauge)
        out: dict[str, dict[str, Any]] = {}
        for name in self.params:
            if cls is None:
                continue
            row: dict[str, Any] = {}
            if name in cls.defaults:
                row["default"] = cls.defaults[name]
            for fam, fd in cls.family_defaults.items():
                if name in fd:
                    row[fam] = fd[name]
            out[name] = row
        return out

    def threshold_text(self) -> str:
        """``warn=0.5 (ppo, online_dpo: 6.0); for=3`` -- or ``-`` for a rule without parameters."""
        parts = []
        for name, row in self.thresholds().items():
            text = f"{name}={_fmt(row.get('default'))}"
            fams: dict[str, list[str]] = {}
            for fam, v in row.items():
                if fam != "default":
                    fams.setdefault(_fmt(v), []).append(fam)
            if fams:
                text += " (" + "; ".join(f"{', '.join(f)}: {v}" for v, f in fams.items()) + ")"
            parts.append(text)
        return "; ".join(parts) or "-"


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def gauge_class(gauge_id: str) -> type[Gauge] | None:
    for cls in GAUGE_CLASSES + (Diagnoser,):
        if cls.id == gauge_id:
            return cls
    return None


def _ranged_keys() -> str:
    """``[0, 1]: a, b; [0, inf): c`` -- the keys ``value-out-of-range`` checks, by range."""
    by_range: dict[str, list[str]] = {}
    for key, rng in RANGES.items():
        by_range.setdefault(rng.text(), []).append(key)
    return "; ".join(f"{text}: {', '.join(keys)}" for text, keys in by_range.items())


def _r(gauge: str, rule: str, reads: str, test: str, params: tuple[str, ...], means: str, fix: str,
       seed: str = "", src: str = "", **kw: Any) -> Rule:
    return Rule(gauge, rule, reads, test, params, means, fix, seed, src if seed else "", **kw)


_LOWER_LR = "Lower the learning rate (or tighten max_grad_norm) and resume from the last good checkpoint."
_GRAD_SEED = "vanishing (norm collapsing toward 0), exploding (fat tails / spikes), layer imbalance, any NaN/Inf"
_LEN_DEV = ("Any significant deviation (> 30% change in mean or > 50% change in variance) during RL deserves "
            "investigation.")
_CONVERGE = ("If chosen and rejected rewards approach each other, the model is losing its ability to distinguish "
             "preferences.")
_GALLERY = "what you get is a picture of multiple interacting failures that create a tableau of pathology."
_KL_LINES = "KL > 0.5 is a warning and KL > 1.0 is a stop sign"

CATALOG: tuple[Rule, ...] = (
    # -- loss ---------------------------------------------------------------------------------------------------------
    _r("loss", "loss-nonfinite", "loss", "any NaN/Inf row (info: one isolated row is a skipped fp16 loss-scale step)",
       (), "the loss is NaN or infinite on this row", "nothing for one row; if it repeats, see "
       "loss-nonfinite-repeated", "none", ""),
    _r("loss", "loss-nonfinite-repeated", "loss, and the row of its last NaN/Inf",
       "a second NaN/Inf within `nonfinite_window` logged rows of the last", ("nonfinite_window",),
       "more than a skipped loss-scale step: the run is heading for divergence",
       "lower the learning rate or enable gradient clipping; resume from the last good checkpoint if it goes on",
       "none", ""),
    _r("loss", "loss-nonfinite-persistent", "loss", "NaN/Inf held `nonfinite_for` rows", ("nonfinite_for",),
       "the loss stays NaN/Inf: the weights are probably corrupted", _LOWER_LR, "none", ""),
    _r("loss", "loss-spike", "loss / mean of the last `window` non-spike rows (not for RL surrogate losses)",
       "level ratio above a line, held `spike_for` rows", ("spike_ratio", "spike_for", "window"),
       "the loss stays well above its running mean: a bad batch, LR too high, or a data-order problem",
       "check grad_norm at the same steps; lower the learning rate if it repeats", "spike ratio > 2.0", INSTRUMENTS),
    _r("loss", "loss-spike-single", "loss / running mean", "one row past `spike_ratio_now` (info)",
       ("spike_ratio_now",), "one batch the model handles badly", "nothing unless it repeats",
       "spike ratio > 2.0", INSTRUMENTS),
    _r("loss", "loss-spike-repeated", "rows past `spike_ratio_now` x the running mean",
       "count of spikes within `spike_repeat_rows` rows", ("spike_ratio_now", "spike_repeat", "spike_repeat_rows"),
       "the loss keeps jumping: unstable training, not one bad batch",
       "lower the learning rate or tighten gradient clipping", "spike ratio > 2.0", INSTRUMENTS),
    _r("loss", "loss-shift-up", "loss vs the median of its last `shift_level` rows before the rise, in sigmas of its "
       "row-to-row changes (at least `shift_floor` of the level; not for RL surrogate losses)",
       "Page's CUSUM for a shift of 2 x `shift_k` sigmas, each row clipped at `shift_clip` (a large jump must hold "
       "several rows)", ("shift_k", "shift_clip", "shift_floor", "shift_level", "shift_arl"),
       "the loss jumped and stays up: corrupted or mislabelled data, a new data source, a learning-rate jump",
       "check the data loader (the shard or source served at these steps) and the learning rate", "spike ratio > 2.0",
       INSTRUMENTS, origin="the seed's spike ratio is a single-row test; a lasting jump is a change of level, decided "
       "by the sequential engine at its own budget (every SFT/DPO row is tested, and batch losses are heavy-tailed)",
       budgeted=True, budget_param="shift_arl"),
    _r("loss", "loss-volatile", "variance of the last 5 rows / variance of the last 5 x `window` rows",
       "variance ratio above a line, held 3 rows (info)", ("var_ratio",),
       "training is getting noisier", "watch for spikes and the learning-rate schedule", "variance rising",
       INSTRUMENTS),
    _r("loss", "loss-oscillating", "the loss's swing around a 9-row running median; a sinusoid fit of the log loss",
       "swing vs its own earlier octave, or one period explaining most detrended variance; held `osc_for` rows",
       ("osc_ratio", "osc_min", "osc_share", "osc_amp", "osc_for"),
       "the loss oscillates instead of converging", "lower the learning rate or decay it sooner", "none", ""),
    # -- gradients ----------------------------------------------------------------------------------------------------
    _r("gradients", "grad-nonfinite", "grad_norm",
       "any NaN/Inf row (info: one isolated row is a skipped fp16 loss-scale step)", (),
       "a gradient norm is NaN/Inf", "nothing for one row; if it repeats, see grad-nonfinite-repeated",
       _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-nonfinite-repeated", "grad_norm, and the row of its last NaN/Inf",
       "a second NaN/Inf within `nonfinite_window` logged rows of the last", ("nonfinite_window",),
       "more than a skipped loss-scale step: gradients keep overflowing and the run is heading for divergence",
       "lower the learning rate or enable gradient clipping", _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-nonfinite-persistent", "grad_norm", "NaN/Inf held `nonfinite_for` rows",
       ("nonfinite_for",), "gradients stay NaN/Inf: the weights are probably corrupted", _LOWER_LR, _GRAD_SEED,
       INSTRUMENTS),
    _r("gradients", "grad-zero", "grad_norm; in GRPO also frac_reward_zero_std and the reward's level",
       "exactly 0 held `zero_for` rows, unless a saturating GRPO reward explains it (grad-zero-saturated)",
       ("zero_for",),
       "nothing is being learned (frozen parameters, all-zero advantages, a broken loss)",
       "find why no parameter gets a gradient before spending more compute", "none", ""),
    _r("gradients", "grad-zero-saturated",
       "grad_norm, frac_reward_zero_std and the reward's level as a success rate (GRPO; core/bounded.py)",
       "exactly 0 held `zero_for` rows while at least half the groups are uniform, the reward sits above 1/2 of its "
       "range and still moves (info)", ("zero_for",),
       "whole batches are solved prompts (all-correct groups, advantages 0): not a dead run",
       "add harder prompts if it persists; a frozen reward or one on the failure side is grad-zero", "none", "",
       origin="above a success rate of 1/2 a uniform group is more likely all-correct than all-wrong "
       "for every group size"),
    _r("gradients", "grad-zero-step", "grad_norm (not GRPO, where all-equal groups give 0)", "one exact 0", (),
       "no parameter received a gradient on this step", "check for frozen weights, a detached loss, an empty batch",
       "none", ""),
    _r("gradients", "grad-spike", "grad_norm / running median of the last `window` rows",
       "one row past `spike_ratio` (info)", ("spike_ratio", "window", "min_history"),
       "an isolated gradient spike", "nothing unless they cluster", _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-explosion", "grad_norm vs the running median and the window's upper quartile",
       "above `explode_ratio` x the median and x the window's upper quartile, and above every norm of the window, "
       "held `explode_for` rows", ("explode_ratio", "explode_for", "window"),
       "gradients are exploding", "lower the LR or tighten max_grad_norm",
       _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-vanishing", "running median of grad_norm / its first 10 rows",
       "ratio below a line, held `vanish_for` rows", ("vanish_ratio", "vanish_for"),
       "gradients are vanishing and the model has stopped moving", "check the schedule, the loss and the data",
       _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-nonfinite-params", "gradients/nonfinite (live: per-parameter hooks)", "any count > 0", (),
       "some gradient entries are NaN/Inf", "find the layer (fp16 overflow, a bad op) and lower the LR",
       _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-layer-imbalance", "gradients/layer_spread (live): largest / smallest per-layer norm",
       "level above a line, held 3 rows", ("layer_spread",),
       "some layers learn while others are frozen or exploding", "check frozen modules and per-layer LR",
       _GRAD_SEED, INSTRUMENTS),
    _r("gradients", "grad-sparse", "gradients/sparsity (live): share of entries ~0", "level above a line, held 3 rows",
       ("sparsity",), "almost no gradient entry is non-zero", "check which parameters are trainable", _GRAD_SEED,
       INSTRUMENTS),
    # -- learning rate ------------------------------------------------------------------------------------------------
    _r("learning_rate", "lr-zero-early", "learning_rate vs its peak, with the planned max_steps",
       "LR <= `zero_frac` x peak before `end_frac` of the run, held `zero_for` rows",
       ("zero_frac", "end_frac", "zero_for"), "the schedule ended early; the remaining steps learn nothing",
       "fix the scheduler's total steps", "LR ≈ 0 well before the end", INSTRUMENTS),
    _r("learning_rate", "lr-zero-long", "share of logged rows with LR ~0 (end of a log without max_steps)",
       "share above 20 % at the end of the log", ("zero_frac",),
       "the schedule spent a large part of the run at ~0", "fix the scheduler's total steps",
       "LR ≈ 0 well before the end", INSTRUMENTS),
    _r("learning_rate", "lr-peak-not-reached", "the schedule's shape: rises and falls of learning_rate",
       "still only rising past `warmup_frac` of the planned steps (or at the end of the log)",
       ("warmup_frac", "rising_share", "min_rows"), "warm-up outlasts most of the run",
       "shorten warmup_steps / warmup_ratio", "peak never reached", INSTRUMENTS),
    # -- attention entropy (live) -------------------------------------------------------------------------------------
    _r("attention_entropy", "attention-collapse", "attention_entropy/mean (live probe) / its first 3 probes",
       "ratio below a line, held 2 probes", ("collapse_ratio",), "heads are collapsing onto single tokens",
       "lower the learning rate; check for degenerate inputs", "collapse toward 0", INSTRUMENTS),
    _r("attention_entropy", "attention-uniform", "attention_entropy/mean / log n (attention_entropy/max_possible)",
       "share above a line, held 2 probes", ("saturation",), "attention spreads uniformly and carries nothing",
       "lower the learning rate; check the attention mask", "unbounded rise toward log n", INSTRUMENTS),
    _r("attention_entropy", "attention-jump", "attention_entropy/mean", "robust z vs the last 20 probes (info)",
       ("jump_z",), "a sudden phase change in attention", "read samples around that step",
       "sudden phase change", INSTRUMENTS),
    # -- samples (live) -----------------------------------------------------------------------------------------------
    _r("samples", "sample-repetition", "samples/repetition_rate (live probe generations)",
       "level above a line, held `repetition_for` rows", ("repetition", "repetition_for"),
       "generations are looping", "add a repetition penalty; check the reward for paying repeats",
       "repetition loops, format drift", INSTRUMENTS),
    _r("samples", "rollout-repetition", "rollouts/repetitive_frac (the training completions)",
       "level above a line, held `rollout_repetitive_for` rows", ("rollout_repetitive", "rollout_repetitive_for"),
       "training completions repeat over half their n-grams", "repetition penalty, or a reward that does not count "
       "repeats", "repetition loops, format drift", INSTRUMENTS),
    _r("samples", "identical-groups", "rollouts/near_identical_group_frac",
       "level above a line, held `rollout_identical_for` rows", ("rollout_identical", "rollout_identical_for"),
       "the policy answers each prompt one way (mode collapse)", "raise the temperature, clip-higher, entropy bonus",
       "none", ""),
    _r("samples", "empty-completions", "rollouts/empty_frac", "level above a line, held `rollout_empty_for` rows",
       ("rollout_empty", "rollout_empty_for"), "an immediate EOS scores well enough",
       "make the reward punish empty answers", "none", ""),
    # -- LoRA (live) --------------------------------------------------------------------------------------------------
    _r("lora", "lora-norm-explosion", "lora/norm_mean (‖B·A‖) / its first 2 probes", "ratio above a line, held 2",
       ("norm_explosion",), "adapters are blowing up", "lower the adapter's learning rate", "norm explosion",
       INSTRUMENTS),
    _r("lora", "lora-rank-collapse", "lora/effective_rank vs lora/rank", "below `rank_collapse` x rank, held 2 (info)",
       ("rank_collapse",), "the adapter uses few directions", "a smaller rank would do",
       "effective rank ≪ configured rank or = configured rank", INSTRUMENTS),
    _r("lora", "lora-layer-imbalance", "lora/norm_cv (cross-layer coefficient of variation)",
       "level above a line, held 2 (info)", ("layer_cv",), "per-layer adapter norms vary widely",
       "check per-layer targets and ranks", "large cross-layer variance", INSTRUMENTS),
    # -- efficiency ---------------------------------------------------------------------------------------------------
    _r("efficiency", "throughput-declining", "step_time: median of the last 10 / its first 10 (after 3 warm-up rows)",
       "ratio above a line, held `slowdown_for` rows; only where the first steps took `min_step_s` or more (a "
       "sub-second step is timed by the host's load, not the run)", ("slowdown", "slowdown_for", "min_step_s"),
       "steps take much longer than at the start", "look for memory fragmentation, growing lengths, a straggler",
       "throughput declining", INSTRUMENTS),
    _r("efficiency", "memory-pressure", "efficiency/mem_frac and efficiency/util (live)",
       "memory above a line while utilisation fell below `util_drop` x its start, held 3 rows",
       ("mem_high", "util_drop"), "the three-alarm fire: allocator thrashing or swapping",
       "reduce batch size or sequence length", "memory in the top 10–15 % while utilisation falls", INSTRUMENTS),
    # -- convergence --------------------------------------------------------------------------------------------------
    _r("convergence", "no-progress", "EWMA of the train loss vs its best and its first 5 rows (not RL surrogates)",
       "no new best for `plateau_rows` rows and under `progress` gained, after `min_rows`",
       ("plateau_rows", "progress", "min_rows", "warmup_share"), "the run is not learning",
       "check learning rate, data and labels", "trend flat while loss still high (plateau)", INSTRUMENTS),
    _r("convergence", "eval-plateau", "eval_loss vs its best", "no improvement by `min_delta` in `patience` evals, "
       "before the schedule's end (eval-converged there)", ("patience", "min_delta", "schedule_done_lr"),
       "converged or stuck: early stopping would stop here", "stop, or change the schedule",
       "patience counter (default patience 5, min_delta 0.001)", INSTRUMENTS),
    _r("convergence", "eval-converged", "eval_loss vs its best, learning_rate vs its peak, the step vs max_steps",
       "eval-plateau's test at the end of the schedule: the learning rate at or under `schedule_done_lr` of its "
       "peak, or past `schedule_done_share` of the planned steps (info; eval-plateau stays quiet there)",
       ("patience", "min_delta", "schedule_done_lr", "schedule_done_share"),
       "the run converged where it was planned to end", "nothing; keep the best checkpoint", "none", ""),
    _r("convergence", "overfitting", "train/eval gap velocity (change of eval - train EWMA per eval / eval_loss)",
       "velocity above a line while eval stalls, held 2 evals", ("gap_velocity",), "the model is overfitting",
       "keep the best checkpoint; regularise or stop", "gap velocity > 0.1 (overfitting)", INSTRUMENTS),
    _r("convergence", "eval-diverging", "the last 3 evals and the train EWMA at each",
       "eval rose 3 times while train fell, `diverge_margin` above its best", ("diverge_margin",),
       "classic overfitting", "keep the best checkpoint; stop or regularise", "eval diverging from train",
       INSTRUMENTS),
    _r("convergence", "eval-oscillating", "the last `osc_evals` eval losses",
       "`osc_flips` direction changes of mean size `osc_amp`, no new best", ("osc_evals", "osc_flips", "osc_amp"),
       "the run oscillates instead of converging", "lower the learning rate at this stage, or evaluate on more data",
       "eval oscillating", INSTRUMENTS),
    # -- reward -------------------------------------------------------------------------------------------------------
    _r("reward", "reward-flatline", "reward / objective/scores over the last `flat_rows` rows",
       "range within `flat_span` x level", ("flat_span", "flat_rows"),
       "every completion gets the same score: no learning signal", "check the reward function and format penalties",
       "none", ""),
    _r("reward", "reward-flatline-persistent", "reward / objective/scores", "flat for `flat_stop_rows` rows (stop)",
       ("flat_span", "flat_stop_rows"), "the run cannot learn", "stop and fix the reward", "none", ""),
    _r("reward", "reward-plateau", "reward / objective/scores: trend over the whole run so far",
       "regression t below `plateau_t` after `min_rows`, and the slope's upper bound (`plateau_z` AR(1)-widened "
       "standard errors) adding under `plateau_gain` row-noise sigmas over the planned run; held `plateau_for` rows",
       ("plateau_t", "plateau_gain", "plateau_z", "plateau_for", "min_rows", "warmup_share"),
       "the policy is stable but not learning",
       "check the learning rate, the task's difficulty and frac_reward_zero_std", "none", ""),
    _r("reward", "reward-saturated", "the task score (gold, e.g. verl critic/score) or the reward as a success rate",
       "flat (reward-flatline's test) or stalled (reward-plateau's) with the smoothed level at or above "
       "`saturated_level` (info; those two stay quiet there)", ("saturated_level", "flat_rows"),
       "the task is solved: every completion scores alike, nothing left to climb",
       "nothing; harder prompts give a signal again", "none", ""),
    _r("reward", "reward-hacking",
       "reward gain in its early sigmas, completions/mean_length ratio and their correlation",
       "length above `hack_length_ratio` x start, corr above `hack_corr`, gain above `hack_gain_sigma`, held 3",
       ("hack_length_ratio", "hack_corr", "hack_gain_sigma"), "the policy may be paid for length, not quality",
       "read samples; check KL; add a length penalty", "Reward hacking is the default failure mode.", POST),
    _r("reward", "reward-pays-length", "reward and completions/mean_length, row by row from the row the reward's "
       "shift detector crossed `shift_h`",
       "the reward jumped far outside its noise (its CUSUM crossed `shift_h` on a row `pays_jump_z` sigmas out) and, "
       "since then, correlates with the mean length at `pays_corr` or more over `pays_rows` to `pays_window` rows",
       ("shift_h", "pays_jump_z", "pays_rows", "pays_window", "pays_corr"),
       "the reward now pays for length (a per-token or per-character term, a lost length normalisation)",
       "check the reward function and read samples; add a length penalty",
       "Reward hacking is the default failure mode.", POST,
       origin="reward-hacking waits until the length has grown 1.5x; a reward that starts paying length jumps at once, "
       "and rows since the jump that follow the length are the same loophole read before the length grows"),
    _r("reward", "reward-shift-up", "reward, residuals in its own noise units",
       "two-sided CUSUM (k=`shift_k`, h=`shift_h`) with clipped residuals (info)", ("shift_k", "shift_h", "shift_clip"),
       "a jump, not the slow trend: the policy found something", "if length or KL jumped with it, read samples",
       "none", ""),
    _r("reward", "reward-shift-down", "reward: CUSUM residuals; EWMA vs its peak",
       "CUSUM past `shift_h` (a score held at its ceiling: only once it gave back `ceiling_drop_share` of the "
       "run's gain), or a fall of `drop_share` of the gain held `drop_for` rows",
       ("shift_h", "ceiling_drop_share", "drop_share", "drop_sigma", "drop_for"), "the policy lost something it had",
       "check KL, entropy and samples at that step", "none", ""),
    _r("reward", "reward-volatile",
       "row-to-row reward changes clipped at 4 robust sigmas, in reward_std units (a [0, 1] reward without it: its "
       "binomial noise, rows at a success rate under 5 % or over 95 % not measured; DPO: margin noise / level)",
       "a CUSUM for the noise rising `volatile_ratio(_rl)` x over `volatile_tol` x its previous octave (each row's "
       "z^2 clipped at 9), threshold from `volatile_arl`, while the windowed noise ratio is past the same line",
       ("volatile_ratio_rl", "volatile_ratio", "volatile_tol", "volatile_arl", "volatile_warmup_rl"),
       "unstable optimisation", "lower the learning rate or raise beta",
       "High reward variance: Unstable rewards suggest unstable optimisation.", POST,
       origin="RL rewards use volatile_ratio_rl, DPO margins volatile_ratio", budgeted=True,
       budget_param="volatile_arl"),
    _r("reward", "gold-rising", "the gold reward (params reward.gold): trend over the second half of the run",
       "half-run t at least `gold_rising_t` over 20+ rows (info)", ("gold_rising_t",),
       "the held-out check confirms the gains", "nothing: this lets the reward-hacking diagnosis stand down",
       "none", ""),
    _r("reward", "proxy-gold-divergence", "proxy reward vs gold reward (EWMAs, trends, noise coupling)",
       "gold stalled/fell since its peak while the proxy rose, held `gold_for` rows (or coupled drop `gold_drop_se`)",
       ("gold_for", "gold_stall_rows", "gold_gap_sigma", "gold_drop_se"),
       "over-optimisation: the policy learns the proxy's loopholes",
       "keep the checkpoint from before the divergence; raise beta; fix the proxy",
       "Proxy up while gold stalls or falls is over-optimisation (Gao et al. 2023).", INSTRUMENTS),
    _r("reward", "proxy-outpaces-gold", "proxy reward vs gold reward, both rates in [0, 1]: each one's gain as a share "
       "of its headroom (1 - its start), against its own row-to-row noise",
       "the proxy up `gold_gap_sigma` standard errors while the gold's share, at `gold_share_z` standard errors above, "
       "is under `gold_share` of the proxy's at `gold_share_z` below, held `gold_share_for` rows",
       ("gold_share", "gold_share_z", "gold_share_for", "gold_gap_sigma"),
       "reward hacking: the proxy is paid for something the gold does not measure (a gold rising by a sliver "
       "beside it, statistically real or not)",
       "read samples the proxy scores high and the gold low; fix the proxy or train on the gold", "none", ""),
    _r("reward", "reward-component-saturated", "rewards/<fn>/mean and /std per reward function",
       "the one rising component pinned at its peak with std near 0, others flat, held `saturated_for` rows",
       ("component_gain_sigma", "component_dead", "saturated_for"),
       "the easy part is learned and gives no signal any more", "check the other functions' scale and weights",
       "none", "", per_function=True),
    _r("reward", "reward-component-dominant", "rewards/<fn>/mean per reward function",
       "one component up `component_gain_sigma`, the rest under `component_flat_sigma`, held `component_for` (info)",
       ("component_gain_sigma", "component_flat_sigma", "component_for"), "one component carries the whole rise",
       "log a held-out gold reward to tell hacking from learning", "none", "", per_function=True),
    _r("reward", "accuracy-chance", "EWMA of rewards/accuracies (DPO family) or accuracy (reward model)",
       "below `accuracy_chance` after `dpo_min_rows` while the margin is not climbing, held 10 rows",
       ("accuracy_chance", "dpo_min_rows", "margin_learning_t"), "the model is not learning the preference",
       "check the learning rate, beta and that chosen/rejected are right", "none", "",
       origin="no seed line: 0.55 is the product's own (chance is 0.5)"),
    _r("reward", "margin-collapse", "EWMA of rewards/margins (rows clipped at 5 robust sigmas) vs its peak",
       "below `margin_collapse` x peak and `margin_collapse_se` standard errors of the EWMA (AR(1)-aware) under it, "
       "held 5",
       ("margin_collapse", "margin_collapse_se", "margin_peak_min", "dpo_min_rows"),
       "the preference signal is being undone",
       "lower the LR, check for noisy pairs, raise beta", _CONVERGE, POST),
    _r("reward", "margin-shrinking", "rewards/margins: fall from its peak and its trend",
       "`margin_shrink` off the peak with t <= `margin_shrink_t`, past `margin_shrink_sd` noise, held",
       ("margin_shrink", "margin_shrink_t", "margin_shrink_sd", "margin_shrink_for"),
       "chosen and rejected are converging", "lower the learning rate; keep the best checkpoint", _CONVERGE, POST),
    _r("reward", "margin-negative", "EWMA of rewards/margins", "below 0 after `dpo_min_rows`, held 5",
       ("dpo_min_rows",), "the policy prefers the rejected answers", "check that chosen/rejected are not swapped",
       "none", ""),
    _r("reward", "margin-plateau", "rewards/margins growth over the second half; accuracy EWMA",
       "growth under `margin_plateau_growth` while accuracy is below `plateau_accuracy`, held `margin_plateau_for`",
       ("margin_plateau_growth", "plateau_accuracy", "margin_plateau_for"),
       "the model stopped learning from the preference data early", "raise the learning rate or get more signal",
       "If rewards/margins plateaus early, your model has stopped learning from the preference data.", POST),
    _r("reward", "chosen-reward-falling", "EWMA of rewards/chosen vs its first 5 rows, with the margin",
       "0.1 below its start while the margin grows, held 10 (info)", ("dpo_min_rows",),
       "likelihood displacement: common in DPO, usually harmless", "watch logps/chosen", "none", ""),
    _r("reward", "chosen-reward-runaway", "rewards/chosen trend (windowed and half-run) vs rewards/rejected",
       "chosen above `runaway_level` climbing at t >= `runaway_t` while rejected does not fall, held 5; not while "
       "the climb settles (its slope over the later half of the run under `runaway_settle` x its average since the "
       "start: the pair being learned)", ("runaway_level", "runaway_t", "runaway_half_t", "runaway_settle"),
       "the policy exploits the implicit reward",
       "raise beta or lower the learning rate",
       "Unbounded reward growth: If chosen rewards keep climbing without limit", POST),
    _r("reward", "reward-outliers", "rollouts/reward_outlier_z and _frac (the training completions)",
       "a few completions past `rollout_outlier_z` robust sigmas, held `rollout_outlier_for` rows",
       ("rollout_outlier_z", "rollout_outlier_frac", "rollout_outlier_for"),
       "the policy may have found a loophole the rest will copy", "read the outliers", "none", ""),
    # -- KL -----------------------------------------------------------------------------------------------------------
    _r("kl", "kl-warn", "kl (GRPO, per token) / objective/kl (PPO, per sequence)",
       "level above a line, held `for` rows, or sooner where a CUSUM of (kl - line) in the row noise (AR(1) "
       "prewhitened, rows clipped at `warn_clip` sigmas, reference `warn_k`) crosses its ARL0-budget threshold",
       ("warn", "for", "warn_k", "warn_clip"), "the policy drifts far from the reference",
       "watch the reward; consider a larger beta",
       _KL_LINES, POST, origin="PPO/Online DPO log a per-sequence sum: their lines are per family",
       budgeted=True),
    _r("kl", "kl-stop", "kl / objective/kl", "level above a line, held `for` rows (stop)", ("stop", "for"),
       "the policy ran away from the reference", "stop; raise beta or lower the LR; resume earlier", _KL_LINES, POST,
       origin="per family, as kl-warn"),
    _r("kl", "kl-negative", "EWMA of the KL estimate", "below `negative`, held 5 rows", ("negative",),
       "the estimator gets mismatched log-probs", "align sampling and training settings; check the reference",
       "k3 is never negative", INSTRUMENTS),
    _r("kl", "kl-spike", "KL", "robust z above `spike_z` vs the window, and above `spike_min` (info)",
       ("spike_z", "spike_min"), "one batch the model handles very differently", "investigate that batch",
       "KL suddenly spiking: Often indicates a batch of data that the model handles very differently from the "
       "reference.", POST),
    _r("kl", "kl-spike-repeated", "KL spikes within `spike_repeat_rows`",
       "`spike_repeat` spikes and a Poisson tail below `spike_repeat_p` vs the run's own rate",
       ("spike_repeat", "spike_repeat_rows", "spike_repeat_p"), "the updates are unstable",
       "lower the learning rate or raise beta", "none", ""),
    _r("kl", "kl-high-at-start", "mean KL of the first `start_rows` rows", "above the warn line once",
       ("start_rows", "warn"), "the reference is not the initial policy, or sampling and scoring differ",
       "check the reference model, temperature and chat template", "none", ""),
    _r("kl", "kl-to-teacher", "kl / verl actor/kl_loss beside a key naming distill or teacher (verl "
       "actor/distillation/*, distill_loss, teacher_kl) in the first rows; or past `warn` at step 1, before any "
       "update, to a reference whose log-prob pass costs 2x the policy's (verl timing_s/ref vs timing_s/old_log_prob: "
       "a larger model); or `to: teacher`",
       "above the warn line (info, once); kl-warn, kl-stop, kl-high-at-start and kl-near-zero do not apply",
       ("to", "warn"), "the KL is to a teacher (on-policy distillation): high from the start by design, it falls as "
       "the student learns", "nothing; watch that it falls", "none", "",
       origin="the post's lines measure drift from the reference (the initial policy); a teacher is another model"),
    _r("kl", "kl-teacher-diverging", "a KL to a teacher (kl-to-teacher): its EWMA vs its first `start_rows` rows",
       "above `stop` / `warn` (2x) times its start, held `for`",
       ("stop", "warn", "start_rows", "for"), "the student is moving away from the teacher it distils",
       "stop; check the learning rate, the reward's weight against the KL term and the samples", "none", "",
       origin="the reference's stop line is twice its warn line; a teacher's KL is read from where the student "
       "started"),
    _r("kl", "kl-near-zero", "median and spread of KL over the window after `near_zero_rows` rows",
       "|median| below `near_zero` and its spread pinned too (under 10x it: not an estimate scattered around 0), "
       "held 20",
       ("near_zero", "near_zero_rows"), "the policy is not moving (beta too high, LR too low)",
       "lower beta or raise the learning rate",
       "KL near zero throughout training: Your KL penalty (beta) is too high.", POST),
    _r("kl", "kl-growing", "KL slope, acceleration and projection vs its own noise",
       "slope t (deflated for AR(1) noise) above `grow_t`, projected past the warn line within a window (by "
       "acceleration only past 2 standard errors) or by the run's end; held",
       ("grow_t", "grow_min", "grow_accel", "grow_for", "grow_end"), "runaway policy drift, before the line",
       "raise beta or lower the learning rate", "KL growing without bound: Runaway policy drift.", POST),
    _r("kl", "kl-noisy", "KL row-to-row noise / its median level; share of negative estimates; a noise CUSUM",
       "noise ratio above `noisy_cv` and `noisy_ratio` x earlier (not for an estimate scattered around 0), a "
       "negative share rising 3 binomial errors from a rare start, or the CUSUM past `noisy_h`; held",
       ("noisy_cv", "noisy_ratio", "noisy_negative", "noisy_h", "noisy_for"), "unstable optimisation",
       "lower the learning rate for this KL penalty", "KL noisy with high variance: Unstable optimisation.", POST),
    # -- policy ratio -------------------------------------------------------------------------------------------------
    _r("policy_ratio", "ratio-warn", "val/ratio (PPO)", "outside a band, held `warn_for` rows",
       ("ratio_warn", "warn_for"),
       "updates drift off-policy", "lower the learning rate or PPO epochs",
       "Values consistently above 1.5 or below 0.7 indicate that consecutive policy updates are too drastic.", POST),
    _r("policy_ratio", "ratio-stop", "val/ratio (PPO)", "outside the wider band, held `for` rows",
       ("ratio_stop", "for"), "updates are far off-policy: the trust region is gone",
       "lower the learning rate or PPO epochs",
       "If it regularly exceeds 2.0 or drops below 0.5, the policy updates are too aggressive", POST,
       origin="the post warns here, it does not stop: a warning despite the name (kept for alerts.yaml)"),
    _r("policy_ratio", "clip-high", "policy/clipfrac_avg (PPO) / clip_ratio/region_mean (GRPO)",
       "level above a line, held `warn_for` rows", ("clip_warn", "warn_for"), "updates are too aggressive",
       "lower the learning rate or num_iterations",
       "Clip fraction too high (> 30%): Most of your updates are being clipped.", POST,
       origin="GRPO's line is 40 %, from the series' GRPO guidance (Part III of the series: "
              "'total clip > 40 % excessive ... 10–30 % usually healthy'); the post's 30 % is PPO's"),
    _r("policy_ratio", "clip-stop", "clip fraction", "level above a line, held `for` rows (stop)", ("clip_stop", "for"),
       "each update is far too large: KL explosion usually follows", "stop; lower LR or num_iterations", "none", "",
       origin="no seed line: 50 % (GRPO 60 %) is the product's own stop, above the seed's warn lines"),
    _r("policy_ratio", "clip-low", "EWMA of the clip fraction, off-policy runs only",
       "below `clip_low`, held 10 (info)",
       ("clip_low",), "updates are very timid", "a larger learning rate would learn faster",
       "Clip fraction too low (< 1%): Almost no clipping is happening.", POST),
    _r("policy_ratio", "clip-growing", "clip fraction trend vs its start and noise",
       "trend t above `grow_t`, up `grow_abs` and `grow_ratio` x the start, held `grow_for`",
       ("grow_t", "grow_abs", "grow_ratio", "grow_sigma", "grow_for"), "updates getting more aggressive",
       "lower the learning rate before it passes the clip line",
       "Clip fraction growing over time: The optimisation is becoming increasingly aggressive.", POST),
    _r("policy_ratio", "ratio-variance", "EWMA of val/ratio_var (else the ratio's spread) vs its start",
       "above `ratio_var_x` x start and `ratio_var_min`, held 3", ("ratio_var_x", "ratio_var_min"),
       "the trust region is fraying", "lower the learning rate or the number of PPO epochs", "none", ""),
    _r("policy_ratio", "value-loss-growing", "EWMA of loss/value_avg vs its start; trend",
       "`value_growth` x start and t >= `value_t`, held 3", ("value_growth", "value_t"),
       "the value function cannot follow the returns", "lower the LR, check reward scale, smaller vf_coef",
       "Value function: Value loss, value clipping. (PPO only.)", POST),
    _r("policy_ratio", "value-clip-high", "val/clipfrac_avg", "level above a line, held 3", ("value_clip",),
       "the value function moves too far per update", "lower the LR or widen cliprange_value",
       "Value function: Value loss, value clipping. (PPO only.)", POST,
       origin="waits out the critic's warm-up (`value_warmup` value rows): a fresh value head is clipped while it "
              "moves to the first returns (value-clip-warmup)"),
    _r("policy_ratio", "value-clip-warmup", "val/clipfrac_avg (TRL PPO; verl critic/vf_clipfrac)",
       "above `value_clip` within the critic's first `value_warmup` value rows (info)", ("value_clip", "value_warmup"),
       "a fresh value head moving to the returns: a fact of PPO's critic, not the policy's clip",
       "nothing; it warns (value-clip-high) if it lasts past the warm-up", "none", ""),
    # -- length -------------------------------------------------------------------------------------------------------
    _r("length", "length-explosion", "EWMA (`smooth`) of completions/mean_length / its first `baseline_rows` rows",
       "ratio above a line, held `for` rows", ("explode", "for", "smooth"), "length bias",
       "add a length penalty or check the reward", "baseline ratio < 0.5 or > 2.0", INSTRUMENTS),
    _r("length", "length-collapse", "EWMA of mean length / baseline", "ratio below a line, held `for` rows",
       ("collapse", "for"), "terse collapse", "check for a reward that punishes length",
       "baseline ratio < 0.5 or > 2.0", INSTRUMENTS),
    _r("length", "length-grew", "slow EWMA of mean length vs the baseline",
       "past `drift` by its own noise and `significance` standard errors, held `drift_for`; not in a run that distils "
       "while its KL to the teacher is below its start (kl-to-teacher: the student's length follows its teacher's)",
       ("drift", "drift_sd", "significance", "drift_for"), "verbosity pays",
       "length normalisation or a brevity penalty",
       _LEN_DEV, POST),
    _r("length", "length-shrank", "slow EWMA of mean length vs the baseline, with the reward's progress",
       "as length-grew, downwards, while the reward is not improving now, and fallen by `shrink_now` of the baseline "
       "(and `significance` errors) over the same last 45 rows: a length that fell while the reward climbed and now "
       "holds is a concise policy", ("drift", "significance", "drift_for", "shrink_now"),
       "short answers are safer for the policy", "check the reward for penalties it avoids by saying less",
       "Length steadily decreasing: The model is learning that short responses are safer.", POST),
    _r("length", "length-shorter-concise", "as length-shrank", "the same fall while the reward improves (info)",
       ("drift", "significance", "drift_for"), "the model is getting more concise", "read a few samples", "none", ""),
    _r("length", "length-trend-up", "mean length trend over `trend_rows` and its projection to the planned end",
       "t >= `trend_t` and on course for `trend_target` (or past `trend_min`), held `trend_for`; not in a run that "
       "distils while its KL to the teacher is below its start (as length-grew)",
       ("trend_t", "trend_target", "trend_now", "trend_min", "trend_for"), "a length bias is being learned",
       "length normalisation or a brevity penalty",
       "Length steadily increasing: The model is learning that verbosity is rewarded.", POST),
    _r("length", "length-trend-down", "as length-trend-up, on a log scale",
       "the same, falling, reward not improving now, and fallen by `shrink_now` of the baseline over the last 45 rows "
       "(as length-shrank: a length that fell while the reward climbed and now creeps is a concise policy at rest)",
       ("trend_t", "trend_target", "trend_min", "trend_for", "shrink_now"), "the model learns to say less",
       "check which penalty it avoids",
       "Length steadily decreasing: The model is learning that short responses are safer.", POST),
    _r("length", "length-variance-collapse", "within-batch spread (max - min) / mean vs its start",
       "below `spread_collapse` x start past `significance` errors while the reward is not clearly rising now "
       "(however deep); held `for`",
       ("spread_collapse", "significance", "for"), "answers converge on one template",
       "raise the temperature or add an entropy bonus",
       "Length variance collapsing: Even if mean length stays stable, collapsing variance indicates mode collapse.",
       POST),
    _r("length", "length-spread-narrowing", "as length-variance-collapse",
       "the same narrowing while the reward clearly rises now (info)", ("spread_collapse", "significance", "for"),
       "the policy is sharpening", "read samples for one template", "none", ""),
    _r("length", "length-variance-change", "spread ratio squared (and log(max/min)) vs the baseline",
       "past `variance_change` and `significance` errors, held `drift_for`; a growth of (max - min) / mean counts "
       "only if the range in tokens grew too (a mean falling under a max pinned at the cap is not a wider shape)",
       ("variance_change", "significance", "drift_for"), "the output distribution changes shape",
       "read samples; compare with the SFT model", _LEN_DEV, POST),
    _r("length", "truncation", "completions/clipped_ratio", "level above a line, held `truncation_for` rows",
       ("truncation", "truncation_for"), "rewards are computed on cut-off answers",
       "raise max_completion_length or penalise overlong answers",
       "If completions/clipped_ratio is high (> 20%), many responses are hitting the maximum length limit.", POST),
    _r("length", "truncation-gap",
       "(mean_length - mean_terminated_length) / mean_length, where clipped_ratio is absent",
       "above `gap`, held `truncation_for` rows", ("gap", "truncation_for"), "many answers are cut off",
       "raise the limit or find out why the model rambles",
       "A large gap between these two metrics indicates frequent truncation", POST),
    _r("length", "no-eos", "val/num_eos_tokens (PPO)", "0, held 10 rows", (),
       "no completion ends: the reward scores unfinished text", "check the stop token and generation config",
       "none", ""),
    _r("length", "length-paid", "rollouts/length_reward_corr within groups (the training completions)",
       "above `rollout_paid_corr` over `rollout_paid_dof` completions, held `rollout_paid_for`",
       ("rollout_paid_corr", "rollout_paid_dof", "rollout_paid_for"), "the reward pays for length",
       "a length penalty or cap (DAPO-style overlong shaping)", "Length–reward correlation: length hacking.",
       INSTRUMENTS),
    # -- entropy ------------------------------------------------------------------------------------------------------
    _r("entropy", "entropy-collapse", "EWMA of entropy / its first `baseline_rows`, with the reward's progress",
       "below `collapse_ratio`, the fall `collapse_se` standard errors of the smoothed level (AR(1)-aware) out of "
       "the row noise, with a collapse sign (reward flat and not near its ceiling: smoothed level under "
       "`saturated_level`; zero-std up), held `for`; or below `deep_ratio` while the task score's level is under "
       "`failing_level` (most completions still fail: a template, not sharpening), held `deep_for`. The start is "
       "the first `baseline_rows` rows before any gap in the log (a row more than 4 logging intervals after the "
       "last: a trimmed or resumed log), and the smoothed level starts over after such a gap",
       ("collapse_ratio", "collapse_se", "deep_ratio", "failing_level", "deep_for", "zero_std_rise",
        "saturated_level", "for", "baseline_rows"),
       "mode collapse: the policy stopped exploring",
       "raise the temperature, clip-higher, an entropy bonus, or filter prompts",
       "Collapse is entropy falling *with* the reward signal drying up", INSTRUMENTS),
    _r("entropy", "entropy-collapse-persistent", "as entropy-collapse", "below `stop_ratio` with collapse signs, "
       "held `stop_for` (stop)", ("stop_ratio", "stop_for"), "the policy has collapsed",
       "stop; resume earlier with more exploration",
       "Collapse is entropy falling *with* the reward signal drying up", INSTRUMENTS),
    _r("entropy", "entropy-sharpening", "as entropy-collapse", "below `sharpening_ratio` with no collapse sign (info)",
       ("sharpening_ratio", "for"), "the policy sharpens on what it learned", "nothing; watch the reward",
       "a learning GRPO run sharpens", INSTRUMENTS),
    _r("entropy", "entropy-spike", "entropy", "robust z above `spike_z` vs the last 30 rows (info)", ("spike_z",),
       "possible forgetting or a bad batch", "read samples at that step", "a spike can mean forgetting", INSTRUMENTS),
    # -- reward signal ------------------------------------------------------------------------------------------------
    _r("reward_signal", "zero-std-dead", "frac_reward_zero_std", "at least `zero_std_stop`, held `stop_for` (stop)",
       ("zero_std_stop", "stop_for"), "every group scores alike: no gradient", "change the prompts or the reward",
       "none", ""),
    _r("reward_signal", "zero-std-high",
       "EWMA of frac_reward_zero_std, the reward's smoothed level as a success rate (core/bounded.py), its progress",
       "above `zero_std_warn` with the level at most half of it (the uniform groups mostly failures; a signed "
       "reward: the line alone) and the reward not rising, held `for`", ("zero_std_warn", "for", "smooth"),
       "the learning signal is vanishing: most uniform groups fail every completion (prompts too hard)",
       "filter prompts by difficulty (drop the ones it always fails) or raise num_generations",
       "`frac_reward_zero_std` (share of groups whose rewards are all equal) is the robust form of the same signal.",
       INSTRUMENTS),
    _r("reward_signal", "zero-std-solved", "as zero-std-high",
       "above `zero_std_warn` with the smoothed level above 1/2 or the reward rising (info)",
       ("zero_std_warn", "for", "smooth"),
       "prompts are being solved", "add harder prompts when it nears 100 %", "none", ""),
    _r("reward_signal", "no-update-step",
       "frac_reward_zero_std (or reward_std = 0 where it is not logged), grad_norm and the reward's level",
       "every group uniform (at least `zero_std_stop`) and grad_norm 0, `no_update_for` rows in a row, unless the "
       "reward sits on the success side and still moves (solved batches)", ("zero_std_stop", "no_update_for"),
       "these steps changed nothing: the groups fail alike and the optimizer gets no gradient",
       "if it goes on the run is dead: change the prompts or the reward", "none", "",
       origin="one such row is chance on a small batch (4 groups of 2 at p = 1/2: 6 % of rows)"),
    _r("reward_signal", "reward-std-low", "reward_std where frac_reward_zero_std is not logged (older TRL)",
       "a runs test: k rows in a row under `std_low` whose chance q^k (q: this run's own rate of such rows before "
       "the streak) is under `std_low_alpha`, while the reward is not rising", ("std_low", "std_low_alpha"),
       "little signal left to learn from",
       "filter prompts by difficulty",
       "Reward std is the primary GRPO gauge: warn when it falls below 0.05 (no signal left to learn from).",
       INSTRUMENTS),
    _r("reward_signal", "reward-component-dead", "rewards/<fn>/std per reward function",
       "below `component_dead`, held `component_for`", ("component_dead", "component_for"),
       "the function scores every completion alike", "fix or drop the function",
       "a component whose std stays below 0.01 is dead.", INSTRUMENTS, per_function=True),
    _r("reward_signal", "length-reward-correlation", "correlation of reward and mean length over 30 rows",
       "above 0.8, held 5 (info)", (), "length may be what is paid", "read samples; see length-paid",
       "Length–reward correlation: length hacking.", INSTRUMENTS),
    _r("reward_signal", "reward-ceiling", "rollouts/reward/<fn>/ceiling_frac (the training completions)",
       "at least `rollout_ceiling`, held `rollout_ceiling_for`", ("rollout_ceiling", "rollout_ceiling_for"),
       "the function no longer tells completions apart", "harder prompts, or fix the loophole", "none", "",
       per_function=True),
    _r("reward_signal", "advantage-decided-by", "rollouts/reward/<fn>/advantage_share",
       "at least `rollout_decides`, held `rollout_decides_for` (info)", ("rollout_decides", "rollout_decides_for"),
       "one function alone decides the advantage", "check the other functions' weights", "none", "",
       per_function=True),
    # -- sanity of values ---------------------------------------------------------------------------------------------
    _r(ANY_GAUGE, RANGE_RULE, "the gauge reading each key with a mathematical range (core/sanity.py): "
       + _ranged_keys(),
       "one value outside its range beyond float noise, reported once per key", (),
       "a logging bug (sign, definition or units): every rule reading the key judges a wrong number",
       "fix the logging of the key named in the message", "none", "",
       origin="an entropy cannot be negative, a share cannot pass 1"),
    # -- diagnoses ----------------------------------------------------------------------------------------------------
    *(_r("diagnosis", p.name, "the firing rules of the other gauges: " + "; or ".join(
        " + ".join("(" + " | ".join(grp) + ")" for grp in groups) for groups, _ in p.when),
        "; or ".join(f"rules of {n} of those {len(groups)} groups firing together" for groups, n in p.when)
        + (f", unless {', '.join(p.unless)} fires" if p.unless else ""), (),
        f"the failure pattern '{p.title}' across gauges", p.todo, _GALLERY, POST)
      for p in PATTERNS),
)
"""Every rule, in gauge order."""


def by_key() -> dict[tuple[str, str], Rule]:
    return {r.key: r for r in CATALOG}


def rule_ids() -> frozenset[str]:
    """Every rule id the catalog documents (a per-function rule by its id without ``:<function>``)."""
    return _RULE_IDS


_RULE_IDS = frozenset(r.id for r in CATALOG)


# -- what the source can raise --------------------------------------------------------------------------------------

_RAISED: dict[str, set[str]] | None = None


def raised_rules(root: Path | None = None) -> dict[str, set[str]]:
    """``{rule id: severities}`` for every rule the core's source can raise, read from its syntax tree.

    Every ``.check(...)`` and ``Finding(...)`` call in ``core/*.py``: a literal id; an f-string id
    (``f"reward-ceiling:{fn}"`` is ``reward-ceiling``, one per reward function); an id built from a prefix
    (``NonFiniteTracker.check(..., "loss")`` with ``f"{prefix}-nonfinite"``); the diagnoser's ``pat.name``
    (every pattern); a name bound to a string constant (``RANGE_RULE``). A ``.check`` whose id is none of these
    is ``?<source>`` so the catalog test fails until this reader learns it."""
    global _RAISED
    if root is None and _RAISED is not None:
        return _RAISED
    base = root or Path(__file__).parent
    out: dict[str, set[str]] = {}
    templates: list[tuple[str, str]] = []  # (suffix after {prefix}, severity)
    prefixes: set[str] = set()
    trees = {f: ast.parse(f.read_text(encoding="utf-8")) for f in sorted(base.glob("*.py"))}
    consts = _string_constants(trees)
    for f, tree in trees.items():
        names = _imported_names(tree, consts, f.stem)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            callee = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if callee == "check" and len(node.args) >= 3:
                if (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                        and fn.value.id == "NonFiniteTracker"):
                    if len(node.args) >= 4 and isinstance(node.args[3], ast.Constant):
                        prefixes.add(str(node.args[3].value))
                    continue
                rid, sev = node.args[0], _const(node.args[2])
                for name in _ids(rid, names, templates, sev):
                    out.setdefault(name, set()).add(sev)
            elif callee == "Finding" and len(node.args) >= 3:
                rid, sev = node.args[1], _const(node.args[2])
                if isinstance(rid, ast.Name) and rid.id in names:
                    out.setdefault(names[rid.id], set()).add(sev)
                elif isinstance(rid, ast.Constant) and isinstance(rid.value, str):
                    out.setdefault(rid.value, set()).add(sev)
    for prefix in prefixes:
        for suffix, sev in templates:
            out.setdefault(prefix + suffix, set()).add(sev)
    if root is None:
        _RAISED = out
    return out


def _const(node: ast.AST) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"


def _ids(node: ast.AST, names: dict[str, str], templates: list[tuple[str, str]], sev: str) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and str(head.value).endswith(":"):
            yield str(head.value)[:-1]
        elif (isinstance(head, ast.FormattedValue) and isinstance(head.value, ast.Name) and head.value.id == "prefix"
              and len(node.values) == 2 and isinstance(node.values[1], ast.Constant)):
            templates.append((str(node.values[1].value), sev))
        else:
            yield "?" + ast.unparse(node)
    elif isinstance(node, ast.Attribute) and node.attr == "name" and ast.unparse(node) == "pat.name":
        yield from (p.name for p in PATTERNS)
    elif isinstance(node, ast.Name) and node.id in names:
        yield names[node.id]
    else:
        yield "?" + ast.unparse(node)


def _string_constants(trees: dict[Path, ast.Module]) -> dict[str, dict[str, str]]:
    """``{module stem: {NAME: "value"}}`` of module-level string constants."""
    out: dict[str, dict[str, str]] = {}
    for f, tree in trees.items():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                out.setdefault(f.stem, {})[node.targets[0].id] = node.value.value
    return out


def _imported_names(tree: ast.Module, consts: dict[str, dict[str, str]], stem: str) -> dict[str, str]:
    """The string constants a module can name: its own and those it imports from a sibling module."""
    names = dict(consts.get(stem, {}))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in consts:
            for alias in node.names:
                if alias.name in consts[node.module]:
                    names[alias.asname or alias.name] = consts[node.module][alias.name]
    return names
