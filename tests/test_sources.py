"""Runs that live in other trackers: TensorBoard event files (written here by ``torch.utils.tensorboard``) and MLflow
runs (written here by MLflow's own client into a file store) read by ``rlcluster analyze``, the sweep and ``rlcluster
watch`` with the same findings as the same rows in a JSON Lines file, in every output format and with every option.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from wandb_rlcluster.alerts import load_config
from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.cli import main

from .source_twins import grpo_rows, same, write_jsonl, write_tensorboard

pytest.importorskip("torch.utils.tensorboard")
pytest.importorskip("tensorboard")

RULES = 'version: 1\nrules:\n  - name: kl-stop\n    when: "kl > 0.05"\n    for: 2\n'


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """(a drifting TensorBoard run, its twin, a healthy one, its twin)."""
    root = tmp_path_factory.mktemp("tb")
    bad, good = grpo_rows(1), grpo_rows(2, drift=False)
    write_tensorboard(root / "runs" / "bad", bad)
    write_tensorboard(root / "runs" / "good", good)
    return (root / "runs" / "bad", write_jsonl(root / "bad.jsonl", bad), root / "runs" / "good",
            write_jsonl(root / "good.jsonl", good))


def test_tensorboard_rows_are_the_logged_rows(runs: tuple[Path, Path, Path, Path]) -> None:
    """One row per logging call, the eval and end-of-training rows apart, as the JSON Lines twin has them."""
    from wandb_rlcluster.readers.tensorboard import read_tensorboard

    bad, twin = runs[0], runs[1]
    log = read_tensorboard(bad)
    want = [json.loads(x) for x in twin.read_text().splitlines()]
    assert log.source_format == "tensorboard"
    assert log.rows == want


def test_tensorboard_findings_equal_the_json_lines_twin(runs: tuple[Path, Path, Path, Path]) -> None:
    bad, twin = runs[0], runs[1]
    found = same(analyze_path(str(bad)), analyze_path(str(twin)))
    assert found["verdict"] in ("warn", "stop") and {f["gauge"] for f in found["findings"]} & {"kl", "length"}
    rules = load_config(None)
    with_rules = same(analyze_path(str(bad), alerts=rules, params={"reward": {"gold": ["verifier"]}}),
                      analyze_path(str(twin), alerts=rules, params={"reward": {"gold": ["verifier"]}}))
    assert with_rules["alerts"]
    event_file = next(bad.iterdir())  # the event file itself reads as its folder does
    same(analyze_path(str(event_file)), analyze_path(str(twin)))


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["json", "csv", "md"])
def test_tensorboard_in_every_format_with_every_option(runs: tuple[Path, Path, Path, Path], fmt: str,
                                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--map, --gold, --alerts, --fail-on, --format and --html give the same output for the run as for its twin."""
    bad, twin = str(runs[0]), str(runs[1])
    rules = tmp_path / "alerts.yaml"
    rules.write_text(RULES)
    outs = []
    for src in (bad, twin):
        html = tmp_path / f"fleet-{Path(src).name}.html"
        code, out, err = _cli(["analyze", src, "--format", fmt, "--map", "reward=train/my_score", "--gold", "verifier",
                               "--alerts", str(rules), "--fail-on", "warn", "--html", str(html)], capsys)
        assert code == 1, err  # the KL stop fires in both
        assert "kl-stop" in out
        page = html.read_text()
        assert "kl-stop" in page or "kl/" in page
        page = page.replace(src, "RUN").replace(json.dumps(src)[1:-1], "RUN")
        # the fleet page shows a long path by its end ("…/tb0/runs/bad"), cut where the path's length puts it
        page = re.sub(r">…[^<]*</td>", ">RUN</td>", page)
        outs.append((out.replace(src, "RUN"), page))
    if fmt == "json":
        one, two = (json.loads(o) for o, _ in outs)
        one.pop("format"), two.pop("format")
        assert one == two
    else:
        assert outs[0][0].replace("tensorboard", "FMT") == outs[1][0].replace("jsonl", "FMT")
    assert outs[0][1].replace("tensorboard", "FMT") == outs[1][1].replace("jsonl", "FMT")


