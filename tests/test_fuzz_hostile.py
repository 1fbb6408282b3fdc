"""Fuzzing the surfaces people and crashing processes write to: log files, alerts.yaml, the
expression grammar, the alert templates, and the CLI that reads them.

Every case runs under a CPU-time limit (2 s of this process's CPU, enforced with ITIMER_PROF, so a
loaded CI machine cannot fail a case that a quiet one passes; a wall-clock guard catches a case that
blocks) and a memory limit (200 MB of Python allocations, measured with tracemalloc), and must end in a
result or in the project's own one-line error: never another exception, never a traceback, exit 2 with
a reason for every malformed input. Deterministic (``derandomize``) so CI is stable; sized to about a
minute in all. The generated cases are small; a few 1-5 MB inputs of the shapes that once cost 60-120x
their size (a long string, a gzip bomb, a huge YAML, 5,000-digit integers) check memory per input byte.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import re
import signal
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wandb_rlcluster.alerts import AlertConfig, ConfigError, load_config
from wandb_rlcluster.alerts.config import MAX_RENDERED
from wandb_rlcluster.alerts.engine import render
from wandb_rlcluster.alerts.expr import ExprError, parse
from wandb_rlcluster.cli import main
from wandb_rlcluster.readers import LoadedLog, LogReadError, load_rows, parse_rows_text

SECONDS = 2.0
MEGABYTES = 200
#: A case that blocks (uses no CPU) is stopped after this many wall-clock seconds.
WALL_GUARD = 30.0
T = TypeVar("T")

pytestmark = [pytest.mark.slow,  # fuzzes the readers, configs and CLI for many seconds
              pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM for the time limit")]


class CaseTooSlow(Exception):
    pass


def measured(fn: Callable[[], T], seconds: float = SECONDS, wall: float = WALL_GUARD) -> tuple[T, float, int]:
    """(result, CPU seconds, peak bytes of Python allocations) of one case; CaseTooSlow past 1.5x ``seconds``
    of CPU or ``wall`` seconds of wall clock. The case's own exceptions pass through.

    The CPU time is taken on a run without tracemalloc, which slows allocation-heavy code several-fold and by a
    factor that varies from machine to machine; the peak is taken on a second, traced run of the same case when
    the first one returned (its hard CPU stop is 10x ``seconds``, for the tracing's own cost)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTooSlow(f"over {seconds} s of CPU" if signum == signal.SIGPROF else f"blocked over {wall} s")

    def limited(trace: bool) -> tuple[T, float, int]:
        previous = {sig: signal.signal(sig, on_alarm) for sig in (signal.SIGPROF, signal.SIGALRM)}
        signal.setitimer(signal.ITIMER_PROF, seconds * (1.5 if not trace else 10.0))  # the hard stop
        signal.setitimer(signal.ITIMER_REAL, wall)
        if trace:
            tracemalloc.start()
        t0 = time.process_time()
        peak = 0
        try:
            result = fn()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            cpu = time.process_time() - t0
            if trace:
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
        return result, cpu, peak

    result, cpu, _ = limited(trace=False)  # a slow or blocked case fails here, at its own limits
    _, _, peak = limited(trace=True)
    return result, cpu, peak


def bounded(fn: Callable[[], T]) -> T:
    """Run one fuzz case under the time and memory limits; the case's own exceptions pass through."""
    result, cpu, peak = measured(fn)
    assert cpu < SECONDS, f"case took {cpu:.2f} s of CPU"
    assert peak < MEGABYTES * 1e6, f"case peaked at {peak / 1e6:.0f} MB"
    return result


FUZZ = settings(derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def run_cli(*args: str) -> tuple[int, str, str]:
    with captured() as (out, err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_reason(code: int, err: str, name: str) -> None:
    """Exit 2 means one line on stderr naming the file; no traceback ever."""
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and all(name in line or "warning" in line for line in lines), err


# ----------------------------------------------------------------------------------------- readers

PIECES = ["{", "}", "[", "]", '"', "'", "\\", '\\"', ":", ",", " ", "\n", "\t", "nan", "NaN", "-inf", "Infinity",
          "None", "null", "true", "1e999", "-0.5", "123", "9" * 400, '{"loss": ', "{'loss': ", '"step": 3',
          "\x1b[2J", "\x00", "\ufeff", "Step,train/loss", "run - loss__MIN", "epoch 1 {'loss': 1.0}"]

log_text = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=60).map("".join),
    st.text(max_size=200),
    # real shapes, cut off at a random point or with a random piece spliced in
    st.tuples(st.lists(st.fixed_dictionaries({"loss": st.floats(), "step": st.integers(0, 10**30)}), min_size=1,
                       max_size=20),
              st.sampled_from(["rows", "state", "jsonl"]), st.floats(0, 1), st.sampled_from(PIECES)).map(
        lambda t: _shape(*t)),
)


def _shape(rows: list[dict[str, Any]], shape: str, cut: float, piece: str) -> str:
    if shape == "rows":
        text = json.dumps(rows)
    elif shape == "state":
        text = json.dumps({"global_step": 3, "log_history": rows}, indent=2)
    else:
        text = "\n".join(json.dumps(r) for r in rows)
    i = int(len(text) * cut)
    return text[:i] + piece + text[i:] if cut < 0.5 else text[:i]


def _check_log(result: LoadedLog) -> None:
    assert result.rows
    for row in result.rows:
        assert all(isinstance(k, str) and isinstance(v, (float, int, bool, str)) for k, v in row.items())


@settings(FUZZ, max_examples=250)
@given(text=log_text, name=st.sampled_from(["x.json", "x.jsonl", "x.csv", "x.log", "x"]))
def test_fuzz_reader_text(text: str, name: str) -> None:
    try:
        log = bounded(lambda: parse_rows_text(text, name))
    except LogReadError as exc:
        assert "\n" not in str(exc) and name in str(exc)
    else:
        _check_log(log)


@settings(FUZZ, max_examples=60)
@given(data=st.one_of(st.binary(max_size=300), log_text.map(lambda t: t.encode("utf-8", "replace"))),
       wrap=st.sampled_from(["plain", "gzip", "cut-gzip", "utf16"]),
       name=st.sampled_from(["run.json", "run.jsonl", "run.csv", "run.log"]))
def test_fuzz_reader_files_and_cli_exit_codes(tmp_path: Path, data: bytes, wrap: str, name: str) -> None:
    if wrap == "gzip":
        data = gzip.compress(data)
    elif wrap == "cut-gzip":
        data = gzip.compress(data)[: max(2, len(data) // 2)]
    elif wrap == "utf16":
        data = data.decode("utf-8", "replace").encode("utf-16")
    path = tmp_path / name
    path.write_bytes(data)
    try:
        log = bounded(lambda: load_rows(path))
    except LogReadError as exc:
        assert "\n" not in str(exc) and name in str(exc)
    else:
        _check_log(log)
    code, _, err = bounded(lambda: run_cli("analyze", str(path), "--format", "json"))
    assert code in (0, 2)
    assert_reason(code, err, name)


# -------------------------------------------------------------------------------------- alerts.yaml

YAML_PIECES = [
    "rules:\n", "  - name: r{n}\n", "    gauge: kl\n", "    gauge: nope\n", "    when: \"kl > 0.{n}\"\n",
    "    when: \"(((kl\"\n", "    finding: \"*\"\n", "    severity: stop\n", "    severity: info\n", "    for: {n}\n",
    "    for: -1\n", "    cooldown: 1h30m\n", "    cooldown: soon\n", "    trainers: grpo\n", "    inhibits: kl-warn\n",
    "    title: \"{{value:.3g}} at {{step}}\"\n", "    title: \"{{value:>99999999}}\"\n", "    text: \"{{nope}}\"\n",
    "    channels: [slack]\n", "    enabled: false\n", "channels:\n",
    "  slack: {{type: slack, webhook_url_env: HOOK}}\n", "  slack: {{type: slack, webhook_url_env: 'https://x/y'}}\n",
    "  mail: {{type: email, host: h, sender: a@b, recipients: [c@d], password_env: PW}}\n",
    "  mail: {{type: email, host: h, sender: a@b, recipients: [c@d], password_env: PW, starttls: true}}\n",
    "gauges:\n", "  kl: {{warn: 0.3}}\n", "  kl: {{warn: yes}}\n", "defaults: {{for: 2}}\n", "extends: none\n",
    "extends: default\n", "version: 1\n", "version: !!int abc\n", "x: &a [1, 2]\n", "y: [*a, *a, *a]\n",
    "z: *undefined\n", "  - &r {{name: base, gauge: kl, when: 'kl > 1'}}\n", "  - <<: *r\n    name: merged\n",
    "  - !!python/object/apply:os.system ['true']\n", "  - !custom x\n", "rules: &loop [*loop]\n",
    "- a\n", "\t- tab\n", ": :\n", "'unclosed\n", "[[[[[[[[[[[[[[[[[[[[\n", "? [a, b]\n: c\n", "\x1b[2J\n",
]


def _yaml(pieces: list[int], numbers: list[int]) -> str:
    return "".join(YAML_PIECES[i].format(n=numbers[k % len(numbers)]) for k, i in enumerate(pieces))


yaml_docs = st.builds(_yaml, st.lists(st.integers(0, len(YAML_PIECES) - 1), max_size=25),
                      st.lists(st.integers(0, 9), min_size=1, max_size=5))


def _billion_laughs(levels: int, width: int) -> str:
    text = "a0: &a0 [" + ",".join(["x"] * width) + "]\n"
    for i in range(1, levels):
        text += f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]\n"
    return text + f"rules:\n  - name: b\n    gauge: kl\n    when: 'kl > 1'\n    title: *a{levels - 1}\n"


@settings(FUZZ, max_examples=80)
@given(text=st.one_of(yaml_docs, st.builds(_billion_laughs, st.integers(2, 12), st.integers(2, 12)),
                      st.text(max_size=120)))
def test_fuzz_alert_config(tmp_path: Path, text: str) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        config = bounded(lambda: load_config(path))
    except ConfigError as exc:
        assert exc.problems
        for p in exc.problems:
            assert re.match(rf"{re.escape(str(path))}:\d+: \S", p) and "\n" not in p, p
    else:
        assert isinstance(config, AlertConfig) and config.rules is not None


@settings(FUZZ, max_examples=30)
@given(text=yaml_docs)
def test_fuzz_alerts_validate_cli(tmp_path: Path, text: str) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = bounded(lambda: run_cli("alerts", "validate", str(path)))
    assert code in (0, 2) and "Traceback" not in err
    if code == 0:
        assert "OK" in out
    else:
        assert err.strip() and all(line.startswith(f"{path}:") for line in err.strip().splitlines()), err


# ---------------------------------------------------------------------------------------- grammar

EXPR_TOKENS = ["kl", "reward", "`rewards/my fn/mean`", "rlcluster/kl/kl_ewma", "train/loss", "0.5", "1e400", "3",
               "(", ")", ">", "<", ">=", "==", "!=", "+", "-", "*", "/", ",", "and", "or", "not", "abs", "min", "max",
               "abs(", "max(", "`", "$", "nan"]

expressions = st.one_of(
    st.lists(st.sampled_from(EXPR_TOKENS), max_size=40).map(" ".join),
    st.builds(lambda k, op: op * k + "kl > 1" + (")" * k if op == "(" else ""), st.integers(0, 3000),
              st.sampled_from(["(", "not ", "- ", "abs("])),
    st.builds(lambda k, op: f" {op} ".join(["kl"] * k) + " > 0", st.integers(1, 500),
              st.sampled_from(["+", "*", "and", "or"])),
    st.text(max_size=60),
)
values = st.one_of(st.none(), st.floats(allow_nan=True), st.sampled_from([10**400, -(10**400), True, "x"]))


@settings(FUZZ, max_examples=300)
@given(text=expressions, lookup=st.dictionaries(st.sampled_from(["kl", "reward", "rewards/my fn/mean", "train/loss"]),
                                                values))
def test_fuzz_expression_grammar(text: str, lookup: dict[str, Any]) -> None:
    try:
        expr = bounded(lambda: parse(text))
    except ExprError as exc:
        assert isinstance(exc.pos, int) and 0 <= exc.pos <= max(len(text), 1000)
        return
    active, first = bounded(lambda: expr.evaluate(lookup.get))
    assert isinstance(active, bool)
    assert first is None or isinstance(first, (int, float, bool, str))


# -------------------------------------------------------------------------------------- templates

TEMPLATE_PIECES = ["{value", "{step", "{trainer", "{message", "{rule", "{0", "{value.__class__", "{value[0]",
                   ":", ">", "<", "^", "300000000", "99999", ".3g", ".500f", ",", "!r", "!s", "}", "{", "}}", "{{",
                   "text ", "\x1b[2J", "{value:{step}}", "{value:>{step}}"]
templates = st.lists(st.sampled_from(TEMPLATE_PIECES), max_size=20).map("".join)
fields = st.fixed_dictionaries({"value": st.one_of(st.none(), st.floats(), st.integers(-10**30, 10**30)),
                                "step": st.integers(0, 10**9), "message": st.text(max_size=50),
                                "rule": st.text(max_size=10), "trainer": st.sampled_from(["grpo", ""])})


@settings(FUZZ, max_examples=300)
@given(template=templates, values_=fields)
def test_fuzz_template_rendering(template: str, values_: dict[str, Any]) -> None:
    out = bounded(lambda: render(template, values_))
    assert isinstance(out, str) and len(out) <= MAX_RENDERED


@settings(FUZZ, max_examples=40)
@given(template=templates)
def test_fuzz_template_validation(tmp_path: Path, template: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("rules:\n  - name: t\n    gauge: kl\n    when: 'kl > 1'\n    title: " + json.dumps(template) + "\n")
    try:
        config = bounded(lambda: load_config(path))
    except ConfigError as exc:
        assert all(p.startswith(f"{path}:") for p in exc.problems), exc.problems
    else:  # what validation accepts renders within bounds
        title = config.rule("t").title
        assert len(render(title, {"value": math.pi, "step": 1})) <= MAX_RENDERED


def _spin() -> None:
    while True:
        pass


def test_limits_catch_slow_blocked_and_hungry_cases() -> None:
    """The limits themselves: a case burning CPU, a case that blocks and a memory-hungry case fail instead of
    being waited out; time spent waiting (a loaded machine) is not counted against a case."""
    with pytest.raises(CaseTooSlow, match="CPU"):
        measured(_spin, seconds=0.2)
    with pytest.raises(CaseTooSlow, match="blocked"):
        measured(lambda: time.sleep(5), wall=0.3)
    _, cpu, _ = measured(lambda: time.sleep(0.3), seconds=0.1)  # asleep: no CPU, so within a 0.1 s limit
    assert cpu < 0.1
    with pytest.raises(AssertionError, match="peaked"):
        bounded(lambda: len(bytearray(MEGABYTES * 1_100_000)))


# ------------------------------------------------------------------------- big inputs (1-5 MB)

#: Python allocations per input byte a big hostile input may cost (the reader keeps the text, a masked copy
#: and the rewritten text: ~3x; the old token rewrite cost 60-120x).
BYTES_PER_BYTE = 6
BIG = 3_000_000


def _escaped_quotes_line() -> str:
    """One string of escaped quotes, closed by a line break and a bracket: the rewrite runs over all of it."""
    return '[{"a": "' + '\\"' * (BIG // 2) + '\n]'


def _plain_string_line() -> str:
    return '[{"a": "' + "a" * BIG + '\n]'


def _python_quotes_log() -> str:
    return "{'a': '" + "\\'" * (BIG // 2) + "'}\n{'loss': 0.5, 'step': 1}\n"


def _no_newline_document() -> str:
    """No line break at all and not JSON: once probed as a 'line' and parsed a second time."""
    return '{"log_history": [{"loss": None, "a": "' + "a" * BIG + '"}]} x'


def _huge_integers() -> str:
    return "\n".join(json.dumps({"step": i, "loss": 0.5}).replace("0.5", "1" + "0" * 5000) for i in range(BIG // 5020))


BIG_READER_CASES = {
    "escaped-quotes-line": ("x.json", _escaped_quotes_line, None),
    "plain-string-line": ("x.json", _plain_string_line, None),
    "python-quotes-log": ("x.log", _python_quotes_log, 1),
    "no-newline-document": ("x.json", _no_newline_document, None),
    "huge-integers-jsonl": ("x.jsonl", _huge_integers, BIG // 5020),
}


def result_or_error(fn: Callable[[], T]) -> T | Exception:
    """The project's own errors as values, so one measured run covers both outcomes."""
    try:
        return fn()
    except (LogReadError, ConfigError) as exc:
        return exc


@pytest.mark.parametrize("case", list(BIG_READER_CASES))
def test_big_hostile_log_costs_memory_linear_in_its_size(case: str) -> None:
    name, make, rows = BIG_READER_CASES[case]
    text = make()
    assert 1_000_000 <= len(text) <= 5_000_000
    result, cpu, peak = measured(lambda: result_or_error(lambda: parse_rows_text(text, name)))
    if rows is None:
        assert isinstance(result, LogReadError) and name in str(result), result
    else:
        assert isinstance(result, LoadedLog) and len(result.rows) == rows, result
    assert peak <= BYTES_PER_BYTE * len(text), f"{peak / len(text):.1f} bytes per input byte"
    assert cpu < SECONDS, cpu


def test_gzip_bomb_costs_a_bounded_multiple_of_its_size(tmp_path: Path) -> None:
    """100 MB of zeros in a ~100 KB gzip: refused after at most 100x its size, not read to the 512 MB cap."""
    path = tmp_path / "log.jsonl.gz"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as fh:
        for _ in range(100):
            fh.write(z.compress(b"0" * 1_000_000))
        fh.write(z.flush())
    size = path.stat().st_size
    assert 50_000 < size < 200_000
    error, cpu, peak = measured(lambda: result_or_error(lambda: load_rows(path)))
    assert isinstance(error, LogReadError) and "gzip bomb" in str(error) and "100x" in str(error), error
    assert peak < 2.5 * 32 * 1024**2, peak  # the 32 MB floor, read once (the 512 MB input limit is not reached)
    assert cpu < SECONDS, cpu


def test_big_yaml_configs_are_refused_fast(tmp_path: Path) -> None:
    """A 1 MB file, a list of 30,000 values under the size cap, 800 broken rules and a 60,000-character
    base-60 integer: each a short list of problems within the time limit (they took 10-30 s)."""
    rules = "rules:\n" + "".join(f"  - name: r{i}\n    gauge: kl\n    when: \"qq{i} > 1 and kl{i} > 2\"\n"
                                  f"    title: \"{{nope{i}}}\"\n" for i in range(800))
    cases = {"big.yaml": ("x: [" + "1, " * 500_000 + "1]\n", "characters is refused"),
             "list.yaml": ("rules: []\nx:\n" + "- 1\n" * 30_000, "more than 10,000 values"),
             "rules.yaml": (rules, "more problems (not shown)"),
             "sexagesimal.yaml": ("rules: []\nx: 1" + ":0" * 30_000 + "\n", "characters long")}
    for name, (text, needle) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        error, cpu, peak = measured(lambda path=path: result_or_error(lambda: load_config(path)))
        assert isinstance(error, ConfigError), (name, error)
        problems = error.problems
        assert any(needle in p for p in problems), (name, problems[:3], problems[-1:])
        assert len(problems) <= 51 and all("billion laughs" not in p for p in problems), name
        assert cpu < SECONDS and peak < MEGABYTES * 1e6, (name, cpu, peak)
