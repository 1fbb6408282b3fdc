"""Never silent: the stall watchdog, the crash notice and the guardian.

The end-to-end tests train a real tiny TRL model in a fresh process (tests/scripts/run_trainer.py and
tests/scripts/liveness_lifecycle.py, W&B offline) with a reward function that sleeps, raises or scores in a fork
multiprocessing pool, or send SIGTERM / SIGKILL to the training process, and check each alert where it lands: the
journal (alerts.jsonl, with exactly one channel outcome per alert), the W&B run file, and a loopback Slack server.
Thresholds are seconds so the suite stays fast; the assertions on time leave room for a loaded 2-core machine.
The unit tests drive the same objects with a fake clock, real threads and small real processes (torch only where
a real gloo collective is needed).
"""

from __future__ import annotations

import contextlib
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
from wandb_rlcluster.alerts.watchdog import LivenessSettings, resolve
from wandb_rlcluster.guard.crash import Crash, last_checkpoint, redact
from wandb_rlcluster.guard.stall import StallWatchdog, StepCadence
from wandb_rlcluster.guard.wiring import LivenessMonitor, _title
from wandb_rlcluster.readers.wandb import find_run_dirs, read_offline_run
from wandb_rlcluster.trainer.internals import TrainFrame, describe_thread, train_frame_alive

from .conftest import PACKAGE_ROOT
from .test_alerts_e2e import slack_server  # noqa: F401 - the loopback Slack server fixture
from .test_callback_trl import SCRIPT, run_trainer

