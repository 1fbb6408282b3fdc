"""Run one tiny real TRL trainer with RLClusterCallback in a fresh process; write result.json.

Used by the callback tests (a fresh process per run: wandb keeps the settings of the
first ``wandb.init`` in a process) and runnable by hand:

    python tests/scripts/run_trainer.py --kind grpo_kl --out /tmp/x --report wandb
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--order", choices=("after", "before", "add"), default="after",
                    help="after: callbacks=[cb] (after WandbCallback); add: trainer.add_callback(cb); "
                         "before: cb moved ahead of WandbCallback")
    ap.add_argument("--report", default="wandb")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--peft", action="store_true")
    ap.add_argument("--params", default="{}", help="JSON per-gauge overrides")
    ap.add_argument("--rank-params", default="{}", help="JSON {rank: params} applied on that rank only")
    ap.add_argument("--alerts", default=None, help="alerts YAML for RLClusterCallback(alerts=...)")
    ap.add_argument("--alerts-object", action="store_true",
                    help="load --alerts here and pass the AlertConfig object instead of the path")
    ap.add_argument("--channel-wait", type=float, default=None, help="RLClusterCallback(channel_wait=...)")
    ap.add_argument("--rank-alerts", default="{}", help="JSON {rank: alerts YAML path} for that rank only")
    ap.add_argument("--every", type=int, default=1, help="cadence of all live probes")
    ap.add_argument("--wandb-interval", type=float, default=0.0, help="RLClusterCallback(wandb_min_interval=...)")
    ap.add_argument("--save-steps", type=int, default=0)
    ap.add_argument("--eval-steps", type=int, default=0, help="evaluate every N steps (make_trainer(eval_steps=N))")
    ap.add_argument("--resume", default=None)
    ap.add_argument("--user-wandb-init", action="store_true", help="wandb.init by the user, report_to none")
    ap.add_argument("--kill-wandb-at", type=int, default=0, help="kill the wandb-core service at this step")
    ap.add_argument("--overrides", default="{}", help="JSON config overrides for the trainer")
    ap.add_argument("--cb-kwargs", default="{}", help="JSON extra RLClusterCallback arguments (stall_floor, ...)")
    ap.add_argument("--fault", default="", help="add a reward function that misbehaves at one step (GRPO): "
                    "sleep:STEP:SECONDS or raise:STEP (STEP is the global step while the reward is computed)")
    ap.add_argument("--rewards", default="", help="comma-separated reward functions for GRPO/RLOO by name: "
                    "length_chars, letter_a, letter_a_share, like_ocean (tiny.py / demo.py)")
    ap.add_argument("--attach", default=None, help="JSON kwargs: cb.attach(trainer, **kwargs) (rollout evidence)")
    ap.add_argument("--slow-step", default="", help="STEP:SECONDS: a callback sleeps when that step begins (any "
                    "trainer), like a first step that compiles or loads")
    ap.add_argument("--user-sigterm", action="store_true", help="the script's own SIGTERM handler (counts, goes on), "
                    "installed before training")
    ap.add_argument("--self-signal", type=int, default=0, help="send SIGTERM to this process when this step ends")
    ap.add_argument("--slow-finish", type=float, default=0.0, help="W&B's run finish first sleeps this long (an "
                    "online run's final upload; an offline finish is instant)")
    ap.add_argument("--snapshot", action="store_true", help="record what rlcluster left after train(): threads, "
                    "signal handlers, wakeup fd, excepthook, child processes")
    a = ap.parse_args()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_DIR", str(out))
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_DISABLE_GIT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    os.environ.setdefault("WANDB_PROJECT", "rlcluster-tests")
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")

    import wandb
    from transformers import TrainerCallback

    if a.slow_finish:
        from wandb.sdk import wandb_run

        finish = wandb_run.Run._atexit_cleanup

        def slow_finish(self, *args, **kwargs):
            time.sleep(a.slow_finish)
            return finish(self, *args, **kwargs)

        wandb_run.Run._atexit_cleanup = slow_finish
    from transformers.integrations import WandbCallback

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.tiny import make_trainer
    from wandb_rlcluster.trainer.distributed import world

    rank = int(os.environ.get("RANK", "0"))
    params = json.loads(a.params)
    params.update(json.loads(a.rank_params).get(str(rank), {}))
    alerts = json.loads(a.rank_alerts).get(str(rank), a.alerts)
    if a.alerts_object:
        from wandb_rlcluster.alerts import load_config

        alerts = load_config(alerts)
    extra_kw = {} if a.channel_wait is None else {"channel_wait": a.channel_wait}
    cb = RLClusterCallback(alerts=alerts, params=params, grad_every=a.every, attention_every=a.every,
                           lora_every=a.every,
                           sample_every=2 * a.every, wandb_min_interval=a.wandb_interval, **extra_kw,
                           **json.loads(a.cb_kwargs))
    original_cb = cb
    timing: dict[str, float] = {}
    callback_end = cb.on_train_end

    def timed_train_end(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return callback_end(*args, **kwargs)
        finally:
            timing["on_train_end_seconds"] = time.perf_counter() - t0

    cb.on_train_end = timed_train_end

    class KillWandb(TrainerCallback):
        """A real W&B outage: the wandb-core service process dies mid-run."""

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == a.kill_wandb_at and state.is_world_process_zero:
                import psutil

                for p in psutil.Process().children(recursive=True):
                    if p.name().startswith("wandb-core"):
                        p.kill()
                        p.wait(10)

    class SlowStep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            step, seconds = a.slow_step.split(":")
            if state.global_step == int(step):
                import time

                time.sleep(float(seconds))

    class SelfSignal(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == a.self_signal:
                import signal

                os.kill(os.getpid(), signal.SIGTERM)

    user_sigterm_calls: list[int] = []
    if a.user_sigterm:
        import signal

        signal.signal(signal.SIGTERM, lambda signum, frame: user_sigterm_calls.append(signum))

    extra = [KillWandb()] if a.kill_wandb_at else []
    extra += [SlowStep()] if a.slow_step else []
    extra += [SelfSignal()] if a.self_signal else []
    overrides = json.loads(a.overrides)
    if a.save_steps:
        overrides.update(save_strategy="steps", save_steps=a.save_steps)
    if a.rewards:
        from wandb_rlcluster import demo, tiny

        named = {"length_chars": demo.reward_length_chars, "letter_a": tiny.reward_letter_a,
                 "letter_a_share": demo.reward_letter_a_share, "like_ocean": demo.reward_like_ocean}
        overrides["reward_funcs"] = [named[n] for n in a.rewards.split(",")]
    if a.fault:
        from wandb_rlcluster.tiny import REWARD_FUNCS

        overrides["reward_funcs"] = [*REWARD_FUNCS, faulty_reward(a.fault)]
    report = "none" if a.user_wandb_init else a.report
    user_run = wandb.init(project="rlcluster-tests", name=f"{a.kind}-user") if a.user_wandb_init else None
    callbacks = [cb, *extra] if a.order == "after" else extra
    trainer = make_trainer(a.kind, output_dir=str(out / "trainer"), callbacks=callbacks, report_to=report,
                           max_steps=a.max_steps, peft=a.peft, run_name=f"{a.kind}-{a.order}",
                           eval_steps=a.eval_steps, **overrides)
    if a.order == "add":
        trainer.add_callback(cb)
    elif a.order == "before":
        wcb = trainer.pop_callback(WandbCallback)
        trainer.add_callback(cb)
        if wcb is not None:
            trainer.add_callback(wcb)
    if a.attach is not None:  # after the callback is in place: attach() adds it only when it is missing
        cb.attach(trainer, **json.loads(a.attach))
    order = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    t_train = time.perf_counter()
    trainer.train(resume_from_checkpoint=a.resume)
    train_seconds = time.perf_counter() - t_train
    leftovers = snapshot() if a.snapshot else None
    # restore_callback_states_from_checkpoint=True replaces the callback by one rebuilt from the checkpoint
    cb = next((c for c in trainer.callback_handler.callbacks if isinstance(c, RLClusterCallback)), cb)

    run = wandb.run
    run_dir = str(Path(run.dir).parent) if run is not None else None
    try:
        wandb.finish()
    except Exception as e:  # noqa: BLE001 - the killed-service run cannot finish cleanly
        print(f"wandb.finish failed as expected after the outage: {type(e).__name__}", file=sys.stderr)
    del user_run
    r, n = world()
    length = cb.cluster.gauges.get("length")
    result = {
        "rank": r, "world_size": n, "run_dir": run_dir, "order": order,
        "global_step": trainer.state.global_step, "stopped_at": cb.stopped_at,
        "stop_finding": cb.stop_finding.to_dict() if cb.stop_finding else None,
        "errors": cb.errors, "sink_errors": dict(cb.sink.errors), "family": cb.cluster.family,
        "cluster_rows": cb.cluster.rows,
        # the planned logged rows the core derived from max_steps (what sets how long its warnings hold)
        "planned_rows": cb.cluster.gauges["learning_rate"].planned_rows, "max_steps": trainer.state.max_steps,
        "logging_steps": trainer.args.logging_steps,
        "length_baseline": length.base.value if length is not None else None,
        "findings": [f.to_dict() for f in cb.cluster.findings],
        "on_log_calls": cb.on_log_calls, "on_log_seconds": cb.on_log_seconds,
        "is_peft": type(trainer.model).__name__.startswith("Peft"),
        "alerts": [e.to_dict() for e in cb.alert_events],
        "alert_rules": [[r.name, r.when.text if r.when else r.finding, r.severity, r.for_]
                        for r in (cb.alert_config.rules if cb.alert_config else [])],
        "restored_callback": cb is not original_cb,
        "channel_wait_seconds": getattr(cb, "channel_wait_seconds", None), "train_seconds": train_seconds,
        "output_dir": str(out / "trainer"), **timing, "leftovers": leftovers, "user_sigterm_calls": user_sigterm_calls,
        "written_at": time.time(),  # the parent measures from here to the process's end (exit hooks, daemon threads)
        "rollout_calls": cb.rollout_calls, "rollout_seconds": cb.rollout_seconds,
        "rollout_problem": cb.rollouts.tap.problem if cb.rollouts.tap is not None else None,
    }
    (out / f"result-rank{rank}.json").write_text(json.dumps(result, indent=1, default=str))


def snapshot() -> dict:
    """What is left running or installed in this process (the W&B run is still open)."""
    import signal
    import threading

    import psutil

    def name(obj) -> str:
        return str(getattr(obj, "__qualname__", obj))

    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    kids = []
    for child in psutil.Process().children():
        try:
            kids.append(" ".join(child.cmdline()[-2:]) if child.status() != psutil.STATUS_ZOMBIE else "zombie")
        except psutil.NoSuchProcess:
            continue
    return {"threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("rlcluster")),
            "sigterm": name(signal.getsignal(signal.SIGTERM)), "sigint": name(signal.getsignal(signal.SIGINT)),
            "wakeup_fd": wakeup, "excepthook": name(sys.excepthook), "thread_excepthook": name(threading.excepthook),
            "children": kids}


def faulty_reward(spec: str):
    """A reward function (always 0) that sleeps or raises while the reward of one step is computed."""
    import time

    kind, step, *rest = spec.split(":")

    def faulty(completions, trainer_state=None, **kw):
        if trainer_state is not None and trainer_state.global_step == int(step):
            print(f"fault {kind} at step {step} t={time.time():.3f}", file=sys.stderr, flush=True)
            if kind == "sleep":
                time.sleep(float(rest[0]))
            elif kind == "raise":
                raise RuntimeError(f"reward server unreachable at step {step} (api_key=sk-test-not-a-real-key-123456)")
        return [0.0] * len(completions)

    return faulty


if __name__ == "__main__":
    main()
