"""A slice of the detection benchmark (benchmarks/detection) as a CI gate: a change that costs recall on
the trend and spread pathologies, adds false alarms on healthy runs or slows detection fails here, not in a
README table nobody re-runs.

Seeds outside the tuning set: the first seeds of round 1's held-out set (1000-1004; seen since round 2 was tuned
after their verdict), every (family, pathology) pair plus the healthy runs and the benign sharpening GRPO runs,
scored by our core alone (the anchors are the benchmark's business).

Three of the issue's targets are still not met on round 4's held-out seeds 4000-4049 (benchmarks/detection/RESULTS.md:
trend/spread recall 93 % for >= 95 %, healthy runs with any warn/stop 5.06 % (43 of 850) for <= 5 %, median delay 0.28
for <= 0.25). On this slice (after round 5's shorter oscillation warm-up in short runs) recall is 95.1 % (195 of 205),
healthy 3.5 % and delay 0.237: all four targets are met on the slice and asserted as such, which says nothing of the
held-out seeds; the held-out verdict is asserted as the regression floor.
"""

from __future__ import annotations

import pytest

from bench import (
    CLIP_MARK,
    SLICE_SEEDS,
    TARGETS,
    Result,
    aggregate,
    healthy_runs,
    make_specs,
    run_corpus,
    score_real_benign,
    target_runs,
)
from real_logs import absent, real_log
from seed_rules import seed_findings
from synthetic import combinations

pytestmark = pytest.mark.slow  # scores a corpus of generated runs (minutes)


@pytest.fixture(scope="module")
def results() -> list[Result]:
    return run_corpus(make_specs(SLICE_SEEDS, "held-out"), workers=2, progress=False, detectors=("core",))


def _missed(rs: list[Result]) -> list[tuple[str, str | None, int]]:
    return [(r.spec.family, r.spec.pathology, r.spec.gen_seed) for r in rs if r.outcomes["core"].first_match is None]


def test_slice_covers_every_combination(results: list[Result]) -> None:
    assert {(r.spec.family, r.spec.pathology) for r in results} == set(combinations())
    assert {r.spec.logging_steps for r in results} == {1, 5, 10}
    assert {r.spec.block for r in results} == {"corpus", "benign"}
    assert len(target_runs(results)) >= 200
    assert all(set(r.outcomes) == {"core"} for r in results)


HELD_OUT = {"recall": 0.93, "healthy_any": 0.06}
"""Round 4's held-out verdict (seeds 4000-4049, RESULTS.md): the floor a change may not fall below."""


def _noisy(results: list[Result]) -> list[tuple[str, str, int, tuple[str, ...]]]:
    return [(r.spec.family, r.spec.block, r.spec.gen_seed, r.outcomes["core"].alarms) for r in healthy_runs(results)
            if r.outcomes["core"].any_alarm]


def test_recall_on_trend_and_spread_pathologies_holds_the_verdict(results: list[Result]) -> None:
    rs = target_runs(results)
    assert aggregate(rs, "core").recall >= HELD_OUT["recall"], _missed(rs)


@pytest.mark.xfail(strict=True, reason=(
    "met on this slice by one run until round 6 (195 of 205, 95.1 %); round 6's calibration under twelve noise models "
    "made loss-shift-up, margin-shrinking and clip-growing read their noise's autocorrelation, and a length spread "
    "that collapses beside a rising entropy became a fixed format (info): 192 of 205 (93.7 %), above the held-out "
    "floor the test above asserts. Fewer false alarms under autocorrelated noise, bought with 3 slice runs"))
def test_recall_on_trend_and_spread_pathologies_meets_the_issue_target_on_the_slice(results: list[Result]) -> None:
    """Met on this slice until round 6 (195 of 205, 95.1 %, by one run); the full held-out set gives 93.1 %."""
    rs = target_runs(results)
    assert aggregate(rs, "core").recall >= TARGETS["recall"], _missed(rs)


