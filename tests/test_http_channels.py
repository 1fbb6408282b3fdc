"""The webhook, Discord and Teams channels against real HTTP servers on 127.0.0.1 (no mocks of urllib).

What must hold: a firing and a resolved alert arrive in the JSON each service documents (the webhook's templated
body with its headers, Discord's content + embed, Teams' message with an Adaptive Card attachment); an endpoint that
answers 500, refuses or hangs costs training nothing beyond the bounded end-of-training wait, and the alert stays in
the journal; no secret (URL token, header, body secret) reaches the journal, a log line or an error; a bad setting
fails before training with its file, line and a fix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from wandb_rlcluster.alerts import ConfigError, load_config
from wandb_rlcluster.alerts.channel_template import DEFAULT_BODY
from wandb_rlcluster.alerts.channels import AlertMessage, ChannelError
from wandb_rlcluster.alerts.config import AlertConfig
from wandb_rlcluster.alerts.discord import DiscordChannel
from wandb_rlcluster.alerts.notify import build_channels
from wandb_rlcluster.alerts.teams import TeamsChannel
from wandb_rlcluster.alerts.webhook import WebhookChannel
from wandb_rlcluster.core.rollouts import RolloutStats
from wandb_rlcluster.pipeline import Pipeline

from .test_alert_channels import black_hole, dead_port
from .test_rollouts import batch

TOKEN = "tok_9fQxA2LmZr7SECRET"  # a header secret
BODY_SECRET = "rk_77aa55BODYSECRET"  # a body secret (a routing key)
PATH_SECRET = "pathSECRET0a1b2c3d"  # the secret part of a URL


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


class Received:
    """What the loopback server got: (path, headers, parsed JSON) per POST; ``status``: what it answers."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], Any]] = []
        self.lock = threading.Lock()
        self.status = 200
        self.echo = False  # answer with the request's own body and Authorization header (a chatty server)

    def at(self, prefix: str) -> list[tuple[dict[str, str], Any]]:
        with self.lock:
            return [(h, b) for p, h, b in self.posts if p.startswith(prefix)]


@contextlib.contextmanager
def server() -> Iterator[tuple[str, Received]]:
    rec = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with rec.lock:
                rec.posts.append((self.path, dict(self.headers), json.loads(raw)))
            status = rec.status
            if self.path.startswith("/discord") and status == 200:
                status = 204  # Discord answers 204 No Content without ?wait=true
            reply = raw + str(self.headers.get("Authorization")).encode() if rec.echo else b""
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", rec
    finally:
        srv.shutdown()
        srv.server_close()


CHANNELS = """
extends: none
channels:
  pager:
    type: webhook
    url: {base}/hook/${{HOOK_PATH}}
    headers:
      Authorization: "Bearer ${{HOOK_TOKEN}}"
      X-Source: rlcluster
    body:
      routing_key: "${{ROUTING_KEY}}"
      event_action: "{{state}}"
      dedup_key: "{{alert_id}}"
      payload: {{summary: "{{severity}} {{rule}}: {{title}} ({{value:.3g}})", value: "{{value}}", step: "{{step}}",
                run: "{{run_name}}", tags: ["{{gauge}}", "{{metric}}"]}}
    timeout: {timeout}
    retries: 1
  plain: {{type: webhook, url_env: PLAIN_URL, timeout: {timeout}, retries: 1}}
  quiet: {{type: webhook, url_env: QUIET_URL, send_resolved: false, timeout: {timeout}, retries: 1}}
  discord: {{type: discord, webhook_url_env: DISCORD_URL, username: rlcluster, timeout: {timeout}, retries: 1}}
  teams: {{type: teams, webhook_url_env: TEAMS_URL, timeout: {timeout}, retries: 1}}
rules:
  - name: kl-high
    gauge: kl
    when: "kl > 1"
    severity: warn
    title: "KL {{value:.2g}} at step {{step}}"
"""
ALL = ("pager", "plain", "quiet", "discord", "teams")


