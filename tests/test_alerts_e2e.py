"""Alerts end to end: a real TRL GRPO run, wandb offline, local Slack/SMTP servers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wandb_rlcluster.readers.wandb import read_offline_run

from .test_callback_trl import run_trainer


class _Hook(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slack_server():
    class Hook(_Hook):
        bodies: list[dict] = []

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/services/T000/B000/secret-token", Hook.bodies
    srv.shutdown()


@pytest.fixture
def black_hole():
    """Accepts TCP connections and never answers: the worst endpoint for a synchronous sender."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(50)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conns.append(s.accept()[0])

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield s.getsockname()[1]
    stop.set()
    for c in conns:
        c.close()
    s.close()


RULES = """
channels:
  slack:
    type: slack
    webhook_url_env: TEST_SLACK_WEBHOOK
    min_severity: warn
  pager:
    type: email
    host: 127.0.0.1
    port: {port}
    sender: rl@example.com
    recipients: [oncall@example.com]
    timeout: 2
rules:
  - name: kl-moving
    gauge: kl
    when: "kl > 0"
    for: 1
    severity: warn
    title: "KL is moving: {{value:.2g}} at step {{step}}"
  - name: kl-stop
    when: "kl > 0"
    for: 3
"""


@pytest.mark.trains
def test_grpo_alert_fires_journals_reaches_wandb_and_stops(tmp_path: Path, slack_server, black_hole):
    url, bodies = slack_server
    rules = tmp_path / "alerts.yaml"
    rules.write_text(RULES.format(port=black_hole))
    os.environ["TEST_SLACK_WEBHOOK"] = url
    try:
        res = run_trainer(tmp_path, "grpo_kl", "--max-steps", "10", "--alerts", str(rules), "--every", "5")
    finally:
        del os.environ["TEST_SLACK_WEBHOOK"]
    # the stop rule (kl > 0 for 3 rows; kl is 0 at step 1) ended training early, on the row that decided it
    assert res["stop_finding"]["rule"] == "kl-stop"
    assert res["global_step"] == res["stopped_at"] == 4
    # the journal has every alert, fired and suppressed, and the channel outcomes
    journal = [json.loads(x) for x in (Path(res["output_dir"]) / "alerts.jsonl").read_text().splitlines()]
    fired = {(j["rule"], j["step"]) for j in journal if j.get("type") == "alert" and j["kind"] == "firing"}
    assert ("kl-moving", 2) in fired and ("kl-stop", 4) in fired
    assert any(j.get("type") == "channel" and j["channel"] == "slack" and j["ok"] for j in journal)
    # the stop was checkpointed so no work is lost
    assert (Path(res["output_dir"]) / "checkpoint-4").is_dir()
    # the alert records are in the offline W&B run file, with W&B's levels
    run = read_offline_run(res["run_dir"])
    titles = {(a["title"], a["level"]) for a in run.alerts}
    assert any(t.startswith("KL is moving") and t.endswith("at step 2") and lv == "WARN" for t, lv in titles)
    assert any(lv == "ERROR" for _, lv in titles)  # stop -> ERROR
    # the alert state is a series in W&B: pending/firing values on train/global_step
    states = [row.get("rlcluster/alerts/kl-stop") for row in run.history if "rlcluster/alerts/kl-stop" in row]
    assert 2.0 in states
    # Slack got the payloads (format: text + blocks), and the webhook secret is nowhere in the journal
    assert any("KL is moving" in b["text"] for b in bodies) and all("blocks" in b for b in bodies)
    assert "secret-token" not in (Path(res["output_dir"]) / "alerts.jsonl").read_text()
    # the black-hole e-mail server never answered, yet the training thread barely noticed
    assert res["on_log_seconds"] < 2.0, res["on_log_seconds"]


def test_alerts_test_command_reaches_local_servers(tmp_path: Path, slack_server):
    aiosmtpd = pytest.importorskip("aiosmtpd.controller")

    class Handler:
        def __init__(self) -> None:
            self.messages: list[bytes] = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append(envelope.content)
            return "250 OK"

    handler = Handler()
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    ctl = aiosmtpd.Controller(handler, hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        url, bodies = slack_server
        f = tmp_path / "a.yaml"
        f.write_text(f"channels:\n  slack: {{type: slack, webhook_url_env: TEST_HOOK}}\n"
                     f"  mail: {{type: email, host: 127.0.0.1, port: {port}, sender: a@b.c, recipients: [d@e.f]}}\n")
        p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "alerts", "test", str(f)], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "TEST_HOOK": url})
        assert p.returncode == 0, p.stderr
        assert "OK    slack" in p.stdout and "OK    mail" in p.stdout
        assert bodies and "rlcluster test alert" in bodies[0]["text"]
        assert handler.messages and b"rlcluster test alert" in handler.messages[0]
        # without the secret in the environment the channel is reported, not crashed on
        env = {k: v for k, v in os.environ.items() if k != "TEST_HOOK"}
        p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "alerts", "test", str(f)], capture_output=True,
                           text=True, timeout=60, env=env)
        assert p.returncode == 2 and "TEST_HOOK is not set" in p.stderr and "Traceback" not in p.stderr
    finally:
        ctl.stop()


