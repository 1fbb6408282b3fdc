"""Round trips through real wandb offline runs: what wandb wrote is what the reader returns.

Runs are written by a child Python process: wandb's setup singleton keeps the settings (WANDB_DIR
included) of the first ``wandb.init`` in a process, so later tests in this process would otherwise
write into an earlier test's directory. Several runs inside one child process work fine.
"""

from __future__ import annotations

import math
import random
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest

from wandb_rlcluster.readers.wandb import (
    OfflineRun,
    WandbReadError,
    find_run_dirs,
    history_rows,
    read_offline_run,
)

pytest.importorskip("wandb")

BIG = 70_000  # a logged string longer than two 32 KiB blocks: exercises FIRST/MIDDLE/LAST chunks

WRITER = textwrap.dedent(
    f"""
    import wandb

    run = wandb.init(project="t", config={{"lr": 0.001, "beta": 0.1, "model": {{"name": "tiny", "layers": 2}}}})
    wandb.config.update({{"seed": 7}})
    wandb.define_metric("rlcluster/*", step_metric="train/global_step")
    for step, loss, gs, kl in [(0, 2.0, 0, 0.0), (1, 1.5, 8, 0.25), (3, float("nan"), 24, 0.5), (10, 0.75, 80, 1.25)]:
        wandb.log({{"train/loss": loss, "train/global_step": gs, "rlcluster/kl/kl": kl}}, step=step)
    wandb.log({{"eval/nested": {{"a": 1, "b": [1, 2]}}}}, step=10)  # same step: merged into row 10
    wandb.log({{"late": 1}}, step=5)  # behind the current step: wandb drops it
    wandb.log({{"tbl": wandb.Table(columns=["a"], data=[[1]]), "inf": float("inf")}}, step=11)
    wandb.alert(title="KL spike", text="kl above 1.0", level=wandb.AlertLevel.WARN, wait_duration=30)
    run.summary["x"] = 1
    wandb.finish()

    run2 = wandb.init(project="t", config={{"lr": 0.5}})
    wandb.log({{"train/loss": 3.0, "notes": "y" * {BIG}}})
    wandb.log({{"train/loss": 2.5}})
    wandb.finish()
    print(run.id, run2.id)
    """
)

OPEN_WRITER = textwrap.dedent(
    """
    import sys
    import wandb

    run = wandb.init(project="t")
    for i in range(20):
        wandb.log({"train/loss": 1.0 / (i + 1)}, step=i)
    print(run.id, flush=True)
    sys.stdin.readline()  # the test reads the run while it is open, then lets it finish
    wandb.finish()
    """
)


def _offline_env(mp: pytest.MonkeyPatch, root: Path) -> None:
    """Offline, quiet, and every wandb directory inside ``root`` (artifact staging included)."""
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_DIR", str(root))
    mp.setenv("WANDB_SILENT", "true")
    mp.setenv("WANDB_DISABLE_GIT", "true")
    mp.setenv("WANDB_CONSOLE", "off")
    for var, sub in (("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config")):
        mp.setenv(var, str(root / sub))
    mp.setenv("WANDB_ARTIFACT_DIR", str(root / "artifacts"))


def _script(root: Path, code: str) -> list[str]:
    script = root / "writer.py"
    script.write_text(code)
    return [sys.executable, str(script)]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(WANDB_DIR, id of the full run, id of the second, newer run)."""
    root = tmp_path_factory.mktemp("wandb_offline")
    with pytest.MonkeyPatch.context() as mp:
        _offline_env(mp, root)
        proc = subprocess.run(_script(root, WRITER), cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.split()[-2:]
    return root, first, second


def _run_dir(root: Path, run_id: str) -> Path:
    (found,) = [d for d in find_run_dirs(root) if d.name.endswith(run_id)]
    return found


def _nan_safe(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Rows comparable with ==: NaN never equals itself."""
    return [{k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()} for row in rows]


