"""What only a trainer has, gathered into each log row of RLClusterCallback.

Gradient statistics (``gradients.py``), the forward probes (LoRA, attention entropy, greedy samples; ``probes.py``),
throughput and memory, and the rollouts an attached GRPO/RLOO trainer generates (``trl_rollouts.py``). Each is
measured at its own Trainer event and waits in ``_live`` for the next ``on_log`` row, where the gauges judge it like
any logged key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.keys import to_float
from . import probes
from .gradients import GradientReader
from .trl_rollouts import RolloutJudge


class TrainerInputs:
    """The callback's live inputs: built by ``_init_inputs``, set up at ``on_train_begin`` (``_setup_inputs``),
    merged into the row by ``_add_inputs``."""

    sink: Any
    rows: Any
    prefix: str
    log_to_wandb: bool

    def _error(self, where: str, exc: BaseException) -> None:
        raise NotImplementedError

    def _init_inputs(self, grad_every: int, attention_every: int, lora_every: int, sample_every: int,
                     sample_tokens: int) -> None:
        self._live: dict[str, float] = {}  # probe and efficiency values waiting for the next log row
        self._efficiency = probes.EfficiencyMeter()
        self.probes = probes.ForwardProbes(lora_every, attention_every, sample_every, sample_tokens, self._error)
        # gradient health under DDP / FSDP2 / ZeRO, and what is off under sharding, and why
        self.gradients = GradientReader(grad_every, {"attention_entropy": ("attention entropy", attention_every),
                                                     "samples": ("samples", sample_every)},
                                        lora_every, self._live, self._error)
        self.rollouts = RolloutJudge()  # off unless a trainer was attached

    def attach(self, trainer: Any, *, ceilings: Mapping[str, float] | None = None,
               redact: Any = None, text_to_channels: bool = True, max_chars: int = 300,
               max_examples: int = 4) -> Any:
        """Judge the completions a GRPO/RLOO trainer already generates, and show them with every alert.

        ``cb.attach(trainer)`` (after building the trainer with ``callbacks=[cb]``, or instead of passing
        it: attach adds the callback) reads each training batch's completions, per-function rewards and
        advantages from the trainer at no extra generation cost, and on every logged step adds
        ``rollouts/...`` statistics to the row (within-group length-reward correlation, identical groups,
        repetition, empty and unfinished completions, reward ceilings, outliers; see ``core/rollouts.py``)
        that the samples, length, reward and reward-signal gauges judge. Every alert of those gauges then
        carries example completions (top reward, with length and per-function rewards; the most
        repetitive; the ones that show the rule) in ``alerts.jsonl``, a W&B table
        ``rlcluster/rollouts/evidence`` at that step, and the Slack/e-mail/W&B alert text.

        Args:
            trainer: a TRL ``GRPOTrainer`` or ``RLOOTrainer`` (others: one warning, nothing changes).
            ceilings: known maximum per reward function, ``{"accuracy": 1.0}`` (default: the highest
                value each function has given so far).
            redact: ``text -> text | None`` applied to every prompt and completion before it is written
                or sent anywhere; None from it (or an exception in it) withholds the text.
            text_to_channels: False keeps example texts out of Slack, e-mail and W&B alerts (numbers
                only there); the journal and the W&B table still hold the (redacted) text.
            max_chars: characters kept of each completion (prompts: at most 120).
            max_examples: completions per alert.
        """
        handler = getattr(trainer, "callback_handler", None)
        if handler is not None and self not in handler.callbacks:
            trainer.add_callback(self)
        self.rollouts.attach(trainer, ceilings, {"redact": redact, "text_to_channels": bool(text_to_channels),
                                                 "max_chars": int(max_chars), "max_examples": int(max_examples)})
        return self

    @property
    def rollout_seconds(self) -> float:
        return self.rollouts.seconds

    @property
    def rollout_calls(self) -> int:
        return self.rollouts.calls

    def _setup_inputs(self, args: Any, state: Any, model: Any, optimizer: Any) -> None:
        try:
            self.gradients.setup(args, state, model, optimizer)
            if state.is_world_process_zero and self.log_to_wandb:
                self.sink.summary(self.gradients.notes_summary(self.prefix))
        except Exception as e:  # noqa: BLE001
            self._error("gradient probe setup", e)
            self.gradients.setup_failed(args, e)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        self.gradients.measure(state, model)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model, processing_class = kwargs.get("model"), kwargs.get("processing_class")
        # Sharded parameters (FSDP2, ZeRO-3): every rank runs the forward probes at the same step (the decision is
        # the step and the cadence only, the probe batch is the same fixed one), the main process keeps the values.
        main = state.is_world_process_zero
        together = self.gradients.collective_probes
        if model is None or not (main or together):
            return
        self.probes.run(model, processing_class or kwargs.get("tokenizer"), state.global_step, self._live, main=main,
                        together=together, lora=not self.gradients.sharded_params,
                        forward=not self.gradients.forward_off)

    def _add_inputs(self, row: dict[str, Any], step: int) -> bool:
        """The main process's live values into the row; True when it holds values that exist only now (a probe's
        output, this step's rollout statistics): thinning such a row would lose them, since no later row holds
        them again and nothing re-derives them offline. Efficiency is a rate over the interval since the last row,
        a running gauge that the next written row continues."""
        num_tokens = row.get("num_tokens")
        self._live.update(self._efficiency.measure(
            step, to_float(num_tokens) if isinstance(num_tokens, (int, float)) else None))
        if self.gradients.pending is not None:
            self.rows.layer_norms = self.gradients.settle(row, step)
        if self.probes.samples:
            self.rows.samples, self.probes.samples = self.probes.samples, []
        row.update(self._live)
        self.rollouts.judge(row, step)
        self.rows.rollout_row = self.rollouts.row
        return (bool(self.rows.rollout_row) or bool(self.rows.layer_norms) or bool(self.rows.samples)
                or any(not k.startswith("efficiency/") for k in self._live))
