"""RLClusterCallback: the instrument cluster inside a running transformers/TRL Trainer."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ExportableState

from .alerts import AlertConfig, AlertEngine, AlertEvent, load_config
from .alerts.config import validate_config
from .alerts.engine import stop_finding
from .alerts.notify import Notifier, clamp_wait
from .core import GAUGE_IDS, InstrumentCluster
from .core.cluster import check_warn_sooner, checked_params, resolve_warn_sooner
from .core.findings import Finding, Level
from .core.keys import canonical_family, to_float
from .core.rollouts import ROLLOUT_GAUGES, RolloutStats, evidence_focus
from .core.text import clean_text
from .live import probes
from .live.distributed import any_rank
from .live.liveness import LivenessMonitor, resolve_settings
from .live.sharded_grads import ShardedGradients, fsdp2_gradient_stats, whole_gradient_stats
from .live.sharded_grads import layer_index as sharded_layer
from .live.sink import WandbSink

logger = logging.getLogger("wandb_rlcluster")


# TRL config classes name the trainer; plain TrainingArguments leave it to detection from the keys.
CONFIG_FAMILIES = {
    "GRPOConfig": "grpo", "RLOOConfig": "grpo", "DPOConfig": "dpo", "KTOConfig": "kto", "ORPOConfig": "orpo",
    "CPOConfig": "orpo", "OnlineDPOConfig": "online_dpo", "XPOConfig": "online_dpo", "NashMDConfig": "online_dpo",
    "PPOConfig": "ppo", "RewardConfig": "reward", "SFTConfig": "sft",
}


class RLClusterCallback(TrainerCallback, ExportableState):
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
            naming the file, the line and the fix. An :class:`AlertConfig` object, or the dict
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
        report: at the end of training build the twelve-gauge W&B report for this run's project:
            saved to W&B for an online run (its URL is logged), written as
            ``<output_dir>/rlcluster_report.json`` for an offline one (save it later with
            ``rlcluster report --save``).
        prefix: W&B key prefix.
        channel_wait: seconds ``on_train_end`` waits, in total over all alert channels, for queued
            alerts to go out; what is still undelivered then is journaled as such in ``alerts.jsonl``.
        stall_alert, stall_factor, stall_floor, stall_startup, stall_warmup, stall_check_every, stall_severity,
        crash_alert, crash_timeout, guardian: the liveness alerts that fire when ``on_log`` cannot (a stall, a
            crash, a kill -9; see ``alerts/liveness.py``). None (default) takes the ``watchdog:`` section of the
            alerts file, else the defaults: a ``stall`` alert after max(10 x median step time, 10m) without a
            completed step (30m before the cadence is known, the first 3 steps left out), checked every 5s;
            a ``crash`` alert within 10s; a guardian process for hard deaths. Off with ``alerts=False``.
        gold_rewards: names of held-out reward functions (TRL: in ``reward_funcs`` with weight 0 in
            ``reward_weights``; logged as ``rewards/<name>/mean``). The trained ``reward`` is then the
            proxy, and the reward gauge reports the proxy-gold gap and fires when the proxy keeps rising
            while the gold stalls or falls (over-optimisation). Also settable in alerts.yaml
            (``gold_rewards: [...]``); this argument wins.
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
    ) -> None:
        if stop_on not in (None, "stop", "warn"):
            raise ValueError(f"stop_on must be 'stop', 'warn' or None, not {stop_on!r}")
        for name, every in (("grad_every", grad_every), ("attention_every", attention_every),
                            ("lora_every", lora_every), ("sample_every", sample_every)):
            if not isinstance(every, int) or every < 0:
                raise ValueError(f"{name} must be an int >= 0 (0 turns the probe off), not {every!r}")
        self.trainer = canonical_family(trainer) if trainer else None
        self.params, problems = checked_params(params)
        if problems and not restored:
            raise ValueError("; ".join(problems))
        for problem in problems:  # a checkpoint of an older version: a resume must not fail on a renamed knob
            logger.warning("rlcluster: the checkpoint's %s; left out", problem)
        sooner: int | None = None
        if warn_sooner is not None:
            try:
                sooner = check_warn_sooner(warn_sooner)
            except ValueError as e:
                if not restored:
                    raise
                logger.warning("rlcluster: the checkpoint's %s; using 0", e)
                sooner = 0
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
        self._last_wandb_time = -1e18
        self._prev_statuses: dict[str, str] = {}
        self._unsent = False  # an all-clear or an info finding not yet in W&B: the next write carries every status
        self.alerts_source: str | None = None
        self.alert_config: AlertConfig | None = None
        if alerts is not False:
            if isinstance(alerts, AlertConfig):  # the same checks as a file: a bad rule or channel fails here
                self.alert_config = validate_config(alerts)
            elif isinstance(alerts, Mapping):  # rules stored in a checkpoint by state()
                self.alert_config = AlertConfig.from_dict(dict(alerts))
            else:
                self.alerts_source = None if alerts in (None, True) else os.fspath(alerts)  # type: ignore[arg-type]
                self.alert_config = load_config(self.alerts_source)  # raises ConfigError: fail before training
            for w in self.alert_config.warnings:
                logger.warning("rlcluster: %s", w)
        gauge_params = {k: dict(v) for k, v in (self.alert_config.gauge_params if self.alert_config else {}).items()}
        for gid, ps in self.params.items():
            gauge_params.setdefault(gid, {}).update(ps)
        self.warn_sooner = resolve_warn_sooner(sooner, self.alert_config)  # not given: the file's, else 0
        self.gold_rewards = [gold_rewards] if isinstance(gold_rewards, str) else list(gold_rewards or [])
        if self.gold_rewards:
            gauge_params.setdefault("reward", {})["gold"] = self.gold_rewards
        self.cluster = InstrumentCluster(trainer=self.trainer, params=gauge_params, detect_rows=1,  # validates
                                         warn_sooner=self.warn_sooner)
        self.engine = AlertEngine(self.alert_config, warn_sooner=self.warn_sooner) if self.alert_config else None
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
        self.notifier: Notifier | None = None
        self.alert_events: list[AlertEvent] = []
        self.sink = WandbSink(prefix)
        self.stop_finding: Finding | None = None
        self.stopped_at: int | None = None
        self.errors = 0
        self.on_log_seconds = 0.0
        self.on_log_calls = 0
        self._live: dict[str, float] = {}
        self._layer_norms: dict[str, float] = {}
        self._samples: list[list[Any]] = []
        self._probe_batch: Any = None
        self._lora = probes.LoraTracker()
        self._efficiency = probes.EfficiencyMeter()
        self._restored = False
        self._events: list[AlertEvent] = []
        self._disable_forward_probes = ""
        # gradient health under DDP / FSDP2 / ZeRO (live/sharded_grads.py), and what is off under sharding, and why
        self._grads: ShardedGradients | None = None
        self._grad_pending: tuple[int, dict[str, float], bool] | None = None
        self._max_grad_norm = 0.0
        self._probe_notes: dict[str, str] = {}
        self._collective_probes = False  # FSDP2 / ZeRO-3: every rank runs the probes' forward, the main one reports
        self._sharded_params = False
        self._warned_clip = False
        # rollout evidence (attach()): off unless a trainer was attached
        self._tap: Any = None
        self._rollouts: RolloutStats | None = None
        self._rollout_row: dict[str, float] = {}
        self._rollout_opts: dict[str, Any] = {}
        self._rollout_state: Mapping[str, Any] | None = None
        self.rollout_seconds = 0.0
        self.rollout_calls = 0

    # -- rollouts -----------------------------------------------------------------------------------
    def attach(self, trainer: Any, *, ceilings: Mapping[str, float] | None = None,
               redact: Any = None, text_to_channels: bool = True, max_chars: int = 300,
               max_examples: int = 4) -> RLClusterCallback:
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
        from .live.trl_rollouts import RolloutTap

        handler = getattr(trainer, "callback_handler", None)
        if handler is not None and self not in handler.callbacks:
            trainer.add_callback(self)
        accelerator = getattr(trainer, "accelerator", None)
        self._rollout_opts = {"redact": redact, "text_to_channels": bool(text_to_channels),
                              "max_chars": int(max_chars), "max_examples": int(max_examples)}
        if not getattr(accelerator, "is_main_process", True):
            return self  # statistics and evidence come from the main process, like every other live input
        tap = RolloutTap(trainer)
        if tap.install():
            self._tap = tap
            self._rollouts = RolloutStats(ceilings)
            if self._rollout_state:
                self._rollouts.load_state_dict(self._rollout_state)
        return self

    @property
    def rollout_state(self) -> dict[str, Any]:
        return self._rollouts.state_dict() if self._rollouts is not None else {}

    @rollout_state.setter
    def rollout_state(self, value: Mapping[str, Any]) -> None:
        self._rollout_state = dict(value or {})
        if self._rollouts is not None and value:
            try:
                self._rollouts.load_state_dict(value)
            except Exception as e:  # noqa: BLE001
                logger.warning("rlcluster: could not restore rollout state from the checkpoint (%s)", e)

    def _judge_rollouts(self, row: dict[str, Any], step: int) -> None:
        """Add this step's rollout statistics to the row (main process, attached trainer only)."""
        self._rollout_row = {}
        if self._tap is None or self._rollouts is None:
            return
        batch = self._tap.take(step)
        if batch is None:
            return
        t0 = time.perf_counter()
        stats = self._rollouts.update(batch)
        self.rollout_seconds += time.perf_counter() - t0
        self.rollout_calls += 1
        row.update(stats)
        self._rollout_row = stats

    def _attach_evidence(self, events: list[AlertEvent]) -> None:
        """Example completions for every alert of a rollout-aware gauge that fired on this row."""
        if self._rollouts is None or self._rollouts.last is None:
            return
        opts = self._rollout_opts
        cache: dict[str | None, list[dict[str, Any]]] = {}
        for e in events:
            if e.kind != "firing" or e.gauge not in ROLLOUT_GAUGES:
                continue
            focus = evidence_focus(e.metric)
            if focus not in cache:
                cache[focus] = self._rollouts.evidence(focus, max_chars=opts["max_chars"], redact=opts["redact"],
                                                       max_examples=opts["max_examples"])
            e.evidence = cache[focus]

    # -- checkpoint state (transformers' ExportableState) -------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "args": {
                # the rules themselves, not a path: a relative path breaks in another directory, and an
                # AlertConfig object has no path at all
                "alerts": self.alert_config.to_dict() if self.alert_config is not None else False,
                "trainer": self.trainer, "params": self.params, "stop_on": self.stop_on,
                "save_on_stop": self.save_on_stop, "grad_every": self.grad_every,
                "attention_every": self.attention_every, "lora_every": self.lora_every,
                "sample_every": self.sample_every, "sample_tokens": self.sample_tokens,
                "log_to_wandb": self.log_to_wandb, "wandb_min_interval": self.wandb_min_interval,
                "prefix": self.prefix, "channel_wait": self.channel_wait, "gold_rewards": self.gold_rewards,
                "warn_sooner": self.warn_sooner,
                **self.liveness_args, "restored": True,
            },
            "attributes": {"cluster_state": self.cluster.state_dict(),
                           "engine_state": self.engine.state_dict() if self.engine else {},
                           **({"rollout_state": self.rollout_state} if self._rollouts is not None else {})},
        }

    @property
    def cluster_state(self) -> dict[str, Any]:
        return self.cluster.state_dict()

    @cluster_state.setter
    def cluster_state(self, value: Mapping[str, Any]) -> None:
        try:
            self.cluster.load_state_dict(value)
            self._restored = True
        except Exception as e:  # noqa: BLE001 - a damaged state must not stop a resume
            logger.warning("rlcluster: could not restore gauge state from the checkpoint (%s); starting fresh",
                           clean_text(e, 300))

    @property
    def engine_state(self) -> dict[str, Any]:
        return self.engine.state_dict() if self.engine else {}

    @engine_state.setter
    def engine_state(self, value: Mapping[str, Any]) -> None:
        if self.engine is not None and value:
            try:
                self.engine.load_state_dict(value)
            except Exception as e:  # noqa: BLE001
                logger.warning("rlcluster: could not restore alert state from the checkpoint (%s)", clean_text(e, 300))

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
            # transformers restores callback state only with restore_callback_states_from_checkpoint=True;
            # the state is in trainer_state.json either way, so take it from there when resuming.
            stored = (getattr(state, "stateful_callbacks", None) or {}).get(type(self).__name__)
            if isinstance(stored, list):
                stored = stored[-1] if stored else None
            if stored and not self._restored and self.cluster.rows == 0 and state.global_step > 0:
                self.cluster_state = stored.get("attributes", {}).get("cluster_state", {})
                self.engine_state = stored.get("attributes", {}).get("engine_state", {})
                if stored.get("attributes", {}).get("rollout_state"):
                    self.rollout_state = stored["attributes"]["rollout_state"]
            if self.engine is not None and state.is_world_process_zero:
                run = self.sink._run()
                if run is not None:
                    self.engine.fields.update(run_name=getattr(run, "name", None) or args.run_name or "this run",
                                              run_url=getattr(run, "url", None) or "",
                                              project=getattr(run, "project", None) or "")
                elif args.run_name:
                    self.engine.fields["run_name"] = args.run_name
                self.notifier = Notifier(self.alert_config, Path(args.output_dir) / "alerts.jsonl",  # type: ignore[arg-type]
                                         use_wandb=self.log_to_wandb, close_wait=self.channel_wait)
                self.notifier.evidence_text = self._rollout_opts.get("text_to_channels", True)
                if self.liveness is not None:
                    self.liveness.start(str(args.output_dir), self.notifier, self.engine.fields,
                                        step=state.global_step, max_steps=int(state.max_steps or 0),
                                        report_to=getattr(args, "report_to", None))
        except Exception as e:  # noqa: BLE001
            self._error("on_train_begin", e)
        try:
            self._setup_gradients(args, state, kwargs.get("model"), kwargs.get("optimizer"))
        except Exception as e:  # noqa: BLE001
            self._error("gradient probe setup", e)
            if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
                self._grads = ShardedGradients("sharded", f"setup failed ({type(e).__name__})", sharded_params=True)
                self._disable_forward_probes = "off under sharding: the probe setup failed"

    def _setup_gradients(self, args: TrainingArguments, state: TrainerState, model: Any, optimizer: Any) -> None:
        """How the full gradients are read under this engine, and which probes must stay off (same on every rank).

        ZeRO runs its optimizer step inside ``accelerator.backward``, where no callback hook runs: the ZeRO
        optimizer's ``step`` is wrapped until ``on_train_end`` and measures on the steps the cadence says."""
        grads = self._grads = ShardedGradients.detect(args, model, optimizer)
        self._max_grad_norm = float(getattr(args, "max_grad_norm", 0) or 0)
        notes: dict[str, str] = {}
        if self.grad_every and grads.unavailable:
            notes["gradients"] = f"gradient stats: unavailable under {grads.label}: {grads.unavailable}"
        elif self.grad_every and grads.collective:
            notes["gradients"] = (f"gradient stats under {grads.label}: from the full gradients (each rank sums "
                                  f"its shard, one all_reduce every {self.grad_every} steps)")
        if grads.zero_opt is not None and self.grad_every:
            grad_every = self.grad_every
            grads.wrap_zero_step(due=lambda: (state.global_step + 1) % grad_every == 0,
                                 deliver=lambda live, layers: self._hold_grads(state, live, layers, after_clip=False),
                                 on_error=lambda e: self._error("gradient probe", e))
        self._sharded_params = grads.sharded_params
        self._collective_probes = grads.engine in ("fsdp2", "zero3")
        if grads.sharded_params:
            why = (f"off under {grads.label}: the parameters are sharded, and a probe on the main process alone would "
                   "wait forever for the other ranks' shards")
            together = (f"under {grads.label}: every rank runs the probe at the same step (the sharded forward needs "
                        "them all), the main process reports")
            if not self._collective_probes:
                self._disable_forward_probes = why
            probe_cadence = (("attention_entropy", "attention entropy", self.attention_every),
                             ("samples", "samples", self.sample_every))
            for gid, label, probe_every in probe_cadence:
                if probe_every:
                    notes[gid] = f"{label} {together}" if self._collective_probes else f"{label}: {why}"
            if self.lora_every:
                notes["lora"] = (f"LoRA: off under {grads.label}: the adapter weights are sharded (measuring them "
                                 "needs every rank's shards)")
        self._probe_notes = notes
        if state.is_world_process_zero:
            for text in notes.values():  # what is off or unavailable is a warning; how it is measured is info
                (logger.warning if "off under" in text or "unavailable" in text else logger.info)("rlcluster: %s",
                                                                                                   text)
            if self.log_to_wandb:
                self.sink.summary(self._notes_summary())

    def _notes_summary(self) -> dict[str, str]:
        return {f"{self.prefix}/probes/{gid}": text for gid, text in self._probe_notes.items()}

    def _apply_notes(self) -> None:
        """The gauge table (``cluster.summary()``) says what is off or how it is measured under this engine."""
        for gid, text in self._probe_notes.items():
            g = self.cluster.gauges.get(gid)
            if g is not None and not g.note:
                g.note = text

    def _hold_grads(self, state: TrainerState, live: dict[str, float], layers: dict[str, float],
                    after_clip: bool) -> None:
        """Keep a measurement (main process) for the step's log row; ``after_clip``: read after max_grad_norm."""
        if not state.is_world_process_zero:
            return
        self._live.update(live)  # spread, sparsity, non-finite: a common clipping factor leaves them as they are
        norm = layers.get("measured_norm", math.nan)
        clipped = after_clip and self._max_grad_norm > 0 and norm >= self._max_grad_norm * (1 - 1e-3)
        self._grad_pending = (state.global_step + 1, layers, clipped)

    def _settle_layer_norms(self, row: Mapping[str, Any], step: int) -> dict[str, float]:
        """Per-layer norms before clipping: transformers hands ``on_pre_optimizer_step`` the clipped gradients, all
        scaled by one factor, so the logged (pre-clip) grad_norm of the same step gives the factor back."""
        measured_at, layers, clipped = self._grad_pending  # type: ignore[misc]
        self._grad_pending = None
        if not clipped:
            return layers
        g = row.get("grad_norm")
        g = to_float(g) if isinstance(g, (int, float)) else None
        norm = layers.get("measured_norm", math.nan)
        if measured_at == step and g is not None and math.isfinite(g) and g > 0 and norm > 0:
            return {k: v * g / norm for k, v in layers.items()}
        if not self._warned_clip:
            self._warned_clip = True
            logger.warning("rlcluster: per-layer gradient norms of step %d were clipped to max_grad_norm and no "
                           "grad_norm was logged at that step to undo it: left out (make logging_steps divide "
                           "grad_every)", measured_at)
        return {}

    # liveness: where the training thread is, for the stall watchdog (a few attribute writes per step)
    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.step_begin()

    def on_substep_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.progress("in a training step (between gradient-accumulation micro-batches)")

    def on_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                          **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.phase("finishing a training step (after the optimizer step)")

    def on_prediction_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.progress("in evaluation")

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.progress("between steps (a checkpoint was just saved)")

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              model: Any = None, **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.phase("in the optimizer step")
        # The same decision on every rank (the global step and the cadence): FSDP2's measurement is a collective.
        if not self.grad_every or model is None or (state.global_step + 1) % self.grad_every:
            return
        grads = self._grads
        if grads is not None and (grads.unavailable or grads.zero_opt is not None):
            return  # nothing to read here, or ZeRO: measured inside the wrapped optimizer step
        t0 = time.perf_counter()
        try:
            if grads is not None and grads.collective:  # FSDP2: every rank, its shards, one all_reduce
                named = list(probes._unwrap(model).named_parameters())
                live, layers = fsdp2_gradient_stats(named, grads.n_layers)
            elif state.is_world_process_zero:  # one process or DDP: rank 0's gradients are the full ones
                named = list(probes._unwrap(model).named_parameters())
                n_layers = grads.n_layers if grads is not None else 1 + max(
                    (i for i in (sharded_layer(n) for n, _ in named) if i is not None), default=-1)
                live, layers = whole_gradient_stats(named, n_layers)
            else:
                return
            self._hold_grads(state, live, layers, after_clip=True)
        except Exception as e:  # noqa: BLE001
            self._error("gradient probe", e)
        if grads is not None:
            grads.calls += 1
            grads.seconds += time.perf_counter() - t0

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: Any = None, processing_class: Any = None, **kwargs: Any) -> None:
        if self.liveness is not None and self.liveness.active:
            self.liveness.step_end(state.global_step)
        # Sharded parameters (FSDP2, ZeRO-3): every rank runs the forward probes at the same step (the decision is
        # the step and the cadence only, the probe batch is the same fixed one), the main process keeps the values.
        main = state.is_world_process_zero
        together = self._collective_probes
        if model is None or not (main or together):
            return
        step = state.global_step
        tokenizer = processing_class or kwargs.get("tokenizer")
        try:
            if main and self.lora_every and step % self.lora_every == 0 and not self._sharded_params:
                self._live.update(self._lora.measure(model))
        except Exception as e:  # noqa: BLE001
            self._error("LoRA probe", e)
        if self._disable_forward_probes:
            return
        try:
            if self.attention_every and step % self.attention_every == 0:
                if self._probe_batch is None:
                    vocab = getattr(getattr(probes._base_model(model), "config", None), "vocab_size", 32) or 32
                    self._probe_batch = probes.make_probe_batch(tokenizer, vocab)
                entropy = probes.attention_entropy(model, self._probe_batch)
                if main:
                    self._live.update(entropy)
        except Exception as e:  # noqa: BLE001
            self._error("attention probe", e)
        try:
            if self.sample_every and step % self.sample_every == 0 and tokenizer is not None:
                stats, rows = probes.generate_samples(model, tokenizer, self.sample_tokens, synced=together)
                if main:
                    self._live.update(stats)
                    self._samples = [[step, *r] for r in rows]
        except Exception as e:  # noqa: BLE001
            self._error("sample probe", e)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        local_stop = False
        fired: list[Finding] = []
        updated: set[str] = set()
        only_now = False
        try:
            row: dict[str, Any] = dict(logs or {})
            row["step"] = state.global_step
            if state.is_world_process_zero:
                num_tokens = row.get("num_tokens")
                eff = self._efficiency.measure(state.global_step,
                                               to_float(num_tokens) if isinstance(num_tokens, (int, float)) else None)
                self._live.update(eff)
                if self._grad_pending is not None:
                    self._layer_norms = self._settle_layer_norms(row, state.global_step)
                row.update(self._live)
                self._judge_rollouts(row, state.global_step)
                only_now = self._holds_values_of_now()
            self._live = {}
            fired = self.cluster.update(row)
            updated = self.cluster.last_updated
            if self._probe_notes:
                self._apply_notes()
            events = None
            if self.engine is not None:
                events = self.engine.evaluate(state.global_step, row, self.cluster, fired, updated)
                self._attach_evidence(events)
                self._events = events
                self.alert_events.extend(e for e in events if e.kind == "firing")
            if self.stop_finding is None:
                self.stop_finding = stop_finding(self.stop_on, events, fired)
                local_stop = self.stop_finding is not None
        except Exception as e:  # noqa: BLE001 - never break the user's training
            self._error("on_log", e)
        # Every rank reaches this line at the same global step: the decision is reduced across ranks.
        try:
            stop = any_rank(local_stop)
        except Exception as e:  # noqa: BLE001
            self._error("stop reduction", e)
            stop = local_stop
        if stop and not control.should_training_stop:
            control.should_training_stop = True
            if self.save_on_stop:  # even with save_strategy="no": a stopped run must not lose its work
                control.should_save = True
            self.stopped_at = state.global_step
        if state.is_world_process_zero:
            try:
                self._publish(state, fired, updated, stop, only_now)
            except Exception as e:  # noqa: BLE001
                self._error("publish", e)
        self.on_log_seconds += time.perf_counter() - t0
        self.on_log_calls += 1

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        if self._grads is not None:  # every rank: the ZeRO optimizer's own step back
            try:
                self._grads.unwrap()
            except Exception as e:  # noqa: BLE001
                self._error("gradient probe", e)
        if not state.is_world_process_zero:
            return
        if self.liveness is not None:
            try:
                self.liveness.end()  # a clean end: watchdog, crash hooks and guardian off before anything else
            except Exception as e:  # noqa: BLE001
                self._error("liveness", e)
        try:
            if self._unsent and self.log_to_wandb and self.sink.active:
                self._rollout_row = {}  # the last row's own statistics: written with it or thinned out with it
                self._write_row(state.global_step, set())  # the all-clear the throttle held back, before the end
        except Exception as e:  # noqa: BLE001
            self._error("publish", e)
        try:
            final = self.cluster.finalize()
            if final:
                self._report_final(state.global_step, final)
            summary = {f"{self.prefix}/verdict": self.cluster.verdict(),
                       f"{self.prefix}/findings": len(self.cluster.findings)}
            self._apply_notes()
            summary.update(self._notes_summary())  # what is off under this engine, and why
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
                self._build_report(args)
            except Exception as e:  # noqa: BLE001 - a report must never fail the run
                self._error("report", e)
        if self.notifier is not None:
            t0 = time.monotonic()
            try:
                self.notifier.close(self.channel_wait)  # bounded in total, whatever the number of channels
            except Exception as e:  # noqa: BLE001
                self._error("alert channels", e)
            self.channel_wait_seconds = time.monotonic() - t0

    def _report_final(self, step: int, final: list[Finding]) -> None:
        """The end of training's findings (end-of-run checks, warnings that were building when it ended) go where a
        row's go: through the alert rules to the journal and the channels, or to the log without an alert config."""
        try:
            if self.engine is not None:
                events = self.engine.evaluate(step, {}, self.cluster, final, findings_only=True)
                try:  # the last rollouts are what a warning building at the end describes; the alert goes without
                    self._attach_evidence(events)
                except Exception as e:  # noqa: BLE001
                    self._error("rollout evidence", e)
                self.alert_events.extend(e for e in events if e.kind == "firing")
                if self.notifier is not None and events:
                    self.notifier.handle(events)
                if events and self.log_to_wandb and self.sink.active:
                    # the alert-state series shows the end alert too (2 = firing at the last step), beside the row's
                    self._rollout_row = {}
                    self._write_row(step, set(), events)
            else:
                self._log_findings(final)
        except Exception as e:  # noqa: BLE001
            self._error("end-of-training findings", e)

    @staticmethod
    def _log_findings(findings: list[Finding]) -> None:
        """Without an alert config, findings go to the Python log (info at INFO, warn/stop at WARNING)."""
        for f in findings:
            if f.severity == "info":
                logger.info("rlcluster step %d INFO %s/%s: %s", f.step, f.gauge, f.rule, f.message)
            else:
                logger.warning("rlcluster step %d %s %s/%s: %s", f.step, f.severity.upper(), f.gauge, f.rule,
                               f.message)

    def _build_report(self, args: TrainingArguments) -> None:
        from .report import build_report, report_spec

        run = self.sink._run()
        family = self.cluster.family or "sft"
        entity = getattr(run, "entity", None) or "my-entity"
        project = getattr(run, "project", None) or "my-project"
        report = build_report(entity, project, family, alerts=self.alert_config)
        offline = run is None or getattr(getattr(run, "settings", None), "mode", "") in ("offline", "dryrun") \
            or getattr(getattr(run, "settings", None), "_offline", False)
        if offline:
            path = Path(args.output_dir) / "rlcluster_report.json"  # type: ignore[arg-type]  # set by then
            path.write_text(report_spec(report), encoding="utf-8")
            self.report_location = str(path)
            logger.warning("rlcluster: report spec written to %s; after `wandb sync`, save it with: rlcluster report "
                           "--entity %s --project %s --trainer %s --save", path, entity, project, family)
        else:
            report.save()
            self.report_location = report.url
            logger.warning("rlcluster: report saved: %s", report.url)

    # -- helpers ------------------------------------------------------------------------------------
    def _holds_values_of_now(self) -> bool:
        """Whether this row carries values that exist only now: a probe's output (gradients, attention entropy,
        LoRA, samples) or the rollout statistics of this step's batch. Thinning such a row would lose them: no
        later row holds them again and nothing re-derives them offline. Efficiency is a rate over the interval
        since the last row, a running gauge that the next written row continues."""
        return (bool(self._rollout_row) or bool(self._layer_norms) or bool(self._samples)
                or any(not k.startswith("efficiency/") for k in self._live))

    def _publish(self, state: TrainerState, fired: list[Finding], updated: set[str], stop: bool,
                 only_now: bool = False) -> None:
        events, self._events = self._events, []
        if self.notifier is not None and events:
            self.notifier.handle(events)
        if self.engine is None:
            self._log_findings(fired)
        if stop and self.stop_finding is not None:
            logger.warning("rlcluster: stopping training at step %d (%s/%s)", state.global_step,
                           self.stop_finding.gauge, self.stop_finding.rule)
        elif stop:
            logger.warning("rlcluster: stopping training at step %d (decided on another rank)", state.global_step)
        if not self.log_to_wandb or not self.sink.active:
            return
        statuses = self.cluster.statuses()
        now = time.perf_counter()
        # What gets worse is written at once: a warn/stop finding, an alert firing, a gauge's status rising, a stop,
        # and the last row. So is a row with values that exist only now (probes, rollout statistics): thinning
        # merges rows of running gauges, it never drops a value. What gets better (a status back to ok, an alert
        # resolved) and info findings go out with the next row the interval lets through; the core and the
        # notifier saw them already.
        last, self._prev_statuses = self._prev_statuses, statuses
        worse = statuses != last and any(Level.of(st) > Level.of(last.get(gid, "ok"))
                                         for gid, st in statuses.items())
        due = (now - self._last_wandb_time >= self.wandb_min_interval or stop or worse or only_now
               or any(e.kind == "firing" for e in events) or any(f.severity != "info" for f in fired)
               or state.global_step >= state.max_steps > 0)
        if not due:
            self._unsent = self._unsent or statuses != last or bool(events) or bool(fired)
            return  # the gauges still saw this row; only the W&B write is thinned out
        self._last_wandb_time = now
        self._write_row(state.global_step, updated, events)

    def _write_row(self, step: int, updated: set[str], events: list[AlertEvent] | tuple[()] = ()) -> None:
        """One rlcluster row in W&B: the derived values of the gauges this row updated, their statuses (every
        gauge's, when an all-clear was held back since the last write), the alert states, rollout evidence."""
        every_status, self._unsent = self._unsent, False
        p = self.prefix
        metrics: dict[str, float] = {}
        for gid, g in self.cluster.gauges.items():
            if gid in updated:  # only what this row updated: no stale repeats
                for k, v in g.derived.items():
                    if isinstance(v, float) and math.isfinite(v):
                        metrics[f"{p}/{gid}/{k}"] = v
            elif not (every_status and g.rows_seen):
                continue
            if g.applies():
                metrics[f"{p}/{gid}/status"] = int(Level.of(g.status))
        for k, v in self._layer_norms.items():
            metrics[f"{p}/gradients/{k}"] = v
        self._layer_norms = {}
        for k, v in self._rollout_row.items():  # the raw rollout statistics, for offline analysis of the run
            metrics[f"{p}/{k}"] = v
        metrics[f"{p}/findings"] = float(len(self.cluster.findings))
        if self.engine is not None:  # an alert's state is itself a series: 0 inactive, 1 pending, 2 firing
            for name, st in self.engine.states().items():
                metrics[f"{p}/alerts/{name}"] = float(st)
        self.sink.log(metrics, step)
        if self._samples:
            self.sink.log_table(f"{p}/samples/table", ["step", "prompt", "completion", "repetition_rate"],
                                self._samples, step)
            self._samples = []
        shown = [e for e in events if e.evidence]
        if shown:
            from .core.rollouts import evidence_table

            columns, data = evidence_table(shown)
            self.sink.log_table(f"{p}/rollouts/evidence", columns, data, step)

    def _error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        if self.errors <= 5:
            logger.warning("rlcluster: %s failed (%s: %s); training continues", where, type(exc).__name__,
                           clean_text(exc, 300))


__all__ = ["GAUGE_IDS", "RLClusterCallback"]
