"""A W&B CSV (or TSV) export of a run's history: one row per line, a header of metric names."""

from __future__ import annotations

import csv
import io

from .files import LoadedLog, _error
from .values import _str_value

_CSV_SUFFIXES = frozenset({".csv", ".tsv"})


_WANDB_MARKERS = frozenset({"_step", "_runtime", "_timestamp", "Step"})


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
