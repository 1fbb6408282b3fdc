"""Read what a W&B offline run wrote to disk, without a W&B server.

wandb 0.31 writes everything through its Go ``wandb-core`` process and ships no Python reader for the
run's ``run-<id>.wandb`` transaction log (the old ``wandb.sdk.internal.datastore`` is gone), so the
record framing is decoded here and each record is parsed with wandb's own protobuf class,
``wandb.proto.wandb_internal_pb2.Record``.

File format (checked against files written by wandb 0.31.0 / wandb-core; same as the old datastore):

* 7-byte file header: ident ``b":W&B"``, magic ``0xBEE1`` (uint16 LE), version ``0`` (uint8).
* Then a LevelDB log (https://github.com/google/leveldb/blob/main/doc/log_format.md) cut into
  32 KiB blocks counted from the start of the file (the file header sits in block 0).
  Each chunk: ``crc32: uint32 LE``, ``length: uint16 LE``, ``type: uint8`` (1 FULL, 2 FIRST,
  3 MIDDLE, 4 LAST) and ``length`` data bytes. The checksum is plain zlib CRC-32 over the type byte
  followed by the data (not LevelDB's masked CRC-32C). A chunk never straddles a block; fewer than
  7 bytes left in a block are zero padding.
* FULL, or FIRST + MIDDLE* + LAST, reassemble one serialized ``Record``.

Runs that are still open: wandb-core buffers the file and flushes it every
``x_transaction_log_flush_interval`` seconds (default 15, env ``WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL``)
or when its buffer fills, so a live run reads fine but lags by up to that interval (the first seconds
of a small run show only the 7-byte header). Until ``wandb.finish()`` there is no ``exit`` record, so
``finished`` is False; the tail can end inside a record, which sets ``truncated`` instead of failing.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ChunkScanner", "OfflineRun", "WandbReadError", "check_header", "find_run_dirs", "history_row",
           "history_rows", "load_record_class", "read_offline_run", "run_file_in"]

_IDENT = b":W&B"
_MAGIC = 0xBEE1
_VERSION = 0
_FILE_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
HEADER_LEN = 7
BLOCK_LEN = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
# CRC-32 of the type byte alone: the chunk checksum continues from it over the data.
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}

_RUN_DIR_RE = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-([^.]+)$")
_RUN_FILE_RE = re.compile(r"^run-(.+)\.wandb$")


class WandbReadError(ValueError):
    """The path is not a readable offline run; the message is a one-line reason."""


@dataclass
class OfflineRun:
    """Everything recovered from one offline run's ``.wandb`` file."""

    path: str
    run_id: str
    history: list[dict[str, object]] = field(default_factory=list)
    summary: dict[str, object] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)
    alerts: list[dict[str, object]] = field(default_factory=list)
    tables: list[dict[str, object]] = field(default_factory=list)
    project: str | None = None
    metrics: list[dict[str, object]] = field(default_factory=list)  # wandb.define_metric() calls
    finished: bool = False  # an exit record was written (wandb.finish() ran)
    exit_code: int | None = None
    skipped: int = 0  # records / corrupt regions that could not be decoded and were dropped
    truncated: bool = False  # the file ends inside a chunk or record (live run or cut copy)


