"""The crash notice: one alert when training ends without ``on_train_end``, however it ends.

transformers has no exception event and callbacks get no trainer reference, so the ways a
training process dies are caught where Python exposes them, each chained to what was there
before and restored when training ends cleanly:

- an exception that escapes ``train()``: ``sys.excepthook`` (and ``threading.excepthook`` when
  training runs in another thread), reported before the previous hook prints the traceback;
  ``KeyboardInterrupt`` (Ctrl-C) is such an exception: SIGINT's default handler is left alone;
- SIGTERM (preemption, ``scancel``, a job time limit), and SIGINT when the program set its own
  handler: see :class:`CrashReporter` for how a signal is told without ever waiting inside a
  signal handler;
- interpreter exit without ``on_train_end`` (``sys.exit`` inside training): ``atexit``,
  registered after W&B's so the run is still alive.

A train() that raises into a caller who catches it (a notebook, a retry loop) reaches none of
these: the liveness monitor notices that ``Trainer.train`` has left the stack (see liveness.py).

One reporter is armed per process (arming a new one disarms the previous one), and a process
forked while it is armed (a multiprocessing pool in a reward function, DataLoader workers)
inherits none of it: an ``os.register_at_fork`` hook gives the child back its signal handlers,
wakeup fd and exception hooks, and every hook also checks it runs in the process that armed it.
The user's exception is never swallowed and exit codes never change. Nothing here imports
torch: the guardian process reuses :func:`last_checkpoint` and :func:`redact`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import select
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
HANDOFF_WAIT = 1.0  # seconds a wakeup byte waits for the main thread's own handler before "stuck in C" is assumed
_HANDLED = 0x80  # set on the bytes our Python-level handler writes; Python's C-level handler writes the bare number
_STOP = 0  # the byte that ends the reader thread (no signal has number 0)

_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|WEBHOOK|CREDENTIAL|AUTH", re.IGNORECASE)
# a name whose words (split at _ - . or a camelCase hump) include one of these holds a secret: api_key,
# access_token, client_secret, aws_secret_access_key, X-Amz-Signature, sig, db_password, clientSecret
_SECRET_WORD = r"(?:api[_-]?key|key|token|secret|passw(?:or)?d|pwd|credentials?|sig|signature|auth)"
_SECRET_NAME = (r"(?<![A-Za-z0-9])(?:(?:[A-Za-z0-9]+[_.-])*(?i:" + _SECRET_WORD + r")(?:[_.-][A-Za-z0-9]+)*"
                r"|[a-z][a-z0-9]*(?:Key|Token|Secret|Password|Signature|Credentials?))(?![A-Za-z0-9])")
_SECRET_PATTERNS = (
    # user:password@host in a URL of any scheme (postgres://admin:pw@db, redis://:pw@cache, https://u:p@host)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]*:[^/\s@]+@"), r"\1***@"),
    (re.compile(r"(?i)hooks\.slack\.com/\S+"), "hooks.slack.com/***"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]+"), "xox*-***"),
    (re.compile(r"\b(?:hf|sk|ghp|gho|glpat)[-_][A-Za-z0-9_-]{16,}"), "***"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "***"),  # Google API keys
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "***"),  # AWS access key ids
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 ***"),
    # name=value, name: value, 'name': 'value', ?name=value&... (query strings), name="value"
    (re.compile("(" + _SECRET_NAME + r")(['\"]?\s*[=:]\s*['\"]?)[^\s'\"&,;)\]}]+"), r"\1\2***"),
    # "api_key sk123..." with a space: only a token-like value (12+ characters with a digit), so that
    # "invalid token provided" stays readable
    (re.compile("(" + _SECRET_NAME + r")(\s+)(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{12,}"), r"\1\2***"),
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


def last_checkpoint(output_dir: str | os.PathLike[str] | None, *, since: float | None = None,
                    start_step: int = 0) -> tuple[str, int] | None:
    """(path, step) of the newest complete ``checkpoint-<step>`` in ``output_dir`` that belongs to this training.

    Complete: transformers writes trainer_state.json last. This training's: written since ``since`` (the
    wall-clock start of this ``train()``), or the one it resumed from (a step up to ``start_step``); a
    stale ``checkpoint-900`` of an earlier run in a reused output directory is not offered.
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
        if not m or not entry.is_dir():
            continue
        try:
            written = (Path(entry.path) / "trainer_state.json").stat().st_mtime
        except OSError:
            continue
        step = int(m.group(1))
        ours = since is None or written >= since - 1.0 or 0 < step <= start_step
        if ours and (best is None or step > best[1]):
            best = (entry.path, step)
    return best


