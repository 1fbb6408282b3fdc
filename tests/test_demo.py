"""The main job end to end: `rlcluster demo` trains a real TRL GRPO run and the plugin stops the KL runaway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wandb_rlcluster.report import report_from_spec
from wandb_rlcluster.wandb_offline import read_offline_run


def test_demo_kl_runaway_end_to_end(tmp_path: Path):
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "demo", "--out", str(out), "--steps", "80"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    text = p.stdout
    assert "rlcluster stopped training at step" in text and "(rule kl-stop)" in text
    stopped = int(text.split("rlcluster stopped training at step ")[1].split()[0])
    assert stopped < 80
    # the W&B offline run: rlcluster keys on train/global_step, and the stop alert recorded by wandb itself
    run_dir = text.split("W&B offline run   ")[1].split()[0]
    assert f"wandb sync {run_dir}" in text
    run = read_offline_run(run_dir)
    keys = {k for row in run.history for k in row}
    assert {"rlcluster/kl/kl", "rlcluster/kl/status", "rlcluster/alerts/kl-stop",
            "rlcluster/attention_entropy/mean"} <= keys
    assert any(a["level"] == "ERROR" and "KL" in a["title"] for a in run.alerts)
    # the journal names the rule
    journal = Path(text.split("alert journal     ")[1].split()[0])
    records = [json.loads(x) for x in journal.read_text().splitlines()]
    assert any(r.get("rule") == "kl-stop" and r.get("kind") == "firing" and r["step"] == stopped for r in records)
    # the report spec loads into a wandb-workspaces Report
    spec = Path(text.split("W&B report spec   ")[1].split()[0])
    report = report_from_spec(spec.read_text())
    assert "GRPO" in report.title and report.project
    # the dashboard is there and shows the stop
    dash = Path(text.split("dashboard         ")[1].split()[0])
    page = dash.read_text()
    assert page.startswith("<!doctype html>") and "KL to reference" in page and ">STOP<" in page
    # and the verdict table was printed
    assert "verdict STOP" in text and "KL health" in text
