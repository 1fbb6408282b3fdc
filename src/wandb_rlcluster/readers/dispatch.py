"""Turn a training-log file into a plain list of row dicts, whatever its format (detected from the content).

The analyzer only wants ``list[dict[str, scalar]]``; where the rows came from (a transformers ``trainer_state.json``, a
bare list, a project's own wrapper dict, JSON Lines, a W&B CSV export, or dict lines printed by the HF Trainer to
stdout) is decided here and read by the reader of that format, so the analyzer never sees file formats.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .csv_export import _CSV_SUFFIXES, _looks_like_csv, _parse_csv
from .files import _EXPECTED, InputRefused, LoadedLog, _decode, _error, _os_reason, _TooLong, read_bounded
from .json_document import _cut_off, _describe_json_error, _from_json
from .lines import _LOG_SUFFIXES, _has_row_lines, _parse_lines
from .values import _fix_json_tokens, _loads, _quote_value_tokens


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
