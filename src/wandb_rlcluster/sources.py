"""Where a run lives, when it is not a log file: the trackers ``rlcluster analyze`` and the sweep read besides files.

``load_source`` turns a TensorBoard folder or event file, ``wandb:ENTITY/PROJECT/RUN_ID``, ``mlflow:EXPERIMENT/RUN_ID``
or ``trackio:PROJECT/RUN`` into the same ``LoadedLog`` a file gives, so everything downstream (the key normalisation,
``--map``, ``--gold``, the rules, every output format, the fleet page) is the same for all of them. ``expand`` turns a
project or an experiment (``wandb:ENTITY/PROJECT``, ``mlflow:EXPERIMENT``, ``trackio:PROJECT``) into its runs, for a
sweep. Each tracker's client is an optional extra, imported only when its kind of path is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from .readers.files import LoadedLog

SCHEMES = ("wandb", "mlflow", "trackio")


def scheme_of(arg: str) -> tuple[str, str] | None:
    """(scheme, the rest) for ``wandb:...``, ``mlflow:...`` or ``trackio:...``; None for a path (a file that exists
    under such a name stays a file)."""
    scheme, sep, rest = arg.partition(":")
    if not sep or scheme not in SCHEMES or os.path.lexists(arg):
        return None
    return scheme, rest.strip("/")


def is_collection(arg: str) -> bool:
    """A project or an experiment rather than one run: ``wandb:E/P``, ``mlflow:EXP``, ``trackio:PROJECT``."""
    found = scheme_of(arg)
    if found is None:
        return False
    scheme, rest = found
    parts = [x for x in rest.split("/") if x]
    return len(parts) < (3 if scheme == "wandb" else 2)


def load_source(path: str, progress: Callable[[int, int], None] | None = None) -> LoadedLog | None:
    """The rows of a run in a tracker, or None when ``path`` is an ordinary log file for the file readers."""
    found = scheme_of(path)
    if found is None:
        from .readers.tensorboard import is_tensorboard_run, read_tensorboard

        return read_tensorboard(path) if is_tensorboard_run(Path(path)) else None
    scheme, rest = found
    if scheme == "mlflow":
        from .readers.mlflow_run import read_mlflow_run

        return read_mlflow_run(rest)
    if scheme == "trackio":
        from .readers.trackio_run import read_trackio_run

        return read_trackio_run(rest)
    from .readers.wandb_api import read_wandb_run

    return read_wandb_run(rest, progress=progress)


def expand(arg: str, filters: Mapping[str, str] | None = None) -> list[str]:
    """The runs of a project or experiment, as paths ``load_source`` reads (``filters``: state, tag, name)."""
    scheme, rest = scheme_of(arg) or ("", "")
    if scheme == "mlflow":
        from .readers.mlflow_run import list_mlflow_runs

        return list_mlflow_runs(rest, filters or {})
    if scheme == "trackio":
        from .readers.trackio_run import list_trackio_runs

        return list_trackio_runs(rest, filters or {})
    from .readers.wandb_api import list_wandb_runs

    return list_wandb_runs(rest, filters or {})