def checkpoint_sentence(output_dir: str | os.PathLike[str] | None, *, since: float | None = None,
                        start_step: int = 0) -> str:
    ckpt = last_checkpoint(output_dir, since=since, start_step=start_step)
    if ckpt is None:
        return "No checkpoint of this training exists yet: a restart begins from scratch."
    return f"Last checkpoint: {ckpt[0]} (step {ckpt[1]}); resume with resume_from_checkpoint=\"{ckpt[0]}\"."


@dataclass(frozen=True)
class Crash:
    """How training ended without ``on_train_end``."""

    how: str  # "exception" | "signal" | "exit" | "ended" (train() left the stack: the caller caught its exception)
    summary: str  # "ValueError: reward server down" | "SIGTERM" | "the process exited"
    where: str = ""  # innermost traceback frame of an exception
    abrupt: bool = False  # the process ends by a signal's default action: no atexit, no W&B finish of its own


def describe_exception(exc: BaseException, how: str = "exception") -> Crash:
    message = clean_text(" ".join(redact(str(exc)).split()), MAX_MESSAGE)  # one line, no control characters
    summary = f"{clean_text(type(exc).__name__, 100)}: {message}" if message else clean_text(type(exc).__name__, 100)
    where = ""
    tb = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if tb:
        last = tb[-1]
        where = clean_text(f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}", 200)
    return Crash(how, summary, where)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# -- one armed reporter per process, and none in a forked child ----------------------------------------------

_armed: CrashReporter | None = None
_leftover: list[CrashReporter] = []  # disarmed off the main thread: signal handlers still to restore on it
_main_calls: list[Any] = []  # the ctypes callbacks handed to Py_AddPendingCall (kept alive)


def _arm(reporter: CrashReporter) -> None:
    global _armed
    previous, _armed = _armed, reporter
    if previous is not None and previous is not reporter:
        previous.uninstall()  # a retry with a new callback after a train() that raised: one reporter, one notice
    _tidy_leftovers()


