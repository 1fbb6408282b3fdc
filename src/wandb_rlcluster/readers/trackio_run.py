"""A trackio run (``trackio:PROJECT/RUN``): TRL's ``report_to="trackio"``, Hugging Face's local-first tracker.

trackio keeps each project in a SQLite file under ``TRACKIO_DIR`` (default ``~/.cache/huggingface/trackio``), one row
per ``trackio.log`` call; its own storage API (``SQLiteStorage.get_logs``) reads them back, so the rows are the logging
calls themselves. The trainer's step is ``train/global_step`` (transformers' callback logs it), trackio's own counter
``step`` otherwise. An optional extra: ``pip install 'wandb-rlcluster[trackio]'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .files import LoadedLog, LogReadError

MISSING = "reading trackio projects needs the trackio package: pip install 'wandb-rlcluster[trackio]'"


def _storage() -> Any:
    try:
        from trackio.sqlite_storage import SQLiteStorage
    except ImportError:
        raise LogReadError(f"rlcluster: {MISSING}") from None
    return SQLiteStorage


def _where() -> str:
    from trackio.utils import TRACKIO_DIR

    return str(TRACKIO_DIR)


def _check_project(storage: Any, project: str, shown: str) -> None:
    if project not in storage.get_projects():
        raise LogReadError(f"rlcluster: cannot read trackio:{shown}: no project {project!r} in {_where()} "
                           "(set TRACKIO_DIR to the folder the run logged to)")


def read_trackio_run(rest: str) -> LoadedLog:
    """The rows of ``PROJECT/RUN`` (the run by name)."""
    project, _, run = rest.partition("/")
    if not project or not run:
        raise LogReadError(f"rlcluster: cannot read trackio:{rest}: expected trackio:PROJECT/RUN "
                           "(or trackio:PROJECT for all its runs)")
    storage = _storage()
    _check_project(storage, project, rest)
    if run not in storage.get_runs(project):
        raise LogReadError(f"rlcluster: cannot read trackio:{rest}: no run {run!r} in project {project!r} "
                           f"({_where()})")
    rows: list[dict[str, object]] = []
    for log in storage.get_logs(project, run, scalar_only=True):
        row: dict[str, object] = {k: v for k, v in log.items() if k != "timestamp" and isinstance(v, (int, float))}
        if len(row) > 1:
            rows.append(row)
    if not rows:
        raise LogReadError(f"rlcluster: cannot read trackio:{rest}: the run has logged no metrics yet")
    return LoadedLog(rows=rows, source_format="trackio", path=f"trackio:{rest}", meta={})


def list_trackio_runs(project: str, filters: Mapping[str, str]) -> list[str]:
    """``trackio:PROJECT/RUN`` of each run of the project, oldest first (``filters``: name, a substring)."""
    unsupported = sorted(set(filters) - {"name"})
    if unsupported:
        raise LogReadError(f"rlcluster: cannot list trackio:{project}: --filter {unsupported[0]}= does not apply to "
                           "trackio runs (they keep no state or tags): --filter name=TEXT does")
    storage = _storage()
    _check_project(storage, project, project)
    name = filters.get("name") or ""
    return [f"trackio:{project}/{r}" for r in storage.get_runs(project) if name in r]
