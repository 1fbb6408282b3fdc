"""Hostile input, one named test per class of defect found by a hostile review (issue #12).

Each test drives the real entry point (the CLI in a fresh process, the reader, the config loader,
the alert engine) with the input that used to misbehave: a quadratic line, a truncated checkpoint,
a FIFO, a YAML alias bomb, a Python tag, duplicate keys, deep expressions, a 300-MB template, a
number that does not fit a float, a secret pasted into the wrong field, ESC sequences in metric
names, an unreadable directory, alerts in the rows read before the trainer is known.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wandb_rlcluster.alerts import ConfigError, load_config
from wandb_rlcluster.alerts.channels import AlertMessage, AsyncDispatcher, EmailChannel
from wandb_rlcluster.alerts.config import MAX_RENDERED
from wandb_rlcluster.alerts.engine import render
from wandb_rlcluster.alerts.expr import ExprError, parse
from wandb_rlcluster.alerts.notify import build_channels
from wandb_rlcluster.analyze import analyze_stream, render_text
from wandb_rlcluster.core import InstrumentCluster
from wandb_rlcluster.core.readers import LogReadError, load_rows, parse_rows_text
from wandb_rlcluster.core.text import clean_text

SECRET_URL = "https://hooks.slack.com/services/T0HOSTILE/B0HOSTILE/sEcReTtOkEn1234567890"


def cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


def assert_bad_input(p: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, one line on stderr, no traceback; returns that line."""
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "Error:" not in p.stderr.split(":", 1)[0], p.stderr
    for needle in needles:
        assert needle in p.stderr, (needle, p.stderr)
    return p.stderr


def write_yaml(tmp_path: Path, text: str, name: str = "alerts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------------- readers


def test_reader_escaped_quotes_line_is_linear() -> None:
    """A line of escaped quotes made the string-aware rewrite rescan from every quote: quadratic."""
    for n in (20_000, 200_000):
        t0 = time.perf_counter()
        with pytest.raises(LogReadError, match="cut off"):
            parse_rows_text('[{"a": "' + '\\"' * n)
        with pytest.raises(LogReadError):
            parse_rows_text("{'a': '" + "\\'" * n + "\n{'b': '" + "\\'" * n)
        assert time.perf_counter() - t0 < 1.5, n


def test_truncated_checkpoint_fails_fast_naming_the_cut(tmp_path: Path) -> None:
    rows = [{"loss": 1.0 / (i + 1), "grad_norm": 0.5, "learning_rate": 1e-5, "epoch": i / 100, "step": i}
            for i in range(20_000)]
    text = json.dumps({"global_step": 20_000, "log_history": rows}, indent=2)
    path = tmp_path / "trainer_state.json"
    path.write_text(text[: len(text) // 2])
    t0 = time.perf_counter()
    with pytest.raises(LogReadError) as exc:
        load_rows(path)
    elapsed = time.perf_counter() - t0
    msg = str(exc.value)
    assert "trainer_state.json" in msg and "cut off" in msg and "line" in msg and "\n" not in msg
    assert elapsed < 1.0, elapsed  # one json pass, no token rewrites, no line-by-line attempts


def test_line_too_long_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text("x" * 2_000_000 + "\n")
    with pytest.raises(LogReadError, match="line 1 is too long"):
        load_rows(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_and_devices_are_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    assert_bad_input(cli("analyze", str(fifo), timeout=20), "log.jsonl", "named pipe (FIFO)")
    p = cli("alerts", "validate", str(fifo), timeout=20)
    assert p.returncode == 2 and "named pipe" in p.stderr
    if os.path.exists("/dev/zero"):
        assert_bad_input(cli("analyze", "/dev/zero", timeout=20), "/dev/zero", "character device")


def test_gzip_bomb_and_size_cap_are_bounded(tmp_path: Path) -> None:
    bomb = tmp_path / "log.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"0" * 20_000_000))
    env = {"RLCLUSTER_MAX_INPUT_BYTES": "1000000"}
    assert_bad_input(cli("analyze", str(bomb), env=env), "decompresses to over the 1.0 MB input limit")
    big = tmp_path / "big.jsonl"
    big.write_bytes(b'{"loss": 1}\n' * 100_000)
    assert_bad_input(cli("analyze", str(big), env=env), "over the 1.0 MB input limit", "RLCLUSTER_MAX_INPUT_BYTES")


def test_memory_error_has_a_reason(tmp_path: Path) -> None:
    """A MemoryError used to print 'cannot read X: ' and nothing after it."""
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"loss": 1.0}] * 10))
    code = ("import sys, json\nimport wandb_rlcluster.core.readers as r\n"
            "def boom(*a, **k):\n    raise MemoryError\n"
            "r.json.loads = boom\nfrom wandb_rlcluster.cli import main\nsys.exit(main(['analyze', sys.argv[1]]))\n")
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert_bad_input(p, "rows.json", "fit in memory")


