"""W&B thinning never drops a value: a real, fast, attached GRPO run whose every row the interval would thin out.

``wandb_min_interval`` spares W&B a write per row when nothing new happened; rows that carry values measured only
at that step (the rollout statistics of an attached trainer, the probes' outputs) must still reach W&B under their
own step, or the charts miss points and ``rlcluster analyze`` of the run disagrees with what the callback saw live.

The run goes beside a second one that a rule stops, both while a busy loop spins on a core (issue 46: the last rows
of runs on a busy machine went missing): the last step and the stop step must hold every value too.
``benchmarks/under_load.py`` loops the same check (the issue's 20 runs in a row).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from under_load import ATTENTION, ROLLOUTS, missing

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.readers.wandb import read_offline_run

from .test_callback_trl import run_trainer

pytestmark = pytest.mark.trains

STEPS = 20
EVERY = 5  # attention, gradient and LoRA probes every 5 steps; samples every 10 (run_trainer.py)
# A stop no trajectory decides: the only rule is on the trainer's epoch counter (4 prompts a step of the tiny dataset's
# 12: an epoch is 3 steps, so 3.33 at step 10, a probe step): the stop row carries a probe and a rollout batch at once
STOP_RULES = """
extends: none
watchdog: {stall_alert: false, crash_alert: false, guardian: false}
rules:
  - name: test-stop-at-step-10
    gauge: convergence
    when: "epoch >= 3.3"
    severity: stop
    title: "test: stopping at step {step}"
"""


def _thinned(out: Path, *extra: str) -> dict:
    # an interval no row reaches: without values of its own step, a row would be written only where something got
    # worse
    overrides = {"pretrain_steps": 120, "per_device_train_batch_size": 16, "max_completion_length": 48,
                 "learning_rate": 2e-3}
    res = run_trainer(out, "grpo", "--max-steps", str(STEPS), "--every", str(EVERY), "--rewards", "length_chars",
                      "--attach", "{}", "--wandb-interval", "1e9", "--overrides", json.dumps(overrides), *extra,
                      timeout=900)
    res["run"] = read_offline_run(res["run_dir"])
    return res


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The thinned run (stop_on=None: it goes all 20 steps whatever it finds) and its twin stopped by a rule, side by
    side beside a process that keeps a core busy."""
    out = tmp_path_factory.mktemp("thinned")
    (out / "stop.yaml").write_text(STOP_RULES)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with ThreadPoolExecutor(2) as pool:
            whole = pool.submit(_thinned, out / "whole", "--cb-kwargs", json.dumps({"stop_on": None}))
            stopped = pool.submit(_thinned, out / "stopped", "--alerts", str(out / "stop.yaml"))
            return whole.result(), stopped.result()
    finally:
        busy.kill()
        busy.wait()


@pytest.fixture(scope="module")
def thinned_run(runs: tuple[dict, dict]) -> dict:
    return runs[0]


def _steps_with(run, key: str) -> list[int]:
    return [int(row["train/global_step"]) for row in run.history if key in row]


def test_every_rollout_and_probe_value_the_callback_computed_is_in_wandb(thinned_run: dict):
    res, run = thinned_run, thinned_run["run"]
    assert res["errors"] == 0 and not res["sink_errors"] and res["rollout_problem"] == ""
    assert res["global_step"] == STEPS and run.finished
    # the rollout statistics of every judged batch, each under its own step, none twice
    rollout_steps = _steps_with(run, "rlcluster/rollouts/completions")
    assert len(rollout_steps) == len(set(rollout_steps)) == res["rollout_calls"] >= STEPS - 1, rollout_steps
    assert rollout_steps == sorted(rollout_steps) and rollout_steps[-1] == STEPS
    # every attention probe's value (steps 5, 10, 15, 20), every gradient probe's per-layer norms, every sample
    probes = list(range(EVERY, STEPS + 1, EVERY))
    assert _steps_with(run, "rlcluster/attention_entropy/mean") == probes
    assert _steps_with(run, "rlcluster/gradients/layer_00_norm") == probes
    samples = [row["train/global_step"] for row in run.history if isinstance(row.get("rlcluster/samples/table"), dict)]
    assert samples == list(range(2 * EVERY, STEPS + 1, 2 * EVERY))


def test_analyze_of_the_thinned_run_reads_length_paid_where_the_callback_did(thinned_run: dict):
    """Offline, the same statistics at the same steps: length-paid (if this trajectory shows it at all) is found at
    the step the live callback found it, and attention entropy has data."""
    res = thinned_run
    live = [f["step"] for f in res["findings"] if f["gauge"] == "length" and f["rule"] == "length-paid"]
    analysis = analyze_path(res["run_dir"])
    found = analysis.to_dict()["findings"]
    offline = [f["step"] for f in found if f["gauge"] == "length" and f["rule"] == "length-paid"]
    assert offline[:1] == live[:1], (live, offline)
    attention = analysis.to_dict()["gauges"]["attention_entropy"]
    assert attention["status"] != "no-data" and attention["rows"] == STEPS // EVERY, attention
    print(f"thinned run: length-paid live {live[:1]}, offline {offline[:1]}; "
          f"{len(_steps_with(res['run'], 'rlcluster/findings'))} rlcluster rows written of {res['global_step']}")


def test_on_a_busy_machine_the_last_step_holds_every_value(thinned_run: dict):
    """Every judged rollout batch, every probe, the last step's among them, in the ``.wandb`` file (issue 46)."""
    run = thinned_run["run"]
    assert run.finished and not run.skipped and not run.truncated
    assert missing(thinned_run, EVERY) == []
    last = [row for row in run.history if row.get("train/global_step") == STEPS]
    assert any(ROLLOUTS in row for row in last) and any(ATTENTION in row for row in last)


def test_the_step_a_stop_lands_on_holds_every_value(runs: tuple[dict, dict]):
    res = runs[1]
    assert res["errors"] == 0 and not res["sink_errors"] and not res["rollout_problem"], res["stderr"][-3000:]
    stop = res["stopped_at"]
    assert stop is not None and stop == res["global_step"] < STEPS, (stop, res["global_step"])
    assert missing(res, EVERY) == []
    at_stop = {k for row in res["run"].history if row.get("train/global_step") == stop for k in row}
    assert ROLLOUTS in at_stop, sorted(at_stop)
    if stop % EVERY == 0:  # a probe step: the probes' values too
        assert ATTENTION in at_stop and "rlcluster/gradients/layer_00_norm" in at_stop, sorted(at_stop)
