"""Turn a training-log file into a plain list of row dicts.

The analyzer only wants ``list[dict[str, scalar]]``; everything about *where* the rows came
from (a transformers ``trainer_state.json``, a bare list, a project's own wrapper dict, JSON
Lines, a W&B CSV export, or dict lines printed by the HF Trainer to stdout) is handled here so
the analyzer never sees file formats.  The module is standard-library only on purpose: it must
import in a bare environment (CI, a login node) without numpy, torch or wandb.

Every failure is a :class:`LogReadError` carrying one human-readable line; no ``json``, ``csv``
or ``UnicodeDecodeError`` exception leaks out, because the CLI prints the message as-is.

Inputs are hostile until read: files come from crashing processes and from people. Every file goes
through :func:`read_bounded` (regular files only, a size cap, a bounded gzip), and every parsing step
is linear in the input: one pass of C-level ``json``, token rewrites whose regex never rescans a
string, and line-by-line fallbacks that skip lines too long to be a logged row.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import math
import os
import re
import stat
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["InputRefused", "InputTooLarge", "LoadedLog", "LogReadError", "input_limit", "load_rows", "parse_rows_text",
           "read_bounded"]

#: Largest input read into memory, in bytes (a 100k-row trainer_state.json is ~100 MB; reading costs
#: ~3-6x the file). The environment variable ``RLCLUSTER_MAX_INPUT_BYTES`` changes it.
MAX_INPUT_BYTES = 512 * 1024**2
#: A gzip file may expand to at most this many times its own size (JSON logs compress 5-20x; a "gzip
#: bomb" 1000x or more) ...
MAX_GZIP_RATIO = 100
#: ... except that up to this many bytes are always allowed (a small, very repetitive log).
GZIP_RATIO_FLOOR = 32 * 1024**2
#: Longest line the line-by-line readers (JSON Lines, stdout logs) try to parse: a logged row is a few KB.
MAX_LINE_CHARS = 1 << 20
#: Longest line handed to ``ast.literal_eval`` (Python-repr rows): its syntax tree costs ~100x the text.
MAX_PY_LINE_CHARS = 64 * 1024

#: Keys of wrapper dicts that may hold the row list, in the order they are preferred.
ROW_KEYS: tuple[str, ...] = ("log_history", "raw_log_history", "steps", "history", "rows", "logs")

#: Run-level numbers worth handing to the analyzer (e.g. to know how far a checkpoint got).
META_KEYS: tuple[str, ...] = (
    "max_steps",
    "logging_steps",
    "global_step",
    "eval_steps",
    "save_steps",
    "num_train_epochs",
    "train_batch_size",
    "epoch",
)

#: Nested dicts that wrapper formats use for run settings (e.g. TRL's ``{"config": {"args": ...}}``).
_META_CONTAINERS: tuple[tuple[str, ...], ...] = (
    ("config", "args"),
    ("config",),
    ("args",),
    ("training_args",),
    ("metadata",),
)

_LOG_SUFFIXES = frozenset({".log", ".txt", ".out", ".err"})
_CSV_SUFFIXES = frozenset({".csv", ".tsv"})
_SCALAR_TYPES = frozenset({float, int, bool})
_WANDB_MARKERS = frozenset({"_step", "_runtime", "_timestamp", "Step"})
_EXPECTED = (
    "expected a trainer_state.json, a JSON list of rows, JSON Lines, a W&B CSV export or a Trainer stdout log"
)

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


# An integer literal too long for int() (Python's 4,300-digit limit); 1e999 is a float literal for inf.
_LONG_INT_RE = re.compile(r"(?<![\w.])\d{4000,}(?![\w.])")


class LogReadError(ValueError):
    """A log file could not be turned into rows; ``str()`` is a single line meant for the user."""

    def __init__(self, message: str) -> None:
        # Collapse newlines so a file name or a parser message can never break the one-line promise.
        super().__init__(" ".join(str(message).split()))


class _TooLong(LogReadError):
    """No row found, and a line was too long to try: said only when nothing more precise is known."""


class InputRefused(ValueError):
    """A path that cannot or must not be read as an input file; ``str()`` is a short reason phrase
    (``"it is a named pipe (FIFO), not a regular file"``) that each caller puts after the file name."""


class InputTooLarge(InputRefused):
    """The file is over the size limit it was read with."""


def input_limit() -> int:
    """The input size cap in bytes: ``RLCLUSTER_MAX_INPUT_BYTES`` when set to a positive integer."""
    raw = os.environ.get("RLCLUSTER_MAX_INPUT_BYTES", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_INPUT_BYTES


_FILE_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bounded(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default :func:`input_limit`).

    Every input file (logs, W&B run files, alert configs) is read through here, so none of them
    can block (a FIFO waits forever for a writer), stream forever (``/dev/zero``) or fill memory.
    The path is looked at before it is opened (opening some devices has effects of its own), then
    opened without blocking and checked again on the open descriptor, which a swap of the path cannot
    fool. Raises :class:`InputRefused` with a short reason.
    """
    limit = input_limit() if limit is None else limit
    try:  # look before opening: opening a device can itself do something (/dev/watchdog arms a timer)
        kind = _not_regular(os.stat(path).st_mode)
    except (OSError, ValueError):
        kind = None  # open() below says why
    if kind:
        raise InputRefused(kind)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputRefused("no such file") from None
    except IsADirectoryError:
        raise InputRefused("it is a directory") from None
    except PermissionError:
        raise InputRefused("permission denied") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise InputRefused(f"it cannot be opened ({_os_reason(exc)})") from None
    try:
        st = os.fstat(fd)
        kind = _not_regular(st.st_mode)  # again on the open descriptor: the path may have been swapped
        if kind:
            raise InputRefused(kind)
        if st.st_size > limit:
            raise InputTooLarge(f"it is {_size(st.st_size)}, over the {_size(limit)} input limit "
                               "(set RLCLUSTER_MAX_INPUT_BYTES to raise it)")
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = _read_capped(fh, limit, st.st_size)
    except MemoryError:
        raise InputRefused("it does not fit in memory") from None
    except OSError as exc:
        raise InputRefused(f"it cannot be read ({_os_reason(exc)})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:  # still growing while being read
        raise InputTooLarge(f"it is over the {_size(limit)} input limit (set RLCLUSTER_MAX_INPUT_BYTES to raise it)")
    return data


def _not_regular(mode: int) -> str | None:
    """Why a file of this mode is refused, or None for a regular file."""
    if stat.S_ISDIR(mode):
        return "it is a directory"
    for test, kind in _FILE_KINDS:
        if test(mode):
            return f"it is {kind}, not a regular file"
    return None


def _read_capped(fh: io.BufferedIOBase | gzip.GzipFile, limit: int, expected: int = 0) -> bytes:
    """At most ``limit + 1`` bytes (one more than allowed tells "too big"). Never asks for more than it
    expects in one call: ``read(n)`` allocates ``n`` bytes up front, so ``read(limit)`` would reserve the
    whole cap for a 10-byte file. A file that keeps growing (or a /proc file that says 0 bytes) is read on
    in 1 MiB pieces."""
    want = min(max(expected, 0), limit) + 1
    data = fh.read(want)
    if len(data) < want:
        return data
    parts, total = [data], len(data)
    while total <= limit:
        piece = fh.read(min(1 << 20, limit + 1 - total))
        if not piece:
            break
        parts.append(piece)
        total += len(piece)
    return b"".join(parts)


def _os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


@dataclass
class LoadedLog:
    """Rows in file order plus what the analyzer may want to know about the source."""

    rows: list[dict[str, object]]
    source_format: str
    path: str
    meta: dict[str, object] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------


def load_rows(path: str | os.PathLike[str]) -> LoadedLog:
    """Read ``path`` (format detected from content) and return its rows.

    Raises :class:`LogReadError` for anything that is not a readable log, never a raw exception.
    """
    shown = os.fspath(path)
    p = Path(shown)
    try:
        is_dir = p.is_dir()
    except OSError as exc:  # a path inside a directory we may not list
        raise _error(shown, f"it cannot be opened ({_os_reason(exc)})") from None
    if is_dir:
        raise _error(shown, "it is a directory", _dir_hint(p))
    try:
        data = read_bounded(shown)
    except InputRefused as exc:
        raise _error(shown, str(exc), "check the path" if str(exc) == "no such file" else None) from None
    try:
        text = _decode(data, shown)
        del data
        return _parse(text, shown, _suffix(p))
    except MemoryError:
        raise _error(shown, "it does not fit in memory while being parsed") from None


def parse_rows_text(text: str, name: str = "<text>") -> LoadedLog:
    """Same logic as :func:`load_rows` on an in-memory string; ``name`` is used in messages and
    its extension (``.csv``, ``.log`` ...) is honoured like a file's would be."""
    if not isinstance(text, str):
        raise _error(name, f"expected text, got {type(text).__name__}")
    return _parse(text.lstrip("\ufeff"), name, _suffix(Path(name)))


# --------------------------------------------------------------------------------------------
# dispatch
# --------------------------------------------------------------------------------------------


def _parse(text: str, name: str, suffix: str) -> LoadedLog:
    stripped = text.strip()
    if not stripped:
        raise _error(name, "the file is empty", "the run may not have logged anything yet")
    if suffix in _CSV_SUFFIXES:
        if stripped[0] in "{[":
            raise _error(name, f"it is named {suffix} but holds JSON", "rename it to .json or .jsonl")
        return _parse_csv(text, name, "\t" if suffix == ".tsv" else None)

    first = stripped[0]
    json_error: json.JSONDecodeError | None = None
    if first in "{[":
        # Fast path: one C-level json.loads over the whole text (also accepts NaN/Infinity).
        try:
            return _from_json(_loads(stripped), name, stripped)
        except json.JSONDecodeError as exc:
            json_error = exc
        except RecursionError:
            raise _error(name, "its JSON is nested too deeply to be a training log") from None
        if json_error.msg != "Extra data":  # "Extra data" means JSON Lines: skip the rewrites
            # A document cut off at its end (a checkpoint caught mid-write) cannot be mended by rewriting
            # tokens: say so at once instead of paying for rewrites and a line-by-line pass.
            if not _cut_off(json_error, stripped):
                for rewrite in (_quote_value_tokens, _fix_json_tokens):
                    fixed, n = rewrite(stripped)
                    if not n:
                        continue
                    try:
                        obj = _loads(fixed)
                    except json.JSONDecodeError as exc:
                        if _cut_off(exc, fixed):  # the rewrite mended the tokens; the end is still missing
                            json_error, stripped = exc, fixed
                        continue
                    except (ValueError, RecursionError):
                        continue
                    return _from_json(obj, name, fixed)
            if json_error.lineno > 1 and not _has_row_lines(stripped):
                # One multi-line document (an indented trainer_state.json): its lines are not rows, so
                # reading it line by line would only cost time. Report where the JSON breaks. A first line
                # that is not JSON at all ("[INFO] Running in WANDB offline mode", a "[2025-..]" logging
                # prefix) starts a printed log, not a document: its lines are read below.
                raise _error(name, f"it is not valid JSON ({_describe_json_error(json_error, stripped)})")
    else:
        # A bare JSON scalar ("42", "null") deserves a precise message; other text fails fast here.
        try:
            scalar = _loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            return _from_json(scalar, name, stripped)

    try:
        lines = _parse_lines(text, name, suffix)
    except _TooLong:
        if json_error is None:
            raise
        lines = None
    if lines is not None:
        return lines
    if json_error is not None:
        raise _error(name, f"it is not valid JSON ({_describe_json_error(json_error, stripped)})")
    if suffix not in _LOG_SUFFIXES and _looks_like_csv(stripped):
        return _parse_csv(text, name, None)
    if suffix in _LOG_SUFFIXES:
        raise _error(name, "no line in it looks like a logged dict such as {'loss': 0.5, ...}", _EXPECTED)
    raise _error(name, "it is not a recognised log format", _EXPECTED)


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


def _cut_off(exc: json.JSONDecodeError, text: str) -> bool:
    """True when the JSON is fine up to where the text ends: the file was cut off, not mistyped."""
    if exc.pos >= len(text) - 1:
        return True
    # json reports an unterminated string at its opening quote; it is cut off if no line break follows
    return exc.msg.startswith("Unterminated string") and text.find("\n", exc.pos) < 0


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


def _from_json(obj: object, name: str, text: str) -> LoadedLog:
    """Map a parsed JSON document onto rows, naming the shape it came in."""
    if isinstance(obj, list):
        if not obj:
            raise _error(name, "it is an empty JSON list (no log rows)")
        rows, skipped = _clean_rows(obj, str_keys=True)
        if not rows:
            raise _error(name, f"it is a JSON list with no usable row objects ({_list_summary(obj)})")
        return LoadedLog(rows, "rows", name, {"skipped_rows": skipped})

    if isinstance(obj, dict):
        for key in ROW_KEYS:
            value = obj.get(key)
            if isinstance(value, list) and any(isinstance(x, dict) for x in value):
                rows, skipped = _clean_rows(value, str_keys=True)
                if not rows:
                    raise _error(name, f"its '{key}' rows hold no usable scalar values")
                meta = _collect_meta(obj)
                meta["skipped_rows"] = skipped
                meta["rows_key"] = key
                return LoadedLog(rows, _dict_format(obj, key), name, meta)
        if isinstance(obj.get("log_history"), list):
            hint = "the run had not logged yet"
            if isinstance(obj.get("logging_steps"), (int, float)):
                hint += f"; logging_steps is {obj['logging_steps']}"
            raise _error(name, "its 'log_history' is empty", hint)
        if _is_single_row(obj, text):
            rows, skipped = _clean_rows([obj], str_keys=True)
            if rows:
                return LoadedLog(rows, "jsonl", name, {"skipped_rows": skipped, "skipped_lines": 0})
        keys = ", ".join(str(k) for k in list(obj)[:6]) + (", ..." if len(obj) > 6 else "")
        raise _error(
            name,
            "it is a JSON object with no log rows",
            f"expected trainer_state.json 'log_history' or a list of rows; top-level keys: {keys or 'none'}",
        )

    raise _error(name, f"it is a JSON {_json_type(obj)}, not a log", _EXPECTED)


def _dict_format(obj: dict[str, object], key: str) -> str:
    if key != "log_history":
        return key
    return "provenance" if "_provenance" in obj else "trainer_state"


def _is_single_row(obj: dict[str, object], text: str) -> bool:
    """A one-line JSON Lines file parses as one dict; accept it only if it looks like a row."""
    if "\n" in text.strip():
        return False
    values = list(obj.values())
    return bool(values) and all(not isinstance(v, (dict, list)) for v in values)


# --------------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# JSON Lines and stdout dict lines
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# CSV (W&B history export)
# --------------------------------------------------------------------------------------------


def _looks_like_csv(text: str) -> bool:
    lines = text.splitlines()
    return len(lines) >= 2 and ("," in lines[0] or "\t" in lines[0])


def _parse_csv(text: str, name: str, delimiter: str | None) -> LoadedLog:
    """Read a W&B export: strip ``<run> - `` prefixes, drop ``__MIN``/``__MAX`` band columns,
    turn numeric cells into floats and leave empty cells out of the row."""
    lines = text.lstrip("\ufeff").splitlines()
    header_line = next((ln for ln in lines if ln.strip()), "")
    if delimiter is None:
        delimiter = "\t" if "\t" in header_line and "," not in header_line else ","
    try:
        records = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter, strict=False))
    except (csv.Error, ValueError) as exc:
        raise _error(name, f"it is not readable as CSV ({exc})") from None
    records = [r for r in records if any(cell.strip() for cell in r)]
    if not records:
        raise _error(name, "the file is empty")
    header, body = records[0], records[1:]
    if not body:
        raise _error(name, "the CSV has a header but no data rows")

    columns: list[tuple[int, str]] = []
    runs: list[str] = []
    dropped = 0
    seen: set[str] = set()
    for index, raw in enumerate(header):
        col = raw.strip()
        if not col:
            continue  # pandas index column
        if " - " in col:
            run, col = (part.strip() for part in col.rsplit(" - ", 1))
            if run not in runs:
                runs.append(run)
        if col.endswith(("__MIN", "__MAX")):
            dropped += 1
            continue
        if col in seen:
            continue
        seen.add(col)
        columns.append((index, col))
    if len(runs) > 1:
        shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise _error(name, f"the CSV holds {len(runs)} runs ({shown})", "export the history of one run")
    if not columns:
        raise _error(name, "the CSV header has no metric columns")

    rows: list[dict[str, object]] = []
    numeric = 0
    for record in body:
        row: dict[str, object] = {}
        for index, col in columns:
            if index >= len(record):
                continue
            value = _str_value(record[index])
            if value is None:
                continue
            if type(value) is float:
                numeric += 1
            row[col] = value
        if row:
            rows.append(row)
    if numeric == 0:
        raise _error(name, "the CSV has no numeric cells", "is it really a W&B history export?")

    is_wandb = bool(runs) or dropped > 0 or any(c in _WANDB_MARKERS for _, c in columns)
    meta: dict[str, object] = {"skipped_rows": 0, "dropped_columns": dropped}
    if runs:
        meta["run_name"] = runs[0]
    return LoadedLog(rows, "wandb_csv" if is_wandb else "csv", name, meta)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _collect_meta(obj: dict[str, object]) -> dict[str, object]:
    """Run-level numbers from the top level or, failing that, a settings sub-dict."""
    meta: dict[str, object] = {}
    sources: list[dict[str, object]] = [obj]
    for chain in _META_CONTAINERS:
        node: object = obj
        for part in chain:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            sources.append(node)
    for key in META_KEYS:
        for source in sources:
            value = _meta_number(source.get(key))
            if value is not None:
                meta[key] = value
                break
    return meta


