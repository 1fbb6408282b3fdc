"""``rlcluster automations export``: which rules map to W&B Automations, and what the create calls send.

The create calls are a PROTOCOL CONTRACT test, like ``report --save``: the loopback GraphQL recorder of
test_report_save_contract stands in for W&B (extended here with the automation operations wandb 0.31 sends:
IntegrationsByEntity, GetProject, ServerFeaturesQuery, CreateAutomation). It pins what the CLI sends, including
how ``for:`` becomes W&B's window; it cannot prove the real server accepts it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wandb_rlcluster.alerts import load_config
from wandb_rlcluster.automations import PLACEHOLDER_PROJECT_ID, graphql_input, plan, wandb_key

from .test_report_save_contract import API_KEY, PROJECT_ID, FakeWandb, clean_env, rlcluster, serve

SHIPPED = Path(__file__).resolve().parents[1] / "src" / "wandb_rlcluster" / "alerts" / "alerts.yaml"
SLACK_ID = "SW50ZWdyYXRpb246Nw=="  # base64("Integration:7")
MINE = """
rules:
  - name: kl-stop              # override: a stricter stop held for 5 values
    when: "kl > 0.8"
    for: 5
  - name: entropy-floor         # '<' holds for a window with MAX
    gauge: entropy
    when: "0.3 > entropy"
    for: 4
    severity: warn
  - name: kl-spike-z            # rlcluster's robust z-score -> W&B's z-score event
    gauge: kl
    trainers: [grpo]
    when: "rlcluster/kl/kl_z > 6"
    severity: warn
  - name: hacking               # two metrics: stays with the callback
    gauge: reward
    when: "reward > 1 and completions/mean_length > 200"
  - name: abs-kl
    gauge: kl
    when: "abs(kl) > 2"
