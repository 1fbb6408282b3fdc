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
    reader = LineRows(suffix)
    rows = [row for row in map(reader.row, text.splitlines()) if row is not None]
    return reader.result(rows, name)


class LineRows:
    """The line-by-line reading, one line at a time, so a whole text (``_parse_lines``) and a file streamed from
    disk (``stream.py``) read the same rows and count the same skipped lines."""

    def __init__(self, suffix: str) -> None:
        self.python_style = suffix in _LOG_SUFFIXES
        self.skipped_rows = 0
        self.bad = 0
        self.other = 0
        self.too_long = 0  # the first line (1-based) too long to be a row
        self.number = 0
        self.rows = 0

    def row(self, raw: str) -> dict[str, object] | None:
        """The row on this line, or None (counted as skipped, not a row, or blank)."""
        if len(raw) > MAX_LINE_CHARS:  # far longer than any logged row: not worth a parse attempt
            self.too_long_line()
            return None
        self.number += 1
        s = raw.strip()
        if not s:
            return None
        if s[0] not in "{[":
            start = _embedded_dict_start(s)
            if start < 0:
                self.other += 1
                return None
            s = s[start:]
            self.python_style = True
        s = s.rstrip(",")  # tolerate one-row-per-line JSON arrays cut off before the closing ']'
        obj, used_python = _parse_line(s)
        if obj is None:
            self.bad += 1
            return None
        self.python_style = self.python_style or used_python
        row = _clean_item(obj, str_keys=not used_python)
        if row:
            self.rows += 1
            return row
        self.skipped_rows += 1
        return None

    def too_long_line(self) -> None:
        """Count a line too long to be a row (a stream skips its bytes without reading it whole)."""
        self.number += 1
        self.bad += 1
        self.too_long = self.too_long or self.number

    @property
    def source_format(self) -> str:
        return "stdout_log" if self.python_style else "jsonl"

    def meta(self) -> dict[str, object]:
        skipped_lines = self.bad if self.python_style else self.bad + self.other
        meta: dict[str, object] = {"skipped_rows": self.skipped_rows, "skipped_lines": skipped_lines}
        if self.python_style:  # a printed log's other lines (banners, warnings, progress bars): counted, said, not rows
            meta["text_lines"] = self.other
        return meta

    def no_rows(self, name: str) -> None:
        """Raise ``_TooLong`` when no line gave a row because a line was too long to be one."""
        if self.too_long:
            raise _TooLong(f"rlcluster: cannot read '{name}': line {self.too_long} is too long to be a logged row "
                           f"(over {MAX_LINE_CHARS:,} characters)")

    def result(self, rows: list[dict[str, object]], name: str) -> LoadedLog | None:
        if not rows:
            self.no_rows(name)
            return None
        return LoadedLog(rows, self.source_format, name, self.meta())


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
