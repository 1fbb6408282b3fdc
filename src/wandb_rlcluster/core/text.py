"""Make untrusted text safe to print: the one sanitiser every text output goes through.

Metric names, file names, alert titles and reward-function names come from logs and configs that
people (and crashing processes) wrote. Printed raw, an ESC sequence in a metric name can clear the
screen, retitle the window or paint a fake "ALL GAUGES OK"; a newline can forge a whole output line;
a bidi override can make text read differently from what it is, and a zero-width space can make two
different names look the same. Every such character is replaced by a visible escape (``\\x1b``,
``\\n``, ``\\u202e``), so the text still says what was there.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["clean_text", "did_you_mean"]

# C0 controls (tab and newline included: one printed item must stay on one line), DEL, C1 controls, the
# line/paragraph separators, and every invisible format character (Unicode category Cf, as of Unicode 15.1):
# bidi embeddings/overrides/isolates and marks (LRM, RLM, U+061C), zero-width spaces and joiners, the BOM,
# soft hyphens, tag characters. Written out rather than computed: scanning unicodedata costs ~0.3 s at import.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u2028\u2029"
    "\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    named = _NAMED.get(ch)
    if named:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clean_text(value: object, limit: int | None = None) -> str:
    """``str(value)`` with every control character shown as an escape; cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return _UNSAFE.sub(_escape, text)


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options`` to a misspelt ``word``, or ``""``."""
    m = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {m[0]!r}?)" if m else ""
