"""Benchmark: false alarms on real, public, healthy training logs (issue #28, item 6).

Not a test: it runs the product's offline analysis (``analyze_path``, what ``rlcluster analyze FILE`` does)
over every log of the real-log corpus (``../shared/real-logs/corpus/``, or ``$RLCLUSTER_REAL_LOGS/corpus``: the
logs are public files from other repositories, so they live beside the checkout, never in it) and writes
``benchmarks/real-healthy/RESULTS.md``:

* the healthy runs that get any warn or stop (target: at most 5 %, and no stop);
* per rule: false alarms per 1,000 real healthy rows (every warn/stop finding of that rule on a healthy run is one
  false alarm; rows are the logged rows the analyzer read), the runs it fired on, and its first firing step and
  message in each;
* the same counts with the shipped alert rules applied (``rlcluster analyze --alerts``), where the verdict is the
  worst alert that fired, as in a live run;
* the troubled runs (recall cases): whether each is flagged, and by which rules first.

Run from the repository root::

    PYTHONPATH=src python benchmarks/real_healthy.py            # writes benchmarks/real-healthy/RESULTS.md
    PYTHONPATH=src python benchmarks/real_healthy.py --stdout   # print instead of writing

The corpus and its provenance: ``corpus/MANIFEST.json`` in the real-logs folder and docs/real-healthy-corpus.md.
Where the folder is absent it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from real_logs import REPO, absent, real_log

HERE = Path(__file__).resolve().parent
ALARM = ("warn", "stop")


@dataclass
class Alarm:
    """One warn/stop a run raised: a finding (default analysis) or a firing alert (``--alerts``)."""

    rule: str  # "gauge/rule"
    severity: str
    step: int
    message: str


@dataclass
class RunResult:
    """What the analyzer said about one corpus run."""

    id: str
    family: str
    trainer_detected: str
    rows: int
    verdict: str
    alarms: list[Alarm] = field(default_factory=list)


def corpus_dir() -> Path:
    """The real-log corpus folder (``MANIFEST.json``, ``healthy/``, ``troubled/``), read at each call."""
    return real_log("corpus")


def load_manifest(corpus: Path | None = None) -> list[dict[str, Any]]:
    """The manifest's run entries (id, set, file, family, reading, expected, provenance)."""
    return json.loads(((corpus or corpus_dir()) / "MANIFEST.json").read_text())["runs"]


def analyze_run(entry: dict[str, Any], corpus: Path | None = None, alerts: Any = None) -> RunResult:
    """Analyse one corpus file as a new user would: no trainer hint, default parameters."""
    from wandb_rlcluster.analyze import analyze_path

    analysis = analyze_path(str((corpus or corpus_dir()) / entry["file"]), alerts=alerts)
    summary = analysis.to_dict()
    if alerts is None:
        alarms = [Alarm(f"{f['gauge']}/{f['rule']}", f["severity"], int(f["step"]), f["message"])
                  for f in summary["findings"] if f["severity"] in ALARM]
    else:
        alarms = [Alarm(f"{e.gauge}/{e.rule}", e.severity, int(e.step), e.title)
                  for e in analysis.alerts or [] if e.kind == "firing" and e.severity in ALARM]
    return RunResult(entry["id"], entry["family"], summary["trainer"], int(summary["rows"]), analysis.verdict(), alarms)


def per_rule(results: list[RunResult]) -> dict[str, dict[str, Any]]:
    """rule -> {alarms, stops, runs: {run id: first Alarm}} over the given runs."""
    table: dict[str, dict[str, Any]] = defaultdict(lambda: {"alarms": 0, "stops": 0, "runs": {}})
    for r in results:
        for a in sorted(r.alarms, key=lambda a: a.step):
            t = table[a.rule]
            t["alarms"] += 1
            t["stops"] += a.severity == "stop"
            t["runs"].setdefault(r.id, a)
    return dict(table)