def env_for(base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timeout: float = 5) -> Path:
    monkeypatch.setenv("HOOK_PATH", PATH_SECRET)
    monkeypatch.setenv("HOOK_TOKEN", TOKEN)
    monkeypatch.setenv("ROUTING_KEY", BODY_SECRET)
    monkeypatch.setenv("PLAIN_URL", f"{base}/plain/{PATH_SECRET}")
    monkeypatch.setenv("QUIET_URL", f"{base}/quiet/{PATH_SECRET}")
    monkeypatch.setenv("DISCORD_URL", f"{base}/discord/api/webhooks/123456789/{PATH_SECRET}")
    monkeypatch.setenv("TEAMS_URL", f"{base}/teams/workflows/1/invoke?api-version=1&sig={PATH_SECRET}")
    f = tmp_path / "alerts.yaml"
    f.write_text(CHANNELS.format(base=base, timeout=timeout))
    return f


def run_rows(alerts: Path, journal: Path, kls: list[float], wait: float = 5.0) -> tuple[list[float], float]:
    """Feed a run's rows through the pipeline (what the callback does on every on_log): the seconds each row
    took, and the seconds the end-of-training close took."""
    p = Pipeline(framework="trl", alerts=str(alerts), journal=journal, use_wandb=False, run_name="grpo-tiny",
                 channel_wait=wait)
    took = []
    for step, kl in enumerate(kls, 1):
        t0 = time.perf_counter()
        p.feed({"kl": kl, "loss": 0.5}, step=step)
        took.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    p.finish()
    return took, time.perf_counter() - t0


def records(journal: Path) -> list[dict]:
    return [json.loads(line) for line in journal.read_text().splitlines()]


def assert_journal_first(recs: list[dict]) -> None:
    """Every channel outcome comes after the alert record it is about (the alert was journaled before any send)."""
    seen: set[str] = set()
    for r in recs:
        if r["type"] == "alert":
            seen.add(r["id"])
        else:
            assert r["alert"] in seen, r


