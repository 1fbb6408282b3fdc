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
from wandb_rlcluster.core.text import clean_text
from wandb_rlcluster.readers import LogReadError, load_rows, parse_rows_text

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
    code = ("import sys, json\nimport wandb_rlcluster.readers.values as r\n"
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
    rule = config.rule("kl-warn")
    rule.title = "{trainer}: {rule} at {step}"
    from wandb_rlcluster.alerts import AlertEngine

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


@pytest.mark.slow
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


def unprivileged() -> list[str]:
    """A command prefix under which a chmod 0 file is unreadable: root reads anything, so drop the capabilities
    that let it (skips the test where setpriv is missing)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


def test_dashboard_on_unreadable_directory_is_one_line(tmp_path: Path) -> None:
    prefix = unprivileged()
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


# ------------------------------------------------------------------- second review (after the merge)


def test_a_document_without_line_breaks_is_rewritten_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """No newline in the first MiB: the row probe took the whole document as one 'line' and ran json.loads and the
    token rewrite over it a second time."""
    from wandb_rlcluster.readers import lines, values

    calls: list[int] = []
    real = values._fix_tokens

    def counting(text: str, *, python: bool) -> tuple[str, int]:
        calls.append(len(text))
        return real(text, python=python)

    for reader in (values, lines):  # the document's rewrite, and the line-by-line reader's
        monkeypatch.setattr(reader, "_fix_tokens", counting)
    text = '{"log_history": [{"loss": None, "a": "' + "a" * 2_000_000 + '\n"}]}'
    with pytest.raises(LogReadError, match="not valid JSON"):
        parse_rows_text(text, "state.json")
    assert len([n for n in calls if n > 1_000_000]) == 1, calls


def test_input_limit_and_gzip_ratio_defaults() -> None:
    from wandb_rlcluster.readers import GZIP_RATIO_FLOOR, MAX_GZIP_RATIO, input_limit

    assert "RLCLUSTER_MAX_INPUT_BYTES" in os.environ or input_limit() == 512 * 1024**2
    assert MAX_GZIP_RATIO == 100 and GZIP_RATIO_FLOOR == 32 * 1024**2


def test_integers_over_4300_digits_are_infinite_in_every_format(tmp_path: Path) -> None:
    """json raised ValueError (not JSONDecodeError) for them: 'unexpected ValueError ... a bug', or a dropped row."""
    from wandb_rlcluster.cli import main

    huge = "1" + "0" * 5000
    files = {"rows.json": f'[{{"step": 1, "loss": 0.5}}, {{"step": 2, "loss": {huge}}}]',
             "rows.jsonl": f'{{"step": 1, "loss": 0.5}}\n{{"step": 2, "loss": -{huge}}}\n',
             "rows.log": f"{{'step': 1, 'loss': 0.5}}\n{{'step': 2, 'loss': {huge}}}\n",
             "trainer_state.json": f'{{"global_step": {huge}, "log_history": [{{"step": 1, "loss": 0.5}}]}}'}
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        log = load_rows(path)
        losses = [r["loss"] for r in log.rows]
        if name == "trainer_state.json":
            assert losses == [0.5] and "global_step" not in log.meta, log.meta  # a run-level count that says nothing
        else:
            assert losses[0] == 0.5 and abs(losses[1]) == float("inf"), (name, losses)
        code = main(["analyze", str(path), "--format", "json"])
        assert code in (0, 2), (name, code)


SECRET_PW = "correcthorsebatterystaple"


def _secret_config():
    from wandb_rlcluster.alerts.config import AlertConfig, ChannelConfig

    config = load_config(write_yaml_text("channels:\n  ok: {type: slack, webhook_url_env: MY_HOOK}\n"))
    config.channels["pasted"] = ChannelConfig(name="pasted", type="slack", options={"webhook_url_env": SECRET_URL})
    config.channels["pw"] = ChannelConfig(name="pw", type="email", options={
        "host": "smtp.example.com", "sender": "a@b.c", "recipients": ["d@e.f"], "password": SECRET_PW,
        "timeout": "sEcReTtImEoUt", "starttls": True})
    assert isinstance(config, AlertConfig)
    return config


def write_yaml_text(text: str) -> Path:
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".yaml")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return Path(name)


def test_alert_config_secrets_never_reach_checkpoints_repr_or_errors() -> None:
    """A URL pasted into webhook_url_env, an option named password, a secret in timeout: to_dict() (what every
    checkpoint stores) and repr() held them, and the callback took such a config without a word."""
    from wandb_rlcluster import RLClusterCallback

    config = _secret_config()
    stored = json.dumps(config.to_dict())
    for text in (stored, repr(config), repr(config.channels["pasted"]), str(config.channels)):
        assert "sEcReT" not in text and SECRET_PW not in text and "hooks.slack.com" not in text, text
    assert json.loads(stored)["channels"]["ok"]["options"] == {"webhook_url_env": "MY_HOOK"}
    with pytest.raises(ConfigError) as exc:
        RLClusterCallback(alerts=config)
    problems = "\n".join(exc.value.problems)
    assert "channel 'pasted': 'webhook_url_env' must be the NAME" in problems
    assert "channel 'pw': never put secrets" in problems and "channel 'pw': 'timeout' must be a number" in problems
    assert "sEcReT" not in problems and SECRET_PW not in problems
    # a valid config changed after the callback was built: its checkpoint state still holds no secret
    good = load_config(write_yaml_text("channels:\n  ok: {type: slack, webhook_url_env: MY_HOOK}\n"))
    cb = RLClusterCallback(alerts=good, grad_every=0, attention_every=0, lora_every=0, sample_every=0)
    cb.alert_config.channels["ok"].options["webhook_url_env"] = SECRET_URL
    assert "sEcReT" not in json.dumps(cb.state()) and "sEcReT" not in repr(cb.alert_config)


def test_stored_and_python_rules_go_through_the_file_validators() -> None:
    """from_dict accepted min_severity 'bogus' (a KeyError when evaluated), for -5, cooldown NaN, a bare string
    split into characters, and any template; an AlertConfig object was not checked at all."""
    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.alerts.config import AlertConfig, validate_config
    from wandb_rlcluster.alerts.expr import parse as parse_expr

    base = load_config(write_yaml_text("extends: none\nchannels:\n  s: {type: slack, webhook_url_env: MY_HOOK}\n"
                                       "rules:\n  - {name: a, gauge: kl, when: 'kl > 1'}\n"
                                       "  - {name: b, gauge: kl, when: 'kl > 2'}\n"))
    data = base.to_dict()
    good = AlertConfig.from_dict(data)
    assert [r.name for r in good.rules] == ["a", "b"]
    data["rules"][0] |= {"min_severity": "bogus", "for": -5, "cooldown": float("nan"), "channels": "s",
                         "title": "{value:>300000000}", "inhibits": "b"}
    data["rules"][1] |= {"trainers": ["grpoo"], "keep_firing_for": "x", "finding": "(", "when": None}
    with pytest.raises(ConfigError) as exc:
        AlertConfig.from_dict(data)
    problems = "\n".join(exc.value.problems)
    for needle in ("'min_severity' must be one of info, warn, stop", "'for' must be >= 1", "'cooldown' nan",
                   "width over", "unknown trainer 'grpoo'", "'keep_firing_for' must be an integer",
                   "'finding' must be a regular expression"):
        assert needle in problems, (needle, problems)
    assert all(p.startswith("checkpoint: ") for p in exc.value.problems), exc.value.problems
    data["rules"][0] |= {"min_severity": "warn", "for": 1, "cooldown": 60, "title": "{value:.3g}"}
    data["rules"][1] = good.to_dict()["rules"][1]
    rebuilt = AlertConfig.from_dict(data)
    assert rebuilt.rule("a").channels == ("s",) and rebuilt.rule("a").inhibits == ("b",)  # one item, not letters
    # the same checks for an object built in Python, before training
    base.rules[0].when = parse_expr("kl > 1")
    base.rules[0].for_ = 0
    base.rules[1].severity = "critical"
    with pytest.raises(ConfigError, match="'for' must be >= 1") as exc:
        RLClusterCallback(alerts=base)
    assert "'severity' must be one of info, warn, stop" in "\n".join(exc.value.problems)
    base.rules[0].for_, base.rules[1].severity = 2, "stop"
    checked = validate_config(base)
    assert [(r.name, r.for_, r.severity) for r in checked.rules] == [("a", 2, "warn"), ("b", 1, "stop")]


def test_env_names_refuse_pasted_passwords_and_accept_upper_case_names(tmp_path: Path) -> None:
    from wandb_rlcluster.alerts.config import env_name_problem

    for secret in (SECRET_PW, "hunter2", "sEcReTtOkEn1234567890abcdef", "A1B2C3D4E5F6G7H8I9J0K1L2M3"):
        assert env_name_problem(secret), secret
    for name in ("SLACKWEBHOOK2024", "MY_HOOK_2", "RLCLUSTER_SLACK_WEBHOOK", "smtp_password", "_X"):
        assert env_name_problem(name) is None, name
    path = write_yaml(tmp_path, f"channels:\n  s: {{type: slack, webhook_url_env: {SECRET_PW}}}\n")
    p = cli("alerts", "validate", str(path))
    assert p.returncode == 2 and "must be the NAME" in p.stderr and SECRET_PW not in p.stdout + p.stderr


def test_channel_settings_are_validated_without_echoing_them(tmp_path: Path) -> None:
    """timeout: "SECRET..." passed validation, then was echoed by a float conversion error."""
    path = write_yaml(tmp_path, "channels:\n  s:\n    type: slack\n    webhook_url_env: MY_HOOK\n"
                                "    timeout: sEcReTvAlUe\n    username: [x]\n")
    p = cli("alerts", "validate", str(path))
    assert_bad_input(p, f"{path}:2: channel 's': 'timeout' must be a number of seconds", "'username' must be")
    assert "sEcReT" not in p.stderr


def test_yaml_duplicate_keys_are_compared_as_values() -> None:
    from wandb_rlcluster.safe_yaml import YamlProblem, load_checked

    for text in ("yes: 1\ntrue: 2\n", "~: 1\nnull: 2\n", "1: a\n1.0: b\n", "0x10: a\n16: b\n", "1: a\ntrue: b\n"):
        with pytest.raises(YamlProblem, match="duplicate key"):
            load_checked(text)
    assert load_checked("'1': a\n1: b\n'true': d\n") == {"1": "a", 1: "b", "true": "d"}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_inputs_are_looked_at_before_they_are_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening some devices has effects (/dev/watchdog arms a reboot timer): refuse them without opening."""
    from wandb_rlcluster.readers import files as readers

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    opened: list[str] = []
    real_open = os.open

    def recording_open(path: object, *args: object, **kwargs: object) -> int:
        opened.append(os.fspath(path))  # type: ignore[arg-type]
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(readers.os, "open", recording_open)
    with pytest.raises(readers.InputRefused, match="named pipe"):
        readers.read_bounded(fifo)
    assert str(fifo) not in opened


def test_clean_text_escapes_every_invisible_format_character() -> None:
    import unicodedata

    cf = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert len(cf) > 150
    assert [c for c in cf if clean_text(c) == c] == []
    assert clean_text("ad\u200bmin\u200e \u061c \U000e0041") == "ad\\u200bmin\\u200e \\u061c \\U000e0041"
    assert clean_text("héllo 日本 👍") == "héllo 日本 👍"


def test_log_lines_of_the_callback_escape_control_characters(caplog: pytest.LogCaptureFixture) -> None:
    from wandb_rlcluster import RLClusterCallback

    cb = RLClusterCallback(alerts=False, grad_every=0, attention_every=0, lora_every=0, sample_every=0)
    with caplog.at_level("WARNING", logger="wandb_rlcluster"):
        cb._error("on_log", RuntimeError("bad \x1b[2J\x1b]0;pwned\x07 value"))
    [line] = [r.getMessage() for r in caplog.records]
    assert "\x1b" not in line and "\x07" not in line and "\\x1b[2J" in line


def test_smtp_non_ascii_password_is_never_quoted() -> None:
    """smtplib's UnicodeEncodeError names one character of the password and its position."""
    stop = threading.Event()
    port = _echoing_smtp_server(stop)
    results: list[str] = []
    try:
        ch = EmailChannel("127.0.0.1", port, "a@b.c", ["d@e.f"], username="alerts", password="pässwörd-Geheim",
                          timeout=5, allow_plaintext_auth=True)
        d = AsyncDispatcher([ch], retries=0, on_result=lambda name, msg, ok, err: results.append(err))
        d.submit(AlertMessage(title="t", text="x", severity="stop", rule="r", gauge="kl", step=1))
        assert d.flush(10)
        d.close(1)
    finally:
        stop.set()
    [err] = results
    assert "UnicodeEncodeError" in err and "ä" not in err and "\\xe4" not in err and "position" not in err, err
