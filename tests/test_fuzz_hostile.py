"""Fuzzing the surfaces people and crashing processes write to: log files, alerts.yaml, the
expression grammar, the alert templates, and the CLI that reads them.

Every case runs under a time limit (2 s, enforced with SIGALRM) and a memory limit (200 MB of
Python allocations, measured with tracemalloc), and must end in a result or in the project's own
one-line error: never another exception, never a traceback, exit 2 with a reason for every
malformed input. Deterministic (``derandomize``) so CI is stable; sized to about a minute in all.
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
from wandb_rlcluster.core.readers import LoadedLog, LogReadError, load_rows, parse_rows_text

SECONDS = 2.0
MEGABYTES = 200
T = TypeVar("T")

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM for the time limit")


class CaseTooSlow(Exception):
    pass


def bounded(fn: Callable[[], T]) -> T:
    """Run one fuzz case under the time and memory limits; the case's own exceptions pass through."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTooSlow(f"over {SECONDS} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS * 1.5)  # the hard stop; the measured time is checked below
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        result = fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < SECONDS, f"case took {elapsed:.2f} s"
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


def test_limits_catch_slow_and_hungry_cases() -> None:
    """The limits themselves: a slow case and a memory-hungry case fail instead of being waited out."""
    with pytest.raises((CaseTooSlow, AssertionError)):
        bounded(lambda: time.sleep(SECONDS + 1))
    with pytest.raises(AssertionError, match="peaked"):
        bounded(lambda: len(bytearray(MEGABYTES * 1_100_000)))
