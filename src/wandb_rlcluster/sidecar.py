"""``rlcluster watch RUN``: follow a live run's W&B transaction log from another process.

Every W&B run, online ones included, writes its records to ``wandb/run-*/run-<id>.wandb`` on the training machine.
The sidecar reads that file as it grows (with the chunk scanner of ``readers/wandb.py``, which documents the format
and reads whole runs the same way), feeds each history row through the same gauges and alert rules as the callback
and ``watch()`` (``pipeline.Pipeline``), journals alerts and sends them to the alert file's channels. It never
touches the training process: stopping is the trainer's business (the sidecar's alerts say what the in-process
callback would have done).

A file caught mid-write is normal here: wandb-core flushes in pieces, so the tail may end inside a chunk or a
record. The reader keeps the offset of the last whole record and reads on from there at the next poll; a
damaged chunk is skipped the LevelDB way (to the next 32 KiB block), never raised. The sidecar ends when the
run's exit record arrives (``wandb.finish()``), or after ``idle_timeout`` seconds without a new byte.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .core.text import clean_text
from .pipeline import Pipeline
from .readers.wandb import (
    HEADER_LEN,
    ChunkScanner,
    WandbReadError,
    check_header,
    find_run_dirs,
    history_row,
    load_record_class,
    run_file_in,
)

logger = logging.getLogger("wandb_rlcluster")

#: Most bytes read in one poll: a sidecar started late on a large run catches up in pieces, bounded in memory.
READ_CHUNK = 8 << 20


class TailReader:
    """Records of a ``.wandb`` file as it grows, from the offset after the last whole record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # the next byte to scan: always a record boundary (or the file header's end)
        self.skipped = 0  # damaged chunks skipped
        self.header_ok = False
        self.size_seen = 0
        self.more = False  # the last poll stopped at READ_CHUNK: more is on disk already

    def poll(self) -> Iterator[bytes]:
        """The whole records written since the last poll (none while the tail is mid-record)."""
        try:
            with self.path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:  # replaced or truncated under us: start again from the header
                    self.offset, self.header_ok = 0, False
                self.size_seen = size
                if not self.header_ok:
                    head = fh.read(HEADER_LEN)
                    if len(head) < HEADER_LEN:
                        return
                    check_header(head, self.path)  # a foreign file raises WandbReadError once, at the start
                    self.header_ok = True
                    self.offset = HEADER_LEN
                fh.seek(self.offset)
                data = fh.read(READ_CHUNK)
        except OSError:
            return
        self.more = len(data) == READ_CHUNK
        yield from self._scan(data, self.offset)

    def _scan(self, data: bytes, base: int) -> Iterator[bytes]:
        scanner = ChunkScanner(data, base, live=True)
        try:
            yield from scanner.payloads()
        finally:  # read on from the last whole record, also when the caller stops early
            self.offset = scanner.offset
            self.skipped += scanner.skipped


@dataclass
class SidecarResult:
    run_dir: str
    rows: int = 0
    last_step: int = 0
    finished: bool = False
    verdict: str = "ok"
    stop_step: int | None = None
    stopped_by: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    reason: str = ""


