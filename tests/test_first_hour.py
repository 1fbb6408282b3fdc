"""A new user's first hour: what the README promises holds when tried as written.

- ``rlcluster analyze`` reads the stdout a real Hugging Face run printed, whose first line with W&B offline is
  transformers' ``[INFO] Running in WANDB offline mode``: the lines that are not log rows are skipped, counted, said;
- the linter's verdict does not depend on what a user's example run leaves in the checkout (``./wandb/``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.readers import parse_rows_text

from .conftest import PACKAGE_ROOT

REPO = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def test_a_first_line_that_is_not_json_starts_a_printed_log_not_a_broken_document() -> None:
    text = ("[INFO] Running in WANDB offline mode\n"
            "[2026-11-27 08:00:01] warning: something\n"
            "{'loss': 0.5, 'grad_norm': 1.0, 'epoch': 0.1}\n"
            "{'loss': 0.4, 'grad_norm': 0.9, 'epoch': 0.2}\n")
    log = parse_rows_text(text, "train.log")
    assert log.source_format == "stdout_log" and [r["loss"] for r in log.rows] == [0.5, 0.4]
    assert log.meta["skipped_lines"] + log.meta["text_lines"] == 2
    # a real JSON document broken inside still says where its JSON breaks
    broken = '{\n  "log_history": [\n    {"loss": 0.5,\n     "step": oops}\n  ]\n}\n'
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_rows_text(broken, "state.json")


@pytest.mark.trains
def test_analyze_reads_the_stdout_of_a_real_offline_hugging_face_run(tmp_path: Path) -> None:
    """``python train.py > train.log 2>&1`` with report_to="wandb" offline and printed log rows (disable_tqdm):
    the log starts with transformers' '[INFO] Running in WANDB offline mode'; analyze reads every logged row."""
    steps = 6
    script = (
        "from wandb_rlcluster.tiny import make_trainer\n"
        f"t = make_trainer('dpo', output_dir={str(tmp_path / 'out')!r}, report_to='wandb', max_steps={steps})\n"
        "t.train()\n"
    )
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_DISABLE_GIT": "true",
           "PYTHONPATH": str(PACKAGE_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_API_KEY", None)
    log = tmp_path / "train.log"
    with log.open("w") as fh:
        p = subprocess.run([sys.executable, "-c", script], stdout=fh, stderr=subprocess.STDOUT, env=env,
                           timeout=300, cwd=tmp_path)
    text = log.read_text()
    assert p.returncode == 0, text[-3000:]
    assert "[INFO] Running in WANDB offline mode" in text.splitlines()[:5], text[:500]
    r = _cli("analyze", str(log), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["trainer"] == "dpo" and out["format"] == "stdout_log"
    assert out["rows"] >= steps and out["steps"][1] == steps  # every logged step
    assert out["skipped_lines"] >= 1  # the [INFO] line at least: counted ...
    text_out = _cli("analyze", str(log)).stdout
    assert f"{out['skipped_lines']} line(s) of the log are not log rows" in text_out  # ... and said


def test_lint_ignores_what_a_users_example_leaves_in_the_checkout(tmp_path: Path) -> None:
    """The README's runnable example leaves ./wandb/ (and out/) in the checkout; ruff must not read a
    ``wandb`` directory as a first-party module (I001 on every ``import wandb``) nor lint what runs leave."""
    if not Path(RUFF).exists():
        pytest.skip("ruff is not installed")
    copy = tmp_path / "checkout"
    copy.mkdir()
    for name in ("pyproject.toml", "src", "tests", "benchmarks"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, copy / name)
    clean = subprocess.run([RUFF, "check", "--no-cache", "src", "tests", "benchmarks"], cwd=copy,
                           capture_output=True, text=True)
    # what `python -c "...make_trainer(..., report_to='wandb')..."` leaves: a run directory with Python in it
    run = copy / "wandb" / "offline-run-20261127_080000-abc123" / "files"
    run.mkdir(parents=True)
    (copy / "wandb" / "debug.log").write_text("x\n")
    (run / "code.py").write_text("import os,sys\nx=1 ;\n")
    (copy / "out").mkdir()
    (copy / "out" / "stray.py").write_text("import sys,os\n")
    after = subprocess.run([RUFF, "check", "--no-cache", "src", "tests", "benchmarks"], cwd=copy,
                           capture_output=True, text=True)
    assert (after.returncode, after.stdout) == (clean.returncode, clean.stdout), after.stdout[-3000:]
    everything = subprocess.run([RUFF, "check", "--no-cache", "."], cwd=copy, capture_output=True, text=True)
    assert "wandb/" not in everything.stdout and "out/" not in everything.stdout, everything.stdout[-3000:]
