"""``rlcluster analyze wandb:ENTITY/PROJECT/RUN_ID`` and ``wandb:ENTITY/PROJECT``: a run read from the W&B server
through the real ``wandb.Api()`` and its wandb-core history scan, against a loopback server on 127.0.0.1 that answers
the requests they really send (``benchmarks/wandb_loopback.py``: the Parquet export, the live pages). The findings
equal the same rows' in a JSON file; every error a user meets is one line and exit 2.
"""

from __future__ import annotations

import csv
import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.cli import main

from .source_twins import grpo_rows, same
from wandb_loopback import API_KEY, ENTITY, LoopbackRun, WandbLoopback

pytest.importorskip("pyarrow")  # the loopback server writes the history export as Parquet, as W&B's does

MAX_STEPS = 160
CONFIG = {"max_steps": MAX_STEPS, "scale_rewards": "group", "beta": 0.04, "learning_rate": 1e-6}


def wandb_rows(seed: int, drift: bool = True) -> list[dict[str, Any]]:
    """A GRPO run as W&B holds it: TRL's keys under ``train/``, the trainer's step as ``train/global_step``, W&B's
    own ``_step`` counting every ``wandb.log`` call."""
    rows = []
    for i, r in enumerate(grpo_rows(seed, drift=drift)):
        row = {k: v for k, v in r.items() if k != "step"}
        rows.append({**row, "train/global_step": r["step"], "_step": i})
    return rows


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[WandbLoopback]:
    runs = [LoopbackRun("rl", "drift1", wandb_rows(1), config=CONFIG, tags=["kl"], display_name="grpo-drift",
                        exported=90),
            LoopbackRun("rl", "calm2", wandb_rows(2, drift=False), config=CONFIG, tags=["baseline"],
                        display_name="grpo-calm"),
            LoopbackRun("rl", "crash3", wandb_rows(3)[:40], config=CONFIG, state="crashed", display_name="grpo-crash"),
            LoopbackRun("rl", "secret4", wandb_rows(4), config=CONFIG, private=True)]
    with WandbLoopback(runs) as s:
        monkeypatch.setenv("WANDB_BASE_URL", s.url)
        monkeypatch.setenv("WANDB_API_KEY", API_KEY)
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc key of the machine's user
        monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("RLCLUSTER_WANDB_TIMEOUT", "4")
        monkeypatch.setenv("RLCLUSTER_WANDB_TRIES", "2")
        monkeypatch.setenv("RLCLUSTER_WANDB_BACKOFF", "0.2")
        yield s


def twin(tmp_path: Path, run: LoopbackRun) -> Path:
    """The run's rows and planned steps in a JSON file (a trainer_state-shaped document)."""
    path = tmp_path / f"{run.run_id}.json"
    path.write_text(json.dumps({"log_history": run.rows, "max_steps": MAX_STEPS}))
    return path