def test_history_summary_config_alerts_round_trip(written: tuple[Path, str, str]) -> None:
    root, run_id, _ = written
    run = read_offline_run(_run_dir(root, run_id))

    assert run.run_id == run_id and run.project == "t"
    assert run.finished and run.exit_code == 0 and run.skipped == 0 and not run.truncated
    assert [row["_step"] for row in run.history] == [0, 1, 3, 10, 11]  # explicit steps; step=5 was dropped
    assert not any("late" in row for row in run.history)
    metric_keys = ("train/loss", "train/global_step", "rlcluster/kl/kl")
    assert [tuple(row[k] for k in metric_keys) for row in run.history[:4] if not math.isnan(row["train/loss"])] == [
        (2.0, 0, 0.0),
        (1.5, 8, 0.25),
        (0.75, 80, 1.25),
    ]
    nan_row = run.history[2]
    assert math.isnan(nan_row["train/loss"])
    assert nan_row["train/global_step"] == 24 and nan_row["rlcluster/kl/kl"] == 0.5
    assert run.history[3]["eval/nested"] == {"a": 1, "b": [1, 2]}  # logged dicts come back nested
    assert run.history[4]["inf"] == math.inf
    assert all(isinstance(row["_timestamp"], float) and "_runtime" in row for row in run.history)

    assert run.alerts == [{"title": "KL spike", "text": "kl above 1.0", "level": "WARN", "wait_duration": 30_000}]
    assert {k: v for k, v in run.config.items() if k != "_wandb"} == {
        "lr": 0.001,
        "beta": 0.1,
        "model": {"name": "tiny", "layers": 2},
        "seed": 7,
    }
    assert run.summary["x"] == 1
    assert run.summary["train/loss"] == 0.75 and run.summary["_step"] == 11 and run.summary["inf"] == math.inf
    assert {"glob_name": "rlcluster/*", "step_metric": "train/global_step"}.items() <= run.metrics[0].items()

    (table,) = run.tables
    assert table["key"] == "tbl" and table["step"] == 11 and table["type"] == "table-file"
    assert str(table["path"]).startswith("media/table/tbl_")
    assert (Path(run.path) / "files" / str(table["path"])).is_file()


def test_two_runs_and_path_forms(written: tuple[Path, str, str]) -> None:
    root, first, second = written
    dirs = find_run_dirs(root)
    assert [d.name.rsplit("-", 1)[1] for d in dirs] == [first, second]  # newest last
    assert find_run_dirs(root / "wandb") == dirs
    assert find_run_dirs(dirs[0]) == [dirs[0]]

    newest = read_offline_run(root)  # a directory of runs: the newest one
    assert newest.run_id == second and Path(newest.path) == dirs[1]
    assert [row["train/loss"] for row in newest.history] == [3.0, 2.5]
    assert newest.history[0]["notes"] == "y" * BIG
    assert newest.config == {"_wandb": {}, "lr": 0.5}
    assert read_offline_run(root / "wandb" / "latest-run").run_id == second

    by_file = read_offline_run(dirs[0] / f"run-{first}.wandb")
    assert by_file.run_id == first and Path(by_file.path) == dirs[0]
    assert _nan_safe(history_rows(dirs[0])) == _nan_safe(by_file.history)


def test_bad_input_raises_only_wandb_read_error(tmp_path: Path) -> None:
    garbage = tmp_path / "offline-run-20250101_000000-abc" / "run-abc.wandb"
    garbage.parent.mkdir()
    garbage.write_bytes(b"this is not a wandb transaction log at all")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    for bad in (garbage, garbage.parent, tmp_path / "missing", tmp_path / "empty", tmp_path / "notes.txt"):
        with pytest.raises(WandbReadError):
            read_offline_run(bad)
    garbage.write_bytes(b"")
    with pytest.raises(WandbReadError, match="too short"):
        read_offline_run(garbage)
    with pytest.raises(WandbReadError):
        find_run_dirs(tmp_path / "missing")
    assert find_run_dirs(tmp_path / "empty") == []


def _copy_run(data: bytes, where: Path, run_id: str) -> Path:
    run_dir = where / f"offline-run-20250101_000000-{run_id}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"run-{run_id}.wandb").write_bytes(data)
    return run_dir