class ChunkScanner:
    """The record payloads of a wandb LevelDB-style log held in memory: a whole file, or (``live``) the bytes a
    growing file has gained since ``base``, the offset after the last whole record.

    Corrupt chunks are skipped the LevelDB way (resume at the next block) so one bad byte loses at most one block
    instead of the rest of the run. Live, a file caught mid-write is normal (wandb-core flushes in pieces): a chunk
    whose checksum fails at the very end may still be landing and is judged at the next read, and ``offset`` is
    where that read starts (always a record boundary)."""

    def __init__(self, data: bytes, base: int = 0, *, live: bool = False) -> None:
        self.data = data
        self.base = base  # the file offset of data[0]
        self.live = live
        self.skipped = 0
        self.truncated = False
        self.offset = base  # the file offset after the last whole record (or skipped region)

    def payloads(self, start: int = 0) -> Iterator[bytes]:
        data, n, base = self.data, len(self.data), self.base
        pos = start
        pending: list[bytes] | None = None
        while pos < n:
            block_left = BLOCK_LEN - (base + pos) % BLOCK_LEN
            if block_left < HEADER_LEN:  # trailer padding
                if pos + block_left > n:
                    break
                pos += block_left
                if pending is None:
                    self.offset = base + pos
                continue
            if pos + HEADER_LEN > n:
                self.truncated = True  # the chunk header is still being written, or was cut off
                break
            crc, length, ctype = _CHUNK_HEADER.unpack_from(data, pos)
            if ctype == 0 and length == 0:  # zero fill: the block's rest is unused, or not written yet
                if pos + block_left > n:
                    break  # live: might be a chunk not yet written over the preallocated zeros
                pos += block_left
                if pending is None:
                    self.offset = base + pos
                continue
            end = pos + HEADER_LEN + length
            if ctype not in _TYPE_CRC or length > block_left - HEADER_LEN:
                self.skipped += 1
                pending = None
                pos += block_left
                self.offset = base + min(pos, n)
                continue
            if end > n:
                self.truncated = True  # the chunk's data is still being written, or was cut off
                break
            chunk = data[pos + HEADER_LEN:end]
            if zlib.crc32(chunk, _TYPE_CRC[ctype]) != crc:
                if self.live and end == n:
                    break  # the last bytes may still be landing: judge this chunk at the next read
                self.skipped += 1
                pending = None
                pos += block_left
                self.offset = base + min(pos, n)
                continue
            pos = end
            if ctype == _FULL:
                if pending is not None and not self.live:
                    self.skipped += 1
                pending = None
                self.offset = base + pos
                yield chunk
            elif ctype == _FIRST:
                if pending is not None and not self.live:
                    self.skipped += 1
                pending = [chunk]
            elif pending is None:  # MIDDLE or LAST without its FIRST
                self.skipped += 1
                self.offset = base + pos
            elif ctype == _MIDDLE:
                pending.append(chunk)
            else:  # _LAST
                pending.append(chunk)
                self.offset = base + pos
                yield b"".join(pending)
                pending = None
        if pending is not None:
            self.truncated = True

def check_header(data: bytes, where: Path) -> None:
    if len(data) < HEADER_LEN:
        raise WandbReadError(f"{where}: too short for a wandb log header ({len(data)} bytes)")
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0)
    if ident != _IDENT or magic != _MAGIC:
        raise WandbReadError(f"{where}: not a wandb run log (bad header)")
    if version != _VERSION:
        raise WandbReadError(f"{where}: unsupported wandb log version {version}")


_JSON = json.JSONDecoder()  # json.loads() minus its per-call argument handling: this runs per logged value


def _decode(value_json: str) -> object:
    """JSON as wandb wrote it (``NaN``/``Infinity`` included); undecodable text is kept as is."""
    try:
        return _JSON.decode(value_json)
    except (ValueError, RecursionError):
        return value_json


def _item_path(item: Any) -> tuple[str, ...]:
    return tuple(item.nested_key) if item.nested_key else (item.key,)


def _set_path(target: dict[str, object], path: tuple[str, ...], value: object) -> None:
    """Put ``value`` at a nested key path; wandb-core flattens logged dicts into such paths."""
    node = target
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):  # clashes with a scalar: keep it flat rather than lose it
            target[".".join(path)] = value
            return
        node = child
    node[path[-1]] = value


