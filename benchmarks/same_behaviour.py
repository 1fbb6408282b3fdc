"""Same behaviour before and after a refactor: every real log and the quick detection bench through every entry point.

For each real log under ``../shared/real-logs`` (``*.json``, ``*.jsonl``, ``*.log``, ``*.log.gz``, recursively) this
records what each way of reading it decides:

* ``analyze``: ``rlcluster analyze`` without rules (the batch path) and with the shipped ``alerts.yaml`` (row by row
  through the alert engine): the JSON report (findings, alerts) and the full gauge state (``state_dict``);
* ``watch``: ``watch(run)`` on a stand-in run object that only records what would be logged (every dict the loop logs,
  with the ``rlcluster/*`` keys added), the journal ``alerts.jsonl``, the summary, the stop, the cluster and alert
  engine state;
* ``sidecar``: the ``rlcluster watch`` sidecar fed the same rows (its printed lines, its result, its journal);
* ``callback``: ``RLClusterCallback.on_log`` with real transformers ``TrainingArguments``/``TrainerState``/
  ``TrainerControl`` (every row written to W&B: ``wandb_min_interval=0``), its W&B rows and summary recorded, the
  journal, the stop, and its checkpoint state (``state()``).

The quick detection bench's synthetic runs (``benchmarks/detection/bench.py --quick``) go through ``analyze`` and
``watch`` the same way. The wall clock is taken out (alert engines get a constant clock; journal times are dropped),
so two runs of the same code give the same file. ``--compare A B`` lists the differences and exits 1 if there are any.
``--quick`` records every real log but only every 6th quick bench run (97 of 582: each kind of synthetic run, every
family, pathology and noise model, at least once): what CI compares the compiled core on against the pure one
(``make check-compiled``).

    PYTHONPATH=/work/main/src python benchmarks/same_behaviour.py --out /tmp/main.json    # before
    PYTHONPATH=src python benchmarks/same_behaviour.py --out /tmp/branch.json             # after
    python benchmarks/same_behaviour.py --compare /tmp/main.json /tmp/branch.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# beside the checkout (../shared/real-logs), or beside the directory of worktrees that holds it
REAL_LOGS = next((p for p in (REPO.parent / "shared" / "real-logs", REPO.parents[1] / "shared" / "real-logs")
                  if p.is_dir()), REPO.parent / "shared" / "real-logs")
SUFFIXES = (".json", ".jsonl", ".log", ".log.gz")
SKIP_NAMES = {"MANIFEST.json"}  # the corpus's index, not a log
FULL_ROWS = 3  # logged rows kept whole (the rest as one digest): enough to see what a difference is about


def canonical(x: Any) -> Any:
    """JSON-safe and order-free: floats as repr (NaN equals NaN), sets sorted, tuples as lists."""
    if isinstance(x, float):
        return x if math.isfinite(x) else repr(x)
    if isinstance(x, Mapping):
        return {str(k): canonical(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [canonical(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return sorted((canonical(v) for v in x), key=repr)
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if hasattr(x, "to_dict"):
        return canonical(x.to_dict())
    if hasattr(x, "__dataclass_fields__"):
        from dataclasses import asdict

        return canonical(asdict(x))
    return repr(x)


class Digest:
    """A stream of logged rows: the first few whole, all of them in one hash, and how many."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.n = 0
        self.head: list[Any] = []

    def add(self, item: Any) -> None:
        c = canonical(item)
        self.h.update(json.dumps(c, sort_keys=True).encode())
        self.h.update(b"\n")
        if self.n < FULL_ROWS:
            self.head.append(c)
        self.n += 1

    def out(self) -> dict[str, Any]:
        return {"n": self.n, "sha256": self.h.hexdigest(), "head": self.head}