SRC = PACKAGE_ROOT  # the package under test: src/, or the compiled wheel (make test-compiled)
LIFECYCLE = Path(__file__).parent / "scripts" / "liveness_lifecycle.py"
WATCHDOG = """
channels:
  slack: {{type: slack, webhook_url_env: TEST_SLACK_WEBHOOK, min_severity: warn}}
watchdog:
  stall_factor: {factor}
  stall_floor: {floor}       # the tiny model's steps: ~20-200 ms on a quiet machine, several times more on a busy one
  stall_startup: 30s
  stall_check_every: 0.2s
  crash_timeout: {crash_timeout}
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
                      startup=30.0, warmup=1, clock=lambda: now[0])
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


def test_watchdog_holds_off_while_a_checkpoint_is_written_but_not_forever():
    """on_save counts as progress only after the save: a save longer than the step bound is not a stall until the
    startup bound; the same idle time anywhere else is; and a stall right after a resume names the resumed step."""
    for activity, fires_at in (("checkpointing, at trainer.py:3390 in _save_checkpoint", 30.0),
                               ("evaluation, at trainer.py:4200 in evaluation_loop", 30.0),
                               ("the reward function `slow`, at r.py:3 in slow", 5.0)):
        now = [0.0]
        fired = []
        w = StallWatchdog(fired.append, lambda s: None, lambda a=activity: a, factor=10, floor=2.0, startup=30.0,
                          warmup=0, step=40, clock=lambda n=now: n[0])
        for i in range(41, 46):  # 0.5 s steps: bound 5 s
            now[0] += 0.5
            w.step_done(i)
        t0 = now[0]
        for dt in (4.9, 5.1, 20.0, 29.9, 30.1):
            now[0] = t0 + dt
            w.check()
            if fired:
                break
        assert fired and fired[0].idle_s == pytest.approx(fires_at, abs=0.11), (activity, fired)
        assert fired[0].bound_s == pytest.approx(fires_at if fires_at > 5 else 5.0)
    w = StallWatchdog(fired.append, lambda s: None, lambda: "x", floor=2.0, startup=3.0, step=120, clock=lambda: 0.0)
    assert w.last_step == 120  # not "after step 0" when a resumed run stalls before its first new step


@pytest.mark.slow
def test_stack_names_a_collective_in_a_real_gloo_pair(tmp_path: Path):
    """Rank 0 blocks in a real gloo all_reduce that rank 1 never joins (a dead or stuck rank): the stack reading
    names the collective, and the innermost frame outside the libraries."""
    script = tmp_path / "gloo_pair.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys, threading, time
        import torch
        import torch.distributed as dist
        rank, store = int(sys.argv[1]), sys.argv[2]
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
        if rank == 1:  # joins the group, never the collective
            time.sleep(120)
            os._exit(0)
        from wandb_rlcluster.trainer.internals import describe_thread
        def my_training_step():
            dist.all_reduce(torch.ones(1))
        t = threading.Thread(target=my_training_step, daemon=True)
        t.start()
        time.sleep(1.0)
        a = describe_thread(t.ident)
        print(json.dumps({"label": a.label, "where": a.where, "alive": t.is_alive()}), flush=True)
        os._exit(0)
    """))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    store = str(tmp_path / "store")
    peer = subprocess.Popen([sys.executable, str(script), "1", store], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        p = subprocess.run([sys.executable, str(script), "0", store], env=env, capture_output=True, text=True,
                           timeout=120)
    finally:
        peer.kill()
        peer.wait(10)
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["alive"], p.stderr
    assert got["label"].startswith("a collective (torch.distributed.all_reduce): another rank may have died"), got
    assert got["where"].startswith("gloo_pair.py:") and got["where"].endswith("in my_training_step"), got


def test_a_train_frame_that_left_the_stack_is_seen():
    ev, started = threading.Event(), threading.Event()

    def my_training_step():
        started.set()
        ev.wait()

    t = threading.Thread(target=my_training_step, daemon=True)
    t.start()
    started.wait(5)
    gone = TrainFrame(frame_id=0, code=my_training_step.__code__, thread=t.ident)
    here = TrainFrame(frame_id=id(sys._current_frames()[t.ident].f_back), code=ev.wait.__code__, thread=t.ident)
    try:
        assert describe_thread(t.ident, gone).label.startswith("not training: Trainer.train() has returned")
        assert train_frame_alive(gone) is False and train_frame_alive(here) is True
    finally:
        ev.set()
        t.join(5)
    assert train_frame_alive(here) is False  # the thread itself has ended


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
    bad.write_text("watchdog:\n  stall_floor: soon\n  stall_factr: 3\n  crash_timeout: 1h\n  stall_severity: stop\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    problems = e.value.problems
    assert any(p.startswith(f"{bad}:2: watchdog: 'stall_floor' 'soon' is not a positive duration") for p in problems)
    assert any(p.startswith(f"{bad}:3: unknown watchdog setting 'stall_factr' (did you mean 'stall_factor'?)")
               for p in problems)
    assert any(p.startswith(f"{bad}:4:") and "over 5 minutes" in p for p in problems)
    # a stalled loop cannot be stopped by a rule: "stop" would promise what nothing does
    assert any(p.startswith(f"{bad}:5:") and "'stall_severity' must be info or warn" in p for p in problems)
    with pytest.raises(ValueError, match="stall_factor' must be a number >= 1"):
        RLClusterCallback(stall_factor=0.5)
    cb = RLClusterCallback(alerts=good, stall_check_every="1s", guardian=True)
    assert cb.liveness is not None and cb.liveness.settings.stall_check_every == 1.0
    assert cb.liveness.settings.guardian and cb.liveness.settings.stall_floor == 90.0
    assert cb.state()["args"]["stall_check_every"] == "1s"  # restored on resume like every other argument
    assert RLClusterCallback(alerts=False).liveness is None


def test_rules_cannot_take_the_liveness_alert_names(tmp_path: Path):
    """A user rule named stall/crash/signal would change how the liveness alerts are routed (rule channels)."""
    f = tmp_path / "a.yaml"
    f.write_text("rules:\n  - name: crash\n    gauge: kl\n    when: \"kl > 1\"\n")
    with pytest.raises(ConfigError, match=r"a.yaml:2: rule name 'crash' is reserved for the liveness alerts"):
        load_config(f)


def test_redact_masks_secrets_in_exception_messages():
    env = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz", "MY_WEBHOOK": "https://hooks.example/T1/B2/zzz", "HOME": "/h"}
    text = ("POST https://user:pw@host/x failed; token=abc123; https://hooks.slack.com/services/T0/B0/xyz; "
            "key hf_abcdefghijklmnopqrstuvwxyz at https://hooks.example/T1/B2/zzz (Bearer eyJhbGciOi.J9) in /h; "
            "access_token=tok111; refresh_token: tok222; client_secret: 'sec333'; aws_secret_access_key=sec444; "
            "GET /v1?key=AIzaSyA1234567890abcdefghijklmnopqrstu&alt=json; blob?sv=1&sig=sig555%3D&se=2; "
            "postgres://admin:hunter2@db:5432/x; redis://:pw666@cache:6379; api_key sk123456789abcdef; "
            "{'password': \"pw777\"}; clientSecret=sec888")
    out = redact(text, env)
    for secret in ("pw@", "abc123", "T0/B0/xyz", "hf_abcdefghijklmnopqrstuvwxyz", "T1/B2/zzz", "eyJhbGciOi",
                   "tok111", "tok222", "sec333", "sec444", "AIzaSy", "sig555", "hunter2", "pw666", "sk123456789",
                   "pw777", "sec888"):
        assert secret not in out, (secret, out)
    assert "/h" in out and "alt=json" in out and "se=2" in out and "db:5432" in out  # only the secrets go
    # what looks like a secret name but is not one stays readable
    for plain in ("KeyError: 'reward'", "invalid token provided", "monkey=3", "signal: SIGTERM"):
        assert redact(plain, {}) == plain


class _Recorder:
    """Where a LivenessMonitor's alerts go in these unit tests (the real Notifier is exercised by the runs below)."""

    def __init__(self) -> None:
        self.events: list = []
        self.config = None

    def handle(self, events) -> None:
        self.events.extend(events)

    def close(self, timeout: float | None = None) -> None:
        pass


def test_crash_titles_keep_the_run_name_and_say_what_happened(monkeypatch: pytest.MonkeyPatch):
    title = _title("Training crashed after step 3: ", "ValueError: " + "x" * 600, " (grpo-run-7)")
    assert len(title) <= 250 and title.endswith("… (grpo-run-7)")
    monitor = LivenessMonitor(LivenessSettings(guardian=False))
    monitor.notifier, monitor.fields, monitor.last_step = _Recorder(), {"run_name": "grpo-run-7"}, 12
    monitor._on_crash(Crash("exception", "ValueError: " + "x" * 600))
    monitor._on_crash(Crash("exception", "KeyboardInterrupt"))
    monitor._on_crash(Crash("signal", "SIGTERM", abrupt=True))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-1")  # torchrun: the agent sends SIGTERM when another rank failed
    monitor._on_crash(Crash("signal", "SIGTERM", abrupt=True))
    titles = [e.title for e in monitor.notifier.events]
    assert all(len(t) <= 250 and t.endswith(" (grpo-run-7)") for t in titles), titles
    assert titles[1] == "Training interrupted after step 12: KeyboardInterrupt (Ctrl-C?) (grpo-run-7)"
    assert "preemption? scancel?" in titles[2]
    assert "the torchrun agent ends the ranks: another rank failed?" in titles[3]


def test_guardian_is_silent_after_a_normal_exit_and_speaks_after_os_exit(tmp_path: Path):
    """The guardian tells a hard death from a normal exit by the exit hook it gets from the training process: after
    sys.exit it stays silent (an exception before the crash hooks, crash_alert=False), after os._exit it reports."""
    script = tmp_path / "guarded.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from wandb_rlcluster.guard.guardian import Guardian
        g = Guardian({"journal": sys.argv[2], "output_dir": None, "run_name": "r", "timeout": 2, "channels": {}})
        assert g.start()
        print(g.pid, flush=True)
        if sys.argv[1] == "exit":
            sys.exit(0)
        os._exit(0)
    """))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for how in ("exit", "os_exit"):
        journal = tmp_path / f"{how}.jsonl"
        p = subprocess.run([sys.executable, str(script), how, str(journal)], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        guardian = int(p.stdout.strip())
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(guardian).wait(30)
        crashes = _alerts(journal, "crash")
        assert len(crashes) == (0 if how == "exit" else 1), (how, crashes)


CRASH_SCRIPT = textwrap.dedent("""
    import asyncio, hashlib, json, multiprocessing as mp, os, signal, sys, threading, time
    from wandb_rlcluster.guard.crash import CrashReporter
    mode, out = sys.argv[1], sys.argv[2]
    lock = threading.Lock()  # stands for a lock the main thread may hold when a signal comes (logging's, a file's)
    def write_now(**row):
        with open(out, "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "t": time.monotonic(), **row}) + "\\n")
    def write(**row):
        with lock:
            write_now(**row)
    def report(crash):
        if mode == "raise-while-dying":
            time.sleep(1.0)  # a notice that takes a while (a slow Slack): training goes on meanwhile
        write(how=crash.how, summary=crash.summary, abrupt=crash.abrupt)
    def notice(name, stuck):
        write(how="notice", summary=name, stuck=stuck)
    counter = [0]
    def finish(crash):  # the W&B finish: is the training thread parked meanwhile?
        before = counter[0]
        time.sleep(1.0)
        write(how="finish", moved=counter[0] - before)
    def work(x):
        time.sleep(0.1)
        return x * x
    hooks = os.environ.get("RLCLUSTER_HOOKS", "1") == "1"
    if mode == "user-handler":  # the program's own SIGTERM handler, installed before rlcluster
        signal.signal(signal.SIGTERM, lambda s, f: write_now(how="user-handler"))
    reporter = None
    if hooks and mode != "thread":
        if mode == "two":  # a retry with a new callback after a train() whose exception was caught
            CrashReporter(lambda c: write(how="first", summary=c.summary), timeout=5).install()
        reporter = CrashReporter(report, finish=finish, notice=notice, timeout=5)
        reporter.install()
    print("ready", flush=True)
    if mode in ("exception", "two"):
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
    if mode == "fork":  # a pool whose __exit__ SIGTERMs its forked workers, and a forked child that exits normally
        with mp.get_context("fork").Pool(2) as pool:
            pool.map(work, range(4))
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # runs the exit hooks this child inherited
        os.waitpid(pid, 0)
        write(how="main", summary=str(signal.getsignal(signal.SIGINT) is signal.default_int_handler))
        async def ctrl_c_handling():  # asyncio.run installs its own Ctrl-C handler over the default one only
            return getattr(signal.getsignal(signal.SIGINT), "func", None).__qualname__
        write(how="asyncio", summary=asyncio.run(ctrl_c_handling()))
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)  # another owner took the wakeup fd after rlcluster: it stays theirs
        reporter.mark_clean()
        write(how="wakeup", summary=str(signal.set_wakeup_fd(-1) == w))
    if mode == "steal":  # an asyncio loop adds and removes a signal handler: it takes and drops the wakeup fd
        async def judge():
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
            loop.remove_signal_handler(signal.SIGUSR1)
        asyncio.run(judge())
        print("stolen", flush=True)
        time.sleep(20)
        print("STILL ALIVE", flush=True)
    if mode == "user-handler":  # SIGTERM while the main thread holds the lock the notice needs
        with lock:
            t0 = time.monotonic()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.5)
        write(how="main", summary=f"{t0}")
        time.sleep(1.0)
        reporter.mark_clean()
    if mode == "raise-while-dying":  # the training thread raises while the notice of a SIGTERM is on its way
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)
        raise RuntimeError("Run (abc) is finished. The call to `log` will be ignored.")
    if mode == "park":  # a SIGTERM: the training thread must not run while the W&B run is finished
        while True:
            counter[0] += 1
            time.sleep(0.001)
