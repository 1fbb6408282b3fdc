"""Where a finding's or an alert's rule is documented: one function builds every link.

Why: a person reading an alert at 3 a.m. needs the rule's page (what it means, what to do, how to tune or silence
it) one click away, and the CLI, the JSON, Slack, e-mail, the dashboard and the journal must all point at the same
page. The pages are generated from the rule catalog (``rlcluster rules --markdown``), one per rule id, at
``rules/<rule id>`` in the manual.

The base is ``RLCLUSTER_DOCS_URL`` (the address where the manual is served, e.g. ``https://example.org/rlcluster``
or ``file:///path/to/site``): links are then ``<base>/rules/<id>.html``, the page the site build writes. Without it
a link is the page's source in the project, ``docs/rules/<id>.md``, which resolves in a checkout and on the
repository's web view.
"""

from __future__ import annotations

import os

DOCS_URL_ENV = "RLCLUSTER_DOCS_URL"
"""The environment variable holding the manual's base address."""

SOURCE_DIR = "docs"
"""The default base: the manual's source folder in the project (links end in ``.md``)."""


def rule_page(rule_id: str) -> str:
    """The manual's page of a rule, without suffix: ``rules/<id>`` (a per-function id ``x:fn`` is rule ``x``)."""
    return "rules/" + rule_id.split(":", 1)[0].strip()


def doc_url(page: str, base: str | None = None) -> str:
    """The link to a manual page (``rules/kl-warn``, ``alerts``), under ``base`` or ``$RLCLUSTER_DOCS_URL``."""
    if base is None:
        base = os.environ.get(DOCS_URL_ENV, "").strip()
    if base:
        return f"{base.rstrip('/')}/{page}.html"
    return f"{SOURCE_DIR}/{page}.md"


def rule_doc_url(rule_id: str, base: str | None = None) -> str:
    """The link to a rule's page: ``docs/rules/kl-warn.md``, or ``<base>/rules/kl-warn.html`` with a base."""
    return doc_url(rule_page(rule_id), base)
