"""A JSON document of rows: a transformers ``trainer_state.json`` (``log_history``), a bare list of rows, or a project's
own wrapper dict (``history``, ``rows``, ``logs`` ...), with the run-level numbers it carries (``max_steps`` ...)."""

from __future__ import annotations

import json
import math

from .files import _EXPECTED, LoadedLog, _error
from .values import _clean_rows

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


def _cut_off(exc: json.JSONDecodeError, text: str) -> bool:
    """True when the JSON is fine up to where the text ends: the file was cut off, not mistyped."""
    if exc.pos >= len(text) - 1:
        return True
    # json reports an unterminated string at its opening quote; it is cut off if no line break follows
    return exc.msg.startswith("Unterminated string") and text.find("\n", exc.pos) < 0


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
