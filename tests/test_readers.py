"""Tests for the log readers: every real log shape, the hand-made shapes, and one-line errors."""

from __future__ import annotations

import gzip
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wandb_rlcluster.readers import LoadedLog, LogReadError, load_rows, parse_rows_text

from .conftest import real_logs_root, shared_log

# file -> (source_format, number of entries listed in real-logs/README.md)
EXPECTED_REAL = {
    "dpo_jsonextract_qwen15b_history.json": ("raw_log_history", 91),
    "dpo_selfreward_mistral7b_m2.json": ("trainer_state", 100),
    "dpo_trl_invariant_reference_qwen05b.json": ("steps", 50),
    "grpo_aaipl_srinath_500.json": ("trainer_state", 50),
    "grpo_chaoseconomy_rusheel_traininglogs.json": ("trainer_state", 50),
    "grpo_dapo_qwen35_nipsdyn_s42.json": ("rows", 41),
    "grpo_gemma3_abdo_250.json": ("trainer_state", 25),
    "grpo_legaloom_v3_loghistory.json": ("rows", 42),
    "grpo_qwen35_9b_nipsdyn_gate2_rho1_s42_stdout.json": ("provenance", 201),
    "grpo_threestage_casnlp_stage2_160.json": ("trainer_state", 168),
    "grpo_trl_kartik_v2_seed2025.json": ("rows", 201),
    "grpo_wordle_qwen3b_casnlp_400.json": ("trainer_state", 400),
    "ppo_trl_kartik_v1_seed2026.json": ("rows", 100),
    "sft_llama3_8b_mob_3750.json": ("trainer_state", 3750),
}
KNOWN_FORMATS = {
    "trainer_state",
    "provenance",
    "rows",
    "raw_log_history",
    "steps",
    "history",
    "logs",
    "jsonl",
    "stdout_log",
    "wandb_csv",
    "csv",
}
ALLOWED_VALUE_TYPES = (float, int, bool, str)


def _real_log_names() -> list[str]:
    root = real_logs_root()
    found = {p.name for p in root.glob("*.json")} if root.is_dir() else set()
    return sorted(found | set(EXPECTED_REAL))


def _real_log(name: str) -> Path:
    return shared_log(name)


def _assert_clean(log: LoadedLog) -> None:
    """Rows the analyzer can trust: str keys, scalar values, nothing None or nested."""
    assert isinstance(log.rows, list)
    for row in log.rows:
        assert isinstance(row, dict) and row
        for key, value in row.items():
            assert isinstance(key, str)
            assert isinstance(value, ALLOWED_VALUE_TYPES), (key, value)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# real logs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _real_log_names())
def test_real_log_loads(name: str) -> None:
    log = load_rows(_real_log(name))
    assert len(log.rows) > 0
    assert log.source_format in KNOWN_FORMATS
    if name in EXPECTED_REAL:
        fmt, entries = EXPECTED_REAL[name]
        assert log.source_format == fmt
        assert len(log.rows) == entries
    assert log.path.endswith(name)
    assert log.meta["skipped_rows"] == 0
    _assert_clean(log)


def test_real_trainer_state_meta() -> None:
    log = load_rows(_real_log("grpo_threestage_casnlp_stage2_160.json"))
    assert log.meta["max_steps"] == 480
    assert log.meta["global_step"] == 160
    assert log.meta["logging_steps"] == 1
    assert log.meta["eval_steps"] == 20
    assert sum(1 for r in log.rows if "eval_loss" in r) == 8


def test_real_steps_wrapper_takes_meta_from_config_args() -> None:
    log = load_rows(_real_log("dpo_trl_invariant_reference_qwen05b.json"))
    assert log.meta["max_steps"] == 50  # stored as the string "50" under config.args
    assert set(log.rows[0]) == {"step", "loss", "grad_norm"}