class Sidecar:
    """Follows one run: ``run()`` polls until the run finishes (or goes idle) and returns a SidecarResult."""

    def __init__(self, run_file: Path, monitor: Pipeline, *, interval: float = 1.0, idle_timeout: float = 600.0,
                 out: TextIO | None = None, live: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.reader = TailReader(run_file)
        self.monitor = monitor
        self.interval = max(0.01, float(interval))
        self.idle_timeout = float(idle_timeout)
        self.out = out if out is not None else sys.stdout
        self.live = self.out.isatty() if live is None and hasattr(self.out, "isatty") else bool(live)
        self.clock = clock
        self.sleep = sleep
        self.record_cls = load_record_class()
        self.result = SidecarResult(run_dir=str(run_file.parent))
        self._last_progress = -1e18
        self._kl: float | None = None

    def run(self) -> SidecarResult:
        last_growth = self.clock()
        last_size = -1
        try:
            while True:
                got = self.step()
                if self.result.finished:
                    self.result.reason = "the run finished (exit record)"
                    break
                size = self.reader.size_seen
                now = self.clock()
                if got or size != last_size:
                    last_growth, last_size = now, size
                elif now - last_growth >= self.idle_timeout:
                    self.result.reason = f"no new data for {self.idle_timeout:g} s (the run crashed or was killed?)"
                    break
                if not self.reader.more:  # catching up on a large file: read on at once
                    self.sleep(self.interval)
        except KeyboardInterrupt:
            self.result.reason = "interrupted"  # the journal and the channels still get their end
        self.close()
        return self.result

    def step(self) -> int:
        """One poll: every whole record now on disk; returns how many history rows it fed."""
        fed = 0
        for payload in self.reader.poll():
            record = self.record_cls()
            try:
                record.ParseFromString(payload)
                kind = record.WhichOneof("record_type")
            except Exception:  # noqa: BLE001 - a record wandb's own parser rejects
                self.result.skipped += 1
                continue
            if kind == "history":
                self._feed(history_row(record))
                fed += 1
            elif kind == "exit":
                self.result.finished = True
        self.result.skipped += self.reader.skipped
        self.reader.skipped = 0
        self._progress(force=False)
        return fed

    def _feed(self, row: dict[str, object]) -> None:
        flat = {k: v for k, v in row.items() if not isinstance(v, dict)}  # media, tables: not metrics
        decision = self.monitor.feed(flat)
        self.result.rows += 1
        self.result.last_step = decision.step
        cluster = self.monitor.cluster
        if cluster is not None and "kl" in cluster.gauges:
            kl = cluster.gauges["kl"].derived.get("kl")
            self._kl = kl if isinstance(kl, float) else self._kl
        for e in decision.events:
            if e.kind != "firing":
                continue
            self.result.alerts.append({"rule": e.rule, "severity": e.severity, "step": e.step, "title": e.title})
            self._line(f"step {e.step:>6}  {e.severity.upper():<4}  {clean_text(e.rule)}: {clean_text(e.title)}")
        if decision.stop and self.result.stop_step is None:
            f = self.monitor.stop_finding
            self.result.stop_step = decision.step
            self.result.stopped_by = f"{f.gauge}/{f.rule}" if f else None
            self._line(f"step {decision.step:>6}  STOP  the in-process callback would stop training here "
                       f"({self.result.stopped_by}); the sidecar only notifies")

    def _progress(self, force: bool) -> None:
        now = self.clock()
        if not force and now - self._last_progress < (0.5 if self.live else 30.0):
            return
        self._last_progress = now
        verdict = self.monitor.verdict()
        self.result.verdict = verdict
        fw = self.monitor.cluster.framework if self.monitor.cluster is not None else "?"
        kl = f" · kl {self._kl:.3g}" if self._kl is not None else ""
        text = (f"rlcluster watch · {fw} · step {self.result.last_step} · {self.result.rows} rows{kl} · "
                f"{len(self.result.alerts)} alerts · verdict {verdict.upper()}")
        if self.live:
            self.out.write("\r\x1b[2K" + text)
        elif force or self.result.rows:
            self.out.write(text + "\n")
        self.out.flush()

    def _line(self, text: str) -> None:
        if self.live:
            self.out.write("\r\x1b[2K")
        self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        for e in self.monitor.finish():
            if e.kind == "firing":
                self.result.alerts.append({"rule": e.rule, "severity": e.severity, "step": e.step, "title": e.title})
                self._line(f"end     {e.severity.upper():<4}  {clean_text(e.rule)}: {clean_text(e.title)}")
        self.result.verdict = self.monitor.verdict()
        self._progress(force=True)
        if self.live:
            self.out.write("\n")
        self.out.write(f"rlcluster watch: {self.result.reason or 'stopped'}; verdict {self.result.verdict.upper()}"
                       + (f", stop at step {self.result.stop_step} ({self.result.stopped_by})"
                          if self.result.stop_step is not None else "") + "\n")
        self.out.flush()


class TensorBoardSidecar(Sidecar):
    """Follows a TensorBoard run (an event file, or the folder of its event files) as it is written: the same
    gauges, rules, journal and channels, the rows rebuilt as ``readers/tensorboard.py`` reads them. An event file has
    no end record: the sidecar ends after ``idle_timeout`` seconds without a new byte."""

    def __init__(self, path: Path, monitor: Pipeline, **kwargs: Any) -> None:
        from .readers.tensorboard import EventTail

        super().__init__(path, monitor, **kwargs)
        self.tail = EventTail(path)
        self.reader = self.tail  # type: ignore[assignment]  # size_seen and more, as the .wandb tail has them
        self.result.run_dir = str(path)
        self._size = -1

    def step(self) -> int:
        rows = self.tail.poll()
        if self.tail.size_seen == self._size:  # nothing new on disk: the open row is whole (a writer flushes calls)
            rows += self.tail.flush()
        self._size = self.tail.size_seen
        for row in rows:
            self._feed(row)
        self._progress(force=False)
        return len(rows)

    def close(self) -> None:
        for row in self.tail.flush():
            self._feed(row)
        super().close()


def locate_run_file(path: str | os.PathLike[str], wait: float = 0.0, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep, newer_than: float = 0.0) -> Path:
    """The ``run-<id>.wandb`` of a run directory, a ``.wandb`` file, or the newest run under a ``wandb`` directory
    (or the directory holding it); waits up to ``wait`` seconds for one to appear (a sidecar started first)."""
    deadline = clock() + wait
    while True:
        p = Path(path)
        try:
            if p.is_file():
                return p
            if p.is_dir():
                f = run_file_in(p)
                if f is not None:
                    return f
                dirs = [d for d in find_run_dirs(p) if run_file_in(d) is not None]
                dirs = [d for d in dirs if _newer(run_file_in(d), newer_than)]
                if dirs:
                    found = run_file_in(dirs[-1])
                    if found is not None:
                        return found
        except (OSError, WandbReadError):
            pass
        if clock() >= deadline:
            raise WandbReadError(f"{path}: no wandb run (run-<id>.wandb) found"
                                 + (f" within {wait:g} s" if wait else "; --wait N waits for one to start"))
        sleep(0.25)


def _newer(f: Path | None, t: float) -> bool:
    try:
        return f is not None and f.stat().st_mtime >= t
    except OSError:
        return False


def watch_path(path: str, *, framework: str | None = None, alerts: Any = None, journal: str | None = None,
               interval: float = 1.0, idle_timeout: float = 600.0, wait: float = 0.0, stop_on: str | None = "stop",
               warn_sooner: int | None = None, out: TextIO | None = None, live: bool | None = None,
               keys: Mapping[str, Any] | None = None) -> SidecarResult:
    """Follow the run at ``path`` until it finishes; the ``rlcluster watch`` command in a function (``keys``: which
    logged key is what, as ``watch(run, keys=...)``)."""
    monitor = Pipeline(framework=framework, alerts=alerts, stop_on=stop_on, use_wandb=False,
                       warn_sooner=warn_sooner, journal=None,  # the journal goes beside the run, once it is found
                       keys=keys)
    p = Path(path)
    from .readers.tensorboard import is_tensorboard_run

    if is_tensorboard_run(p):
        if monitor.notifier is not None:
            monitor.notifier.journal = Path(journal) if journal else (
                p if p.is_dir() else p.parent) / "rlcluster-watch-alerts.jsonl"
        if monitor.engine is not None:
            monitor.engine.fields["run_name"] = p.name
        return TensorBoardSidecar(p, monitor, interval=interval, idle_timeout=idle_timeout, out=out, live=live).run()
    # started before the run it waits for: an older run in the same wandb directory is not it (a live run's file
    # is written at least every flush interval, 15 s by default)
    fresh = time.time() - 60 if wait > 0 and p.is_dir() and run_file_in(p) is None else 0.0
    run_file = locate_run_file(path, wait=wait, newer_than=fresh)
    if monitor.notifier is not None:
        monitor.notifier.journal = Path(journal) if journal else run_file.parent / "rlcluster-watch-alerts.jsonl"
    if monitor.engine is not None:
        monitor.engine.fields["run_name"] = run_file.parent.name
    return Sidecar(run_file, monitor, interval=interval, idle_timeout=idle_timeout, out=out, live=live).run()
