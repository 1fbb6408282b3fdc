"""Property tests: no row, however malformed, makes the core raise."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wandb_rlcluster.core import DIAGNOSIS_ID, GAUGE_IDS, InstrumentCluster
from wandb_rlcluster.core.keys import FAMILIES

pytestmark = pytest.mark.slow  # hypothesis searches

KEYS = [
    "loss", "grad_norm", "learning_rate", "lr", "reward", "reward_std", "frac_reward_zero_std", "kl",
    "objective/kl", "objective/scores", "entropy", "completions/mean_length", "completion_length",
    "completions/clipped_ratio", "completions/min_length", "completions/max_length", "clip_ratio",
    "clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean", "val/ratio", "policy/clipfrac_avg",
    "rewards/margins", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/fn/std",
    "rewards/fn", "eval_loss", "step", "train/global_step", "step_time", "num_tokens", "train_runtime",
    "val/num_eos_tokens", "attention_entropy/mean", "lora/norm_mean", "samples/repetition_rate",
    "efficiency/mem_frac", "efficiency/util", "gradients/nonfinite",
]
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e300, max_value=1e300),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(["NaN", "inf", "-Infinity", "0.5", "abc", "", "1e999"]),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
rows = st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=12)), values, max_size=12)


def _check_summary(cluster: InstrumentCluster) -> None:
    s = cluster.summary()
    assert set(s["gauges"]) == set(GAUGE_IDS)
    assert s["verdict"] in ("ok", "warn", "stop")
    json.dumps(s, allow_nan=False, default=lambda o: None)  # the contract stays valid JSON
    for f in s["findings"]:
        assert f["severity"] in ("info", "warn", "stop")
        assert f["gauge"] in GAUGE_IDS or f["gauge"] == DIAGNOSIS_ID  # cross-gauge diagnoses (issue #10)


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, max_size=60), st.sampled_from([None, *FAMILIES]))
def test_arbitrary_rows_never_raise(batch, family):
    cluster = InstrumentCluster(trainer=family)
    for r in batch:
        cluster.update(r)
    cluster.finalize()
    _check_summary(cluster)
    for v in cluster.derived().values():
        assert math.isfinite(v)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(st.lists(st.fixed_dictionaries({k: st.floats() for k in KEYS[:14]}), min_size=30, max_size=80))
def test_every_key_present_every_row_never_raises(batch):
    cluster = InstrumentCluster()
    for r in batch:
        cluster.update(r)
    cluster.finalize()
    _check_summary(cluster)


@settings(max_examples=30, deadline=None)
@given(st.lists(rows, min_size=1, max_size=40))
def test_state_roundtrip_is_json_and_resumes(batch):
    a = InstrumentCluster(trainer="grpo")
    for r in batch:
        a.update(r)
    state = json.loads(json.dumps(a.state_dict(), default=lambda o: None))
    b = InstrumentCluster(trainer="grpo")
    b.load_state_dict(state)
    b.update({"loss": 0.1, "reward": 0.5, "step": 10**6})
    _check_summary(b)


@settings(max_examples=80, deadline=None)
@given(st.lists(rows, max_size=40), st.sampled_from([None, *FAMILIES]))
def test_alert_engine_on_arbitrary_rows_never_raises(batch, family):
    """The shipped alert rules evaluate any row (missing keys, NaN, strings, huge values) without raising."""
    from wandb_rlcluster.alerts import AlertEngine, load_config

    engine = AlertEngine(load_config(), clock=None)
    cluster = InstrumentCluster(trainer=family, detect_rows=1)
    for r in batch:
        fired = cluster.update(r)
        for e in engine.evaluate(cluster.last_step, r, cluster, fired, cluster.last_updated):
            assert e.kind in ("firing", "resolved") and e.severity in ("info", "warn", "stop")
            json.dumps(e.to_dict(), default=str)