def test_real_raw_log_history_ignores_columnar_keys() -> None:
    log = load_rows(_real_log("dpo_jsonextract_qwen15b_history.json"))
    # "learning_rate" also holds a list of dicts and comes first; it must not be taken.
    assert log.meta["rows_key"] == "raw_log_history"
    assert "rewards/margins" in log.rows[0]


def test_real_legaloom_nan_grad_norm_is_float_nan() -> None:
    log = load_rows(_real_log("grpo_legaloom_v3_loghistory.json"))
    nans = [
        r["grad_norm"]
        for r in log.rows
        if isinstance(r.get("grad_norm"), float) and math.isnan(r["grad_norm"])
    ]
    assert len(nans) == 1
    assert type(nans[0]) is float
    assert "train_runtime" in log.rows[-1]  # the end-of-run summary row is kept, in order


# ---------------------------------------------------------------------------------------------
# JSON shapes and row cleaning
# ---------------------------------------------------------------------------------------------


def test_trainer_state_meta_copied(tmp_path: Path) -> None:
    state = {
        "global_step": 20,
        "max_steps": 100,
        "logging_steps": 10,
        "eval_steps": 50,
        "log_history": [{"loss": 1.0, "step": 10}, {"loss": 0.5, "step": 20}],
    }
    log = load_rows(_write(tmp_path, "trainer_state.json", json.dumps(state)))
    assert log.source_format == "trainer_state"
    assert log.rows == state["log_history"]
    assert {k: log.meta[k] for k in ("global_step", "max_steps", "logging_steps", "eval_steps")} == {
        "global_step": 20,
        "max_steps": 100,
        "logging_steps": 10,
        "eval_steps": 50,
    }


@pytest.mark.parametrize(
    ("doc", "fmt"),
    [
        ({"_provenance": {"repo": "x"}, "log_history": [{"loss": 1.0}]}, "provenance"),
        ({"config": {}, "env": {}, "steps": [{"step": 1, "loss": 1.0}]}, "steps"),
        ({"eval_loss": [], "raw_log_history": [{"loss": 1.0}], "train_loss": [{"x": 1}]}, "raw_log_history"),
        ({"history": [{"loss": 1.0}]}, "history"),
        ({"rows": [{"loss": 1.0}]}, "rows"),
        ({"logs": [{"loss": 1.0}]}, "logs"),
        ([{"loss": 1.0}], "rows"),
    ],
)
def test_wrapper_shapes(doc: object, fmt: str) -> None:
    log = parse_rows_text(json.dumps(doc), "doc.json")
    assert log.source_format == fmt
    assert log.rows[0]["loss"] == 1.0


def test_row_cleaning_rules() -> None:
    rows = [
        {
            "loss": "0.25",
            "nanstr": "nan",
            "flag": True,
            "count": 3,
            "name": "run-a",
            "blank": "  ",
            "none": None,
            "nested": {"a": 1},
            "listy": [1, 2],
        },
        5,
        "not a row",
        {"only_none": None},
        {"loss": 0.1},
    ]
    log = parse_rows_text(json.dumps(rows), "rows.json")
    assert log.meta["skipped_rows"] == 3
    first = log.rows[0]
    assert first["loss"] == 0.25 and type(first["loss"]) is float
    assert math.isnan(first["nanstr"])  # type: ignore[arg-type]
    assert first["flag"] is True
    assert first["count"] == 3 and type(first["count"]) is int
    assert first["name"] == "run-a"
    assert set(first) == {"loss", "nanstr", "flag", "count", "name"}
    assert log.rows[1] == {"loss": 0.1}


def test_json_standard_nan_infinity_tokens() -> None:
    log = parse_rows_text('[{"a": NaN, "b": Infinity, "c": -Infinity}]')
    row = log.rows[0]
    assert math.isnan(row["a"]) and row["b"] == math.inf and row["c"] == -math.inf  # type: ignore[arg-type]


