"""Rule semantics, promtool-style: a series in, the exact alert events out.

for / keep_firing_for / cooldown / inhibition / resolution / trainer filters / missing
metrics, each on a small synthetic stream fed through the real cluster and engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wandb_rlcluster.alerts import AlertEngine, load_config
from wandb_rlcluster.core import InstrumentCluster


class Clock:
    """Deterministic wall clock for cooldowns: one logged row per `dt` seconds."""

    def __init__(self, dt: float = 60.0) -> None:
        self.t = 0.0
        self.dt = dt

    def __call__(self) -> float:
        return self.t


def run_rules(tmp_path: Path, yaml_text: str, rows: list[dict], trainer: str = "grpo", dt: float = 60.0):
    f = tmp_path / "rules.yaml"
    f.write_text("extends: none\n" + yaml_text)
    cfg = load_config(f)
    clock = Clock(dt)
    engine = AlertEngine(cfg, clock=clock)
    cluster = InstrumentCluster(trainer=trainer, params=cfg.gauge_params)
    events = []
    for r in rows:
        fired = cluster.update(r)
        events += engine.evaluate(r["step"], r, cluster, fired, cluster.last_updated)
        clock.t += clock.dt
    return [(e.kind, e.rule, e.step, e.notify, e.suppressed) for e in events], engine


def series(key: str, values: list[float], **extra: float) -> list[dict]:
    return [{"step": i + 1, key: v, **extra} for i, v in enumerate(values)]


KL_RULE = """rules:
  - name: kl-warn
    gauge: kl
    when: "kl > 0.5"
    for: 3
    keep_firing_for: {keep}
    severity: warn
    cooldown: {cooldown}
"""


def test_for_needs_consecutive_evaluations(tmp_path):
    rows = series("kl", [0.6, 0.6, 0.1, 0.6, 0.6, 0.6, 0.6])
    ev, _ = run_rules(tmp_path, KL_RULE.format(keep=0, cooldown="0"), rows)
    assert ev == [("firing", "kl-warn", 6, True, None)]  # 1-2 then a break: pending is reset


def test_resolution_and_keep_firing_for(tmp_path):
    rows = series("kl", [0.6, 0.6, 0.6, 0.1, 0.6, 0.1, 0.1, 0.1])
    ev, _ = run_rules(tmp_path, KL_RULE.format(keep=0, cooldown="0"), rows)
    assert ev == [("firing", "kl-warn", 3, True, None), ("resolved", "kl-warn", 4, False, None)]
    ev, _ = run_rules(tmp_path, KL_RULE.format(keep=2, cooldown="0"), rows)
    # one calm row (4) is within keep_firing_for; three calm rows (6, 7, 8) resolve it at the third
    assert ev == [("firing", "kl-warn", 3, True, None), ("resolved", "kl-warn", 8, False, None)]


def test_cooldown_suppresses_repeat_notifications_not_the_journal(tmp_path):
    flap = [0.6, 0.6, 0.6, 0.1] * 4  # fires at 3, 7, 11, 15 (one row = 60 s)
    ev, _ = run_rules(tmp_path, KL_RULE.format(keep=0, cooldown="10m"), series("kl", flap))
    fired = [(s, n, why) for kind, _, s, n, why in ev if kind == "firing"]
    assert fired == [(3, True, None), (7, False, "cooldown"), (11, False, "cooldown"), (15, True, None)]


def test_stop_inhibits_its_own_warn(tmp_path):
    text = KL_RULE.format(keep=0, cooldown="0") + """  - name: kl-stop
    gauge: kl
    when: "kl > 1.0"
    for: 1
    severity: stop
  - name: length-warn
    gauge: length
    when: "completions/mean_length > 10"
    severity: warn
"""
    rows = series("kl", [2.0, 2.0, 2.0, 2.0], **{"completions/mean_length": 50.0})
    ev, engine = run_rules(tmp_path, text, rows)
    assert ("firing", "kl-stop", 1, True, None) in ev
    assert ("firing", "kl-warn", 3, False, "inhibited by kl-stop") in ev
    assert ("firing", "length-warn", 1, True, None) in ev  # another gauge's warning is not silenced
    assert engine.states()["kl-warn"] == 2  # still firing (and charted), only not notified


def test_explicit_inhibits(tmp_path):
    text = """rules:
  - name: truncation
    gauge: length
    when: "completions/clipped_ratio > 0.5"
    severity: warn
    inhibits: [long]
  - name: long
    gauge: length
    when: "completions/mean_length > 100"
    severity: warn