@pytest.mark.slow
def test_analyze_with_alerts_matches_live_verdicts(real_logs: Path):
    """Offline, the shipped rules give the same verdict as the findings on every real log."""
    for f in sorted(real_logs.glob("*.json")):
        p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", str(f), "--alerts", "--format",
                            "json"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["verdict"] == out["findings_verdict"], f.name
        if out["verdict"] == "stop":
            assert any(a["severity"] == "stop" and a["kind"] == "firing" for a in out["alerts"])
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze",
                        str(real_logs / "ppo_trl_kartik_v1_seed2026.json"), "--alerts", "--fail-on", "stop"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "reward-stop" in p.stdout


WEBHOOK_RULES = """
extends: none
channels:
  hook:
    type: webhook
    url: {base}/hook
    headers: {{Authorization: "Bearer ${{TEST_HOOK_TOKEN}}"}}
    body: {{state: "{{state}}", rule: "{{rule}}", step: "{{step}}", value: "{{value}}", run: "{{run_name}}",
           id: "{{alert_id}}"}}
  stuck: {{type: webhook, url: "http://127.0.0.1:{hole}/hook", timeout: 5}}
rules:
  - name: lr-on
    gauge: learning_rate
    when: "learning_rate > 0.0006"
    severity: warn
"""


@pytest.mark.trains
def test_grpo_webhook_gets_the_firing_and_the_resolved_alert(tmp_path: Path, black_hole):
    """A real TRL GRPO run: a rule on the learning rate (1e-3, linear to 0 over the 4 steps) fires on the first row
    and resolves once the schedule has taken it under 6e-4, whatever the model does; the webhook gets both in its
    templated body with its secret header, a second webhook that never answers costs the training loop nothing, and
    the journal holds every alert first."""
    class Hook(_Hook):
        bodies: list[dict] = []
        auth: list[str] = []

        def do_POST(self) -> None:
            type(self).auth.append(str(self.headers.get("Authorization")))
            super().do_POST()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    rules = tmp_path / "alerts.yaml"
    rules.write_text(WEBHOOK_RULES.format(base=f"http://127.0.0.1:{srv.server_address[1]}", hole=black_hole))
    token = "hook-token-7Hq2SECRET"
    try:
        res = run_trainer(tmp_path, "grpo", "--max-steps", "4", "--alerts", str(rules), "--every", "5",
                          env_extra={"TEST_HOOK_TOKEN": token})
    finally:
        srv.shutdown()
    journal_text = (Path(res["output_dir"]) / "alerts.jsonl").read_text()
    journal = [json.loads(x) for x in journal_text.splitlines()]
    events = [j for j in journal if j["type"] == "alert"]
    assert [e["kind"] for e in events] == ["firing", "resolved"], events
    firing, resolved = events
    assert firing["step"] < resolved["step"] <= res["global_step"]
    # the webhook got both, in its template, typed, with the same alert id, and the secret only in its header
    assert [b["state"] for b in Hook.bodies] == ["firing", "resolved"]
    assert [b["step"] for b in Hook.bodies] == [firing["step"], resolved["step"]]
    assert Hook.bodies[0]["value"] == firing["value"] > 0.0006 > Hook.bodies[1]["value"] == resolved["value"]
    assert Hook.bodies[0]["id"] == Hook.bodies[1]["id"] == firing["id"] and Hook.bodies[0]["rule"] == "lr-on"
    assert Hook.bodies[0]["run"] == "grpo-after"  # the run's name reached the channel
    assert Hook.auth == [f"Bearer {token}"] * 2
    # journal first, then one outcome per alert and channel: sent to the hook, never to the black hole
    seen = set()
    for j in journal:
        if j["type"] == "alert":
            seen.add(j["id"])
        else:
            assert j["alert"] in seen
    outcomes = {(j["alert"], j["channel"]): j["outcome"] for j in journal if j["type"] == "channel"}
    assert {k: v for k, v in outcomes.items() if k[1] == "hook"} == {(firing["id"], "hook"): "sent",
                                                                       (resolved["id"], "hook"): "sent"}
    assert {v for k, v in outcomes.items() if k[1] == "stuck"} <= {"failed", "undelivered"}
    assert (firing["id"], "stuck") in outcomes
    assert res["on_log_seconds"] < 2.0, res["on_log_seconds"]  # the hanging endpoint never reached the loop
    assert token not in journal_text and token not in res["stderr"]
    # the firing also reached W&B (offline), at WARN
    run = read_offline_run(res["run_dir"])
    assert any(a["title"] == firing["title"] and a["level"] == "WARN" for a in run.alerts)
