"""The settings of the HTTP channels (``webhook``, ``discord``, ``teams``) in ``alerts.yaml``, checked before training.

Each problem comes back with the line of the setting it is about (a header, a body field), says how to fix it, and
never repeats a value that may be a secret. A credential written in the file is refused where it can be told: an
``Authorization``-like header without ``${ENV_VAR}``, a URL with a password, a signed query (``sig=``, ``token=``), a
token-like path segment, or the address of a service whose webhook URL is itself the credential (Slack, Discord,
Teams workflows).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .channel_template import ENV_REF, SECRET_HEADER, template_problems, walk_strings
from .located import env_name_problem

HTTP_TYPES = ("webhook", "discord", "teams")
_COMMON = frozenset({"type", "min_severity", "timeout", "retries", "send_resolved"})
HTTP_CHANNEL_KEYS: dict[str, frozenset[str]] = {
    "webhook": _COMMON | {"url", "url_env", "headers", "body"},
    "discord": _COMMON | {"webhook_url_env", "username"},
    "teams": _COMMON | {"webhook_url_env"},
}
#: Most retries after a failed first attempt (backoff 0.5 s doubling, at most 8 s between attempts).
MAX_RETRIES = 10
DEFAULT_RETRIES = 3
#: A body template's size: its strings together, and its nesting.
MAX_BODY_CHARS = 16_000
MAX_BODY_DEPTH = 8
#: Headers the HTTP client sets itself.
_RESERVED_HEADERS = frozenset({"content-length", "host", "transfer-encoding", "connection"})
_SCHEME_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,19}")
_SECRET_QUERY = re.compile(r"(?i)sig|signature|token|key|secret|pass|code|auth")
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_+=]{24,}")
#: Hosts whose webhook URL is the credential itself: write it in an environment variable (url_env).
_SECRET_HOSTS = (("hooks.slack.com", "Slack"), ("discord.com", "Discord"), ("discordapp.com", "Discord"),
                 ("webhook.office.com", "Teams"), ("logic.azure.com", "Teams workflow"),
                 ("powerplatform.com", "Teams workflow"), ("hooks.zapier.com", "Zapier"))
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FIELD_REF = re.compile(r"\{[^{}]*\}")

Problems = list[tuple[tuple[str, ...], str]]


def _token_like(text: str) -> bool:
    return any(re.search(r"[A-Za-z]", m) and re.search(r"\d", m) for m in _TOKEN_RUN.findall(text))


def url_problem(url: Any) -> str | None:
    """Why a webhook ``url`` is refused (never quoting it), or None."""
    if not isinstance(url, str) or not url.strip():
        return "must be the endpoint's http(s) URL, e.g. https://example.com/hooks/rl"
    env = [p for n in ENV_REF.findall(url) if (p := env_name_problem(n))]
    if env:
        return f"${{...}} {env[0]}"
    plain = ENV_REF.sub("ENVREF", url)
    try:
        parts = urllib.parse.urlsplit(plain)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return "is not a URL; write e.g. https://example.com/hooks/rl"
    if parts.scheme not in ("http", "https") or not parts.hostname or "ENVREF" in parts.netloc:
        return ("must start with http:// or https:// and a host written in the file (https://host/path/${TOKEN}); "
                "for a URL that is a secret as a whole, write 'url_env: ENV_VAR_NAME' instead")
    literal = ENV_REF.sub("", url)
    host = parts.hostname.lower()
    why = None
    if "@" in parts.netloc:
        why = "a user name or password before the host"
    elif any(_SECRET_QUERY.search(k) and v and "ENVREF" not in v for k, v in urllib.parse.parse_qsl(parts.query)):
        why = "a signature, key or token in its query"
    elif any(host == h or host.endswith("." + h) for h, _ in _SECRET_HOSTS):
        why = "the address of a " + next(s for h, s in _SECRET_HOSTS if host == h or host.endswith("." + h)) + \
              " webhook, which is its own credential"
    elif _token_like(urllib.parse.urlsplit(literal).path) or _token_like(parts.query.replace("ENVREF", "")):
        why = "a token-like path segment"
    if why:
        return (f"holds a credential written in the file ({why}; not shown here): put the URL in an environment "
                "variable and write 'url_env: ENV_VAR_NAME', or write the secret part as ${ENV_VAR_NAME}; rotate it "
                "if this file was shared")
    return None


def header_problems(headers: Any) -> Problems:
    """Problems of a ``headers:`` mapping, each with the path of the header it is about."""
    if not isinstance(headers, Mapping):
        return [(("headers",), "must map header names to values, e.g. {Authorization: 'Bearer ${API_TOKEN}'}")]
    out: Problems = []
    for name, value in headers.items():
        path = ("headers", str(name))
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            out.append((path, f"header name {str(name)[:40]!r} is not a valid HTTP header name"))
            continue
        if name.lower() in _RESERVED_HEADERS:
            out.append((path, f"header {name!r} is set by the HTTP client; leave it out"))
            continue
        if not isinstance(value, str):
            out.append((path, f"header {name!r} must be a string; quote it"))
            continue
        if any(c in value for c in "\r\n\0"):
            out.append((path, f"header {name!r} must be one line"))
            continue
        out += [(path, f"header {name!r}: {p}") for p in template_problems(value, fields=False)]
        literal = ENV_REF.sub("", value).strip()
        secret_named = bool(SECRET_HEADER.search(name))
        if (secret_named and (not ENV_REF.search(value) or (literal and not _SCHEME_WORD.fullmatch(literal)))) \
                or _token_like(literal):
            out.append((path, f"header {name!r} would hold a secret written in the file (not shown here); write "
                              f"the secret as ${{ENV_VAR_NAME}}, e.g. {name}: 'Bearer ${{API_TOKEN}}', and rotate it "
                              "if this file was shared"))
    return out


def body_problems(body: Any) -> Problems:
    """Problems of a ``body:`` template (a mapping or list), each with the path of the string it is about."""
    if not isinstance(body, (Mapping, list)):
        return [(("body",), "must be a mapping (the JSON object to send), e.g. {text: '{title}', state: '{state}'}")]
    if _depth(body) > MAX_BODY_DEPTH:
        return [(("body",), f"is nested more than {MAX_BODY_DEPTH} levels deep")]
    strings = list(walk_strings(body, ("body",)))
    if sum(len(s) for _, s in strings) > MAX_BODY_CHARS:
        return [(("body",), f"holds more than {MAX_BODY_CHARS:,} characters of text")]
    out: Problems = [(path, f"{'.'.join(path)}: {p}") for path, s in strings for p in template_problems(s)]
    for path, s in strings:  # a routing key or token written out: the body is posted, and kept in checkpoints
        if _token_like(_FIELD_REF.sub("", ENV_REF.sub("", s))):
            out.append((path, f"{'.'.join(path)} would hold a secret written in the file (a token-like value, not "
                              f"shown here); write it as ${{ENV_VAR_NAME}}, e.g. {path[-1]}: '${{PD_ROUTING_KEY}}', "
                              "and rotate it if this file was shared"))
    return out


def _depth(value: Any) -> int:
    if isinstance(value, Mapping):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def http_option_problem(key: str, value: Any) -> str | None:
    """Why one HTTP-channel setting's value is refused, or None (for the checkpoint's ``safe_options``)."""
    if key == "url":
        return url_problem(value)
    if key == "headers":
        problems = header_problems(value)
        return problems[0][1] if problems else None
    if key == "body":
        problems = body_problems(value)
        return problems[0][1] if problems else None
    if key == "retries":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RETRIES
        return None if ok else f"must be a whole number from 0 to {MAX_RETRIES}"
    if key == "send_resolved":
        return None if isinstance(value, bool) else "must be true or false"
    return None


def check_http_channel(ctype: str, v: Mapping[str, Any]) -> Problems:
    """Every problem of one HTTP channel's settings, with the path of the setting each is about."""
    out: Problems = []
    if ctype == "webhook":
        if ("url" in v) == ("url_env" in v):
            out.append(((), "set exactly one of 'url' (the endpoint, e.g. https://example.com/hooks/rl) or "
                            "'url_env' (the name of an environment variable holding a URL that is itself a secret)"))
        if "url" in v and (p := url_problem(v["url"])):
            out.append((("url",), f"'url' {p}"))
        if "headers" in v:
            out += header_problems(v["headers"])
        if "body" in v:
            out += body_problems(v["body"])
    elif "webhook_url_env" not in v:
        service = "Discord" if ctype == "discord" else "Teams workflow"
        out.append(((), f"set 'webhook_url_env' to the name of the environment variable holding the {service} "
                        "webhook URL"))
    for key in ("retries", "send_resolved"):
        if key in v and (p := http_option_problem(key, v[key])):
            out.append(((key,), f"'{key}' {p}"))
    return out


def env_refs(options: Mapping[str, Any]) -> list[str]:
    """The environment variables an HTTP channel's settings name with ``${NAME}`` (url, headers, body)."""
    names: list[str] = []
    for key in ("url", "headers", "body"):
        for _, s in walk_strings(options.get(key), (key,)):
            names += [n for n in ENV_REF.findall(s) if n not in names]
    return names
