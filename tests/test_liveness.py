"""Never silent: the stall watchdog, the crash notice and the guardian.

The end-to-end tests train a real tiny TRL GRPO model in a fresh process (tests/scripts/run_trainer.py, W&B
offline) with a reward function that sleeps or raises at one step, or send SIGTERM / SIGKILL to the training
process, and check each alert where it lands: the journal (alerts.jsonl), the W&B run file, and a loopback
Slack server. Thresholds are seconds so the suite stays fast. The unit tests drive the same objects with a
fake clock, real threads and small real processes (no torch).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from wandb_rlcluster import RLClusterCallback
from wandb_rlcluster.alerts import AlertConfig, ConfigError, load_config
from wandb_rlcluster.alerts.liveness import LivenessSettings, resolve
from wandb_rlcluster.live.crash import last_checkpoint, redact
from wandb_rlcluster.live.trainer_internals import TrainFrame, describe_thread
from wandb_rlcluster.live.watchdog import StallWatchdog, StepCadence
from wandb_rlcluster.wandb_offline import find_run_dirs, read_offline_run

from .test_alerts_e2e import slack_server  # noqa: F401 - the loopback Slack server fixture
from .test_callback_trl import SCRIPT, run_trainer

SRC = Path(__file__).resolve().parents[1] / "src"
WATCHDOG = """
channels:
  slack: {{type: slack, webhook_url_env: TEST_SLACK_WEBHOOK, min_severity: warn}}
watchdog:
  stall_factor: {factor}
  stall_floor: 2s          # the tiny model's steps: ~20-200 ms on a quiet machine, several times more on a busy one
  stall_startup: 30s
  stall_check_every: 0.2s
  crash_timeout: 5s
"""


# -- units ---------------------------------------------------------------------------------------------------


def test_cadence_leaves_out_warmup_and_takes_the_median():
    c = StepCadence(warmup=2)
    t = 0.0
    for dt in (30.0, 10.0, 0.1, 0.1, 0.2, 5.0, 0.1):  # the first two steps are model loading / compilation
        t += dt
        c.step(t)
    assert list(c.intervals) == pytest.approx([0.1, 0.2, 5.0, 0.1])
    assert c.median() == pytest.approx(0.15)
    assert StepCadence(warmup=3).median() is None


def test_watchdog_fires_once_on_the_bound_and_resolves_when_steps_resume():
    now = [0.0]
    fired, resolved = [], []
    w = StallWatchdog(fired.append, resolved.append, lambda: "the reward function `slow`", factor=10, floor=2.0,
                      startup=30.0, warmup=1, check_every=0.1, clock=lambda: now[0])
    w.check()
    now[0] = 20.0  # first step slow, under the startup bound: not a stall
    w.check()
    w.step_done(1)
    for i in range(2, 8):  # 0.5 s steps: bound = max(10 x 0.5, 2) = 5 s
        now[0] += 0.5
        w.step_done(i)
        w.check()
    assert w.bound() == pytest.approx(5.0) and not fired
    now[0] += 4.9
    w.check()
    w.progress("in evaluation")  # an evaluation batch is progress, not a stall
    now[0] += 4.9
    w.check()
    assert not fired
    now[0] += 0.2
    w.check()
    now[0] += 10
    w.check()
    assert len(fired) == 1 and fired[0].last_step == 7 and fired[0].idle_s == pytest.approx(5.1)
    assert fired[0].phase == "in evaluation" and "slow" in fired[0].activity
    now[0] += 1
    w.step_done(8)
    w.check()
    assert len(resolved) == 1 and resolved[0].last_step == 8 and resolved[0].idle_s == pytest.approx(16.1)
    assert len(fired) == 1


def test_stack_names_a_collective_in_a_fake_torch_distributed():
    """A frame from torch/distributed/ (compiled under that file name) is named, with the user's frame."""
    lib = {}
    exec(compile("def all_reduce(ev):\n    ev.wait()\n", "/x/site-packages/torch/distributed/distributed_c10d.py",
                 "exec"), lib)
    ev, started = threading.Event(), threading.Event()

    def my_training_step():
        started.set()
        lib["all_reduce"](ev)

    t = threading.Thread(target=my_training_step, daemon=True)
    t.start()
    started.wait(5)
    time.sleep(0.05)
    try:
        act = describe_thread(t.ident)
        gone = describe_thread(t.ident, TrainFrame(frame_id=0, code=my_training_step.__code__, thread=t.ident))
    finally:
        ev.set()
        t.join(5)
    assert act.label.startswith("a collective (torch.distributed.all_reduce): another rank may have died")
    assert "my_training_step" in act.where  # the innermost frame outside the libraries
    # a Trainer.train frame that is no longer on the stack: training ended without on_train_end
    assert gone.label.startswith("not training: Trainer.train() has returned or raised")


