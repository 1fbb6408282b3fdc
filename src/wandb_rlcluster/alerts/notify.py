"""Telling people: the local journal (always), wandb.alert (main process), direct channels (off-thread).

Nothing an alert says is lost: every event — fired, resolved, suppressed by a
cooldown or an inhibition — is appended to ``alerts.jsonl`` first, whether or
not W&B or a channel works. Every alert handed to a channel then gets exactly one
outcome record for that channel (``sent``, ``failed`` with the reason, ``undelivered``
when training ended before the channel could deliver it, or ``off`` when the channel
could not start), and :meth:`Notifier.close` waits a bounded time in total, whatever
the number of channels, also when training ends by an exception (an exit hook).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import sys
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core.findings import SEVERITY_RANK
from ..core.rollouts import evidence_lines
from ..core.text import clean_text
from .config import ENV_FIELDS, AlertConfig, ChannelConfig, env_name_problem
from .engine import AlertEvent
from .http_config import DEFAULT_RETRIES, HTTP_TYPES, env_refs

logger = logging.getLogger("wandb_rlcluster")

WANDB_LEVEL = {"info": "INFO", "warn": "WARN", "stop": "ERROR"}
#: Seconds close() waits, in total, for the channels to deliver what is queued (RLClusterCallback(channel_wait=...)).
CLOSE_WAIT = 2.0


#: Longest wait close() accepts: an infinite one would overflow the lock's timeout and never end.
MAX_CLOSE_WAIT = 3600.0


def clamp_wait(seconds: Any) -> float:
    """A usable wait in seconds: negative or NaN is 0, infinite is MAX_CLOSE_WAIT, junk is the default."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return CLOSE_WAIT
    return min(value, MAX_CLOSE_WAIT) if value >= 0 else 0.0


def build_channel(name: str, ch: ChannelConfig, environ: Mapping[str, str] | None = None) -> tuple[Any, str | None]:
    """(channel object, None), or (None, why the channel cannot be built: a problem that never holds a secret)."""
    from .channels import EmailChannel, SlackWebhookChannel

    env = os.environ if environ is None else environ
    o = ch.options
    bad_env = next(((k, p) for k in ENV_FIELDS if k in o and (p := env_name_problem(o[k]))), None)
    if bad_env:  # an AlertConfig changed after validation: same rule, value never echoed
        return None, f"channel {name!r}: '{bad_env[0]}' {bad_env[1]}"
    try:
        if ch.type == "slack":
            url = env.get(str(o["webhook_url_env"]), "")
            if not url:
                return None, f"channel {name!r}: environment variable {o['webhook_url_env']} is not set"
            return SlackWebhookChannel(url, name=name, timeout=float(o.get("timeout", 5.0)),
                                       username=o.get("username"), channel=o.get("channel")), None
        if ch.type == "email":
            user = env.get(str(o["username_env"])) if o.get("username_env") else None
            pwd = env.get(str(o["password_env"])) if o.get("password_env") else None
            if o.get("password_env") and not pwd:
                return None, f"channel {name!r}: environment variable {o['password_env']} is not set"
            return EmailChannel(str(o["host"]), int(o.get("port", 25)), str(o["sender"]), list(o["recipients"]),
                                name=name, username=user, password=pwd, starttls=o.get("starttls") is True,
                                ssl=o.get("ssl") is True, timeout=float(o.get("timeout", 10.0)),
                                allow_plaintext_auth=o.get("allow_plaintext_auth") is True), None
        if ch.type in HTTP_TYPES:
            return _build_http(name, ch, env)
        return None, f"channel {name!r}: unknown type {clean_text(ch.type, 40)!r}"
    except (KeyError, TypeError, ValueError) as e:  # the messages name a setting or a rule, never its value
        return None, f"channel {name!r}: {type(e).__name__}: {clean_text(e, 200)}"


def _build_http(name: str, ch: ChannelConfig, env: Mapping[str, str]) -> tuple[Any, str | None]:
    """A webhook, Discord or Teams channel, its URL and ``${NAME}`` secrets read from the environment now."""
    from .channel_template import render_text
    from .discord import DiscordChannel
    from .teams import TeamsChannel
    from .webhook import WebhookChannel

    o = ch.options
    refs = env_refs(o)
    missing = next((n for n in (o.get("url_env"), o.get("webhook_url_env"), *refs) if n and not env.get(str(n))), None)
    if missing:
        return None, f"channel {name!r}: environment variable {missing} is not set"
    timeout = float(o.get("timeout", 5.0))
    if ch.type == "discord":
        return DiscordChannel(env[o["webhook_url_env"]], name=name, timeout=timeout, username=o.get("username")), None
    if ch.type == "teams":
        return TeamsChannel(env[o["webhook_url_env"]], name=name, timeout=timeout), None
    values = {n: env[n] for n in refs}
    url = env[o["url_env"]] if o.get("url_env") else render_text(str(o["url"]), {}, values, with_fields=False)
    headers = {str(k): render_text(str(v), {}, values, with_fields=False) for k, v in (o.get("headers") or {}).items()}
    return WebhookChannel(url, name=name, timeout=timeout, headers=headers, body=o.get("body"), env=values), None


