"""Make untrusted text safe to print: the one sanitiser every text output goes through.

Metric names, file names, alert titles and reward-function names come from logs and configs that
people (and crashing processes) wrote. Printed raw, an ESC sequence in a metric name can clear the
screen, retitle the window or paint a fake "ALL GAUGES OK"; a newline can forge a whole output line;
a bidi override can make text read differently from what it is. Every such character is replaced by
a visible escape (``\\x1b``, ``\\n``, ``\\u202e``), so the text still says what was there.
"""

from __future__ import annotations

import re

__all__ = ["clean_text"]

# C0 controls (tab and newline included: one printed item must stay on one line), DEL, C1 controls,
# and the Unicode bidi embeddings/overrides/isolates plus the line/paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    named = _NAMED.get(ch)
    if named:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(value: object, limit: int | None = None) -> str:
    """``str(value)`` with every control character shown as an escape; cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return _UNSAFE.sub(_escape, text)