def test_firing_and_resolved_arrive_in_each_services_documented_shape(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    journal = tmp_path / "alerts.jsonl"
    with server() as (base, rec):
        alerts = env_for(base, tmp_path, monkeypatch)
        run_rows(alerts, journal, [0.2, 2.5, 3.0, 0.4, 0.3])
    recs = records(journal)
    assert_journal_first(recs)
    firing = next(r for r in recs if r["type"] == "alert" and r["kind"] == "firing")
    resolved = next(r for r in recs if r["type"] == "alert" and r["kind"] == "resolved")
    outcomes = {(r["alert"], r["channel"]): r["outcome"] for r in recs if r["type"] == "channel"}
    assert outcomes == {**{(firing["id"], c): "sent" for c in ALL},
                        **{(resolved["id"], c): "sent" for c in ALL if c != "quiet"}}

    # the generic webhook: its headers, and its body template rendered with typed whole fields
    (h1, b1), (h2, b2) = rec.at("/hook/")
    assert h1["Authorization"] == f"Bearer {TOKEN}" and h1["X-Source"] == "rlcluster"
    assert h1["Content-Type"].startswith("application/json")
    assert [b1["event_action"], b2["event_action"]] == ["firing", "resolved"]
    assert b1["routing_key"] == BODY_SECRET and b1["dedup_key"] == b2["dedup_key"] == firing["id"]
    assert b1["payload"]["value"] == firing["value"] and isinstance(b1["payload"]["step"], int)
    assert b1["payload"]["step"] == firing["step"] < b2["payload"]["step"] == resolved["step"]
    assert b1["payload"]["summary"] == f"warn kl-high: {firing['title']} ({firing['value']:.3g})"
    assert b1["payload"]["run"] == "grpo-tiny" and b1["payload"]["tags"] == ["kl", "kl"]

    # the default body: every field, typed; the same alert id on the firing and its resolution
    (_, d1), (_, d2) = rec.at("/plain/")
    assert set(d1) == set(DEFAULT_BODY) and d1["source"] == "wandb-rlcluster"
    assert (d1["state"], d2["state"]) == ("firing", "resolved") and d1["alert_id"] == d2["alert_id"] == firing["id"]
    assert d1["severity"] == "warn" and d1["rule"] == "kl-high" and d1["metric"] == "kl"
    assert d1["value"] == firing["value"] and d1["step"] == firing["step"] and d1["run_name"] == "grpo-tiny"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", d1["time"]) and d1["examples"] == []
    assert [b["state"] for _, b in rec.at("/quiet/")] == ["firing"]  # send_resolved: false

    # Discord: content and one embed (title, description, colour, inline fields), no mentions parsed
    (_, c1), (_, c2) = rec.at("/discord/")
    for c in (c1, c2):
        assert set(c) == {"content", "embeds", "allowed_mentions", "username"} and c["username"] == "rlcluster"
        assert c["allowed_mentions"] == {"parse": []} and len(c["content"]) <= 2000 and len(c["embeds"]) == 1
        e = c["embeds"][0]
        assert {"title", "description", "color", "fields"} <= set(e) and len(e["title"]) <= 256
        assert isinstance(e["color"], int) and 0 <= e["color"] <= 0xFFFFFF
        assert all(set(f) == {"name", "value", "inline"} and f["value"] and len(f["value"]) <= 1024
                   for f in e["fields"])
        assert {f["name"]: f["value"] for f in e["fields"]}["Rule"] == "`kl-high`"
    assert "WARN" in c1["embeds"][0]["title"] and "RESOLVED" in c2["embeds"][0]["title"]
    assert c1["embeds"][0]["color"] != c2["embeds"][0]["color"]

    # Teams: a message with one Adaptive Card attachment
    (_, t1), (_, t2) = rec.at("/teams/")
    for t in (t1, t2):
        assert t["type"] == "message" and len(t["attachments"]) == 1
        att = t["attachments"][0]
        assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
        card = att["content"]
        assert card["type"] == "AdaptiveCard" and re.fullmatch(r"1\.\d", card["version"])
        assert all(b["type"] in ("RichTextBlock", "FactSet") for b in card["body"])
        runs = [i for b in card["body"] if b["type"] == "RichTextBlock" for i in b["inlines"]]
        assert all(i["type"] == "TextRun" and isinstance(i["text"], str) for i in runs)
        facts = {f["title"]: f["value"] for b in card["body"] if b["type"] == "FactSet" for f in b["facts"]}
        assert facts["Rule"] == "kl-high" and facts["Run"] == "grpo-tiny"
    head1, head2 = (t["attachments"][0]["content"]["body"][0]["inlines"][0] for t in (t1, t2))
    assert "WARN" in head1["text"] and head1["color"] == "Warning" and head1["weight"] == "Bolder"
    assert "RESOLVED" in head2["text"] and head2["color"] == "Good"

    # the secrets went to the endpoints only
    text = journal.read_text() + caplog.text
    for secret in (TOKEN, BODY_SECRET, PATH_SECRET):
        assert secret not in text


@pytest.mark.parametrize("failure", ["http-500", "refused", "hanging"])
def test_a_failing_endpoint_never_blocks_training_and_the_alert_stays_in_the_journal(
        failure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Every channel points at the failing endpoint: each row still takes milliseconds, the end of training waits at
    most its channel_wait (1.5 s) whatever the send timeout (2 s) and retries, and each alert is journaled with a
    failed or undelivered outcome per channel that says why, with no secret in it."""
    caplog.set_level(logging.DEBUG)
    journal = tmp_path / "alerts.jsonl"
    with contextlib.ExitStack() as stack:
        base, rec = stack.enter_context(server())
        if failure == "http-500":
            rec.status = 500
        elif failure == "refused":
            base = f"http://127.0.0.1:{dead_port()}"
        else:
            base = f"http://127.0.0.1:{stack.enter_context(black_hole())}"
        alerts = env_for(base, tmp_path, monkeypatch, timeout=2)
        took, closing = run_rows(alerts, journal, [0.2, 2.5, 3.0, 0.4, 2.0, 0.1], wait=1.5)
    assert max(took) < 0.5, took  # a row never waits for the network
    assert closing < 1.5 + 1.0, closing  # the bounded end-of-training wait, not timeout x attempts
    recs = records(journal)
    assert_journal_first(recs)
    alerts_ = [r for r in recs if r["type"] == "alert"]
    assert [r["kind"] for r in alerts_] == ["firing", "resolved", "firing", "resolved"]
    outcomes = [r for r in recs if r["type"] == "channel"]
    assert outcomes and all(r["outcome"] in ("failed", "undelivered") and not r["ok"] for r in outcomes)
    first = {r["channel"]: r for r in outcomes if r["alert"] == alerts_[0]["id"]}
    assert set(first) == set(ALL)
    reason = {"http-500": "HTTP 500", "refused": "refused", "hanging": "in flight"}[failure]
    assert all(reason in r["error"] for r in first.values()), [r["error"] for r in first.values()]
    if failure == "http-500":  # one retry each, then failed
        assert all("after 2 attempts" in r["error"] for r in first.values())
    text = journal.read_text() + caplog.text
    for secret in (TOKEN, BODY_SECRET, PATH_SECRET):
        assert secret not in text


def test_an_endpoint_that_echoes_the_request_gets_no_secret_into_the_error() -> None:
    with server() as (base, rec):
        rec.status, rec.echo = 400, True
        url = f"{base}/hook/{PATH_SECRET}"
        ch = WebhookChannel(url, headers={"Authorization": f"Bearer {TOKEN}"},
                            body={"key": "${ROUTING_KEY}", "where": url, "text": "{title}"},
                            env={"ROUTING_KEY": BODY_SECRET}, timeout=2)
        with pytest.raises(ChannelError) as info:
            ch.send(AlertMessage(title="t", text="x", severity="warn", rule="r", gauge="kl", step=1))
    assert rec.posts[0][2]["key"] == BODY_SECRET  # the server did get (and echo) the secrets
    err = str(info.value)
    assert "HTTP 400" in err and not info.value.retryable
    for secret in (TOKEN, BODY_SECRET, PATH_SECRET):
        assert secret not in err and secret not in repr(ch)


BAD = [
    ("unknown key", "    methd: POST\n", 6, "unknown setting 'methd'"),
    ("no url", None, 3, "exactly one of 'url'"),
    ("not http", "    url: ftp://example.com/x\n", 5, "http:// or https://"),
    ("host from env", "    url: https://${HOST_VAR}/x\n", 5, "host written in the file"),
    ("slack url written", "    url: https://hooks.slack.com/services/T0/B0/abc\n", 5, "holds a credential"),
    ("signed url written", "    url: https://prod-1.westus.logic.azure.com/wf?api-version=1&sig=a1B2c3\n", 5,
     "holds a credential"),
    ("token in path", "    url: https://example.com/hooks/AbC123dEf456GhI789jKl012mNo\n", 5, "token-like"),
    ("header secret written", "    headers:\n      Authorization: Bearer sk-live-abcdef1234567890\n", 7,
     "would hold a secret"),
    ("bad env name", "    headers:\n      X-Api-Key: '${api key}'\n", 7, "NAME of an environment variable"),
    ("reserved header", "    headers:\n      Content-Length: '12'\n", 7, "set by the HTTP client"),
    ("body secret written", "    body:\n      routing_key: R0ut1ngKey0123456789abcdefXYZ\n", 7, "would hold a secret"),
    ("bad placeholder", "    body:\n      event: '{state}'\n      text: '{rul}'\n", 8, "did you mean"),
    ("attribute placeholder", "    body:\n      text: '{value.__class__}'\n", 7, "not allowed"),
    ("bad spec", "    body:\n      text: '{value:>999}'\n", 7, "width over"),
    ("retries", "    retries: 99\n", 6, "0 to 10"),
    ("send_resolved", "    send_resolved: maybe\n", 6, "true or false"),
]
SECRETS_IN_BAD = ("abc", "a1B2c3", "AbC123dEf456GhI789jKl012mNo", "sk-live-abcdef1234567890",
                  "R0ut1ngKey0123456789abcdefXYZ")


@pytest.mark.parametrize(("case", "extra", "line", "needle"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_webhook_setting_names_file_line_and_fix(tmp_path: Path, case: str, extra: str | None, line: int,
                                                       needle: str) -> None:
    f = tmp_path / "alerts.yaml"
    url = "" if extra is None or extra.lstrip().startswith("url:") else "    url: https://example.com/hook\n"
    f.write_text("extends: none\nchannels:\n  pager:\n    type: webhook\n" + url + (extra or "") + "rules: []\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    problems = info.value.problems
    assert any(p.startswith(f"{f}:{line}: channel 'pager': ") and needle in p for p in problems), problems
    for secret in SECRETS_IN_BAD:
        assert not any(secret in p.split(": ", 1)[1] for p in problems), problems


@pytest.mark.parametrize(("ctype", "extra", "needle"), [
    ("discord", "", "webhook_url_env"), ("teams", "", "webhook_url_env"),
    ("teams", "    webhook_url_env: TEAMS_URL\n    username: bot\n", "unknown setting 'username'"),
    ("discord", "    webhook_url_env: https://discord.com/api/webhooks/1/x\n", "looks like a URL or a secret"),
    ("teams", "    url: https://prod-1.westus.logic.azure.com/x?sig=1\n", "use 'webhook_url_env: ENV_VAR_NAME'"),
])
def test_a_bad_discord_or_teams_setting_is_refused(tmp_path: Path, ctype: str, extra: str, needle: str) -> None:
    f = tmp_path / "alerts.yaml"
    f.write_text(f"channels:\n  c:\n    type: {ctype}\n{extra}")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert any(p.startswith(f"{f}:") and needle in p for p in info.value.problems), info.value.problems
    assert not any("https://" in p for p in info.value.problems)  # a pasted URL is never repeated


def test_the_cli_validates_before_anything_runs(tmp_path: Path) -> None:
    f = tmp_path / "alerts.yaml"
    f.write_text("channels:\n  pager:\n    type: webhook\n    url: https://example.com/h\n    body: {text: '{rul}'}\n")
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "alerts", "validate", str(f)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and f"{f}:5: channel 'pager': body.text: unknown field {{rul}}" in p.stderr
    assert "Traceback" not in p.stderr


def test_an_unset_variable_turns_the_channel_off_and_every_alert_says_so(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with server() as (base, rec):
        alerts = env_for(base, tmp_path, monkeypatch)
        monkeypatch.delenv("ROUTING_KEY")
        cfg = load_config(alerts)
        _, problems = build_channels(cfg)
        assert problems == ["channel 'pager': environment variable ROUTING_KEY is not set"]
        journal = tmp_path / "alerts.jsonl"
        run_rows(alerts, journal, [2.0, 0.1])
    off = [r for r in records(journal) if r["type"] == "channel" and r["channel"] == "pager"]
    assert [r["outcome"] for r in off] == ["off", "off"] and "ROUTING_KEY is not set" in off[0]["error"]
    assert not rec.at("/hook/") and len(rec.at("/teams/")) == 2  # the other channels are unaffected


def test_a_checkpoint_keeps_the_settings_and_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with server() as (base, _):
        cfg = load_config(env_for(base, tmp_path, monkeypatch))
    stored = json.dumps(cfg.to_dict())
    for secret in (TOKEN, BODY_SECRET, PATH_SECRET):
        assert secret not in stored
    again = AlertConfig.from_dict(json.loads(stored))
    assert again.channels["pager"].options == cfg.channels["pager"].options
    assert again.channels["pager"].options["headers"]["Authorization"] == "Bearer ${HOOK_TOKEN}"


def test_alerts_test_command_reaches_every_http_channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with server() as (base, rec):
        alerts = env_for(base, tmp_path, monkeypatch)
        p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "alerts", "test", str(alerts)],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert all(f"OK    {c}" in p.stdout for c in ALL)
    assert rec.at("/hook/")[0][1]["payload"]["summary"].startswith("info test: rlcluster test alert")
    assert all(s not in p.stdout + p.stderr for s in (TOKEN, BODY_SECRET, PATH_SECRET))


def test_model_text_cannot_ping_or_forge_links_in_discord_or_teams() -> None:
    """A completion behind an alert is untrusted: Discord parses no mention and shows its markdown as text; Teams
    gets it in plain-text runs; the webhook's {examples} is the list of lines, typed."""
    stats = RolloutStats()
    stats.update(batch(["@everyone **pay** [click](http://evil.example) # now", "b", "c", "d"], {"r": [9, 1, 1, 1]},
                       lengths=[12, 1, 1, 1]))
    msg = AlertMessage(title="Reward: reward-outliers", text="read the *examples*", severity="warn",
                       rule="reward-warn", gauge="reward", step=7, evidence=tuple(stats.evidence()),
                       value=float("nan"))
    discord = DiscordChannel("http://127.0.0.1:9/api/webhooks/1/tokentokentoken").payload(msg)
    description = discord["embeds"][0]["description"]
    assert "Examples from step 7" in description and discord["allowed_mentions"] == {"parse": []}
    assert r"\*\*pay\*\* \[click\](http://evil.example)" in description and "read the \\*examples\\*" in description
    assert "[click](" not in description.replace("\\[click\\](", "")
    card = TeamsChannel("http://127.0.0.1:9/workflows/x?sig=abc").card(msg)
    runs = [i["text"] for b in card["body"] if b["type"] == "RichTextBlock" for i in b["inlines"]]
    assert any("[click](http://evil.example)" in t for t in runs)  # as typed: a TextRun shows no markdown
    assert {b["type"] for b in card["body"]} == {"RichTextBlock", "FactSet"}
    body = WebhookChannel("http://127.0.0.1:9/h").payload(msg)
    assert body["value"] == "nan" and json.loads(json.dumps(body, allow_nan=False)) == body  # valid JSON
    assert isinstance(body["examples"], list) and any("@everyone" in x for x in body["examples"])


@contextlib.contextmanager
def trickling(status: int) -> Iterator[str]:
    """A server that answers ``status`` and then its body one byte every 0.2 s (each byte well inside the timeout),
    the first bytes a terminal escape."""

    class Trickle(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            with contextlib.suppress(OSError):
                for b in b"\x1b[2J" + b"y" * 996:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(0.2)

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/hook"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("status", [200, 500])
def test_an_endpoint_that_trickles_its_answer_cannot_hold_the_channel(status: int) -> None:
    """Reading 200 bytes of the answer at 0.2 s a byte held a send (``alerts test``, the channel worker) for 40 s
    with a 1 s timeout; the error printed the endpoint's terminal escapes as they came."""
    with trickling(status) as url:
        ch = WebhookChannel(url, timeout=1)
        start = time.monotonic()
        msg = AlertMessage(title="t", text="x", severity="warn", rule="r", gauge="kl", step=1)
        if status == 200:
            ch.send(msg)
        else:
            with pytest.raises(ChannelError) as info:
                ch.send(msg)
            assert "HTTP 500" in str(info.value) and "\x1b" not in str(info.value)
        assert time.monotonic() - start < 5