def sends_resolved(ch: ChannelConfig) -> bool:
    """Whether a channel is told when an alert it got resolves: the HTTP channels, unless ``send_resolved: false``."""
    return ch.type in HTTP_TYPES and ch.options.get("send_resolved", True) is True


def build_channels(config: AlertConfig, environ: Mapping[str, str] | None = None) -> tuple[list[Any], list[str]]:
    """Channel objects for the configured channels, and a problem per channel that cannot be built."""
    out: list[Any] = []
    problems: list[str] = []
    for name, ch in config.channels.items():
        obj, problem = build_channel(name, ch, environ)
        if problem:
            problems.append(problem)
        else:
            out.append(obj)
    return out, problems


# Notifiers with channels not closed yet: closed at interpreter exit when training ended without on_train_end.
_open: weakref.WeakSet[Notifier] = weakref.WeakSet()
_open_lock = threading.Lock()
_exit_hook = False


def _track(notifier: Notifier) -> None:
    global _exit_hook
    with _open_lock:
        _open.add(notifier)
        if not _exit_hook:
            _exit_hook = True
            atexit.register(_close_at_exit)


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker, a multiprocessing pool) has no channel threads and owns no alert: its
    exit must not wait for, or journal outcomes of, the parent's deliveries."""
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _close_at_exit() -> None:
    """A training that raised (or called sys.exit) never reaches on_train_end: close what is still open, within
    one shared deadline. ``close`` is idempotent, so a crash handler that closed first leaves nothing to do."""
    with _open_lock:
        notifiers = list(_open)
    if not notifiers:
        return
    deadline = time.monotonic() + max(n.close_wait for n in notifiers)
    for n in notifiers:
        with contextlib.suppress(Exception):  # the process is ending: never raise from an exit hook
            n.close(max(0.0, deadline - time.monotonic()))


