"""``warn_sooner``: the one dial that trades false warnings for earlier ones. Every warn rule's hold gets that many
logged rows shorter (never under one row); stop rules keep theirs. It is checked before training starts, carried
in checkpoints, and reaches ``rlcluster analyze`` as ``--warn-sooner``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wandb_rlcluster import RLClusterCallback
from wandb_rlcluster.core import InstrumentCluster, analyze_rows
from wandb_rlcluster.core.cluster import WARN_SOONER_MAX

from .test_early_warning import build, grpo


def kl_jump_rows() -> list[dict[str, float]]:
    """A GRPO log (beta > 0) whose per-token KL jumps from 0.05 to 2.0 at step 150: past the warn (0.5) and the
    stop (1.0) lines at once, both held 3 rows by default."""
    return build(lambda i, g: grpo(i, g, kl=0.05 if i < 150 else 2.0), n=200)


def first(cluster: InstrumentCluster, rule: str) -> int:
    steps = [f.step for f in cluster.findings if f.rule == rule]
    assert steps, [(f.rule, f.step) for f in cluster.findings]
    return steps[0]


@pytest.mark.parametrize("sooner", [1, 2])
def test_warn_rules_fire_that_many_rows_sooner_and_stop_rules_do_not(sooner: int):
    rows = kl_jump_rows()
    base = analyze_rows(rows, trainer="grpo", max_steps=200)
    early = analyze_rows(rows, trainer="grpo", max_steps=200, warn_sooner=sooner)
    assert first(base, "kl-warn") == 152  # held 3 rows: 150, 151, 152
    assert first(early, "kl-warn") == 152 - sooner
    assert first(base, "kl-stop") == first(early, "kl-stop") == 152  # the user's last line before a run ends


def test_a_hold_never_drops_under_one_row():
    rows = kl_jump_rows()
    assert first(analyze_rows(rows, trainer="grpo", warn_sooner=WARN_SOONER_MAX), "kl-warn") == 150


def test_what_it_costs_a_two_row_excursion_now_warns():
    """The trade, in one stream: KL crosses the warn line (0.5) for two rows and comes back. The default hold (3 rows)
    reads it as noise; one row sooner, it is a warning."""
    rows = build(lambda i, g: grpo(i, g, kl=0.7 if i in (120, 121) else 0.05), n=200)
    assert not [f for f in analyze_rows(rows, trainer="grpo").findings if f.rule == "kl-warn"]
    assert first(analyze_rows(rows, trainer="grpo", warn_sooner=1), "kl-warn") == 121


@pytest.mark.parametrize("bad", [-1, WARN_SOONER_MAX + 1, 1.5, True, "1", None])
def test_a_bad_value_fails_before_training_and_says_what_to_pass(bad: object):
    with pytest.raises(ValueError, match="warn_sooner must be a whole number of logged rows from 0 to 3"):
        InstrumentCluster(trainer="grpo", warn_sooner=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warn_sooner"):
        RLClusterCallback(alerts=False, warn_sooner=bad)  # type: ignore[arg-type]


def test_numpy_ints_are_rows_too():
    assert InstrumentCluster(trainer="grpo", warn_sooner=np.int64(2)).warn_sooner == 2  # type: ignore[arg-type]


def test_checkpoints_carry_it_and_the_gauge_state_does_not(caplog: pytest.LogCaptureFixture):
    cb = RLClusterCallback(alerts=False, trainer="grpo", warn_sooner=1, grad_every=0)
    args = cb.state()["args"]
    assert args["warn_sooner"] == 1
    again = type(cb)(**json.loads(json.dumps(args)))  # what transformers does on resume
    assert again.warn_sooner == 1 and all(g.warn_sooner == 1 for g in again.cluster.gauges.values())
    assert all("warn_sooner" not in g.state_dict() for g in cb.cluster.gauges.values())
    with caplog.at_level(logging.WARNING, logger="wandb_rlcluster"):
        old = type(cb)(**{**json.loads(json.dumps(args)), "warn_sooner": 9})  # an edited or foreign checkpoint
    assert old.warn_sooner == 0 and "using 0" in caplog.text


def test_rlcluster_analyze_takes_it(tmp_path: Path):
    log = tmp_path / "rows.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in kl_jump_rows()) + "\n")

    def kl_warn(*extra: str) -> int:
        p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", str(log), "--trainer", "grpo",
                            "--format", "json", *extra], capture_output=True, text=True, timeout=120)
        findings = json.loads(p.stdout)["findings"]
        return min(f["step"] for f in findings if f["rule"] == "kl-warn")

    assert kl_warn() == 152
    assert kl_warn("--warn-sooner", "2") == 150
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", str(log), "--warn-sooner", "7"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "invalid choice: 7" in p.stderr and "Traceback" not in p.stderr