def test_bare_nan_inf_tokens_outside_strings_only(tmp_path: Path) -> None:
    text = (
        '{"log_history": [\n'
        '  {"loss": nan, "kl": inf, "grad_norm": -inf, "x": +Inf, "gone": None, "ok": True,\n'
        '   "note": "nan inside, a string: nan", "a:nan,b": 1.5},\n'
        '  {"loss": 0.5}\n'
        "]}"
    )
    log = load_rows(_write(tmp_path, "hand.json", text))
    assert log.source_format == "trainer_state"
    row = log.rows[0]
    assert math.isnan(row["loss"])  # type: ignore[arg-type]
    assert row["kl"] == math.inf and row["grad_norm"] == -math.inf and row["x"] == math.inf
    assert "gone" not in row
    assert row["ok"] is True
    assert row["note"] == "nan inside, a string: nan"
    assert row["a:nan,b"] == 1.5
    assert log.rows[1] == {"loss": 0.5}


def test_single_line_dict_is_one_row() -> None:
    log = parse_rows_text('{"loss": 0.5, "step": 1}', "one.jsonl")
    assert log.source_format == "jsonl"
    assert log.rows == [{"loss": 0.5, "step": 1}]


def test_bom_gzip_and_utf16(tmp_path: Path) -> None:
    body = json.dumps([{"loss": 1.0}])
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + body.encode())
    (tmp_path / "log.json.gz").write_bytes(gzip.compress(body.encode()))
    (tmp_path / "ps.json").write_bytes(body.encode("utf-16"))
    for name in ("bom.json", "log.json.gz", "ps.json"):
        assert load_rows(tmp_path / name).rows == [{"loss": 1.0}], name


# ---------------------------------------------------------------------------------------------
# JSON Lines
# ---------------------------------------------------------------------------------------------


def test_jsonl_with_broken_and_blank_lines(tmp_path: Path) -> None:
    text = (
        '{"step": 1, "loss": 1.0}\n\n{"step": 2, "loss": oops}\n'
        '{"step": 3, "loss": nan}\n   \n{"step": 4, "lo'
    )
    log = load_rows(_write(tmp_path, "metrics.jsonl", text))
    assert log.source_format == "jsonl"
    assert [r["step"] for r in log.rows] == [1, 3]
    assert math.isnan(log.rows[1]["loss"])  # type: ignore[arg-type]
    assert log.meta["skipped_lines"] == 2


def test_jsonl_detected_by_content_in_json_file(tmp_path: Path) -> None:
    text = "\n".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) for i in range(5))
    log = load_rows(_write(tmp_path, "history.json", text))
    assert log.source_format == "jsonl"
    assert len(log.rows) == 5
    assert log.meta["skipped_lines"] == 0


def test_jsonl_non_dict_lines_counted_as_rows() -> None:
    log = parse_rows_text('{"loss": 1.0}\n[1, 2]\n{"loss": 2.0}\n', "m.jsonl")
    assert len(log.rows) == 2
    assert log.meta["skipped_rows"] == 1


# ---------------------------------------------------------------------------------------------
# W&B CSV
# ---------------------------------------------------------------------------------------------


def test_wandb_csv_with_run_prefix_minmax_and_empty_cells(tmp_path: Path) -> None:
    text = (
        "Step,myrun - train/loss,myrun - train/loss__MIN,myrun - train/loss__MAX,"
        "myrun - train/global_step,myrun - train/reward,myrun - note\n"
        "1,0.9,0.8,1.0,1,,warmup\n"
        "2,0.7,0.6,0.8,2,0.25,\n"
        "3,,,,3,nan,\n"
    )
    log = load_rows(_write(tmp_path, "export.csv", text))
    assert log.source_format == "wandb_csv"
    assert log.meta["run_name"] == "myrun"
    assert log.meta["dropped_columns"] == 2
    assert log.rows[0] == {"Step": 1.0, "train/loss": 0.9, "train/global_step": 1.0, "note": "warmup"}
    assert log.rows[1] == {"Step": 2.0, "train/loss": 0.7, "train/global_step": 2.0, "train/reward": 0.25}
    assert set(log.rows[2]) == {"Step", "train/global_step", "train/reward"}
    assert math.isnan(log.rows[2]["train/reward"])  # type: ignore[arg-type]
    assert all(type(v) is float for row in log.rows for k, v in row.items() if k != "note")


