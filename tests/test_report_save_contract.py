"""PROTOCOL CONTRACT tests for ``rlcluster report --save``: the real W&B server is not reachable here.

A loopback HTTP server on 127.0.0.1 stands in for W&B. It records every request and answers the GraphQL
operations that ``wandb.Api()`` (through wandb-core) and wandb-workspaces' ``Report.save()`` send, with minimal
plausible responses shaped after the queries in wandb/apis and wandb_workspaces/reports/v2/gql.py. The real CLI
runs in a subprocess against it. These tests pin what the CLI sends and how it handles the answers; they cannot
prove that the real server accepts the spec.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # the CLI against a loopback W&B, one subprocess per case

pytest.importorskip("wandb_workspaces")

API_KEY = "x" * 40
VIEW_ID = "VmlldzoxMjM0NQ=="  # base64("View:12345"), the shape W&B uses
PROJECT_ID = "UHJvamVjdDo0Mg=="  # base64("Project:42")
PROJECT_INTERNAL_ID = "UHJvamVjdEludGVybmFsSWQ6NDI="  # base64("ProjectInternalId:42")
KNOWN_OPS = {"Viewer", "ProjectInternalId", "GetProjects", "CreateProject", "upsertView"}
ARGS = ("report", "--entity", "me", "--project", "rl", "--trainer", "grpo")
_OP_RE = re.compile(r"\b(?:query|mutation)\s+(\w+)")


@dataclass
class Recorded:
    """One request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    op: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)


class FakeWandb(ThreadingHTTPServer):
    """A loopback stand-in for the W&B GraphQL endpoint that records every request."""

    daemon_threads = True

    def __init__(self, *, fail_upsert: bool = False, project_listed: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fail_upsert = fail_upsert
        self.project_listed = project_listed
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        """The base URL to give wandb as WANDB_BASE_URL."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def graphql(self) -> list[Recorded]:
        """The GraphQL requests, in arrival order."""
        with self.lock:
            return [r for r in self.requests if r.path == "/graphql"]

    def answer(self, op: str | None, v: dict[str, Any]) -> dict[str, Any]:
        """The GraphQL response body for one operation."""
        if op == "Viewer":  # wandb-core's credential check, once per wandb.Api()
            return {"data": {"viewer": {"id": "VXNlcjox", "entity": "me", "username": "me",
                                        "email": "me@example.com", "flags": "{}", "teams": {"edges": []}}}}
        if op == "ProjectInternalId":  # one per runset, while building the model
            return {"data": {"project": {"id": PROJECT_ID, "internalId": PROJECT_INTERNAL_ID}}}
        if op == "GetProjects":  # Api().projects(entity): does the report's project exist?
            nodes = [{"__typename": "Project", "id": PROJECT_ID, "name": name, "entityName": v.get("entity"),
                      "createdAt": "2026-01-01T00:00:00", "isBenchmark": False, "user": None}
                     for name in (["other", "rl"] if self.project_listed else ["other"])]
            return {"data": {"models": {"pageInfo": {"__typename": "PageInfo", "endCursor": None,
                                                     "hasNextPage": False},
                                        "edges": [{"node": n} for n in nodes]}}}
        if op == "CreateProject":  # upsertModel, only when the listing lacks the project
            inp = v.get("input") or {}
            proj = {"id": PROJECT_ID, "name": inp.get("name"), "entityName": inp.get("entityName"),
                    "description": None, "access": "PRIVATE", "views": "{}"}
            return {"data": {"result": {"project": proj, "model": proj, "inserted": True}}}
        if op == "upsertView":
            if self.fail_upsert:
                return {"data": {"upsertView": None},
                        "errors": [{"message": "permission denied: cannot write reports to me/rl",
                                    "path": ["upsertView"]}]}
            view = {"id": VIEW_ID, "type": v.get("type"), "name": v.get("name"),
                    "displayName": v.get("displayName"), "description": v.get("description"),
                    "project": {"id": PROJECT_ID, "name": v.get("projectName"), "entityName": v.get("entityName")},
                    "spec": v.get("spec"), "updatedAt": "2026-01-01T00:00:00"}
            return {"data": {"upsertView": {"view": view, "inserted": True}}}
        return {"data": None, "errors": [{"message": f"fake server: unexpected operation {op!r}"}]}


class _Handler(BaseHTTPRequestHandler):
    """Records the request, then answers GraphQL; 200 with no body for telemetry, 404 for anything else."""

    server: FakeWandb

    def _handle(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(size) if size else b""
        rec = Recorded(self.command, self.path.split("?")[0], {k.lower(): v for k, v in self.headers.items()})
        status, out = 200, b""
        if rec.path == "/graphql":
            body = json.loads(raw or b"{}")
            m = _OP_RE.search(body.get("query") or "")
            rec.op = body.get("operationName") or (m.group(1) if m else None)
            rec.variables = body.get("variables") or {}
            out = json.dumps(self.server.answer(rec.op, rec.variables)).encode()
        elif not rec.path.startswith("/sdk/otel/"):  # wandb-core posts its own OTel metrics to the server
            status = 404
        with self.server.lock:
            self.server.requests.append(rec)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the recorded requests instead."""


@contextmanager
def serve(server: type[FakeWandb] | None = None, **kw: Any) -> Iterator[FakeWandb]:
    """Run a FakeWandb (or a subclass answering more operations) in a thread for the duration of the block."""
    srv = (server or FakeWandb)(**kw)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment minus any W&B settings or netrc, with HOME (and XDG dirs) in a tmp dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               PYTHONUNBUFFERED="1", **extra)
    return env


