"""A large log is read as a stream (readers/stream.py): the same rows, counts and analysis as reading it whole, in
memory that does not grow with the file, and the same one-line errors on broken files."""

from __future__ import annotations

import json
import math
import os
import random
import tracemalloc
from pathlib import Path

import pytest

from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.readers import LogReadError, load_rows
from wandb_rlcluster.readers import stream as stream_mod
from wandb_rlcluster.readers.stream import open_stream

from .conftest import real_logs_root


def _rows(n: int, seed: int = 0) -> list[dict[str, object]]:
    """A GRPO-shaped history whose KL runs away in its last fifth (so the analysis has findings to compare)."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for step in range(1, n + 1):
        late = max(0.0, step / n - 0.8) * 5
        out.append({"loss": rng.gauss(0.01, 0.005), "grad_norm": abs(rng.gauss(0.4, 0.1)),
                    "learning_rate": 1e-6, "reward": 0.5 + 0.2 * step / n + rng.gauss(0, 0.05),
                    "reward_std": abs(rng.gauss(0.4, 0.05)), "kl": 0.01 + 2.0 * late * late + abs(rng.gauss(0, 0.002)),
                    "entropy": 0.5 + rng.gauss(0, 0.01), "completions/mean_length": 60 + rng.gauss(0, 3),
                    "completions/clipped_ratio": 0.0, "frac_reward_zero_std": 0.0, "step": step})
    return out


def _trainer_state(path: Path, rows: list[dict[str, object]], **top: object) -> Path:
    doc = {"best_global_step": None, "epoch": 1.0, "global_step": len(rows), "log_history": rows,
           "logging_steps": 1, "max_steps": len(rows), **top}
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))
    return path


def _jsonl(path: Path, rows: list[dict[str, object]], extra: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + extra)
    return path


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Every file counts as large, and the stream reads 4 KiB pieces (elements and characters cross them)."""
    monkeypatch.setenv("RLCLUSTER_STREAM_BYTES", "1")
    monkeypatch.setattr(stream_mod, "_PIECE", 4096)
    return monkeypatch


def _whole_and_streamed(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, object], dict[str, object]]:
    monkeypatch.delenv("RLCLUSTER_STREAM_BYTES", raising=False)
    assert open_stream(str(path)) is None  # a small file is read whole
    whole = analyze_path(str(path)).to_dict()
    monkeypatch.setenv("RLCLUSTER_STREAM_BYTES", "1")
    assert open_stream(str(path)) is not None
    return whole, analyze_path(str(path)).to_dict()


@pytest.mark.parametrize("shape", ["trainer_state", "jsonl"])
def test_a_streamed_log_reads_and_analyses_as_the_whole_file_does(tmp_path: Path, streamed: pytest.MonkeyPatch,
                                                                  shape: str):
    rows = _rows(1500)
    rows[700]["loss"] = math.nan  # NaN and an unusable row travel the same way
    rows.insert(300, {"note": "a row with nothing to read"})
    path = _trainer_state(tmp_path / "trainer_state.json", rows) if shape == "trainer_state" \
        else _jsonl(tmp_path / "log.jsonl", rows, extra="not a row\n")
    whole_log = load_rows(path)
    s = open_stream(str(path))
    assert s is not None
    got = list(s.rows)
    assert json.dumps(got) == json.dumps(whole_log.rows)  # NaN != NaN: compare the text
    assert s.meta == whole_log.meta and s.source_format == whole_log.source_format
    whole, stream = _whole_and_streamed(path, streamed)
    assert stream == whole
    assert whole["verdict"] in ("warn", "stop")  # the runaway was found, the same way


def test_every_real_json_log_streams_to_the_same_analysis(monkeypatch: pytest.MonkeyPatch):
    root = real_logs_root()
    if not root.is_dir():
        pytest.skip(f"{root} is absent: the real-log comparison needs the shared real logs")
    compared = 0
    for path in sorted(root.rglob("*.json*")):
        if path.suffix not in (".json", ".jsonl"):
            continue
        monkeypatch.setenv("RLCLUSTER_STREAM_BYTES", "1")
        if open_stream(str(path)) is None:
            continue  # another shape (a list of rows, a wrapper dict): read whole, as before
        whole, stream = _whole_and_streamed(path, monkeypatch)
        assert stream == whole, path.name
        compared += 1
    assert compared >= 10, compared


