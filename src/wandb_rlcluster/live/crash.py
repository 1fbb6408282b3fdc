"""The crash notice: one alert when training ends without ``on_train_end``, however it ends.

transformers has no exception event and callbacks get no trainer reference, so the ways a
training process dies are caught where Python exposes them, each chained to what was there
before and restored when training ends cleanly:

- an exception that escapes ``train()``: ``sys.excepthook`` (and ``threading.excepthook`` when
  training runs in another thread), reported before the previous hook prints the traceback;
- SIGTERM / SIGINT (preemption, ``scancel``, Ctrl-C): a handler on the main thread, plus a
  wakeup-fd reader thread so the notice goes out even while the main thread is stuck in C
  (a hung collective); then the previous handler runs, or the default action happens (the
  process still dies by the signal: same exit status as without rlcluster);
- interpreter exit without ``on_train_end`` (``sys.exit`` inside training, an exception caught
  by the caller): ``atexit``, registered after W&B's so the run is still alive.

Whatever the path, :meth:`CrashReporter.report` runs once per training, on a helper thread
joined for at most ``timeout`` seconds, so a dead endpoint cannot keep a dying process alive.
The user's exception is never swallowed and exit codes never change. Nothing here imports
torch: the guardian process reuses :func:`last_checkpoint` and :func:`redact`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from ..core.text import clean_text

logger = logging.getLogger("wandb_rlcluster")

SIGNALS = ("SIGTERM", "SIGINT")
MAX_MESSAGE = 400
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|WEBHOOK|CREDENTIAL|AUTH", re.IGNORECASE)
_SECRET_PATTERNS = (
    (re.compile(r"(?i)\b(https?://)[^/\s:@]+:[^/\s@]+@"), r"\1***@"),  # user:password@host
    (re.compile(r"(?i)hooks\.slack\.com/\S+"), "hooks.slack.com/***"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]+"), "xox*-***"),
    (re.compile(r"\b(?:hf|sk|ghp|gho|glpat)[-_][A-Za-z0-9_-]{16,}"), "***"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 ***"),
    (re.compile(r"(?i)\b(api[_-]?key|token|secret|password|passwd)(\s*[=:]\s*)[^\s)\]}'\",;]+"), r"\1\2***"),
)


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with secrets masked: values of secret-looking environment variables and common token shapes."""
    env = os.environ if environ is None else environ
    values = sorted((v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= 6), key=len, reverse=True)
    for v in values:
        text = text.replace(v, "***")
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def last_checkpoint(output_dir: str | os.PathLike[str] | None) -> tuple[str, int] | None:
    """(path, step) of the newest complete ``checkpoint-<step>`` in ``output_dir``.

    Complete: transformers writes trainer_state.json last.
    """
    if not output_dir:
        return None
    best: tuple[str, int] | None = None
    try:
        entries = list(os.scandir(output_dir))
    except OSError:
        return None
    for entry in entries:
        m = re.fullmatch(r"checkpoint-(\d+)", entry.name)
        if m and entry.is_dir() and (Path(entry.path) / "trainer_state.json").is_file():
            step = int(m.group(1))
            if best is None or step > best[1]:
                best = (entry.path, step)
    return best


def checkpoint_sentence(output_dir: str | os.PathLike[str] | None) -> str:
    ckpt = last_checkpoint(output_dir)
    if ckpt is None:
        return "No checkpoint exists yet: a restart begins from scratch."
    return f"Last checkpoint: {ckpt[0]} (step {ckpt[1]}); resume with resume_from_checkpoint=\"{ckpt[0]}\"."


@dataclass(frozen=True)
class Crash:
    """How training ended without ``on_train_end``."""

    how: str  # "exception" | "signal" | "exit"
    summary: str  # "ValueError: reward server down" | "SIGTERM" | "the process exited"
    where: str = ""  # innermost traceback frame of an exception
    abrupt: bool = False  # the process ends by a signal's default action: no atexit, no W&B finish of its own


def describe_exception(exc: BaseException) -> Crash:
    message = clean_text(" ".join(redact(str(exc)).split()), MAX_MESSAGE)  # one line, no control characters
    summary = f"{clean_text(type(exc).__name__, 100)}: {message}" if message else clean_text(type(exc).__name__, 100)
    where = ""
    tb = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if tb:
        last = tb[-1]
        where = clean_text(f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}", 200)
    return Crash("exception", summary, where)


