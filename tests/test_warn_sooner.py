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


@pytest.mark.parametrize("bad", [-1, WARN_SOONER_MAX + 1, 1.5, True, "1"])
def test_a_bad_value_fails_before_training_and_says_what_to_pass(bad: object):
    with pytest.raises(ValueError, match="warn_sooner must be a whole number of logged rows from 0 to 3"):
        InstrumentCluster(trainer="grpo", warn_sooner=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warn_sooner"):
        RLClusterCallback(alerts=False, warn_sooner=bad)  # type: ignore[arg-type]


def test_none_means_the_alerts_file_decides_and_the_core_needs_a_number():
    with pytest.raises(ValueError, match="warn_sooner"):
        InstrumentCluster(trainer="grpo", warn_sooner=None)  # type: ignore[arg-type]
    assert RLClusterCallback(alerts=False).warn_sooner == 0


YAML = """
watchdog: {stall_alert: false, crash_alert: false, guardian: false}
warn_sooner: 1
"""


def test_the_alerts_file_sets_it_and_the_argument_wins(tmp_path: Path):
    from wandb_rlcluster.alerts import AlertConfig, load_config

    f = tmp_path / "alerts.yaml"
    f.write_text(YAML)
    config = load_config(f)
    assert config.warn_sooner == 1 and AlertConfig.from_dict(config.to_dict()).warn_sooner == 1
    cb = RLClusterCallback(alerts=str(f), trainer="grpo", grad_every=0)
    assert cb.warn_sooner == 1 and cb.engine is not None and cb.engine.warn_sooner == 1
    assert all(g.warn_sooner == 1 for g in cb.cluster.gauges.values())
    assert cb.state()["args"]["alerts"]["warn_sooner"] == 1
    assert RLClusterCallback(alerts=str(f), warn_sooner=0).warn_sooner == 0  # the argument wins, as gold_rewards
    assert load_config().warn_sooner is None  # the shipped file leaves the default holds


@pytest.mark.parametrize("value", ["4", "-1", "1.5", "yes", "[1]"])
def test_a_bad_alerts_file_value_names_the_file_the_line_and_the_fix(tmp_path: Path, value: str):
    from wandb_rlcluster.alerts import ConfigError, load_config

    f = tmp_path / "alerts.yaml"
    f.write_text(f"extends: default\nwarn_sooner: {value}\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert any(p.startswith(f"{f}:2:") and "'warn_sooner' must be a whole number of logged rows from 0 to 3" in p
               and "e.g. warn_sooner: 1" in p for p in e.value.problems), e.value.problems


def test_rlcluster_analyze_reads_it_from_alerts_and_the_flag_wins(tmp_path: Path):
    log = tmp_path / "rows.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in kl_jump_rows()) + "\n")
    f = tmp_path / "alerts.yaml"
    f.write_text(YAML)
    cmd = [sys.executable, "-m", "wandb_rlcluster", "analyze", str(log), "--format", "json", "--alerts", str(f)]

    def read(*extra: str) -> dict:
        p = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=120)
        return json.loads(p.stdout)

    from_file, flag = read(), read("--warn-sooner", "0")
    assert from_file["warn_sooner"] == 1 and "warn_sooner" not in flag
    assert min(a["step"] for a in from_file["alerts"] if a["rule"] == "kl-warn" and a["kind"] == "firing") == 151
    assert min(a["step"] for a in flag["alerts"] if a["rule"] == "kl-warn" and a["kind"] == "firing") == 152


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


