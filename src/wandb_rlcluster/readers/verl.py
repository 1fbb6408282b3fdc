"""verl console logs: ``step:N - key:value - key:value ...`` lines, as verl's console logger prints them.

A real verl log is mostly something else (Ray start-up, the config dump, vLLM and NCCL chatter, sampled
responses); the metric lines carry a Ray prefix (``(TaskRunner pid=123)``, ``(main_task pid=…)``) and ANSI
colour codes, values may be printed as ``np.float64(0.25)`` (numpy >= 2 reprs), and newer verl prints one
``- key:value`` per line under a bare ``step:N``. Lines are cut: W&B's ``output.log`` capture keeps 4,096
characters of a line, terminals and log shippers cut elsewhere, and Ray glues another actor's output onto a
line. A cut line keeps what it has: every field followed by a separator is whole; the last field of a line
that ends without one is kept only when the line cannot have been cut (shorter than the cut width and not
the file's unfinished last line), and a value with text glued onto it is dropped, never guessed.

Standard library only, linear in the input, no exception for any text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .files import InputRefused, LoadedLog, LogReadError, _decode, read_bounded

__all__ = ["CUT_WIDTH", "is_verl_log", "load_verl_log", "parse_verl_log"]

#: W&B's ``output.log`` keeps this many characters of a line; a line this long may have been cut.
CUT_WIDTH = 4096
#: Lines longer than this are not looked at (a logged row is a few KB; a megabyte line is not one).
MAX_LINE = 1 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIX = re.compile(r"^\s*(?:\([^()\n]{0,200}\)\s*)+")  # one or more Ray "(Actor pid=N)" prefixes
_STEP = re.compile(r"^step:\s*(\d{1,15})(?:\s+-\s+|\s*$)")
_WRAPPED = re.compile(r"^(?:np|numpy|torch)\.\w+\((.*)\)$|^tensor\((.*?)(?:,\s*device=.*)?\)$")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)$",
                     re.IGNORECASE)
_TOTAL_STEPS = re.compile(r"Total training steps:\s*(\d{1,12})")


def _clean(line: str) -> str:
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _PREFIX.sub("", line, count=1) if line[:1] in " (\t" else line


def is_verl_log(text: str, probe_chars: int = 8 << 20) -> bool:
    """True when the text (its first ``probe_chars``) holds a verl metric line with at least one metric."""
    if "step:" not in text[:probe_chars]:
        return False
    rows, _ = parse_verl_log(text[:probe_chars])
    return any(len(r) > 1 for r in rows)


def _value(text: str) -> float | None:
    v = text.strip()
    m = _WRAPPED.match(v)
    if m:
        v = (m.group(1) if m.group(1) is not None else m.group(2) or "").strip()
    if not _NUMBER.match(v):
        return None  # text glued on (Ray interleaving), a cut-off token, a list: not a number we can trust
    try:
        return float(v)
    except ValueError:
        return None


def _fields(body: str, whole_tail: bool) -> Iterator[tuple[str, float]]:
    """``key:value`` fields of a separator-joined body; the last one only when ``whole_tail``."""
    parts = body.split(" - ")
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if i == last and not whole_tail:
            break
        key, sep, raw = part.rpartition(":")
        key = key.strip()
        if not sep or not key or len(key) > 300:
            continue
        val = _value(raw)
        if val is not None:
            yield key, val


def parse_verl_log(text: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    """(rows, meta): one row per ``step:N`` with its metrics (``step`` included), in file order.

    ``meta`` holds ``max_steps`` (verl's "Total training steps: N") and ``cut_lines``, the metric lines whose
    last field was left out because the line may have been cut there.
    """
    rows: list[dict[str, object]] = []
    meta: dict[str, object] = {"cut_lines": 0, "skipped_long_lines": 0}
    current: dict[str, object] | None = None  # a bare "step:N" collecting "- key:value" lines below it
    lines = text.split("\n")
    unfinished_last = bool(lines) and lines[-1] != ""
    for n, raw_line in enumerate(lines):
        if len(raw_line) >= MAX_LINE:
            meta["skipped_long_lines"] = int(meta["skipped_long_lines"]) + 1  # type: ignore[call-overload]
            current = None
            continue
        if "step" not in raw_line and current is None:
            continue
        line = _clean(raw_line.rstrip("\r")).strip()
        if not line:
            continue
        m = _STEP.match(line) if line.startswith("step") else None
        if m is None:
            if current is not None and line.startswith("- "):
                for key, val in _fields(line[2:], whole_tail=True):
                    current[key] = val
                continue
            if "Total training steps" in line:
                t = _TOTAL_STEPS.search(line)
                if t:
                    meta["max_steps"] = int(t.group(1))
            current = None
            continue
        row: dict[str, object] = {"step": int(m.group(1))}
        body = line[m.end():]
        ends_clean = body.endswith((" -", " - ")) or not body
        body = body.rstrip(" -") if ends_clean else body
        may_be_cut = len(raw_line) >= CUT_WIDTH or (n == len(lines) - 1 and unfinished_last)
        whole_tail = ends_clean or not may_be_cut
        if not whole_tail or (body and not ends_clean and _tail_is_fragment(body)):
            meta["cut_lines"] = int(meta["cut_lines"]) + 1  # type: ignore[call-overload]
        for key, val in _fields(body, whole_tail):
            if val == 0.0 and key.endswith("/lr"):
                continue  # older verl prints the LR as %.3f: "0.000" is a 1e-6 LR rounded away, not a zero LR
            row[key] = val
        rows.append(row)
        current = row if not body else None
    return rows, meta


def _tail_is_fragment(body: str) -> bool:
    """The line's last field is not a whole ``key:number`` (a cut key, or text glued onto the value)."""
    tail = body.rsplit(" - ", 1)[-1]
    key, sep, raw = tail.rpartition(":")
    return not sep or not key.strip() or _value(raw) is None


def load_verl_log(path: str) -> LoadedLog | None:
    """The rows of a verl console log at ``path``, or None when it is not one (or cannot be read: the generic
    reader then says why). JSON and CSV files are never verl console logs."""
    if path.lower().endswith((".json", ".jsonl", ".csv", ".tsv", ".json.gz", ".jsonl.gz")):
        return None
    try:
        data = read_bounded(path)
    except (InputRefused, OSError):
        return None
    if data[:2] == b"\x1f\x8b":
        try:
            text = _decode(data, path)  # gzip, with the generic reader's caps on how far it may expand
        except LogReadError:
            return None
    else:
        if b"step:" not in data or data[:1] in (b"{", b"["):
            return None
        text = data.decode("utf-8", errors="replace")  # one bad byte in a 1 GB log must not lose the log
    del data
    if text[:1] in ("{", "["):
        return None
    if not is_verl_log(text):
        return None
    rows, meta = parse_verl_log(text)
    return LoadedLog(rows=list(rows), source_format="verl_console", path=path, meta=meta)
