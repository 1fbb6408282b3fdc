"""Alert channels against real local servers (HTTP, SMTP, dead and black-hole endpoints) on 127.0.0.1.

Why real servers: the properties that matter (payload on the wire, timeouts bounding a hung peer,
secrets never leaking into error text) are exactly what mocks of urllib/smtplib would hide.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from email import message_from_bytes
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wandb_rlcluster.alerts.channels import (
    AlertMessage,
    AsyncDispatcher,
    ChannelError,
    EmailChannel,
    SlackWebhookChannel,
)

SECRET_PATH = "/services/T0SECRET/B0SECRET/xoxSuperSecretToken123"
PASSWORD = "hunter2-very-secret-pw"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib honours *_proxy env vars; a CI proxy must not intercept 127.0.0.1."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def _msg(i: int = 0, severity: str = "stop") -> AlertMessage:
    return AlertMessage(
        title=f"KL blow-up #{i}",
        text="KL divergence 12.5 > 10 for 3 consecutive steps <policy drifting> & rising",
        severity=severity,
        rule="kl_ceiling",
        gauge="kl",
        step=1200 + i,
        run_name="grpo-qwen-0.5b",
        run_url="https://wandb.ai/team/proj/runs/abc123",
        value=12.5,
    )


# ------------------------------------------------------------------------------------------------ servers


class _Recorder:
    """Shared state for the HTTP handler: scripted status codes and recorded POSTs."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.statuses: list[int] = []  # consumed front to back; 200 when empty
        self.lock = threading.Lock()
        self.event = threading.Event()


@contextlib.contextmanager
def http_server() -> Iterator[tuple[str, _Recorder]]:
    rec = _Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with rec.lock:
                rec.bodies.append(body)
                rec.paths.append(self.path)
                status = rec.statuses.pop(0) if rec.statuses else 200
            reply = b"ok" if status == 200 else b"server_error"
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
            rec.event.set()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", rec
    finally:
        srv.shutdown()
        srv.server_close()


@contextlib.contextmanager
def black_hole() -> Iterator[int]:
    """Accepts TCP connections and never sends or reads a byte."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    lsock.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        t.join(1)
        for c in held:
            c.close()
        lsock.close()


@contextlib.contextmanager
def closing_server() -> Iterator[int]:
    """Accepts TCP connections and closes each at once, before any response."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    lsock.settimeout(0.1)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                continue
            conn.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        t.join(1)
        lsock.close()


