"""A W&B run by its path (``wandb:ENTITY/PROJECT/RUN_ID``) or a project's runs (``wandb:ENTITY/PROJECT``), read from
the server through ``wandb.Api()``: no file to download by hand.

The whole history is read with ``run.scan_history()`` (every row, a page of steps at a time; the sampled
``history()`` would drop rows), keys as logged, so the rows are the ones ``wandb.log`` wrote and the key normalisation
reads them as it reads an offline run. The run's config gives the trainer family and the planned steps
(``run_config.py``). The server is the one wandb uses: ``WANDB_BASE_URL`` (or ``wandb login --host``) and the API key
of ``WANDB_API_KEY`` or ``wandb login``.

What a user meets says what to do, in one line: no API key, a key the server refuses, a run that does not exist or
that the key may not see (a private project), the server out of reach, a rate limit. A request that times out is
retried with backoff (wandb-core itself retries 429s and 5xx within each try); when the tries are spent the server
is asked once more, plainly, why (HTTP 429, unreachable), and that is what the message says.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from .files import LoadedLog, LogReadError
from .run_config import config_meta

#: Rows per page of the history scan (wandb's own default is 1000).
PAGE_SIZE = 2000


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def _settings() -> tuple[float, int, float]:
    """(seconds a request may take, tries, first backoff in seconds): RLCLUSTER_WANDB_TIMEOUT, _TRIES, _BACKOFF."""
    return (_env_float("RLCLUSTER_WANDB_TIMEOUT", 60.0), int(_env_float("RLCLUSTER_WANDB_TRIES", 3)),
            _env_float("RLCLUSTER_WANDB_BACKOFF", 2.0))


def _fail(path: str, why: str) -> LogReadError:
    return LogReadError(f"rlcluster: cannot read wandb:{path}: {why}")


def _base_url() -> str:
    """The server wandb talks to (for messages and the plain question of ``_why_unanswered``)."""
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").rstrip("/")


def _why_unanswered(base_url: str) -> str:
    """Ask the server once, plainly, why wandb's requests failed: unreachable, a rate limit, an error status."""
    parsed = urlparse(base_url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname or "localhost", port), timeout=5).close()
    except OSError as exc:
        return (f"the W&B server {base_url} cannot be reached ({exc.strerror or type(exc).__name__}): check the "
                "network, or WANDB_BASE_URL for a dedicated server")
    key = os.environ.get("WANDB_API_KEY", "")
    request = urllib.request.Request(
        f"{base_url}/graphql", data=json.dumps({"query": "query Viewer { viewer { id } }"}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=10):
            return f"the W&B server {base_url} answered too slowly: try again, or raise RLCLUSTER_WANDB_TIMEOUT"
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            return (f"the W&B server {base_url} rate-limits this API key (HTTP 429) and kept doing so after "
                    "retries: wait a few minutes and run it again")
        return f"the W&B server {base_url} answers HTTP {exc.code}: try again later"
    except OSError as exc:
        return f"the W&B server {base_url} did not answer ({type(exc).__name__}): check the network"


def _refused(base_url: str) -> str | None:
    """Why the server cannot be reached at all (no such host, the connection refused), in one quick look; None when
    it can, or when a proxy stands between (the proxy, not this machine, reaches the server)."""
    if any(os.environ.get(v) for v in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy",
                                       "ALL_PROXY")):
        return None
    parsed = urlparse(base_url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        socket.create_connection((parsed.hostname or "localhost", port), timeout=5).close()
    except (ConnectionRefusedError, socket.gaierror) as exc:
        return (f"the W&B server {base_url} cannot be reached ({exc.strerror or type(exc).__name__}): check the "
                "network, or WANDB_BASE_URL for a dedicated server")
    except (OSError, ValueError):
        return None  # slow or odd: wandb's own requests, with their retries, decide
    return None


def _translate(path: str, exc: BaseException) -> LogReadError:
    """A wandb exception as the one line that says what to do."""
    from wandb.errors import AuthenticationError, CommError, UsageError

    text = " ".join(str(exc).split())
    if isinstance(exc, UsageError) and "api key" in text.lower():
        return _fail(path, "no W&B API key: run `wandb login` or set WANDB_API_KEY")
    if isinstance(exc, AuthenticationError) and "did not respond in time" not in text:
        return _fail(path, f"the W&B server {_base_url()} refused the API key: run `wandb login --relogin` with a "
                           "key from https://wandb.ai/authorize (or your server's /authorize)")
    if type(getattr(exc, "exc", None)).__name__ == "RunNotFoundError" or "could not find run" in text.lower():
        return _fail(path, "no such run for this API key: check ENTITY/PROJECT/RUN_ID (the run id from the run's "
                           "URL, not its display name); a private project needs a key of its team")
    if isinstance(exc, (CommError, AuthenticationError)):
        return _fail(path, _why_unanswered(_base_url()))
    return _fail(path, f"{type(exc).__name__}: {text[:200]}")


def _retrying(path: str, call: Callable[[], Any]) -> Any:
    """``call()``, tried again with a doubling backoff when the server did not answer in time."""
    _, tries, backoff = _settings()
    from wandb.errors import AuthenticationError, CommError, UsageError

    for attempt in range(max(1, tries)):
        try:
            return call()
        except (CommError, AuthenticationError, UsageError) as exc:
            slow = "did not respond in time" in str(exc) or "timed out" in str(exc).lower()
            if not slow or attempt == tries - 1:
                raise _translate(path, exc) from None
            time.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")


def _api(path: str) -> Any:
    try:
        import wandb
    except ImportError:  # a dependency of the package: only a broken install lacks it
        raise _fail(path, "the wandb package is not installed: pip install wandb") from None
    timeout, _, _ = _settings()
    refused = _refused(_base_url())
    if refused:  # wandb-core retries a refused connection until its timeout, then again per try: minutes
        raise _fail(path, refused)
    # the environment as it is now (wandb's settings are read once per process, at its first use)
    overrides = {"base_url": os.environ["WANDB_BASE_URL"]} if os.environ.get("WANDB_BASE_URL") else {}
    key = os.environ.get("WANDB_API_KEY") or None
    return _retrying(path, lambda: wandb.Api(overrides=overrides, api_key=key, timeout=int(timeout)))


def _config(run: Any) -> dict[str, object]:
    try:
        config = dict(run.config)
    except Exception:  # noqa: BLE001 - a config the client cannot decode: read the history without it
        return {}
    return {k: v for k, v in config.items() if not k.startswith("_")}


def read_wandb_run(rest: str, progress: Callable[[int, int], None] | None = None) -> LoadedLog:
    """Every history row of ``ENTITY/PROJECT/RUN_ID``."""
    parts = [p for p in rest.split("/") if p]
    if len(parts) == 4 and parts[2] == "runs":  # pasted from the run's URL: entity/project/runs/id
        parts = [parts[0], parts[1], parts[3]]
    if len(parts) != 3:
        raise _fail(rest, "expected wandb:ENTITY/PROJECT/RUN_ID (or wandb:ENTITY/PROJECT for all its runs)")
    api = _api(rest)
    run = _retrying(rest, lambda: api.run("/".join(parts)))
    total = max(1, int(_retrying(rest, lambda: run.lastHistoryStep)) + 1)

    def scan() -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        seen: set[object] = set()
        for row in _rows(run):
            step = row.get("_step")
            if step in seen:  # a step the export and the live tail both hold: once
                continue
            seen.add(step)
            rows.append(row)
            if progress is not None and len(rows) % PAGE_SIZE == 0:
                progress(len(rows), total)
        return rows

    rows = _retrying(rest, scan)
    if progress is not None:
        progress(total, total)
    if not rows:
        raise _fail(rest, "the run has no history rows yet")
    meta: dict[str, object] = {"run_id": run.id, "state": run.state, **config_meta(_config(run))}
    return LoadedLog(rows=rows, source_format="wandb_api", path=f"wandb:{'/'.join(parts)}", meta=meta)


def _rows(run: Any) -> Iterator[dict[str, object]]:
    # use_cache=False: wandb's history cache (WANDB_CACHE_DIR) is keyed by the run's path alone, so a run read while
    # it was still training would be read stale ever after
    for row in run.scan_history(page_size=PAGE_SIZE, use_cache=False):
        # the export is columnar: a key a row did not log comes back as None; media and tables are not metrics
        yield {k: v for k, v in row.items() if v is not None and not isinstance(v, dict)}


def list_wandb_runs(rest: str, filters: Mapping[str, str]) -> list[str]:
    """``wandb:ENTITY/PROJECT/RUN_ID`` of the project's runs, oldest first, those ``filters`` keep: state (finished,
    running, crashed, failed), tag (one of the run's tags), name (in the run's display name)."""
    parts = [p for p in rest.split("/") if p]
    if len(parts) != 2:
        raise _fail(rest, "expected wandb:ENTITY/PROJECT (a project's runs) or wandb:ENTITY/PROJECT/RUN_ID")
    api = _api(rest)

    def listed() -> list[Any]:
        return list(api.runs("/".join(parts), order="+created_at", per_page=200))

    try:
        runs = _retrying(rest, listed)
    except LogReadError:
        raise
    except ValueError as exc:  # wandb's "Could not find project"
        raise _fail(rest, f"{' '.join(str(exc).split())[:200]}: check ENTITY/PROJECT; a private project needs a "
                          "key of its team") from None
    state, tag, name = (filters.get(k, "") for k in ("state", "tag", "name"))
    out = []
    for run in runs:
        if state and str(run.state).lower() != state.lower():
            continue
        if tag and tag not in (run.tags or []):
            continue
        if name and name not in str(run.name or ""):
            continue
        out.append(f"wandb:{parts[0]}/{parts[1]}/{run.id}")
    return out