def test_healthy_runs_stay_quiet_as_in_the_verdict(results: list[Result]) -> None:
    h = aggregate(healthy_runs(results), "core")
    assert h.healthy_any_rate <= HELD_OUT["healthy_any"], _noisy(results)
    assert h.healthy_stop == 0, _noisy(results)


def test_healthy_runs_meet_the_issue_target_on_the_slice(results: list[Result]) -> None:
    """Met on this slice (3 of 85 runs); the full held-out set gives 5.06 % (43 of 850, RESULTS.md)."""
    assert aggregate(healthy_runs(results), "core").healthy_any_rate <= TARGETS["healthy_any"], _noisy(results)


def test_delay_on_trend_and_spread_pathologies(results: list[Result]) -> None:
    """Met on this slice (0.236); the full held-out set gives 0.28 (RESULTS.md)."""
    assert aggregate(target_runs(results), "core").median_delay <= TARGETS["delay"]


def test_growing_clip_fraction_caught_before_30_percent(results: list[Result]) -> None:
    clip = [r for r in results if r.spec.pathology == "clip_growing"]
    assert all(CLIP_MARK in r.marks for r in clip)
    s = aggregate(clip, "core")
    assert s.clip_runs == len(clip) and s.clip_early_rate >= TARGETS["clip_early"], [
        (r.spec.family, r.outcomes["core"].first_match, r.marks[CLIP_MARK]) for r in clip]


def test_real_benign_grpo_runs_stay_quiet() -> None:
    """A real benign GRPO run (Qwen2.5-1.5B, verifier reward, a hidden-test oracle rising with it: the policy
    sharpens, entropy ~1.0 -> ~0.45) raises no warn/stop. The rules before #10 warned on it (entropy-collapse)."""
    reason = absent(real_log("fixtures"))
    if reason:
        pytest.skip(reason)
    benign = score_real_benign(detectors=("core",))
    assert benign and all(b.rows >= 100 for b in benign)
    assert {b.name: b.alarms["core"] for b in benign if b.alarms["core"]} == {}


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


def test_the_frontier_moves_every_warn_hold_and_puts_it_back(tmp_path):
    """frontier.py: warn_sooner=1 (one row off every warn hold) warns sooner and more often (on these seeds recall,
    false alarms and early fires do not fall, and more healthy runs are warned; in general a rule firing before
    onset can cost a detection after it); the shipped row is the benchmark's own numbers; the dial and the
    detectors are put back afterwards."""
    import frontier

    import bench

    out = tmp_path / "frontier.md"
    assert frontier.main(["--seeds", "1000-1001", "--shifts", "0", "1", "--z", "3", "--z-holds", "1", "3",
                          "--workers", "2", "--out", str(out), "--no-progress"]) == 0
    assert bench.WARN_SOONER == 0 and not [d for d in bench.DETECTOR_FNS if d.startswith("z3h")]
    rows = [line.split(" | ") for line in out.read_text().splitlines() if line.startswith("| ours")
            or line.startswith("| z-score")]
    assert [r[0] for r in rows] == ["| ours (as shipped)", "| z-score > 3, held 1 row", "| z-score > 3, held 3 rows",
                                    "| ours, warn_sooner=1 (every warn hold 1 row shorter)"]
    pct = [[float(c.strip(" |%")) for c in (r[1], r[2], r[5])] for r in rows]
    shipped, shorter = pct[0], pct[3]
    assert all(b >= a for a, b in zip(shipped, shorter, strict=True)), (shipped, shorter)
    assert shorter[1] > shipped[1], (shipped, shorter)  # and it did move: more healthy runs warned
    assert pct[2][1] <= pct[1][1]  # a z-score held 3 rows warns fewer healthy runs than one that is not held
    results = run_corpus(make_specs(range(1000, 1002), "tuning"), workers=2, progress=False, detectors=("core",))
    t = aggregate(target_runs(results), "core")
    assert f"{t.recall:.1%}" == rows[0][1]
