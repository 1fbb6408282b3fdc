"""Gold rewards on a real TRL GRPO run: a proxy that pays for length, a weight-0 verifier that does not.

The tiny policy starts out answering in a character or two (an EOS bias), so the proxy (characters / 10)
can only rise by rambling; the verifier, logged by TRL as ``rewards/verifier/mean`` but weighted 0 in
``reward_weights``, passes short answers only. Told which function is gold, rlcluster must see the
proxy rise while the gold falls: the over-optimisation diagnosis, with the proxy-gold gap in its message,
live in the callback and again offline from the W&B run. One real run serves every assertion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.readers.wandb import read_offline_run

pytestmark = pytest.mark.trains  # trains a tiny model for real (make test-kernels)

SCRIPT = '''
import json, os, sys
os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off",
                  WANDB_PROJECT="rlcluster-tests", WANDB_DIR=sys.argv[1])
import wandb
from wandb_rlcluster import RLClusterCallback
from wandb_rlcluster.demo import reward_length_chars
from wandb_rlcluster.tiny import _texts, bias_toward_eos, make_trainer

def verifier(completions, **kwargs):
    """The held-out check: a short, finished answer (what the proxy's length bonus destroys)."""
    return [1.0 if len(t) <= 16 else 0.0 for t in _texts(completions)]

out = sys.argv[1]
cb = RLClusterCallback(gold_rewards=["verifier"], stop_on=None, grad_every=0, attention_every=0, lora_every=0,
                       sample_every=0)
trainer = make_trainer("grpo", output_dir=out + "/trainer", report_to="wandb", max_steps=64, seed=0,
                       learning_rate=8e-3, max_completion_length=64,
                       reward_funcs=[reward_length_chars, verifier], reward_weights=[1.0, 0.0], callbacks=[cb])
bias_toward_eos(trainer)
trainer.train()
run_dir = os.path.dirname(wandb.run.dir)
wandb.finish()
json.dump({"findings": [f.to_dict() for f in cb.cluster.findings], "run_dir": run_dir, "errors": cb.errors,
           "alerts": [e.to_dict() for e in cb.alert_events],
           "history": [r for r in trainer.state.log_history if "reward" in r]}, open(out + "/result.json", "w"))
'''


@pytest.fixture(scope="module")
def gold_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("gold")
    script = out / "gold_run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads((out / "result.json").read_text())


def test_the_run_is_what_the_test_says(gold_run):
    """TRL logged the weight-0 verifier, the proxy rose with length, the verifier fell."""
    rows = gold_run["history"]
    assert all("rewards/verifier/mean" in r for r in rows)
    first, last = rows[:10], rows[-10:]

    def mean(rs: list[dict], k: str) -> float:
        return sum(r[k] for r in rs) / len(rs)

    assert mean(last, "reward") > mean(first, "reward") + 1.0  # the proxy is trained on ...
    assert mean(last, "completions/mean_length") > 5 * mean(first, "completions/mean_length")  # ... and gamed
    assert mean(last, "rewards/verifier/mean") < mean(first, "rewards/verifier/mean") - 0.3  # the gold is not


def test_over_optimisation_diagnosed_live_with_the_proxy_gold_gap(gold_run):
    assert gold_run["errors"] == 0
    found = {(f["gauge"], f["rule"]): f for f in gold_run["findings"]}
    gap = found[("reward", "proxy-gold-divergence")]
    assert gap["severity"] == "warn" and "'verifier'" in gap["message"] and "Proxy-gold gap" in gap["message"]
    diag = found[("diagnosis", "over-optimisation")]
    assert diag["severity"] == "warn" and diag["step"] >= gap["step"]
    assert "Proxy-gold gap" in diag["message"] and "What to do:" in diag["message"]
    # the alert rule for diagnoses (first in alerts.yaml) forwards it
    assert any(a["rule"] == "diagnosis" and a["kind"] == "firing" for a in gold_run["alerts"])


def test_offline_analysis_of_the_wandb_run_agrees(gold_run):
    run = read_offline_run(Path(gold_run["run_dir"]))
    logged = {k for row in run.history for k in row}
    assert {"rlcluster/reward/proxy_gold_gap", "rlcluster/reward/gold_ewma", "rlcluster/diagnosis/status"} <= logged
    with_gold = analyze_path(gold_run["run_dir"], params={"reward": {"gold": ["verifier"]}}).to_dict()
    rules = {(f["gauge"], f["rule"]) for f in with_gold["findings"]}
    assert ("diagnosis", "over-optimisation") in rules and ("reward", "proxy-gold-divergence") in rules
    assert with_gold["gauges"]["reward"]["proxy_gold_gap"] > 3
    # the control: not told which function is gold, the same log has no proxy-gold reading
    without = analyze_path(gold_run["run_dir"]).to_dict()
    assert not [f for f in without["findings"] if f["rule"] == "proxy-gold-divergence"]
    cmd = [sys.executable, "-m", "wandb_rlcluster", "analyze", gold_run["run_dir"], "--gold", "verifier"]
    cli = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and cli.stdout.index("Diagnoses (") < cli.stdout.index("gauge ")
    assert "over-optimisation" in cli.stdout
