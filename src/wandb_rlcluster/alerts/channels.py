"""Direct alert channels (Slack incoming webhook, e-mail) and an off-thread dispatcher.

Why this exists: W&B alerts are not always routed where a team looks, so the health monitor can also
push alerts straight to Slack or e-mail.  Delivery must never slow down or crash the training loop,
so every network call happens on one daemon worker thread behind a bounded, never-blocking queue,
and each channel's failures cost only its own (bounded) retries.

Secrets (the webhook URL, which *is* the credential, and the SMTP password) are kept out of every
repr, exception message, log line and ``on_result`` error text.
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import logging
import re
import smtplib
import ssl as ssl_mod
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Protocol, runtime_checkable

from ..core.rollouts import evidence_lines
from ..core.text import clean_text

__all__ = [
    "AlertMessage",
    "AsyncDispatcher",
    "Channel",
    "ChannelError",
    "EmailChannel",
    "SlackWebhookChannel",
]

log = logging.getLogger(__name__)

SEVERITIES = ("info", "warn", "stop", "resolved")
_SLACK_EMOJI = {
    "info": ":information_source:",
    "warn": ":warning:",
    "stop": ":rotating_light:",
    "resolved": ":white_check_mark:",
}
_DEFAULT_EMOJI = ":bell:"
_MASK = "***"
_MAX_ERROR_BODY = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class AlertMessage:
    """One alert, already rendered to human text by the monitor; channels only format it."""

    title: str
    text: str
    severity: str  # "info" | "warn" | "stop" | "resolved"
    rule: str
    gauge: str
    step: int
    run_name: str | None = None
    run_url: str | None = None
    value: float | None = None
    #: example completions behind the alert (rollout evidence): dicts as RolloutStats.evidence() gives them
    evidence: tuple[Any, ...] = ()
    evidence_text: bool = True  # False: the examples' numbers only, no prompt/completion text
    #: the manual's page for the rule (``core/doc_links.py``): what it means, what to do, how to tune it
    doc: str | None = None
    metric: str = ""  # the logged key the rule read ("" for a forwarded finding without one)
    state: str = "firing"  # "firing" | "resolved": a resolved alert goes only to channels that send_resolved
    #: the journal id of the firing alert (a resolved message carries its firing's id, to close the same incident)
    alert_id: str = ""
    project: str | None = None
    time: float = 0.0  # when the engine saw it (seconds since the epoch; 0: unknown)

    def evidence_lines(self, width: int = 300) -> list[str]:
        return evidence_lines(self.evidence, with_text=self.evidence_text, width=width) if self.evidence else []


class ChannelError(RuntimeError):
    """A delivery failure whose message is safe to journal (no secrets).

    ``retryable`` is False for permanent failures (bad payload, auth refused) so the dispatcher does
    not waste the worker's time on them; ``retry_after`` carries a server-requested delay (HTTP 429).
    """

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@runtime_checkable
class Channel(Protocol):
    """A destination. ``send`` is synchronous and raises on failure; only the dispatcher thread calls it."""

    name: str

    def send(self, msg: AlertMessage) -> None: ...


def _redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret (longest first, so substrings cannot leak a tail)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text


def _severity_label(severity: str) -> str:
    return (severity or "info").strip().upper() or "INFO"


def _one_line(text: str) -> str:
    """Collapse newlines: headers and Slack header blocks must be single-line; control characters (an endpoint's
    answer with terminal escapes, printed by ``alerts test`` and the training log) become ``?``."""
    return " ".join(_CONTROL.sub("?", str(text)).split())


def _first_bytes(resp: Any) -> str:
    """The start of a response body, for an error message: one read of what has arrived (``read1``), never a wait
    for the rest, so an endpoint that trickles its answer a byte at a time cannot hold the channel past its timeout."""
    read = getattr(resp, "read1", None) or resp.read
    return str(read(_MAX_ERROR_BODY).decode("utf-8", "replace"))


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _reason(exc: object) -> str:
    """A failure's reason without the exception's own text where that text may quote the URL or the
    request (http.client's InvalidURL, urllib's messages): the errno text, or just the exception class."""
    if isinstance(exc, str):
        return exc
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, (http.client.RemoteDisconnected, ConnectionError)):
        return "the server closed the connection without a response"
    return type(exc).__name__


def _fmt_value(value: float | None) -> str | None:
    if value is None:
        return None
    try:
        return f"{float(value):.6g}"
    except (TypeError, ValueError):
        return str(value)


# --------------------------------------------------------------------------------------------- Slack


def _slack_escape(text: str) -> str:
    """Slack mrkdwn treats &, <, > as control characters (links, mentions); escape user text."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Webhooks never redirect legitimately; following one could re-send the payload elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def url_display(url: str, what: str) -> str:
    """``scheme://host:port/***``: how errors show a webhook URL whose path or query may be the credential.
    ValueError (never quoting the URL) unless it is an http(s) URL with a host."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        raise ValueError(f"{what} URL is malformed") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} URL must be an http(s) URL with a host")
    return f"{parts.scheme}://{parts.hostname}{port}/{_MASK}"


def url_secrets(url: str) -> list[str]:
    """The pieces of a webhook URL to mask in any text: the URL, its path and query (also quoted and unquoted),
    its user:password, and each token-like path segment."""
    parts = urllib.parse.urlsplit(url)
    secrets = [url, parts.query, parts.netloc if "@" in parts.netloc else ""]
    for piece in (parts.path, parts.query):
        if len(piece) > 1:
            secrets += [piece, urllib.parse.unquote(piece), urllib.parse.quote(piece)]
    secrets += [seg for seg in parts.path.split("/") if len(seg) >= 8]  # each token-like path segment
    secrets += [v for _, v in urllib.parse.parse_qsl(parts.query) if len(v) >= 8]  # a sig=..., token=...
    return secrets


def post_json(opener: urllib.request.OpenerDirector, url: str, payload: Any, *, timeout: float, name: str,
              display: str, redact: Callable[[str], str], headers: dict[str, str] | None = None) -> None:
    """POST ``payload`` as JSON; return on a 2xx, else raise a redacted ChannelError (retryable for 5xx, 408, 429,
    timeouts and refused or reset connections; not for other 4xx or a redirect, which is never followed)."""
    data = json.dumps(payload).encode("utf-8")
    req = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/json; charset=utf-8", "User-Agent": "wandb-rlcluster-alerts", **(headers or {})})
    try:
        with opener.open(req, timeout=timeout) as resp:
            status = resp.status
            body = "" if 200 <= status < 300 else _first_bytes(resp)
    except urllib.error.HTTPError as exc:
        status = exc.code
        try:
            body = _first_bytes(exc)
        except Exception:  # noqa: BLE001 - the body is only for the message; the status decides
            body = ""
        finally:
            exc.close()
        retry_after = None
        if status == 429:
            try:
                retry_after = float(exc.headers.get("Retry-After", "") or 1.0)
            except (TypeError, ValueError):
                retry_after = 1.0
        # 4xx (except timeout / rate limit) is a permanent problem with the request or the webhook.
        retryable = status >= 500 or status in (408, 429)
        raise ChannelError(redact(f"{name}: HTTP {status} from {display}: {_one_line(body)}"),
                           retryable=retryable, retry_after=retry_after) from None
    except urllib.error.URLError as exc:
        raise ChannelError(redact(f"{name}: cannot reach {display}: {_reason(exc.reason)}")) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # timeouts, resets, garbled responses
        raise ChannelError(redact(f"{name}: {_reason(exc)} talking to {display}")) from None
    if not 200 <= status < 300:
        raise ChannelError(redact(f"{name}: HTTP {status} from {display}: {_one_line(body)}"), retryable=status >= 500)


class SlackWebhookChannel:
    """POST an alert to a Slack incoming webhook with the standard library only."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "slack",
        timeout: float = 5.0,
        username: str | None = None,
        channel: str | None = None,
    ) -> None:
        self._display = url_display(url, "Slack webhook")  # never the URL itself: it is the credential
        self.name = name
        self.timeout = float(timeout)
        self.username = username
        self.channel = channel
        self._url = url
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return f"SlackWebhookChannel(name={self.name!r}, url={self._display!r}, timeout={self.timeout})"

    def redact(self, text: str) -> str:
        """Mask the webhook URL and its path and query (the token part), quoted or not, in arbitrary text."""
        return _redact(text, url_secrets(self._url))

    def payload(self, msg: AlertMessage) -> dict:
        """Slack incoming-webhook body: plain ``text`` fallback for notifications plus Block Kit blocks."""
        emoji = _SLACK_EMOJI.get(msg.severity, _DEFAULT_EMOJI)
        label = _severity_label(msg.severity)
        title = _one_line(msg.title)
        context = [f"*rule* `{_slack_escape(msg.rule)}`", f"*gauge* `{_slack_escape(msg.gauge)}`", f"*step* {msg.step}"]
        value = _fmt_value(msg.value)
        if value is not None:
            context.append(f"*value* {value}")
        if msg.run_url:
            link_text = _slack_escape((msg.run_name or "run").replace("|", "/"))
            context.append(f"<{_slack_escape(msg.run_url).replace('|', '%7C')}|{link_text}>")
        elif msg.run_name:
            context.append(f"*run* {_slack_escape(msg.run_name)}")
        if msg.doc:  # an address Slack can open becomes a link; a page in the project stays its path
            if re.match(r"https?://", msg.doc):
                context.append(f"<{_slack_escape(msg.doc).replace('|', '%7C')}|rule docs>")
            else:
                context.append(f"*docs* `{_slack_escape(msg.doc)}`")
        section = _truncate(_slack_escape(msg.text), 3000) or " "  # Slack rejects empty section text
        examples = msg.evidence_lines()
        body: dict = {
            "text": _truncate(f"{emoji} [{label}] {title}: {msg.text}", 3000),
            "blocks": [
                {
                    "type": "header",
                    "text": {"type": "plain_text", "text": _truncate(f"{emoji} {label}: {title}", 150), "emoji": True},
                },
                {"type": "section", "text": {"type": "mrkdwn", "text": section}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": _truncate(" · ".join(context), 3000)}]},
            ],
        }
        if examples:  # the completions behind the alert, escaped (mrkdwn and control characters), one per line
            lines = "\n".join(f"• {_slack_escape(x)}" for x in examples)
            body["blocks"].insert(2, {"type": "section", "text": {
                "type": "mrkdwn", "text": _truncate(f"*Examples from step {msg.step}*\n{lines}", 3000)}})
            # model output is untrusted: escaped in the fallback text too (no <!channel> pings, no forged links)
            body["text"] = _truncate(body["text"] + "\nExamples:\n" + "\n".join(map(_slack_escape, examples)), 3000)
        if self.username:
            body["username"] = self.username
        if self.channel:
            body["channel"] = self.channel
        return body

    def send(self, msg: AlertMessage) -> None:
        post_json(self._opener, self._url, self.payload(msg), timeout=self.timeout, name=self.name,
                  display=self._display, redact=self.redact)


# --------------------------------------------------------------------------------------------- e-mail


class EmailChannel:
    """Send a plain-text alert e-mail through an SMTP relay (smtplib)."""

    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        recipients: list[str],
        *,
        name: str = "email",
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        ssl: bool = False,
        timeout: float = 10.0,
        allow_plaintext_auth: bool = False,
    ) -> None:
        if starttls and ssl:
            raise ValueError("EmailChannel: use either starttls=True or ssl=True, not both")
        if (username or password) and not (starttls or ssl) and not allow_plaintext_auth:
            raise ValueError("EmailChannel: SMTP login without TLS would send the password in clear text; use "
                             "starttls=True or ssl=True, or allow_plaintext_auth=True for a local relay")
        recipients = [r for r in recipients if r]
        if not recipients:
            raise ValueError("EmailChannel: at least one recipient is required")
        self.name = name
        self.host = host
        self.port = int(port)
        self.sender = sender
        self.recipients = list(recipients)
        self.username = username
        self._password = password
        self.starttls = starttls
        self.ssl = ssl
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        pw = _MASK if self._password else None
        return (
            f"EmailChannel(name={self.name!r}, host={self.host!r}, port={self.port}, sender={self.sender!r}, "
            f"recipients={self.recipients!r}, username={self.username!r}, password={pw!r}, "
            f"starttls={self.starttls}, ssl={self.ssl})"
        )

    def redact(self, text: str) -> str:
        """Mask the password, also as SMTP AUTH carries it (base64 for LOGIN, and PLAIN's user\\0password)."""
        pw = self._password or ""
        if not pw:
            return text
        user = self.username or ""
        forms = [pw]
        for raw in (pw, f"\0{user}\0{pw}", f"{user}\0{pw}"):
            b64 = base64.b64encode(raw.encode("utf-8")).decode("ascii")
            forms += [b64, b64.rstrip("=")]
        return _redact(text, forms)

    def build(self, msg: AlertMessage) -> EmailMessage:
        """Render the e-mail; subject like ``[rlcluster STOP] <title>`` so filters can key on severity."""
        em = EmailMessage()
        em["Subject"] = _truncate(f"[rlcluster {_severity_label(msg.severity)}] {_one_line(msg.title)}", 250)
        em["From"] = self.sender
        em["To"] = ", ".join(self.recipients)
        em["Date"] = formatdate(localtime=True)
        em["Message-ID"] = make_msgid(domain="rlcluster.local")
        lines = [msg.text, "", f"rule:  {msg.rule}", f"gauge: {msg.gauge}", f"step:  {msg.step}"]
        examples = msg.evidence_lines()
        if examples:
            lines[1:1] = ["", f"Examples from step {msg.step}:", *(f"- {x}" for x in examples)]
        value = _fmt_value(msg.value)
        if value is not None:
            lines.append(f"value: {value}")
        if msg.run_name:
            lines.append(f"run:   {msg.run_name}")
        if msg.run_url:
            lines.append(f"link:  {msg.run_url}")
        if msg.doc:
            lines.append(f"docs:  {msg.doc}")
        em.set_content("\n".join(lines) + "\n")
        return em

    def send(self, msg: AlertMessage) -> None:
        em = self.build(msg)
        where = f"{self.host}:{self.port}"
        try:
            context = ssl_mod.create_default_context() if (self.ssl or self.starttls) else None
            if self.ssl:
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with smtp:
                if self.starttls:
                    smtp.starttls(context=context)
                if self.username:
                    smtp.login(self.username, self._password or "")
                refused = smtp.send_message(em, from_addr=self.sender, to_addrs=self.recipients)
        except smtplib.SMTPRecipientsRefused as exc:
            raise ChannelError(
                self.redact(f"{self.name}: all recipients refused by {where}: {sorted(exc.recipients)}"),
                retryable=False,
            ) from None
        except smtplib.SMTPResponseException as exc:
            detail = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else exc.smtp_error
            raise ChannelError(
                self.redact(f"{self.name}: SMTP {exc.smtp_code} from {where}: {_one_line(str(detail))}"),
                retryable=exc.smtp_code < 500,  # 5xx: auth refused, policy reject — retrying won't help
            ) from None
        except UnicodeError as exc:  # its text quotes the character and its position: a piece of the password
            raise ChannelError(f"{self.name}: {type(exc).__name__} talking to {where}: a character in the login or "
                               "the message cannot be sent over SMTP (non-ASCII user name or password?)",
                               retryable=False) from None
        except (smtplib.SMTPException, OSError, ValueError) as exc:
            # smtplib's own messages are fixed phrases; a socket error's text is replaced by its errno text
            smtp_own = isinstance(exc, smtplib.SMTPException) or not isinstance(exc, OSError)
            reason = (str(exc) or type(exc).__name__) if smtp_own else _reason(exc)
            raise ChannelError(self.redact(f"{self.name}: {type(exc).__name__} talking to {where}: "
                                           f"{_one_line(reason)}")) from None
        if refused:
            # Some recipients got it; retrying would duplicate for them, so report and stop.
            raise ChannelError(f"{self.name}: recipients refused by {where}: {sorted(refused)}", retryable=False)