class Notifier:
    """Routes engine events to the journal, W&B and the direct channels.

    ``close`` may be called from any thread, any number of times (on_train_end, a crash handler, the exit
    hook): the first call to finish waiting writes the outcomes, the others wait for it (bounded) and return.
    """

    def __init__(self, config: AlertConfig, journal: str | os.PathLike[str] | None, *,
                 use_wandb: bool = True, channels: bool = True, close_wait: float = CLOSE_WAIT) -> None:
        self.config = config
        self.journal = Path(journal) if journal else None
        self.use_wandb = use_wandb
        self.close_wait = clamp_wait(close_wait)
        self.errors: dict[str, int] = {}
        self.sent_wandb = 0
        # one dispatcher (queue + worker thread) per channel: a dead endpoint delays only itself
        self.dispatchers: dict[str, Any] = {}
        self.off: dict[str, str] = {}  # channel -> why it could not start (each alert for it is journaled "off")
        self._channel_cfg: dict[str, ChannelConfig] = dict(config.channels)
        # (id of the message, channel) -> journal fields, for every delivery not yet given its outcome
        self._outcomes: dict[tuple[int, str], dict[str, Any]] = {}
        # outcomes, the closed flag and journal writes: a channel thread's outcome is written while the lock is
        # held, so once close() has taken the lock no late write can land after it returns
        self._lock = threading.RLock()
        self._closed = False
        self._finished = threading.Event()
        # ids unique across processes writing the same journal (a resume appends to the same alerts.jsonl)
        self._session = uuid.uuid4().hex[:8]
        self._ids = itertools.count(1)
        #: False keeps example completion texts (rollout evidence) out of W&B alerts and the channels
        self.evidence_text = True
        #: the run's name, URL and project for the channels' messages (the pipeline hands in the engine's fields)
        self.run_fields: Mapping[str, Any] = {}
        # (rule, channel) -> the id of the firing alert handed to that channel, until it resolves
        self._announced: dict[tuple[str, str], str] = {}
        if channels and config.channels:
            from .channels import AsyncDispatcher

            for name, ch in config.channels.items():
                obj, problem = build_channel(name, ch)
                if problem:
                    self.off[name] = problem
                    logger.warning("rlcluster alerts: %s; that channel is off", clean_text(problem))
                else:
                    retries = ch.options.get("retries", DEFAULT_RETRIES) if ch.type in HTTP_TYPES else DEFAULT_RETRIES
                    self.dispatchers[name] = AsyncDispatcher([obj], retries=retries, on_result=self._channel_result)
        if self.dispatchers:
            _track(self)

    def handle(self, events: Iterable[AlertEvent]) -> None:
        for e in events:
            alert_id = f"{self._session}-{next(self._ids)}"
            self._journal(e.to_dict() | {"type": "alert", "id": alert_id})
            if e.kind == "firing":
                lvl = logging.WARNING if e.severity != "info" else logging.INFO
                note = "" if e.notify else f" [not notified: {e.suppressed}]"
                logger.log(lvl, "rlcluster ALERT %s %s (step %d): %s%s", e.severity.upper(), clean_text(e.rule),
                           e.step, clean_text(e.title), note)
            if e.kind == "resolved" and self._announced:
                self._submit(e, alert_id)  # to the channels that got its firing and send resolved alerts
            if not e.notify or e.kind != "firing":
                continue
            if self.use_wandb:
                self._wandb_alert(e)
            if self.dispatchers or self.off:
                self._submit(e, alert_id)

    def _wandb_alert(self, e: AlertEvent) -> None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        if wandb is None or run is None:
            return
        try:
            level = getattr(wandb.AlertLevel, WANDB_LEVEL[e.severity])
            text = e.text
            if e.evidence:  # the completions behind the alert, bounded: W&B forwards this text to Slack itself
                lines = evidence_lines(e.evidence, with_text=self.evidence_text, width=200)
                text = (text + f"\n\nExamples from step {e.step}:\n" + "\n".join(f"- {x}" for x in lines))[:3000]
            if e.doc:
                text = text[: 3000 - len(e.doc) - 8] + f"\n\nRule: {e.doc}"
            run.alert(title=e.title[:255], text=text, level=level, wait_duration=max(1, int(e.cooldown)))
            self.sent_wandb += 1
        except Exception as exc:  # noqa: BLE001 - W&B must never break training
            self._error("wandb.alert", exc)

    def _submit(self, e: AlertEvent, alert_id: str) -> None:
        from .channels import AlertMessage

        rule = self.config.rule(e.rule)
        wanted = rule.channels if rule is not None and rule.channels is not None else tuple(self._channel_cfg)
        evidence = tuple(e.evidence) if self.evidence_text else tuple(
            {k: v for k, v in x.items() if k not in ("prompt", "completion")} for x in e.evidence)
        run = self.run_fields
        run_name = run.get("run_name") if run.get("run_name") not in ("", "this run") else None  # the engine's stand-in
        msg = AlertMessage(title=e.title, text=e.text, severity=e.severity, rule=e.rule, gauge=e.gauge, step=e.step,
                           run_name=run_name, run_url=run.get("run_url") or None, value=e.value, evidence=evidence,
                           evidence_text=self.evidence_text, doc=e.doc or None, metric=e.metric, state=e.kind,
                           alert_id=alert_id, project=run.get("project") or None, time=e.time)
        for name, cfg in self._channel_cfg.items():
            if e.kind == "resolved":  # only where its firing went, and only to a channel that sends resolved alerts
                firing_id = self._announced.pop((e.rule, name), None)
                if firing_id is None or not sends_resolved(cfg):
                    continue
                msg = dataclasses.replace(msg, alert_id=firing_id)
            elif name not in wanted or SEVERITY_RANK[e.severity] < SEVERITY_RANK.get(cfg.min_severity, 1):
                continue
            else:
                self._announced[(e.rule, name)] = alert_id
            base = {"type": "channel", "channel": name, "alert": alert_id, "rule": e.rule, "step": e.step}
            dispatcher = self.dispatchers.get(name)
            if dispatcher is None:
                if name in self.off:  # one outcome per alert and channel, also for a channel that never started
                    why = self.off[name].removeprefix(f"channel {name!r}: ")
                    self._outcome(base, "off", f"the channel is off: {why}", log=False)
                continue
            with self._lock:
                closed = self._closed
                if not closed:
                    self._outcomes[(id(msg), name)] = base | {"_msg": msg}
            if closed:
                self._outcome(base, "undelivered", "the alert came after the channels were closed")
            elif not dispatcher.submit(msg):
                with self._lock:
                    taken = self._outcomes.pop((id(msg), name), None)  # None: close() has recorded it already
                    if taken is not None:
                        self._record(base, "failed", "queue full: alert dropped (the channel is not keeping up)")
                if taken is not None:
                    self._log_outcome(base, "failed", "queue full: alert dropped (the channel is not keeping up)")

    def _channel_result(self, channel: str, msg: Any, ok: bool, error: str) -> None:
        """Called on a channel's thread with the final result of one delivery (after its retries)."""
        outcome = "sent" if ok else "failed"
        with self._lock:  # taken and written under one lock: close() cannot slip in between
            base = self._outcomes.pop((id(msg), channel), None)
            if base is None:  # already recorded as undelivered by close(): one outcome per alert and channel
                return
            base.pop("_msg", None)
            self._record(base, outcome, error)
        self._log_outcome(base, outcome, error)

    def _outcome(self, base: dict[str, Any], outcome: str, error: str, *, log: bool = True) -> None:
        self._record(base, outcome, error)
        if log:
            self._log_outcome(base, outcome, error)

    def _record(self, base: dict[str, Any], outcome: str, error: str) -> None:
        reason = clean_text(error) if error else None
        self._journal(base | {"outcome": outcome, "ok": outcome == "sent", "error": reason})

    @staticmethod
    def _log_outcome(base: dict[str, Any], outcome: str, error: str) -> None:
        if outcome != "sent":
            logger.warning("rlcluster alerts: channel %s %s %s (step %s): %s", base["channel"], outcome,
                           clean_text(base["rule"]), base["step"], clean_text(error) if error else None)

    def _journal(self, record: dict[str, Any]) -> None:
        if self.journal is None:
            return
        line = json.dumps(record, default=str) + "\n"
        try:
            with self._lock:
                self.journal.parent.mkdir(parents=True, exist_ok=True)
                with self.journal.open("a", encoding="utf-8") as fh:
                    fh.write(line)
        except OSError as exc:
            self._error("journal", exc)

    def _error(self, what: str, exc: BaseException) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1
        if self.errors[what] == 1:
            logger.warning("rlcluster alerts: %s failed (%s: %s); the alert is in the journal %s", what,
                           type(exc).__name__, clean_text(exc, 300), self.journal or "(none configured)")

    @property
    def closed(self) -> bool:
        return self._finished.is_set()

    def close(self, timeout: float | None = None) -> None:
        """Give the channels at most ``timeout`` seconds in total (default ``close_wait``) to deliver what is
        queued, then stop them. Safe from any thread, an exit hook included, and idempotent.

        Every delivery still queued or in flight then is journaled as ``undelivered``, with what its channel
        was doing (still queued, or the last attempt's error); a channel that answers later is not recorded
        twice. A hanging endpoint costs this wait, not its send timeout. A second call returns at once, or,
        while the first is still writing the outcomes, when it is done (bounded by its own wait).
        """
        if self._finished.is_set():
            return
        wait = self.close_wait if timeout is None else clamp_wait(timeout)
        deadline = time.monotonic() + wait
        if not self._closed:
            for dispatcher in self.dispatchers.values():  # they deliver in parallel: one shared deadline
                dispatcher.flush(max(0.0, deadline - time.monotonic()))
        with self._lock:  # from here on, a late result from a channel thread is ignored
            first = not self._closed
            self._closed = True
            left, self._outcomes = (list(self._outcomes.values()), {}) if first else ([], self._outcomes)
        if not first:
            self._finished.wait(max(1.0, deadline - time.monotonic()))
            return
        try:
            progress = {}
            for base in left:
                dispatcher = self.dispatchers.get(base["channel"])
                msg = base.pop("_msg", None)
                progress[id(base)] = dispatcher.progress(msg) if dispatcher is not None and msg is not None else ""
            for dispatcher in self.dispatchers.values():
                dispatcher.close(0.0)  # drops the queue and stops the worker; an in-flight send ends on its own
            for base in left:
                doing = progress.get(id(base))
                self._record(base, "undelivered", f"training ended before the channel delivered it (waited {wait:g} s)"
                                                  + (f"; {doing}" if doing else ""))
            if left:
                per = ", ".join(f"{n} {c}" for c, n in sorted(Counter(b["channel"] for b in left).items()))
                logger.warning("rlcluster alerts: %d alert deliveries still pending after the %g s end-of-training "
                               "wait (%s); each is journaled as undelivered in %s", len(left), wait, clean_text(per),
                               self.journal or "(no journal)")
        finally:
            self._finished.set()
            with _open_lock:
                _open.discard(self)
