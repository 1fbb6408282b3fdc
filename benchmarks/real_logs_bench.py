"""Benchmark: every real public log, per framework, judged by the product and by two peer tools on the same rows.

Not a test. For each real log beside the checkout (``../shared/real-logs``: the TRL logs, the corpus, the verl
logs, the benign fixture; ``$RLCLUSTER_REAL_LOGS`` overrides) and each log listed in ``benchmarks/real_logs/*.json``
whose copy is present (``../shared/real-logs/new``, ``$RLCLUSTER_EXTRA_LOGS``, or ``--extra DIR``), it reads the
rows once with the product's reader and hands the same rows to:

* **ours**: ``analyze_path(FILE)``, what ``rlcluster analyze FILE`` does (default parameters; a listed custom loop
  with the ``--family`` and ``--map`` its manifest entry gives, the benign fixture with its ``--gold``);
* **rldoctor 0.2.0**: its CLI, ``rldoctor diagnose ROWS.jsonl -f json`` (it reads JSONL, JSON and CSV; the rows are
  written as JSONL so every log, stdout and verl console logs included, reaches it);
* **rlwatch 0.5.1**: its own integrations, fed row by row: the verl tracking backend for verl logs, the TRL
  ``TrainerCallback.on_log`` for the rest (``real_logs/peer_rlwatch.py``, run by rlwatch's Python).

Each peer lives in its own venv under ``~/.cache/rlcluster-peers/<tool>`` (``$RLCLUSTER_PEERS_CACHE``), created and
pip-installed on first use. Per framework (TRL, verl, custom loops, SFT, preference, OpenRLHF) it reports the healthy
logs warned (any warning or worse), stopped (our stop; a peer's critical), false alarms per 1,000 healthy rows (each
warn/stop finding or peer warning/critical on a healthy log is one), and the troubled logs caught (warned or worse),
then the verdicts log by log. Output is deterministic for a given checkout and set of logs::

    make bench-real                                  # writes benchmarks/real_logs/RESULTS.md
    PYTHONPATH=src python benchmarks/real_logs_bench.py --no-peers --stdout

``--split`` picks the half of a held-out manifest (entries with a ``split`` field, ``round6.json``): ``tuning`` (the
default) judges every log but the sealed ones; ``sealed`` judges the sealed logs only, once, at the end (they are
never judged by a default run); ``all`` judges both::

    PYTHONPATH=src python benchmarks/real_logs_bench.py --extra /work/extra-logs --split sealed  # RESULTS_sealed.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # tests.* (the readings) from the repo root; real_logs is beside this file
    sys.path.insert(0, str(HERE.parent))

from real_logs import (  # noqa: E402
    FRAMEWORKS,
    MANIFEST_DIR,
    REPO,
    SPLITS,
    absent,
    alarm_rules,
    extra_logs_root,
    in_split,
    load_manifests,
    locate,
    real_log,
    sha256_of,
)

RESULTS = MANIFEST_DIR / "RESULTS.md"
PEERS: dict[str, tuple[str, ...]] = {  # tool -> what pip installs into its venv
    "rldoctor": ("rldoctor==0.2.0",),
    "rlwatch": ("rlwatch==0.5.1", "transformers<5"),  # transformers: rlwatch's TRL callback subclasses its callback
}
TOOLS = ("ours", *PEERS)
FRAMEWORK_LABEL = {"custom": "custom loops"}


@dataclass
class RealLog:
    """One real log and what its reading expects."""

    id: str
    path: Path
    framework: str
    expected: str  # healthy | troubled
    origin: str
    expected_rules: tuple[str, ...] = ()
    #: what its user tells ``rlcluster analyze``: the trainer (``--family``), the keys (``--map``), a gold reward
    #: (``--gold``, from a fixture's provenance); none of them for a log read as it comes
    family: str | None = None
    keys: dict[str, Any] | None = None
    gold: tuple[str, ...] = ()


@dataclass
class Verdict:
    """One tool's verdict on one log: ok | warn | stop (a peer's critical) | error, and the alarms it raised."""

    verdict: str
    alarms: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Judged:
    log: RealLog
    rows: int
    verdicts: dict[str, Verdict]


# -- which logs ---------------------------------------------------------------------------------------------------


def _framework_of_name(name: str) -> str:
    return "preference" if name.startswith(("dpo_", "orpo_", "kto_")) else "SFT" if name.startswith("sft_") else "TRL"


def collect(extra_roots: Sequence[Path], split: str = "tuning", manifests: Sequence[str] = ()
            ) -> tuple[list[RealLog], list[str]]:
    """Every real log present in ``split`` (see ``real_logs.in_split``; the shared folder's logs are tuning logs),
    with its framework and expectation; and one line per source left out, with why. ``manifests`` (file names) keeps
    only those manifests' logs, the shared folder's left out."""
    logs: list[RealLog] = []
    left_out: list[str] = []
    if split != "sealed" and not manifests:
        logs, left_out = _shared_logs()
    for entry in load_manifests():
        if not in_split(entry, split) or (manifests and entry.manifest not in manifests):
            continue
        found = next((hit for root in extra_roots if (hit := locate(entry, root)) is not None), None)
        if found is None:
            left_out.append(f"{entry.manifest}: {entry.id} not present under {', '.join(map(str, extra_roots))}")
        elif sha256_of(found) != entry.sha256:
            left_out.append(f"{entry.manifest}: {entry.id} at {found} has other bytes than its sha256")
        else:
            logs.append(RealLog(entry.id, found, entry.framework, entry.expected,
                                entry.manifest + (f" ({entry.split})" if entry.split else ""),
                                entry.expected_rules, entry.family if entry.map else None, entry.map))
    return logs, left_out


def _shared_logs() -> tuple[list[RealLog], list[str]]:
    """The logs copied into the shared real-logs folder (top level, corpus, verl, fixtures)."""
    from tests.test_frameworks import TROUBLED as VERL_TROUBLED
    from tests.test_real_logs import EXPECT

    logs: list[RealLog] = []
    left_out: list[str] = []
    top = real_log()
    if absent(top):
        left_out.append(absent(top) or "")
    for name in sorted(EXPECT):
        if (top / name).is_file():
            expected = "healthy" if EXPECT[name][1] == "ok" else "troubled"
            logs.append(RealLog(Path(name).stem, top / name, _framework_of_name(name), expected, "real-logs"))
    manifest = real_log("corpus", "MANIFEST.json")
    if manifest.is_file():
        for e in json.loads(manifest.read_text())["runs"]:
            fw = {"dpo": "preference", "sft": "SFT"}.get(e["family"], "TRL")
            logs.append(RealLog(e["id"], manifest.parent / e["file"], fw, e["set"], "corpus"))
    for p in sorted(real_log("verl").glob("*.log.gz")):
        logs.append(RealLog(p.name.removesuffix(".log.gz"), p, "verl",
                            "troubled" if p.name in VERL_TROUBLED else "healthy", "verl"))
    for p in sorted(real_log("fixtures").glob("*.json")):
        prov = json.loads(p.read_text()).get("_provenance") or {}
        logs.append(RealLog(p.stem, p, "TRL", "healthy", "fixtures", gold=tuple(prov.get("gold_rewards", ()))))
    return logs, left_out


# -- the peers ----------------------------------------------------------------------------------------------------


def peers_cache() -> Path:
    return Path(os.environ.get("RLCLUSTER_PEERS_CACHE") or Path.home() / ".cache" / "rlcluster-peers")


def ensure_peer(tool: str, cache: Path | None = None, install: bool = True) -> tuple[Path | None, str]:
    """The peer's venv Python (created and pip-installed on first use), or None and why not."""
    venv = (cache or peers_cache()) / tool
    python = venv / "bin" / "python"
    stamp = venv / (".installed-" + "+".join(PEERS[tool]).replace("/", "_").replace("<", "lt"))
    if stamp.is_file() and python.is_file():
        return python, ""
    if not install:
        return None, f"{tool} is not installed in {venv}"
    print(f"installing {' '.join(PEERS[tool])} into {venv} ...", file=sys.stderr, flush=True)
    try:
        if not python.is_file():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEERS[tool]], check=True, capture_output=True,
                       text=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return None, f"{tool} could not be installed: {' '.join(str(detail).split())[-200:]}"
    stamp.write_text("\n".join(PEERS[tool]) + "\n")
    return python, ""


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """The rows as JSONL, the format both peers read (non-JSON values as strings, NaN kept as NaN)."""
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, default=str) + "\n")