def _cell(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def healthy_section(title: str, results: list[RunResult], mode: str) -> list[str]:
    rows = sum(r.rows for r in results)
    warned = [r for r in results if r.verdict in ALARM]
    stopped = [r for r in results if r.verdict == "stop"]
    pct = 100.0 * len(warned) / len(results) if results else 0.0
    ok = "met" if pct <= 5.0 and not stopped else "NOT met"
    out = [f"## {title}", "",
           f"{len(results)} healthy runs, {rows:,} logged rows ({mode}).", "",
           f"- Runs with any warn/stop: **{len(warned)} of {len(results)} ({pct:.0f} %)**; with a stop: "
           f"**{len(stopped)}**. Target (at most 5 %, no stop): **{ok}**.",
           f"- False alarms (warn/stop findings or firing alerts) in all: **{sum(len(r.alarms) for r in results)}**, "
           f"{1000.0 * sum(len(r.alarms) for r in results) / max(rows, 1):.1f} per 1,000 healthy rows.", "",
           "### Per rule", "",
           "| rule | false alarms | per 1,000 rows | stops | runs | first firing (run: step, message) |",
           "|---|---:|---:|---:|---:|---|"]
    table = per_rule(results)
    for rule, t in sorted(table.items(), key=lambda kv: (-kv[1]["alarms"], kv[0])):
        firsts = "<br>".join(f"`{rid}`: step {a.step}, {_cell(a.message, 140)}" for rid, a in t["runs"].items())
        out.append(f"| `{rule}` | {t['alarms']} | {1000.0 * t['alarms'] / max(rows, 1):.2f} | {t['stops']} | "
                   f"{len(t['runs'])} | {firsts} |")
    if not table:
        out.append("| (none) | 0 | 0 | 0 | 0 | |")
    out += ["", "### Per run", "", "| run | family (detected) | rows | verdict | warn/stop rules, first step |",
            "|---|---|---:|---|---|"]
    for r in results:
        firsts: dict[str, int] = {}
        for a in r.alarms:
            firsts[a.rule] = min(firsts.get(a.rule, a.step), a.step)
        rules = ", ".join(f"`{k}` @{v}" for k, v in sorted(firsts.items(), key=lambda kv: kv[1])) or "–"
        out.append(f"| `{r.id}` | {r.family} ({r.trainer_detected}) | {r.rows} | {r.verdict} | {rules} |")
    return out + [""]


def troubled_section(results: list[RunResult], entries: dict[str, dict[str, Any]]) -> list[str]:
    out = ["## Troubled runs (recall cases, not counted above)", "",
           "| run | expected | verdict | first warn/stop rules (step) |", "|---|---|---|---|"]
    for r in results:
        firsts: dict[str, int] = {}
        for a in r.alarms:
            firsts[a.rule] = min(firsts.get(a.rule, a.step), a.step)
        rules = ", ".join(f"`{k}` @{v}" for k, v in sorted(firsts.items(), key=lambda kv: kv[1])[:6]) or "–"
        out.append(f"| `{r.id}` | {_cell(entries[r.id]['expected'], 90)} | {r.verdict} | {rules} |")
    return out + [""]


def git_commit(*args: str) -> str:
    """A short commit id from ``git log -1`` (HEAD, or the last commit touching a path), or "unknown"."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h", *args], capture_output=True, text=True,
                             cwd=REPO, check=True).stdout.strip()
        return out or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "real-healthy" / "RESULTS.md", help="Markdown file to write")
    ap.add_argument("--stdout", action="store_true", help="print the report instead of writing it")
    ap.add_argument("--no-alerts", action="store_true", help="skip the pass with the shipped alert rules")
    args = ap.parse_args(argv)

    reason = absent(corpus_dir() / "MANIFEST.json")
    if reason:
        print(f"skipped: {reason}")
        return 0
    entries = load_manifest()
    by_id = {e["id"]: e for e in entries}
    healthy = [e for e in entries if e["set"] == "healthy"]
    troubled = [e for e in entries if e["set"] == "troubled"]

    findings = [analyze_run(e) for e in healthy]
    lines = ["# Real healthy corpus: false alarms", "",
             f"Measured on commit `{git_commit()}` (detection code: `src/` as of `{git_commit('--', 'src')}`) with "
             "`PYTHONPATH=src python benchmarks/real_healthy.py` "
             "(the product's `analyze_path`, as `rlcluster analyze FILE`: no trainer hint, default parameters). "
             "The corpus (`../shared/real-logs/corpus`), its sources and a reading of each run: its "
             "`MANIFEST.json` and docs/real-healthy-corpus.md.", ""]
    lines += healthy_section("Default analysis (`rlcluster analyze FILE`)", findings, "verdict = worst finding")
    if not args.no_alerts:
        from wandb_rlcluster.alerts import load_config

        cfg = load_config()
        with_alerts = [analyze_run(e, alerts=cfg) for e in healthy]
        lines += healthy_section("With the shipped alert rules (`rlcluster analyze --alerts FILE`)", with_alerts,
                                 "verdict = worst alert that fired, as in a live run")
    lines += troubled_section([analyze_run(e) for e in troubled], by_id)
    report = "\n".join(lines)
    if args.stdout:
        print(report)
    else:
        args.out.write_text(report)
        warned = sum(r.verdict in ALARM for r in findings)
        print(f"wrote {args.out}: {warned}/{len(findings)} healthy runs warned "
              f"({sum(r.verdict == 'stop' for r in findings)} stopped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