# ------------------------------------------------------------------------------------------- YAML


def test_yaml_alias_bomb_is_a_config_error(tmp_path: Path) -> None:
    text = "a: &a [" + ",".join(["lol"] * 9) + "]\n"
    prev = "a"
    for i in range(1, 9):
        text += f"b{i}: &b{i} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = f"b{i}"
    text += f"rules:\n  - name: bomb\n    gauge: kl\n    when: 'kl > 1'\n    severity: *{prev}\n"
    assert len(text) < 1500
    path = write_yaml(tmp_path, text)
    t0 = time.perf_counter()
    p = cli("alerts", "validate", str(path), timeout=60)
    assert p.returncode == 2 and "billion laughs" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert f"{path}:" in p.stderr
    assert time.perf_counter() - t0 < 30
    recursive = write_yaml(tmp_path, "rules: &r\n  - *r\n", "rec.yaml")
    with pytest.raises(ConfigError, match="recursive"):
        load_config(recursive)


def test_yaml_python_tag_is_a_config_error(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "rules:\n  - name: !!python/object/apply:os.system ['echo pwned']\n"
                                "    gauge: kl\n    when: 'kl > 1'\n")
    p = cli("alerts", "validate", str(path))
    assert_bad_input(p, f"{path}:2:", "!!python/object/apply:os.system", "not allowed")
    for text in ("x: !custom 1\n", "version: !!int abc\n", "version: !!binary '%%%'\n"):
        with pytest.raises(ConfigError) as exc:
            load_config(write_yaml(tmp_path, text, "t.yaml"))
        assert all(":1:" in p for p in exc.value.problems), exc.value.problems