""")


def _crash_run(tmp_path: Path, mode: str, hooks: bool = True, signum: int | None = None,
               after: str = "ready") -> tuple[int, str, list]:
    script = tmp_path / "crash_script.py"
    script.write_text(CRASH_SCRIPT)
    out = tmp_path / f"{mode}-{hooks}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(SRC), "RLCLUSTER_HOOKS": "1" if hooks else "0"}
    p = subprocess.Popen([sys.executable, str(script), mode, str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    if after != "ready":
        assert p.stdout.readline().strip() == after
    t0 = time.monotonic()
    if signum is not None:
        time.sleep(0.5)
        p.send_signal(signum)
    _, err = p.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return p.returncode, err + f"\nelapsed={elapsed:.2f}", rows


@pytest.mark.parametrize("mode,signum", [("exception", None), ("exit", None), ("sigint", signal.SIGINT),
                                         ("stuck", signal.SIGTERM), ("thread", None)])
def test_crash_hooks_report_once_and_keep_exit_codes(tmp_path: Path, mode: str, signum: int | None):
    rc, err, rows = _crash_run(tmp_path, mode, True, signum)
    reports = [r for r in rows if r["how"] != "finish"]
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
        # Ctrl-C keeps Python's own handling: KeyboardInterrupt, reported as the exception that ended training
        assert how == "exception" and reports[0]["summary"] == "KeyboardInterrupt" and "KeyboardInterrupt" in err
        assert rc == -signal.SIGINT
    elif mode == "stuck":
        # the main thread is inside one C call for many seconds: the wakeup-fd reader still reports, then the
        # process ends by SIGTERM as it would have without rlcluster
        assert how == "signal" and reports[0]["summary"] == "SIGTERM" and reports[0]["abrupt"]
        assert [r["how"] for r in rows] == ["signal", "finish"]  # the W&B run is finished before the end
        assert "finished" not in err
        elapsed = float(re.search(r"elapsed=([\d.]+)", err).group(1))
        assert elapsed < 8.0, err
    else:
        assert how == "exception" and reports[0]["summary"] == "RuntimeError: in the training thread"


def test_forked_children_inherit_nothing(tmp_path: Path):
    """A fork Pool terminated by its __exit__ (SIGTERM to each worker) and a forked child that exits normally:
    no report from anyone, the parent goes on; SIGINT keeps Python's handler, so asyncio.run installs its own."""
    rc, err, rows = _crash_run(tmp_path, "fork")
    assert rc == 0, err
    assert [r["how"] for r in rows] == ["main", "asyncio", "wakeup"], (rows, err)
    assert rows[0]["summary"] == "True" and rows[1]["summary"] == "Runner._on_sigint" and rows[2]["summary"] == "True"


