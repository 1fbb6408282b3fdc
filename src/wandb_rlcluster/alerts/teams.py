"""The Microsoft Teams channel: an alert as an Adaptive Card posted to a Teams workflow webhook.

Why this shape: Teams' Office 365 connectors are retired; a channel now receives webhooks through a Workflows
(Power Automate) flow, "Post to a channel when a webhook request is received", which takes the documented message
``{"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content":
<AdaptiveCard>}]}``. The card is version 1.4 (what Teams renders everywhere). Alert and model text goes in
RichTextBlock TextRuns, which Teams shows as plain text, so a completion cannot inject markdown links.
"""

from __future__ import annotations

from typing import Any

from .channels import AlertMessage, _fmt_value, _one_line, _truncate
from .http_channel import HttpChannel, http_link, look

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_VERSION = "1.4"
#: A workflow takes a request of at most 28 KB: the card's texts are bounded well under that.
MAX_TEXT = 3000
MAX_TITLE = 250


def _run(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text, **style}]}


class TeamsChannel(HttpChannel):
    """POST an alert to a Teams workflow's webhook URL (it carries a signature: the URL is the secret)."""

    what = "Teams workflow webhook"

    def __init__(self, url: str, *, name: str = "teams", timeout: float = 5.0) -> None:
        super().__init__(url, name=name, timeout=timeout)

    def card(self, msg: AlertMessage) -> dict[str, Any]:
        """The Adaptive Card: a coloured title, the text, the examples, the facts, links to the run and the docs."""
        label, emoji, _, color = look(msg)
        body: list[dict[str, Any]] = [
            _run(_truncate(f"{emoji} {label}: {_one_line(msg.title)}", MAX_TITLE), weight="Bolder", size="Medium",
                 color=color),
            _run(_truncate(msg.text, MAX_TEXT) or " "),
        ]
        examples = msg.evidence_lines()
        if examples:
            body.append(_run(f"Examples from step {msg.step}", weight="Bolder"))
            body += [_run(f"\N{BULLET} {x}", fontType="Monospace") for x in examples]
        facts = [("Rule", msg.rule), ("Gauge", msg.gauge), ("Step", str(msg.step)), ("Value", _fmt_value(msg.value)),
                 ("Metric", msg.metric or None), ("Run", msg.run_name), ("State", msg.state)]
        body.append({"type": "FactSet", "facts": [{"title": t, "value": _truncate(str(v), 500)}
                                                  for t, v in facts if v is not None]})
        actions = [{"type": "Action.OpenUrl", "title": title, "url": url}
                   for title, url in (("Open the run", http_link(msg.run_url)), ("Rule docs", http_link(msg.doc)))
                   if url]
        card: dict[str, Any] = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                                "type": "AdaptiveCard", "version": CARD_VERSION, "body": body,
                                "msteams": {"width": "Full"}}
        if actions:
            card["actions"] = actions
        return card

    def payload(self, msg: AlertMessage) -> dict[str, Any]:
        return {"type": "message",
                "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": self.card(msg)}]}