class _Updates:
    """Cumulative config / summary state, kept as raw JSON per key path until the end.

    wandb-core writes a summary record next to every history row, so decoding each update eagerly
    would double the cost of reading a run; only the last value per path is ever decoded.
    """

    def __init__(self) -> None:
        self.raw: dict[tuple[str, ...], str] = {}

    def apply(self, message: Any) -> None:
        """Apply a ConfigRecord / SummaryRecord (``update`` then ``remove`` items) in file order."""
        for item in message.update:
            path = _item_path(item)
            self.raw.pop(path, None)  # a re-set key moves to the end, as the newest value
            self.raw[path] = item.value_json
        for item in message.remove:
            path = _item_path(item)
            n = len(path)
            for key in [k for k in self.raw if k[:n] == path]:
                del self.raw[key]

    def build(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for path, value_json in self.raw.items():
            _set_path(out, path, _decode(value_json))
        return out


def _media_refs(row: dict[str, object], step: object, prefix: str = "") -> list[dict[str, object]]:
    """Table / media references (dicts with ``_type``) in a history row, nested ones included."""
    refs: list[dict[str, object]] = []
    for key, value in row.items():
        if not isinstance(value, dict):
            continue
        name = f"{prefix}{key}"
        if "_type" in value:
            refs.append(
                {
                    "key": name,
                    "step": step,
                    "type": value.get("_type"),
                    "path": value.get("path") or value.get("artifact_path"),
                }
            )
        else:
            refs.extend(_media_refs(value, step, f"{name}."))
    return refs


def history_row(record: Any) -> dict[str, object]:
    """One history record as the dict the loop logged (nested keys as nested dicts, ``_step`` always there)."""
    hist = record.history
    row: dict[str, object] = {}
    for item in hist.item:
        _set_path(row, _item_path(item), _decode(item.value_json))
    if "_step" not in row and hist.HasField("step"):
        row["_step"] = hist.step.num
    return row


def load_record_class() -> Any:
    try:
        from wandb.proto import wandb_internal_pb2
    except Exception as exc:  # noqa: BLE001 - ImportError, or wandb's own protobuf-version ImportError
        raise WandbReadError(f"cannot import wandb's protobuf classes: {exc}") from None
    return wandb_internal_pb2.Record  # type: ignore[attr-defined]  # generated: no stub lists it


def _apply_record(run: OfflineRun, config: _Updates, summary: _Updates, record: Any) -> None:
    """Fold one parsed Record into ``run``; record types nobody asked for are ignored."""
    kind = record.WhichOneof("record_type")
    if kind == "history":
        row = history_row(record)
        run.history.append(row)
        run.tables.extend(_media_refs(row, row.get("_step")))
    elif kind == "summary":
        summary.apply(record.summary)
    elif kind == "config":
        config.apply(record.config)
    elif kind == "run":
        rr = record.run
        if rr.run_id:
            run.run_id = rr.run_id
        run.project = rr.project or run.project
        config.apply(rr.config)
        summary.apply(rr.summary)
    elif kind == "alert":
        a = record.alert
        run.alerts.append({"title": a.title, "text": a.text, "level": a.level, "wait_duration": a.wait_duration})
    elif kind == "metric":
        from google.protobuf.json_format import MessageToDict

        run.metrics.append(MessageToDict(record.metric, preserving_proto_field_name=True))
    elif kind == "exit":
        run.finished = True
        run.exit_code = record.exit.exit_code
    elif kind == "header" and not run.run_id:
        run.run_id = record._info.stream_id


def run_file_in(run_dir: Path) -> Path | None:
    """The run's ``run-<id>.wandb`` inside ``run_dir`` (the newest if, oddly, there are several)."""
    try:
        files = [p for p in run_dir.iterdir() if _RUN_FILE_RE.match(p.name) and p.is_file()]
    except OSError:
        return None
    if not files:
        return None
    m = _RUN_DIR_RE.match(run_dir.name)
    for p in files:
        if m and p.name == f"run-{m.group(2)}.wandb":
            return p
    return max(files, key=_mtime)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _start_time(run_file: Path) -> float | None:
    """The run record's start time: it sits in the first block, right after the header record.

    Directory names only have one-second resolution, and file mtimes say when a run last flushed,
    not when it began, so this is what orders runs started in the same second.
    """
    try:
        with run_file.open("rb") as fh:
            data = fh.read(BLOCK_LEN)
        check_header(data, run_file)
        record_cls = load_record_class()
        for i, payload in enumerate(ChunkScanner(data).payloads(HEADER_LEN)):
            record = record_cls()
            record.ParseFromString(payload)
            if record.WhichOneof("record_type") == "run" and record.run.HasField("start_time"):
                return record.run.start_time.seconds + record.run.start_time.nanos / 1e9
            if i >= 8:
                break
    except Exception:  # noqa: BLE001 - unreadable or foreign: fall back to the mtime
        return None
    return None


def _sort_key(run_dir: Path) -> tuple[str, float, str]:
    m = _RUN_DIR_RE.match(run_dir.name)
    stamp = m.group(1) if m else ""
    f = run_file_in(run_dir)
    started = _start_time(f) if f else None
    return (stamp, started if started is not None else _mtime(f or run_dir), run_dir.name)


def find_run_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """Every ``offline-run-*`` / ``run-*`` directory at ``root``, oldest first.

    ``root`` may be a run directory, a ``wandb`` directory, or the directory that holds ``wandb``
    (what ``WANDB_DIR`` points at), so callers need not know which level they were handed.
    """
    base = Path(root)
    try:
        if not base.exists():
            raise WandbReadError(f"{base}: no such file or directory")
        if base.is_file():
            if _RUN_FILE_RE.match(base.name):
                return [base.parent]
            raise WandbReadError(f"{base}: not a run directory or .wandb file")
        if _RUN_DIR_RE.match(base.name) or run_file_in(base) is not None:
            return [base.resolve() if base.is_symlink() else base]  # e.g. wandb/latest-run
        found: list[Path] = []
        for parent in (base, base / "wandb", base / ".wandb"):
            if not parent.is_dir():
                continue
            for child in parent.iterdir():
                if _RUN_DIR_RE.match(child.name) and child.is_dir() and not child.is_symlink():
                    found.append(child)
    except OSError as exc:
        raise WandbReadError(f"{base}: {exc.strerror or exc}") from None
    return sorted(found, key=_sort_key)


def _locate(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(run dir, .wandb file) for any of the accepted path forms."""
    p = Path(path)
    try:
        if p.is_file():
            return p.parent, p
        if not p.exists():
            raise WandbReadError(f"{p}: no such file or directory")
        run_dir = p.resolve() if p.is_symlink() else p  # e.g. wandb/latest-run
        f = run_file_in(run_dir)
        if f is not None:
            return run_dir, f
        dirs = [d for d in find_run_dirs(p) if run_file_in(d) is not None]
    except OSError as exc:
        raise WandbReadError(f"{p}: {exc.strerror or exc}") from None
    f = run_file_in(dirs[-1]) if dirs else None
    if f is None:
        raise WandbReadError(f"{p}: no wandb run (run-<id>.wandb) found")
    return dirs[-1], f


def read_offline_run(path: str | os.PathLike[str]) -> OfflineRun:
    """Read an offline run from its directory, its ``.wandb`` file, or a directory of runs (newest wins).

    Bad input raises only WandbReadError. A damaged or still-growing file yields what could be
    decoded: see ``OfflineRun.skipped`` / ``truncated`` / ``finished``.
    """
    from .files import InputRefused, read_bounded

    run_dir, wandb_file = _locate(path)
    try:
        data = read_bounded(wandb_file)  # regular files only, size-capped: the same rule as every input
    except InputRefused as exc:
        raise WandbReadError(f"{wandb_file}: {exc}") from None
    check_header(data, wandb_file)
    record_cls = load_record_class()

    m = _RUN_FILE_RE.match(wandb_file.name)
    run = OfflineRun(path=str(run_dir), run_id="")
    config, summary = _Updates(), _Updates()
    scanner = ChunkScanner(data)
    skipped = 0
    for payload in scanner.payloads(HEADER_LEN):
        record = record_cls()
        try:
            record.ParseFromString(payload)
            _apply_record(run, config, summary, record)
        except Exception:  # noqa: BLE001 - a record wandb's own parser rejects, or one with an unexpected shape
            skipped += 1
    run.config, run.summary = config.build(), summary.build()
    run.skipped = skipped + scanner.skipped
    run.truncated = scanner.truncated
    if not run.run_id and m:
        run.run_id = m.group(1)
    return run


def history_rows(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """Just the logged rows, for callers that feed them straight into the analysis core."""
    return read_offline_run(path).history