def test_watchdog_settings_from_yaml_and_constructor(tmp_path: Path):
    good = tmp_path / "good.yaml"
    good.write_text("watchdog:\n  stall_floor: 90s\n  stall_factor: 4\n  guardian: false\n")
    cfg = load_config(good)
    s = resolve(cfg.watchdog, {"stall_floor": "3m"})
    assert (s.stall_floor, s.stall_factor, s.guardian, s.stall_startup) == (180.0, 4.0, False, 1800.0)
    assert resolve({}, {}) == LivenessSettings()
    stored = cfg.to_dict()  # a checkpoint keeps the settings with the rules, and a resume rebuilds them
    assert AlertConfig.from_dict(stored).watchdog == cfg.watchdog == {"stall_floor": 90.0, "stall_factor": 4.0,
                                                                       "guardian": False}
    with pytest.raises(ConfigError, match="stored watchdog setting: 'stall_factor' must be a number"):
        AlertConfig.from_dict({**stored, "watchdog": {"stall_factor": "x"}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("watchdog:\n  stall_floor: soon\n  stall_factr: 3\n  crash_timeout: 1h\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    problems = e.value.problems
    assert any(p.startswith(f"{bad}:2: watchdog: 'stall_floor' 'soon' is not a positive duration") for p in problems)
    assert any(p.startswith(f"{bad}:3: unknown watchdog setting 'stall_factr' (did you mean 'stall_factor'?)")
               for p in problems)
    assert any(p.startswith(f"{bad}:4:") and "over 5 minutes" in p for p in problems)
    with pytest.raises(ValueError, match="stall_factor' must be a number >= 1"):
        RLClusterCallback(stall_factor=0.5)
    cb = RLClusterCallback(alerts=good, stall_check_every="1s", guardian=True)
    assert cb.liveness is not None and cb.liveness.settings.stall_check_every == 1.0
    assert cb.liveness.settings.guardian and cb.liveness.settings.stall_floor == 90.0
    assert cb.state()["args"]["stall_check_every"] == "1s"  # restored on resume like every other argument
    assert RLClusterCallback(alerts=False).liveness is None


def test_redact_masks_secrets_in_exception_messages():
    env = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz", "MY_WEBHOOK": "https://hooks.example/T1/B2/zzz", "HOME": "/h"}
    text = ("POST https://user:pw@host/x failed; token=abc123; https://hooks.slack.com/services/T0/B0/xyz; "
            "key hf_abcdefghijklmnopqrstuvwxyz at https://hooks.example/T1/B2/zzz (Bearer eyJhbGciOi.J9) in /h")
    out = redact(text, env)
    for secret in ("pw@", "abc123", "T0/B0/xyz", "hf_abcdefghijklmnopqrstuvwxyz", "T1/B2/zzz", "eyJhbGciOi"):
        assert secret not in out, out
    assert "/h" in out  # only secret-looking variables are masked


CRASH_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, signal, sys, threading, time
    from wandb_rlcluster.live.crash import CrashReporter
    mode, out = sys.argv[1], sys.argv[2]
    def report(crash):
        with open(out, "a") as fh:
            fh.write(json.dumps({"how": crash.how, "summary": crash.summary, "abrupt": crash.abrupt}) + "\\n")
    hooks = os.environ.get("RLCLUSTER_HOOKS", "1") == "1"
    if hooks and mode != "thread":
        CrashReporter(report, timeout=5).install()
    print("ready", flush=True)
    if mode == "exception":
        raise ValueError("bad batch (password=hunter2)")
    if mode == "exit":
        sys.exit(3)
    if mode == "sigint":
        time.sleep(30)
    if mode == "stuck":  # one long C call that releases the GIL and never returns to the interpreter loop
        hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 40_000_000)
        print("finished", flush=True)
    if mode == "thread":
        def train():  # training outside the main thread: threading.excepthook, no signal handlers
            if hooks:
                CrashReporter(report, timeout=5, thread=threading.get_ident()).install()
            raise RuntimeError("in the training thread")
        t = threading.Thread(target=train); t.start(); t.join()
""")


def _crash_run(tmp_path: Path, mode: str, hooks: bool = True, signum: int | None = None) -> tuple[int, str, list]:
    script = tmp_path / "crash_script.py"
    script.write_text(CRASH_SCRIPT)
    out = tmp_path / f"{mode}-{hooks}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(SRC), "RLCLUSTER_HOOKS": "1" if hooks else "0"}
    p = subprocess.Popen([sys.executable, str(script), mode, str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    if signum is not None:
        time.sleep(0.5)
        p.send_signal(signum)
    _, err = p.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    reports = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return p.returncode, err + f"\nelapsed={elapsed:.2f}", reports


@pytest.mark.parametrize("mode,signum", [("exception", None), ("exit", None), ("sigint", signal.SIGINT),
                                         ("stuck", signal.SIGTERM), ("thread", None)])
def test_crash_hooks_report_once_and_keep_exit_codes(tmp_path: Path, mode: str, signum: int | None):
    rc, err, reports = _crash_run(tmp_path, mode, True, signum)
    # the same script without the hooks (stuck: SIGTERM's default action ends a process at once)
    rc0, err0, _ = _crash_run(tmp_path, mode, False, signum) if mode != "stuck" else (-signal.SIGTERM, "", [])
    assert rc == rc0, (rc, rc0, err)
    assert len(reports) == 1, (reports, err)
    how = reports[0]["how"]
    if mode == "exception":
        assert reports[0]["summary"] == "ValueError: bad batch (password=***)"
        assert err.count("Traceback") == 1 == err0.count("Traceback")  # the user's traceback, printed once
    elif mode == "exit":
        assert how == "exit" and rc == 3
    elif mode == "sigint":
        assert how == "signal" and reports[0]["summary"] == "SIGINT" and "KeyboardInterrupt" in err
    elif mode == "stuck":
        # the main thread is inside one C call for many seconds: the wakeup-fd reader still reports, then the
        # process ends by SIGTERM as it would have without rlcluster
        assert how == "signal" and reports[0]["summary"] == "SIGTERM" and reports[0]["abrupt"]
        assert "finished" not in err
        elapsed = float(re.search(r"elapsed=([\d.]+)", err).group(1))
        assert elapsed < 6.0, err
    else:
        assert how == "exception" and reports[0]["summary"] == "RuntimeError: in the training thread"


def test_last_checkpoint_needs_trainer_state(tmp_path: Path):
    for step, complete in ((5, True), (10, True), (15, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path) == (str(tmp_path / "checkpoint-10"), 10)
    assert last_checkpoint(tmp_path / "missing") is None


# -- real TRL runs ---------------------------------------------------------------------------------------------


def _alerts(journal: Path, rule: str) -> list[dict]:
    if not journal.exists():
        return []
    rows = [json.loads(x) for x in journal.read_text().splitlines()]
    return [r for r in rows if r.get("type") == "alert" and r.get("rule") == rule]


def _rules_file(tmp_path: Path, factor: float = 10) -> Path:
    f = tmp_path / "alerts.yaml"
    f.write_text(WATCHDOG.format(factor=factor))
    return f


def _slack_titles(bodies: list[dict], needle: str) -> list[str]:
    return [b["text"] for b in bodies if needle in b["text"]]


def test_stall_in_a_reward_function_alerts_once_everywhere_then_resolves(tmp_path: Path, slack_server):  # noqa: F811
    url, bodies = slack_server
    os.environ["TEST_SLACK_WEBHOOK"] = url
    try:
        # factor 3: the 8 s sleep stays well past the bound even when a busy machine makes steps slow
        res = run_trainer(tmp_path, "grpo", "--max-steps", "24", "--every", "0", "--alerts",
                          str(_rules_file(tmp_path, factor=3)), "--fault", "sleep:12:8")
    finally:
        del os.environ["TEST_SLACK_WEBHOOK"]
    journal = Path(res["output_dir"]) / "alerts.jsonl"
    stalls = _alerts(journal, "stall")
    fired = [s for s in stalls if s["kind"] == "firing"]
    assert [s["kind"] for s in stalls] == ["firing", "resolved"], stalls
    f = fired[0]
    assert f["step"] == 12 and f["severity"] == "warn"
    bound = float(re.search(r"bound ([\d.]+) s", f["text"]).group(1))
    median = float(re.search(r"median step ([\d.]+) s", f["text"]).group(1))
    assert bound == pytest.approx(max(3 * median, 2.0), abs=0.2)  # max(3 x median step time, the 2 s floor)
    # detected within one check of the bound (+ scheduling); the text rounds the bound to 0.1 s
    assert bound - 0.05 <= f["value"] <= bound + 0.2 + 1.5, f
    print(f"stall detected {f['value']:.2f} s after the last step (bound {bound} s, checked every 0.2 s)")
    assert "the reward function `faulty`" in f["text"] and "run_trainer.py" in f["text"], f["text"]
    assert stalls[1]["step"] == 13 and stalls[1]["value"] >= 5.5  # resolved when step 13 completed
    # W&B: exactly one stall alert in the run file, as a WARN
    run = read_offline_run(res["run_dir"])
    w = [a for a in run.alerts if str(a["title"]).startswith("Training stalled")]
    assert len(w) == 1 and w[0]["level"] == "WARN"
    # the loopback Slack server: exactly one stall message
    assert len(_slack_titles(bodies, "Training stalled")) == 1
    assert res["errors"] == 0


def test_healthy_200_steps_with_a_slow_first_step_raise_no_stall(tmp_path: Path):
    """SFT: the cheapest real steps (the point is the cadence, not the trainer); the first step takes > 4 s."""
    res = run_trainer(tmp_path, "sft", "--max-steps", "200", "--every", "0", "--alerts", str(_rules_file(tmp_path)),
                      "--slow-step", "0:4", "--overrides", '{"logging_steps": 20}', timeout=600)  # fewer logs: cheaper
    assert res["global_step"] == 200 and res["errors"] == 0
    journal = Path(res["output_dir"]) / "alerts.jsonl"
    assert _alerts(journal, "stall") == [] and _alerts(journal, "crash") == []


def _launch(tmp_path: Path, url: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "TEST_SLACK_WEBHOOK": url}
    env.pop("WANDB_API_KEY", None)
    return subprocess.Popen([sys.executable, str(SCRIPT), "--kind", "grpo", "--out", str(tmp_path), "--every", "0",
                             "--alerts", str(_rules_file(tmp_path)), *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _guardian(p: subprocess.Popen) -> psutil.Process:
    """The training process's guardian, once on_train_begin started it."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 240 and p.poll() is None:
        for child in psutil.Process(p.pid).children():
            try:
                if "wandb_rlcluster.live.guardian" in " ".join(child.cmdline()):
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError("no guardian process")


def _wait_for_checkpoint(tmp_path: Path, p: subprocess.Popen, step: int) -> None:
    t0 = time.monotonic()
    while not (tmp_path / "trainer" / f"checkpoint-{step}" / "trainer_state.json").exists():
        assert p.poll() is None, p.stderr.read()[-3000:] if p.stderr else ""
        assert time.monotonic() - t0 < 240, "no checkpoint"
        time.sleep(0.1)


def test_exception_in_a_reward_function_sends_one_crash_alert(tmp_path: Path, slack_server):  # noqa: F811
    url, bodies = slack_server
    p = _launch(tmp_path, url, "--max-steps", "30", "--save-steps", "3", "--fault", "raise:4")
    guardian = _guardian(p)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1  # the user's exception still ends the script as it would have
    assert err.count("Traceback (most recent call last)") == 1 and "RuntimeError: reward server unreachable" in err
    crashes = _alerts(tmp_path / "trainer" / "alerts.jsonl", "crash")
    assert len(crashes) == 1, crashes
    c = crashes[0]
    assert c["step"] == 4 and c["metric"] == "exception" and c["severity"] == "stop"
    assert "RuntimeError: reward server unreachable at step 4 (api_key=***)" in c["title"]
    assert "sk-test-not-a-real-key" not in json.dumps(c)
    assert "run_trainer.py" in c["text"] and "checkpoint-3 (step 3)" in c["text"]
    run = read_offline_run(find_run_dirs(tmp_path)[-1])
    assert [a["level"] for a in run.alerts if str(a["title"]).startswith("Training crashed")] == ["ERROR"]
    assert len(_slack_titles(bodies, "Training crashed")) == 1
    guardian.wait(10)  # the guardian saw the training process report its own crash: silent, and gone
    assert not guardian.is_running()


def test_sigterm_mid_run_sends_one_crash_alert_naming_the_last_checkpoint(tmp_path: Path, slack_server):  # noqa: F811
    url, bodies = slack_server
    p = _launch(tmp_path, url, "--max-steps", "500", "--save-steps", "5")
    guardian = _guardian(p)
    _wait_for_checkpoint(tmp_path, p, 5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM  # died by the signal, as without rlcluster
    crashes = _alerts(tmp_path / "trainer" / "alerts.jsonl", "crash")
    assert len(crashes) == 1, (crashes, err[-2000:])
    c = crashes[0]
    assert c["metric"] == "signal" and "SIGTERM" in c["title"]
    ckpt = last_checkpoint(tmp_path / "trainer")
    assert ckpt is not None and f"Last checkpoint: {ckpt[0]} (step {ckpt[1]})" in c["text"]
    assert len(_slack_titles(bodies, "Training stopped by SIGTERM")) == 1
    run = read_offline_run(find_run_dirs(tmp_path)[-1])  # the W&B run was finished (failed, 128+15) before dying
    assert [a["title"] for a in run.alerts].count(c["title"]) == 1 and run.exit_code == 143
    guardian.wait(10)
    assert not guardian.is_running()


def test_kill_9_guardian_reports_within_10s_and_leaves_nothing(tmp_path: Path, slack_server):  # noqa: F811
    url, bodies = slack_server
    p = _launch(tmp_path, url, "--max-steps", "500", "--save-steps", "5")
    guardian = _guardian(p)
    _wait_for_checkpoint(tmp_path, p, 5)
    time.sleep(1.2)  # the guardian hears the step every second
    t0 = time.monotonic()
    p.kill()
    while not _slack_titles(bodies, "Training process died") and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    msgs = _slack_titles(bodies, "Training process died")
    assert len(msgs) == 1 and elapsed < 10, (elapsed, msgs)
    print(f"guardian alert on the loopback Slack server {elapsed:.2f} s after kill -9")
    guardian.wait(10)
    assert not guardian.is_running()
    _, err = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL
    crashes = _alerts(tmp_path / "trainer" / "alerts.jsonl", "crash")
    assert len(crashes) == 1, crashes
    c = crashes[0]
    assert c["step"] >= 5 and "guardian" in c["text"] and "not in W&B" in c["text"]
    ckpt = last_checkpoint(tmp_path / "trainer")
    assert ckpt is not None and f"Last checkpoint: {ckpt[0]}" in c["text"]
    assert "rlcluster guardian: training process" in err and "sent to: slack" in err
