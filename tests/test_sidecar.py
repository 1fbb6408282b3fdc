"""``rlcluster watch RUN``: a sidecar following a live run's .wandb file from another process.

Beside a real tiny TRL GRPO run (its own process, real wandb offline with a 1 s transaction-log flush so the file
really grows while it is read) the sidecar must alert the KL stop within 2 logged steps of the in-process
callback. A file caught mid-write, cut anywhere, or damaged in the middle never raises and loses nothing whole.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.alerts import load_config
from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.pipeline import Pipeline
from wandb_rlcluster.readers.wandb import HEADER_LEN, ChunkScanner, read_offline_run
from wandb_rlcluster.sidecar import Sidecar, TailReader, locate_run_file, watch_path

pytestmark = pytest.mark.slow  # a sidecar beside real runs written by subprocesses

pytest.importorskip("wandb")

HERE = Path(__file__).parent
REPLAY = HERE / "scripts" / "replay_loop.py"
TRAINER = HERE / "scripts" / "run_trainer.py"
KL_RULES = 'version: 1\nrules:\n  - name: kl-stop\n    when: "kl > 0.15"\n'


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory: pytest.TempPathFactory, verl_ppo_log: Path) -> Path:
    """A finished W&B run written by a loop replaying a real verl log (no watch)."""
    out = tmp_path_factory.mktemp("verl-run")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.run([sys.executable, str(REPLAY), "--out", str(out), "--log", str(verl_ppo_log), "--module-log"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return locate_run_file(json.loads((out / "result.json").read_text())["run_dir"])


def _all_payloads(path: Path) -> list[bytes]:
    return list(ChunkScanner(path.read_bytes()).payloads(HEADER_LEN))


def test_tail_reader_on_a_file_growing_in_random_pieces(verl_run: Path, tmp_path: Path) -> None:
    """Every record, once, in order, whatever the cut points (mid chunk header, mid data, mid multi-chunk record)."""
    data = verl_run.read_bytes()
    want = _all_payloads(verl_run)
    rng = random.Random(7)
    for trial in range(3):
        growing = tmp_path / f"run-grow{trial}.wandb"
        growing.write_bytes(b"")
        reader = TailReader(growing)
        got: list[bytes] = []
        pos = 0
        while pos < len(data):
            step = rng.choice([1, 3, 7, 100, 4096, 40000])
            with growing.open("ab") as fh:
                fh.write(data[pos:pos + step])
            pos += step
            got.extend(reader.poll())
        got.extend(reader.poll())
        assert got == want
        assert reader.skipped == 0


def test_sidecar_on_a_cut_and_a_damaged_file(verl_run: Path, tmp_path: Path) -> None:
    data = verl_run.read_bytes()
    cut = tmp_path / "cut" / verl_run.name
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) * 2 // 3 + 5])  # a copy cut mid-record: no exit record
    out = io.StringIO()
    res = Sidecar(cut, Pipeline(use_wandb=False), interval=0.01, idle_timeout=0.05, out=out).run()
    assert 100 < res.rows < 435 and not res.finished and "no new data" in res.reason
    damaged = tmp_path / "damaged" / verl_run.name
    damaged.parent.mkdir()
    mid = len(data) // 2
    damaged.write_bytes(data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 200]) + data[mid + 200:])
    res2 = Sidecar(damaged, Pipeline(use_wandb=False), interval=0.01, idle_timeout=0.05, out=io.StringIO()).run()
    assert res2.finished and res2.skipped >= 1 and 380 < res2.rows < 435  # one block lost, the rest read
    assert "Traceback" not in out.getvalue()


def test_sidecar_reads_a_verl_run_like_analyze(verl_run: Path, tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text(KL_RULES)
    out = io.StringIO()
    res = watch_path(str(verl_run.parent), alerts=load_config(rules), interval=0.01, out=out, live=False)
    offline = analyze_path(str(verl_run.parent), alerts=load_config(rules))
    stops = [e.step for e in offline.alerts if e.kind == "firing" and e.severity == "stop"]
    assert res.finished and res.rows == len(read_offline_run(verl_run.parent).history)
    assert res.stop_step == stops[0] and res.stopped_by == "kl/kl-stop"
    journal = [json.loads(x) for x in (verl_run.parent / "rlcluster-watch-alerts.jsonl").read_text().splitlines()]
    assert any(j.get("rule") == "kl-stop" and j.get("kind") == "firing" for j in journal)
    text = out.getvalue()
    assert "rlcluster watch · verl · step" in text and "verdict STOP" in text


def test_sidecar_beside_a_real_tiny_grpo_run(tmp_path: Path) -> None:
    """The trainer and the sidecar in two processes, started together; the sidecar alerts the KL stop within two
    logged steps of the callback's stop, reading a file that grows while it reads."""
    rules = tmp_path / "strict.yaml"
    rules.write_text('rules:\n  - name: kl-stop\n    when: "kl > 0"\n    for: 2\n')
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL": "1"}
    env.pop("WANDB_API_KEY", None)
    sidecar = subprocess.Popen([sys.executable, "-m", "wandb_rlcluster.cli", "watch", str(tmp_path), "--wait", "240",
                                "--alerts", str(rules), "--interval", "0.2", "--idle-timeout", "120"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        trainer = subprocess.run([sys.executable, str(TRAINER), "--kind", "grpo_kl", "--out", str(tmp_path),
                                  "--max-steps", "10", "--alerts", str(rules), "--every", "0"],
                                 env=env, capture_output=True, text=True, timeout=400)
        assert trainer.returncode == 0, trainer.stderr[-4000:]
        out, err = sidecar.communicate(timeout=180)
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
    res = json.loads((tmp_path / "result-rank0.json").read_text())
    assert res["stop_finding"] and res["stop_finding"]["rule"] == "kl-stop"
    assert sidecar.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "the run finished (exit record)" in out
    run_dir = Path(res["run_dir"])
    journal = [json.loads(x) for x in (run_dir / "rlcluster-watch-alerts.jsonl").read_text().splitlines()]
    side = [j["step"] for j in journal if j.get("rule") == "kl-stop" and j.get("kind") == "firing"]
    assert side and abs(side[0] - res["stopped_at"]) <= 2, (side, res["stopped_at"])
    assert f"stop at step {side[0]} (kl/kl-stop)" in out


def test_locate_waits_then_says_what_is_missing(tmp_path: Path) -> None:
    from wandb_rlcluster.readers.wandb import WandbReadError

    with pytest.raises(WandbReadError, match="no wandb run"):
        locate_run_file(tmp_path, wait=0.3)
    d = tmp_path / "wandb" / "offline-run-20250101_000000-abc"
    d.mkdir(parents=True)
    (d / "notes.md").write_text("a run folder with no .wandb file yet\n")
    with pytest.raises(WandbReadError):
        locate_run_file(tmp_path, wait=0.0)
    (d / "run-abc.wandb").write_bytes(b"")
    assert locate_run_file(tmp_path).name == "run-abc.wandb"


def test_a_late_sidecar_catches_up_without_waiting(verl_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Started on a run already written: it reads the file in bounded pieces, back to back, not one per poll."""
    import wandb_rlcluster.sidecar as sidecar

    monkeypatch.setattr(sidecar, "READ_CHUNK", 5000)  # many pieces for this small file
    sleeps: list[float] = []
    res = Sidecar(verl_run, Pipeline(use_wandb=False), interval=5.0, out=io.StringIO(),
                  sleep=sleeps.append).run()
    assert res.finished and res.rows == len(read_offline_run(verl_run.parent).history)
    assert len(sleeps) <= 1  # pieces read back to back; a 5 s poll per 5 kB piece would take minutes
