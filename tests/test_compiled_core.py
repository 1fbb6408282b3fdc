"""What the compiled core (``make test-compiled``) must take as the pure one does: numpy's integers for steps, whole
floats for counts, and checkpoints from another version. Each test holds on both builds; the pure run and the
compiled run of the suite check one each."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from wandb_rlcluster.core import InstrumentCluster, analyze_rows
from wandb_rlcluster.core.build import core_build
from wandb_rlcluster.core.gauge import check_param
from wandb_rlcluster.core.loss import LossGauge
from wandb_rlcluster.pipeline import Pipeline

from synthetic import generate_run


def _stop_step(steps_as: type) -> int | None:
    run = generate_run("grpo_kl", "kl_runaway", n_steps=300, seed=0, onset=0.5)
    pipe = Pipeline(use_wandb=False, trainer="grpo", max_steps=run.n_steps, notify=False)
    for row in run.rows:
        decision = pipe.feed(row, steps_as(row["step"]))
        if decision.stop:
            return int(decision.step)
    return None


def test_a_loop_logging_numpy_steps_is_stopped_where_an_int_step_is():
    """``watch()`` passes the loop's own step, numpy's integer where the loop counts in numpy; the stop must land."""
    at = _stop_step(int)
    assert at is not None, "the KL runaway should be stopped"
    assert _stop_step(np.int64) == at


def test_a_whole_float_count_is_a_count_and_a_fraction_is_refused():
    value, why = check_param(LossGauge, "window", 20.0)
    assert why is None and value == 20 and type(value) is int
    value, why = check_param(LossGauge, "window", 20.5)
    assert value is None and why is not None and "whole number" in why and "window" in why
    run = generate_run("sft", None, n_steps=120, seed=1)
    c = analyze_rows(run.rows, trainer="sft", params={"loss": {"window": 20.0}})  # YAML/JSON give 20.0
    assert c.rows == len(run.rows)


def test_a_checkpoint_key_this_version_lacks_is_skipped_and_the_rest_restored():
    run = generate_run("grpo_kl", None, n_steps=80, seed=2)
    whole = InstrumentCluster(trainer="grpo")
    for r in run.rows:
        whole.update(r)
    state = whole.state_dict()
    state["gauges"]["kl"]["a_field_from_another_version"] = 3
    resumed = InstrumentCluster(trainer="grpo")
    resumed.load_state_dict(state)  # compiled: a class takes no new attribute, and the load must not fail on it
    after = resumed.state_dict()
    after["gauges"]["kl"].pop("a_field_from_another_version", None)  # the pure core keeps it, unread
    # as JSON: NaN equals NaN only as the same object, which the pure core keeps and the compiled one re-boxes
    assert json.dumps(after, sort_keys=True) == json.dumps(whole.state_dict(), sort_keys=True)


def test_the_version_says_which_core_runs():
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "--version"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and f"(core: {core_build()})" in p.stdout, (p.stdout, p.stderr)
    assert core_build() in ("compiled", "pure Python")


@pytest.mark.parametrize("steps", [np.int64(500), 500.0, True, None, "500", float("nan"), -3])
def test_a_planned_length_of_any_type_is_read_or_unknown(steps):
    c = InstrumentCluster(trainer="grpo", max_steps=steps)
    expected = 500 if steps in (500, 500.0) and not isinstance(steps, bool) else 0
    assert c.max_steps == expected and type(c.max_steps) is int
