"""Every derived value a gauge emits is declared in its static ``outputs``.

Alert-rule validation (``alerts.config.known_metrics``) reads the declarations instead of running the
core, so a derived key missing from ``outputs`` would make a valid rule on ``rlcluster/<gauge>/<key>``
warn "not one rlcluster knows". The corpus and one stream of live-probe rows exercise every gauge.
"""

from __future__ import annotations

import math

import pytest

from wandb_rlcluster.alerts.config import known_metrics
from wandb_rlcluster.core import GAUGE_CLASSES, REPORTING_CLASSES, InstrumentCluster, analyze_rows
from wandb_rlcluster.core.keys import LIVE_INPUT_KEYS, TRL_LOGGED_KEYS, is_reward_function_key

from synthetic import combinations, generate_run

pytestmark = pytest.mark.slow  # its fixture runs every gauge over generated runs

TRAINER = {"grpo": "grpo", "grpo_kl": "grpo", "dpo": "dpo", "ppo": "ppo", "sft": "sft"}


def _emitted() -> dict[str, set[str]]:
    """gauge id -> every derived key it wrote over the corpus (derived keys are never removed, so the
    end-of-run dict holds the union)."""
    seen: dict[str, set[str]] = {g.id: set() for g in REPORTING_CLASSES}
    for seed in (0, 1):
        for fam, path in combinations():
            run = generate_run(fam, path, seed=seed, n_steps=150, with_eval=fam in ("sft", "dpo"))
            cluster = analyze_rows(run.rows, trainer=TRAINER[fam], max_steps=150)
            for gid, g in cluster.gauges.items():
                seen[gid].update(g.derived)
    # live probes: every live input key on a GRPO stream
    live = InstrumentCluster(trainer="grpo")
    for step in range(1, 40):
        row: dict[str, float] = {"step": step, "loss": 0.01, "grad_norm": 0.3, "learning_rate": 1e-6}
        row.update({f"rlcluster/{k}": 0.5 + 0.01 * step for k in LIVE_INPUT_KEYS})
        live.update(row)
    for gid, g in live.gauges.items():
        seen[gid].update(g.derived)
    return seen


@pytest.fixture(scope="module")
def emitted() -> dict[str, set[str]]:
    return _emitted()


@pytest.mark.parametrize("gauge", REPORTING_CLASSES, ids=lambda g: g.id)
def test_every_emitted_key_is_declared(gauge: type, emitted: dict[str, set[str]]) -> None:
    undeclared = emitted[gauge.id] - set(gauge.outputs)
    assert not undeclared, f"{gauge.__name__} emits {sorted(undeclared)}: add them to its `outputs`"


def test_declarations_are_plain_and_exercised(emitted: dict[str, set[str]]) -> None:
    for g in GAUGE_CLASSES:
        assert len(set(g.outputs)) == len(g.outputs), g.id
        assert all(k and "/" not in k and k.strip() == k for k in g.outputs), g.id
    # the corpus is not a token exercise: most of what is declared is actually produced
    declared = sum(len(g.outputs) for g in GAUGE_CLASSES)
    produced = sum(len(emitted[g.id] & set(g.outputs)) for g in GAUGE_CLASSES)
    assert produced >= 0.8 * declared, (produced, declared)


def test_known_metrics_is_static_and_complete(emitted: dict[str, set[str]]) -> None:
    known = known_metrics()
    for gid, keys in emitted.items():
        for k in keys:
            assert f"rlcluster/{gid}/{k}" in known
        assert f"rlcluster/{gid}/status" in known
    assert known >= LIVE_INPUT_KEYS and known >= TRL_LOGGED_KEYS
    assert "loss" in known and "objective/kl" in known and "kl" in known


def test_trl_keys_cover_what_the_corpus_logs() -> None:
    """Every key the generator writes (it mimics TRL 1.16's log_history) is one validation knows."""
    for fam, _ in combinations():
        run = generate_run(fam, None, seed=0, n_steps=60, with_eval=fam in ("sft", "dpo"))
        for r in run.rows:
            for k, v in r.items():
                if k == "step" or (isinstance(v, float) and math.isnan(v)):
                    continue
                assert k in TRL_LOGGED_KEYS or is_reward_function_key(k), (fam, k)
