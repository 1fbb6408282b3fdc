"""The Discord channel: an alert as a Discord webhook message (``content`` plus one embed).

Why its own shape: Discord's execute-webhook JSON (https://discord.com/developers/docs/resources/webhook) shows an
embed with a coloured bar, a title, a description and inline fields; ``allowed_mentions`` with nothing to parse
keeps an ``@everyone`` in a model's completion from pinging a server, and Discord markdown in alert text is escaped.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from .channels import AlertMessage, _fmt_value, _one_line, _truncate
from .http_channel import HttpChannel, http_link, look

#: Discord's limits: content 2000, embed title 256, description 4096, field value 1024, all of an embed 6000.
MAX_CONTENT = 2000
MAX_TITLE = 256
MAX_DESCRIPTION = 3500  # under 4096, so the fields and footer fit in the embed's 6000
MAX_FIELD = 1024
_MARKDOWN = re.compile(r"([\\*_~`|\[\]<])")
_HEADING = re.compile(r"^(\s*)([#>-])", re.M)  # headings, quotes and list items only at the start of a line


def discord_escape(text: str) -> str:
    """Discord markdown characters backslash-escaped (bold, links, code, quotes, spoilers, headings, mentions)."""
    return _HEADING.sub(r"\1\\\2", _MARKDOWN.sub(r"\\\1", str(text)))


class DiscordChannel(HttpChannel):
    """POST an alert to a Discord webhook URL (``https://discord.com/api/webhooks/ID/TOKEN``: the URL is the secret)."""

    what = "Discord webhook"

    def __init__(self, url: str, *, name: str = "discord", timeout: float = 5.0, username: str | None = None) -> None:
        super().__init__(url, name=name, timeout=timeout)
        self.username = username

    def payload(self, msg: AlertMessage) -> dict[str, Any]:
        label, emoji, color, _ = look(msg)
        title = _one_line(msg.title)
        fields = [{"name": "Rule", "value": f"`{msg.rule}`", "inline": True},
                  {"name": "Gauge", "value": f"`{msg.gauge}`", "inline": True},
                  {"name": "Step", "value": str(msg.step), "inline": True}]
        value = _fmt_value(msg.value)
        if value is not None:
            fields.append({"name": "Value", "value": value, "inline": True})
        if msg.metric:
            fields.append({"name": "Metric", "value": discord_escape(msg.metric), "inline": True})
        run_link = http_link(msg.run_url)
        run_link = run_link.replace("(", "%28").replace(")", "%29") if run_link else None  # inside [text](link)
        if msg.run_name or run_link:
            name = discord_escape(msg.run_name or "run")
            fields.append({"name": "Run", "value": f"[{name}]({run_link})" if run_link else name, "inline": True})
        if msg.doc:
            doc_link = http_link(msg.doc)
            doc_link = doc_link.replace("(", "%28").replace(")", "%29") if doc_link else None
            fields.append({"name": "Docs", "value": f"[rule docs]({doc_link})" if doc_link else discord_escape(msg.doc),
                           "inline": True})
        description = discord_escape(msg.text)
        examples = msg.evidence_lines()
        if examples:
            description += f"\n\n**Examples from step {msg.step}**\n" + "\n".join(
                f"\N{BULLET} {discord_escape(x)}" for x in examples)
        embed: dict[str, Any] = {
            "title": _truncate(f"{emoji} {label}: {discord_escape(title)}", MAX_TITLE),
            "description": _truncate(description, MAX_DESCRIPTION) or "\N{EM DASH}",
            "color": color,
            "fields": [{**f, "value": _truncate(str(f["value"]), MAX_FIELD)} for f in fields],
            "footer": {"text": "wandb-rlcluster"},
        }
        if run_link:
            embed["url"] = run_link
        if msg.time > 0:
            embed["timestamp"] = datetime.datetime.fromtimestamp(msg.time, datetime.timezone.utc).isoformat()
        body: dict[str, Any] = {
            "content": _truncate(f"{emoji} **{label}** {discord_escape(title)}", MAX_CONTENT),
            "embeds": [embed],
            "allowed_mentions": {"parse": []},  # no @everyone, @here, role or user pings from alert text
        }
        if self.username:
            body["username"] = self.username
        return body
