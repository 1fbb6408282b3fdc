"""TensorBoard event files (``events.out.tfevents.*``): TRL's ``report_to="tensorboard"``, verl's ``tensorboard``
logger, OpenRLHF's ``--use_tensorboard``, any ``SummaryWriter``.

A folder is one run: every event file directly in it, in name order (a restarted run writes a new file beside the
old one). The files are read with TensorBoard's own loader (``event_file_loader.EventFileLoader``, which also
turns old ``simple_value`` summaries into tensors), an optional extra: ``pip install 'wandb-rlcluster[tensorboard]'``.
Only scalars are read (the ``scalars`` plugin, or a one-element numeric tensor); images, histograms and text are
left alone. Tags keep their names (``train/reward``, ``critic/score/mean``): the key normalisation reads them by
meaning, as it reads a W&B run's keys. The loader reads on from where it stopped, so ``rlcluster watch`` tails a
growing file with it (:class:`EventTail`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .files import LoadedLog, LogReadError
from .scalars import Row, RowBuilder, rows_of

MISSING = ("reading TensorBoard event files needs the tensorboard package: "
           "pip install 'wandb-rlcluster[tensorboard]'")


def is_event_file(path: Path) -> bool:
    return "tfevents" in path.name and path.is_file()


def event_files(folder: Path) -> list[Path]:
    """The event files directly in ``folder``, in name order (the name starts with the creation time)."""
    try:
        return sorted(p for p in folder.iterdir() if p.name.startswith("events.out.tfevents.") and p.is_file())
    except OSError:
        return []


def is_tensorboard_run(path: Path) -> bool:
    """An event file, or a folder holding one directly (one run per folder)."""
    try:
        if path.is_dir():
            return bool(event_files(path))
        return is_event_file(path)
    except OSError:
        return False


def _tensorboard() -> tuple[Any, Any]:
    """(TensorBoard's EventFileLoader class, its tensor decoder), or the one-line error naming the extra."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        raise LogReadError(f"rlcluster: {MISSING}") from None
    return EventFileLoader, make_ndarray


def decimal_value(scalar: Any) -> float:
    """A scalar as the number the trainer logged: a 32-bit float by its shortest decimal (0.2, not 0.200000003),
    so a value logged exactly at a rule's threshold stays at it, as in the trainer's own log."""
    if getattr(scalar, "dtype", None) is not None and scalar.dtype.kind == "f" and scalar.dtype.itemsize < 8:
        return float(str(scalar))  # numpy prints the shortest decimal that reads back as the same 32-bit float
    return float(scalar)


def _scalars(event: Any, make_ndarray: Any) -> Iterator[tuple[int, str, float]]:
    """(step, tag, value) of each scalar in one event."""
    if not event.HasField("summary"):
        return
    for value in event.summary.value:
        if not value.HasField("tensor"):
            continue
        plugin = value.metadata.plugin_data.plugin_name
        if plugin and plugin != "scalars":
            continue
        try:
            arr = make_ndarray(value.tensor)
        except Exception:  # noqa: BLE001 - a tensor TensorBoard itself cannot decode: not a scalar we can read
            continue
        if arr.size != 1 or arr.dtype.kind not in "fiub":
            continue
        yield int(event.step), value.tag, decimal_value(arr.reshape(())[()])


class EventTail:
    """The rows of one run's event files as they are written: ``poll()`` returns the rows completed since the last
    poll (a step's row is complete when the next step's scalars arrive, or at ``flush()``)."""

    def __init__(self, folder_or_file: Path) -> None:
        self.path = folder_or_file
        self._cls, self._ndarray = _tensorboard()
        self._loaders: dict[Path, Any] = {}
        self._builder = RowBuilder()
        self.size_seen = 0
        self.more = False  # every event on disk is read in one poll
        self.events = 0  # records read, scalars or not

    def _files(self) -> list[Path]:
        return event_files(self.path) if self.path.is_dir() else [self.path]

    def scalars(self) -> Iterator[tuple[int, str, float]]:
        size = 0
        for f in self._files():
            try:
                size += f.stat().st_size
            except OSError:
                continue
            loader = self._loaders.get(f)
            if loader is None:
                loader = self._loaders[f] = self._cls(str(f))
            for event in loader.Load():
                self.events += 1
                yield from _scalars(event, self._ndarray)
        self.size_seen = size

    def poll(self) -> list[Row]:
        rows = []
        for step, tag, value in self.scalars():
            row = self._builder.add(step, tag, value)
            if row is not None:
                rows.append(row)
        return rows

    def flush(self) -> list[Row]:
        row = self._builder.flush()
        return [row] if row is not None else []


def read_tensorboard(path: str | os.PathLike[str]) -> LoadedLog:
    """Every scalar row of the run at ``path`` (an event file, or the folder holding the run's event files)."""
    p = Path(path)
    files = event_files(p) if p.is_dir() else [p]
    if not files:
        raise LogReadError(f"rlcluster: cannot read {os.fspath(path)!r}: no events.out.tfevents.* file in it")
    tail = EventTail(p)
    try:
        rows = list(rows_of(tail.scalars()))
    except LogReadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the loader's own errors (a damaged record) in one line
        raise LogReadError(f"rlcluster: cannot read {os.fspath(path)!r}: the event file is damaged "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not rows and tail.events == 0 and tail.size_seen > 0:
        raise LogReadError(f"rlcluster: cannot read {os.fspath(path)!r}: no record in its event file(s) can be read "
                           "(not a TensorBoard event file, or damaged at its start)")
    if not rows:
        raise LogReadError(f"rlcluster: cannot read {os.fspath(path)!r}: the event file(s) hold no scalars yet "
                           "(a SummaryWriter flushes every 120 s by default)")
    return LoadedLog(rows=rows, source_format="tensorboard", path=str(p), meta={"files": len(files)})