def test_sigterm_is_told_when_something_else_took_the_wakeup_fd(tmp_path: Path):
    """asyncio.run adding and removing a signal handler drops the wakeup fd: SIGTERM is still reported, and still
    ends the process."""
    rc, err, rows = _crash_run(tmp_path, "steal", signum=signal.SIGTERM, after="stolen")
    assert rc == -signal.SIGTERM and "STILL ALIVE" not in err, err
    assert [(r["how"], r["summary"]) for r in rows if r["how"] != "finish"] == [("signal", "SIGTERM")], rows


def test_the_programs_own_sigterm_handler_runs_at_once_and_monitoring_goes_on(tmp_path: Path):
    """The handler never waits: with the lock the notice needs held by the main thread, the program's own handler
    still runs at once; the notice (not a crash) follows when the lock is free, and the process goes on."""
    rc, err, rows = _crash_run(tmp_path, "user-handler")
    assert rc == 0, err
    hows = [r["how"] for r in rows]
    assert hows.count("user-handler") == 1 and hows.count("notice") == 1 and "signal" not in hows, rows
    sent = float(next(r["summary"] for r in rows if r["how"] == "main"))
    handled = next(r["t"] for r in rows if r["how"] == "user-handler")
    notice = next(r for r in rows if r["how"] == "notice")
    assert handled - sent < 1.0  # not after the 5 s crash_timeout
    assert notice["summary"] == "SIGTERM" and not notice["stuck"]


