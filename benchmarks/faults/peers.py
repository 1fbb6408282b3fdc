"""The two peer monitors, rldoctor 0.2.0 and rlwatch 0.5.1, run on the recorded runs through their own entry points.

Each lives in its own venv under ``~/.cache/rlcluster-peers/<name>`` (made here with pip when missing), so neither
shares a package with this project. A small driver runs inside the peer's venv and reads the same JSONL files:

* rldoctor is an offline diagnoser (``rldoctor diagnose FILE``): whole-run verdicts with no step. What a user of it
  sees during training is the verdict on the log so far, so the driver loads every prefix of the log as a file with
  the CLI's own loader (``rl_doctor.ingest.load_run``) and runs the CLI's ``diagnose`` on it; the peer "warned at
  step s" when the prefix ending at s first carries a WARNING or CRITICAL finding. (Its ``LiveMonitor`` would do
  the same every 25 steps after 60, so on a 40-step run it would never speak: the prefix reading is its best case.)
* rlwatch is a live monitor: the driver builds its TRL callback (``rlwatch.core._build_trl_callback``, the class
  ``rlwatch.attach()`` hands a TRL user) on a monitor with the default config and feeds it every logged row through
  ``on_log``, as the trainer would; an alert is what the monitor sends (after its own cooldowns).

Each peer's finding is credited to the gauge of this project that reads the same signal, so it is scored alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEERS_HOME = Path(os.environ.get("RLCLUSTER_PEERS", Path.home() / ".cache" / "rlcluster-peers"))
PINS = {"rldoctor": ["rldoctor==0.2.0"], "rlwatch": ["rlwatch==0.5.1", "transformers"]}

GAUGE = {
    "rldoctor": {"advantage_collapse": "reward_signal", "clip_saturation": "policy_ratio",
                 "entropy_collapse": "entropy", "gradient_pathology": "gradients", "kl_drift": "kl",
                 "length_pathology": "length", "plateau": "reward", "reward_composition": "reward",
                 "reward_hacking": "reward"},
    "rlwatch": {"entropy_collapse": "entropy", "kl_explosion": "kl", "reward_hacking": "reward",
                "advantage_variance": "reward_signal", "loss_nan": "loss", "gradient_norm_spike": "gradients",
                "reward_mean_drift": "reward"},
}

_COMMON = r'''
import json, math, sys, io, contextlib, time
def rows_of(path):
    out = []
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        out.append({k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in r.items()})
    return out
paths, result_file = json.load(open(sys.argv[1])), sys.argv[2]
results = {}
'''

_RLDOCTOR = _COMMON + r'''
import os, tempfile
from rl_doctor.ingest import load_run
from rl_doctor.diagnosis import diagnose
from rl_doctor.detectors.base import Severity
tmp = tempfile.mkdtemp()
for path in paths:
    t0 = time.perf_counter()
    lines = open(path, encoding="utf-8").read().splitlines()
    rows = rows_of(path)
    found, seen = [], set()
    for k in range(8, len(lines) + 1):
        r = rows[k - 1]
        if "train_runtime" in r or "step" not in r:
            continue
        pre = os.path.join(tmp, "prefix.jsonl")
        with open(pre, "w", encoding="utf-8") as f:
            f.write("\n".join(lines[:k]) + "\n")
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                d = diagnose(load_run(pre))
        except Exception as e:
            found.append({"detector": "error", "severity": "error", "step": int(r["step"]), "note": str(e)[:120]})
            continue
        for fnd in d.findings:
            if fnd.severity >= Severity.WARNING and fnd.detector not in seen:
                seen.add(fnd.detector)
                sev = "stop" if fnd.severity >= Severity.CRITICAL else "warn"
                found.append({"detector": fnd.detector, "severity": sev, "step": int(r["step"])})
    results[path] = {"findings": found, "seconds": time.perf_counter() - t0}
json.dump(results, open(result_file, "w"))
'''

_RLWATCH = _COMMON + r'''
import logging, tempfile
from types import SimpleNamespace
logging.disable(logging.CRITICAL)
from rlwatch.config import RLWatchConfig
from rlwatch.core import RLWatch, _build_trl_callback
for path in paths:
    t0 = time.perf_counter()
    cfg = RLWatchConfig()
    cfg.storage.log_dir = tempfile.mkdtemp()
    cfg.run_id = "faults"
    found = []
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        mon = RLWatch(cfg)
        mon.start()
        send = mon.log_step
        def log_step(step, **kw):
            sent = send(step, **kw)
            for a in sent or []:
                found.append({"detector": a.detector, "severity": "stop" if a.severity == "critical" else "warn",
                              "step": int(a.step)})
            return sent
        mon.log_step = log_step
        cb = _build_trl_callback(mon)()
        for r in rows_of(path):
            if "step" in r and "train_runtime" not in r:
                cb.on_log(None, SimpleNamespace(global_step=int(r["step"])), None, logs=r)
        mon.stop()
    results[path] = {"findings": found, "seconds": time.perf_counter() - t0}
json.dump(results, open(result_file, "w"))
'''

DRIVERS = {"rldoctor": _RLDOCTOR, "rlwatch": _RLWATCH}


def peer_python(name: str) -> tuple[Path | None, str]:
    """The peer venv's interpreter, made with pip when missing; (None, why) when it cannot be."""
    py = PEERS_HOME / name / "bin" / "python"
    probe = "rl_doctor" if name == "rldoctor" else "rlwatch"
    if py.exists() and subprocess.run([str(py), "-c", f"import {probe}"], capture_output=True).returncode == 0:
        return py, "ok"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_HOME / name)], check=True, capture_output=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS[name]], check=True, capture_output=True,
                       timeout=1800)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not install {' '.join(PINS[name])}: {type(e).__name__}"
    return py, "installed"


def run_peer(name: str, paths: list[Path]) -> tuple[dict[str, dict], str]:
    """{path: {"findings": [{gauge, rule, severity, step}], "seconds": s}} for every run, and a note."""
    py, note = peer_python(name)
    if py is None:
        return {}, note
    with tempfile.TemporaryDirectory(prefix=f"peer-{name}-") as tmp:
        driver, listing, result = Path(tmp) / "driver.py", Path(tmp) / "paths.json", Path(tmp) / "result.json"
        driver.write_text(DRIVERS[name], encoding="utf-8")
        listing.write_text(json.dumps([str(p) for p in paths]), encoding="utf-8")
        t0 = time.perf_counter()
        proc = subprocess.run([str(py), str(driver), str(listing), str(result)], capture_output=True, text=True,
                              timeout=3600)
        if proc.returncode != 0 or not result.exists():
            return {}, f"{name} driver failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
        raw = json.loads(result.read_text(encoding="utf-8"))
    out: dict[str, dict] = {}
    for path, rec in raw.items():
        findings = [{"gauge": GAUGE[name].get(f["detector"], "other"), "rule": f["detector"],
                     "severity": f["severity"], "step": f["step"]} for f in rec["findings"]
                    if f["severity"] in ("warn", "stop")]
        out[path] = {"findings": findings, "seconds": rec["seconds"]}
    return out, f"{note}; {len(out)} runs in {time.perf_counter() - t0:.0f} s"
