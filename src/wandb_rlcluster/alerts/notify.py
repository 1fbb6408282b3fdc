"""Telling people: the local journal (always), wandb.alert (main process), direct channels (off-thread).

Nothing an alert says is lost: every event — fired, resolved, suppressed by a
cooldown or an inhibition — is appended to ``alerts.jsonl`` first, whether or
not W&B or a channel works.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .config import SEVERITY_RANK, AlertConfig, ChannelConfig
from .engine import AlertEvent

logger = logging.getLogger("wandb_rlcluster")

WANDB_LEVEL = {"info": "INFO", "warn": "WARN", "stop": "ERROR"}


def build_channels(config: AlertConfig, environ: dict[str, str] | None = None) -> tuple[list[Any], list[str]]:
    """Channel objects for the configured channels, and a problem per channel that cannot be built."""
    from .channels import EmailChannel, SlackWebhookChannel

    env = os.environ if environ is None else environ
    out: list[Any] = []
    problems: list[str] = []
    for name, ch in config.channels.items():
        o = ch.options
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
                                        starttls=bool(o.get("starttls", False)), ssl=bool(o.get("ssl", False)),
                                        timeout=float(o.get("timeout", 10.0))))
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
        if channels and config.channels:
            from .channels import AsyncDispatcher

            objs, problems = build_channels(config)
            for p in problems:
                logger.warning("rlcluster alerts: %s; that channel is off", p)
            for ch in objs:
                self.dispatchers[ch.name] = AsyncDispatcher([ch], on_result=self._channel_result)

    def handle(self, events: Iterable[AlertEvent]) -> None:
        for e in events:
            self._journal(e.to_dict() | {"type": "alert"})
            if e.kind == "firing":
                lvl = logging.WARNING if e.severity != "info" else logging.INFO
                note = "" if e.notify else f" [not notified: {e.suppressed}]"
                logger.log(lvl, "rlcluster ALERT %s %s (step %d): %s%s", e.severity.upper(), e.rule, e.step,
                           e.title, note)
            if not e.notify or e.kind != "firing":
                continue
            if self.use_wandb:
                self._wandb_alert(e)
            if self.dispatchers:
                self._submit(e)

    def _wandb_alert(self, e: AlertEvent) -> None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        if run is None:
            return
        try:
            level = getattr(wandb.AlertLevel, WANDB_LEVEL[e.severity])
            run.alert(title=e.title[:255], text=e.text, level=level, wait_duration=max(1, int(e.cooldown)))
            self.sent_wandb += 1
        except Exception as exc:  # noqa: BLE001 - W&B must never break training
            self._error("wandb.alert", exc)

    def _submit(self, e: AlertEvent) -> None:
        from .channels import AlertMessage

        rule = self.config.rule(e.rule)
        wanted = rule.channels if rule is not None and rule.channels is not None else tuple(self._channel_cfg)
        msg = AlertMessage(title=e.title, text=e.text, severity=e.severity, rule=e.rule, gauge=e.gauge, step=e.step,
                           run_name=None, run_url=None, value=e.value)
        for name, dispatcher in self.dispatchers.items():
            cfg = self._channel_cfg.get(name)
            if name not in wanted or cfg is None:
                continue
            if SEVERITY_RANK[e.severity] < SEVERITY_RANK[cfg.min_severity]:
                continue
            if not dispatcher.submit(msg):
                self._journal({"type": "channel", "channel": name, "rule": e.rule, "step": e.step, "ok": False,
                               "error": "queue full: alert dropped"})

    def _channel_result(self, channel: str, msg: Any, ok: bool, error: str) -> None:
        self._journal({"type": "channel", "channel": channel, "rule": msg.rule, "step": msg.step, "ok": ok,
                       "error": error or None})
        if not ok:
            logger.warning("rlcluster alerts: channel %s failed for %s: %s", channel, msg.rule, error)

    def _journal(self, record: dict[str, Any]) -> None:
        if self.journal is None:
            return
        try:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, default=str) + "\n")
        except OSError as exc:
            self._error("journal", exc)

    def _error(self, what: str, exc: BaseException) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1
        if self.errors[what] == 1:
            logger.warning("rlcluster alerts: %s failed (%s: %s); the alert is in the journal %s", what,
                           type(exc).__name__, exc, self.journal or "(none configured)")

    def close(self, timeout: float = 5.0) -> None:
        """Drain the channel queues (bounded time) so the last alerts go out before the process ends."""
        for dispatcher in self.dispatchers.values():
            dispatcher.flush(timeout)