# --------------------------------------------------------------------------------------------- dispatcher


ResultCallback = Callable[[str, AlertMessage, bool, str], None]

_IDLE_JOIN = 2.0
"""Seconds ``close`` waits at most for an idle worker to return (it normally takes microseconds)."""


class AsyncDispatcher:
    """Bounded queue + one daemon worker thread + retries with exponential backoff.

    ``submit`` is safe to call from the training loop: it only appends to an in-memory queue (or
    counts a drop when full) and never touches the network.  For each message every channel gets
    its first attempt before any retry sleeps, so a dead channel delays the others by at most its
    own attempts, never theirs.
    """

    def __init__(
        self,
        channels: list[Channel],
        *,
        max_queue: int = 100,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        on_result: ResultCallback | None = None,
    ) -> None:
        self.channels = list(channels)
        self.max_queue = max(1, int(max_queue))
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.max_backoff = max(0.0, float(max_backoff))
        self.on_result = on_result
        self._queue: collections.deque[AlertMessage] = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0  # queued + in flight; flush() waits for zero
        self._busy = False  # the worker is delivering a message (close() does not wait for a send past its deadline)
        self._closed = False
        self._stop = threading.Event()  # interrupts backoff sleeps on close()
        self._stats = {"sent": 0, "failed": 0, "dropped": 0, "retried": 0}
        # (id of a message, channel) -> what its delivery is doing, for the owner's undelivered records
        self._doing: dict[tuple[int, str], str] = {}
        self._last_error: dict[tuple[int, str], str] = {}
        self._thread = threading.Thread(target=self._run, name="rlcluster-alerts", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        names = [getattr(c, "name", type(c).__name__) for c in self.channels]
        return f"AsyncDispatcher(channels={names!r}, max_queue={self.max_queue}, retries={self.retries})"

    @property
    def stats(self) -> dict[str, int]:
        """A consistent snapshot of the counters: sent, failed, dropped, retried."""
        with self._cond:
            return dict(self._stats)

    def submit(self, msg: AlertMessage) -> bool:
        """Queue ``msg`` without blocking; False (and a counted drop) when full or closed."""
        with self._cond:
            if self._closed or len(self._queue) >= self.max_queue:
                self._stats["dropped"] += 1
                return False
            self._queue.append(msg)
            self._pending += 1
            self._cond.notify_all()
            return True

    def progress(self, msg: AlertMessage, channel: str | None = None) -> str:
        """Where the delivery of ``msg`` (to ``channel``, default the first) stands, in a few words: still
        queued, an attempt in flight, or the last attempt's error while a retry waits. Empty when done."""
        name = channel if channel is not None else (_name(self.channels[0]) if self.channels else "")
        with self._cond:
            doing = self._doing.get((id(msg), name))
            if doing:
                return doing
            if any(m is msg for m in self._queue):
                return "still queued, not attempted yet"
        return ""

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait at most ``timeout`` seconds for everything queued to be processed; True if drained."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout=max(0.0, timeout))

    def close(self, timeout: float = 5.0) -> None:
        """Drain for up to ``timeout`` seconds, then stop the worker; undelivered messages count as dropped."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._closed = True  # no new messages from here on
        self.flush(max(0.0, deadline - time.monotonic()))
        with self._cond:
            abandoned = len(self._queue)
            if abandoned:
                self._queue.clear()
                self._pending -= abandoned
                self._stats["dropped"] += abandoned
                if self.on_result is None:  # an owner with on_result records (and reports) each one itself
                    log.warning("alert dispatcher closed with %d undelivered alert(s)", abandoned)
            self._stop.set()
            self._cond.notify_all()
            idle = not self._busy
        # An idle worker only has to wake up and return: wait for that (a loaded machine can take a moment), so a
        # closed dispatcher leaves no thread behind. One inside a send is bounded by the channel timeout and is a
        # daemon: it gets what is left of the deadline, no more.
        left = max(0.0, deadline - time.monotonic())
        self._thread.join(max(left, _IDLE_JOIN) if idle else left)

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set() and not self._queue:
                    return
                msg = self._queue.popleft()
                self._busy = True
            try:
                self._deliver(msg)
            except Exception:  # pragma: no cover - defensive: the worker must never die
                log.exception("alert dispatcher: unexpected error while delivering")
            finally:
                with self._cond:
                    self._busy = False
                    self._pending -= 1
                    self._cond.notify_all()

    def _deliver(self, msg: AlertMessage) -> None:
        pending = list(self.channels)
        attempt = 0
        while pending:
            failed: list[tuple[Channel, ChannelError | str]] = []
            for channel in pending:
                if self._stop.is_set():
                    # close() ran out of time: do not start new network calls.
                    self._count("failed")
                    self._report(channel, msg, False, f"{_name(channel)}: dispatcher closed before delivery")
                    continue
                self._note(channel, msg, f"attempt {attempt + 1} was in flight"
                           + (f" after: {self._last(channel, msg)}" if attempt else ""))
                err = self._attempt(channel, msg)
                if err is None:
                    self._count("sent")
                    self._report(channel, msg, True, "")
                else:
                    failed.append((channel, err))
            retry: list[Channel] = []
            delay = min(self.backoff * (2**attempt), self.max_backoff)
            for channel, err in failed:
                retryable = not isinstance(err, ChannelError) or err.retryable
                if retryable and attempt < self.retries and not self._stop.is_set():
                    retry.append(channel)
                    self._note(channel, msg, f"a retry was waiting after attempt {attempt + 1} failed: {err}",
                               last=str(err))
                    if isinstance(err, ChannelError) and err.retry_after is not None:
                        delay = max(delay, min(err.retry_after, self.max_backoff))
                else:
                    self._count("failed")
                    text = str(err)
                    if attempt and retryable:
                        text = f"{text} (after {attempt + 1} attempts)"
                    if self.on_result is None:  # an owner with on_result logs the outcome itself
                        log.warning("alert %r via %s failed: %s", clean_text(_one_line(msg.title), 200),
                                    _name(channel), clean_text(text, 500))
                    self._report(channel, msg, False, text)
            if not retry:
                return
            if delay and self._stop.wait(delay):
                # close() gave up waiting: report the remaining channels as failed instead of hanging on.
                for channel in retry:
                    self._count("failed")
                    self._report(channel, msg, False, f"{_name(channel)}: dispatcher closed before retry")
                return
            self._count("retried", len(retry))
            pending = retry
            attempt += 1

    def _attempt(self, channel: Channel, msg: AlertMessage) -> ChannelError | str | None:
        """One send; returns None on success or a secret-free error (ChannelError or text)."""
        try:
            channel.send(msg)
            return None
        except ChannelError as exc:
            return ChannelError(_safe_text(channel, str(exc)), retryable=exc.retryable, retry_after=exc.retry_after)
        except Exception as exc:  # noqa: BLE001 - third-party channels may raise anything
            return _safe_text(channel, f"{_name(channel)}: {type(exc).__name__}: {exc}")

    def _note(self, channel: Channel, msg: AlertMessage, doing: str, *, last: str | None = None) -> None:
        with self._cond:
            key = (id(msg), _name(channel))
            self._doing[key] = doing
            if last is not None:
                self._last_error[key] = last

    def _last(self, channel: Channel, msg: AlertMessage) -> str:
        with self._cond:
            return self._last_error.get((id(msg), _name(channel)), "")

    def _count(self, key: str, n: int = 1) -> None:
        with self._cond:
            self._stats[key] += n

    def _report(self, channel: Channel, msg: AlertMessage, ok: bool, error: str) -> None:
        with self._cond:  # a final result: nothing left to say about this delivery
            self._doing.pop((id(msg), _name(channel)), None)
            self._last_error.pop((id(msg), _name(channel)), None)
        if self.on_result is None:
            return
        try:
            self.on_result(_name(channel), msg, ok, error)
        except Exception:
            log.exception("alert dispatcher: on_result callback raised")


def _name(channel: Channel) -> str:
    return str(getattr(channel, "name", type(channel).__name__))


def _safe_text(channel: Channel, text: str) -> str:
    """Belt and braces: let the channel mask its secrets even in errors it did not format itself."""
    redact = getattr(channel, "redact", None)
    if callable(redact):
        try:
            return str(redact(text))
        except Exception:  # noqa: BLE001 - a channel's own redact may raise anything
            return f"{_name(channel)}: delivery failed (error text withheld)"
    return text
