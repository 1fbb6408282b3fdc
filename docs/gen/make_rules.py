"""The manual's rule pages (docs/rules/: one page per rule, index.md, img/ pictures), generated from the catalog.

Why: a hand-copied list of rules drifts from the rules the code raises, and a hand-made picture from the rule it
shows. `make docs` and `make docs-build` run this before building the site, so no page or picture can be older than
the code; `tests/test_rule_catalog.py` fails when the committed copy differs from what this writes.

    python docs/gen/make_rules.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's code, installed or not

from wandb_rlcluster.rules_reference import write_reference  # noqa: E402

PAGES = ROOT / "docs" / "rules"


def main() -> int:
    written = write_reference(PAGES)
    pages = sum(p.suffix == ".md" for p in written)
    print(f"rule pages: {pages} pages and {len(written) - pages} pictures in {PAGES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