def test_a_sweep_finds_each_tensorboard_folder_as_one_run(runs: tuple[Path, Path, Path, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = runs[0].parent
    html = tmp_path / "fleet.html"
    code, out, err = _cli(["analyze", str(root), "--format", "csv", "--progress", "--jobs", "2", "--html", str(html)],
                          capsys)
    assert code == 0, err
    table = {r["path"]: r for r in __import__("csv").DictReader(io.StringIO(out))}
    assert set(table) == {str(runs[0]), str(runs[2])}
    code, twins, _ = _cli(["analyze", str(runs[1]), str(runs[3]), "--format", "csv", "--jobs", "1"], capsys)
    by_twin = {r["path"]: r for r in __import__("csv").DictReader(io.StringIO(twins))}
    for run, twin in ((runs[0], runs[1]), (runs[2], runs[3])):
        a, b = dict(table[str(run)]), dict(by_twin[str(twin)])
        for d in (a, b):
            d.pop("path"), d.pop("source_format"), d.pop("rank")
        assert a == b
    assert table[str(runs[0])]["verdict"] in ("warn", "stop") and table[str(runs[2])]["verdict"] == "ok"
    assert "2/2" in err  # the sweep's progress bar counted both runs
    assert str(runs[0]) in html.read_text()


def test_watch_tails_an_event_file_as_it_grows(runs: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    """The event file copied over in random pieces (cut mid-record): the tail reads every row once, and the
    sidecar's alerts are the offline analysis's."""
    from wandb_rlcluster.readers.tensorboard import EventTail
    from wandb_rlcluster.sidecar import watch_path

    source = next(runs[0].iterdir())
    data = source.read_bytes()
    want = [json.loads(x) for x in runs[1].read_text().splitlines()]
    grow = tmp_path / "grow"
    grow.mkdir()
    target = grow / source.name
    target.write_bytes(b"")
    tail = EventTail(grow)
    got: list[dict[str, Any]] = []
    rng = random.Random(3)
    pos = 0
    while pos < len(data):
        n = rng.choice([1, 5, 17, 300, 4096])
        with target.open("ab") as fh:
            fh.write(data[pos:pos + n])
        pos += n
        got += tail.poll()
    got += tail.poll() + tail.flush()
    assert got == want
    rules = tmp_path / "alerts.yaml"
    rules.write_text(RULES)
    out = io.StringIO()
    res = watch_path(str(runs[0]), alerts=load_config(rules), interval=0.01, idle_timeout=0.3, out=out, live=False,
                     journal=str(tmp_path / "journal.jsonl"))
    offline = analyze_path(str(runs[1]), alerts=load_config(rules))
    stops = [e.step for e in offline.alerts if e.kind == "firing" and e.severity == "stop"]
    assert res.rows == len(want) and res.stop_step == stops[0] and res.stopped_by == "kl/kl-stop"
    assert "no new data" in res.reason and "Traceback" not in out.getvalue()
    journal = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert any(j.get("rule") == "kl-stop" and j.get("kind") == "firing" for j in journal)


def test_missing_extras_are_named_in_one_line(runs: tuple[Path, Path, Path, Path]) -> None:
    """Without the tensorboard, mlflow or trackio package: exit 2 and one line naming the extra to install."""
    block = ("import sys; sys.modules['tensorboard'] = None; sys.modules['mlflow'] = None; "
             "sys.modules['trackio'] = None; "
             "from wandb_rlcluster.cli import main; raise SystemExit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    for arg, extra in ((str(runs[0]), "tensorboard"), ("mlflow:exp/run", "mlflow"), ("trackio:proj/run", "trackio")):
        p = subprocess.run([sys.executable, "-c", block, "analyze", arg], capture_output=True, text=True, env=env,
                           timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and f"wandb-rlcluster[{extra}]" in p.stderr


# -- MLflow -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["file", pytest.param("sqlite", marks=pytest.mark.slow)])  # ~30 s migrations
def mlflow_store(tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> tuple[str, list[str], list[Path]]:
    """Two runs written by MLflow's own client into a file store or a SQLite database (log_metrics by step, as
    transformers' callback does), and their twins. The store's URI, the run ids, the twins."""
    mlflow = pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("mlflow")
    if request.param == "sqlite":
        pytest.importorskip("sqlalchemy")
        pytest.importorskip("alembic")
        uri = f"sqlite:///{root / 'mlflow.db'}"
    else:
        uri = (root / "mlruns").as_uri()
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = mlflow.tracking.MlflowClient(uri)
    exp = client.create_experiment("rl")
    ids, twins = [], []
    for i, drift in enumerate((True, False)):
        rows = [{k.removeprefix("train/"): v for k, v in r.items()} for r in grpo_rows(10 + i, drift=drift)]
        run = client.create_run(exp, run_name=f"grpo-{i}", tags={"baseline": "yes"} if not drift else {})
        client.log_param(run.info.run_id, "max_steps", "160")
        for n, row in enumerate(rows):
            metrics = [mlflow.entities.Metric(k, v, 1_000_000 + n, row["step"]) for k, v in row.items() if k != "step"]
            client.log_batch(run.info.run_id, metrics=metrics)
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
        twins.append(write_jsonl(root / f"twin-{i}.jsonl", rows))
        (root / f"twin-{i}.json").write_text(json.dumps({"log_history": rows, "max_steps": 160}))
    return uri, ids, twins


def test_mlflow_run_findings_equal_the_twin(mlflow_store: tuple[str, list[str], list[Path]],
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    uri, ids, twins = mlflow_store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    found = same(analyze_path(f"mlflow:rl/{ids[0]}"), analyze_path(str(twins[0].with_suffix(".json"))))
    assert found["verdict"] in ("warn", "stop")
    same(analyze_path("mlflow:rl/grpo-0"), analyze_path(str(twins[0].with_suffix(".json"))))  # by run name
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    code, out, err = _cli(["analyze", f"mlflow:rl/{ids[0]}", "--tracking-uri", uri, "--format", "json",
                           "--gold", "verifier", "--fail-on", "stop", "--alerts", "default"], capsys)
    assert code in (0, 1) and json.loads(out)["format"] == "mlflow", err


def test_mlflow_experiment_sweep_with_filters(mlflow_store: tuple[str, list[str], list[Path]], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    uri, ids, _ = mlflow_store
    code, out, err = _cli(["analyze", "mlflow:rl", "--tracking-uri", uri, "--format", "csv", "--jobs", "1",
                           "--html", str(tmp_path / "f.html")], capsys)
    rows = list(__import__("csv").DictReader(io.StringIO(out)))
    assert code == 0, err
    assert {r["path"] for r in rows} == {f"mlflow:rl/{i}" for i in ids}
    code, out, _ = _cli(["analyze", "mlflow:rl", "--tracking-uri", uri, "--format", "csv", "--filter", "tag=baseline",
                         "--filter", "state=finished"], capsys)
    assert [r["path"] for r in __import__("csv").DictReader(io.StringIO(out))] == [f"mlflow:rl/{ids[1]}"]


@pytest.mark.parametrize("path, says", [("mlflow:nope/abc", "no experiment 'nope'"),
                                        ("mlflow:rl/0123456789abcdef", "no run '0123456789abcdef'"),
                                        ("mlflow:justone/", "expected mlflow:EXPERIMENT/RUN_ID")])
def test_mlflow_errors_are_one_line_exit_2(mlflow_store: tuple[str, list[str], list[Path]], path: str, says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    uri = mlflow_store[0]
    code, out, err = _cli(["analyze", path, "--tracking-uri", uri], capsys)
    if path.endswith("/"):  # an experiment alone is a sweep of its runs
        assert code == 2 and "no experiment 'justone'" in err
        return
    assert code == 2 and says in err and err.count("\n") == 1, err



def test_a_foreign_empty_or_damaged_event_file(runs: tuple[Path, Path, Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Not an event file, an empty one: one line and exit 2. Damaged in the middle: the rows before the damage,
    as TensorBoard reads it."""
    data = next(runs[0].iterdir()).read_bytes()
    cases = {"foreign": random.Random(5).randbytes(5000), "empty": b"",
             "damaged": data[:len(data) // 2] + bytes(b ^ 0x5A for b in data[len(data) // 2:len(data) // 2 + 64])
             + data[len(data) // 2 + 64:]}
    for name, content in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "events.out.tfevents.1.host.0.0").write_bytes(content)
        code, out, err = _cli(["analyze", str(folder)], capsys)
        if name == "damaged":
            want = [json.loads(x) for x in runs[1].read_text().splitlines()]
            from wandb_rlcluster.readers.tensorboard import read_tensorboard

            got = read_tensorboard(folder).rows
            assert code in (0, 1) and 0 < len(got) < len(want) and got[:-1] == want[:len(got) - 1]
        else:
            assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
            assert ("no record" if name == "foreign" else "no scalars yet") in err


def test_watch_follows_a_summary_writer_while_it_writes(tmp_path: Path) -> None:
    """``rlcluster watch`` started on the folder while a SummaryWriter in another thread is still writing it (one
    flush per logged row, as transformers' callback flushes): every row, and the stop the offline analysis finds."""
    import threading
    import time

    from torch.utils.tensorboard import SummaryWriter

    from wandb_rlcluster.sidecar import watch_path

    rows = grpo_rows(7)
    folder = tmp_path / "live"
    writer = SummaryWriter(str(folder))
    writer.add_scalar("train/loss", rows[0]["train/loss"], rows[0]["step"])  # the file exists before watch starts
    writer.flush()

    def train() -> None:
        for i, row in enumerate(rows):
            for key, value in row.items():
                if key != "step" and not (i == 0 and key == "train/loss"):
                    writer.add_scalar(key, value, row["step"])
            writer.flush()
            time.sleep(0.005)
        writer.close()

    rules = tmp_path / "alerts.yaml"
    rules.write_text(RULES)
    thread = threading.Thread(target=train)
    thread.start()
    try:
        res = watch_path(str(folder), alerts=load_config(rules), interval=0.05, idle_timeout=5, out=io.StringIO(),
                         live=False)
    finally:
        thread.join()
    twin = write_jsonl(tmp_path / "twin.jsonl", rows)
    offline = analyze_path(str(twin), alerts=load_config(rules))
    stops = [e.step for e in offline.alerts if e.kind == "firing" and e.severity == "stop"]
    assert res.rows == len(rows) and res.stop_step == stops[0] and res.stopped_by == "kl/kl-stop"


def test_a_value_logged_at_a_threshold_reads_as_logged(tmp_path: Path) -> None:
    """A clipped ratio of exactly 0.2 (truncation warns above 0.2) is 0.200000003 as a 32-bit float: read back as
    that, it fired a warning the JSON Lines twin of the same run does not (a real GRPO log did)."""
    rows = [{"step": s, "train/reward": 0.5 + 0.01 * (s % 3), "train/kl": 0.01, "train/completions/mean_length": 80.0,
             "train/completions/clipped_ratio": 0.2 if s >= 20 else 0.05} for s in range(1, 41)]
    write_tensorboard(tmp_path / "tb", rows)
    from wandb_rlcluster.readers.tensorboard import read_tensorboard

    log_rows = read_tensorboard(tmp_path / "tb").rows
    assert {r["train/completions/clipped_ratio"] for r in log_rows} == {0.2, 0.05}
    found = same(analyze_path(str(tmp_path / "tb")), analyze_path(str(write_jsonl(tmp_path / "twin.jsonl", rows))))
    assert not [f for f in found["findings"] if f["rule"] == "truncation"]


def test_a_scalar_named_step_does_not_split_the_rows(tmp_path: Path) -> None:
    """A custom loop that logs ``add_scalar("step", ...)`` got two rows per step, every other one at the scalar's
    value as its step."""
    from torch.utils.tensorboard import SummaryWriter

    from wandb_rlcluster.readers.tensorboard import read_tensorboard

    writer = SummaryWriter(str(tmp_path / "tb2"))
    for s in range(1, 11):
        writer.add_scalar("train/reward", 0.5, s)
        writer.add_scalar("step", 99.0, s)
    writer.close()
    got = read_tensorboard(tmp_path / "tb2").rows
    assert [r["step"] for r in got] == list(range(1, 11))
    assert all(set(r) == {"step", "train/reward"} for r in got)


def test_an_mlflow_store_that_is_not_there_is_one_line_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a tracking URI MLflow 3 opens ./mlflow.db: reading a run created a 1 MB database in the user's folder
    and then said the experiment was not in './mlruns'; a server that is down was retried for minutes."""
    pytest.importorskip("mlflow")
    import socket

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for var in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.setenv(var, "")  # so that monkeypatch restores what the reader sets
        monkeypatch.delenv(var)
    code, _, err = _cli(["analyze", "mlflow:rl/abc"], capsys)
    assert code == 2 and "no MLflow tracking store" in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
    code, _, err = _cli(["analyze", "mlflow:rl", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"], capsys)
    assert code == 2 and "no MLflow tracking store" in err and list(tmp_path.iterdir()) == []
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    code, _, err = _cli(["analyze", "mlflow:rl/abc", "--tracking-uri", f"http://127.0.0.1:{port}"], capsys)
    assert code == 2 and err.count("\n") == 1 and time.monotonic() - start < 30, err


def test_a_filter_field_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--filter tag=a --filter tag=b`` swept the runs tagged b alone, while the manual says every filter applies."""
    code, _, err = _cli(["analyze", "wandb:team/proj", "--filter", "tag=a", "--filter", "tag=b"], capsys)
    assert code == 2 and "--filter tag= is given twice" in err and err.count("\n") == 1, err


def test_a_wandb_server_that_refuses_connections_is_one_line_in_seconds(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The network down (the connection refused) took 187 s: wandb-core retried until its 60 s timeout, three times."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for var in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    start = time.monotonic()
    code, _, err = _cli(["analyze", "wandb:team/proj/run1"], capsys)
    assert code == 2 and "cannot be reached" in err and err.count("\n") == 1, err
    assert time.monotonic() - start < 20