def test_yaml_duplicate_keys_are_errors_with_lines(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "rules:\n  - name: kl-stop\n    severity: stop\n    severity: info\n"
                                "rules:\n  - name: other\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    problems = "\n".join(exc.value.problems)
    assert f"{path}:4: duplicate key 'severity' (first at line 3)" in problems
    assert f"{path}:5: duplicate key 'rules' (first at line 1)" in problems


def test_yaml_merge_keys_apply_with_explicit_override(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "extends: none\nrules:\n  - &base {name: a, gauge: kl, when: 'kl > 1', for: 4}\n"
                                "  - <<: *base\n    name: b\n    for: 2\n")
    config = load_config(path)
    assert [(r.name, r.for_) for r in config.rules] == [("a", 4), ("b", 2)]


# ----------------------------------------------------------------------------- expressions, templates


@pytest.mark.parametrize(("when", "needle"), [
    ("(" * 150 + "kl > 1" + ")" * 150, "more than 200 tokens"),
    ("(" * 40 + "kl > 1" + ")" * 40, "nested more than"),
    ("not " * 2000 + "kl > 1", "characters long"),
    ("not " * 40 + "kl > 1", "nested more than"),
    ("- " * 40 + "kl > 1", "nested more than"),
    (" + ".join(["kl"] * 70) + " > 1", "operations deep"),
    ("max(kl) > 0.1", "two or more values"),
    ("min(kl) > 0.1", "two or more values"),
])
def test_expression_limits_are_config_errors(tmp_path: Path, when: str, needle: str) -> None:
    path = write_yaml(tmp_path, f"rules:\n  - name: deep\n    gauge: kl\n    when: \"{when}\"\n")
    p = cli("alerts", "validate", str(path))
    assert_bad_input(p, f"{path}:4: rule 'deep': malformed 'when'", needle)
    with pytest.raises(ExprError):
        parse(when)
    assert parse("max(kl, reward) > 0.1").names == ("kl", "reward")


def test_template_format_spec_limits(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "rules:\n  - name: wide\n    gauge: kl\n    when: 'kl > 0.1'\n"
                                "    title: '{value:>300000000}'\n    text: '{value:.500f}'\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    problems = "\n".join(exc.value.problems)
    assert f"{path}:5:" in problems and "width over" in problems
    assert f"{path}:6:" in problems and "precision over" in problems
    # rules built in Python skip validation: rendering itself stays bounded
    t0 = time.perf_counter()
    out = render("{value:>300000000} {message}" * 3, {"value": 1.5, "message": "m" * 10_000})
    assert len(out) <= MAX_RENDERED and time.perf_counter() - t0 < 0.5
    assert render("{value:.3g} at {step}", {"value": 0.123456, "step": 7}) == "0.123 at 7"


def test_trainer_template_field_renders_the_family() -> None:
    config = load_config()
    config.rules[0].title = "{trainer}: {rule} at {step}"
    from wandb_rlcluster.alerts import AlertEngine

    rule = config.rules[0]
    engine = AlertEngine(type(config)(rules=[rule]), clock=None)
    cluster = InstrumentCluster(trainer="grpo")
    events = []
    for step in range(1, 8):
        row = {"step": step, "kl": 5.0, "reward": 0.1, "reward_std": 0.2}
        fired = cluster.update(row)
        events += engine.evaluate(step, row, cluster, fired, cluster.last_updated)
    assert events and events[0].title.startswith("grpo: "), [e.title for e in events]


def test_inhibits_bare_string_is_one_rule(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "rules:\n  - name: mine\n    gauge: kl\n    when: 'kl > 2'\n    inhibits: kl-warn\n")
    config = load_config(path)
    assert config.rule("mine").inhibits == ("kl-warn",)


# ----------------------------------------------------------------------------------------- numbers


def test_number_too_large_for_a_float_is_non_finite(tmp_path: Path) -> None:
    rows = [{"step": i, "loss": 1.0 / i, "grad_norm": 10**400 if i == 3 else 0.5} for i in range(1, 30)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    p = cli("analyze", str(path), "--format", "json", "--alerts")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    out = json.loads(p.stdout)
    assert out["rows"] == 29
    # the value is read as +inf: the gradient gauge flags a non-finite norm instead of the CLI crashing
    assert ("gradients", "grad-nonfinite", 3) in {(f["gauge"], f["rule"], f["step"]) for f in out["findings"]}


def test_one_bad_value_keeps_the_rest_of_the_live_row() -> None:
    class Weird:
        def __float__(self) -> float:
            raise RuntimeError("no float for you")

    cluster = InstrumentCluster(trainer="grpo", detect_rows=1)
    cluster.update({"step": 1, "loss": 0.5, "kl": -(10**400), "reward": Weird(), "grad_norm": 1.25,
                    "entropy": object()})
    row = cluster.last_row
    assert row is not None and row.values["loss"] == 0.5 and row.values["grad_norm"] == 1.25
    assert row.values["kl"] == float("-inf") and "reward" not in row.values and "entropy" not in row.values
    assert {"loss", "gradients"} <= cluster.last_updated


# ----------------------------------------------------------------------------------------- secrets


def test_smtp_login_without_tls_is_a_config_error(tmp_path: Path) -> None:
    base = ("channels:\n  mail:\n    type: email\n    host: smtp.example.com\n    sender: a@b.c\n"
            "    recipients: [d@e.f]\n    username_env: SMTP_USER\n    password_env: SMTP_PASSWORD\n")
    p = cli("alerts", "validate", str(write_yaml(tmp_path, base)))
    assert_bad_input(p, ":2: channel 'mail': SMTP login without TLS", "allow_plaintext_auth")
    for extra in ("    starttls: true\n    port: 587\n", "    ssl: true\n    port: 465\n",
                  "    allow_plaintext_auth: true\n"):
        assert load_config(write_yaml(tmp_path, base + extra)).channels["mail"]
    with pytest.raises(ConfigError, match="true or false"):
        load_config(write_yaml(tmp_path, base + "    starttls: 'no'\n"))


def test_env_field_holding_a_url_or_token_is_an_error_that_never_echoes_it(tmp_path: Path) -> None:
    for value in (SECRET_URL, "xoxb-1234567890-abcdefghijkl", "sEcReTtOkEn1234567890abcdef"):
        path = write_yaml(tmp_path, f"channels:\n  slack: {{type: slack, webhook_url_env: '{value}'}}\n")
        for args in (("alerts", "validate", str(path)), ("alerts", "test", str(path)),
                     ("analyze", str(path), "--alerts", str(path))):
            p = cli(*args)
            assert p.returncode == 2 and "webhook_url_env' must be the NAME" in p.stderr, p.stderr
            assert value not in p.stdout + p.stderr and "sEcReT" not in p.stdout + p.stderr
    assert load_config(write_yaml(tmp_path, "channels:\n  s: {type: slack, webhook_url_env: MY_HOOK_2}\n"))
    # an AlertConfig built in Python skips validation: building its channels says the same, without the value
    config = load_config(write_yaml(tmp_path, "channels:\n  s: {type: slack, webhook_url_env: MY_HOOK}\n"))
    config.channels["s"].options["webhook_url_env"] = SECRET_URL
    channels, problems = build_channels(config, environ={SECRET_URL: "x"})
    assert not channels and problems and all("sEcReT" not in p for p in problems)


def _echoing_smtp_server(stop: threading.Event) -> int:
    """An SMTP server that refuses AUTH and quotes the client's AUTH line back in its error, as some do."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                f = conn.makefile("rwb")
                f.write(b"220 echo ESMTP\r\n")
                f.flush()
                for line in f:
                    cmd = line.strip()
                    if cmd.upper().startswith((b"EHLO", b"HELO")):
                        f.write(b"250-echo\r\n250 AUTH PLAIN\r\n")
                    elif cmd.upper().startswith(b"AUTH"):
                        f.write(b"535 5.7.8 rejected: " + cmd + b"\r\n")
                    elif cmd.upper().startswith(b"QUIT"):
                        f.write(b"221 bye\r\n")
                        f.flush()
                        break
                    else:
                        f.write(b"250 ok\r\n")
                    f.flush()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def test_smtp_error_quoting_the_credentials_is_redacted() -> None:
    stop = threading.Event()
    port = _echoing_smtp_server(stop)
    password = "hunter2-Pa55word-for-smtp"
    results: list[str] = []
    try:
        ch = EmailChannel("127.0.0.1", port, "a@b.c", ["d@e.f"], username="alerts", password=password, timeout=5,
                          allow_plaintext_auth=True)
        d = AsyncDispatcher([ch], retries=0, on_result=lambda name, msg, ok, err: results.append(err))
        d.submit(AlertMessage(title="t", text="x", severity="stop", rule="r", gauge="kl", step=1))
        assert d.flush(10)
        d.close(1)
    finally:
        stop.set()
    [err] = results
    import base64

    plain = base64.b64encode(f"\0alerts\0{password}".encode()).decode()
    assert "535" in err and password not in err and plain not in err and plain.rstrip("=") not in err, err


# ---------------------------------------------------------------------------------------- terminal


ESC_NAME = "x\x1b[2J\x1b]0;pwned\x07ALL GAUGES OK\nfake line"


def test_control_characters_in_metric_names_are_escaped(tmp_path: Path) -> None:
    rows = [{"step": i, "loss": 0.1, "reward": 0.5, "reward_std": 0.3, "kl": 0.01,
             f"rewards/{ESC_NAME}/mean": 0.5, f"rewards/{ESC_NAME}/std": 0.0} for i in range(1, 40)]
    path = tmp_path / "esc\x1b[31m.json"
    path.write_text(json.dumps(rows))
    p = cli("analyze", str(path), "--alerts")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout and "\nfake line" not in p.stdout
    assert "\\x1b[2J" in p.stdout and "reward-component-dead" in p.stdout  # shown, escaped, not dropped
    analysis = analyze_stream(rows, "grpo")
    assert "\x1b" not in render_text(analysis, color=False)
    assert "\x1b[" in render_text(analysis, color=True)  # our own colours still work
    assert clean_text("a\u202eb\tc") == "a\\u202eb\\tc"
    p = cli("analyze", str(tmp_path / "nope\x1b]0;x\x07.json"))
    assert p.returncode == 2 and "\x1b" not in p.stderr and "\\x1b" in p.stderr


# ---------------------------------------------------------------------------------- CLI exit codes


def test_dashboard_on_unreadable_directory_is_one_line(tmp_path: Path) -> None:
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a directory unreadable")
        prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]
    locked = tmp_path / "locked"
    (locked / "sub").mkdir(parents=True)
    locked.chmod(0)
    try:
        rl = [*prefix, sys.executable, "-m", "wandb_rlcluster"]
        for args in (["dashboard", str(locked), "--out", str(tmp_path / "d.html")], ["analyze", str(locked)],
                     ["analyze", str(locked / "sub" / "trainer_state.json")]):
            p = subprocess.run([*rl, *args], capture_output=True, text=True, timeout=60)
            assert_bad_input(p, "locked")
    finally:
        locked.chmod(0o755)


def test_report_title_too_long_is_one_line(tmp_path: Path) -> None:
    p = cli("report", "--entity", "e", "--project", "p", "--out", str(tmp_path / "r.json"), "--title", "x" * 129)
    assert_bad_input(p, "--title is 129 characters long")
    assert len(p.stderr.strip().splitlines()) == 1


def test_unexpected_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"loss": 1.0}] * 5))
    code = ("import sys\nimport wandb_rlcluster.analyze as a\n"
            "def boom(*args, **kw):\n    raise RuntimeError('surprise\\nsecond line')\n"
            "a.analyze_stream = boom\nfrom wandb_rlcluster.cli import main\nsys.exit(main(['analyze', sys.argv[1]]))\n")
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert_bad_input(p, "unexpected RuntimeError: surprise", "RLCLUSTER_DEBUG")
    assert len(p.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------------- offline alerts


def test_analyze_alerts_see_rows_before_trainer_detection(tmp_path: Path) -> None:
    """KL is over the stop threshold in the first rows only: auto-detection must not hide them."""
    rows = [{"step": i, "loss": 0.1, "reward": 0.5, "reward_std": 0.3, "completions/mean_length": 40.0,
             "kl": 1.5 if i <= 4 else 0.05} for i in range(1, 30)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    auto = cli("analyze", str(path), "--alerts", "--fail-on", "stop")
    forced = cli("analyze", str(path), "--alerts", "--fail-on", "stop", "--trainer", "grpo")
    assert forced.returncode == 1 and "kl-stop" in forced.stdout
    assert auto.returncode == 1 and "kl-stop" in auto.stdout, auto.stdout[-1500:]