def run_rldoctor(python: Path, rows_file: Path) -> Verdict:
    """``rldoctor diagnose ROWS.jsonl -f json``: a WARNING finding warns, a CRITICAL one is its strongest verdict."""
    out = rows_file.with_suffix(".rldoctor.json")
    cli = python.parent / "rldoctor"
    p = subprocess.run([str(cli), "diagnose", str(rows_file), "-f", "json", "--no-color", "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0 or not out.is_file():
        return Verdict("error", note=" ".join((p.stderr or p.stdout).split())[-160:])
    findings = json.loads(out.read_text()).get("findings", [])
    alarms = sorted(f"{f['detector']}:{f['severity'].lower()}" for f in findings
                    if f.get("severity") in ("WARNING", "CRITICAL"))
    worst = "stop" if any(a.endswith(":critical") for a in alarms) else "warn" if alarms else "ok"
    return Verdict(worst, alarms)


def run_rlwatch(python: Path, jobs: list[tuple[Path, str]], workdir: Path) -> dict[str, Verdict]:
    """All logs through rlwatch in one process (its own Python); per rows file its alerts as a Verdict."""
    out = workdir / "rlwatch.json"
    p = subprocess.run([str(python), str(MANIFEST_DIR / "peer_rlwatch.py"), str(out),
                        *(f"{path}:{route}" for path, route in jobs)], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0 or not out.is_file():
        note = " ".join(p.stderr.split())[-160:]
        return {str(path): Verdict("error", note=note) for path, _ in jobs}
    got = json.loads(out.read_text())
    verdicts: dict[str, Verdict] = {}
    for path, _ in jobs:
        alerts = got.get(str(path), {"error": "no result"})
        if isinstance(alerts, dict):
            verdicts[str(path)] = Verdict("error", note=str(alerts.get("error")))
            continue
        names = [f"{a['detector']}:{a['severity']}@{a['step']}" for a in alerts]
        worst = "stop" if any(a["severity"] == "critical" for a in alerts) else "warn" if alerts else "ok"
        verdicts[str(path)] = Verdict(worst, names)
    return verdicts


# -- judging ------------------------------------------------------------------------------------------------------


def judge_all(logs: list[RealLog], peers: dict[str, Path | None], peer_notes: dict[str, str]) -> list[Judged]:
    """Every log through every tool on the same rows, with a progress line per log."""
    from wandb_rlcluster.analyze import analyze_path, load_any

    judged: list[Judged] = []
    rlwatch_jobs: list[tuple[Path, str]] = []
    with tempfile.TemporaryDirectory(prefix="rlcluster-real-bench-") as tmp:
        work = Path(tmp)
        for i, log in enumerate(logs, 1):
            print(f"[{i}/{len(logs)}] {log.framework:10s} {log.id}", file=sys.stderr, flush=True)
            loaded = load_any(str(log.path))
            rows = [r for r in loaded.rows if isinstance(r, dict)]
            params = {"reward": {"gold": list(log.gold)}} if log.gold else None
            analysis = analyze_path(str(log.path), log.family, params=params, keys=log.keys)
            verdicts = {"ours": Verdict(analysis.verdict(), sorted(alarm_rules(analysis.to_dict()["findings"])))}
            rows_file = work / f"{i:03d}.jsonl"
            write_rows(rows, rows_file)
            for tool in PEERS:
                if peers.get(tool) is None:
                    verdicts[tool] = Verdict("n/a", note=peer_notes.get(tool, ""))
            if peers.get("rldoctor") is not None:
                verdicts["rldoctor"] = run_rldoctor(peers["rldoctor"], rows_file)  # type: ignore[arg-type]
            if peers.get("rlwatch") is not None:
                rlwatch_jobs.append((rows_file, "verl" if loaded.source_format == "verl_console" else "trl"))
            judged.append(Judged(log, len(rows), verdicts))
        if rlwatch_jobs:
            print(f"rlwatch on {len(rlwatch_jobs)} logs ...", file=sys.stderr, flush=True)
            by_file = run_rlwatch(peers["rlwatch"], rlwatch_jobs, work)  # type: ignore[arg-type]
            for i, j in enumerate(judged, 1):
                j.verdicts["rlwatch"] = by_file[str(work / f"{i:03d}.jsonl")]
    return judged


@dataclass
class Tally:
    """One tool on one framework's logs."""

    healthy: int = 0
    healthy_rows: int = 0
    warned: int = 0
    stopped: int = 0
    alarms: int = 0
    troubled: int = 0
    caught: int = 0
    errors: int = 0

    def add(self, j: Judged, v: Verdict) -> None:
        if v.verdict in ("error", "n/a"):
            self.errors += 1
            return
        if j.log.expected == "healthy":
            self.healthy += 1
            self.healthy_rows += j.rows
            self.warned += v.verdict in ("warn", "stop")
            self.stopped += v.verdict == "stop"
            self.alarms += len(v.alarms)
        else:
            self.troubled += 1
            self.caught += v.verdict in ("warn", "stop")


def tally(judged: list[Judged]) -> dict[str, dict[str, Tally]]:
    """framework (and "all") -> tool -> Tally."""
    out: dict[str, dict[str, Tally]] = {}
    for j in judged:
        for fw in (j.log.framework, "all"):
            for tool in TOOLS:
                out.setdefault(fw, {}).setdefault(tool, Tally()).add(j, j.verdicts[tool])
    return out


# -- the report ---------------------------------------------------------------------------------------------------


def _pct(n: int, d: int) -> str:
    return f"{n} of {d} ({100.0 * n / d:.0f} %)" if d else "–"


def _cell(text: str, width: int = 110) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def git_commit(*args: str) -> str:
    try:
        return subprocess.run(["git", "log", "-1", "--format=%h", *args], capture_output=True, text=True, cwd=REPO,
                              check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def render(judged: list[Judged], left_out: list[str], peer_notes: dict[str, str], extra_roots: Sequence[Path],
           split: str = "tuning", manifests: Sequence[str] = ()) -> str:
    table = tally(judged)
    which = {"tuning": "every log but the sealed half of a held-out manifest",
             "sealed": "the sealed half of the held-out manifests only (judged once, at the end)",
             "all": "every log, sealed ones included"}[split]
    lines = ["# Real logs per framework: ours, rldoctor 0.2.0 and rlwatch 0.5.1 on the same rows", "",
             f"Measured on commit `{git_commit()}` (detection code: `src/` as of `{git_commit('--', 'src')}`) with "
             "`make bench-real` (`python benchmarks/real_logs_bench.py`), on "
             + (f"the logs listed in {', '.join(f'`{m}`' for m in manifests)} only" if manifests else
                "every real log in `../shared/real-logs` and each log listed in `benchmarks/real_logs/*.json`")
             + " whose copy was present. Ours: `rlcluster analyze "
             "FILE` (default parameters; a listed custom loop with its entry's `--family` and `--map`, the benign "
             "fixture with its `--gold`). Peers: the same rows as JSONL through `rldoctor diagnose`; row by row "
             "through rlwatch's verl tracking backend (verl logs) or its TRL callback (the rest). Warned: any "
             "warning or worse; stopped: our stop, a peer's critical; false alarms: warn/stop findings (a peer's "
             "warning/critical findings or alerts) on healthy logs, per 1,000 healthy rows. Listed logs' copies read "
             f"from: {', '.join(f'`{r}`' for r in extra_roots)}. Split `{split}`: {which}.", ""]
    for tool, note in sorted(peer_notes.items()):
        if note:
            lines.append(f"- **{tool} not run**: {note}")
    lines += ["", "## Per framework", "",
              "| framework | tool | healthy logs warned | stopped | false alarms / 1,000 healthy rows | "
              "troubled caught |", "|---|---|---|---:|---:|---|"]
    order = [fw for fw in FRAMEWORKS if fw in table] + ["all"]
    for fw in order:
        for tool in TOOLS:
            t = table[fw][tool]
            label = FRAMEWORK_LABEL.get(fw, fw)
            if tool == "ours":
                label = f"**{label}** ({t.healthy} healthy, {t.healthy_rows:,} rows; {t.troubled} troubled)"
            else:
                label = ""
            if t.healthy + t.troubled == 0:
                lines.append(f"| {label} | {tool} | not run | | | |")
                continue
            rate = f"{1000.0 * t.alarms / t.healthy_rows:.2f}" if t.healthy_rows else "–"
            caught = f"{t.caught} of {t.troubled}" if t.troubled else "–"
            lines.append(f"| {label} | {tool} | {_pct(t.warned, t.healthy)} | {t.stopped} | {rate} | {caught} |")
    lines += ["", "## Log by log", "",
              "| log | framework | expected | rows | ours | rldoctor | rlwatch |", "|---|---|---|---:|---|---|---|"]
    for j in sorted(judged, key=lambda j: (FRAMEWORKS.index(j.log.framework), j.log.expected, j.log.id)):
        cells = []
        for tool in TOOLS:
            v = j.verdicts[tool]
            what = ", ".join(f"`{a}`" for a in v.alarms[:4]) + (" …" if len(v.alarms) > 4 else "")
            cells.append(_cell(f"{v.verdict}{': ' + what if what else ''}{' (' + v.note + ')' if v.note else ''}"))
        lines.append(f"| `{j.log.id}` ({j.log.origin}) | {j.log.framework} | {j.log.expected} | {j.rows} | "
                     + " | ".join(cells) + " |")
    if left_out:
        lines += ["", "## Not in this run", ""] + [f"- {_cell(x, 200)}" for x in left_out]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help=f"Markdown file to write (default: {RESULTS}; RESULTS_<split>.md beside it for another split)")
    ap.add_argument("--stdout", action="store_true", help="print the report instead of writing it")
    ap.add_argument("--extra", type=Path, action="append", default=None,
                    help="a folder holding copies of manifest-listed logs (repeatable; default: "
                         "$RLCLUSTER_EXTRA_LOGS or ../shared/real-logs/new)")
    ap.add_argument("--no-peers", action="store_true", help="run ours only")
    ap.add_argument("--no-install", action="store_true", help="use the peers' venvs only if already installed")
    ap.add_argument("--split", choices=(*SPLITS, "all"), default="tuning",
                    help="which half of a held-out manifest: tuning (default: every log but the sealed ones), sealed "
                         "(the sealed ones only: score them once, at the end), all")
    ap.add_argument("--manifest", action="append", default=[],
                    help="judge only the logs listed in this manifest (a file name in benchmarks/real_logs, e.g. "
                         "round6.json; repeatable); the shared folder's logs are then left out")
    args = ap.parse_args(argv)

    extra_roots = args.extra or [extra_logs_root()]
    if args.out is None:
        args.out = RESULTS if args.split == "tuning" else RESULTS.with_name(f"RESULTS_{args.split}.md")
    logs, left_out = collect(extra_roots, args.split, args.manifest)
    if not logs:
        print(f"skipped: no real log found ({'; '.join(left_out[:1])})")
        return 0
    peers: dict[str, Path | None] = {}
    notes: dict[str, str] = {}
    for tool in PEERS:
        if args.no_peers:
            peers[tool], notes[tool] = None, "--no-peers"
        else:
            peers[tool], notes[tool] = ensure_peer(tool, install=not args.no_install)
    judged = judge_all(logs, peers, notes)
    report = render(judged, left_out, notes, extra_roots, args.split, args.manifest)
    if args.stdout:
        print(report)
    else:
        args.out.write_text(report)
        t = tally(judged)["all"]
        print(f"wrote {args.out}: {len(judged)} logs; ours warned {t['ours'].warned} of {t['ours'].healthy} healthy, "
              f"caught {t['ours'].caught} of {t['ours'].troubled} troubled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