"""
    rows = series("completions/mean_length", [200.0, 200.0], **{"completions/clipped_ratio": 0.9})
    ev, _ = run_rules(tmp_path, text, rows)
    assert ev == [("firing", "truncation", 1, True, None), ("firing", "long", 1, False, "inhibited by truncation")]


def test_missing_metric_never_fires_and_sparse_keys_keep_their_count(tmp_path):
    text = KL_RULE.format(keep=0, cooldown="0")
    ev, _ = run_rules(tmp_path, text, series("reward", [1.0] * 10))  # GRPO beta = 0: no kl at all
    assert ev == []
    rows = []
    for i in range(1, 9):  # kl only on every other row, as with 2 optimizer updates per generation
        rows.append({"step": i, "reward": 0.5, **({"kl": 0.7} if i % 2 else {})})
    ev, _ = run_rules(tmp_path, text, rows)
    assert ev == [("firing", "kl-warn", 5, True, None)]  # rows 1, 3, 5: three evaluations, no resets between


def test_trainer_filter(tmp_path):
    text = """rules:
  - name: ppo-only
    gauge: kl
    trainers: [ppo]
    when: "objective/kl > 1"
    severity: warn
  - name: grpo-only
    gauge: kl
    trainers: [rloo]
    when: "kl > 1"
    severity: warn
"""
    ev, _ = run_rules(tmp_path, text, series("kl", [5.0]), trainer="grpo")
    assert ev == [("firing", "grpo-only", 1, True, None)]  # rloo is the grpo family
    ev, _ = run_rules(tmp_path, text, series("objective/kl", [5.0], **{"objective/scores": 0.1}), trainer="ppo")
    assert ev == [("firing", "ppo-only", 1, True, None)]


def test_finding_rules_forward_core_findings_with_min_severity(tmp_path):
    text = """rules:
  - name: grad-stop
    gauge: gradients
    finding: "*"
    min_severity: stop
    severity: stop
  - name: grad-warn
    gauge: gradients
    finding: "grad-nonfinite-repeated|grad-explosion"
    severity: warn
"""
    rows = series("grad_norm", [0.5] * 5 + [float("nan")] * 4, loss=1.0)
    ev, _ = run_rules(tmp_path, text, rows, trainer="sft")
    # one NaN is info (a skipped loss-scale step); the second warns and the warn rule forwards it
    assert ("firing", "grad-warn", 7, True, None) in ev
    assert ("firing", "grad-stop", 8, True, None) in ev  # three NaNs: the core's stop finding


def test_templates_render_safely(tmp_path):
    text = """rules:
  - name: t
    gauge: kl
    when: "kl > 0.5"
    severity: warn
    title: "KL {value:.2f} at step {step} in {run_name} ({gauge}/{rule}) {message}"
"""
    f = tmp_path / "t.yaml"
    f.write_text("extends: none\n" + text)
    engine = AlertEngine(load_config(f), run_name="my-run", clock=None)
    cluster = InstrumentCluster(trainer="grpo")
    row = {"step": 7, "kl": 0.73}
    cluster.update(row)
    (e,) = engine.evaluate(7, row, cluster, [], None)
    assert e.title == "KL 0.73 at step 7 in my-run (kl/t) kl > 0.5 (value 0.73)"


@pytest.mark.parametrize("expr", ["rlcluster/length/vs_baseline > 1.5", "abs(kl - 1) < 0.2 or not (kl < 5)"])
def test_derived_values_and_functions(tmp_path, expr):
    text = f'rules:\n  - name: d\n    gauge: length\n    when: "{expr}"\n    severity: info\n'
    rows = [{"step": i, "kl": 1.0, "completions/mean_length": 100.0 if i <= 12 else 300.0} for i in range(1, 30)]
    ev, _ = run_rules(tmp_path, text, rows)
    assert ev and ev[0][0] == "firing"
