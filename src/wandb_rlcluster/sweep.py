"""A sweep of runs in one command: find every run under folders or globs, analyse them in parallel, rank them.

Each run goes through ``analyze.analyze_path`` exactly as ``rlcluster analyze FILE`` reads it; a worker sends
back only a small ``RunRecord`` (the verdict, where it first went wrong, the fired gauges' sparklines), so the
cost of a sweep is the analyses themselves spread over the cores. A run that cannot be read is a row with the
reason, never an exception for the sweep.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

from .core import DIAGNOSIS_ID
from .core.text import clean_text

# Worst first: a stop outranks a warning; a run that could not be judged comes before the healthy ones.
VERDICT_RANK = {"stop": 3, "warn": 2, "error": 1, "ok": 0}
SEVERITY_RANK = {"info": 0, "warn": 1, "stop": 2}

# Suffixes of the logs the readers take (a ``.gz`` of each too).
LOG_SUFFIXES = frozenset({".json", ".jsonl", ".ndjson", ".log", ".txt", ".out", ".csv", ".tsv"})
# Files with a log suffix that are never training logs: model, tokenizer and W&B bookkeeping beside the runs.
NOT_LOGS = frozenset({
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "adapter_config.json", "preprocessor_config.json", "added_tokens.json", "vocab.json", "merges.txt",
    "chat_template.json", "wandb-metadata.json", "wandb-summary.json", "requirements.txt", "debug.log",
    "debug-internal.log", "training_args.json", "alerts.jsonl", "rlcluster-watch-alerts.jsonl",
})
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})
SPARKS_PER_RUN = 4  # fired gauges drawn per run on the fleet page
GLOB_CHARS = frozenset("*?[")


@dataclass
class Fired:
    """A gauge that fired in a run: its worst severity, the first step it fired and its downsampled series."""

    gauge: str
    severity: str
    step: int
    spark: list[float] = field(default_factory=list)


@dataclass
class RunRecord:
    """One row of the sweep table: everything the renderers need, small enough to send between processes."""

    path: str
    verdict: str  # ok | warn | stop | error
    first_warn_step: int | None = None  # the first step a warn or stop fired
    first_stop_step: int | None = None
    rule: str = ""  # gauge/rule of the first warn or stop
    diagnosis: str = ""  # the cross-gauge pattern, when one was named (reward-hacking, mode-collapse, ...)
    message: str = ""  # what the leading finding says to do
    rows: int = 0
    first_step: int = 0
    last_step: int = 0
    trainer: str = ""
    framework: str = ""
    source_format: str = ""
    warnings: int = 0  # warn findings (or alerts) fired
    stops: int = 0
    reason: str = ""  # why an error row could not be judged
    fired: list[Fired] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepOptions:
    """How every run is read: the ``rlcluster analyze`` options, picklable (alert rules travel as a path)."""

    trainer: str | None = None
    alerts: str | None = None  # a rules file, "default" for the shipped one, None for none
    gold: tuple[str, ...] = ()
    warn_sooner: int | None = None
    framework: str | None = None
    keys: Mapping[str, Any] | None = None  # the --map mapping: which logged key is which quantity


def record_of(analysis: Any, path: str) -> RunRecord:
    """The sweep row of one ``Analysis``: the alert events when rules were applied, else the findings."""
    cluster = analysis.cluster
    if not cluster.recognised():
        return error_record(path, cluster.unmapped_message(str(path)))
    if analysis.alerts is not None:
        events = [(e.gauge, e.rule, e.severity, e.step, e.title) for e in analysis.alerts if e.kind == "firing"]
    else:
        events = [(f.gauge, f.rule, f.severity, f.step, f.message) for f in cluster.findings]
    events.sort(key=lambda e: e[3])
    serious = [e for e in events if e[2] in ("warn", "stop")]
    rec = RunRecord(path=path, verdict=analysis.verdict(), rows=cluster.rows, first_step=analysis.first_step,
                    last_step=analysis.last_step, trainer=str(cluster.family or ""),
                    framework=str(getattr(cluster, "framework", "") or ""), source_format=analysis.source_format,
                    warnings=sum(e[2] == "warn" for e in serious), stops=sum(e[2] == "stop" for e in serious))
    if serious:
        gauge, rule, _, step, message = serious[0]
        rec.first_warn_step, rec.rule, rec.message = step, f"{gauge}/{rule}", message
        rec.first_stop_step = next((e[3] for e in serious if e[2] == "stop"), None)
    diagnoses = [f for f in cluster.findings if f.gauge == DIAGNOSIS_ID and f.severity in ("warn", "stop")]
    if diagnoses:
        rec.diagnosis = min(diagnoses, key=lambda f: f.step).rule
    by_gauge: dict[str, Fired] = {}
    for gauge, _, sev, step, _ in serious:
        if gauge == DIAGNOSIS_ID or gauge not in analysis.sparks:
            continue
        seen = by_gauge.get(gauge)
        if seen is None:
            by_gauge[gauge] = Fired(gauge, sev, step, _rounded(analysis.sparks[gauge]))
        elif SEVERITY_RANK[sev] > SEVERITY_RANK[seen.severity]:
            seen.severity = sev
    rec.fired = list(by_gauge.values())[:SPARKS_PER_RUN]
    if not rec.fired:  # a quiet run still shows what it learned: its reward (or loss) with no mark
        for gid in ("reward", "loss"):
            if analysis.sparks.get(gid):
                rec.fired = [Fired(gid, "ok", -1, _rounded(analysis.sparks[gid]))]
                break
    return rec


def _rounded(series: Sequence[float]) -> list[float]:
    return [float(f"{x:.4g}") for x in series]


def error_record(path: str, reason: str) -> RunRecord:
    reason = " ".join(str(reason).split()) or "failed (no reason given)"
    return RunRecord(path=path, verdict="error", reason=reason.removeprefix("rlcluster: "))


@lru_cache(maxsize=4)
def _alert_config(path: str | None) -> Any:
    from .alerts import load_config

    return load_config(None if path == "default" else path)


def analyze_one(path: str, options: SweepOptions) -> RunRecord:
    """Analyse one run into its row; whatever goes wrong becomes the row's reason (runs in a worker process)."""
    from .analyze import analyze_path
    from .readers import LogReadError

    try:
        alerts = _alert_config(options.alerts) if options.alerts else None
        params = {"reward": {"gold": list(options.gold)}} if options.gold else None
        analysis = analyze_path(path, options.trainer, alerts=alerts, params=params,
                                warn_sooner=options.warn_sooner, framework=options.framework,
                                keys=options.keys)
        return record_of(analysis, path)
    except LogReadError as e:
        return error_record(path, str(e).splitlines()[0] if str(e) else "cannot read input")
    except MemoryError:
        return error_record(path, f"cannot read {path!r}: it does not fit in memory")
    except OSError as e:
        return error_record(path, f"cannot read {path!r}: {e.strerror or type(e).__name__}")
    except Exception as e:  # noqa: BLE001 - one run's bug is that run's row, never the sweep's traceback
        first = str(e).splitlines()[0] if str(e) else ""
        return error_record(path, f"unexpected {type(e).__name__}: {first} (a bug: please report it)")


