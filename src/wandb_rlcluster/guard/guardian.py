"""The guardian: a small watcher process that reports a training process's hard death.

``kill -9``, the kernel's OOM killer and ``os._exit`` leave a process no chance to say anything,
so the callback starts (opt-out: ``guardian=False``) this watcher beside it. The two share a
pipe whose write end only the training process holds: when that process dies, however it
dies, the kernel closes the write end and the guardian reads end-of-file. Before that the
training process writes its last step now and then and, at the end, ``clean`` (training
finished), ``reported`` (it sent its own crash notice: no duplicate) or ``exit`` (the interpreter
exited normally: its exit hooks ran, so it was no hard death); the guardian then exits silently.
End-of-file without any of them means a hard death: the guardian journals the ``crash``
alert in ``alerts.jsonl`` and sends it through the direct channels (Slack, e-mail). It cannot
use the dead process's W&B run, and the alert says so.

The guardian imports neither torch nor wandb (no GPU, ~20 MB), ignores SIGINT/SIGTERM (a
Ctrl-C or a preemption is the training process's to report), and exits as soon as it knows
the outcome, leaving nothing running. A process forked from the training process (a
multiprocessing pool, DataLoader workers) closes its copy of the write end at once. Run as
``python -m wandb_rlcluster.guard.guardian FD``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("wandb_rlcluster")

STEP_EVERY = 1.0  # seconds between two step updates on the pipe
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_running: weakref.WeakSet[Guardian] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for g in list(_running):
        g._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Guardian:
    """The training process's side: starts the watcher and holds the write end of its pipe.

    Args:
        config: what the watcher needs to speak for a dead process: ``journal``, ``output_dir``,
            ``run_name``, ``channels`` (name -> {type, options, min_severity}; secrets stay in
            environment variables, which the watcher inherits), ``timeout``, ``since`` and ``start_step``
            (which checkpoints are this training's).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None
        self.owner = os.getpid()
        self._w = -1
        self._last_sent = -1.0
        self._last_step = -1

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> bool:
        if not sys.executable:
            logger.warning("rlcluster: no Python executable to start the guardian with; a kill -9 will go unreported")
            return False
        r, w = os.pipe()  # both ends non-inheritable (PEP 446): only the guardian gets r, via pass_fds
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "wandb_rlcluster.guard.guardian", str(r)], pass_fds=(r,),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True, env=env, close_fds=True)
        except OSError as e:
            os.close(r)
            os.close(w)
            logger.warning("rlcluster: could not start the guardian (%s); a kill -9 will go unreported", e)
            return False
        os.close(r)
        self._w = w
        self.owner = os.getpid()
        self._send({"config": self.config})
        os.set_blocking(w, False)  # from here on a full pipe drops a step update instead of blocking training
        _running.add(self)
        atexit.register(self._at_exit)  # a normal interpreter exit is no hard death, whatever came before
        return True

    def step(self, step: int, now: float) -> None:
        """Called every step; writes at most once per STEP_EVERY seconds."""
        if self._w != -1 and step != self._last_step and now - self._last_sent >= STEP_EVERY:
            self._last_sent = now
            self._last_step = step
            self._send({"step": step})

    def reported(self, wait: float = 0.5) -> None:
        """The training process sent its own crash notice: the guardian exits silently, and is reaped here."""
        self.finish("reported", wait)

    def close(self, wait: float = 2.0) -> None:
        """Training ended cleanly: the guardian exits, and is reaped here."""
        self.finish("clean", wait)

    def finish(self, outcome: str, wait: float = 2.0) -> None:
        """Tell the guardian how training ended (it exits without a word) and reap it (bounded)."""
        if os.getpid() != self.owner:
            return
        self._send({"end": outcome})
        if self._w != -1:
            with contextlib.suppress(OSError):
                os.close(self._w)
            self._w = -1
        atexit.unregister(self._at_exit)
        _running.discard(self)
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(wait, 1.0))

    def _at_exit(self) -> None:
        if os.getpid() == self.owner and self._w != -1:
            self._send({"end": "exit"})
            with contextlib.suppress(OSError):
                os.close(self._w)
            self._w = -1

    def _forked(self) -> None:
        """In a forked child: close the copy of the write end, speak for nobody."""
        if self._w != -1:
            with contextlib.suppress(OSError):
                os.close(self._w)
        self._w = -1
        self.proc = None

    def _send(self, message: dict[str, Any]) -> None:
        if self._w == -1 or os.getpid() != self.owner:
            return
        with contextlib.suppress(OSError):  # a guardian that is gone or behind must never stall training
            os.write(self._w, (json.dumps(message, default=str) + "\n").encode())


