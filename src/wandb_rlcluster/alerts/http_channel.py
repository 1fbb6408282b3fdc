"""What the HTTP channels (generic webhook, Discord, Microsoft Teams) share: the URL kept secret, one JSON POST per
alert through ``channels.post_json`` (the Slack channel's), and how a severity or a resolved alert looks.

Why a base: the three differ only in the JSON they post; the rules for the secret URL (never shown, masked in
every error), redirects (never followed), and which failures are retried must be the same for all of them.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterable
from typing import Any

from .channel_template import SECRET_HEADER
from .channels import AlertMessage, _NoRedirect, _redact, _severity_label, post_json, url_display, url_secrets

#: severity (or "resolved") -> (emoji, colour as a 24-bit RGB int, Adaptive Card text colour)
LOOK: dict[str, tuple[str, int, str]] = {
    "info": ("\N{INFORMATION SOURCE}\ufe0f", 0x36C5F0, "Accent"),
    "warn": ("\N{WARNING SIGN}\ufe0f", 0xECB22E, "Warning"),
    "stop": ("\N{POLICE CARS REVOLVING LIGHT}", 0xE01E5A, "Attention"),
    "resolved": ("\N{WHITE HEAVY CHECK MARK}", 0x2EB67D, "Good"),
}
_DEFAULT_LOOK = ("\N{BELL}", 0x808080, "Default")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def look(msg: AlertMessage) -> tuple[str, str, int, str]:
    """(label, emoji, colour, card colour): ``RESOLVED`` and green for a resolved alert, else by severity."""
    key = "resolved" if msg.state == "resolved" else msg.severity
    emoji, color, card = LOOK.get(key, _DEFAULT_LOOK)
    return _severity_label(key), emoji, color, card


def http_link(url: str | None) -> str | None:
    """``url`` if a chat client can open it as a link (http or https), else None (a docs path stays text)."""
    return url if url and re.match(r"https?://[^\s]+$", url) else None


def header_problem(name: str, value: str) -> str | None:
    """Why a header cannot be sent (naming the header, never its value), or None."""
    if not _HEADER_NAME.fullmatch(name):
        return f"header name {name[:40]!r} is not a valid HTTP header name"
    if any(c in value for c in "\r\n\0"):
        return f"header {name!r}: its value holds a line break"
    return None


class HttpChannel:
    """POST one JSON document per alert to a URL that is (or holds) a credential; subclasses build the document."""

    what = "webhook"  # how messages name the URL: "webhook URL is malformed"

    def __init__(self, url: str, *, name: str, timeout: float = 5.0, secrets: Iterable[str] = (),
                 headers: dict[str, str] | None = None) -> None:
        self._display = url_display(url, self.what)  # never the URL itself
        self.name = name
        self.timeout = float(timeout)
        self._url = url
        self._headers = dict(headers or {})
        for key, value in self._headers.items():
            problem = header_problem(key, value)
            if problem:
                raise ValueError(f"{self.what}: {problem}")
        # a credential header's value, and its part after a scheme word ("Bearer <token>"), are secrets too
        given = [v for k, v in self._headers.items() if SECRET_HEADER.search(k)]
        given += [v.split(None, 1)[1] for v in given if len(v.split(None, 1)) == 2]
        raw = [*url_secrets(url), *(s for s in (*secrets, *given) if s)]
        self._secrets = raw + [json.dumps(s)[1:-1] for s in raw]  # also as an endpoint's JSON error would quote it
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self._display!r}, timeout={self.timeout})"

    def redact(self, text: str) -> str:
        """Mask the URL's secret parts and every secret the channel was given, in arbitrary text."""
        return _redact(text, self._secrets)

    def payload(self, msg: AlertMessage) -> Any:
        raise NotImplementedError

    def send(self, msg: AlertMessage) -> None:
        post_json(self._opener, self._url, self.payload(msg), timeout=self.timeout, name=self.name,
                  display=self._display, redact=self.redact, headers=self._headers)