"""


class FakeWandbAutomations(FakeWandb):
    """The report recorder, answering the operations ``wandb.Api().create_automation`` sends as well."""

    def __init__(self, *, slack: bool = True, refuse: bool = False, **kw: Any) -> None:
        super().__init__(**kw)
        self.slack = slack
        self.refuse = refuse  # answer createFilterTrigger as a free-plan entity would be refused

    def answer(self, op: str | None, v: dict[str, Any]) -> dict[str, Any]:
        if op == "IntegrationsByEntity":
            edges = [{"node": {"__typename": "SlackIntegration", "id": SLACK_ID, "teamName": "acme",
                               "channelName": "rl-alerts"}}] if self.slack else []
            return {"data": {"entity": {"integrations": {"pageInfo": {"endCursor": None, "hasNextPage": False},
                                                         "edges": edges}}}}
        if op == "GetProject":
            return {"data": {"project": {"__typename": "Project", "id": PROJECT_ID, "name": v["name"],
                                         "entityName": v["entity"], "createdAt": "2026-01-01T00:00:00",
                                         "isBenchmark": False, "user": None}}}
        if op == "ServerFeaturesQuery":  # the z-score event is gated behind a server feature
            return {"data": {"serverInfo": {"features": [
                {"name": "AUTOMATION_EVENT_RUN_METRIC_ZSCORE", "isEnabled": True}]}}}
        if op == "CreateAutomation" and self.refuse:
            return {"data": {"result": None}, "errors": [{"message": "automations are not available on this plan",
                                                          "path": ["createFilterTrigger"]}]}
        if op == "CreateAutomation":
            inp = v["input"]
            action = inp["triggeredActionConfig"]["notificationActionInput"]
            trigger = {"__typename": "Trigger", "id": "VHJpZ2dlcjox", "createdAt": "2026-01-01T00:00:00",
                       "updatedAt": None, "name": inp["name"], "description": inp.get("description"),
                       "enabled": True, "scope": {"__typename": "Project", "id": inp["scopeID"], "name": "rl"},
                       "event": {"__typename": "FilterEventTriggeringCondition",
                                 "eventType": inp["triggeringEventType"], "filter": inp["eventFilter"]},
                       "action": {"__typename": "NotificationTriggeredAction",
                                  "integration": {"__typename": "SlackIntegration", "id": action["integrationID"],
                                                  "teamName": "acme", "channelName": "rl-alerts"},
                                  "title": action["title"], "message": action["message"],
                                  "severity": action["severity"]}}
            return {"data": {"result": {"trigger": trigger}}}
        return super().answer(op, v)


def _metric_filter(event_filter: str) -> dict[str, Any]:
    return json.loads(event_filter)["run_metric_filter"]


def test_plan_maps_thresholds_windows_zscores_and_says_why_not(tmp_path: Path):
    f = tmp_path / "mine.yaml"
    f.write_text(MINE)
    planned, unmapped = plan(load_config(f), "rl")
    by_rule = {p.rule: p for p in planned}
    # `for: N` on `>` is "held for the window": the smallest of the last N values is above the threshold
    assert by_rule["kl-stop"].filter_args == {"name": "train/kl", "cmp": ">", "threshold": 0.8, "agg": "MIN",
                                              "window": 5}
    assert by_rule["entropy-floor"].filter_args == {"name": "train/entropy", "cmp": "<", "threshold": 0.3,
                                                    "agg": "MAX", "window": 4}
    assert by_rule["kl-warn"].filter_args["window"] == 3  # shipped rule, for: 3
    z = by_rule["kl-spike-z"]
    assert (z.kind, z.filter_args) == ("zscore", {"name": "train/kl", "window": 30, "threshold": 6.0,
                                                  "change_dir": "INCREASE"})
    assert planned[-1].kind == "run-state" and planned[-1].filter_args == {"states": ["FAILED"]}
    why = {u.rule: u.reason for u in unmapped}
    assert "combines conditions" in why["hacking"]
    assert "abs()" in why["abs-kl"]
    assert "built-in findings" in why["loss-stop"]
    assert set(why) | {p.rule for p in planned} >= {r.name for r in load_config(f).rules}
    assert wandb_key("eval_loss") == "eval/loss" and wandb_key("rlcluster/kl/kl") == "rlcluster/kl/kl"


def test_wandb_says_its_own_text_and_keeps_scope_only_by_run_name():
    """A stop rule's text says training was stopped: W&B stops nothing, so it sends its own words; a rule's
    trainers: cannot be kept (W&B filters runs by display name only) unless --run-name narrows the runs."""
    from wandb.automations import ProjectScope

    planned, _ = plan(load_config(SHIPPED), "rl")
    by_rule = {p.rule: p for p in planned}
    stop = by_rule["kl-stop"]
    assert "stopped and a checkpoint saved" not in stop.message and "stops nothing" in stop.message
    assert "cannot tell a run's trainer" in by_rule["kl-warn"].message and "two notifications" in stop.message
    scope = ProjectScope(id=PLACEHOLDER_PROJECT_ID, name="rl")
    assert json.loads(json.loads(graphql_input(stop, scope, "i")["eventFilter"])["run_filter"]) == {"$and": []}
    narrowed, _ = plan(load_config(SHIPPED), "rl", run_name="^grpo-")
    for p in narrowed:  # every automation, the run-state one included
        runs = json.loads(json.loads(graphql_input(p, scope, "i")["eventFilter"])["run_filter"])
        assert runs == {"$and": [{"display_name": {"$regex": "^grpo-"}}]}, p.name
        assert "cannot tell a run's trainer" not in p.message


def test_dry_run_prints_the_plan_without_network_or_key(tmp_path: Path):
    with serve() as srv:  # pointed at the recorder, with no key: nothing may reach it
        p = rlcluster("automations", "export", str(SHIPPED), "--entity", "acme", "--project", "rl", "--dry-run",
                      env=clean_env(tmp_path / "home", WANDB_BASE_URL=srv.url), cwd=tmp_path)
        with srv.lock:
            seen = list(srv.requests)
    assert p.returncode == 0, p.stderr
    assert seen == []
    out = p.stdout
    assert "need a paid plan" in out
    assert "rlcluster-rl-kl-warn      RUN_METRIC         WARN   MIN(train/kl) over the last 3 values > 0.5" in out
    assert "rlcluster-rl-run-failed   RUN_STATE          ERROR" in out
    # every shipped rule is either planned or listed with its reason
    from wandb_rlcluster.alerts import load_config

    n_rules = len(load_config(SHIPPED).rules)
    planned = int(out.split("would create ")[1].split()[0].rstrip(",:")) - 1  # one is the run-state automation
    assert f"cannot map {n_rules - planned} rule(s)" in out and "kl-anomaly" in out
    assert ("W&B filters runs by name only: kl-warn, kl-stop, seq-kl-warn, seq-kl-stop will also fire for runs of "
            "other trainers") in out
    assert "its callback alerts on these rules too: each such event is notified twice" in out


def test_json_without_dry_run_is_refused_before_anything_is_sent(tmp_path: Path):
    with serve(FakeWandbAutomations) as srv:
        p = rlcluster("automations", "export", str(SHIPPED), "--entity", "acme", "--project", "rl", "--json",
                      env=clean_env(tmp_path / "home", WANDB_BASE_URL=srv.url, WANDB_API_KEY=API_KEY), cwd=tmp_path)
        with srv.lock:
            seen = list(srv.requests)
    assert p.returncode == 2 and seen == [], (p.stdout, p.stderr)
    assert p.stderr.strip() == ("rlcluster: --json prints the GraphQL inputs of a dry run: add --dry-run (without it, "
                                "export creates the automations in W&B)")


@pytest.mark.slow
def test_protocol_contract_refused_create_is_one_line_exit_2(tmp_path: Path):
    """PROTOCOL CONTRACT (fake server): the server refuses createFilterTrigger -> exit 2, one line, stops there."""
    with serve(FakeWandbAutomations, refuse=True) as srv:
        p = rlcluster("automations", "export", str(SHIPPED), "--entity", "acme", "--project", "rl", cwd=tmp_path,
                      env=clean_env(tmp_path / "home", WANDB_BASE_URL=srv.url, WANDB_API_KEY=API_KEY))
        ops = [c.op for c in srv.graphql()]
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert ops.count("CreateAutomation") == 1  # the first refusal stops the export
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("rlcluster: could not create rlcluster-rl-kl-warn: ")
    assert "not available on this plan" in lines[0] and "paid plan" in lines[0]


@pytest.mark.parametrize("slack", [True, False], ids=["slack-integration", "no-integration"])
@pytest.mark.slow
def test_protocol_contract_export_creates_what_dry_run_printed(tmp_path: Path, slack: bool):
    """PROTOCOL CONTRACT (fake server): each createFilterTrigger input is the --dry-run --json line, ids filled in."""
    f = tmp_path / "mine.yaml"
    f.write_text(MINE)
    args = ("automations", "export", str(f), "--entity", "acme", "--project", "rl")
    dry = rlcluster(*args, "--dry-run", "--json", env=clean_env(tmp_path / "home-dry"), cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    expected = [json.loads(line) for line in dry.stdout.splitlines()]
    with serve(FakeWandbAutomations, slack=slack) as srv:
        p = rlcluster(*args, cwd=tmp_path,
                      env=clean_env(tmp_path / "home", WANDB_BASE_URL=srv.url, WANDB_API_KEY=API_KEY))
        calls = srv.graphql()
    assert "Traceback" not in p.stderr
    creates = [c.variables["input"] for c in calls if c.op == "CreateAutomation"]
    if not slack:
        assert p.returncode == 2 and creates == []
        assert p.stderr.strip().startswith("rlcluster: no Slack integration in entity 'acme'")
        return
    assert p.returncode == 0, p.stderr
    # kl-warn, kl-stop, seq-kl-warn, seq-kl-stop (shipped), entropy-floor, kl-spike-z (mine), run-failed
    assert len(creates) == len(expected) == 7
    for sent, want in zip(creates, expected, strict=True):
        assert sent["scopeID"] == PROJECT_ID and want["scopeID"] == "<project id>"
        action = sent["triggeredActionConfig"]["notificationActionInput"]
        assert action["integrationID"] == SLACK_ID
        want["scopeID"] = PROJECT_ID
        want["triggeredActionConfig"]["notificationActionInput"]["integrationID"] = SLACK_ID
        assert sent == want
    by_name = {c["name"]: c for c in creates}
    kl = _metric_filter(by_name["rlcluster-rl-kl-stop"]["eventFilter"])["threshold_filter"]
    assert kl == {"name": "train/kl", "agg_op": "MIN", "window_size": 5, "cmp_op": "$gt", "threshold": 0.8}
    ent = _metric_filter(by_name["rlcluster-rl-entropy-floor"]["eventFilter"])["threshold_filter"]
    assert (ent["agg_op"], ent["window_size"], ent["cmp_op"]) == ("MAX", 4, "$lt")
    z = by_name["rlcluster-rl-kl-spike-z"]
    assert z["triggeringEventType"] == "RUN_METRIC_ZSCORE"
    assert _metric_filter(z["eventFilter"])["zscore_filter"] == {"name": "train/kl", "window_size": 30,
                                                                 "threshold": 6.0, "change_dir": "INCREASE"}
    failed = by_name["rlcluster-rl-run-failed"]
    assert failed["triggeringEventType"] == "RUN_STATE"
    assert json.loads(failed["eventFilter"])["run_state_filter"] == {"states": ["FAILED"]}
    sev = {c["name"]: c["triggeredActionConfig"]["notificationActionInput"]["severity"] for c in creates}
    assert sev["rlcluster-rl-kl-stop"] == "ERROR" and sev["rlcluster-rl-entropy-floor"] == "WARN"
    assert p.stdout.strip().splitlines()[-1].startswith("7 automation(s) created in acme/rl")
    # the rules left to the callback are named with their reasons, as in the dry run
    from wandb_rlcluster.alerts import load_config

    n_unmapped = len(load_config(f).rules) - 6  # every rule but the 6 metric automations above
    assert f"cannot map {n_unmapped} rule(s); they stay with the callback:" in p.stdout
    assert f"; {n_unmapped} rule(s) cannot map and stay with the callback" in p.stdout
    assert "  hacking: 'reward > 1 and completions/mean_length > 200' combines conditions" in p.stdout
