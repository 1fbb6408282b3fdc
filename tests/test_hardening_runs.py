"""Hardening in real TRL runs (tiny GRPO, wandb offline, local servers on 127.0.0.1):

* four failing channels (HTTP 500, a server that never answers, one that closes the connection, a
  closed SMTP port) cost at most the bounded end-of-training wait, and every alert gets exactly one
  outcome record per channel in alerts.jsonl, with no secret anywhere;
* a resume with ``restore_callback_states_from_checkpoint=True`` from another working directory
  rebuilds the same rules, whether they were given as a (relative) path or as an AlertConfig.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from .test_alert_channels import black_hole, closing_server, dead_port, http_server
from .test_callback_trl import run_trainer

CHANNELS = ("err500", "hang", "closing", "mail")
TOKENS = {"HOOK_500": "T0AAA/B0AAA/SeCrEt500token", "HOOK_HANG": "T0BBB/B0BBB/SeCrEtHangToken",
          "HOOK_CLOSE": "T0CCC/B0CCC/SeCrEtCloseToken"}

RULES = """
channels:
  err500: {{type: slack, webhook_url_env: HOOK_500, min_severity: info, timeout: 1}}
  hang: {{type: slack, webhook_url_env: HOOK_HANG, min_severity: info}}
  closing: {{type: slack, webhook_url_env: HOOK_CLOSE, min_severity: info, timeout: 1}}
  mail: {{type: email, host: 127.0.0.1, port: {smtp_port}, sender: rl@example.com, recipients: [oncall@example.com],
         min_severity: info, timeout: 1}}
rules:
""" + "".join(f"""  - name: reward-seen-{n}
    gauge: reward
    when: "reward > -1000"
    for: {n}
    severity: warn
    cooldown: 0s
    title: "reward seen for {n} rows at step {{{{step}}}} ({{{{trainer}}}})"
""" for n in range(1, 7))

CUSTOM = """
rules:
  - name: my-kl-guard
    gauge: kl
    when: "kl > 123.5"
    for: 2
    severity: stop
  - name: kl-stop
    when: "kl > 99"
"""


pytestmark = pytest.mark.trains  # trains a tiny model for real (make test-kernels)

@pytest.fixture(scope="module")
def failing_channels_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real GRPO run whose alerts go to four failing channels; its rules are passed as an AlertConfig."""
    tmp = tmp_path_factory.mktemp("failing")
    with http_server() as (base, rec), black_hole() as hang_port, closing_server() as close_port:
        rec.statuses.extend([500] * 10_000)
        rules = tmp / "alerts.yaml"
        rules.write_text(RULES.format(smtp_port=dead_port()))
        env = {"HOOK_500": f"{base}/services/{TOKENS['HOOK_500']}",
               "HOOK_HANG": f"http://127.0.0.1:{hang_port}/services/{TOKENS['HOOK_HANG']}",
               "HOOK_CLOSE": f"http://127.0.0.1:{close_port}/services/{TOKENS['HOOK_CLOSE']}"}
        res = run_trainer(tmp / "run", "grpo_kl", "--max-steps", "8", "--save-steps", "4", "--every", "100",
                          "--alerts", str(rules), "--alerts-object", env_extra=env)
        ended = time.time()
    return res | {"tmp": tmp, "exit_seconds": ended - res["written_at"]}