# -- finding the runs ---------------------------------------------------------------------------


def is_single_run(arg: str) -> bool:
    """True when ``arg`` names one run as ``rlcluster analyze FILE`` has always read it: a file (or anything that
    is not a folder, so a missing path keeps its one-line error) or a W&B run folder."""
    from .analyze import _is_wandb_run
    from .readers.tensorboard import is_tensorboard_run
    from .sources import is_collection, scheme_of

    if scheme_of(arg) is not None:  # wandb:E/P/RUN is one run, wandb:E/P a project of them
        return not is_collection(arg)
    p = Path(arg)
    try:
        if not p.is_dir():
            return not (GLOB_CHARS & set(arg)) or p.exists()
    except OSError:
        return True
    return _is_wandb_run(p) or is_tensorboard_run(p)


def discover(args: Iterable[str], filters: Mapping[str, str] | None = None) -> tuple[list[str], list[RunRecord]]:
    """(run paths, error rows) for folders, globs and files: every log under a folder, one per run.

    A W&B run folder is one run, and so is a folder holding TensorBoard event files; a folder holding
    ``trainer_state.json`` is one run (its checkpoints are the same run, earlier), else its latest
    ``checkpoint-N/trainer_state.json`` is; other files count by suffix unless they are model or tokenizer files.
    A tracker's project (``wandb:ENTITY/PROJECT``, ``mlflow:EXPERIMENT``, ``trackio:PROJECT``) is its runs, those
    ``filters`` (state, tag, name) keep. A folder that cannot be listed, or a project that cannot be listed, is an
    error row.
    """
    from .readers import LogReadError
    from .sources import expand, is_collection

    runs: list[str] = []
    problems: list[RunRecord] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            runs.append(path)

    for arg in args:
        if is_collection(arg):
            try:
                listed = expand(arg, filters)
            except LogReadError as e:
                problems.append(error_record(arg, str(e)))
                continue
            if not listed:
                why = " that pass the --filter" if filters else ""
                if arg.startswith("wandb:"):
                    why += (" this API key can see: check ENTITY/PROJECT (from the project's URL); a private project "
                            "needs a key of its team")
                problems.append(error_record(arg, f"{arg!r} has no runs{why}"))
            runs.extend(x for x in listed if x not in runs)
            continue
        matches = [arg]
        if GLOB_CHARS & set(arg) and not os.path.lexists(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                problems.append(error_record(arg, f"{arg!r} matches no file"))
        for m in matches:
            if os.path.isdir(m) and not is_single_run(m):
                for path in _walk(m, problems):
                    add(path)
            elif os.path.lexists(m) or m == arg:
                add(m)
    return runs, problems


def _walk(top: str, problems: list[RunRecord]) -> list[str]:
    found: list[str] = []

    def unlistable(exc: OSError) -> None:
        where = exc.filename or top
        problems.append(error_record(str(where), f"cannot list {str(where)!r}: {exc.strerror or type(exc).__name__}"))

    for root, dirs, files in os.walk(top, onerror=unlistable):
        dirs.sort()
        if any(n.startswith("events.out.tfevents.") for n in files):  # a TensorBoard run: one run per folder
            found.append(root)
        if "trainer_state.json" in files:
            found.append(os.path.join(root, "trainer_state.json"))
        else:
            checkpoints = [d for d in dirs if _checkpoint_step(d) >= 0
                           and os.path.isfile(os.path.join(root, d, "trainer_state.json"))]
            if checkpoints:
                latest = max(checkpoints, key=_checkpoint_step)
                found.append(os.path.join(root, latest, "trainer_state.json"))
        keep = []
        for d in dirs:
            if d.startswith(".") or d in SKIP_DIRS or _checkpoint_step(d) >= 0:
                continue
            full = os.path.join(root, d)
            if os.path.islink(full):  # as os.walk: links are not followed (wandb's latest-run is a second name)
                continue
            if _is_wandb_dir(full):
                found.append(full)
                continue
            keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            if name == "trainer_state.json" or name.startswith(".") or not _is_log_name(name):
                continue
            found.append(os.path.join(root, name))
    return found


def _is_wandb_dir(path: str) -> bool:
    """A W&B run folder: it holds its ``run-<id>.wandb`` transaction log directly."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(n.startswith("run-") and n.endswith(".wandb") for n in names)


def _is_log_name(name: str) -> bool:
    lower = name.lower()
    if lower in NOT_LOGS or lower.endswith(".index.json") or "-debug-" in lower:  # wandb-core's own logs
        return False
    stem = lower[:-3] if lower.endswith(".gz") else lower
    return os.path.splitext(stem)[1] in LOG_SUFFIXES or stem.endswith(".wandb")


def _checkpoint_step(name: str) -> int:
    head, _, tail = name.rpartition("-")
    return int(tail) if head == "checkpoint" and tail.isdigit() else -1


# -- running them -------------------------------------------------------------------------------


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def analyze_sweep(paths: Sequence[str], options: SweepOptions, jobs: int | None = None,
                  progress: Callable[[int, int, RunRecord], None] | None = None) -> list[RunRecord]:
    """Every run's row, ranked worst first; ``jobs`` processes (default: the cores this process may use)."""
    jobs = max(1, min(jobs or default_jobs(), len(paths)))
    records: list[RunRecord] = []

    def done(rec: RunRecord) -> None:
        records.append(rec)
        if progress is not None:
            progress(len(records), len(paths), rec)

    if len(paths) == 1:  # one run: in this process, as `rlcluster analyze FILE` reads it
        done(analyze_one(paths[0], options))
        return rank(records)
    broken = _pooled(paths, options, jobs, done)
    if broken:  # a worker died (killed, out of memory) and took the runs it shared the pool with: again, fresh
        broken = _pooled(broken, options, jobs, done)
    for p in broken:  # still dying: one process per run, so the run that kills its process fails alone
        again = _pooled([p], options, 1, done)
        if again:
            done(error_record(p, "the process analysing it died (out of memory, or killed)"))
    return rank(records)


def _pooled(paths: Sequence[str], options: SweepOptions, jobs: int, done: Callable[[RunRecord], None]) -> list[str]:
    """Analyse ``paths`` in a pool of ``jobs`` processes, handing each row to ``done``; returns the paths whose
    process died before answering."""
    broken: list[str] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for i, p in enumerate(paths):
            try:
                futures[pool.submit(analyze_one, p, options)] = p
            except BrokenProcessPool:  # a worker died while the runs were still being handed out: the rest too
                broken.extend(paths[i:])
                break
        for fut in as_completed(futures):
            try:
                rec = fut.result()
            except BrokenProcessPool:
                broken.append(futures[fut])
                continue
            done(rec)
    return broken


def rank(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Worst first: the verdict, then the run that went wrong soonest, then the path (a stable order)."""
    inf = float("inf")
    return sorted(records, key=lambda r: (-VERDICT_RANK[r.verdict],
                                          inf if r.first_stop_step is None else r.first_stop_step,
                                          inf if r.first_warn_step is None else r.first_warn_step, r.path))


class _Bar:
    """What both bars share: redrawn in place on a terminal at most every ``INTERVAL`` seconds, a line per tenth
    elsewhere (a CI log has no carriage return)."""

    WIDTH = 30
    INTERVAL = 0.1

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream, self.tty = stream, tty
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = -1

    def _due(self, done: int, total: int) -> bool:
        """Whether to draw now (always at the end)."""
        now = time.monotonic()
        tenth = done * 10 // total
        if done < total and (now - self._last_draw < self.INTERVAL if self.tty else tenth == self._last_tenth):
            return False
        self._last_draw, self._last_tenth = now, tenth
        return True

    def _gauge(self, done: int, total: int) -> str:
        fill = min(self.WIDTH, done * self.WIDTH // total)
        return f"[{'#' * fill}{'.' * (self.WIDTH - fill)}]"


class ProgressBar(_Bar):
    """``[#####.....] 120/200 runs · 3 stop 12 warn · 8 s`` on stderr during a sweep."""

    def __init__(self, stream: TextIO, tty: bool) -> None:
        super().__init__(stream, tty)
        self.counts = {v: 0 for v in VERDICT_RANK}

    def __call__(self, done: int, total: int, rec: RunRecord) -> None:
        self.counts[rec.verdict] += 1
        if not self._due(done, total):
            return
        tally = " ".join(f"{self.counts[v]} {v}" for v in ("stop", "warn", "error") if self.counts[v])
        line = (f"{self._gauge(done, total)} {done}/{total} runs"
                f"{' · ' + tally if tally else ''} · {time.monotonic() - self.start:.0f} s")
        self.stream.write(("\r" + line + ("\n" if done == total else "")) if self.tty else line + "\n")
        self.stream.flush()


class ByteProgress(_Bar):
    """``[#####.....] 412/993 MB read · 52 s`` on stderr while one large log is streamed (``rlcluster analyze FILE``): a
    million-row history takes minutes. Nothing at all for a log read whole."""

    INTERVAL = 0.2

    def __init__(self, stream: TextIO, tty: bool) -> None:
        super().__init__(stream, tty)
        self.drawn = False
        self.unit = "MB"  # "rows" for a run read from a tracker's server (wandb:ENTITY/PROJECT/RUN_ID)

    def __call__(self, done: int, total: int) -> None:
        total = max(total, 1)
        if not self._due(done, total):
            return
        amount = (f"{done}/{total} rows" if self.unit == "rows" else f"{done / 1e6:.0f}/{total / 1e6:.0f} MB")
        line = f"{self._gauge(done, total)} {amount} read · {time.monotonic() - self.start:.0f} s"
        self.stream.write("\r" + line if self.tty else line + "\n")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def use_byte_progress(flag: bool, stream: TextIO | None = None) -> ByteProgress | None:
    stream = sys.stderr if stream is None else stream  # the stderr of the call, not of the import
    tty = hasattr(stream, "isatty") and stream.isatty()
    return ByteProgress(stream, tty) if (tty or flag) else None


# -- rendering ----------------------------------------------------------------------------------

COLUMNS = ("rank", "verdict", "first_warn_step", "first_stop_step", "diagnosis", "rule", "path")


def counts(records: Sequence[RunRecord]) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in records) for v in ("stop", "warn", "error", "ok")}


def worst_verdict(records: Sequence[RunRecord]) -> str:
    judged = [r.verdict for r in records if r.verdict != "error"]
    return max(judged, key=VERDICT_RANK.__getitem__, default="ok")


def render_table_text(records: Sequence[RunRecord], color: bool = False, elapsed: float | None = None,
                      jobs: int | None = None) -> str:
    """The ranked table for a terminal: one run a line, worst first; unreadable runs listed with their reason."""
    from .analyze import _COLORS

    def paint(text: str, status: str) -> str:
        return f"\x1b[{_COLORS.get(status, '0')}m{text}\x1b[0m" if color else text

    c = clean_text
    n = counts(records)
    took = f" · {elapsed:.1f} s on {jobs} process{'es' if jobs != 1 else ''}" if elapsed is not None else ""
    head = ", ".join(f"{k} {v}" for k, v in n.items() if v)
    diag_w = max([9] + [len(r.diagnosis) for r in records])
    rule_w = max([4] + [len(r.rule) for r in records])
    lines = [f"rlcluster analyze · {len(records)} run(s) · {head}{took}", "",
             f"  {'#':>4}  {'verdict':<7}  {'warn at':>8}  {'stop at':>8}  {'diagnosis':<{diag_w}}  "
             f"{'rule':<{rule_w}}  run"]
    for i, r in enumerate(records, 1):
        w = "–" if r.first_warn_step is None else str(r.first_warn_step)
        s = "–" if r.first_stop_step is None else str(r.first_stop_step)
        diag = r.diagnosis or ("–" if r.verdict != "error" else "")
        rule = r.rule or ("–" if r.verdict != "error" else "unreadable")
        lines.append(f"  {i:>4}  {paint(f'{r.verdict.upper():<7}', r.verdict)}  {w:>8}  {s:>8}  "
                     f"{c(diag):<{diag_w}}  {c(rule):<{rule_w}}  {c(r.path)}")
    errors = [r for r in records if r.verdict == "error"]
    if errors:
        lines += ["", f"Not judged ({len(errors)}):"] + [f"  {c(r.path)}: {c(r.reason)}" for r in errors]
    return "\n".join(lines)


def _row_values(i: int, r: RunRecord) -> list[Any]:
    return [i, r.verdict, r.first_warn_step, r.first_stop_step, r.diagnosis, r.rule, r.path]


def render_table_json(records: Sequence[RunRecord]) -> str:
    out = {"runs": [{"rank": i, **r.to_dict()} for i, r in enumerate(records, 1)], "counts": counts(records),
           "verdict": worst_verdict(records)}
    return json.dumps(out, indent=2, allow_nan=False)


CSV_FIELDS = ("rank", "verdict", "first_warn_step", "first_stop_step", "diagnosis", "rule", "message", "warnings",
              "stops", "rows", "first_step", "last_step", "trainer", "framework", "source_format", "path", "reason")


def render_table_csv(records: Sequence[RunRecord]) -> str:
    """One row per run; text cells a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``) are quoted."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for i, r in enumerate(records, 1):
        d = {"rank": i, **r.to_dict()}
        w.writerow([_csv_cell(d[k]) for k in CSV_FIELDS])
    return buf.getvalue().rstrip("\n")


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, str):
        v = clean_text(v)
        if v[:1] in ("=", "+", "-", "@", "\t", "\r"):
            return "'" + v
    return v


def render_table_md(records: Sequence[RunRecord]) -> str:
    head = ["#", "verdict", "first warn", "first stop", "diagnosis", "rule", "run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in ("#", "first warn", "first stop")
                                                            else "---" for h in head) + "|"]
    for i, r in enumerate(records, 1):
        cells = _row_values(i, r)
        cells[5] = r.rule or (f"unreadable: {r.reason}" if r.verdict == "error" else "")
        lines.append("| " + " | ".join(_md_cell(v) for v in cells) + " |")
    return "\n".join(lines)


def _md_cell(v: Any) -> str:
    if v is None or v == "":
        return "–"
    text = clean_text(" ".join(str(v).split()))
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("<", "&lt;")


RENDERERS: dict[str, Callable[[Sequence[RunRecord]], str]] = {
    "json": render_table_json, "csv": render_table_csv, "md": render_table_md,
}


def use_progress(flag: bool, stream: TextIO | None = None) -> ProgressBar | None:
    stream = sys.stderr if stream is None else stream  # the stderr of the call, not of the import
    tty = hasattr(stream, "isatty") and stream.isatty()
    return ProgressBar(stream, tty) if (tty or flag) else None