def journal(path: Path) -> list[Any]:
    """The journal's records without their wall-clock fields and random ids."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for k in ("time", "ts", "id", "at", "journaled_at", "sent_at"):
            rec.pop(k, None)
        out.append(rec)
    return out


def _zero_clock() -> float:
    return 0.0


def _fix_clock(engine: Any) -> None:
    if engine is not None:
        engine.clock = _zero_clock


def _err(e: BaseException) -> dict[str, str]:
    return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


# -- entry points ----------------------------------------------------------------------------------------------------

def by_analyze(path: Path, config: Any) -> dict[str, Any]:
    from wandb_rlcluster.analyze import analyze_path

    out: dict[str, Any] = {}
    for name, alerts in (("batch", None), ("rules", config)):
        try:
            a = analyze_path(str(path), alerts=alerts)
            out[name] = {"report": a.to_dict(), "state": a.cluster.state_dict(), "sparks": a.sparks}
        except Exception as e:  # noqa: BLE001 - a log a reader refuses is recorded as such
            out[name] = _err(e)
    return out


class StandInRun:
    """What ``watch()`` needs of a ``wandb.Run``: ``_log``, ``summary``, a name and the step a dict lands on."""

    def __init__(self) -> None:
        self.name = "same-behaviour"
        self.summary: dict[str, Any] = {}
        self._local_step = 0
        self.logged = Digest()

    def _log(self, data: dict[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        self.logged.add({"data": data, "step": step, "commit": commit})
        self._local_step += 1


def _monitor_of(w: Any) -> Any:
    return getattr(w, "monitor", None) or getattr(w, "pipeline", None)


def by_watch(rows: list[Mapping[str, Any]], tmp: Path, **kw: Any) -> dict[str, Any]:
    from wandb_rlcluster import watch

    run = StandInRun()
    jpath = tmp / "watch-alerts.jsonl"
    w = watch(run, journal=jpath, min_interval=0.0, **kw)
    mon = _monitor_of(w)
    _fix_clock(mon.engine)
    stops = []
    for row in rows:
        run._log(dict(row))
        if w.should_stop and not stops:
            stops.append(run._local_step)
    w.close()
    cluster = mon.cluster
    return {"logged": run.logged.out(), "summary": run.summary, "should_stop_after_row": stops,
            "stop_finding": w.stop_finding, "stopped_at": w.stopped_at, "verdict": w.verdict(),
            "journal": journal(jpath), "errors": mon.errors,
            "state": cluster.state_dict() if cluster is not None else None,
            "engine": mon.engine.state_dict() if mon.engine is not None else None}


def by_sidecar(rows: list[Mapping[str, Any]], tmp: Path) -> dict[str, Any]:
    from wandb_rlcluster import sidecar

    monitor_cls = getattr(sidecar, "RowMonitor", None) or sidecar.Pipeline
    jpath = tmp / "sidecar-alerts.jsonl"
    mon = monitor_cls(alerts=None, use_wandb=False, journal=jpath)
    _fix_clock(mon.engine)
    out = io.StringIO()
    car = sidecar.Sidecar(tmp / "run-x.wandb", mon, out=out, live=False, clock=_zero_clock, sleep=lambda s: None)
    for row in rows:
        car._feed({k: v for k, v in row.items()})
    car.result.reason = "fed"
    car.close()
    return {"result": car.result, "printed": out.getvalue(), "journal": journal(jpath),
            "state": mon.cluster.state_dict() if mon.cluster is not None else None}


class RecordedWandb:
    """The run a ``WandbSink`` writes to, recording instead of sending: ``log``, ``define_metric``, ``summary``."""

    def __init__(self) -> None:
        self.logged = Digest()
        self.summary: dict[str, Any] = {}
        self.name = "same-behaviour"
        self.url = ""
        self.project = ""

    def define_metric(self, *a: Any, **k: Any) -> None:
        pass

    def log(self, data: dict[str, Any]) -> None:
        self.logged.add({k: (repr(type(v).__name__) if type(v).__name__ == "Table" else v) for k, v in data.items()})


def _step_of(row: Mapping[str, Any], i: int) -> int:
    s = row.get("step", row.get("_step"))
    return int(s) if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) else i + 1


def by_callback(rows: list[Mapping[str, Any]], tmp: Path) -> dict[str, Any]:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from wandb_rlcluster import RLClusterCallback

    recorded = RecordedWandb()
    cb = RLClusterCallback(grad_every=0, attention_every=0, lora_every=0, sample_every=0, wandb_min_interval=0.0,
                           stall_alert=False, crash_alert=False, guardian=False)
    cb.sink._run = lambda: recorded  # the sink's one way to the run: what it would send is recorded
    # throughput and memory are read from the wall clock and the process: the same constant for both versions
    cb._efficiency.measure = lambda step, tokens: {"efficiency/steps_per_s": 1.0, "efficiency/rss_gb": 1.0}
    _fix_clock(cb.engine)
    args = TrainingArguments(output_dir=str(tmp / "trainer"), report_to=[], run_name="same-behaviour")
    steps = [_step_of(r, i) for i, r in enumerate(rows)]
    state = TrainerState(max_steps=max(steps, default=0), global_step=0)
    control = TrainerControl()
    cb.on_train_begin(args, state, control)
    _fix_clock(cb.engine)
    stop_at = None
    for row, step in zip(rows, steps, strict=True):
        state.global_step = step
        cb.on_log(args, state, control, logs=dict(row))
        if control.should_training_stop and stop_at is None:
            stop_at = step
    cb.on_train_end(args, state, control)
    st = cb.state()
    again = RLClusterCallback(**st["args"])  # a resume rebuilds the same callback from the checkpoint
    for k, v in st["attributes"].items():
        setattr(again, k, v)
    return {"wandb": recorded.logged.out(), "summary": recorded.summary, "stop_at": stop_at,
            "should_save": control.should_save, "stop_finding": cb.stop_finding, "stopped_at": cb.stopped_at,
            "journal": journal(Path(args.output_dir) / "alerts.jsonl"), "errors": cb.errors,
            "checkpoint": st, "restored_equal": canonical(again.state()) == canonical(st)}


# -- what is recorded ------------------------------------------------------------------------------------------------

def real_logs(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in SKIP_NAMES and any(p.name.endswith(s) for s in SUFFIXES):
            yield p


def record_log(path: Path, config: Any, live: bool) -> dict[str, Any]:
    from wandb_rlcluster.analyze import load_any

    out: dict[str, Any] = {"analyze": by_analyze(path, config)}
    try:
        log = load_any(str(path))
        rows = [r for r in log.rows if isinstance(r, Mapping)]
        out["reader"] = {"format": log.source_format, "rows": len(rows),
                         "meta": {k: v for k, v in (log.meta or {}).items() if k != "rollouts"},
                         "digest": _digest(rows)}
    except Exception as e:  # noqa: BLE001
        out["reader"] = _err(e)
        return out
    if live:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for name, fn in (("watch", lambda: by_watch(rows, tmp)), ("sidecar", lambda: by_sidecar(rows, tmp)),
                             ("callback", lambda: by_callback(rows, tmp))):
                try:
                    out[name] = without_dir(fn(), tmp)
                except Exception as e:  # noqa: BLE001
                    out[name] = _err(e)
    return out


def without_dir(x: Any, tmp: Path) -> Any:
    """The record with the temporary directory's name taken out of it (it differs on every run)."""
    return json.loads(json.dumps(canonical(x)).replace(str(tmp), "<tmp>"))