# -- the watcher process ---------------------------------------------------------------------------------


def _watch(fd: int) -> tuple[dict[str, Any] | None, int, str | None]:
    """Read the pipe until the outcome is known: (config, last step, 'clean' | 'reported' | None for a death)."""
    parent = os.getppid()
    config: dict[str, Any] | None = None
    step, end = 0, None
    buf = b""
    while end is None:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            if os.getppid() != parent:  # re-parented: the trainer died while a forked child still holds the pipe
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break  # end-of-file: every holder of the write end is gone
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "config" in msg:
                config = msg["config"]
            elif "step" in msg:
                step = int(msg["step"])
            elif "end" in msg:
                end = str(msg["end"])
    return config, step, end


def report_death(config: dict[str, Any], step: int, parent: int) -> list[str]:
    """Journal and send the crash alert for a dead training process; the channels it went to."""
    from ..alerts.config import AlertConfig, ChannelConfig
    from ..alerts.engine import AlertEvent
    from ..alerts.notify import Notifier
    from .crash import checkpoint_sentence

    run_name = config.get("run_name") or "this run"
    channels = {name: ChannelConfig(name=name, type=c["type"], options=dict(c.get("options") or {}),
                                    min_severity=c.get("min_severity", "warn"))
                for name, c in (config.get("channels") or {}).items()}
    ckpt = checkpoint_sentence(config.get("output_dir"), since=config.get("since"),
                               start_step=int(config.get("start_step") or 0))
    title = f"Training process died at step {step} without a word (kill -9 / OOM killer?) ({run_name})"
    text = (f"The training process (pid {parent} on {socket.gethostname()}) ended without finishing training and "
            f"without reporting an error itself: most likely SIGKILL (the kernel's OOM killer, a scheduler's hard "
            f"kill, kill -9) or os._exit. Last completed step: {step}. "
            f"{ckpt} "
            "Sent by the rlcluster guardian process: the training process's W&B run cannot be reached any more, so "
            "this alert is not in W&B. Look for an OOM kill in `dmesg` or the job log.")
    event = AlertEvent(kind="firing", rule="crash", gauge="process", severity="stop", step=step, value=None,
                       metric="", title=title, text=text, notify=True, cooldown=0.0, time=time.time())
    notifier = Notifier(AlertConfig(rules=[], channels=channels), config.get("journal"), use_wandb=False)
    notifier.run_fields = {"run_name": config.get("run_name") or ""}
    notifier.handle([event])
    notifier.close(float(config.get("timeout", 10.0)))
    return list(notifier.dispatchers)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # the training process's to report; we wait for its outcome
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    try:
        fd = int(args[0])
    except (IndexError, ValueError):
        print("usage: python -m wandb_rlcluster.guard.guardian FD (started by RLClusterCallback)", file=sys.stderr)
        return 2
    parent = os.getppid()
    config, step, end = _watch(fd)
    if end is not None or config is None:
        return 0
    step = step or int(config.get("start_step") or 0)  # died before its first step after a resume
    logging.basicConfig(level=logging.WARNING, format="rlcluster guardian: %(message)s")
    try:
        sent = report_death(config, step, parent)
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        print(f"rlcluster guardian: could not report the death of process {parent}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    print(f"rlcluster guardian: training process {parent} died at step {step} without a clean end; crash alert "
          f"journaled in {config.get('journal')} and sent to: {', '.join(sent) or 'no direct channel configured'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
