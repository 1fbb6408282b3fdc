"""``watch(run)`` on a loop that is not a Trainer: a real verl log replayed through real wandb (offline).

The loop runs in a child process (wandb's setup singleton keeps the first ``wandb.init``'s directory); what it
wrote is read back from the ``.wandb`` file. The stop is compared with ``rlcluster analyze`` of the same log
under the same alert file: the same rows, the same rules, the same decision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.alerts import load_config
from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.readers.wandb import read_offline_run

pytestmark = pytest.mark.slow  # watch() over W&B runs written by subprocesses

pytest.importorskip("wandb")

HERE = Path(__file__).parent
SCRIPT = HERE / "scripts" / "replay_loop.py"
# A team's own alerts.yaml: a tighter per-token KL stop than the shipped 1.0 (a small model, a strict budget).
# The real run's KL to the reference crosses 0.15 in its second third: a stop on real numbers.
KL_RULES = """\
version: 1
rules:
  - name: kl-stop
    when: "kl > 0.15"
    title: "KL {value:.3g} > 0.15 at step {step}: stop ({run_name})"
"""


def replay(tmp: Path, *args: str) -> dict:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp), *args], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads((tmp / "result.json").read_text()) | {"stderr": p.stderr}


@pytest.fixture(scope="module")
def kl_rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "alerts.yaml"
    path.write_text(KL_RULES)
    return path


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, kl_rules: Path, verl_ppo_log: Path) -> dict:
    out = tmp_path_factory.mktemp("watched")
    return replay(out, "--log", str(verl_ppo_log), "--watch", "--alerts", str(kl_rules), "--keep-going")


def test_watch_stops_where_analyze_stops(watched: dict, kl_rules: Path, verl_ppo_log: Path) -> None:
    offline = analyze_path(str(verl_ppo_log), alerts=load_config(kl_rules))
    stops = [e for e in offline.alerts if e.kind == "firing" and e.severity == "stop"]
    assert stops, "the KL rule must stop this log offline"
    assert watched["stop_step"] == stops[0].step
    assert watched["on_stop"] == [f"kl/kl-stop@{stops[0].step}"]  # on_stop called once, with the stopping finding
    assert watched["verdict"] == "stop"


def test_watch_writes_rlcluster_into_the_same_run_and_leaves_the_loops_rows_alone(watched: dict) -> None:
    run = read_offline_run(watched["run_dir"])
    rows = [r for r in run.history if "critic/score/mean" in r]
    assert len(rows) == watched["rows"] == len(watched["logged"])
    for got, sent in zip(rows, watched["logged"], strict=True):  # every key the loop logged, at its step, as it was
        assert got["_step"] == sent["step"]
        assert {k: got[k] for k in sent if k != "step"} == {k: v for k, v in sent.items() if k != "step"}
    ours = [r for r in run.history if any(k.startswith("rlcluster/") for k in r)]
    assert ours and all("critic/score/mean" in r for r in ours)  # in the loop's own rows, not rows of their own
    keys = set().union(*ours)
    assert {"rlcluster/kl/kl", "rlcluster/kl/status", "rlcluster/alerts/kl-stop", "rlcluster/reward/gold"} <= keys
    assert any(r.get("rlcluster/alerts/kl-stop") == 2.0 for r in ours)  # firing, in the run
    assert run.summary["rlcluster/stopped_by"] == "kl/kl-stop"
    assert run.summary["rlcluster/framework"] == "verl"


def test_watch_journals_its_alerts(watched: dict) -> None:
    journal = Path(watched["run_dir"]) / "alerts.jsonl"
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    firing = [e for e in entries if e.get("type") == "alert" and e["kind"] == "firing"]
    kl = [e for e in firing if e["rule"] == "kl-stop"]
    assert kl and kl[0]["step"] == watched["stop_step"] and kl[0]["severity"] == "stop"
    assert "0.15" in kl[0]["title"]


def test_a_verl_wandb_run_reads_as_verl_and_stops_alike(tmp_path: Path, kl_rules: Path, verl_ppo_log: Path) -> None:
    """The W&B run verl's tracking backend writes (no watch): `rlcluster analyze` of its .wandb file detects verl
    and stops at the same step as the console log."""
    res = replay(tmp_path, "--log", str(verl_ppo_log), "--module-log")
    a = analyze_path(res["run_dir"], alerts=load_config(kl_rules))
    b = analyze_path(str(verl_ppo_log), alerts=load_config(kl_rules))
    assert a.source_format == "wandb_offline_run" and a.cluster.framework == "verl"
    first_stop = [e.step for e in a.alerts if e.kind == "firing" and e.severity == "stop"][:1]
    assert first_stop and first_stop == [e.step for e in b.alerts if e.kind == "firing" and e.severity == "stop"][:1]


def test_openrlhf_key_set_replay(tmp_path: Path, kl_rules: Path, verl_ppo_log: Path) -> None:
    """No public OpenRLHF log is known: this is a REPLAY of OpenRLHF's key set (train/<key> on train/global_step,
    its define_metric calls) carrying a real verl run's numbers, through real wandb. Read back, it is detected as
    OpenRLHF, its keys feed the gauges by meaning, and watch() stops it where analyze does."""
    res = replay(tmp_path, "--log", str(verl_ppo_log), "--keys", "openrlhf", "--watch", "--alerts", str(kl_rules))
    a = analyze_path(res["run_dir"], alerts=load_config(kl_rules))
    assert a.cluster.framework == "openrlhf" and a.cluster.family == "grpo"
    g = a.cluster.gauges
    assert g["kl"].rows_seen > 100 and g["entropy"].rows_seen > 100 and g["length"].rows_seen > 100
    assert g["reward"].p["gold"] == ["score"]  # train/reward (the RM score) is the gold, train/return the proxy
    stop = [e.step for e in a.alerts if e.kind == "firing" and e.severity == "stop"]
    assert stop and res["stop_step"] == stop[0]


def test_verl_plugin_watches_the_run_verl_starts(tmp_path: Path, kl_rules: Path, verl_ppo_log: Path) -> None:
    """VERL_USE_EXTERNAL_MODULES=wandb_rlcluster.verl_plugin: the module, imported before the loop calls
    wandb.init itself (as verl's tracking backend does, then wandb.log(data=..., step=...)), watches that run."""
    os.environ["RLCLUSTER_ALERTS"] = str(kl_rules)
    try:
        res = replay(tmp_path, "--log", str(verl_ppo_log), "--plugin", "--module-log", "--keep-going")
    finally:
        del os.environ["RLCLUSTER_ALERTS"]
    offline = analyze_path(str(verl_ppo_log), alerts=load_config(kl_rules))
    assert res["stop_step"] == [e.step for e in offline.alerts if e.kind == "firing" and e.severity == "stop"][0]
    run = read_offline_run(res["run_dir"])
    assert any("rlcluster/kl/kl" in r for r in run.history) and run.summary["rlcluster/framework"] == "verl"


def test_verl_plugin_refuses_a_bad_alert_file_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "alerts.yaml"
    bad.write_text("version: 1\nrules:\n  - name: kl-stop\n    when: \"kl >\"\n")
    env = {**os.environ, "RLCLUSTER_ALERTS": str(bad)}
    p = subprocess.run([sys.executable, "-c", "import wandb_rlcluster.verl_plugin"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "alerts.yaml" in p.stderr and "line" in p.stderr


def test_watch_in_process_edge_cases(tmp_path: Path) -> None:
    """In a child process: a loop's first dicts are bookkeeping (the framework is decided by the first row that
    names one), commit=False partial rows make one row, watching twice returns the same watcher, detach restores
    the run, a dict with objects wandb takes (a string, a list) is seen without a fault."""
    script = tmp_path / "edge.py"
    script.write_text(f"""
import json, os, sys
os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")
import wandb
from wandb_rlcluster import watch
run = wandb.init(project="edge", dir={str(tmp_path)!r})
w = watch(run, alerts=False)
assert watch(run) is w
run.log({{"epoch": 0, "note": "warm-up", "lr_schedule": [1, 2]}})
run.log({{"critic/score/mean": 0.5, "critic/rewards/mean": 0.5}}, commit=False)
run.log({{"actor/kl_loss": 0.01, "actor/entropy": 0.4, "actor/pg_loss": 0.1}})
fw = w.monitor.cluster.framework
rows = w.rows
kl_rows = w.monitor.cluster.gauges["kl"].rows_seen
reward_rows = w.monitor.cluster.gauges["reward"].rows_seen
w.close()
assert "_log" not in vars(run)
run.finish()
print(json.dumps({{"fw": fw, "rows": rows, "kl": kl_rows, "reward": reward_rows, "errors": w.monitor.errors}}))
""")
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == {"fw": "verl", "rows": 2, "kl": 1, "reward": 1, "errors": 0}