def sha(x: Any) -> str:
    return hashlib.sha256(json.dumps(canonical(x), sort_keys=True).encode()).hexdigest()


def _digest(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    d = Digest()
    for r in rows:
        d.add(r)
    return d.out()


def record_bench(config: Any, limit: int | None, every: int = 1) -> dict[str, Any]:
    sys.path.insert(0, str(HERE / "detection"))
    from wandb_rlcluster.analyze import analyze_stream
    from wandb_rlcluster.core import analyze_rows

    import bench  # the quick bench's specs: the same synthetic runs `bench.py --quick` scores

    specs = bench.make_specs(bench.QUICK_SEEDS["tuning"], "tuning") + bench.make_specs(
        bench.QUICK_SEEDS["held-out"], "held-out")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        for spec in specs[:limit:every]:
            run = spec.generate()
            trainer = bench.TRAINER[spec.family]
            params = {"reward": {"gold": list(run.gold)}} if run.gold else None
            key = (f"{spec.split}/{spec.block}/{spec.seed}/{spec.family}/{spec.pathology or 'healthy'}/"
                   f"{spec.rep}/{spec.noise_model or ''}")
            c = analyze_rows(run.rows, trainer=trainer, params=params, max_steps=run.n_steps)
            a = analyze_stream(run.rows, trainer, alerts=config, params=params, max_steps=run.n_steps)
            watched = without_dir(by_watch(run.rows, Path(d), trainer=trainer, params=params, max_steps=run.n_steps),
                                  Path(d))
            watched["state"], watched["engine"] = sha(watched["state"]), sha(watched["engine"])
            # the full state as one digest per run (582 runs): the real logs above keep theirs whole
            out[key] = {"core": {"findings": c.findings, "state": sha(c.state_dict())},
                        "rules": {"report": a.to_dict(), "state": sha(a.cluster.state_dict())},
                        "watch": watched}
    return out


def record(args: argparse.Namespace) -> dict[str, Any]:
    import wandb_rlcluster
    from wandb_rlcluster.alerts import load_config
    from wandb_rlcluster.core.build import core_build

    build = core_build()
    if os.environ.get("RLCLUSTER_EXPECT_COMPILED") and build != "compiled":  # make check-compiled's compiled side
        raise SystemExit(f"same_behaviour: RLCLUSTER_EXPECT_COMPILED is set but the core imported is {build}")
    print(f"core: {build}, from {Path(wandb_rlcluster.__file__).parent}", file=sys.stderr)
    config = load_config(None)
    out: dict[str, Any] = {"code": str(Path(wandb_rlcluster.__file__).parent), "logs": {}, "bench": {}}
    t0 = time.perf_counter()
    for path in real_logs(args.logs):
        if args.only and args.only not in str(path):
            continue
        name = str(path.relative_to(args.logs))
        t = time.perf_counter()
        out["logs"][name] = canonical(record_log(path, config, live=not args.no_live))
        print(f"{name}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if not args.no_bench:
        t = time.perf_counter()
        out["bench"] = canonical(record_bench(config, args.bench_limit, args.bench_every))
        print(f"quick bench ({len(out['bench'])} runs): {time.perf_counter() - t:.1f} s", file=sys.stderr)
    print(f"total {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


# -- comparing -------------------------------------------------------------------------------------------------------

def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                yield f"{path}/{k}: only in B"
            elif k not in b:
                yield f"{path}/{k}: only in A"
            else:
                yield from differences(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from differences(x, y, f"{path}[{i}]")
    elif json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
        sa, sb = json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)
        yield f"{path}: {sa[:200]} != {sb[:200]}"


ROOTS = ((re.compile(r'"[^"]*/real-logs/'), '"<logs>/'), (re.compile(r'"[^"]*/wandb_rlcluster/'), '"<package>/'))
"""Where the logs and the package live is no behaviour: paths are compared from those roots on."""


def _load(path: Path) -> Any:
    text = path.read_text()
    for pattern, root in ROOTS:
        text = pattern.sub(root, text)
    return json.loads(text)


def compare(a_path: Path, b_path: Path, limit: int = 60) -> int:
    a, b = _load(a_path), _load(b_path)
    a.pop("code", None)
    b.pop("code", None)
    for part in ("logs", "bench"):  # a record made with --no-bench (or without the real logs) compares the rest
        if not a.get(part) or not b.get(part):
            print(f"({part}: not in both records, not compared)")
            a.pop(part, None)
            b.pop(part, None)
    diffs = list(differences(a, b))
    for d in diffs[:limit]:
        print(d)
    if len(diffs) > limit:
        print(f"... {len(diffs) - limit} more")
    n_logs, n_bench = len(a.get("logs", {})), len(a.get("bench", {}))
    print(f"{len(diffs)} difference(s) over {n_logs} real logs and {n_bench} quick bench runs")
    return 1 if diffs else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the record here (JSON)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="list the differences of two records")
    ap.add_argument("--logs", type=Path, default=REAL_LOGS, help=f"real logs directory (default {REAL_LOGS})")
    ap.add_argument("--only", help="only logs whose path contains this")
    ap.add_argument("--no-live", action="store_true", help="analyze only (no watch / sidecar / callback)")
    ap.add_argument("--no-bench", action="store_true", help="leave out the quick detection bench")
    ap.add_argument("--bench-limit", type=int, default=None, help="first N quick bench runs only")
    ap.add_argument("--bench-every", type=int, default=1, metavar="N",
                    help="every Nth quick bench run only (6: 97 of the 582, every kind of run, each family, pathology "
                         "and noise model, at least once)")
    ap.add_argument("--quick", action="store_true",
                    help="what CI compares the compiled core on (make check-compiled): every real log found through "
                         "every entry point, and every 6th quick bench run (--bench-every 6)")
    args = ap.parse_args(argv)
    if args.quick:
        args.bench_every = 6
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("--out FILE or --compare A B")
    if not args.logs.is_dir():
        print(f"same_behaviour: no real logs at {args.logs}; recording the quick bench only", file=sys.stderr)
    logging.disable(logging.WARNING)  # rlcluster's warnings are the behaviour recorded, not the output wanted
    with contextlib.redirect_stdout(sys.stderr):
        data = record(args)
    import wandb_rlcluster

    text = json.dumps(data, sort_keys=True, indent=0)  # where the package lives (the rules' path) is no behaviour
    args.out.write_text(text.replace(str(Path(wandb_rlcluster.__file__).parent), "<package>") + "\n")
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