def test_truncated_copies_read_a_prefix(written: tuple[Path, str, str], tmp_path: Path) -> None:
    root, first, second = written
    for run_id in (first, second):
        src = _run_dir(root, run_id)
        full = read_offline_run(src)
        data = (src / f"run-{run_id}.wandb").read_bytes()
        edges = {7, 8, 32767, 32768, 32769, 32775, len(data) - 1}  # header, block boundary, inside the exit record
        cuts = sorted({*range(0, len(data), max(1, len(data) // 60)), *(c for c in edges if c < len(data))})
        for cut in cuts:
            run_dir = _copy_run(data[:cut], tmp_path / f"cut{cut}", run_id)
            if cut < 7:
                with pytest.raises(WandbReadError):
                    read_offline_run(run_dir)
                continue
            part = read_offline_run(run_dir)
            assert part.skipped == 0 and not part.finished
            assert _nan_safe(part.history) == _nan_safe(full.history[: len(part.history)])
        # one byte short: the last record (the exit record) is cut inside, which must read as truncated
        tail = read_offline_run(_copy_run(data[:-1], tmp_path / f"tail-{run_id}", run_id))
        assert tail.truncated and not tail.finished
        assert _nan_safe(tail.history) == _nan_safe(full.history[: len(tail.history)])


def test_corrupt_bytes_never_raise_anything_else(written: tuple[Path, str, str], tmp_path: Path) -> None:
    root, first, _ = written
    data = (_run_dir(root, first) / f"run-{first}.wandb").read_bytes()
    full = read_offline_run(_run_dir(root, first))

    # A chunk with a valid checksum whose payload wandb's Record parser rejects: skipped and counted.
    bogus = b"\x0a\xff\xff\xff\x0f"  # field 1 claiming 2**32 - 1 bytes
    chunk = struct.pack("<IHB", zlib.crc32(b"\x01" + bogus), len(bogus), 1) + bogus
    assert len(data) + len(chunk) < 32768  # still one block, so inserting it keeps the framing aligned
    with_bogus = read_offline_run(_copy_run(data[:7] + chunk + data[7:], tmp_path / "bogus", first))
    assert with_bogus.skipped == 1 and with_bogus.finished
    assert _nan_safe(with_bogus.history) == _nan_safe(full.history)

    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    damaged = read_offline_run(_copy_run(bytes(flipped), tmp_path / "flip", first))
    assert damaged.skipped >= 1  # the CRC catches it; reading resumes at the next block

    rng = random.Random(1234)
    for i in range(150):
        mutated = bytearray(data[: rng.randrange(len(data) + 1)])
        for _ in range(rng.randrange(1, 6)):
            if mutated:
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            run = read_offline_run(_copy_run(bytes(mutated), tmp_path / f"m{i}", first))
        except WandbReadError:
            continue
        assert isinstance(run, OfflineRun)


def test_open_run_reads_what_was_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _offline_env(monkeypatch, tmp_path)
    # wandb-core flushes the .wandb file every 15 s by default; make a live run visible quickly.
    monkeypatch.setenv("WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL", "0.2")
    proc = subprocess.Popen(
        _script(tmp_path, OPEN_WRITER),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        run_id = proc.stdout.readline().strip()
        deadline = time.monotonic() + 20
        live = None
        while time.monotonic() < deadline:
            try:
                live = read_offline_run(tmp_path)
            except WandbReadError:  # run directory not created yet
                live = None
            if live is not None and len(live.history) >= 19:
                break
            time.sleep(0.1)
        assert live is not None and live.run_id == run_id
        assert len(live.history) >= 19  # the row of the newest step may still be pending in wandb-core
        assert not live.finished and live.exit_code is None
        proc.stdin.write("\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = read_offline_run(tmp_path)
    assert done.finished and [row["_step"] for row in done.history] == list(range(20))
    assert [row["train/loss"] for row in done.history] == [1.0 / (i + 1) for i in range(20)]