def _meta_number(value: object) -> int | float | None:
    """A finite run-level number (a global_step of 10**5000 or "nan" says nothing), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        s = value.strip()
        try:
            return int(s) if len(s) < 100 else None
        except ValueError:
            try:
                return _meta_number(float(s))
            except ValueError:
                return None
    return None


def _decode(data: bytes, name: str) -> str:
    """Bytes to text; gzip and UTF-16 (PowerShell redirects) are common enough to accept."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, name)
    try:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            return data.decode("utf-16")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _error(
            name, "it is not UTF-8 text", "is it a binary file, or a checkpoint instead of a log?"
        ) from None


def _gunzip(data: bytes, name: str) -> bytes:
    """Decompress, capped both by the input limit and by an expansion ratio: a small gzip can expand a
    thousandfold (a 400 KB "gzip bomb" is 400 MB of text, and reading text costs several times its size)."""
    limit = input_limit()
    ratio_cap = max(GZIP_RATIO_FLOOR, MAX_GZIP_RATIO * len(data))
    cap = min(limit, ratio_cap)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            out = _read_capped(fh, cap, 4 * len(data))
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise _error(name, f"it is a damaged gzip file ({_os_reason(exc) if isinstance(exc, OSError) else exc})"
                     ) from None
    if len(out) > cap:
        if cap < limit:
            raise _error(name, f"it decompresses to over {MAX_GZIP_RATIO}x its size ({_size(len(data))} to over "
                               f"{_size(cap)}): a gzip bomb?", "if it is a real log, gunzip it first")
        raise _error(name, f"it decompresses to over the {_size(limit)} input limit",
                     "set RLCLUSTER_MAX_INPUT_BYTES to raise it")
    return out