def test_failing_channels_cost_only_the_bounded_wait_and_each_alert_has_one_outcome(failing_channels_run: dict):
    res = failing_channels_run
    # the end of training is bounded in total (default 2 s wait), not 5-10 s per channel and attempt: the whole
    # on_train_end, and after it the process's exit (no exit hook or thread waits on the hanging endpoint, whose
    # timeout is 5 s per attempt)
    assert res["global_step"] == 8
    assert res["channel_wait_seconds"] <= 2.5, res["channel_wait_seconds"]
    assert res["on_train_end_seconds"] <= 3.0, res["on_train_end_seconds"]
    assert res["exit_seconds"] < 4.5, res["exit_seconds"]
    journal_text = (Path(res["output_dir"]) / "alerts.jsonl").read_text()
    journal = [json.loads(line) for line in journal_text.splitlines()]
    alerts = {j["id"]: j for j in journal if j["type"] == "alert" and j["kind"] == "firing" and j["notify"]}
    assert {f"reward-seen-{n}" for n in range(1, 7)} <= {a["rule"] for a in alerts.values()}
    assert all(a["title"].endswith("(grpo)") for a in alerts.values() if a["rule"].startswith("reward-seen"))
    outcomes = [j for j in journal if j["type"] == "channel"]
    pairs = Counter((j["alert"], j["channel"]) for j in outcomes)
    # exactly one outcome per alert and channel: sent, failed (with the reason) or undelivered at shutdown
    assert set(pairs) == {(a, c) for a in alerts for c in CHANNELS}, sorted(pairs)
    assert set(pairs.values()) == {1}
    assert {j["outcome"] for j in outcomes} <= {"failed", "undelivered"}
    assert all(j["error"] and not j["ok"] for j in outcomes)
    by_channel = {c: Counter(j["outcome"] for j in outcomes if j["channel"] == c) for c in CHANNELS}
    assert by_channel["hang"]["failed"] <= 1, by_channel  # a hung endpoint mostly ends undelivered
    assert any(j["outcome"] == "undelivered" and "training ended" in j["error"] for j in outcomes)
    # each record says why: the 500 channel's name the HTTP 500 (failed, or undelivered with its last attempt's
    # error), the closed SMTP port's name the refused connection
    errors = {c: [j["error"] for j in outcomes if j["channel"] == c] for c in CHANNELS}
    assert any("HTTP 500" in e for e in errors["err500"]), errors["err500"]
    assert any("refused" in e.lower() for e in errors["mail"]), errors["mail"]
    # no secret in the journal or in anything the process printed (logs included)
    for token in TOKENS.values():
        for part in [token, *token.split("/")]:
            assert part not in journal_text and part not in res["stderr"], part
    # training never waited on a channel
    assert res["on_log_seconds"] < 3.0, res["on_log_seconds"]


def _resume_elsewhere(first_out: Path, where: Path, ckpt_step: int, max_steps: int) -> dict:
    """Resume the first run's checkpoint from an unrelated working directory, the callback rebuilt from it."""
    where.mkdir(parents=True, exist_ok=True)
    ckpt = first_out / "trainer" / f"checkpoint-{ckpt_step}"
    restore = json.dumps({"restore_callback_states_from_checkpoint": True})
    return run_trainer(where / "run", "grpo_kl", "--max-steps", str(max_steps), "--every", "100", "--report", "none",
                       "--resume", str(ckpt), "--overrides", restore, cwd=where)


def test_resume_from_another_directory_keeps_rules_given_as_a_relative_path(tmp_path: Path):
    here = tmp_path / "project"
    here.mkdir()
    (here / "my-alerts.yaml").write_text(CUSTOM)
    first = run_trainer(here / "run", "grpo_kl", "--max-steps", "4", "--save-steps", "2", "--every", "100",
                        "--report", "none", "--alerts", "my-alerts.yaml", cwd=here)
    stored = json.loads((here / "run" / "trainer" / "checkpoint-2" / "trainer_state.json").read_text())
    args = stored["stateful_callbacks"]["RLClusterCallback"]["args"]
    assert [r["name"] for r in args["alerts"]["rules"]] == [r[0] for r in first["alert_rules"]]
    resumed = _resume_elsewhere(here / "run", tmp_path / "elsewhere", 2, 4)
    assert resumed["restored_callback"] and resumed["global_step"] == 4
    assert resumed["alert_rules"] == first["alert_rules"]
    assert ["my-kl-guard", "kl > 123.5", "stop", 2] in resumed["alert_rules"]
    assert ["kl-stop", "kl > 99", "stop", 3] in resumed["alert_rules"]  # the override, merged field by field


def test_resume_from_another_directory_keeps_rules_given_as_an_alert_config(failing_channels_run: dict):
    first = failing_channels_run
    resumed = _resume_elsewhere(Path(first["output_dir"]).parent, first["tmp"] / "elsewhere", 4, 8)
    assert resumed["restored_callback"] and resumed["global_step"] == 8
    assert resumed["alert_rules"] == first["alert_rules"]
    assert ["reward-seen-6", "reward > -1000", "warn", 6] in resumed["alert_rules"]
    # its channels came back too (by environment-variable name; the variables are unset here, so they are off)
    assert "HOOK_500 is not set" in resumed["stderr"]