def rlcluster(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess."""
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def mask_random_ids(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a viewspec's ``spec`` with the client-generated random ids replaced by a placeholder.

    wandb-workspaces draws a fresh random id for every runset (``id``) and panel (``__id__``) each time a
    model is built, so two builds of the same report differ only there.
    """
    spec = json.loads(json.dumps(spec))
    seen: list[str] = []
    for block in spec.get("blocks", []):
        meta = block.get("metadata") or {}
        items = [*meta.get("runSets", []), *(meta.get("panelBankSectionConfig") or {}).get("panels", [])]
        for item in items:
            key = "__id__" if "__id__" in item else "id"
            assert isinstance(item.get(key), str) and item[key], f"missing random {key} in {item}"
            seen.append(item[key])
            item[key] = "<random>"
    assert len(seen) == len(set(seen)), "random ids must be unique within a report"
    return spec


def runsets(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every runset in a viewspec's ``spec``, in block order."""
    return [rs for b in spec.get("blocks", []) for rs in (b.get("metadata") or {}).get("runSets", [])]


def offline_spec(tmp_path: Path) -> dict[str, Any]:
    """What ``rlcluster report ... --out FILE`` writes for ARGS (no server, no key)."""
    out = tmp_path / "spec.json"
    p = rlcluster(*ARGS, "--out", str(out), env=clean_env(tmp_path / "home-out"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("project_listed", [True, False], ids=["project-listed", "project-not-listed"])
def test_protocol_contract_save_sends_the_offline_spec(tmp_path: Path, project_listed: bool) -> None:
    """PROTOCOL CONTRACT (fake server): --save sends exactly the --out spec, with the server's project id."""
    expected = offline_spec(tmp_path)
    with serve(project_listed=project_listed) as srv:
        p = rlcluster(*ARGS, "--save", cwd=tmp_path,
                      env=clean_env(tmp_path / "home", WANDB_BASE_URL=srv.url, WANDB_API_KEY=API_KEY))
        calls = srv.graphql()
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr

    url = p.stdout.strip().splitlines()[-1]
    assert url.startswith(f"{srv.url}/me/rl/reports/"), url
    assert url.endswith(f"--{VIEW_ID}"), url  # the id comes from the server's answer, validated by the library

    ops = [c.op for c in calls]
    assert set(ops) <= KNOWN_OPS, f"unexpected GraphQL operations: {set(ops) - KNOWN_OPS}"
    assert ops[0] == "Viewer", "wandb.Api() verifies the key before anything else"
    n_runsets = len(runsets(expected["spec"]))
    assert n_runsets > 0
    work = [op for op in ops if op != "Viewer"]
    assert work == ["ProjectInternalId"] * n_runsets + ["GetProjects"] + \
        ([] if project_listed else ["CreateProject"]) + ["upsertView"], ops
    basic = "Basic " + base64.b64encode(f"api:{API_KEY}".encode()).decode()
    assert all(c.headers.get("authorization") == basic for c in calls), "every GraphQL call carries the key"
    for c in calls:
        if c.op == "ProjectInternalId":
            assert c.variables == {"entityName": "me", "projectName": "rl"}
        if c.op == "GetProjects":
            assert c.variables.get("entity") == "me"
        if c.op == "CreateProject":
            inp = c.variables["input"]
            assert (inp.get("name"), inp.get("entityName")) == ("rl", "me")

    upserts = [c for c in calls if c.op == "upsertView"]
    assert len(upserts) == 1
    v = upserts[0].variables
    assert (v["entityName"], v["projectName"], v["type"]) == ("me", "rl", "runs")
    assert v["id"] is None, "a new report: no view id is sent"
    assert isinstance(v["name"], str) and v["name"]
    assert (v["displayName"], v["description"]) == (expected["displayName"], expected["description"])
    assert expected["project"] == {"name": "rl", "entityName": "me"}

    sent = json.loads(v["spec"])
    sent_runsets = runsets(sent)
    assert len(sent_runsets) == n_runsets
    for rs in sent_runsets:  # --save fills in the internal id the server returned; --out has none
        assert rs["project"] == {"name": "rl", "entityName": "me", "id": PROJECT_INTERNAL_ID}
        del rs["project"]["id"]
    for rs in runsets(expected["spec"]):
        assert "id" not in rs["project"]
    assert mask_random_ids(sent) == mask_random_ids(expected["spec"])


def test_protocol_contract_upsert_error_is_one_line_exit_2(tmp_path: Path) -> None:
    """PROTOCOL CONTRACT (fake server): a GraphQL error on upsertView → exit 2, one line, no traceback."""
    with serve(fail_upsert=True) as srv:
        p = rlcluster(*ARGS, "--save", cwd=tmp_path,
                      env=clean_env(tmp_path / "home", WANDB_BASE_URL=srv.url, WANDB_API_KEY=API_KEY))
        ops = [c.op for c in srv.graphql()]
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert ops.count("upsertView") == 1 and ops[-1] == "upsertView", ops
    assert "Traceback" not in p.stderr
    assert p.stdout.strip() == ""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("rlcluster: could not save the report")
    assert "permission denied" in lines[0]


def test_protocol_contract_no_api_key_is_one_line_exit_2(tmp_path: Path) -> None:
    """PROTOCOL CONTRACT (fake server): --save with no key anywhere → exit 2, one line, nothing sent."""
    with serve() as srv:
        p = rlcluster(*ARGS, "--save", cwd=tmp_path, env=clean_env(tmp_path / "empty-home", WANDB_BASE_URL=srv.url))
        with srv.lock:
            seen = list(srv.requests)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("rlcluster: ") and "API key" in lines[0]
    assert seen == [], "no request may reach the server without a key"
