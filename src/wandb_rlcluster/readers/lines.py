"""A log read line by line: JSON Lines, and the dict lines the HF Trainer prints to stdout (``{'loss': 0.5, ...}``,
Python literals included) among banners, warnings and progress bars. Lines too long to be a logged row are skipped."""

from __future__ import annotations

import ast
import re
import warnings

from .files import LoadedLog, _TooLong
from .values import _clean_item, _fix_json_tokens, _fix_tokens, _loads

#: Longest line the line-by-line readers (JSON Lines, stdout logs) try to parse: a logged row is a few KB.
MAX_LINE_CHARS = 1 << 20


#: Longest line handed to ``ast.literal_eval`` (Python-repr rows): its syntax tree costs ~100x the text.
MAX_PY_LINE_CHARS = 64 * 1024


_LOG_SUFFIXES = frozenset({".log", ".txt", ".out", ".err"})


# An integer literal too long for int() (Python's 4,300-digit limit); 1e999 is a float literal for inf.
_LONG_INT_RE = re.compile(r"(?<![\w.])\d{4000,}(?![\w.])")


def _has_row_lines(text: str, probe: int = 8) -> bool:
    """Whether one of the first non-blank lines is a whole row by itself (JSON Lines, a one-row-per-line
    array), as opposed to a piece of one indented document."""
    start = 0
    seen = 0
    while seen < probe and start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if end - start > MAX_LINE_CHARS:  # too long to be a row (and not worth a second parse of the text)
            seen += 1
            start = end + 1
            continue
        line = text[start:end].strip().rstrip(",")
        start = end + 1
        if not line:
            continue
        seen += 1
        if line[0] == "{" and line[-1] == "}" and _parse_line(line)[0] is not None:
            return True
    return False


def _parse_lines(text: str, name: str, suffix: str) -> LoadedLog | None:
    """Parse one object per line; ``None`` when no line yields a row (so the caller can go on).

    Lines that do not start with ``{`` may still end with a printed dict (a logging prefix or a
    tqdm bar before it), which is how HF Trainer output looks in a captured stdout file.
    """
    rows: list[dict[str, object]] = []
    skipped_rows = 0
    bad = 0
    other = 0
    python_style = suffix in _LOG_SUFFIXES
    too_long = 0  # the first line (1-based) too long to be a row
    for number, raw in enumerate(text.splitlines(), 1):
        if len(raw) > MAX_LINE_CHARS:  # far longer than any logged row: not worth a parse attempt
            bad += 1
            too_long = too_long or number
            continue
        s = raw.strip()
        if not s:
            continue
        if s[0] not in "{[":
            start = _embedded_dict_start(s)
            if start < 0:
                other += 1
                continue
            s = s[start:]
            python_style = True
        s = s.rstrip(",")  # tolerate one-row-per-line JSON arrays cut off before the closing ']'
        obj, used_python = _parse_line(s)
        if obj is None:
            bad += 1
            continue
        python_style = python_style or used_python
        row = _clean_item(obj, str_keys=not used_python)
        if row:
            rows.append(row)
        else:
            skipped_rows += 1

    if not rows:
        if too_long:
            raise _TooLong(f"rlcluster: cannot read '{name}': line {too_long} is too long to be a logged row "
                           f"(over {MAX_LINE_CHARS:,} characters)")
        return None
    fmt = "stdout_log" if python_style else "jsonl"
    skipped_lines = bad if python_style else bad + other
    meta: dict[str, object] = {"skipped_rows": skipped_rows, "skipped_lines": skipped_lines}
    if python_style:  # a printed log's other lines (banners, warnings, progress bars): counted, said, not rows
        meta["text_lines"] = other
    return LoadedLog(rows, fmt, name, meta)


def _embedded_dict_start(line: str) -> int:
    if not line.endswith("}"):
        return -1
    hits = [i for i in (line.find("{'"), line.find('{"')) if i >= 0]
    return min(hits) if hits else -1


def _parse_line(s: str) -> tuple[object | None, bool]:
    """Return (object, parsed_as_python) or (None, False); never raises."""
    try:
        return _loads(s), False
    except (ValueError, RecursionError):
        pass
    fixed, n = _fix_json_tokens(s)
    if n:
        try:
            return _loads(fixed), False
        except (ValueError, RecursionError):
            pass
    # ast.literal_eval only builds literals, so a hostile line cannot run code; its syntax tree costs
    # ~100x the text, so only row-sized lines get that far.
    if len(s) > MAX_PY_LINE_CHARS:
        return None, False
    pyfixed, _ = _fix_tokens(s, python=True)
    for attempt in range(2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # compile() warns about odd literals in junk lines
                return ast.literal_eval(pyfixed), True
        except (ValueError, SyntaxError) as exc:
            # an integer over Python's 4,300-digit limit (a SyntaxError from the compiler): inf, as json reads it
            if attempt or "integer string conversion" not in str(exc):
                return None, False
            pyfixed = _LONG_INT_RE.sub("1e999", pyfixed)
        except (TypeError, MemoryError, RecursionError):
            return None, False
    return None, False
