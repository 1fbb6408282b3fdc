"""A W&B server on 127.0.0.1 that answers the requests ``wandb.Api()`` really sends, for tests and benchmarks.

What it answers was recorded from wandb 0.31's public API and its wandb-core reader: ``Viewer`` and
``GetDefaultEntity`` (the login check), ``Run`` and ``RunHistoryKeys`` (``api.run``, ``run.lastHistoryStep``),
``Runs`` (``api.runs``: a project's runs, by pages), and the full-history scan: ``RunParquetHistory`` (the URLs of the
run's exported history as Parquet files, and the steps of the live tail not exported yet), a GET of each Parquet
file, and ``HistoryPage`` (the live rows, a page of steps at a time). Each answer has the shape the real server's
has; nothing in ``wandb`` is patched. It also plays what a user meets: a key it does not know (401), a run it does
not have or a private project (``run: null``), a rate limit (429 for the first N requests), a slow server
(``latency``). ``served_s`` is the time it spent answering: the server's own share of a read.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "local" + "0" * 35  # a W&B API key is 40 characters
ENTITY = "loop-entity"


@dataclass
class LoopbackRun:
    """One run the server holds: its history rows (each with ``_step``), config, state and tags."""

    project: str
    run_id: str
    rows: list[dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)
    state: str = "finished"
    tags: list[str] = field(default_factory=list)
    display_name: str = ""
    exported: int | None = None  # rows served as Parquet (the rest live); None: all but the last 10%
    entity: str = ENTITY
    private: bool = False  # the user's key may not see it: the server answers as for a run that does not exist

    def split(self) -> int:
        return len(self.rows) - len(self.rows) // 10 if self.exported is None else self.exported


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    columns = {}
    for k in keys:
        values = [r.get(k) for r in rows]
        columns[k] = pa.array(values, type=pa.int64() if k == "_step" else pa.float64())
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


class WandbLoopback:
    """``with WandbLoopback(runs) as server: wandb.Api(overrides={"base_url": server.url}, api_key=API_KEY)``."""

    def __init__(self, runs: Iterable[LoopbackRun], *, api_key: str = API_KEY, latency: float = 0.0,
                 rate_limited: int = 0) -> None:
        self.runs = {(r.entity, r.project, r.run_id): r for r in runs}
        self.api_key = api_key
        self.latency = latency
        self.rate_limited = rate_limited  # the next N GraphQL requests get 429
        self.operations: list[str] = []
        self.variables: list[Any] = []
        self.served_s = 0.0
        self._lock = threading.Lock()
        self._parquet: dict[tuple[str, str, str], bytes] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> WandbLoopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- answers --------------------------------------------------------------------------------------------------

    def _run(self, v: Mapping[str, Any], name_var: str = "name") -> LoopbackRun | None:
        run = self.runs.get((v.get("entity"), v.get("project"), v.get(name_var)))
        return None if run is None or run.private else run

    def _run_node(self, run: LoopbackRun) -> dict[str, Any]:
        last = max((int(r["_step"]) for r in run.rows), default=-1)
        summary = dict(run.rows[-1]) if run.rows else {}
        return {"id": base64.b64encode(f"Run:{run.run_id}".encode()).decode(), "projectId": 1, "name": run.run_id,
                "tags": run.tags, "displayName": run.display_name or run.run_id, "sweepName": None,
                "state": run.state,
                "config": json.dumps({k: {"value": v, "desc": None} for k, v in run.config.items()}),
                "group": None, "jobType": None, "commit": None, "readOnly": False,
                "createdAt": "2026-01-01T00:00:00", "heartbeatAt": "2026-01-01T01:00:00", "description": None,
                "notes": None, "systemMetrics": "{}", "summaryMetrics": json.dumps(summary),
                "historyLineCount": len(run.rows), "user": {"name": "loop", "username": "loop"},
                "historyKeys": {"lastStep": last, "keys": {}}}

    def answer(self, op: str, v: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for one GraphQL operation."""
        if op in ("Viewer", "GetDefaultEntity"):
            return 200, {"data": {"viewer": {"id": "VXNlcjox", "entity": ENTITY, "username": "loop",
                                             "email": "loop@example.com", "flags": "{}", "teams": {"edges": []}}}}
        if op in ("Run", "RunHistoryKeys"):
            run = self._run(v)
            return 200, {"data": {"project": {"run": self._run_node(run) if run else None}}}
        if op == "RunParquetHistory":
            run = self._run(v, "runName")
            if run is None:
                return 200, {"data": {"project": {"run": None}}}
            cut = run.split()
            urls = [f"{self.url}/files/{run.entity}/{run.project}/{run.run_id}/history.parquet"] if cut else []
            live = [{"_step": r["_step"]} for r in run.rows[cut:]]
            return 200, {"data": {"project": {"run": {"parquetHistory": {"parquetUrls": urls, "liveData": live}}}}}
        if op == "HistoryPage":
            run = self._run(v, "run")
            if run is None:
                return 200, {"data": {"project": {"run": None}}}
            lo, hi, size = int(v["minStep"]), int(v["maxStep"]), int(v["pageSize"])
            live = run.rows[run.split():]  # the rows not in the Parquet export: what the live store holds
            page = [json.dumps(r) for r in live if lo <= r["_step"] < hi][:size]
            return 200, {"data": {"project": {"run": {"history": page}}}}
        if op == "Runs":
            return 200, self._runs(v)
        return 200, {"data": {}}

    def _runs(self, v: Mapping[str, Any]) -> dict[str, Any]:
        runs = [r for (e, p, _), r in self.runs.items() if e == v.get("entity") and p == v.get("project")
                and not r.private]
        start = int(v.get("cursor") or 0)
        per_page = int(v.get("perPage") or 50)
        page = runs[start:start + per_page]
        end = start + len(page)
        edges = [{"node": self._run_node(r), "cursor": str(start + i + 1)} for i, r in enumerate(page)]
        return {"data": {"project": {"runCount": len(runs), "readOnly": False, "runs": {
            "edges": edges, "pageInfo": {"endCursor": str(end), "hasNextPage": end < len(runs)}}}}}

    # -- HTTP -----------------------------------------------------------------------------------------------------

    def _authorised(self, header: str | None) -> bool:
        want = "Basic " + base64.b64encode(f"api:{self.api_key}".encode()).decode()
        return header == want

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json",
                      headers: Mapping[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                for k, val in (headers or {}).items():
                    self.send_header(k, val)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                start = time.perf_counter()
                m = re.fullmatch(r"/files/([^/]+)/([^/]+)/([^/]+)/history\.parquet", self.path)
                run = server.runs.get((m.group(1), m.group(2), m.group(3))) if m else None
                if run is None:
                    self._send(404, b"not found", "text/plain")
                    return
                key = (run.entity, run.project, run.run_id)
                with server._lock:
                    if key not in server._parquet:
                        server._parquet[key] = _parquet(run.rows[:run.split()])
                    data = server._parquet[key]
                    server.operations.append("GET history.parquet")
                self._send(200, data, "application/octet-stream")
                server.served_s += time.perf_counter() - start

            def do_POST(self) -> None:
                start = time.perf_counter()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/graphql":  # wandb-core's telemetry and anything else: accepted, ignored
                    self._send(200, b"{}")
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = json.loads(body or b"{}")
                query = request.get("query") or ""
                found = re.search(r"(?:query|mutation)\s+(\w+)", query)
                op = request.get("operationName") or (found.group(1) if found else "")
                with server._lock:
                    server.operations.append(op)
                    server.variables.append(request.get("variables"))
                    limited = server.rate_limited > 0
                    if limited:
                        server.rate_limited -= 1
                if server.latency:
                    time.sleep(server.latency)
                if limited:
                    self._send(429, json.dumps({"errors": [{"message": "rate limit exceeded"}]}).encode(),
                               headers={"Retry-After": "1"})
                elif not server._authorised(self.headers.get("Authorization")):
                    self._send(401, json.dumps({"errors": [{"message": "user is not logged in"}]}).encode())
                else:
                    status, answer = server.answer(op, request.get("variables") or {})
                    self._send(status, json.dumps(answer).encode())
                server.served_s += time.perf_counter() - start

        return Handler