def _suffix(p: Path) -> str:
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def _dir_hint(p: Path) -> str:
    direct = p / "trainer_state.json"
    try:
        if direct.is_file():
            return f"did you mean '{direct}'?"
        found = sorted(p.glob("checkpoint-*/trainer_state.json"), key=_checkpoint_number)
    except OSError as exc:  # a directory we may not list
        return f"and it cannot be listed ({_os_reason(exc)}); pass a log file inside it"
    if found:
        return f"did you mean '{found[-1]}' (the latest checkpoint)?"
    return "pass a trainer_state.json, a JSON/JSONL log or a W&B CSV file"


def _checkpoint_number(state: Path) -> int:
    tail = state.parent.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _describe_json_error(exc: json.JSONDecodeError, text: str) -> str:
    if _cut_off(exc, text):
        return (f"it stops in the middle of a value at line {exc.lineno}, after {len(text):,} characters: the file "
                "was cut off, e.g. copied or read while being written; use the previous checkpoint")
    return f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"


def _json_type(obj: object) -> str:
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "boolean"
    if isinstance(obj, (int, float)):
        return "number"
    if isinstance(obj, str):
        return "string"
    if isinstance(obj, list):
        return "array"
    if isinstance(obj, dict):
        return "object"
    return type(obj).__name__


def _list_summary(items: list[object]) -> str:
    return f"{len(items)} items, the first is a {_json_type(items[0])}"


def _error(name: str, what: str, hint: str | None = None) -> LogReadError:
    message = f"rlcluster: cannot read '{name}': {what}"
    if hint:
        message += f" ({hint})"
    return LogReadError(message)
