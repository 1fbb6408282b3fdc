"""W&B thinning never drops a value: a real, fast, attached GRPO run whose every row the interval would thin out.

``wandb_min_interval`` spares W&B a write per row when nothing new happened; rows that carry values measured only
at that step (the rollout statistics of an attached trainer, the probes' outputs) must still reach W&B under their
own step, or the charts miss points and ``rlcluster analyze`` of the run disagrees with what the callback saw live.
"""

from __future__ import annotations

import json

import pytest

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.readers.wandb import read_offline_run

from .test_callback_trl import run_trainer

pytestmark = pytest.mark.trains

STEPS = 20
EVERY = 5  # attention, gradient and LoRA probes every 5 steps; samples every 10 (run_trainer.py)


@pytest.fixture(scope="module")
def thinned_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("thinned")
    # an interval no row reaches: without values of its own step, a row would be written only where something got
    # worse; stop_on=None so the run goes all 20 steps whatever it finds
    overrides = {"pretrain_steps": 120, "per_device_train_batch_size": 16, "max_completion_length": 48,
                 "learning_rate": 2e-3}
    res = run_trainer(out, "grpo", "--max-steps", str(STEPS), "--every", str(EVERY), "--rewards", "length_chars",
                      "--attach", "{}", "--wandb-interval", "1e9", "--overrides", json.dumps(overrides),
                      "--cb-kwargs", json.dumps({"stop_on": None}), timeout=600)
    res["run"] = read_offline_run(res["run_dir"])
    return res


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
