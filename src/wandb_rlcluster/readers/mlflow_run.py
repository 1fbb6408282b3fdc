"""An MLflow run (``mlflow:EXPERIMENT/RUN_ID``): TRL's ``report_to="mlflow"``, or any run that logs metrics by step.

Read through MLflow's own client (``MlflowClient``; the ``mlflow`` extra installs ``mlflow-skinny``) against the
tracking URI the user trains with: ``--tracking-uri`` or ``MLFLOW_TRACKING_URI`` (a local ``mlruns`` folder, a
``sqlite:///`` database, an ``http(s)://`` server). Every metric's full history is read (``get_metric_history``, by
step), and the rows rebuilt by step (``scalars.py``). The run's parameters give the planned steps (``max_steps``, as
transformers logs its arguments).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .files import LoadedLog, LogReadError
from .run_config import config_meta
from .scalars import rows_of_histories

MISSING = "reading MLflow runs needs MLflow's client: pip install 'wandb-rlcluster[mlflow]'"


#: MLflow's own defaults retry a server that is down 7 times with doubling pauses and wait 120 s a request (minutes
#: before any answer); reading a run asks less of it, unless the user set these variables.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def _client() -> Any:
    try:
        import mlflow
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise LogReadError(f"rlcluster: {MISSING}") from None
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    missing = _missing_local_store(str(mlflow.get_tracking_uri()))
    if missing:  # MLflow would create an empty store there (a 1 MB mlflow.db in the current folder) and find nothing
        raise LogReadError(f"rlcluster: no MLflow tracking store at {missing}: pass --tracking-uri (or set "
                           "MLFLOW_TRACKING_URI) to the store the run logged to, e.g. sqlite:///mlflow.db")
    return MlflowClient()


def _missing_local_store(uri: str) -> str | None:
    """The local path of a ``sqlite:///`` or ``file:`` store that does not exist (reading must not create one)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "sqlite":
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        if path and path != ":memory:" and not os.path.exists(urllib.parse.unquote(path)):
            return urllib.parse.unquote(path)
    elif parts.scheme in ("", "file") and not os.path.exists(urllib.parse.unquote(parts.path or uri)):
        return urllib.parse.unquote(parts.path or uri)
    return None


def _fail(what: str, why: str) -> LogReadError:
    return LogReadError(f"rlcluster: cannot read mlflow:{what}: {why}")


def _where() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return f"the tracking URI {uri!r}"
    return "MLflow's default store (no MLFLOW_TRACKING_URI or --tracking-uri given)"


def _experiment(client: Any, name: str, shown: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        exp = client.get_experiment_by_name(name)
        if exp is None and name.isdigit():
            exp = client.get_experiment(name)
    except MlflowException as exc:
        if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")):
            exp = None
        else:
            raise _fail(shown, f"{_first_line(exc)} (at {_where()})") from None
    if exp is None:
        raise _fail(shown, f"no experiment {name!r} at {_where()}; check the name or pass --tracking-uri")
    return exp


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_mlflow_run(rest: str) -> LoadedLog:
    """The rows of ``EXPERIMENT/RUN_ID`` (the experiment by name or id; the run by id, or by its run name)."""
    experiment, _, run_ref = rest.rpartition("/")
    if not experiment or not run_ref:
        raise _fail(rest, "expected mlflow:EXPERIMENT/RUN_ID (or mlflow:EXPERIMENT for all its runs)")
    client = _client()
    from mlflow.exceptions import MlflowException

    try:
        exp = _experiment(client, experiment, rest)
        run = _find_run(client, exp, run_ref, rest)
        points: list[tuple[int, float, str, float]] = []
        for key in sorted(run.data.metrics):
            for m in client.get_metric_history(run.info.run_id, key):
                points.append((int(m.step), float(m.timestamp), key, float(m.value)))
    except MlflowException as exc:
        raise _fail(rest, f"{_first_line(exc)} (at {_where()})") from None
    if not points:
        raise _fail(rest, "the run has logged no metrics yet")
    meta: dict[str, object] = {"run_id": run.info.run_id, **config_meta(run.data.params)}
    return LoadedLog(rows=rows_of_histories(points), source_format="mlflow", path=f"mlflow:{rest}", meta=meta)


def _find_run(client: Any, exp: Any, ref: str, shown: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(ref)
    except MlflowException:
        run = None
    if run is None:  # a run name (TRL's run_name is the output folder by default)
        found = client.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{_quote(ref)}'",
                                   max_results=2)
        run = found[0] if found else None
    if run is None or run.info.experiment_id != exp.experiment_id:
        raise _fail(shown, f"no run {ref!r} in experiment {exp.name!r} at {_where()}")
    return run


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def list_mlflow_runs(experiment: str, filters: Mapping[str, str]) -> list[str]:
    """``mlflow:EXPERIMENT/RUN_ID`` of each run of the experiment, oldest first, filtered by state (``FINISHED``,
    ``RUNNING``, ``FAILED`` ...), tag (a tag key set on the run) and name (a substring of the run name)."""
    from mlflow.exceptions import MlflowException

    client = _client()
    try:
        exp = _experiment(client, experiment, experiment)
        runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"], max_results=50000)
    except MlflowException as exc:
        raise _fail(experiment, f"{_first_line(exc)} (at {_where()})") from None
    out = []
    for run in runs:
        state = str(run.info.status or "").lower()
        name = str(run.info.run_name or "")
        if filters.get("state") and state != filters["state"].lower():
            continue
        if filters.get("tag") and filters["tag"] not in run.data.tags:
            continue
        if filters.get("name") and filters["name"] not in name:
            continue
        out.append(f"mlflow:{experiment}/{run.info.run_id}")
    return out
