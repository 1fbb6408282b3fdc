"""Turn a training-log file into a plain list of row dicts.

The analyzer only wants ``list[dict[str, scalar]]``; everything about *where* the rows came
from (a transformers ``trainer_state.json``, a bare list, a project's own wrapper dict, JSON
Lines, a W&B CSV export, or dict lines printed by the HF Trainer to stdout) is handled here so
the analyzer never sees file formats.  The module is standard-library only on purpose: it must
import in a bare environment (CI, a login node) without numpy, torch or wandb.

Every failure is a :class:`LogReadError` carrying one human-readable line; no ``json``, ``csv``
or ``UnicodeDecodeError`` exception leaks out, because the CLI prints the message as-is.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LoadedLog", "LogReadError", "load_rows", "parse_rows_text"]

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

# Strings are matched (and kept verbatim) before bare tokens, so 'nan' inside a quoted key or
# value is never rewritten; only a bare word standing where a value would stand is replaced.
_TOKEN_RE = re.compile(
    r"\"(?:[^\"\\\n]|\\.)*\""
    r"|'(?:[^'\\\n]|\\.)*'"
    r"|(?<![\w.])([-+]?)(nan|inf(?:inity)?|none|null|true|false)(?![\w.])",
    re.IGNORECASE,
)

# Cheap first try for big files: quote nan/inf tokens in value position with a C-level template.
# It may also hit text inside a string such as "a:nan,b", but quoting there always leaves two
# JSON values side by side, so json.loads rejects the result and the string-aware rewrite runs.
_VALUE_TOKEN_RE = re.compile(r"([:,\[]\s*)([-+]?(?:nan|inf(?:inity)?))(?=\s*[,}\]])", re.IGNORECASE)


class LogReadError(ValueError):
    """A log file could not be turned into rows; ``str()`` is a single line meant for the user."""

    def __init__(self, message: str) -> None:
        # Collapse newlines so a file name or a parser message can never break the one-line promise.
        super().__init__(" ".join(str(message).split()))


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
    if not p.exists():
        raise _error(shown, "no such file", "check the path")
    if p.is_dir():
        raise _error(shown, "it is a directory", _dir_hint(p))
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise _error(shown, f"it cannot be opened ({exc.strerror or type(exc).__name__})") from None
    text = _decode(data, shown)
    return _parse(text, shown, _suffix(p))


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
            return _from_json(json.loads(stripped), name, stripped)
        except json.JSONDecodeError as exc:
            json_error = exc
        except RecursionError:
            raise _error(name, "its JSON is nested too deeply to be a training log") from None
        if json_error.msg != "Extra data":  # "Extra data" means JSON Lines: skip the rewrites
            for rewrite in (_quote_value_tokens, _fix_json_tokens):
                fixed, n = rewrite(stripped)
                if not n:
                    continue
                try:
                    obj = json.loads(fixed)
                except (ValueError, RecursionError):
                    continue
                return _from_json(obj, name, fixed)
    else:
        # A bare JSON scalar ("42", "null") deserves a precise message; other text fails fast here.
        try:
            scalar = json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            return _from_json(scalar, name, stripped)

    lines = _parse_lines(text, name, suffix)
    if lines is not None:
        return lines
    if json_error is not None:
        raise _error(name, f"it is not valid JSON ({_describe_json_error(json_error, stripped)})")
    if suffix not in _LOG_SUFFIXES and _looks_like_csv(stripped):
        return _parse_csv(text, name, None)
    if suffix in _LOG_SUFFIXES:
        raise _error(name, "no line in it looks like a logged dict such as {'loss': 0.5, ...}", _EXPECTED)
    raise _error(name, "it is not a recognised log format", _EXPECTED)


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
    for raw in text.splitlines():
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
        return None
    fmt = "stdout_log" if python_style else "jsonl"
    skipped_lines = bad if python_style else bad + other
    return LoadedLog(rows, fmt, name, {"skipped_rows": skipped_rows, "skipped_lines": skipped_lines})


def _embedded_dict_start(line: str) -> int:
    if not line.endswith("}"):
        return -1
    hits = [i for i in (line.find("{'"), line.find('{"')) if i >= 0]
    return min(hits) if hits else -1


def _parse_line(s: str) -> tuple[object | None, bool]:
    """Return (object, parsed_as_python) or (None, False); never raises."""
    try:
        return json.loads(s), False
    except (ValueError, RecursionError):
        pass
    fixed, n = _fix_json_tokens(s)
    if n:
        try:
            return json.loads(fixed), False
        except (ValueError, RecursionError):
            pass
    # ast.literal_eval only builds literals, so a hostile line cannot run code.
    pyfixed, _ = _fix_tokens(s, python=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # compile() warns about odd literals in junk lines
            return ast.literal_eval(pyfixed), True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None, False


def _quote_value_tokens(text: str) -> tuple[str, int]:
    return _VALUE_TOKEN_RE.subn(r'\1"\2"', text)


def _fix_json_tokens(text: str) -> tuple[str, int]:
    return _fix_tokens(text, python=False)


def _fix_tokens(text: str, *, python: bool) -> tuple[str, int]:
    """Rewrite bare nan/inf/None/true... tokens (outside strings) so json or literal_eval accept them.

    nan/inf become quoted strings, which row cleaning turns back into floats; None/null and
    true/false are spelled the way the target parser wants.
    """
    count = 0

    def repl(m: re.Match[str]) -> str:
        nonlocal count
        word = m.group(2)
        if word is None:
            return m.group(0)  # a quoted string: keep verbatim
        sign, low = m.group(1), word.lower()
        if low == "nan":
            out = '"nan"'
        elif low.startswith("inf"):
            out = '"-inf"' if sign == "-" else '"inf"'
        elif sign:
            return m.group(0)  # '-true' is not something we can mend
        elif low in ("none", "null"):
            out = "None" if python else "null"
        else:
            out = low.capitalize() if python else low
        if out != m.group(0):
            count += 1
        return out

    return _TOKEN_RE.sub(repl, text), count


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
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        s = value.strip()
        try:
            return int(s)
        except ValueError:
            try:
                return float(s)
            except ValueError:
                return None
    return None


def _decode(data: bytes, name: str) -> str:
    """Bytes to text; gzip and UTF-16 (PowerShell redirects) are common enough to accept."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, ValueError) as exc:
            raise _error(name, f"it is a damaged gzip file ({exc})") from None
    try:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            return data.decode("utf-16")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _error(
            name, "it is not UTF-8 text", "is it a binary file, or a checkpoint instead of a log?"
        ) from None


def _suffix(p: Path) -> str:
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def _dir_hint(p: Path) -> str:
    direct = p / "trainer_state.json"
    if direct.is_file():
        return f"did you mean '{direct}'?"
    found = sorted(p.glob("checkpoint-*/trainer_state.json"), key=_checkpoint_number)
    if found:
        return f"did you mean '{found[-1]}' (the latest checkpoint)?"
    return "pass a trainer_state.json, a JSON/JSONL log or a W&B CSV file"


def _checkpoint_number(state: Path) -> int:
    tail = state.parent.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _describe_json_error(exc: json.JSONDecodeError, text: str) -> str:
    where = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if exc.pos >= len(text) - 1:
        where += "; the file looks truncated"
    return where


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
