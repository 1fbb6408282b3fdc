"""``rlcluster analyze`` as a user runs it: a real subprocess, exit codes, output contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.core import GAUGE_IDS
from wandb_rlcluster.core.doc_links import rule_doc_url


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          timeout=120)


def test_json_contract(real_logs):
    p = run("analyze", str(real_logs / "grpo_chaoseconomy_rusheel_traininglogs.json"), "--format", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["trainer"] == "grpo"
    assert out["rows"] == 50
    assert out["verdict"] in ("ok", "warn", "stop")
    assert set(out["gauges"]) == set(GAUGE_IDS)
    for g in out["gauges"].values():
        assert g["status"] in ("ok", "warn", "stop", "no-data")
    assert out["findings"], "this run is pinned at the length cap: it must have findings"
    steps = [f["step"] for f in out["findings"]]
    assert steps == sorted(steps)
    for f in out["findings"]:
        assert set(f) == {"gauge", "rule", "severity", "step", "metric", "value", "message", "doc"}
        assert f["doc"] == rule_doc_url(f["rule"])  # the rule's page (tests/test_rule_pages.py: it resolves)
        assert f["severity"] in ("info", "warn", "stop")
        assert len(f["message"]) > 20


def test_text_table_lists_every_gauge(real_logs):
    p = run("analyze", str(real_logs / "grpo_wordle_qwen3b_casnlp_400.json"))
    assert p.returncode == 0, p.stderr
    for title in ("Loss landscape", "KL health", "Generation length", "Reward signal"):
        assert title in p.stdout
    assert "verdict WARN" in p.stdout
    assert "reward/reward-plateau" in p.stdout
    assert "\x1b[" not in p.stdout  # no colour codes when not on a terminal


@pytest.mark.parametrize(("fail_on", "name", "code"), [
    ("stop", "ppo_trl_kartik_v1_seed2026.json", 1),
    ("warn", "ppo_trl_kartik_v1_seed2026.json", 1),
    ("stop", "grpo_wordle_qwen3b_casnlp_400.json", 0),
    ("warn", "grpo_wordle_qwen3b_casnlp_400.json", 1),
    ("warn", "sft_llama3_8b_mob_3750.json", 0),
])
def test_fail_on_gate(real_logs, fail_on, name, code):
    p = run("analyze", str(real_logs / name), "--fail-on", fail_on, "--format", "json")
    assert p.returncode == code, p.stderr
    json.loads(p.stdout)  # the report is still printed when the gate trips


@pytest.mark.parametrize("content", ["", "not json at all {", '{"a": 1}', "[1, 2, 3]", '{"log_history": []}'])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, content: str):
    f = tmp_path / "bad.json"
    f.write_text(content)
    p = run("analyze", str(f))
    assert p.returncode == 2
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert "bad.json" in p.stderr


def test_missing_file_and_unknown_trainer(tmp_path: Path):
    p = run("analyze", str(tmp_path / "nope.json"))
    assert p.returncode == 2 and "nope.json" in p.stderr and "Traceback" not in p.stderr
    good = tmp_path / "rows.json"
    good.write_text(json.dumps([{"loss": 1.0, "step": 1}]))
    p = run("analyze", str(good), "--trainer", "banana")
    assert p.returncode == 2 and "banana" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_jsonl_with_restart_and_nan_tokens(tmp_path: Path):
    lines = [json.dumps({"loss": 1.0 - 0.001 * i, "grad_norm": 0.5, "step": i}) for i in range(1, 60)]
    lines += ['{"loss": NaN, "grad_norm": Infinity, "step": 3}']  # the counter restarts and values go bad
    lines += [json.dumps({"loss": 0.9, "grad_norm": None, "step": 4})]
    f = tmp_path / "log.jsonl"
    f.write_text("\n".join(lines))
    p = run("analyze", str(f), "--format", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["rows"] == 61
    assert out["step_restarts_at_rows"] == [59]
    assert out["steps"][1] > 59  # steps stay monotonic after the restart
    rules = {(f["gauge"], f["rule"]) for f in out["findings"]}
    assert ("loss", "loss-nonfinite") in rules and ("gradients", "grad-nonfinite") in rules