def test_sigterm_parks_the_training_thread_while_the_run_is_finished(tmp_path: Path):
    rc, err, rows = _crash_run(tmp_path, "park", signum=signal.SIGTERM)
    assert rc == -signal.SIGTERM, err
    assert [r["how"] for r in rows] == ["signal", "finish"], rows
    assert rows[1]["moved"] == 0  # the training loop did not run during the finish


def test_sigterm_still_ends_the_process_by_the_signal_when_training_raises_meanwhile(tmp_path: Path):
    """SIGTERM, then the training thread raises before it is parked (the CI failure on main: TRL logged to the W&B
    run the reader had just finished, and the interpreter exited with status 1 before the reader's kill): the
    process still dies by SIGTERM, as it would have without rlcluster, after one notice and the W&B finish."""
    rc, err, rows = _crash_run(tmp_path, "raise-while-dying")
    rc0, _, _ = _crash_run(tmp_path, "raise-while-dying", hooks=False)
    assert rc == rc0 == -signal.SIGTERM, (rc, rc0, err)
    assert [r["how"] for r in rows] == ["signal", "finish"], (rows, err)


def test_a_retry_with_a_new_reporter_reports_once(tmp_path: Path):
    rc, err, rows = _crash_run(tmp_path, "two")
    assert rc == 1 and err.count("Traceback") == 1, err
    assert [r["how"] for r in rows] == ["exception"], rows