def test_the_alert_rules_warn_sooner_too_and_stop_rules_do_not():
    """The shipped alerts.yaml sends KL's warning from its own rule (`when: kl > 0.5`, `for: 3`): a warn alert rule's
    for: is shortened like a gauge's warn hold, a stop rule's is not; what the user is told comes sooner."""
    from wandb_rlcluster.alerts import load_config
    from wandb_rlcluster.analyze import analyze_stream

    def alerts(sooner: int) -> dict[str, int]:
        a = analyze_stream(kl_jump_rows(), "grpo", alerts=load_config(), warn_sooner=sooner)
        out: dict[str, int] = {}
        for e in a.alerts:
            if e.kind == "firing":
                out.setdefault(e.rule, e.step)
        return out

    base, early = alerts(0), alerts(2)
    assert base["kl-warn"] == 152 and early["kl-warn"] == 150
    assert base["kl-stop"] == early["kl-stop"] == 152


def test_the_callback_alerts_sooner_and_says_how_long_it_held(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    def run(sooner: int) -> RLClusterCallback:
        args = TrainingArguments(output_dir=str(tmp_path / f"s{sooner}"), report_to=[], use_cpu=True)
        state, control = TrainerState(), TrainerControl()
        state.max_steps = 200
        cb = RLClusterCallback(trainer="grpo", log_to_wandb=False, stop_on=None, warn_sooner=sooner,
                               stall_alert=False, crash_alert=False, guardian=False, grad_every=0,
                               attention_every=0, lora_every=0, sample_every=0)
        cb.on_train_begin(args, state, control)
        for r in kl_jump_rows():
            state.global_step = int(r["step"])
            cb.on_log(args, state, control, logs={k: v for k, v in r.items() if k != "step"})
        cb.on_train_end(args, state, control)
        return cb

    base, early = run(0), run(1)
    first_alert = {cb: next(e.step for e in cb.alert_events if e.rule == "kl-warn") for cb in (base, early)}
    assert first_alert[base] == 152 and first_alert[early] == 151
    warn = {cb: next(f for f in cb.cluster.findings if f.rule == "kl-warn") for cb in (base, early)}
    assert "for 3 logged steps" in warn[base].message and "for 2 logged steps" in warn[early].message
    with caplog.at_level(logging.WARNING, logger="wandb_rlcluster"):
        RLClusterCallback(alerts=False, stop_on="warn", warn_sooner=1)
    assert "stops come 1 row(s) sooner too" in caplog.text


def test_rules_that_count_their_own_rows_are_shortened_alike():
    """reward-shift-down's fall from the peak and the proxy-gold rules count rows by hand (then check with for_=1):
    they take warn_sooner off those counts, never under one row."""
    reward = InstrumentCluster(trainer="grpo", warn_sooner=2).gauges["reward"]
    assert [reward.warn_rows(n) for n in (1, 2, 3, 8)] == [1, 1, 1, 6]
    assert InstrumentCluster(trainer="grpo").gauges["reward"].warn_rows(8) == 8


def test_the_json_output_and_the_dashboard_say_how_the_log_was_read(tmp_path: Path):
    log = tmp_path / "rows.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in kl_jump_rows()) + "\n")
    cmd = [sys.executable, "-m", "wandb_rlcluster"]
    out = json.loads(subprocess.run([*cmd, "analyze", str(log), "--format", "json", "--warn-sooner", "1"],
                                    capture_output=True, text=True, timeout=120).stdout)
    assert out["warn_sooner"] == 1
    assert "warn_sooner" not in json.loads(subprocess.run([*cmd, "analyze", str(log), "--format", "json"],
                                                          capture_output=True, text=True, timeout=120).stdout)
    page = tmp_path / "d.html"
    p = subprocess.run([*cmd, "dashboard", str(log), "--warn-sooner", "2", "--out", str(page)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    from wandb_rlcluster.dashboard import build_dashboard

    _, analysis = build_dashboard(str(log), warn_sooner=2)
    assert min(e.step for e in analysis.alerts if e.rule == "kl-warn" and e.kind == "firing") == 150


def test_the_wandb_side_rules_take_the_same_rows_off_a_warn_window(tmp_path: Path):
    """`rlcluster automations export` from a file with warn_sooner: 1 gives W&B the same shorter warn windows."""
    from wandb_rlcluster.alerts import load_config
    from wandb_rlcluster.automations import plan

    f = tmp_path / "alerts.yaml"
    f.write_text(YAML)
    conditions = {p.rule: p.condition for p in plan(load_config(f), "rl")[0]}
    shipped = {p.rule: p.condition for p in plan(load_config(), "rl")[0]}
    assert shipped["kl-warn"] == "MIN(train/kl) over the last 3 values > 0.5"
    assert conditions["kl-warn"] == "MIN(train/kl) over the last 2 values > 0.5"
    assert conditions["kl-stop"] == shipped["kl-stop"] == "MIN(train/kl) over the last 3 values > 1"


def test_the_shipped_alert_text_says_how_many_rows_it_held():
    """The shipped KL alerts' text reads "for {rows} logged steps": the rows the rule actually held."""
    from wandb_rlcluster.alerts import load_config
    from wandb_rlcluster.analyze import analyze_stream

    def text(sooner: int, rule: str) -> str:
        a = analyze_stream(kl_jump_rows(), "grpo", alerts=load_config(), warn_sooner=sooner)
        return next(e.text for e in a.alerts if e.rule == rule and e.kind == "firing")

    assert "above 0.5 for 3 logged steps" in text(0, "kl-warn")
    assert "above 0.5 for 1 logged steps" in text(2, "kl-warn")
    assert "above 1.0 for 3 logged steps" in text(2, "kl-stop")


def test_a_checkpoint_with_a_value_this_version_refuses_still_resumes(caplog: pytest.LogCaptureFixture):
    from wandb_rlcluster.alerts import AlertConfig, ConfigError, load_config
    from wandb_rlcluster.alerts.config import validate_config

    stored = {**load_config().to_dict(), "warn_sooner": 5}  # another version's, or an edited checkpoint
    restored = AlertConfig.from_dict(stored)
    assert restored.warn_sooner is None and any("warn_sooner" in w for w in restored.warnings)
    with caplog.at_level(logging.WARNING, logger="wandb_rlcluster"):
        cb = RLClusterCallback(alerts=stored, restored=True, grad_every=0)
    assert cb.warn_sooner == 0 and "warn_sooner" in caplog.text
    config = load_config()
    config.warn_sooner = 5
    with pytest.raises(ConfigError, match="warn_sooner"):  # built in Python: checked like a file
        validate_config(config)


@pytest.mark.trains
def test_a_real_grpo_run_warns_a_row_sooner_and_its_wandb_run_says_so(tmp_path: Path):
    """A real tiny TRL GRPO run (W&B offline, read back): its random model almost never ends with EOS, so the
    truncation rule is active from the first logged row. Held 4 rows it would fire at step 4; with warn_sooner=1 the
    run warns at step 3, journals the alert there, and its W&B summary records the setting."""
    from wandb_rlcluster.readers.wandb import read_offline_run

    from .test_callback_trl import run_trainer

    rules = tmp_path / "alerts.yaml"
    rules.write_text("watchdog: {stall_alert: false, crash_alert: false, guardian: false}\nrules:\n"
                     "  - name: cut-off-answers\n    gauge: length\n    finding: truncation\n    severity: warn\n")
    res = run_trainer(tmp_path, "grpo", "--max-steps", "6", "--every", "1000", "--alerts", str(rules),
                      "--params", json.dumps({"length": {"truncation_for": 4}}),
                      "--cb-kwargs", json.dumps({"warn_sooner": 1}))
    steps = [f["step"] for f in res["findings"] if f["rule"] == "truncation"]
    assert steps and steps[0] == 3, res["findings"]
    journal = [json.loads(x) for x in (Path(res["output_dir"]) / "alerts.jsonl").read_text().splitlines()]
    assert [j["step"] for j in journal if j.get("rule") == "cut-off-answers" and j.get("kind") == "firing"] == [3]
    assert read_offline_run(res["run_dir"]).summary.get("rlcluster/warn_sooner") == 1