class CrashReporter:
    """Installs the crash hooks for one training and calls ``report`` at most once.

    Args:
        report: sends the notice (journal, W&B, channels); runs on a helper thread.
        timeout: the longest a dying process waits for ``report``.
        thread: ident of the thread that runs training (its exceptions are the crashes).
    """

    def __init__(self, report: Callable[[Crash], None], *, timeout: float = 10.0, thread: int | None = None) -> None:
        self._report_fn = report
        self.timeout = timeout
        self.thread = thread if thread is not None else threading.get_ident()
        self.installed = False
        self.clean = False
        self.reported: Crash | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._prev_excepthook: Any = None
        self._prev_thread_hook: Any = None
        self._prev_handlers: dict[int, Any] = {}
        self._wakeup_r = -1
        self._wakeup_w = -1
        self._reader: threading.Thread | None = None

    # -- install / uninstall ----------------------------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._prev_thread_hook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        atexit.register(self._atexit)  # after wandb.init's: runs before W&B finishes the run
        if threading.current_thread() is threading.main_thread():
            self._install_signals()
        else:
            logger.info("rlcluster: training runs outside the main thread; SIGTERM/SIGINT are not watched "
                        "(the guardian still reports a death)")

    def _install_signals(self) -> None:
        for name in SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            prev = signal.getsignal(signum)
            if prev in (signal.SIG_IGN, None):
                continue  # ignored (or set from C): the signal does not end this process; leave it alone
            try:
                signal.signal(signum, self._on_signal)
            except (ValueError, OSError):  # pragma: no cover - not the main thread / not allowed
                continue
            self._prev_handlers[signum] = prev
        if not self._prev_handlers:
            return
        # The Python-level handler runs only when the main thread is back in the interpreter; a main thread stuck
        # in C (a hung NCCL call) would delay it forever. Python's C handler also writes the signal number to the
        # wakeup fd at once: a reader thread there sends the notice, then lets the default action happen.
        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
            prev_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            return
        if prev_fd != -1:  # someone (an asyncio loop) owns it: give it back and rely on the handler alone
            signal.set_wakeup_fd(prev_fd)
            os.close(r)
            os.close(w)
            return
        self._wakeup_r, self._wakeup_w = r, w
        self._reader = threading.Thread(target=self._read_wakeup, name="rlcluster-signals", daemon=True)
        self._reader.start()

    def uninstall(self) -> None:
        """Restore every hook that is still ours (a hook installed on top of ours stays, and ours turns inert)."""
        if not self.installed:
            return
        self.installed = False
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook
        if threading.excepthook == self._thread_excepthook:
            threading.excepthook = self._prev_thread_hook
        atexit.unregister(self._atexit)
        if threading.current_thread() is threading.main_thread():
            for signum, prev in self._prev_handlers.items():
                try:
                    if signal.getsignal(signum) == self._on_signal:
                        signal.signal(signum, prev)
                except (ValueError, OSError):  # pragma: no cover
                    pass
            if self._wakeup_w != -1:
                with contextlib.suppress(ValueError, OSError):
                    signal.set_wakeup_fd(-1)
        self._prev_handlers = {}
        for fd in (self._wakeup_w, self._wakeup_r):  # the reader sees EOF/EBADF and ends
            if fd != -1:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wakeup_r = self._wakeup_w = -1

    def mark_clean(self) -> None:
        """``on_train_end`` came: nothing to report, hooks off."""
        self.clean = True
        self.uninstall()

    # -- reporting -------------------------------------------------------------------------------------
    def report(self, crash: Crash) -> bool:
        """Send the notice once (bounded wait); True if this call was the one that sent it."""
        with self._lock:
            if self.clean or self.reported is not None:
                first = False
            else:
                self.reported = crash
                first = True
        if not first:
            self._done.wait(self.timeout)  # a concurrent report (signal + reader thread) is on its way
            return False
        t = threading.Thread(target=self._run_report, args=(crash,), name="rlcluster-crash-notice", daemon=True)
        try:
            t.start()
        except RuntimeError:  # no new threads at interpreter shutdown (3.12+): send from here, still bounded
            self._run_report(crash)
            return True
        t.join(self.timeout)
        if t.is_alive():
            logger.warning("rlcluster: the crash notice did not finish within %.0f s; it is in the journal",
                           self.timeout)
        return True

    def _run_report(self, crash: Crash) -> None:
        try:
            self._report_fn(crash)
        except Exception as e:  # noqa: BLE001 - never raise while the process is going down
            logger.warning("rlcluster: sending the crash notice failed (%s: %s)", type(e).__name__, e)
        finally:
            self._done.set()

    # -- the hooks ---------------------------------------------------------------------------------------
    def _excepthook(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            if self.installed and self.thread == threading.main_thread().ident:
                self.report(describe_exception(exc))
        finally:
            prev = self._prev_excepthook or sys.__excepthook__
            prev(exc_type, exc, tb)

    def _thread_excepthook(self, args: Any) -> None:
        try:
            thread = getattr(args, "thread", None)
            if self.installed and thread is not None and thread.ident == self.thread and args.exc_value is not None:
                self.report(describe_exception(args.exc_value))
        finally:
            prev = self._prev_thread_hook or threading.__excepthook__
            prev(args)

    def _signal_name(self, signum: int) -> str:
        try:
            return signal.Signals(signum).name
        except ValueError:
            return f"signal {signum}"

    def _signal_crash(self, signum: int) -> Crash:
        return Crash("signal", self._signal_name(signum), abrupt=self._prev_handlers.get(signum) == signal.SIG_DFL)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Python-level handler (main thread): notice first, then what would have happened without us."""
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        if prev == signal.SIG_DFL and self._reader is not None and self._reader.is_alive() and not self.clean:
            # The wakeup-fd reader already has this signal: it sends the notice and then ends the process. The
            # main thread must not wait for it here: it may hold a lock (a journal write) the notice needs.
            return
        if not self.clean:
            self.report(self._signal_crash(signum))
        if callable(prev):
            prev(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt, as it always did
        elif prev == signal.SIG_DFL:
            self._die_by(signum)

    def _read_wakeup(self) -> None:
        fd = self._wakeup_r
        watched = set(self._prev_handlers)
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in watched or self.clean:
                    continue
                self.report(self._signal_crash(signum))
                if self._prev_handlers.get(signum) == signal.SIG_DFL:
                    self._die_by(signum)  # the default action, whether or not the main thread is stuck in C

    @staticmethod
    def _die_by(signum: int) -> None:
        """The default action of ``signum``: the process ends by that signal, as it would have without us."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, signal.SIG_DFL)
        else:
            # signal.signal() is main-thread only; reset the disposition through the C library instead
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
            libc.signal(signum, None)  # SIG_DFL is the null handler
        with contextlib.suppress(AttributeError, OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the signal is on its way; do not return into code that thinks it is still running

    def _atexit(self) -> None:
        if self.installed and not self.clean and self.reported is None:
            self.report(Crash("exit", "the process exited while training was still running"))