def test_wandb_api_history_csv_detected_by_content() -> None:
    # run.history().to_csv(): an unnamed pandas index column first, then _step/_runtime/...
    text = (
        ",_step,_runtime,_timestamp,train/loss,train/global_step\n"
        "0,0,1.5,1700000000.0,0.9,1\n"
        "1,1,3.0,1700000001.5,0.8,2\n"
    )
    log = parse_rows_text(text, "history")
    assert log.source_format == "wandb_csv"
    assert log.rows[1] == {
        "_step": 1.0,
        "_runtime": 3.0,
        "_timestamp": 1700000001.5,
        "train/loss": 0.8,
        "train/global_step": 2.0,
    }


def test_plain_csv_is_csv() -> None:
    log = parse_rows_text("step,loss\n1,0.5\n2,0.4\n", "plain.csv")
    assert log.source_format == "csv"
    assert log.rows == [{"step": 1.0, "loss": 0.5}, {"step": 2.0, "loss": 0.4}]


# ---------------------------------------------------------------------------------------------
# stdout logs (Python-repr dict lines)
# ---------------------------------------------------------------------------------------------


def test_python_repr_stdout_log(tmp_path: Path) -> None:
    text = (
        "Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00,  1.5s/it]\n"
        "warning: something, with commas\n"
        "{'loss': 0.5, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.01}\n"
        "  5%|5         | 10/200 [00:30<09:30,  3.0s/it]{'loss': '0.4', 'grad_norm': inf, 'epoch': '0.02'}\n"
        "\r 10%|#         | 20/200 [01:00<09:00,  3.0s/it]\r{'loss': 0.3, 'kl': -inf, 'x': None, 1: 2}\n"
        "{'loss': 0.2, 'grad_norm': broken\n"
        "{'train_runtime': 100.0, 'train_loss': 0.35, 'epoch': 0.03}\n"
    )
    log = load_rows(_write(tmp_path, "train.log", text))
    assert log.source_format == "stdout_log"
    assert [r.get("loss") for r in log.rows] == [0.5, 0.4, 0.3, None]
    assert math.isnan(log.rows[0]["grad_norm"])  # type: ignore[arg-type]
    assert log.rows[1]["grad_norm"] == math.inf and log.rows[1]["epoch"] == 0.02
    assert log.rows[2] == {"loss": 0.3, "kl": -math.inf}
    assert log.rows[3]["train_runtime"] == 100.0
    assert log.meta["skipped_lines"] == 1
    _assert_clean(log)


def test_python_repr_lines_detected_by_content() -> None:
    log = parse_rows_text("{'loss': 0.5, 'step': 1}\n{'loss': 0.4, 'step': 2}\n", "out.json")
    assert log.source_format == "stdout_log"
    assert len(log.rows) == 2


def test_python_repr_never_evaluates_code() -> None:
    text = "{'loss': __import__('os').getcwd()}\n{'loss': 0.5}\n"
    log = parse_rows_text(text, "x.log")
    assert log.rows == [{"loss": 0.5}]
    assert log.meta["skipped_lines"] == 1


# ---------------------------------------------------------------------------------------------
# errors: always LogReadError, one line, naming the file
# ---------------------------------------------------------------------------------------------


def _assert_one_line_error(exc: pytest.ExceptionInfo[LogReadError], name: str) -> str:
    message = str(exc.value)
    assert "\n" not in message and "\r" not in message
    assert message.startswith("rlcluster: cannot read ")
    assert name in message
    return message


