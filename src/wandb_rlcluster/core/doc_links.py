"""Where a finding's or an alert's rule is documented: one function builds every link.

Why: a person reading an alert at 3 a.m. needs the rule's page (what it means, what to do, how to tune or silence
it) one click away, and the CLI, the JSON, Slack, e-mail, the dashboard and the journal must all point at the same
page. The pages are generated from the rule catalog (``rlcluster rules --markdown``), one per rule id, at
``rules/<rule id>`` in the manual.

The base is ``RLCLUSTER_DOCS_URL`` (the address where the manual is served, e.g. ``https://example.org/rlcluster``
or ``file:///path/to/site``): links are then ``<base>/rules/<id>.html``, the page the site build writes. Without it
a link is the command that prints the same page in any install, ``rlcluster rules <id>`` (a wheel has no docs/
folder, so a repository path would point nowhere).
"""

from __future__ import annotations

import os

DOCS_URL_ENV = "RLCLUSTER_DOCS_URL"
"""The environment variable holding the manual's base address."""

COMMAND = "rlcluster rules"
"""Without a base: the command that prints a rule's page."""

ALERT_RULES_PAGE = "rules/alert-rules"
"""The manual's page of the shipped alert rules and liveness alerts (one anchor per name)."""


def _base(base: str | None) -> str:
    return (os.environ.get(DOCS_URL_ENV, "") if base is None else base).strip().rstrip("/")


def rule_page(rule_id: str) -> str:
    """The manual's page of a rule, without suffix: ``rules/<id>`` (a per-function id ``x:fn`` is rule ``x``)."""
    return "rules/" + rule_id.split(":", 1)[0].strip()


def doc_url(page: str, base: str | None = None) -> str:
    """The link to a manual page (``rules/kl-warn``, ``alerts``) under ``base`` or ``$RLCLUSTER_DOCS_URL``; without
    either, the page's name in the manual (``alerts.html``)."""
    root = _base(base)
    return f"{root}/{page}.html" if root else f"{page}.html"


def rule_doc_url(rule_id: str, base: str | None = None) -> str:
    """Where a gauge rule is explained: ``<base>/rules/kl-warn.html`` with a base, else ``rlcluster rules kl-warn``."""
    rid = rule_id.split(":", 1)[0].strip()
    root = _base(base)
    return f"{root}/{rule_page(rid)}.html" if root else f"{COMMAND} {rid}"


def alert_doc_url(name: str, base: str | None = None) -> str:
    """Where an alert rule (or a liveness alert) is explained: its entry on the alert rules page with a base, else
    ``rlcluster rules <name>`` (which prints the alert rule, and the gauge rule of the same name where there is one)."""
    root = _base(base)
    return f"{root}/{ALERT_RULES_PAGE}.html#{name}" if root else f"{COMMAND} {name}"
