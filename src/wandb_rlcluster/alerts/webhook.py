"""The generic webhook channel: a JSON POST with a body templated over the alert, headers with secrets.

Why: on-call tools (PagerDuty, Opsgenie, a team's own service, a Microsoft Teams or Zapier flow) each want their own
JSON; a templated body reaches all of them without code. The body's strings are channel templates
(``channel_template.py``): ``{field}`` for the alert, ``${ENV_VAR}`` for a secret the file must not hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .channel_template import DEFAULT_BODY, fields_of, render_body
from .channels import AlertMessage
from .http_channel import HttpChannel


class WebhookChannel(HttpChannel):
    """POST ``body`` (default: every field of the alert, typed) rendered for each alert.

    ``headers`` are sent as given (their ``${NAME}`` already replaced by the caller); ``env`` holds the values of
    the variables the body names. Every value of ``env`` and ``secrets`` is masked in the channel's errors.
    """

    what = "webhook"

    def __init__(self, url: str, *, name: str = "webhook", timeout: float = 5.0,
                 headers: dict[str, str] | None = None, body: Any = None, env: Mapping[str, str] | None = None,
                 secrets: tuple[str, ...] = ()) -> None:
        self._env = dict(env or {})
        super().__init__(url, name=name, timeout=timeout, secrets=(*self._env.values(), *secrets), headers=headers)
        self._body = DEFAULT_BODY if body is None else body

    def payload(self, msg: AlertMessage) -> Any:
        return render_body(self._body, fields_of(msg), self._env)
