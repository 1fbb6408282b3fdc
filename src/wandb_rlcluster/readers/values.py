"""Values as trainers write them: JSON with ``NaN`` / ``Infinity`` / Python literals, integers too long for ``int()``,
and the cleaning every reader applies to a row (scalars kept, numeric strings read as numbers).

Every step is linear in the input: one pass of C-level ``json``, and token rewrites whose regex never rescans a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

_SCALAR_TYPES = frozenset({float, int, bool})


# Strings are found (and kept verbatim) before bare tokens, so 'nan' inside a quoted key or value is
# never rewritten; only a bare word standing where a value would stand is replaced. The scan runs over a
# masked copy of the text in which every escape that could hide a quote or a backslash (\\, \", \')
# is replaced by two NULs: same length, so positions carry over to the original. A string is then just a
# quote, a run of other characters and an optional closing quote (an unclosed string stops at the end of
# its line): single-character runs, which the regex engine matches in linear time with constant memory.
# (An alternation such as "(?:[^"\\\n]|\\.)*" keeps one saved state per character: a 10 MB string cost
# 1.2 GB. Possessive quantifiers would avoid it but need Python 3.11.)
_TOKEN_RE = re.compile(
    r"\"[^\"\n]*\"?"
    r"|'[^'\n]*'?"
    r"|(?<![\w.])([-+]?)(nan|inf(?:inity)?|none|null|true|false)(?![\w.])",
    re.IGNORECASE,
)


_MASK = "\0\0"


#: Replacements are joined into a chunk every this many pieces, so a text made of tokens costs a small
#: multiple of its size, not a list of millions of small strings.
_CHUNK_PIECES = 4096


# Cheap first try for big files: quote nan/inf tokens in value position. It may also hit text inside a
# string such as "a:nan,b", but quoting there always leaves two JSON values side by side, so json.loads
# rejects the result and the string-aware rewrite runs.
_VALUE_TOKEN_RE = re.compile(r"([:,\[]\s*)([-+]?(?:nan|inf(?:inity)?))(?=\s*[,}\]])", re.IGNORECASE)


def _loads(text: str) -> object:
    """``json.loads``, with an integer too long for ``int()`` (Python's 4,300-digit limit) read as a float:
    a value that does not fit a float is non-finite, not an error that drops the file or the row."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # "Exceeds the limit (4300 digits) for integer string conversion"
        return json.loads(text, parse_int=_parse_int)


def _parse_int(digits: str) -> int | float:
    try:
        return int(digits)
    except ValueError:
        return float(digits)  # float() has no digit limit: a huge integer becomes inf


def _clean_rows(items: list[object], *, str_keys: bool) -> tuple[list[dict[str, object]], int]:
    """Keep dict rows with their scalar entries; count what had to be thrown away."""
    rows: list[dict[str, object]] = []
    skipped = 0
    for item in items:
        row = _clean_item(item, str_keys=str_keys)
        if row:
            rows.append(row)
        else:
            skipped += 1
    return rows, skipped


def _clean_item(item: object, *, str_keys: bool) -> dict[str, object] | None:
    """``None`` for non-dicts; ``str_keys`` says the keys are known to be str (JSON objects)."""
    if type(item) is not dict:
        return None
    # Fast path: JSON rows of plain numbers are taken as they are, without per-value work.
    if str_keys and set(map(type, item.values())) <= _SCALAR_TYPES:
        return item
    return _clean_row(item)


def _clean_row(item: dict[object, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in item.items():
        if type(key) is not str:
            continue
        kind = type(value)
        if kind is float or kind is int or kind is bool:
            out[key] = value
        elif isinstance(value, str):
            converted = _str_value(value)
            if converted is not None:
                out[key] = converted
        # None, nested dict/list and any other Python literal (tuple, bytes ...) are dropped.
    return out


def _str_value(value: str) -> object:
    """Numbers printed as strings (TRL stdout, CSV cells) become floats; blanks vanish."""
    s = value.strip()
    if not s:
        return None
    try:
        return float(s)
    except ValueError:
        return value


def _quote_value_tokens(text: str) -> tuple[str, int]:
    def repl(m: re.Match[str]) -> str:
        return f'{m.group(1)}"{m.group(2)}"'

    return _rewrite(text, _VALUE_TOKEN_RE.finditer(text), repl)


def _fix_json_tokens(text: str) -> tuple[str, int]:
    return _fix_tokens(text, python=False)


def _rewrite(text: str, matches: Iterator[re.Match[str]], repl: Callable[[re.Match[str]], str | None]
             ) -> tuple[str, int]:
    """``text`` with each match replaced by ``repl(match)`` (None keeps it), and the number replaced.

    Linear, and bounded in memory: pieces are joined into chunks as they come, so a text made of
    millions of tokens costs about twice its size, not a list of millions of small strings.
    """
    chunks: list[str] = []
    pieces: list[str] = []
    last = count = 0
    for m in matches:
        out = repl(m)
        if out is None:
            continue
        start = m.start()
        pieces.append(text[last:start])
        pieces.append(out)
        last = m.end()
        count += 1
        if len(pieces) >= _CHUNK_PIECES:
            chunks.append("".join(pieces))
            pieces.clear()
    if not count:
        return text, 0
    pieces.append(text[last:])
    chunks.append("".join(pieces))
    pieces.clear()
    return "".join(chunks), count


def _fix_tokens(text: str, *, python: bool) -> tuple[str, int]:
    """Rewrite bare nan/inf/None/true... tokens (outside strings) so json or literal_eval accept them.

    nan/inf become quoted strings, which row cleaning turns back into floats; None/null and
    true/false are spelled the way the target parser wants. Linear in time, and memory is a small
    multiple of the text (see _TOKEN_RE and _rewrite).
    """
    masked = text
    if "\\" in text:
        masked = text.replace("\\\\", _MASK).replace('\\"', _MASK).replace("\\'", _MASK)

    def repl(m: re.Match[str]) -> str | None:
        word = m.group(2)
        if word is None:
            return None  # a quoted string: kept verbatim
        sign, low = m.group(1), word.lower()
        if low == "nan":
            out = '"nan"'
        elif low.startswith("inf"):
            out = '"-inf"' if sign == "-" else '"inf"'
        elif sign:
            return None  # '-true' is not something we can mend
        elif low in ("none", "null"):
            out = "None" if python else "null"
        else:
            out = low.capitalize() if python else low
        return None if out == text[m.start():m.end()] else out

    return _rewrite(text, _TOKEN_RE.finditer(masked), repl)
