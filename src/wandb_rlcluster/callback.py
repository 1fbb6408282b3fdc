"""RLClusterCallback: the instrument cluster inside a running transformers/TRL Trainer.

The rows go through the one pipeline every live entry point shares (``pipeline.py``); what is here is what only a
trainer has: its gradients and probes, the rollouts it generates, stopping every rank at the same step, checkpoint
state, the liveness alerts, and W&B rows keyed by ``train/global_step``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from .alerts import AlertConfig
from .alerts.notify import clamp_wait
from .core import GAUGE_IDS
from .core.keymap import merge_keys
from .core.keys import canonical_family
from .guard.wiring import LivenessHooks, LivenessMonitor, resolve_settings
from .pipeline import Decision, Pipeline
from .trainer.checkpoint import CheckpointState, checked_args
from .trainer.distributed import any_rank
from .trainer.inputs import TrainerInputs
from .trainer.sink import TrainerRows, WandbSink

logger = logging.getLogger("wandb_rlcluster")

# TRL config classes name the trainer; plain TrainingArguments leave it to detection from the keys.
CONFIG_FAMILIES = {
    "GRPOConfig": "grpo", "RLOOConfig": "grpo", "DPOConfig": "dpo", "KTOConfig": "kto", "ORPOConfig": "orpo",
    "CPOConfig": "orpo", "OnlineDPOConfig": "online_dpo", "XPOConfig": "online_dpo", "NashMDConfig": "online_dpo",
    "PPOConfig": "ppo", "RewardConfig": "reward", "SFTConfig": "sft",
}


def _from_pipeline(name: str, doc: str) -> Any:
    return property(lambda self: getattr(self.pipeline, name), doc=doc)


class RLClusterCallback(LivenessHooks, TrainerInputs, CheckpointState, TrainerCallback):
    """Watches a TRL / transformers run and says when it is going wrong.

    Add it to a trainer that already has ``report_to="wandb"``; every ``on_log`` row
    goes through the fourteen gauges, the derived values are logged to the active
    W&B run as ``rlcluster/<gauge>/<name>`` plus ``rlcluster/<gauge>/status``
    (0 ok, 1 warn, 2 stop) on ``train/global_step``, and findings are reported.
    Without a W&B run it still computes, reports and stops.

    Args:
        alerts: the alert rules: None (default) uses the shipped ``alerts.yaml``; a path to your
            own YAML (merged over the shipped rules by name unless it says ``extends: none``);
            False turns alerting off (then core ``stop`` findings stop training directly). The
            file is validated here, before training starts: a bad file raises ConfigError
            naming the file, the line and the fix. An ``AlertConfig`` object, or the dict
            its ``to_dict()`` gives, goes through the same checks (ConfigError here, before
            training). Checkpoints store the rules themselves, so a
            resume (``restore_callback_states_from_checkpoint=True``) rebuilds the same rules from
            any working directory.
        trainer: trainer family (``grpo``, ``rloo``, ``dpo``, ``kto``, ``orpo``, ``online_dpo``,
            ``ppo``, ``reward``, ``sft``); None detects it from the first logged keys.
        params: per-gauge threshold overrides, ``{"kl": {"warn": 0.3, "stop": 0.8}}``.
        stop_on: ``"stop"`` (default) ends training when a stop-severity alert fires;
            ``"warn"`` also on warnings; None never stops.
        save_on_stop: ask the Trainer for a checkpoint when stopping (also with ``save_strategy="no"``),
            so no work is lost.
        grad_every: sample per-layer gradient statistics every N optimizer steps (0 = off).
        attention_every: run the attention-entropy probe batch every N steps (0 = off).
        lora_every: measure LoRA adapters every N steps when the model is a PEFT model (0 = off).
        sample_every: generate greedy samples for the samples gauge every N steps (0 = off).
        sample_tokens: new tokens per sample.
        log_to_wandb: log derived metrics to the active W&B run.
        wandb_min_interval: seconds between two rlcluster rows in W&B (a W&B log call costs
            ~0.2-0.6 ms); a row where something got worse (a gauge's status rose, a warn/stop
            finding or an alert fired), a row carrying values measured only at that step (a probe's
            output, an attached trainer's rollout statistics) and the last row are always logged; an
            all-clear or an info finding goes out with the next row the interval lets through. 0 logs
            every row.
        report: at the end of training build the fourteen-gauge W&B report for this run's project:
            saved to W&B for an online run (its URL is logged), written as
            ``<output_dir>/rlcluster_report.json`` for an offline one (save it later with
            ``rlcluster report --save``).
        prefix: W&B key prefix.
        channel_wait: seconds ``on_train_end`` waits, in total over all alert channels, for queued
            alerts to go out; what is still undelivered then is journaled as such in ``alerts.jsonl``.
        stall_alert, stall_factor, stall_floor, stall_startup, stall_warmup, stall_check_every, stall_severity,
        crash_alert, crash_timeout, guardian: the liveness alerts that fire when ``on_log`` cannot (a stall, a
            crash, a kill -9; see ``alerts/watchdog.py``). None (default) takes the ``watchdog:`` section of the
            alerts file, else the defaults: a ``stall`` alert after max(10 x median step time, 10m) without a
            completed step (30m before the cadence is known, the first 3 steps left out), checked every 5s;
            a ``crash`` alert within 10s; a guardian process for hard deaths. Off with ``alerts=False``.
        gold_rewards: names of held-out reward functions (TRL: in ``reward_funcs`` with weight 0 in
            ``reward_weights``; logged as ``rewards/<name>/mean``). The trained ``reward`` is then the
            proxy, and the reward gauge reports the proxy-gold gap and fires when the proxy keeps rising
            while the gold stalls or falls (over-optimisation). Also settable in alerts.yaml
            (``gold_rewards: [...]``); this argument wins.
        keys: which logged key is what, where a trainer logs under its own names (``{"reward": "reward/g",
            "gold": "reward/f"}``, ``core/keymap.py``); over alerts.yaml's ``keys:``; always wins over recognised names.
        warn_sooner: logged rows taken off every warn rule's hold, and off the ``for:`` of every warn-severity
            alert rule (0-3; never under one row; stop rules keep theirs, but with ``stop_on="warn"`` a warning
            stops, so stops come sooner too: a warning says so). The default holds are the benchmark's balance of
            early against false warnings; 1 warns about
            3 % of the post-onset span sooner (median delay 0.278 -> 0.25) and about twice as often on healthy
            runs (3.6 % -> 8.4 %; ``benchmarks/detection/FRONTIER.md``). None (default) takes ``warn_sooner:``
            from the alerts file, else 0. ``rlcluster analyze --warn-sooner N``.
        restored: set in the checkpoint's arguments by ``state()``: when transformers rebuilds the callback from a
            checkpoint written by an older version, a parameter this version no longer has is left out with a
            warning instead of failing the resume. Anywhere else a bad ``params`` entry raises ValueError here.

    Stopping is decided on every rank from the same log row and then reduced across
    ranks, so all processes stop at the same step; logging happens on the main
    process only. The callback's state (windows, baselines, rule state) is saved in
    checkpoints and restored on ``resume_from_checkpoint``.

    For GRPO/RLOO, ``cb.attach(trainer)`` also judges the completions the trainer generates
    (``rollouts/...`` statistics) and puts example completions in every alert they explain.
    """

    def __init__(
        self,
        alerts: str | os.PathLike[str] | AlertConfig | Mapping[str, Any] | bool | None = None,
        trainer: str | None = None,
        params: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        stop_on: str | None = "stop",
        save_on_stop: bool = True,
        grad_every: int = 10,
        attention_every: int = 50,
        lora_every: int = 50,
        sample_every: int = 200,
        sample_tokens: int = 24,
        log_to_wandb: bool = True,
        wandb_min_interval: float = 0.25,
        report: bool = False,
        prefix: str = "rlcluster",
        channel_wait: float = 2.0,
        stall_alert: bool | None = None,
        stall_factor: float | None = None,
        stall_floor: float | str | None = None,
        stall_startup: float | str | None = None,
        stall_warmup: int | None = None,
        stall_check_every: float | str | None = None,
        stall_severity: str | None = None,
        crash_alert: bool | None = None,
        crash_timeout: float | str | None = None,
        guardian: bool | None = None,
        gold_rewards: str | list[str] | tuple[str, ...] | None = None,
        warn_sooner: int | None = None,
        restored: bool = False,
        keys: Mapping[str, Any] | None = None,
    ) -> None:
        if stop_on not in (None, "stop", "warn"):
            raise ValueError(f"stop_on must be 'stop', 'warn' or None, not {stop_on!r}")
        for name, every in (("grad_every", grad_every), ("attention_every", attention_every),
                            ("lora_every", lora_every), ("sample_every", sample_every)):
            if not isinstance(every, int) or every < 0:
                raise ValueError(f"{name} must be an int >= 0 (0 turns the probe off), not {every!r}")
        self.trainer = canonical_family(trainer) if trainer else None
        self.params, sooner = checked_args(params, warn_sooner, restored)
        self.stop_on = stop_on
        self.save_on_stop = save_on_stop
        self.grad_every = grad_every
        self.attention_every = attention_every
        self.lora_every = lora_every
        self.sample_every = sample_every
        self.sample_tokens = sample_tokens
        self.log_to_wandb = log_to_wandb
        self.wandb_min_interval = float(wandb_min_interval)
        if report:  # the report is built at the end of training: a missing library must show now, not then
            from .report import require_workspaces

            require_workspaces()
        self.report = report
        self.report_location: str | None = None
        self.prefix = prefix
        self.channel_wait = clamp_wait(channel_wait)
        self.channel_wait_seconds = 0.0  # how long on_train_end actually waited for the channels
        self.gold_rewards = [gold_rewards] if isinstance(gold_rewards, str) else list(gold_rewards or [])
        gauge_params = {k: dict(v) for k, v in self.params.items()}
        if self.gold_rewards:
            gauge_params.setdefault("reward", {})["gold"] = self.gold_rewards
        self.alerts_source = None if alerts in (None, True, False) or isinstance(alerts, (AlertConfig, Mapping)) \
            else os.fspath(alerts)  # type: ignore[arg-type]
        # the rows -> gauges -> rules -> journal pipeline of every entry point; a bad alert file or gauge parameter
        # raises here, before training. The notifier is the main process's, built at on_train_begin.
        self.pipeline = Pipeline(framework="trl", alerts=alerts, trainer=self.trainer, params=gauge_params,
                                 notify=False, stop_on=stop_on, warn_sooner=sooner, continues="training continues",
                                 rules_on_empty_rows=True, keys=keys)
        self.keys = merge_keys(getattr(self.pipeline.alert_config, "keys", None), keys)  # kept in checkpoints
        if self.warn_sooner and stop_on == "warn":
            logger.warning("rlcluster: warn_sooner=%d with stop_on='warn': every warning stops training, so stops "
                           "come %d row(s) sooner too and a short noisy stretch can end the run", self.warn_sooner,
                           self.warn_sooner)
        self.liveness_args = {k: v for k, v in dict(
            stall_alert=stall_alert, stall_factor=stall_factor, stall_floor=stall_floor, stall_startup=stall_startup,
            stall_warmup=stall_warmup, stall_check_every=stall_check_every, stall_severity=stall_severity,
            crash_alert=crash_alert, crash_timeout=crash_timeout, guardian=guardian).items() if v is not None}
        settings = resolve_settings(self.alert_config.watchdog if self.alert_config else {}, self.liveness_args)
        self.liveness = LivenessMonitor(settings) if self.alert_config and settings.any_on else None
        self.sink = WandbSink(prefix)
        self.rows = TrainerRows(self.sink, self.pipeline, self.wandb_min_interval)
        self.stopped_at: int | None = None
        self.on_log_seconds = 0.0
        self.on_log_calls = 0
        self._restored = False
        self._init_inputs(grad_every, attention_every, lora_every, sample_every, sample_tokens)

    # the pipeline's parts, reachable as they always were
    cluster = _from_pipeline("cluster", "The gauges (InstrumentCluster): built in __init__, the framework is given.")
    engine = _from_pipeline("engine", "The alert engine (None without rules).")
    alert_config = _from_pipeline("alert_config", "The alert rules (None with alerts=False).")
    notifier = _from_pipeline("notifier", "The journal and channels (main process, from on_train_begin).")
    alert_events = _from_pipeline("alert_events", "Every alert that fired.")
    stop_finding = _from_pipeline("stop_finding", "The finding that stopped training, if one did.")
    warn_sooner = _from_pipeline("warn_sooner", "Rows taken off every warn hold.")
    errors = _from_pipeline("errors", "Failures caught (each a warning, up to five).")

    # -- events -------------------------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        try:
            if self.trainer is None:
                family = CONFIG_FAMILIES.get(type(args).__name__)
                if family:
                    self.cluster.set_family(family)
            if state.max_steps and state.max_steps > 0:
                self.cluster.set_max_steps(int(state.max_steps))
            self.restore_from_trainer_state(state)
            if self.engine is not None and state.is_world_process_zero:
                self.pipeline.name_run(self.sink._run(), args.run_name)
                notifier = self.pipeline.open_notifier(Path(args.output_dir) / "alerts.jsonl",  # type: ignore[arg-type]
                                                       use_wandb=self.log_to_wandb, close_wait=self.channel_wait)
                assert notifier is not None
                notifier.evidence_text = self.rollouts.opts.get("text_to_channels", True)
                if self.liveness is not None:
                    self.liveness.start(str(args.output_dir), notifier, self.engine.fields,
                                        step=state.global_step, max_steps=int(state.max_steps or 0),
                                        report_to=getattr(args, "report_to", None))
        except Exception as e:  # noqa: BLE001
            self._error("on_train_begin", e)
        self._setup_inputs(args, state, kwargs.get("model"), kwargs.get("optimizer"))

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        decision = Decision(step=state.global_step)
        only_now = False
        try:
            row: dict[str, Any] = dict(logs or {})
            row["step"] = state.global_step
            if state.is_world_process_zero:
                only_now = self._add_inputs(row, state.global_step)
            self._live.clear()
            decision = self.pipeline.feed(row, state.global_step, evidence=self.rollouts.evidence)
            self.gradients.apply_notes(self.cluster)
        except Exception as e:  # noqa: BLE001 - never break the user's training
            self._error("on_log", e)
        # Every rank reaches this line at the same global step: the decision is reduced across ranks.
        try:
            stop = any_rank(decision.stop)
        except Exception as e:  # noqa: BLE001
            self._error("stop reduction", e)
            stop = decision.stop
        if stop and not control.should_training_stop:
            control.should_training_stop = True
            if self.save_on_stop:  # even with save_strategy="no": a stopped run must not lose its work
                control.should_save = True
            self.stopped_at = state.global_step
        if state.is_world_process_zero:
            try:
                self._publish(state, decision, stop, only_now)
            except Exception as e:  # noqa: BLE001
                self._error("publish", e)
        self.on_log_seconds += time.perf_counter() - t0
        self.on_log_calls += 1

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self.gradients.unwrap()
        if not state.is_world_process_zero:
            return
        if self.liveness is not None:
            try:
                self.liveness.end()  # a clean end: watchdog, crash hooks and guardian off before anything else
            except Exception as e:  # noqa: BLE001
                self._error("liveness", e)
        try:
            if self.rows.unsent and self.log_to_wandb and self.sink.active:
                self.rows.rollout_row = {}  # the last row's own statistics: written with it or thinned out with it
                self.rows.write(state.global_step, set())  # the all-clear the throttle held back, before the end
        except Exception as e:  # noqa: BLE001
            self._error("publish", e)
        try:
            # the end of training's findings go where a row's go: through the rules to the journal and the channels
            events = self.pipeline.end(evidence=self.rollouts.evidence)
            if events and self.log_to_wandb and self.sink.active:
                # the alert-state series shows the end alert too (2 = firing at the last step), beside the row's
                self.rows.rollout_row = {}
                self.rows.write(state.global_step, set(), events)
            summary = {f"{self.prefix}/verdict": self.cluster.verdict(),
                       f"{self.prefix}/findings": len(self.cluster.findings)}
            self.gradients.apply_notes(self.cluster)
            summary.update(self.gradients.notes_summary(self.prefix))  # what is off under this engine, and why
            if self.warn_sooner:  # the run says how it was read: an offline re-analysis can read it alike
                summary[f"{self.prefix}/warn_sooner"] = self.warn_sooner
            if self.stopped_at is not None:
                summary[f"{self.prefix}/stopped_at_step"] = self.stopped_at
                if self.stop_finding is not None:
                    summary[f"{self.prefix}/stopped_by"] = f"{self.stop_finding.gauge}/{self.stop_finding.rule}"
            if self.log_to_wandb:
                self.sink.summary(summary)
        except Exception as e:  # noqa: BLE001
            self._error("on_train_end", e)
        if self.report:
            try:
                from .report import report_for_run

                self.report_location = report_for_run(self.sink._run(), self.cluster.family or "sft", self.alert_config,
                                                      str(args.output_dir))
            except Exception as e:  # noqa: BLE001 - a report must never fail the run
                self._error("report", e)
        t0 = time.monotonic()
        if self.notifier is not None:
            self.pipeline.close(self.channel_wait)  # bounded in total, whatever the number of channels
            self.channel_wait_seconds = time.monotonic() - t0

    # -- W&B ----------------------------------------------------------------------------------------
    def _publish(self, state: TrainerState, decision: Decision, stop: bool, only_now: bool = False) -> None:
        if stop and self.stop_finding is not None:
            logger.warning("rlcluster: stopping training at step %d (%s/%s)", state.global_step,
                           self.stop_finding.gauge, self.stop_finding.rule)
        elif stop:
            logger.warning("rlcluster: stopping training at step %d (decided on another rank)", state.global_step)
        if self.log_to_wandb and self.sink.active:
            self.rows.publish(state.global_step, state.max_steps, decision, stop, only_now)

    def _error(self, where: str, exc: BaseException) -> None:
        self.pipeline.error(where, exc)


__all__ = ["GAUGE_IDS", "RLClusterCallback"]
