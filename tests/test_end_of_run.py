"""The end of a stream: a warning that was building when the log (or training) ended is reported then, as ``info``
with how much of its hold it had seen (a test that has not decided raises no warning, issue #28); one that had barely
started is not. The live callback sends these end-of-training findings through the alert rules (a rule with
``min_severity: info`` takes them) to the journal, like any row's.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from wandb_rlcluster import RLClusterCallback
from wandb_rlcluster.alerts import AlertEngine, load_config
from wandb_rlcluster.core import InstrumentCluster, analyze_rows
from wandb_rlcluster.core.gauge import BUILDING_SHARE

from .test_early_warning import ONSET, N, build, grpo, ppo, ramp


def ratio_var_rows(n: int) -> list[dict[str, float]]:
    """A PPO log whose ratio variance jumps at ``ONSET`` (``ratio-variance``, a warn rule held several rows)."""
    return build(lambda i, g: ppo(i, g, ratio_var=0.001 + 0.03 * ramp(i, span=30)), n=n)


def first_fire(rule: str) -> int:
    cluster = analyze_rows(ratio_var_rows(N), trainer="ppo")
    steps = [f.step for f in cluster.findings if f.rule == rule and f.severity == "warn"]
    assert steps, f"{rule} never fires on the full stream"
    return steps[0]


def test_a_warning_one_row_short_of_its_hold_is_reported_as_info_when_the_log_ends():
    fire = first_fire("ratio-variance")
    assert fire > ONSET
    cut = analyze_rows(ratio_var_rows(fire - 1), trainer="ppo")  # the log ends one row before the rule fires
    ends = [f for f in cut.findings if f.rule == "ratio-variance"]
    assert len(ends) == 1, [(f.rule, f.step) for f in cut.findings]
    f = ends[0]
    assert (f.severity, f.gauge, f.step) == ("info", "policy_ratio", fire - 1)
    m = re.match(r"building: (\d+) of (\d+) rows when the log ended", f.message)
    assert m and int(m.group(1)) == int(m.group(2)) - 1, f.message  # one row short
    assert "ratio" in f.message  # the rule's own text follows
    # the test had not decided: no warning, the gauge's status and the log's verdict say so
    assert cut.gauges["policy_ratio"].summary()["status"] == "ok"
    assert not [x for x in cut.findings if x.gauge == "policy_ratio" and x.severity != "info"]


def test_a_warning_that_had_barely_started_is_not_reported():
    fire = first_fire("ratio-variance")
    # the first row where it is active: one row of a hold of several is far under BUILDING_SHARE
    rows = ratio_var_rows(N)
    for n in range(ONSET, fire):
        cluster = InstrumentCluster(trainer="ppo")
        for r in rows[:n]:
            cluster.update(r)
        st = cluster.gauges["policy_ratio"]._rules.get("ratio-variance")
        if st and st.held == 1:
            need = cluster.gauges["policy_ratio"]._building["ratio-variance"][0]
            assert BUILDING_SHARE * need > 1
            assert not [f for f in cluster.finalize() if f.rule == "ratio-variance"]
            return
    raise AssertionError("ratio-variance was never active for exactly one row before it fired")


def zero_std_end(quiet_rows: int) -> tuple[list[str], int]:
    """A GRPO run planned for 1,200 steps (a long run: ``zero-std-high`` holds 10 rows, k of n), 600 logged, whose
    zero-std share is high on 9 rows that end ``quiet_rows`` rows before the log does: (the end-of-log reports, the
    rule's count at the end). The reward ends near 0.2, so the level reads the uniform groups as failed prompts
    (issue #28: at 0.4 the rule would wait for the share's smoothed level to pass twice the reward)."""
    rows = build(lambda i, g: grpo(i, g, reward=0.3 - 0.1 * i / 600,
                                   zero_std=0.85 if 600 - quiet_rows - 9 < i <= 600 - quiet_rows else 0.1), n=600)
    cluster = InstrumentCluster(trainer="grpo", max_steps=1200)
    for r in rows:
        cluster.update(r)
    assert not [f for f in cluster.findings if f.rule == "zero-std-high"]  # it never fires while the run goes
    count = cluster.gauges["reward_signal"]._rules["zero-std-high"].held
    return [f.message for f in cluster.finalize() if f.rule == "zero-std-high"], count


def test_only_a_warning_active_on_the_last_row_is_reported():
    ends, _ = zero_std_end(0)
    m = re.match(r"building: (\d+) of 10 rows when the log ended", ends[0] if ends else "")
    assert len(ends) == 1 and m and 6 <= int(m.group(1)) < 10, ends
    # quiet for the last rows (the share's smoothed level back under its line): the k-of-n count is still past
    # 60 % of the hold, but the condition has cleared
    for quiet in (2, 3):
        ends, count = zero_std_end(quiet)
        assert ends == [] and count >= 6, (quiet, ends, count)


def test_a_healthy_log_reports_nothing_at_its_end():
    cluster = analyze_rows(build(lambda i, g: ppo(i, g)), trainer="ppo")
    assert [f for f in cluster.findings if f.severity != "info"] == []


def test_the_building_state_is_not_checkpointed_and_a_resumed_run_reports_alike():
    rows = ratio_var_rows(first_fire("ratio-variance") - 1)
    a = InstrumentCluster(trainer="ppo")
    for r in rows[:-1]:
        a.update(r)
    state = json.loads(json.dumps(a.state_dict()))  # what a checkpoint holds: JSON, no message callables
    assert all("_building" not in g for g in state["gauges"].values())
    b = InstrumentCluster(trainer="ppo")
    b.load_state_dict(state)
    b.update(rows[-1])
    a.update(rows[-1])
    assert [f.rule for f in a.finalize()] == [f.rule for f in b.finalize()] == ["ratio-variance"]


def test_end_of_training_findings_fire_finding_rules_only(tmp_path: Path):
    f = tmp_path / "rules.yaml"
    f.write_text("extends: none\nrules:\n"
                 "  - name: ratio\n    gauge: policy_ratio\n    finding: '*'\n    for: 3\n    severity: warn\n"
                 "    min_severity: info\n"
                 "  - name: ratio-warn-only\n    gauge: policy_ratio\n    finding: '*'\n    severity: warn\n"
                 "  - name: kl-line\n    gauge: kl\n    when: 'objective/kl > 4'\n    for: 2\n    severity: warn\n")
    engine = AlertEngine(load_config(f), clock=None)
    cluster = InstrumentCluster(trainer="ppo")
    events = []
    for r in ratio_var_rows(first_fire("ratio-variance") - 1):
        events += engine.evaluate(int(r["step"]), r, cluster, cluster.update(r), cluster.last_updated)
    assert [e for e in events if e.rule == "ratio"] == []
    kl_count = engine.state["kl-line"].held
    final = cluster.finalize()
    end = engine.evaluate(N, {}, cluster, final, {x.gauge for x in final}, findings_only=True)
    # at the end, whatever its for: 3, through the rule that takes info findings; not through the default rule
    assert [(e.kind, e.rule) for e in end] == [("firing", "ratio")]
    assert "when the log ended" in end[0].text or "ratio-variance" in end[0].title
    assert engine.state["kl-line"].held == kl_count  # the last row is not counted twice by a metric rule


INFO_RULES = """
rules:
  - name: ratio-building
    gauge: policy_ratio
    finding: ratio-variance
    severity: warn
    min_severity: info
"""


def _callback_end(tmp_path: Path, alerts: Path | None) -> list[dict[str, object]]:
    """Replay the ratio-variance log one row short of the rule's hold through the callback; the journal's firing
    alerts about the ratio at the end of training."""
    rows = ratio_var_rows(first_fire("ratio-variance") - 1)
    out = tmp_path / "out"
    args = TrainingArguments(output_dir=str(out), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    state.max_steps = len(rows)
    cb = RLClusterCallback(trainer="ppo", log_to_wandb=False, stall_alert=False, crash_alert=False,
                           guardian=False, grad_every=0, attention_every=0, lora_every=0, sample_every=0,
                           alerts=str(alerts) if alerts else None)
    cb.on_train_begin(args, state, control)
    for r in rows:
        state.global_step = int(r["step"])
        cb.on_log(args, state, control, logs={k: v for k, v in r.items() if k != "step"})
    assert not [e for e in cb.alert_events if "ratio" in e.title.lower()]
    cb.on_train_end(args, state, control)
    journal_file = out / "alerts.jsonl"
    journal = [json.loads(x) for x in journal_file.read_text().splitlines()] if journal_file.exists() else []
    ends = [j for j in journal if j.get("type") == "alert" and j.get("kind") == "firing"
            and "ratio" in (str(j.get("title", "")) + str(j.get("text", "")) + str(j.get("rule", "")))]
    assert all(j["step"] == len(rows) for j in ends)
    return ends


def test_the_callback_raises_no_alert_for_a_test_still_building(tmp_path: Path):
    """With the shipped alert rules (warn and worse), a rule one row short of its hold when training ends is no
    alert: its test has not decided."""
    assert _callback_end(tmp_path, None) == []


def test_the_callback_journals_an_end_of_training_building_report_through_an_info_rule(tmp_path: Path):
    """A rule that takes info findings turns the end-of-training report into an alert, journaled at the last step
    with the rule's value."""
    rules = tmp_path / "alerts.yaml"
    rules.write_text(INFO_RULES)
    ends = _callback_end(tmp_path, rules)
    assert len(ends) == 1, ends
    assert math.isfinite(float(ends[0]["value"]))  # type: ignore[arg-type]


END_RULES = """
watchdog: {stall_alert: false, crash_alert: false, guardian: false}
rules:
  - name: cut-off-answers
    gauge: length
    finding: truncation
    severity: warn
    min_severity: info
    for: 2
"""


@pytest.mark.trains
def test_a_real_grpo_run_ends_with_a_building_warning_in_the_journal_and_the_wandb_alert_series(tmp_path: Path):
    """A real tiny TRL GRPO run (W&B offline): its random model almost never emits EOS, so nearly every completion
    hits max_completion_length on every row. The truncation rule is held 30 rows (12 in a 10-row run), longer than
    the run: it never fires while training goes, and at the end it had built up 10 of 12. The end of training
    reports it through the alert rule (whatever its for: 2) to the journal and to W&B's alert-state series."""
    from wandb_rlcluster.readers.wandb import read_offline_run

    from .test_callback_trl import run_trainer

    rules = tmp_path / "alerts.yaml"
    rules.write_text(END_RULES)
    steps = 10
    res = run_trainer(tmp_path, "grpo", "--max-steps", str(steps), "--every", "1000", "--alerts", str(rules),
                      "--params", json.dumps({"length": {"truncation_for": 30}}), "--attach", "{}",
                      "--overrides", json.dumps({"log_completions": True}))
    journal = [json.loads(x) for x in (Path(res["output_dir"]) / "alerts.jsonl").read_text().splitlines()]
    fired = [j for j in journal if j.get("type") == "alert" and j.get("kind") == "firing"
             and j.get("rule") == "cut-off-answers"]
    assert len(fired) == 1, journal
    assert fired[0]["step"] == steps  # not while training went: at its end
    assert "when the log ended" in fired[0]["text"] and "of 12 rows" in fired[0]["text"], fired[0]
    history = read_offline_run(res["run_dir"]).history
    series = [(r["train/global_step"], r["rlcluster/alerts/cut-off-answers"]) for r in history
              if "rlcluster/alerts/cut-off-answers" in r]
    assert series, "no alert-state series in the W&B run"
    assert all(v == 0 for s, v in series[:-1]), series  # quiet (never pending: a finding rule waits for a finding)
    assert series[-1] == (steps, 2), series  # firing at the last step
    # with a trainer attached, the end alert carries the last step's completions, as a row's alert does: in the
    # journal and in W&B's evidence table at that step, and they are what TRL itself logged for the step
    evidence = fired[0].get("evidence")
    assert evidence and all(ex["step"] == steps for ex in evidence), fired[0]
    trl = next(r["completions"] for r in history
               if r.get("train/global_step") == steps and isinstance(r.get("completions"), dict))
    run = read_offline_run(res["run_dir"])
    doc = json.loads((Path(run.path) / "files" / trl["path"]).read_text())
    logged = {r[doc["columns"].index("completion")] for r in doc["data"]}
    assert {ex["completion"] for ex in evidence} <= logged
    tables = [r["rlcluster/rollouts/evidence"] for r in history
              if r.get("train/global_step") == steps and isinstance(r.get("rlcluster/rollouts/evidence"), dict)]
    assert len(tables) == 1, tables
    doc = json.loads((Path(run.path) / "files" / tables[0]["path"]).read_text())
    rows = [r for r in doc["data"] if r[doc["columns"].index("alert")] == "cut-off-answers"]
    assert {r[doc["columns"].index("completion")] for r in rows} == {ex["completion"] for ex in evidence}