@pytest.mark.parametrize("shape", ["trainer_state", "jsonl"])
def test_the_stream_holds_a_piece_where_reading_whole_holds_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     shape: str):
    """Peak traced memory while every row of a log is read and dropped, for a log and one four times as long: read
    whole, it grows with the file; streamed, it stays at a few pieces (64 KiB here, 1 MiB as shipped). The analysis
    of a 1M-row log, gauges included: benchmarks/bench_analyze.py --stream-rows 1000000."""
    monkeypatch.setattr(stream_mod, "_PIECE", 1 << 16)
    monkeypatch.setattr(stream_mod, "_HEAD", 1 << 16)

    def peak(rows: int, stream: bool) -> int:
        name = "trainer_state.json" if shape == "trainer_state" else "log.jsonl"
        path = (_trainer_state if shape == "trainer_state" else _jsonl)(tmp_path / f"{rows}-{name}", _rows(rows))
        monkeypatch.setenv("RLCLUSTER_STREAM_BYTES", "1")
        tracemalloc.start()
        try:
            if stream:
                log = open_stream(str(path))
                assert log is not None
                for _ in log.rows:
                    pass
            else:
                load_rows(path)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole_small, whole_large = peak(5000, False), peak(20000, False)
    streamed_small, streamed_large = peak(5000, True), peak(20000, True)
    assert whole_large > 3 * whole_small, (whole_small, whole_large)
    assert streamed_large < 1.2 * streamed_small, (streamed_small, streamed_large)
    assert streamed_large < whole_large / 5, (streamed_large, whole_large)


def test_a_multibyte_character_across_two_pieces_is_read_whole(tmp_path: Path, streamed: pytest.MonkeyPatch):
    rows = _rows(60)
    for i, r in enumerate(rows):
        r["tag"] = "é€😀" * (i % 7)  # strings are dropped from rows, but must decode
    path = _trainer_state(tmp_path / "trainer_state.json", rows)
    s = open_stream(str(path))
    assert s is not None and len(list(s.rows)) == 60


@pytest.mark.parametrize("damage", ["cut_mid_row", "cut_after_rows", "not_utf8", "no_rows"])
def test_a_broken_large_file_fails_in_one_line_as_the_whole_reader_does(tmp_path: Path, streamed: pytest.MonkeyPatch,
                                                                       damage: str):
    path = _trainer_state(tmp_path / "trainer_state.json", _rows(400))
    data = path.read_bytes()
    if damage == "cut_mid_row":
        data = data[: len(data) // 2]
    elif damage == "cut_after_rows":
        data = data[: data.rindex(b"]") + 3]
    elif damage == "not_utf8":
        mid = len(data) // 2
        data = data[:mid] + b"\xff\xfe\xfd" + data[mid:]
    else:
        data = json.dumps({"global_step": 3, "log_history": [[1.0, 2.0]] * 5000}).encode()
    path.write_bytes(data)
    with pytest.raises(LogReadError) as streamed_error:
        analyze_path(str(path))
    message = str(streamed_error.value)
    assert message.startswith(f"rlcluster: cannot read '{path}'") and "\n" not in message
    streamed.delenv("RLCLUSTER_STREAM_BYTES")
    with pytest.raises(LogReadError):
        analyze_path(str(path))  # the whole-file reader refuses it too


def test_a_line_too_long_to_be_a_row_is_skipped_and_counted(tmp_path: Path, streamed: pytest.MonkeyPatch):
    from wandb_rlcluster.readers.lines import MAX_LINE_CHARS

    rows = _rows(50)
    text = "".join(json.dumps(r) + "\n" for r in rows[:20]) + "{" + "x" * (5 * MAX_LINE_CHARS) + "}\n" \
        + "".join(json.dumps(r) + "\n" for r in rows[20:])
    path = tmp_path / "log.jsonl"
    path.write_text(text)
    s = open_stream(str(path))
    assert s is not None
    assert len(list(s.rows)) == 50 and s.meta["skipped_lines"] == 1
    streamed.delenv("RLCLUSTER_STREAM_BYTES")
    assert load_rows(path).meta["skipped_lines"] == 1


def _same_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch, streams: bool = True) -> None:
    """The whole read and the forced stream agree: the same analysis, or both a one-line LogReadError. ``streams``:
    whether the forced stream takes the file at all (else it is read whole both times, as it should be)."""
    monkeypatch.setenv("RLCLUSTER_STREAM_BYTES", "1")
    assert (open_stream(str(path)) is not None) == streams
    outcomes = []
    for stream in (False, True):
        if stream:
            monkeypatch.setenv("RLCLUSTER_STREAM_BYTES", "1")
        else:
            monkeypatch.delenv("RLCLUSTER_STREAM_BYTES", raising=False)
        try:
            outcomes.append(json.dumps(analyze_path(str(path)).to_dict(), sort_keys=True, default=repr))
        except LogReadError as e:
            assert str(e).startswith("rlcluster: cannot read") and "\n" not in str(e)
            outcomes.append("error")
    assert outcomes[0] == outcomes[1], outcomes[0][:300]


@pytest.mark.parametrize("piece", [1 << 20, 61, 7])
@pytest.mark.parametrize("case", ["bare_tokens", "max_steps_first", "number_elements", "escaped_key", "extra_comma",
                                  "missing_comma", "nested_rows", "big_int"])