def dead_port() -> int:
    """A port that had a listener a moment ago and now has none (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Results:
    """Thread-safe on_result sink."""

    def __init__(self) -> None:
        self.items: list[tuple[str, AlertMessage, bool, str]] = []
        self.lock = threading.Lock()

    def __call__(self, name: str, msg: AlertMessage, ok: bool, error: str) -> None:
        with self.lock:
            self.items.append((name, msg, ok, error))

    def for_channel(self, name: str) -> list[tuple[str, AlertMessage, bool, str]]:
        with self.lock:
            return [r for r in self.items if r[0] == name]


# ------------------------------------------------------------------------------------------------ Slack


def test_slack_payload_arrives_as_block_kit_json() -> None:
    with http_server() as (base, rec):
        ch = SlackWebhookChannel(base + SECRET_PATH, username="rlcluster", channel="#training", timeout=2)
        ch.send(_msg())
    assert rec.paths == [SECRET_PATH]
    payload = json.loads(rec.bodies[0])
    assert payload["username"] == "rlcluster" and payload["channel"] == "#training"
    assert ":rotating_light:" in payload["text"] and "KL blow-up #0" in payload["text"]
    kinds = [b["type"] for b in payload["blocks"]]
    assert kinds == ["header", "section", "context"]
    header = payload["blocks"][0]["text"]["text"]
    assert header.startswith(":rotating_light:") and "STOP" in header and "KL blow-up #0" in header
    section = payload["blocks"][1]["text"]["text"]
    assert "&lt;policy drifting&gt; &amp; rising" in section  # mrkdwn control characters escaped
    context = payload["blocks"][2]["elements"][0]["text"]
    for needle in ("kl_ceiling", "`kl`", "1200", "12.5", "<https://wandb.ai/team/proj/runs/abc123|grpo-qwen-0.5b>"):
        assert needle in context


@pytest.mark.parametrize(
    ("severity", "emoji"),
    [("info", ":information_source:"), ("warn", ":warning:"), ("resolved", ":white_check_mark:"), ("odd", ":bell:")],
)
def test_slack_emoji_per_severity(severity: str, emoji: str) -> None:
    payload = SlackWebhookChannel("https://hooks.example/x").payload(_msg(severity=severity))
    assert payload["blocks"][0]["text"]["text"].startswith(emoji)
    assert payload["text"].startswith(emoji)


def test_slack_500_is_retried_then_reported_failed_without_secret() -> None:
    results = _Results()
    with http_server() as (base, rec):
        rec.statuses = [500, 500, 500]
        ch = SlackWebhookChannel(base + SECRET_PATH, timeout=2)
        d = AsyncDispatcher([ch], retries=2, backoff=0.01, on_result=results)
        assert d.submit(_msg())
        assert d.flush(5)
        d.close(1)
    assert len(rec.bodies) == 3  # first try + 2 retries
    [(name, _, ok, err)] = results.items
    assert name == "slack" and not ok
    assert "500" in err and "3 attempts" in err
    assert "xoxSuperSecretToken123" not in err and SECRET_PATH not in err
    assert d.stats == {"sent": 0, "failed": 1, "dropped": 0, "retried": 2}


def test_slack_transient_errors_recover_and_4xx_is_not_retried() -> None:
    results = _Results()
    with http_server() as (base, rec):
        rec.statuses = [500, 429, 200, 400]
        ch = SlackWebhookChannel(base + SECRET_PATH, timeout=2)
        d = AsyncDispatcher([ch], retries=3, backoff=0.01, on_result=results)
        d.submit(_msg(1))  # 500, 429, then 200 -> sent after 2 retries
        d.submit(_msg(2))  # 400 -> permanent, no retry
        assert d.flush(5)
        d.close(1)
    assert len(rec.bodies) == 4
    assert [(r[1].step, r[2]) for r in results.items] == [(1201, True), (1202, False)]
    assert "HTTP 400" in results.items[1][3]
    assert d.stats == {"sent": 1, "failed": 1, "dropped": 0, "retried": 2}


def test_slack_direct_send_raises_channel_error_without_secret() -> None:
    ch = SlackWebhookChannel(f"http://127.0.0.1:{dead_port()}{SECRET_PATH}", timeout=1)
    with pytest.raises(ChannelError) as info:
        ch.send(_msg())
    assert "xoxSuperSecretToken123" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_slack_rejects_non_http_url_without_echoing_it() -> None:
    with pytest.raises(ValueError) as info:
        SlackWebhookChannel("file:///etc/xoxSuperSecretToken123")
    assert "xoxSuperSecretToken123" not in str(info.value)


# ------------------------------------------------------------------------------------------------ e-mail


@pytest.fixture
def smtp_server() -> Iterator[tuple[int, list]]:
    """aiosmtpd on 127.0.0.1 with AUTH (no TLS needed locally); yields (port, received envelopes)."""
    pytest.importorskip("aiosmtpd")
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    received: list = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            received.append(envelope)
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):
        login, password = getattr(auth_data, "login", None), getattr(auth_data, "password", None)
        # handled=False: let aiosmtpd answer "535" itself instead of leaving the client hanging.
        return AuthResult(success=(login, password) == (b"alerts", PASSWORD.encode()), handled=False)

    last: Exception | None = None
    for _ in range(5):  # Controller needs a concrete port; retry on the rare race for a free one
        ctl = Controller(
            Handler(), hostname="127.0.0.1", port=dead_port(), authenticator=authenticator, auth_require_tls=False
        )
        try:
            ctl.start()
        except Exception as exc:  # noqa: BLE001 - pragma: no cover - port race
            last = exc
            continue
        try:
            yield ctl.port, received
        finally:
            ctl.stop()
        return
    raise RuntimeError(f"could not start SMTP server: {last}")  # pragma: no cover


def test_email_arrives_with_subject_recipients_and_body(smtp_server: tuple[int, list]) -> None:
    port, received = smtp_server
    results = _Results()
    ch = EmailChannel(
        "127.0.0.1",
        port,
        "rlcluster@example.org",
        ["oncall@example.org", "ml@example.org"],
        username="alerts",
        password=PASSWORD,
        timeout=5,
        allow_plaintext_auth=True,  # a relay on this machine, without TLS: the explicit opt-in
    )
    d = AsyncDispatcher([ch], retries=0, on_result=results)
    d.submit(_msg(3))
    assert d.flush(10)
    d.close(1)
    assert results.items and results.items[0][2], results.items
    [env] = received
    assert env.mail_from == "rlcluster@example.org"
    assert sorted(env.rcpt_tos) == ["ml@example.org", "oncall@example.org"]
    em = message_from_bytes(env.content, policy=default_policy)
    assert em["Subject"] == "[rlcluster STOP] KL blow-up #3"
    body = em.get_content()
    for needle in ("KL divergence 12.5", "kl_ceiling", "gauge: kl", "1203", "https://wandb.ai/team/proj/runs/abc123"):
        assert needle in body


def test_email_bad_password_fails_once_without_leaking(smtp_server: tuple[int, list]) -> None:
    port, received = smtp_server
    results = _Results()
    wrong = "wrong-" + PASSWORD
    ch = EmailChannel("127.0.0.1", port, "a@example.org", ["b@example.org"], username="alerts", password=wrong,
                      allow_plaintext_auth=True)
    assert PASSWORD not in repr(ch) and "***" in repr(ch)
    d = AsyncDispatcher([ch], retries=3, backoff=0.01, on_result=results)
    d.submit(_msg())
    assert d.flush(10)
    d.close(1)
    [(_, _, ok, err)] = results.items
    assert not ok and "535" in err  # auth refused is permanent: not retried
    assert wrong not in err and PASSWORD not in err
    assert d.stats["retried"] == 0 and not received


def test_email_rejects_conflicting_tls_options() -> None:
    with pytest.raises(ValueError):
        EmailChannel("h", 25, "a@b", ["c@d"], starttls=True, ssl=True)
    with pytest.raises(ValueError):
        EmailChannel("h", 25, "a@b", [])
    with pytest.raises(ValueError, match="clear text"):  # a password never goes out without TLS unless opted in
        EmailChannel("h", 25, "a@b", ["c@d"], username="u", password=PASSWORD)


# ------------------------------------------------------------------------------------------------ dispatcher


def test_dead_and_black_hole_endpoints_never_block_submit_or_healthy_channel() -> None:
    results = _Results()
    timeout = 0.3
    with http_server() as (base, rec), black_hole() as hole_port:
        hole = SlackWebhookChannel(f"http://127.0.0.1:{hole_port}{SECRET_PATH}", name="hole", timeout=timeout)
        dead = SlackWebhookChannel(f"http://127.0.0.1:{dead_port()}{SECRET_PATH}", name="dead", timeout=timeout)
        hole_mail = EmailChannel(
            "127.0.0.1", hole_port, "a@example.org", ["b@example.org"], name="hole-mail",
            username="u", password=PASSWORD, timeout=timeout, allow_plaintext_auth=True,
        )  # fmt: skip
        healthy = SlackWebhookChannel(base + "/healthy", name="healthy", timeout=2)
        d = AsyncDispatcher([hole, dead, hole_mail, healthy], max_queue=5, retries=1, backoff=0.05, on_result=results)

        worst = 0.0
        t0 = time.perf_counter()
        accepted = 0
        for i in range(200):
            s = time.perf_counter()
            accepted += d.submit(_msg(i))
            worst = max(worst, time.perf_counter() - s)
        total = time.perf_counter() - t0
        assert worst < 0.05 and total < 0.5, (worst, total)
        assert accepted < 200
        assert d.stats["dropped"] == 200 - accepted

        # Every channel gets its first attempt before anyone's retries: message 0 reaches the healthy channel
        # after one timeout per black hole, not after their retries.
        assert rec.event.wait(timeout * 2 + 0.5)

        s = time.perf_counter()
        drained = d.flush(timeout=1.0)
        assert time.perf_counter() - s < 1.3
        assert not drained  # each message costs ~2 x 2 x timeout on the worker; 5+ are queued

        s = time.perf_counter()
        d.close(timeout=0.5)
        assert time.perf_counter() - s < 0.9
        assert not d.submit(_msg(999))  # closed: refused, counted

    stats = d.stats
    assert stats["dropped"] >= 200 - accepted + 1
    assert stats["sent"] >= 1
    healthy_results = results.for_channel("healthy")
    assert any(r[2] for r in healthy_results)
    # The healthy channel only "fails" for messages abandoned by close(), never because of its neighbours.
    assert all(r[2] or "dispatcher closed" in r[3] for r in healthy_results)
    for name in ("hole", "dead", "hole-mail"):
        outcomes = results.for_channel(name)
        assert outcomes and not any(r[2] for r in outcomes), name
    errors = [r[3] for r in results.items if not r[2]]
    assert any("timed out" in e for e in errors)
    assert any("refused" in e.lower() for e in errors)
    for e in errors:
        assert "xoxSuperSecretToken123" not in e and SECRET_PATH not in e and PASSWORD not in e


def test_black_hole_cost_is_bounded_by_timeout_times_attempts() -> None:
    results = _Results()
    with black_hole() as hole_port:
        ch = SlackWebhookChannel(f"http://127.0.0.1:{hole_port}{SECRET_PATH}", timeout=0.2)
        d = AsyncDispatcher([ch], retries=2, backoff=0.01, on_result=results)
        s = time.perf_counter()
        d.submit(_msg())
        assert d.flush(5)
        elapsed = time.perf_counter() - s
        d.close(1)
    assert 0.55 <= elapsed < 0.2 * 3 + 0.5, elapsed
    [(_, _, ok, err)] = results.items
    assert not ok and "timed out" in err and "xoxSuperSecretToken123" not in err


def test_repr_masks_secrets() -> None:
    slack = SlackWebhookChannel("https://hooks.slack.com" + SECRET_PATH)
    mail = EmailChannel("smtp.example.org", 587, "a@b", ["c@d"], username="u", password=PASSWORD, starttls=True)
    d = AsyncDispatcher([slack, mail])
    try:
        for text in (repr(slack), repr(mail), repr(d)):
            assert "xoxSuperSecretToken123" not in text and "T0SECRET" not in text and PASSWORD not in text
        assert "hooks.slack.com" in repr(slack)
    finally:
        d.close(1)


def test_misbehaving_channel_and_callback_do_not_kill_worker() -> None:
    class Boom:
        name = "boom"

        def send(self, msg: AlertMessage) -> None:
            raise KeyError("nope")

    class Good:
        name = "good"

        def __init__(self) -> None:
            self.got: list[int] = []

        def send(self, msg: AlertMessage) -> None:
            self.got.append(msg.step)

    calls: list[str] = []

    def on_result(name: str, msg: AlertMessage, ok: bool, error: str) -> None:
        calls.append(name)
        raise RuntimeError("journal down")

    good = Good()
    d = AsyncDispatcher([Boom(), good], retries=1, backoff=0.0, on_result=on_result)
    for i in range(3):
        assert d.submit(_msg(i))
    assert d.flush(5)
    d.close(1)
    assert good.got == [1200, 1201, 1202]
    assert d.stats == {"sent": 3, "failed": 3, "dropped": 0, "retried": 3}
    assert calls.count("boom") == 3 and calls.count("good") == 3


def test_close_is_bounded_and_idempotent() -> None:
    d = AsyncDispatcher([])
    d.submit(_msg())
    d.close(1)
    d.close(1)
    assert d.stats["dropped"] == 0
    assert not d.submit(_msg())


def test_close_leaves_no_worker_behind_yet_never_waits_for_a_hanging_send() -> None:
    """on_train_end closes with what is left of its wait, often 0 s: an idle worker must still be gone when close
    returns (a leftover 'rlcluster-alerts' thread after training was seen on a loaded CI machine), while a worker
    stuck in a send costs no more than the deadline."""
    class Delivered:
        name = "ok"

        def send(self, msg: AlertMessage) -> None:
            pass

    idle = AsyncDispatcher([Delivered()])
    assert idle.submit(_msg()) and idle.flush(5)
    idle.close(0.0)
    assert not idle._thread.is_alive()

    release = threading.Event()

    class Hanging:
        name = "hang"

        def send(self, msg: AlertMessage) -> None:
            release.wait(30)

    stuck = AsyncDispatcher([Hanging()], retries=0)
    try:
        assert stuck.submit(_msg())
        deadline = time.monotonic() + 5
        while not stuck._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        stuck.close(0.0)
        assert time.monotonic() - t0 < 0.5 and stuck._thread.is_alive()
    finally:
        release.set()
    stuck._thread.join(5)
    assert not stuck._thread.is_alive()