def test_last_checkpoint_is_a_complete_one_of_this_training(tmp_path: Path):
    for step, complete in ((5, True), (10, True), (15, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path) == (str(tmp_path / "checkpoint-10"), 10)
    assert last_checkpoint(tmp_path / "missing") is None
    # a reused output_dir: checkpoint-900 of an earlier, longer run is not this training's
    stale = tmp_path / "checkpoint-900"
    stale.mkdir()
    (stale / "trainer_state.json").write_text("{}")
    old = time.time() - 3600
    for d in (stale, tmp_path / "checkpoint-5", tmp_path / "checkpoint-10"):
        os.utime(d / "trainer_state.json", (old, old))
    started = time.time() - 60
    assert last_checkpoint(tmp_path, since=started) is None
    assert last_checkpoint(tmp_path, since=started, start_step=10) == (str(tmp_path / "checkpoint-10"), 10)
    (tmp_path / "checkpoint-5" / "trainer_state.json").write_text("{}")  # written by this training
    assert last_checkpoint(tmp_path, since=started) == (str(tmp_path / "checkpoint-5"), 5)


# -- real TRL runs ---------------------------------------------------------------------------------------------


def _journal(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _alerts(journal: Path, rule: str) -> list[dict]:
    return [r for r in _journal(journal) if r.get("type") == "alert" and r.get("rule") == rule]


def _one_outcome_each(journal: Path, *rules: str) -> None:
    """Every notified alert of these rules has exactly one outcome record for the Slack channel, and it was sent."""
    rows = _journal(journal)
    for a in rows:
        if a.get("type") == "alert" and a.get("rule") in rules and a.get("notify") and a.get("kind") == "firing":
            outcomes = [r for r in rows if r.get("type") == "channel" and r.get("alert") == a["id"]]
            assert [(o["channel"], o["outcome"]) for o in outcomes] == [("slack", "sent")], (a["title"], outcomes)


def _rules_file(tmp_path: Path, factor: float = 10, floor: str = "2s", crash_timeout: str = "5s") -> Path:
    f = tmp_path / "alerts.yaml"
    f.write_text(WATCHDOG.format(factor=factor, floor=floor, crash_timeout=crash_timeout))
    return f


def _slack_titles(bodies: list[dict], needle: str) -> list[str]:
    return [b["text"] for b in bodies if needle in b["text"]]


@pytest.mark.trains
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
    assert [s["kind"] for s in stalls] == ["firing", "resolved"], stalls
    f, r = stalls
    assert f["step"] == 12 and f["severity"] == "warn"
    bound = float(re.search(r"bound ([\d.]+) s", f["text"]).group(1))
    median = float(re.search(r"median step ([\d.]+) s", f["text"]).group(1))
    assert bound == pytest.approx(max(3 * median, 2.0), abs=0.2)  # max(3 x median step time, the 2 s floor)
    # fired past the bound (the text rounds it to 0.1 s), while the reward function still slept: before the
    # stall's end, which the resolution measures on the same clock (no wall-clock window to miss on a busy machine)
    assert bound - 0.05 <= f["value"] < r["value"], (f, r)
    print(f"stall detected {f['value']:.2f} s after the last step (bound {bound} s, checked every 0.2 s)")
    assert "the reward function `faulty`" in f["text"] and "run_trainer.py" in f["text"], f["text"]
    assert r["step"] == 13 and r["value"] >= 5.5  # resolved when step 13 completed
    run = read_offline_run(res["run_dir"])  # W&B: exactly one stall alert in the run file, as a WARN
    w = [a for a in run.alerts if str(a["title"]).startswith("Training stalled")]
    assert len(w) == 1 and w[0]["level"] == "WARN"
    assert len(_slack_titles(bodies, "Training stalled")) == 1  # the loopback Slack server: exactly one message
    _one_outcome_each(journal, "stall")
    assert res["errors"] == 0


@pytest.mark.trains
def test_healthy_200_steps_with_workers_and_the_programs_own_sigterm_handler(tmp_path: Path):
    """SFT (the cheapest real steps) whose first step takes > 4 s, with 2 forked DataLoader workers and the program's
    own SIGTERM handler, which takes a SIGTERM at step 100 and goes on: no stall, no crash, one `signal` notice;
    after the clean end nothing of rlcluster is left (threads, handlers, wakeup fd, excepthook, guardian)."""
    res = run_trainer(tmp_path, "sft", "--max-steps", "200", "--every", "0",
                      "--alerts", str(_rules_file(tmp_path, floor="10s")), "--slow-step", "0:4",
                      "--overrides", json.dumps({"logging_steps": 20, "dataloader_num_workers": 2,
                                                 "dataloader_persistent_workers": True}),
                      "--user-sigterm", "--self-signal", "100", "--snapshot", timeout=600)
    assert res["global_step"] == 200 and res["errors"] == 0
    journal = Path(res["output_dir"]) / "alerts.jsonl"
    assert _alerts(journal, "stall") == [] and _alerts(journal, "crash") == []
    notices = _alerts(journal, "signal")
    assert len(notices) == 1 and notices[0]["severity"] == "warn" and notices[0]["step"] == 100, notices
    assert "received SIGTERM" in notices[0]["title"] and "keeps watching" in notices[0]["text"]
    assert res["user_sigterm_calls"] == [signal.SIGTERM]  # the program's handler ran, once
    left = res["leftovers"]
    assert left["threads"] == [] and left["wakeup_fd"] == -1, left
    assert left["sigterm"] == "main.<locals>.<lambda>" and left["sigint"] == "default_int_handler", left
    assert "CrashReporter" not in left["excepthook"] + left["thread_excepthook"], left
    assert not [c for c in left["children"] if "guardian" in c or c == "zombie"], left


def _launch(tmp_path: Path, url: str, *args: str, alerts: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "TEST_SLACK_WEBHOOK": url}
    env.pop("WANDB_API_KEY", None)
    return subprocess.Popen([sys.executable, str(SCRIPT), "--kind", "grpo", "--out", str(tmp_path), "--every", "0",
                             "--alerts", str(alerts or _rules_file(tmp_path)), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _guardian(p: subprocess.Popen) -> psutil.Process:
    """The training process's guardian, once on_train_begin started it."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 240 and p.poll() is None:
        for child in psutil.Process(p.pid).children():
            try:
                if "wandb_rlcluster.guard.guardian" in " ".join(child.cmdline()):
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


@pytest.mark.trains
def test_exception_in_a_reward_function_sends_one_crash_alert(tmp_path: Path, slack_server):  # noqa: F811
    url, bodies = slack_server
    p = _launch(tmp_path, url, "--max-steps", "30", "--save-steps", "3", "--fault", "raise:4")
    guardian = _guardian(p)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1  # the user's exception still ends the script as it would have
    assert err.count("Traceback (most recent call last)") == 1 and "RuntimeError: reward server unreachable" in err
    journal = tmp_path / "trainer" / "alerts.jsonl"
    crashes = _alerts(journal, "crash")
    assert len(crashes) == 1, crashes
    c = crashes[0]
    assert c["step"] == 4 and c["metric"] == "exception" and c["severity"] == "stop"
    assert "RuntimeError: reward server unreachable at step 4 (api_key=***)" in c["title"]
    assert "sk-test-not-a-real-key" not in json.dumps(c)
    assert "run_trainer.py" in c["text"] and "checkpoint-3 (step 3)" in c["text"]
    run = read_offline_run(find_run_dirs(tmp_path)[-1])
    assert [a["level"] for a in run.alerts if str(a["title"]).startswith("Training crashed")] == ["ERROR"]
    assert len(_slack_titles(bodies, "Training crashed")) == 1
    _one_outcome_each(journal, "crash")
    guardian.wait(10)  # the guardian saw the training process report its own crash: silent, and gone
    assert not guardian.is_running()


@pytest.mark.trains
def test_sigterm_mid_run_sends_one_crash_alert_naming_the_last_checkpoint(tmp_path: Path, slack_server):  # noqa: F811
    """The W&B run's finish takes 2 s here (an online run's final upload): the training thread waits meanwhile, so
    nothing logs to a finished run (no W&B error, no traceback)."""
    url, bodies = slack_server
    p = _launch(tmp_path, url, "--max-steps", "500", "--save-steps", "5", "--slow-finish", "2",
                alerts=_rules_file(tmp_path, crash_timeout="15s"))
    guardian = _guardian(p)
    _wait_for_checkpoint(tmp_path, p, 5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM  # died by the signal, as without rlcluster
    assert "Traceback" not in err and "Error" not in err, err[-3000:]
    journal = tmp_path / "trainer" / "alerts.jsonl"
    crashes = _alerts(journal, "crash")
    assert len(crashes) == 1, (crashes, err[-2000:])
    c = crashes[0]
    assert c["metric"] == "signal" and "SIGTERM" in c["title"] and "preemption?" in c["title"]
    ckpt = last_checkpoint(tmp_path / "trainer")
    assert ckpt is not None and f"Last checkpoint: {ckpt[0]} (step {ckpt[1]})" in c["text"]
    assert len(_slack_titles(bodies, "Training stopped by SIGTERM")) == 1
    _one_outcome_each(journal, "crash")
    run = read_offline_run(find_run_dirs(tmp_path)[-1])  # the W&B run was finished (failed, 128+15) before dying
    assert [a["title"] for a in run.alerts].count(c["title"]) == 1 and run.exit_code == 143
    guardian.wait(10)
    assert not guardian.is_running()


@pytest.mark.trains
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
    journal = tmp_path / "trainer" / "alerts.jsonl"
    crashes = _alerts(journal, "crash")
    assert len(crashes) == 1, crashes
    c = crashes[0]
    assert c["step"] >= 5 and "guardian" in c["text"] and "not in W&B" in c["text"]
    ckpt = last_checkpoint(tmp_path / "trainer")
    assert ckpt is not None and f"Last checkpoint: {ckpt[0]}" in c["text"]
    _one_outcome_each(journal, "crash")
    assert "rlcluster guardian: training process" in err and "sent to: slack" in err


@pytest.mark.trains
def test_fork_pool_rewards_caught_exceptions_and_retries(tmp_path: Path, slack_server):  # noqa: F811
    """tests/scripts/liveness_lifecycle.py: a GRPO run scoring in a fork Pool finishes, with nothing left; a train()
    whose exception the caller catches is reported once and stops everything; a retry with a new callback that
    fails before its first step is reported once, with its exception, and the guardian stays silent."""
    url, bodies = slack_server
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONUNBUFFERED": "1", "TEST_SLACK_WEBHOOK": url}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.run([sys.executable, str(LIFECYCLE), str(tmp_path / "out"),
                        str(_rules_file(tmp_path, floor="10s"))], env=env, capture_output=True, text=True,
                       timeout=400)
    phases = {d["phase"]: d for d in (json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"'))}
    assert list(phases) == ["pool", "caught", "retry"], (p.stdout, p.stderr[-3000:])
    assert p.returncode == 1 and p.stderr.count("Traceback (most recent call last)") == 1, p.stderr[-3000:]
    assert "FileNotFoundError: shard s3://bucket/train-00001.parquet not found" in p.stderr
    assert phases["pool"]["global_step"] == 4 and phases["caught"]["global_step"] == 2
    for phase in ("pool", "caught"):  # nothing of rlcluster left, after a clean end and after a caught exception
        left = phases[phase]["leftovers"]
        assert left["threads"] == [] and left["wakeup_fd"] == -1 and left["sigterm"] == "0", (phase, left)
        assert "CrashReporter" not in left["excepthook"] + left["thread_excepthook"], (phase, left)
        assert not [c for c in left["children"] if "guardian" in c or c == "zombie"], (phase, left)
    journal = tmp_path / "out" / "trainer" / "alerts.jsonl"
    crashes = _alerts(journal, "crash")
    assert [(c["metric"], c["step"]) for c in crashes] == [("ended", 2), ("exception", 0)], crashes
    ended, failed = crashes
    assert ended["title"].startswith("Training ended without finishing after step 2: RuntimeError: reward server "
                                     "down (token=***)"), ended
    assert "the caller caught the exception" in ended["text"] and "abc123secret" not in json.dumps(ended)
    assert failed["title"].startswith("Training crashed after step 0: FileNotFoundError: shard "), failed
    assert not _slack_titles(bodies, "Training process died")  # the guardian knew the interpreter exited
    assert len(_slack_titles(bodies, "Training ended without finishing")) == 1
    assert len(_slack_titles(bodies, "Training crashed")) == 1
    _one_outcome_each(journal, "crash")


@pytest.mark.trains
def test_torchrun_rank_death_is_reported_once_by_rank_0(tmp_path: Path, slack_server):  # noqa: F811
    """Two ranks (gloo, CPU); rank 1 is killed with SIGKILL mid-run. Only rank 0 watches (one guardian in all), its
    collective fails, and it sends one crash alert; when torchrun is done, no guardian is left."""
    url, bodies = slack_server
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "TEST_SLACK_WEBHOOK": url, "PYTHONPATH": str(SRC)}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(30500 + os.getpid() % 1000), str(SCRIPT), "--kind", "grpo", "--out", str(tmp_path),
                          "--every", "0", "--max-steps", "400", "--save-steps", "5", "--alerts",
                          str(_rules_file(tmp_path))], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        _wait_for_checkpoint(tmp_path, p, 5)
        ranks = {int(c.environ().get("RANK", -1)): c for c in psutil.Process(p.pid).children()}
        guardians = [g for r in ranks.values() for g in r.children()
                     if "wandb_rlcluster.guard.guardian" in " ".join(g.cmdline())]
        assert sorted(ranks) == [0, 1] and [g.ppid() for g in guardians] == [ranks[0].pid], (ranks, guardians)
        ranks[1].kill()
        _, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    crashes = _alerts(tmp_path / "trainer" / "alerts.jsonl", "crash")
    assert len(crashes) == 1 and crashes[0]["step"] >= 5, (crashes, err[-3000:])
    assert len(_slack_titles(bodies, crashes[0]["title"][:60])) == 1
    _one_outcome_each(tmp_path / "trainer" / "alerts.jsonl", "crash")
    guardians[0].wait(15)
    assert not guardians[0].is_running()