ERROR_FILES: list[tuple[str, bytes, str]] = [
    ("empty.json", b"", "empty"),
    ("blank.json", b"  \n\t\n", "empty"),
    ("binary.json", b"\x00\x81\xfe\xff\x00garbage", "UTF-8"),
    ("prose.json", b"hello world, this is not a log", "not a recognised"),
    ("truncated.json", b'{"log_history": [{"loss": 1.0}, {"loss"', "not valid JSON"),
    ("number.json", b"42", "JSON number"),
    ("string.json", b'"abc"', "JSON string"),
    ("null.json", b"null", "JSON null"),
    ("object.json", b'{"model": "x",\n "lr": 0.1}', "no log rows"),
    ("nested.json", b'{"a": {"b": 1}}', "no log rows"),
    ("state.json", b'{"global_step": 0, "logging_steps": 10, "log_history": []}', "'log_history' is empty"),
    ("emptylist.json", b"[]", "empty JSON list"),
    ("numbers.json", b"[1, 2, 3]", "no usable row objects"),
    ("nulls.json", b'[{"a": null}, {"b": {"c": 1}}]', "no usable row objects"),
    ("allbad.jsonl", b"{bad line\n{also bad\n", "not valid JSON"),
    ("deep.json", b"[" * 100_000, "nested too deeply"),
    ("header.csv", b"Step,train/loss\n", "no data rows"),
    ("words.csv", b"a,b\nx,y\n", "no numeric cells"),
    ("json.csv", b'[{"loss": 1.0}]', "holds JSON"),
    ("multi.csv", b"Step,run1 - loss,run2 - loss\n1,0.5,0.6\n", "2 runs"),
    ("nodicts.log", b"epoch 1 done\nloss 0.5\n", "looks like a logged dict"),
    ("badgzip.json.gz", b"\x1f\x8bnot really gzip", "gzip"),
]


@pytest.mark.parametrize(("name", "data", "fragment"), ERROR_FILES, ids=[e[0] for e in ERROR_FILES])
def test_error_cases(tmp_path: Path, name: str, data: bytes, fragment: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(LogReadError) as exc:
        load_rows(path)
    assert fragment in _assert_one_line_error(exc, name)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LogReadError) as exc:
        load_rows(tmp_path / "nope.json")
    assert "no such file" in _assert_one_line_error(exc, "nope.json")


def test_directory_suggests_trainer_state(tmp_path: Path) -> None:
    run = tmp_path / "outdir"
    for step in (50, 100, 200):
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    with pytest.raises(LogReadError) as exc:
        load_rows(run)
    message = _assert_one_line_error(exc, "outdir")
    assert "directory" in message and "checkpoint-200" in message


def test_error_message_stays_one_line_with_odd_name() -> None:
    with pytest.raises(LogReadError) as exc:
        parse_rows_text("", "weird\nname.json")
    assert "\n" not in str(exc.value)


def test_log_read_error_is_value_error() -> None:
    assert issubclass(LogReadError, ValueError)


# ---------------------------------------------------------------------------------------------
# robustness and speed
# ---------------------------------------------------------------------------------------------

_fuzz_text = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.sampled_from(["{", "}", "[", "]", '"', "'", ":", ",", "nan", "inf", "None", "1.5", "\n", " - "])
    ).map("".join),
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=20,
    ).map(lambda obj: json.dumps(obj)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_fuzz_text, name=st.sampled_from(["x.json", "x.jsonl", "x.csv", "x.log", "x"]))
def test_fuzz_text_only_raises_log_read_error(text: str, name: str) -> None:
    try:
        log = parse_rows_text(text, name)
    except LogReadError as exc:
        assert "\n" not in str(exc) and name in str(exc)
    else:
        assert log.rows
        _assert_clean(log)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200))
def test_fuzz_bytes_only_raise_log_read_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_bytes(data)
        try:
            log = load_rows(path)
        except LogReadError as exc:
            assert "\n" not in str(exc)
        else:
            _assert_clean(log)