def test_a_run_by_path_reads_every_row_by_pages(server: WandbLoopback, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole history (the Parquet export and the live tail, by pages), the config's family and planned steps:
    the same analysis as the rows in a file."""
    import wandb_rlcluster.readers.wandb_api as wandb_api
    from wandb_rlcluster.sources import load_source

    monkeypatch.setattr(wandb_api, "PAGE_SIZE", 25)
    run = server.runs[(ENTITY, "rl", "drift1")]
    log = load_source(f"wandb:{ENTITY}/rl/drift1")
    assert log is not None and log.rows == run.rows
    assert log.meta["trainer"] == "grpo" and log.meta["max_steps"] == MAX_STEPS
    ops = server.operations
    assert "RunParquetHistory" in ops and "GET history.parquet" in ops and ops.count("HistoryPage") >= 3
    found = same(analyze_path(f"wandb:{ENTITY}/rl/drift1"), analyze_path(str(twin(tmp_path, run))))
    assert found["verdict"] in ("warn", "stop") and found["findings"]
    same(analyze_path(f"wandb:{ENTITY}/rl/runs/drift1"), analyze_path(str(twin(tmp_path, run))))  # from the URL


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["json", "csv", "md"])
def test_every_format_and_option_as_for_the_file(server: WandbLoopback, tmp_path: Path, fmt: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = f"wandb:{ENTITY}/rl/drift1"
    file = str(twin(tmp_path, server.runs[(ENTITY, "rl", "drift1")]))
    outs = []
    for src in (path, file):
        html = tmp_path / f"fleet-{len(outs)}.html"
        code, out, err = _cli(["analyze", src, "--format", fmt, "--map", "reward=train/my_score", "--gold", "verifier",
                               "--alerts", "--fail-on", "warn", "--html", str(html), "--progress"], capsys)
        assert code == 1, err
        outs.append((out.replace(src, "RUN"), html.read_text().replace(src, "RUN"), err))
    if fmt == "json":
        one, two = (json.loads(o) for o, _, _ in outs)
        assert one.pop("format") == "wandb_api"
        two.pop("format")
        assert one == two
        assert "rows read" in outs[0][2]  # the progress bar counted the history's rows
    else:
        assert outs[0][0].replace("wandb_api", "FMT") == outs[1][0].replace("json_document", "FMT").replace(
            "trainer_state", "FMT")
    assert outs[0][1].count("kl") == outs[1][1].count("kl")


def test_a_project_is_a_sweep_of_its_runs_with_filters(server: WandbLoopback, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "fleet.html"
    code, out, err = _cli(["analyze", f"wandb:{ENTITY}/rl", "--format", "csv", "--jobs", "2", "--progress",
                           "--html", str(html)], capsys)
    rows = {r["path"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0, err
    assert set(rows) == {f"wandb:{ENTITY}/rl/{r}" for r in ("drift1", "calm2", "crash3")}  # not the private run
    for run_id in ("drift1", "calm2"):
        alone = analyze_path(str(twin(tmp_path, server.runs[(ENTITY, "rl", run_id)])))
        assert rows[f"wandb:{ENTITY}/rl/{run_id}"]["verdict"] == alone.verdict()
    assert "3/3" in err and "drift1" in html.read_text()
    for flt, want in ((["state=finished"], {"drift1", "calm2"}), (["tag=baseline"], {"calm2"}),
                      (["name=crash"], {"crash3"}), (["state=finished", "name=drift"], {"drift1"})):
        args = [x for f in flt for x in ("--filter", f)]
        code, out, err = _cli(["analyze", f"wandb:{ENTITY}/rl", "--format", "csv", "--jobs", "1", *args], capsys)
        assert {r["path"].rsplit("/", 1)[1] for r in csv.DictReader(io.StringIO(out))} == want, err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case, says", [
    ("no key", "no W&B API key: run `wandb login` or set WANDB_API_KEY"),
    ("bad key", "refused the API key"),
    ("no run", "no such run for this API key"),
    ("private", "a private project needs a key of its team"),
    ("down", "cannot be reached"),
    ("rate limit", "rate-limits this API key (HTTP 429)"),
    ("bad path", "expected wandb:ENTITY/PROJECT/RUN_ID"),
    ("no project", "has no runs this API key can see"),
])
def test_what_a_user_meets_is_one_line_and_exit_2(server: WandbLoopback, case: str, says: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = f"wandb:{ENTITY}/rl/drift1"
    if case == "no key":
        monkeypatch.delenv("WANDB_API_KEY")
    elif case == "bad key":
        monkeypatch.setenv("WANDB_API_KEY", "b" * 40)
    elif case == "no run":
        path = f"wandb:{ENTITY}/rl/nosuchrun"
    elif case == "private":
        path = f"wandb:{ENTITY}/rl/secret4"
    elif case == "down":
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    elif case == "rate limit":
        server.rate_limited = 10**6
    elif case == "bad path":
        path = "wandb:only-an-entity/rl/x/y/z"
    elif case == "no project":  # a project that does not exist, or is private: a sweep of nothing
        path = f"wandb:{ENTITY}/closed"
    code, out, err = _cli(["analyze", path], capsys)
    assert code == 2 and not out
    assert err.count("\n") == 1 and says in err, err
    assert API_KEY not in err and "Traceback" not in err


def test_a_passing_rate_limit_is_retried(server: WandbLoopback, tmp_path: Path) -> None:
    server.rate_limited = 3  # wandb-core backs off and asks again; the read completes
    run = server.runs[(ENTITY, "rl", "calm2")]
    same(analyze_path(f"wandb:{ENTITY}/rl/calm2"), analyze_path(str(twin(tmp_path, run))))
    assert server.rate_limited == 0
