"""A real tiny TRL GRPO run logging to TensorBoard, MLflow and trackio at once (``report_to``), read back from each
tracker's own store: the findings equal those of the rows the Trainer handed its reporters, written as JSON Lines.

One training run (its own process: trackio reads its folder once, at import) feeds the three trackers, and a callback
writes the JSON Lines twin from ``on_log``. What each tracker keeps of a row is what the twin is held to: TensorBoard
keeps 32-bit floats; transformers' trackio callback keeps the end-of-training numbers out of the history (as its W&B
callback does); MLflow keeps the run's arguments, so its planned steps are the twin's too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.cli import main

from .source_twins import f32, same, write_jsonl

pytestmark = [pytest.mark.trains, pytest.mark.slow]

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("trackio")

HERE = Path(__file__).parent
MAX_STEPS = 6
END_OF_TRAINING = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("trackers")
    env = {**os.environ, "TRACKIO_DIR": str(out / "trackio"), "MLFLOW_TRACKING_URI": (out / "mlruns").as_uri(),
           "MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_EXPERIMENT_NAME": "rl",
           "TENSORBOARD_LOGGING_DIR": str(out / "tb"),
           "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "PYTHONPATH": str(HERE.parent / "src")}
    p = subprocess.run([sys.executable, str(HERE / "scripts" / "run_trackers.py"), "--out", str(out / "run"),
                        "--report-to", "tensorboard", "mlflow", "trackio", "--max-steps", str(MAX_STEPS)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = [json.loads(x) for x in (out / "run" / "twin.jsonl").read_text().splitlines()]
    assert rows and rows[-1].get("train_runtime") is not None  # the twin holds every logged row, the end row too
    return {"out": out, "rows": rows, "env": env}


def test_tensorboard_of_a_trl_run_equals_its_rows(trained: dict[str, Any], tmp_path: Path) -> None:
    rows32 = [{k: (v if k == "step" else f32(v)) for k, v in r.items()} for r in trained["rows"]]
    twin = write_jsonl(tmp_path / "twin32.jsonl", rows32)
    folder = trained["out"] / "tb"
    found = same(analyze_path(str(folder)), analyze_path(str(twin)))
    assert found["rows"] == len(rows32) and found["trainer"] == "grpo"
    assert found["gauges"]["kl"]["status"] != "no-data" and found["gauges"]["reward"]["status"] != "no-data"


def test_mlflow_of_a_trl_run_equals_its_rows(trained: dict[str, Any], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    doc = tmp_path / "twin.json"
    doc.write_text(json.dumps({"log_history": trained["rows"], "max_steps": MAX_STEPS}))
    uri = trained["env"]["MLFLOW_TRACKING_URI"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    found = same(analyze_path("mlflow:rl/tiny-grpo"), analyze_path(str(doc)))  # the run by its name
    assert found["rows"] == len(trained["rows"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    code, out, err = main(["analyze", "mlflow:rl", "--tracking-uri", uri, "--format", "csv"]), *capsys.readouterr()
    assert code == 0 and out.count("mlflow:rl/") == 1, err  # the experiment is a sweep of its one run


def test_trackio_of_a_trl_run_equals_its_rows(trained: dict[str, Any], tmp_path: Path) -> None:
    env = trained["env"]
    kept = [{k: v for k, v in r.items() if k not in END_OF_TRAINING} for r in trained["rows"]]
    twin = write_jsonl(tmp_path / "twin.jsonl", kept)
    code = ("import json, sys; from wandb_rlcluster.analyze import analyze_path; "
            "a, b = analyze_path('trackio:rlcluster-test/tiny-grpo'), analyze_path(sys.argv[1]); "
            "print(json.dumps([a.to_dict(), b.to_dict()], default=str))")
    p = subprocess.run([sys.executable, "-c", code, str(twin)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    one, two = json.loads(p.stdout.strip().splitlines()[-1])
    assert one.pop("format") == "trackio"
    for d in (one, two):
        d.pop("source"), d.pop("format", None)
    assert one == two and one["rows"] >= MAX_STEPS


def test_a_trackio_project_is_a_sweep_of_its_runs(trained: dict[str, Any]) -> None:
    env = trained["env"]
    cli = [sys.executable, "-m", "wandb_rlcluster.cli", "analyze", "trackio:rlcluster-test", "--format", "csv"]
    p = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("trackio:rlcluster-test/tiny-grpo") == 1 and ",trackio," in p.stdout
    p = subprocess.run([*cli, "--filter", "state=finished"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--filter name=TEXT does" in p.stderr and p.stderr.count("\n") == 1