def test_odd_documents_read_the_same_streamed_and_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str,
                                                        piece: int):
    """Found by a hostile review: each of these once differed between the stream and the whole read (or raised)."""
    monkeypatch.setattr(stream_mod, "_PIECE", piece)
    rows = [{"loss": 1.0 + i / 100, "learning_rate": 2e-5 if i < 100 else 0.0, "kl": 0.01, "step": i + 1}
            for i in range(200)]
    body = json.dumps({"global_step": 200, "logging_steps": 1, "max_steps": 1000, "log_history": rows}, indent=2)
    if case == "bare_tokens":  # hand-written tokens the whole reader mends
        body = body.replace('"kl": 0.01', '"kl": nan', 3).replace('"kl": 0.01', '"kl": None', 3)
    elif case == "max_steps_first":  # not sorted: the planned length before the rows (it changes the lr rules)
        body = json.dumps({"max_steps": 1000, "global_step": 200, "log_history": rows}, indent=2)
    elif case == "number_elements":  # bare numbers among the rows, cut anywhere by the pieces
        body = body.replace('\n    {\n      "kl"', '\n    12.5e3, 7,\n    {\n      "kl"', 5)
    elif case == "escaped_key":  # a key ending in an escaped quote and log_history is not log_history
        body = '{"x\\"log_history": [{"loss": 9.0}],' + body[1:]
    elif case == "extra_comma":
        body = body.replace("},\n", "},,\n", 1)
    elif case == "missing_comma":
        body = body.replace("},\n", "}\n", 1)
    elif case == "nested_rows":
        body = body.replace('"kl": 0.01', '"kl": 0.01, "hist": {"a": [1, 2, {"b": "]}"}]}', 4)
    else:
        body = body.replace('"kl": 0.01', '"kl": ' + "9" * 5000, 1)
    path = tmp_path / "trainer_state.json"
    path.write_text(body)
    _same_both_ways(path, monkeypatch)
    if case == "bare_tokens":  # and it was read, not refused
        assert analyze_path(str(path)).to_dict()["rows"] == 200


@pytest.mark.parametrize("name, text, streams", [
    ("progress.jsonl", '{"loss": 1.0}\n' + "\r".join(json.dumps({"loss": 1 + i / 10, "step": i}) for i in range(50)),
     True),
    ("crlf.jsonl", "".join(json.dumps({"loss": 1 + i / 10, "step": i}) + "\r\n" for i in range(50)), True),
    ("one_doc.json", json.dumps({"history": [{"loss": 1.0, "step": i} for i in range(50)], "max_steps": 50}), False),
    ("rows.csv", "".join(json.dumps({"loss": 1 + i / 10, "step": i}) + "\n" for i in range(50)), False),
])
def test_odd_line_files_read_the_same_streamed_and_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                          text: str, streams: bool):
    monkeypatch.setattr(stream_mod, "_PIECE", 13)
    path = tmp_path / name
    path.write_text(text, newline="")
    _same_both_ways(path, monkeypatch, streams)


def test_the_package_still_offers_its_names_without_importing_them():
    import subprocess
    import sys

    code = ("import sys, wandb_rlcluster as w; assert 'wandb_rlcluster.core' not in sys.modules; "
            "assert {'GAUGE_IDS', 'InstrumentCluster', 'analyze_rows'} <= set(dir(w)); "
            "assert w.core.GAUGE_IDS == w.GAUGE_IDS and callable(w.analyze_rows)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_analyze_shows_its_progress_while_a_large_log_streams(tmp_path: Path):
    """`rlcluster analyze FILE` on a streamed log draws a bytes-read bar on stderr (--progress: also off a terminal),
    ending at the file's size, and prints the same report as without it; a log read whole draws none."""
    import subprocess
    import sys

    path = _jsonl(tmp_path / "log.jsonl", _rows(3000))

    def run(stream: bool, progress: bool) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "RLCLUSTER_STREAM_BYTES": "1" if stream else str(1 << 40)}
        cmd = [sys.executable, "-m", "wandb_rlcluster", "analyze", str(path), "--format", "json"]
        return subprocess.run(cmd + (["--progress"] if progress else []), capture_output=True, text=True, env=env,
                              timeout=300)

    shown, plain, whole = run(True, True), run(True, False), run(False, True)
    assert shown.returncode == plain.returncode == whole.returncode
    assert json.loads(shown.stdout) == json.loads(plain.stdout) == json.loads(whole.stdout)
    bars = [line for line in shown.stderr.splitlines() if "MB read" in line]
    assert bars and bars[-1].startswith("[" + "#" * 30 + "]"), shown.stderr
    assert "MB read" not in plain.stderr and "MB read" not in whole.stderr