def _tidy_leftovers() -> None:
    """On the main thread: restore the signal handlers and wakeup fd of reporters disarmed off the main thread.
    Takes no lock and waits for nothing (it may run between two bytecodes of the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    while _leftover:
        _leftover.pop()._restore_signals()


def _on_main_thread_soon(fn: Callable[[], None]) -> bool:
    """Have the main thread run ``fn`` at its next bytecode boundary (``Py_AddPendingCall``, where signal handlers
    run too): only the main thread may set signal handlers, and it may never call back into rlcluster."""
    try:
        import ctypes

        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        add = ctypes.PYFUNCTYPE(ctypes.c_int, proto, ctypes.c_void_p)(("Py_AddPendingCall", ctypes.pythonapi))
    except (ImportError, AttributeError, OSError, TypeError):  # not CPython
        return False

    def call(_: Any) -> int:
        with contextlib.suppress(BaseException):
            fn()
        return 0

    callback = proto(call)
    _main_calls.append(callback)
    del _main_calls[:-8]  # long since run
    return add(callback, None) == 0


def _after_fork_in_child() -> None:
    if _armed is not None:
        _armed._forked()
    for r in _leftover:
        r._forked()
    _leftover.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CrashReporter:
    """Installs the crash hooks for one training and calls ``report`` at most once.

    Signals. Python's C-level handler writes the signal number to the wakeup fd at once, and runs the
    Python-level handler only when the main thread is back in the interpreter. So the handler here never
    waits and never takes a lock (the main thread may be holding the one the notice needs): it writes a byte
    to a pipe a reader thread watches, then does at once what would have happened without rlcluster (the
    program's own handler), and returns. The reader does the rest:

    - a signal whose previous disposition was the default (SIGTERM): the notice (bounded by ``timeout``,
      while training goes on and releases its locks), then the main thread is parked in the handler, the
      W&B run is finished (``finish``) and the process dies by the signal, as it would have without us;
    - a signal the program handles itself (its own SIGTERM handler, a SIGINT handler): ``notice`` once,
      and monitoring goes on;
    - a wakeup byte whose handler does not follow within ``HANDOFF_WAIT`` while the main thread has not
      moved: the main thread is stuck in C (a hung collective), and the reader acts for it. A byte whose
      handler does not follow while the main thread runs on was not ours (another handler took the
      signal); it is ignored. If something else takes the wakeup fd (an asyncio loop), the handler's own
      byte still reaches the reader.

    Args:
        report: sends the crash notice (journal, W&B, channels); runs on a helper thread, bounded.
        finish: finishes the W&B run before a signal's default action ends the process (no atexit then).
        notice: tells that the program's own handler took a signal (the signal's name, and whether the
            training thread was stuck in C when it came).
        timeout: the longest a dying process waits for its notice (and the W&B finish).
        thread: ident of the thread that runs training (its exceptions are the crashes).
    """

    def __init__(self, report: Callable[[Crash], None], *, finish: Callable[[Crash], None] | None = None,
                 notice: Callable[[str, bool], None] | None = None, timeout: float = 10.0,
                 thread: int | None = None) -> None:
        self._report_fn = report
        self._finish_fn = finish
        self._notice_fn = notice
        self.timeout = timeout
        self.thread = thread if thread is not None else threading.get_ident()
        self.pid = os.getpid()
        self.installed = False
        self.clean = False
        self.reported: Crash | None = None
        self.noticed: list[str] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._prev_excepthook: Any = None
        self._prev_thread_hook: Any = None
        self._prev_handlers: dict[int, Any] = {}
        self._r = self._w = -1
        self._owns_wakeup = False
        self._reader: threading.Thread | None = None
        self._reading = False
        self._main = threading.main_thread().ident
        self._dying = 0  # the signal whose default action is coming (the reader is sending the notice), else 0
        self._park_now = False  # the notice is out: the main thread waits in the handler from here on
        self._parked = False
        self._died = threading.Event()

    # -- install / uninstall ----------------------------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        _arm(self)
        self.installed = True
        self.pid = os.getpid()
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._prev_thread_hook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        atexit.register(self._atexit)  # after wandb.init's: runs before W&B finishes the run
        if threading.current_thread() is threading.main_thread():
            self._install_signals()
        else:
            logger.info("rlcluster: training runs outside the main thread; SIGTERM is not watched "
                        "(the guardian still reports a death)")

    def _install_signals(self) -> None:
        for name in SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            prev = signal.getsignal(signum)
            if prev in (signal.SIG_IGN, None):
                continue  # ignored (or set from C): the signal does not end this process; leave it alone
            if prev is signal.default_int_handler:
                # Ctrl-C raises KeyboardInterrupt: an exception like any other (the excepthook, or train() leaving
                # the stack), and asyncio.run keeps its own Ctrl-C handling, which it installs only over this one
                continue
            try:
                signal.signal(signum, self._on_signal)
            except (ValueError, OSError):  # pragma: no cover - not the main thread / not allowed
                continue
            self._prev_handlers[signum] = prev
        if not self._prev_handlers:
            return
        try:
            r, w = os.pipe()  # non-inheritable (PEP 446); a forked child closes its copies (_forked)
            os.set_blocking(w, False)  # a full pipe drops a byte rather than blocking a signal handler
        except OSError:
            return
        self._r, self._w = r, w
        try:
            prev_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            prev_fd = None
        if prev_fd is not None and prev_fd != -1:
            # someone (an asyncio loop) owns it: give it back; our handler's own bytes still reach the reader,
            # only a main thread stuck in C goes unseen until it returns
            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(prev_fd)
        self._owns_wakeup = prev_fd == -1
        self._reading = True
        self._reader = threading.Thread(target=self._read, name="rlcluster-signals", daemon=True)
        try:
            self._reader.start()
        except RuntimeError:  # pragma: no cover - no threads at interpreter shutdown
            self._reading = False

    def uninstall(self) -> None:
        """Restore every hook that is still ours (a hook installed on top of ours stays, and ours turns inert).

        Any thread. Signal handlers and the wakeup fd can only be set on the main thread: from another thread
        they are restored at the main thread's next bytecode (until then they only pass signals on).
        """
        global _armed
        if _armed is self:
            _armed = None
        if not self.installed:
            return
        self.installed = False
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook
        if threading.excepthook == self._thread_excepthook:
            threading.excepthook = self._prev_thread_hook
        atexit.unregister(self._atexit)
        if threading.current_thread() is threading.main_thread():
            self._restore_signals()
            reader = self._reader
            if reader is not None and reader is not threading.current_thread():
                reader.join(0.5)  # it closes the pipe as it ends
        elif self._prev_handlers or self._r != -1:
            if self not in _leftover:
                _leftover.append(self)
            if not _on_main_thread_soon(_tidy_leftovers):
                logger.info("rlcluster: the signal handlers are restored when the next training starts")

    def _restore_signals(self) -> None:
        """Main thread: signal handlers and wakeup fd back as they were, then the reader ends (and closes the pipe).
        No lock, no wait: this may run between two bytecodes of the main thread."""
        if os.getpid() != self.pid:
            return
        for signum, prev in self._prev_handlers.items():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, prev)
        if self._owns_wakeup:
            with contextlib.suppress(ValueError, OSError):
                current = signal.set_wakeup_fd(-1)
                if current not in (-1, self._w):  # another owner took it since: theirs, put it back
                    signal.set_wakeup_fd(current)
            self._owns_wakeup = False
        if self._reading:
            with contextlib.suppress(OSError):
                os.write(self._w, bytes([_STOP]))
        else:
            self._close_pipe()

    def _close_pipe(self) -> None:
        if self._owns_wakeup:
            return  # Python's C handler may still write to it: an fd number must not be reused under it
        r, w, self._r, self._w = self._r, self._w, -1, -1
        for fd in (w, r):
            if fd != -1:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _forked(self) -> None:
        """In a child forked while armed: inherit nothing active (handlers, wakeup fd, hooks, pipe)."""
        self.installed = False
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook
        if threading.excepthook == self._thread_excepthook:
            threading.excepthook = self._prev_thread_hook
        atexit.unregister(self._atexit)
        for signum, prev in self._prev_handlers.items():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, prev)
        if self._owns_wakeup:
            with contextlib.suppress(ValueError, OSError):
                current = signal.set_wakeup_fd(-1)
                if current not in (-1, self._w):
                    signal.set_wakeup_fd(current)
        for fd in (self._w, self._r):  # the child's copies
            if fd != -1:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._r = self._w = -1
        self._reader = None
        self._reading = False
        self._owns_wakeup = False

    def mark_clean(self) -> None:
        """``on_train_end`` came: nothing to report, hooks off (unless a signal is already ending the process)."""
        if self._dying:
            return
        self.clean = True
        self.uninstall()

    # -- reporting -------------------------------------------------------------------------------------
    def report(self, crash: Crash, timeout: float | None = None) -> bool:
        """Send the notice once (bounded wait); True if this call was the one that sent it."""
        wait = self.timeout if timeout is None else timeout
        with self._lock:
            if self.clean:
                return False
            if self.reported is not None:
                first = False
            else:
                self.reported = crash
                first = True
        if not first:
            self._done.wait(wait)  # a concurrent report (the reader and an exit hook) is on its way
            return False
        if not self._bounded(self._run_report, crash, wait):
            logger.warning("rlcluster: the crash notice did not finish within %.0f s; it is in the journal", wait)
        return True

    @staticmethod
    def _bounded(fn: Callable[[Crash], None], crash: Crash, wait: float) -> bool:
        """Run ``fn(crash)`` on a helper thread and wait at most ``wait`` seconds; True if it finished."""
        t = threading.Thread(target=fn, args=(crash,), name="rlcluster-crash-notice", daemon=True)
        try:
            t.start()
        except RuntimeError:  # no new threads at interpreter shutdown (3.12+): from here, unbounded
            fn(crash)
            return True
        t.join(max(0.0, wait))
        return not t.is_alive()

    def _run_report(self, crash: Crash) -> None:
        try:
            self._report_fn(crash)
        except Exception as e:  # noqa: BLE001 - never raise while the process is going down
            logger.warning("rlcluster: sending the crash notice failed (%s: %s)", type(e).__name__, e)
        finally:
            self._done.set()

    def _run_finish(self, crash: Crash) -> None:
        try:
            if self._finish_fn is not None:
                self._finish_fn(crash)
        except Exception as e:  # noqa: BLE001
            logger.warning("rlcluster: could not finish the W&B run before the process ends (%s: %s)",
                           type(e).__name__, e)

    # -- exception and exit hooks ------------------------------------------------------------------------
    def _ours(self) -> bool:
        return self.installed and os.getpid() == self.pid

    def _excepthook(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            if self._ours() and self.thread == threading.main_thread().ident:
                self.report(describe_exception(exc))
        finally:
            prev = self._prev_excepthook or sys.__excepthook__
            prev(exc_type, exc, tb)

    def _thread_excepthook(self, args: Any) -> None:
        try:
            thread = getattr(args, "thread", None)
            if self._ours() and thread is not None and thread.ident == self.thread and args.exc_value is not None:
                self.report(describe_exception(args.exc_value))
        finally:
            prev = self._prev_thread_hook or threading.__excepthook__
            prev(args)

    def _atexit(self) -> None:
        if os.getpid() != self.pid:
            return
        if self._dying:
            # a signal is ending the process on the reader thread: the interpreter must not exit (status 1 after an
            # exception, 0 after sys.exit) before the reader's kill lands; wait here, then die by it ourselves
            self._died.wait(self.timeout + 5.0)
            self._die_by(self._dying)
            return
        if self.installed and not self.clean and self.reported is None:
            self.report(Crash("exit", "the process exited while training was still running"))

    # -- signals: the main-thread handler (never waits, never locks) ---------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        if not self._ours():  # disarmed or a forked child: exactly what was there before us
            if os.getpid() == self.pid:
                _tidy_leftovers()
            self._pass_on(prev, signum, frame)
            return
        if self._dying:  # the reader is already ending the process for this signal
            if self._park_now:
                self._park(signum)
            return
        handed = False
        if self._reading and self._w != -1:
            try:
                os.write(self._w, bytes([signum | _HANDLED]))
                handed = True
            except OSError:  # the pipe is full or gone: no reader to tell
                handed = False
        if callable(prev):
            prev(signum, frame)  # the program's own handler, at once, as without rlcluster
        elif prev == signal.SIG_DFL and not handed:
            self._die_by(signum)  # nobody to send the notice: the default action, as without rlcluster

    @classmethod
    def _pass_on(cls, prev: Any, signum: int, frame: FrameType | None) -> None:
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL:
            cls._die_by(signum)

    def _park(self, signum: int) -> None:
        """The main thread waits here while the reader finishes the W&B run and ends the process: training code
        must not run (and log to a finished run) meanwhile. The notice is out already; if the reader never ends
        the process, the default action comes from here."""
        self._parked = True
        end = time.monotonic() + self.timeout + 10.0
        while time.monotonic() < end:
            time.sleep(0.2)
        self._die_by(signum)

    # -- signals: the reader thread -----------------------------------------------------------------------------
    def _read(self) -> None:
        fd = self._r
        pending: dict[int, list[tuple[float, Any]]] = {}  # wakeup bytes waiting for their handler's byte
        early: dict[int, int] = {}  # signals acted on for a main thread stuck in C, whose handler may still come
        try:
            while True:
                timeout = None
                if pending:
                    first = min(t for waiting in pending.values() for t, _ in waiting)
                    timeout = max(0.0, first + HANDOFF_WAIT - time.monotonic())
                ready, _, _ = select.select([fd], [], [], timeout)
                data = os.read(fd, 512) if ready else b""
                if ready and not data:
                    return
                for byte in data:
                    if byte == _STOP:
                        return
                    if byte & _HANDLED:
                        signum = byte & ~_HANDLED
                        if pending.get(signum):
                            pending[signum].pop(0)
                        if early.get(signum):
                            early[signum] -= 1
                            continue
                        self._act(signum, stuck=False)
                    elif byte in self._prev_handlers:
                        pending.setdefault(byte, []).append((time.monotonic(), self._main_position()))
                now = time.monotonic()
                for signum, waiting in pending.items():
                    while waiting and now - waiting[0][0] >= HANDOFF_WAIT:
                        _, position = waiting.pop(0)
                        if self._handler_is_ours(signum) and position is not None \
                                and position == self._main_position():
                            early[signum] = early.get(signum, 0) + 1
                            self._act(signum, stuck=True)
                        # else the main thread ran on and our handler did not: another handler took the signal
        except (OSError, ValueError):
            return
        finally:
            self._reading = False
            self._close_pipe()

    def _main_position(self) -> tuple[int, int, int] | None:
        frame = sys._current_frames().get(self._main) if self._main is not None else None
        if frame is None:
            return None
        try:
            return id(frame), id(frame.f_code), frame.f_lasti
        finally:
            del frame

    def _handler_is_ours(self, signum: int) -> bool:
        try:
            return signal.getsignal(signum) == self._on_signal
        except (ValueError, OSError):  # pragma: no cover
            return False

    def _act(self, signum: int, *, stuck: bool) -> None:
        if not self._ours() or self.clean:
            return
        prev = self._prev_handlers.get(signum)
        name = signal_name(signum)
        if prev == signal.SIG_DFL:
            self._die_of(signum, stuck=stuck)
        elif name not in self.noticed:
            self.noticed.append(name)  # once per signal and training: a program may send itself many
            if self._notice_fn is not None:
                try:
                    self._notice_fn(name, stuck)
                except Exception as e:  # noqa: BLE001
                    logger.warning("rlcluster: the signal notice failed (%s: %s)", type(e).__name__, e)

    def _die_of(self, signum: int, *, stuck: bool) -> None:
        """Notice, then park the main thread, finish the W&B run, and the signal's default action."""
        start = time.monotonic()
        deadline = start + self.timeout
        self._dying = signum
        crash = Crash("signal", signal_name(signum), abrupt=True)
        self.report(crash, timeout=max(0.5, self.timeout - min(3.0, self.timeout / 3)))
        self._park_now = True
        if not stuck and self._handler_is_ours(signum) and self._main is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                signal.pthread_kill(self._main, signum)  # a real signal: it interrupts a sleep or a lock wait
            until = time.monotonic() + HANDOFF_WAIT
            while not self._parked and time.monotonic() < until:
                time.sleep(0.01)
        if self._finish_fn is not None:
            self._bounded(self._run_finish, crash, max(0.5, deadline - time.monotonic()))
        self._died.set()
        self._die_by(signum)

    @staticmethod
    def _die_by(signum: int) -> None:
        """The default action of ``signum``: the process ends by that signal, as it would have without us."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, signal.SIG_DFL)
        else:
            # signal.signal() is main-thread only; reset the disposition through the C library instead. The
            # process's own symbols include libc's: ctypes.util.find_library would run ldconfig in a subprocess
            # first, a fork from a dying, threaded process (and time in which the main thread may exit with 1)
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
            libc.signal(signum, None)  # SIG_DFL is the null handler
        with contextlib.suppress(AttributeError, OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the signal is on its way; do not return into code that thinks it is still running
