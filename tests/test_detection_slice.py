"""A slice of the detection benchmark (benchmarks/detection) as a CI gate: a change that costs recall,
adds false alarms or slows detection fails here, not in a README table nobody re-runs.

Held-out seeds only (the core's defaults were tuned on seeds 0-29); 8 seeds x every (family,
pathology) pair plus 2 healthy runs per family and seed: 360 runs, a few seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "detection"
sys.path.insert(0, str(BENCH))

import bench  # noqa: E402
from seed_rules import seed_findings  # noqa: E402

SLICE_SEEDS = range(100, 108)
DELAY_SLACK = 0.0
"""The core may not detect later than the seed rules (paired median delay; on this slice 0.089 vs 0.098)."""


@pytest.fixture(scope="module")
def results() -> list[bench.Result]:
    return [bench.score_spec(s) for s in bench.make_specs(SLICE_SEEDS, "held-out")]


@pytest.fixture(scope="module")
def core(results: list[bench.Result]) -> bench.Scores:
    return bench.aggregate(results, "core")


def test_slice_covers_every_combination(results: list[bench.Result]) -> None:
    from synthetic import combinations

    assert {(r.spec.family, r.spec.pathology) for r in results} == set(combinations())
    assert {r.spec.logging_steps for r in results} == {1, 5, 10}


def test_recall(core: bench.Scores, results: list[bench.Result]) -> None:
    missed = [(r.spec.family, r.spec.pathology, r.spec.gen_seed) for r in results
              if r.spec.pathology and r.outcomes["core"].first_match is None]
    assert core.recall >= bench.TARGETS["recall"], missed


def test_no_false_stops_on_healthy_runs(core: bench.Scores, results: list[bench.Result]) -> None:
    stops = [(r.spec.family, r.spec.gen_seed, r.outcomes["core"].alarms) for r in results
             if r.spec.pathology is None and r.outcomes["core"].any_stop]
    assert core.false_stops == 0, stops


def test_few_early_fires(core: bench.Scores) -> None:
    assert core.early_rate <= bench.TARGETS["early"]


def test_few_healthy_runs_with_any_finding(core: bench.Scores, results: list[bench.Result]) -> None:
    noisy = [(r.spec.family, r.spec.gen_seed, r.outcomes["core"].alarms) for r in results
             if r.spec.pathology is None and r.outcomes["core"].any_alarm]
    assert core.healthy_any_rate <= bench.TARGETS["healthy_any"], noisy


def test_delay_close_to_single_point_rules(results: list[bench.Result]) -> None:
    pair = bench.paired(results)
    assert pair.n >= 150  # enough runs that both detect cleanly for the medians to mean something
    assert pair.median("core") <= pair.median("seed") + DELAY_SLACK


def test_seed_rules_fire_as_the_post_states() -> None:
    """The anchor itself: single-point, KL 0.5/1.0 on every trainer, GRPO-only Part III rules."""
    rows = [{"step": i, "loss": 0.1, "kl": k, "entropy": 1.5} for i, k in enumerate([0.1, 0.6, 1.2, 0.1], 1)]
    got = [(f.rule, f.step) for f in seed_findings(rows, "grpo") if f.severity != "info"]
    assert got == [("kl-warn", 2), ("kl-stop", 3), ("kl-warn", 3)]
    ppo = [{"step": i, "loss": 0.1, "objective/kl": 3.0, "val/ratio": 1.0, "policy/clipfrac_avg": 0.1}
           for i in range(1, 4)]
    assert {f.rule for f in seed_findings(ppo, "ppo")} == {"kl-warn", "kl-stop"}  # per-sequence KL: the trap
    sft = [{"step": i, "loss": 1.0, "entropy": 0.5, "grad_norm": 1.0} for i in range(1, 30)]
    assert not [f for f in seed_findings(sft, "sft") if f.severity != "info"]  # entropy < 1.0 is GRPO's rule
