"""The verl and OpenRLHF report layouts: every key a panel plots exists in a W&B run written with that framework's
keys.

Four real verl logs (old key names, new key names, a GRPO run with actor/entropy and a learning rate, a KL-loss run)
are replayed through real wandb (offline) the way verl's tracking backend logs, watched by ``watch()`` so the
``rlcluster/*`` series are there too; what W&B stored is read back from the .wandb files. No public OpenRLHF run
is known: its layout is checked against a REPLAY of OpenRLHF's key set (its names, ``train/global_step``, its
``define_metric`` calls) carrying real verl runs' numbers, labelled as such.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.dashboard import build_dashboard
from wandb_rlcluster.layouts import load_layout
from wandb_rlcluster.readers.wandb import read_offline_run

from .conftest import shared_log

pytestmark = pytest.mark.slow  # W&B runs written by subprocesses replaying real logs

pytest.importorskip("wandb")

HERE = Path(__file__).parent
LOGS = ("eric-haibin-lin__gsm8k_Qwen2.5-0.5B-ppo-resp512.log.gz", "Bihan__dstack-configs_verl_demo.log.gz",
        "yuzhaouoe__GUI-Cursor-Moving_verl_demo.log.gz", "zhiyuanhubj__logic-rl-formula_wandb_output.log.gz")
# Keys no public verl log here carries, each with the reason; a listed key that turns up fails the test too.
OPTIONAL = {
    "actor/reward_kl_penalty": "verl >= 0.3's name for the KL in the reward; these logs are older (critic/kl) or "
                               "use the KL loss",
    "rlcluster/attention_entropy/mean": "a TRL callback probe; watch() sees logged rows only",
    "rlcluster/lora/norm_mean": "a TRL callback probe",
    "rlcluster/samples/repetition_rate": "a TRL callback probe",
}


@pytest.fixture(scope="module")
def verl_runs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    runs = []
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    for name in LOGS:
        out = tmp_path_factory.mktemp("verl-layout")
        p = subprocess.run([sys.executable, str(HERE / "scripts" / "replay_loop.py"), "--out", str(out), "--log",
                            str(shared_log("verl", name)), "--watch", "--keep-going", "--min-interval", "0"],
                           env=env,  # every row written: a test of the layout, not of thinning (as for OpenRLHF below)
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads((out / "result.json").read_text())["run_dir"])
    return runs


def _present(y: str, keys: set[str]) -> bool:
    return any(fnmatch.fnmatchcase(k, y) for k in keys) if "*" in y else y in keys


def test_every_verl_panel_key_is_in_a_verl_run(verl_runs: list[str]) -> None:
    layout = load_layout("verl")
    assert layout.family == "verl" and layout.trainers == ("grpo",)
    plotted = sorted({y for s in layout.sections for p in s.panels for y in p.y})
    keys = set().union(*({k for row in read_offline_run(r).history for k in row} for r in verl_runs))
    missing = [y for y in plotted if not _present(y, keys) and y not in OPTIONAL]
    needless = [y for y in OPTIONAL if _present(y, keys)]
    assert not missing, f"verl panels plot keys no verl run wrote: {missing}"
    assert not needless, f"keys listed as optional are there after all: {needless}"
    # the layout names verl's keys, never TRL's
    assert not any(y.startswith("train/") for y in plotted)


def test_the_dashboard_of_a_verl_log_draws_the_verl_layout(tmp_path: Path) -> None:
    page, analysis = build_dashboard(str(shared_log("verl", LOGS[0])))
    assert analysis.cluster.framework == "verl" and "verl run health" in page
    for title in ("Shaped reward (proxy) and task score (gold)", "KL to reference (per token)", "Truncated share"):
        assert title in page
    # the panels found verl's series under the names the profile gives them (reward, kl, entropy, lengths)
    assert page.count("<svg") >= 10


OPENRLHF_LOGS = ("eric-haibin-lin__gsm8k_Qwen2.5-0.5B-ppo-resp512.log.gz",
                 "yuzhaouoe__GUI-Cursor-Moving_verl_demo.log.gz")
OPTIONAL_OPENRLHF = {
    "eval/*": "the replayed logs' validation rows are verl's; OpenRLHF's eval/<key> is not replayed",
    "rlcluster/efficiency/tokens_per_s": "OpenRLHF logs no token counts or step times to count throughput with",
    "rlcluster/attention_entropy/mean": "a TRL callback probe",
    "rlcluster/lora/norm_mean": "a TRL callback probe",
    "rlcluster/samples/repetition_rate": "a TRL callback probe",
}


@pytest.fixture(scope="module")
def openrlhf_runs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    runs = []
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    for name in OPENRLHF_LOGS:
        out = tmp_path_factory.mktemp("openrlhf-layout")
        p = subprocess.run([sys.executable, str(HERE / "scripts" / "replay_loop.py"), "--out", str(out), "--log",
                            str(shared_log("verl", name)), "--keys", "openrlhf", "--watch", "--keep-going",
                            "--min-interval", "0"], env=env,  # every row written: a test of the layout, not of thinning
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads((out / "result.json").read_text())["run_dir"])
    return runs


def test_every_openrlhf_panel_key_is_in_a_replay_of_its_key_set(openrlhf_runs: list[str]) -> None:
    layout = load_layout("openrlhf")
    plotted = sorted({y for s in layout.sections for p in s.panels for y in p.y})
    keys = set().union(*({k for row in read_offline_run(r).history for k in row} for r in openrlhf_runs))
    missing = [y for y in plotted if not _present(y, keys) and y not in OPTIONAL_OPENRLHF]
    needless = [y for y in OPTIONAL_OPENRLHF if _present(y, keys)]
    assert not missing, f"OpenRLHF panels plot keys the replay never wrote: {missing}"
    assert not needless, f"keys listed as optional are there after all: {needless}"
    page, analysis = build_dashboard(openrlhf_runs[0])
    assert analysis.cluster.framework == "openrlhf" and "OpenRLHF run health" in page
