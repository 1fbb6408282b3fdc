"""Telling people: the local journal (always), wandb.alert (main process), direct channels (off-thread).

Nothing an alert says is lost: every event — fired, resolved, suppressed by a
cooldown or an inhibition — is appended to ``alerts.jsonl`` first, whether or
not W&B or a channel works. Every alert handed to a channel then gets exactly one
outcome record for that channel (``sent``, ``failed`` with the reason, or
``undelivered`` when training ended before the channel could deliver it), and
:meth:`Notifier.close` waits a bounded time in total, whatever the number of channels.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.rollouts import evidence_lines
from ..core.text import clean_text
from .config import SEVERITY_RANK, AlertConfig, ChannelConfig, env_name_problem
from .engine import AlertEvent

logger = logging.getLogger("wandb_rlcluster")

WANDB_LEVEL = {"info": "INFO", "warn": "WARN", "stop": "ERROR"}
#: Seconds close() waits, in total, for the channels to deliver what is queued (RLClusterCallback(channel_wait=...)).
CLOSE_WAIT = 2.0


def build_channels(config: AlertConfig, environ: dict[str, str] | None = None) -> tuple[list[Any], list[str]]:
    """Channel objects for the configured channels, and a problem per channel that cannot be built."""
    from .channels import EmailChannel, SlackWebhookChannel

    env = os.environ if environ is None else environ
    out: list[Any] = []
    problems: list[str] = []
    for name, ch in config.channels.items():
        o = ch.options
        bad_env = next(((k, p) for k in ("webhook_url_env", "username_env", "password_env")
                        if k in o and (p := env_name_problem(o[k]))), None)
        if bad_env:  # an AlertConfig built in Python skips file validation: same rule, value never echoed
            problems.append(f"channel {name!r}: '{bad_env[0]}' {bad_env[1]}")
            continue
        try:
            if ch.type == "slack":
                url = env.get(str(o["webhook_url_env"]), "")
                if not url:
                    problems.append(f"channel {name!r}: environment variable {o['webhook_url_env']} is not set")
                    continue
                out.append(SlackWebhookChannel(url, name=name, timeout=float(o.get("timeout", 5.0)),
                                               username=o.get("username"), channel=o.get("channel")))
            elif ch.type == "email":
                user = env.get(str(o["username_env"])) if o.get("username_env") else None
                pwd = env.get(str(o["password_env"])) if o.get("password_env") else None
                if o.get("password_env") and not pwd:
                    problems.append(f"channel {name!r}: environment variable {o['password_env']} is not set")
                    continue
                out.append(EmailChannel(str(o["host"]), int(o.get("port", 25)), str(o["sender"]),
                                        list(o["recipients"]), name=name, username=user, password=pwd,
                                        starttls=o.get("starttls") is True, ssl=o.get("ssl") is True,
                                        timeout=float(o.get("timeout", 10.0)),
                                        allow_plaintext_auth=o.get("allow_plaintext_auth") is True))
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"channel {name!r}: {type(e).__name__}: {e}")
    return out, problems


class Notifier:
    """Routes engine events to the journal, W&B and the direct channels."""

    def __init__(self, config: AlertConfig, journal: str | os.PathLike[str] | None, *,
                 use_wandb: bool = True, channels: bool = True) -> None:
        self.config = config
        self.journal = Path(journal) if journal else None
        self.use_wandb = use_wandb
        self.errors: dict[str, int] = {}
        self.sent_wandb = 0
        # one dispatcher (queue + worker thread) per channel: a dead endpoint delays only itself
        self.dispatchers: dict[str, Any] = {}
        self._channel_cfg: dict[str, ChannelConfig] = dict(config.channels)
        # (id of the message, channel) -> journal fields, for every delivery not yet given its outcome
        self._outcomes: dict[tuple[int, str], dict[str, Any]] = {}
        self._lock = threading.Lock()  # outcomes and journal writes come from the channel threads too
        self._closed = False
        self._ids = itertools.count(1)
        #: False keeps example completion texts (rollout evidence) out of W&B alerts and the channels
        self.evidence_text = True
        if channels and config.channels:
            from .channels import AsyncDispatcher

            objs, problems = build_channels(config)
            for p in problems:
                logger.warning("rlcluster alerts: %s; that channel is off", clean_text(p))
            for ch in objs:
                self.dispatchers[ch.name] = AsyncDispatcher([ch], on_result=self._channel_result)

    def handle(self, events: Iterable[AlertEvent]) -> None:
        for e in events:
            alert_id = next(self._ids)
            self._journal(e.to_dict() | {"type": "alert", "id": alert_id})
            if e.kind == "firing":
                lvl = logging.WARNING if e.severity != "info" else logging.INFO
                note = "" if e.notify else f" [not notified: {e.suppressed}]"
                logger.log(lvl, "rlcluster ALERT %s %s (step %d): %s%s", e.severity.upper(), clean_text(e.rule),
                           e.step, clean_text(e.title), note)
            if not e.notify or e.kind != "firing":
                continue
            if self.use_wandb:
                self._wandb_alert(e)
            if self.dispatchers:
                self._submit(e, alert_id)

    def _wandb_alert(self, e: AlertEvent) -> None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        if run is None:
            return
        try:
            level = getattr(wandb.AlertLevel, WANDB_LEVEL[e.severity])
            text = e.text
            if e.evidence:  # the completions behind the alert, bounded: W&B forwards this text to Slack itself
                lines = evidence_lines(e.evidence, with_text=self.evidence_text, width=200)
                text = (text + f"\n\nExamples from step {e.step}:\n" + "\n".join(f"- {x}" for x in lines))[:3000]
            run.alert(title=e.title[:255], text=text, level=level, wait_duration=max(1, int(e.cooldown)))
            self.sent_wandb += 1
        except Exception as exc:  # noqa: BLE001 - W&B must never break training
            self._error("wandb.alert", exc)

    def _submit(self, e: AlertEvent, alert_id: int) -> None:
        from .channels import AlertMessage

        rule = self.config.rule(e.rule)
        wanted = rule.channels if rule is not None and rule.channels is not None else tuple(self._channel_cfg)
        evidence = tuple(e.evidence) if self.evidence_text else tuple(
            {k: v for k, v in x.items() if k not in ("prompt", "completion")} for x in e.evidence)
        msg = AlertMessage(title=e.title, text=e.text, severity=e.severity, rule=e.rule, gauge=e.gauge, step=e.step,
                           run_name=None, run_url=None, value=e.value, evidence=evidence,
                           evidence_text=self.evidence_text)
        for name, dispatcher in self.dispatchers.items():
            cfg = self._channel_cfg.get(name)
            if name not in wanted or cfg is None:
                continue
            if SEVERITY_RANK[e.severity] < SEVERITY_RANK[cfg.min_severity]:
                continue
            base = {"type": "channel", "channel": name, "alert": alert_id, "rule": e.rule, "step": e.step}
            with self._lock:
                closed = self._closed
                if not closed:
                    self._outcomes[(id(msg), name)] = base | {"_msg": msg}
            if closed:
                self._outcome(base, "undelivered", "the alert came after the channels were closed")
            elif not dispatcher.submit(msg):
                with self._lock:
                    self._outcomes.pop((id(msg), name), None)
                self._outcome(base, "failed", "queue full: alert dropped (the channel is not keeping up)")

    def _channel_result(self, channel: str, msg: Any, ok: bool, error: str) -> None:
        """Called on a channel's thread with the final result of one delivery (after its retries)."""
        with self._lock:
            base = self._outcomes.pop((id(msg), channel), None)
        if base is None:  # already recorded as undelivered by close(): one outcome per alert and channel
            return
        base.pop("_msg", None)
        self._outcome(base, "sent" if ok else "failed", error)

    def _outcome(self, base: dict[str, Any], outcome: str, error: str, *, log: bool = True) -> None:
        reason = clean_text(error) if error else None
        self._journal(base | {"outcome": outcome, "ok": outcome == "sent", "error": reason})
        if log and outcome != "sent":
            logger.warning("rlcluster alerts: channel %s %s %s (step %s): %s", base["channel"], outcome,
                           clean_text(base["rule"]), base["step"], reason)

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

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Give the channels at most ``timeout`` seconds in total to deliver what is queued, then stop them.

        Every delivery still queued or in flight then is journaled as ``undelivered``; a channel that
        answers later is not recorded twice. A hanging endpoint costs this wait, not its send timeout.
        """
        deadline = time.monotonic() + max(0.0, float(timeout))
        for dispatcher in self.dispatchers.values():  # they deliver in parallel: one shared deadline
            dispatcher.flush(max(0.0, deadline - time.monotonic()))
        with self._lock:  # from here on, a late result from a channel thread is ignored
            self._closed = True
            left, self._outcomes = list(self._outcomes.values()), {}
        for dispatcher in self.dispatchers.values():
            dispatcher.close(0.0)  # drops the queue and stops the worker; an in-flight send ends on its own
        for base in left:
            base.pop("_msg", None)
            self._outcome(base, "undelivered", f"training ended before the channel delivered it (waited {timeout:g} s)",
                          log=False)
        if left:
            per = ", ".join(f"{n} {c}" for c, n in sorted(Counter(b["channel"] for b in left).items()))
            logger.warning("rlcluster alerts: %d alert deliveries still pending after the %g s end-of-training wait "
                           "(%s); each is journaled as undelivered in %s", len(left), timeout, clean_text(per),
                           self.journal or "(no journal)")
