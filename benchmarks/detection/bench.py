"""Detection-quality benchmark: the core's gauges vs the seed blog's rules on labelled logs.

A labelled corpus is generated with ``synthetic`` (beside this file) (every family healthy, every
pathology it can have) with varied length, noise, logging interval and onset, over a tuning seed set
and a held-out seed set; the 14 real TRL logs are checked against the fixed readings of
``tests/test_real_logs.py``. Both detectors are scored the same way:

* recall: a warn/stop finding from one of the run's expected gauges at or after onset;
* early: any warn/stop finding before onset (a false alarm on the healthy prefix);
* healthy runs: false stops (any stop finding) and any-finding rate (any warn/stop);
* delay: (first matching step - onset) / (n_steps - onset), median over detected runs; and the same
  over the runs both detectors detect without an alarm from an expected gauge before onset ("paired"),
  because a rule that was already ringing before the onset has not detected anything.

Not a test (``tests/test_detection_slice.py`` is): it prints a Markdown table for the README and writes
it to ``benchmarks/detection/RESULTS.md``. Run ``python benchmarks/detection/bench.py`` (``--quick``
for a small slice).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Protocol

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (HERE, REPO):  # seed_rules beside this file; tests.test_real_logs for the real-log readings
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from wandb_rlcluster.analyze import analyze_path  # noqa: E402
from wandb_rlcluster.core import analyze_rows  # noqa: E402
from wandb_rlcluster.core.readers import load_rows  # noqa: E402

from seed_rules import SEED_RULES, seed_findings  # noqa: E402
from synthetic import FAMILIES, combinations, expected_gauges, generate_run  # noqa: E402

# Seed sets: defaults are tuned on the first only; both are reported, the second is the verdict.
TUNING_SEEDS = range(0, 30)
HELD_OUT_SEEDS = range(100, 150)
QUICK_SEEDS = {"tuning": range(0, 3), "held-out": range(100, 103)}

# Harder than the generator's defaults (200 steps, every row logged, noise x1, onset 30-70 %).
N_STEPS = (100, 2000)  # log-uniform
NOISE = (0.5, 2.0)
LOGGING_STEPS = (1, 5, 10)
ONSET = (0.2, 0.85)  # fraction of the run
MIN_ROWS = 40
"""Fewest logged rows a corpus run has (logging_steps is drawn among those that leave this many): below
it the start-of-run baselines (10 rows) and the persistence windows leave no room to tell a trend from
noise, for either detector."""
HEALTHY_PER_FAMILY = 2
"""Healthy runs per family and seed: false alarms are the rarer event, so they get more runs."""

TRAINER = {"grpo": "grpo", "grpo_kl": "grpo", "dpo": "dpo", "ppo": "ppo", "sft": "sft"}
DETECTORS = ("core", "seed")
ALARM = frozenset({"warn", "stop"})
TARGETS = {"recall": 0.95, "early": 0.05, "healthy_any": 0.10}

REAL_LOGS = REPO.parent / "shared" / "real-logs"
RESULTS = HERE / "RESULTS.md"


@dataclass(frozen=True)
class Spec:
    """One corpus run: what to generate and under which split it is reported."""

    split: str
    seed: int
    family: str
    pathology: str | None
    n_steps: int
    noise: float
    logging_steps: int
    onset: float
    with_eval: bool
    gen_seed: int
    rep: int = 0


@dataclass
class Outcome:
    """What one detector said about one run, reduced to what the scores need."""

    first_match: int | None = None  # first warn/stop step from an expected gauge at or after onset
    first_rule: str = ""  # the "gauge/rule" that made it
    early: bool = False  # any warn/stop before onset
    early_expected: bool = False  # ... from an expected gauge (the detection would be no detection)
    any_alarm: bool = False
    any_stop: bool = False
    any_info: bool = False
    alarms: tuple[str, ...] = ()  # every "gauge/rule" that alarmed (for the healthy-run breakdown)


@dataclass
class Result:
    spec: Spec
    onset_step: int | None
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def delay(self, detector: str) -> float | None:
        o = self.outcomes[detector]
        if o.first_match is None or self.onset_step is None:
            return None
        return delay(o.first_match, self.onset_step, self.spec.n_steps)


def delay(first: int, onset: int, n_steps: int) -> float:
    """Detection delay as a share of the run left after onset (0 = at onset, 1 = at the last step)."""
    return (first - onset) / max(n_steps - onset, 1)


def make_specs(seeds: Iterable[int], split: str, healthy_per_family: int = HEALTHY_PER_FAMILY) -> list[Spec]:
    """Every (family, pathology) pair per seed, each run with its own randomly drawn difficulty."""
    specs: list[Spec] = []
    combos = combinations()
    for seed in seeds:
        for ci, (fam, path) in enumerate(combos):
            for rep in range(healthy_per_family if path is None else 1):
                rng = np.random.default_rng([seed, ci, rep, 0xDE7EC7])
                n_steps = int(round(math.exp(rng.uniform(math.log(N_STEPS[0]), math.log(N_STEPS[1])))))
                choices = [ls for ls in LOGGING_STEPS if n_steps // ls >= MIN_ROWS] or [1]
                ls = int(rng.choice(choices))
                noise = float(rng.uniform(*NOISE))
                onset = float(rng.uniform(*ONSET))
                with_eval = bool(fam in ("sft", "dpo") and rng.random() < 0.5)
                gen_seed = seed * 10_000 + ci * 10 + rep  # distinct baseline randomness per run
                specs.append(Spec(split, seed, fam, path, n_steps, noise, ls, onset, with_eval, gen_seed, rep))
    return specs


def _outcome(alarms: Sequence[tuple[str, str, str, int]], infos: int, onset: int | None,
             expected: tuple[str, ...]) -> Outcome:
    """Reduce (gauge, rule, severity, step) alarms to the scores' inputs."""
    o = Outcome(any_info=infos > 0, any_alarm=bool(alarms))
    o.any_stop = any(sev == "stop" for _, _, sev, _ in alarms)
    o.alarms = tuple(sorted({f"{g}/{r}" for g, r, _, _ in alarms}))
    if onset is not None:
        before = [g for g, _, _, s in alarms if s < onset]
        o.early = bool(before)
        o.early_expected = any(g in expected for g in before)
        hits = sorted((s, f"{g}/{r}") for g, r, _, s in alarms if s >= onset and g in expected)
        if hits:
            o.first_match, o.first_rule = hits[0]
    return o


def score_spec(spec: Spec) -> Result:
    """Generate one run and let both detectors read it."""
    run = generate_run(spec.family, spec.pathology, n_steps=spec.n_steps, onset=spec.onset, seed=spec.gen_seed,
                       noise=spec.noise, logging_steps=spec.logging_steps, with_eval=spec.with_eval)
    expected = expected_gauges(spec.pathology, spec.family)
    trainer = TRAINER[spec.family]
    res = Result(spec, run.onset_step)
    findings = analyze_rows(run.rows, trainer=trainer).findings
    core = [(f.gauge, f.rule, f.severity, f.step) for f in findings if f.severity in ALARM]
    res.outcomes["core"] = _outcome(core, sum(f.severity == "info" for f in findings), run.onset_step, expected)
    seed = seed_findings(run.rows, trainer)
    seed_alarms = [(f.gauge, f.rule, f.severity, f.step) for f in seed if f.severity in ALARM]
    res.outcomes["seed"] = _outcome(seed_alarms, sum(f.severity == "info" for f in seed), run.onset_step, expected)
    return res


class _Bar(Protocol):
    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool) -> _Bar:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm comes with transformers; the numbers do not need it
        return _NoBar()
    return tqdm(total=total, desc="scoring runs", unit="run", file=sys.stderr)


def run_corpus(specs: list[Spec], workers: int = 2, progress: bool = True) -> list[Result]:
    """Score every spec in ``workers`` processes (each run is independent), in spec order."""
    bar = _progress(len(specs), progress)
    out: list[Result] = []
    if workers <= 1:
        for s in specs:
            out.append(score_spec(s))
            bar.update(1)
    else:
        order = sorted(specs, key=lambda s: -(s.n_steps // s.logging_steps))  # long runs first: even finish
        with get_context("spawn" if sys.platform == "darwin" else "fork").Pool(workers) as pool:
            for r in pool.imap_unordered(score_spec, order, chunksize=4):
                out.append(r)
                bar.update(1)
    bar.close()
    index = {s: i for i, s in enumerate(specs)}
    out.sort(key=lambda r: index[r.spec])
    return out


# -- scores ------------------------------------------------------------------------------------


@dataclass
class Scores:
    """Aggregates for one detector over a set of runs."""

    n: int = 0
    detected: int = 0
    early: int = 0
    delays: list[float] = field(default_factory=list)
    healthy: int = 0
    false_stops: int = 0
    healthy_any: int = 0
    healthy_info: int = 0

    @property
    def recall(self) -> float:
        return self.detected / self.n if self.n else math.nan

    @property
    def early_rate(self) -> float:
        return self.early / self.n if self.n else math.nan

    @property
    def median_delay(self) -> float:
        return statistics.median(self.delays) if self.delays else math.nan

    @property
    def false_stop_rate(self) -> float:
        return self.false_stops / self.healthy if self.healthy else math.nan

    @property
    def healthy_any_rate(self) -> float:
        return self.healthy_any / self.healthy if self.healthy else math.nan

    @property
    def healthy_info_rate(self) -> float:
        return self.healthy_info / self.healthy if self.healthy else math.nan


def aggregate(results: Iterable[Result], detector: str) -> Scores:
    s = Scores()
    for r in results:
        o = r.outcomes[detector]
        if r.spec.pathology is None:
            s.healthy += 1
            s.false_stops += o.any_stop
            s.healthy_any += o.any_alarm
            s.healthy_info += o.any_info
            continue
        s.n += 1
        s.early += o.early
        d = r.delay(detector)
        if d is not None:
            s.detected += 1
            s.delays.append(d)
    return s


@dataclass
class Paired:
    """Delays on the runs both detectors detect cleanly (no expected-gauge alarm before onset)."""

    core: list[float] = field(default_factory=list)
    seed: list[float] = field(default_factory=list)
    row_lag: list[float] = field(default_factory=list)  # (ours - seed) first detection, in logged rows

    @property
    def n(self) -> int:
        return len(self.core)

    def median(self, detector: str) -> float:
        vals = self.core if detector == "core" else self.seed
        return statistics.median(vals) if vals else math.nan

    @property
    def faster(self) -> int:
        """Runs where ours detects strictly earlier."""
        return sum(a < b for a, b in zip(self.core, self.seed, strict=True))

    @property
    def slower(self) -> int:
        return sum(a > b for a, b in zip(self.core, self.seed, strict=True))


def paired(results: Iterable[Result]) -> Paired:
    p = Paired()
    for r in results:
        if r.spec.pathology is None or any(r.outcomes[d].early_expected for d in DETECTORS):
            continue
        a, b = r.delay("core"), r.delay("seed")
        if a is not None and b is not None:
            p.core.append(a)
            p.seed.append(b)
            lag = r.outcomes["core"].first_match - r.outcomes["seed"].first_match  # type: ignore[operator]
            p.row_lag.append(lag / r.spec.logging_steps)
    return p


def check_targets(core: Scores, pair: Paired) -> dict[str, bool]:
    """The issue's targets for our core, judged on one split."""
    return {
        f"recall ≥ {TARGETS['recall']:.2f}": core.recall >= TARGETS["recall"],
        "no false stops on healthy runs": core.false_stops == 0,
        f"early fires ≤ {_pct(TARGETS['early'])}": core.early_rate <= TARGETS["early"],
        f"healthy runs with any finding ≤ {_pct(TARGETS['healthy_any'])}":
            core.healthy_any_rate <= TARGETS["healthy_any"],
        "paired median delay ≤ seed rules'": pair.median("core") <= pair.median("seed"),
    }


# -- real logs ---------------------------------------------------------------------------------


@dataclass
class RealResult:
    name: str
    expected: str
    core_verdict: str
    core_ok: bool  # verdict, required findings and allowed gauges as in tests/test_real_logs.py
    seed_verdict: str
    seed_ok: bool  # verdict and allowed gauges (seed rules have no rule names to require)


def score_real_logs(directory: Path = REAL_LOGS) -> list[RealResult]:
    """Both detectors on the real logs, judged against the fixed readings of the real-log test."""
    from tests.test_real_logs import EXPECT

    out: list[RealResult] = []
    for name in sorted(EXPECT):
        trainer, verdict, required, allowed = EXPECT[name]
        path = directory / name
        if not path.is_file():
            continue
        s = analyze_path(str(path)).to_dict()
        fired = {(f["gauge"], f["rule"]) for f in s["findings"]}
        alarming = {f["gauge"] for f in s["findings"] if f["severity"] in ALARM}
        core_ok = s["trainer"] == trainer and s["verdict"] == verdict and required <= fired and alarming <= allowed
        seed = [f for f in seed_findings(load_rows(path).rows, trainer) if f.severity in ALARM]
        sv = "stop" if any(f.severity == "stop" for f in seed) else ("warn" if seed else "ok")
        seed_ok = sv == verdict and {f.gauge for f in seed} <= allowed
        out.append(RealResult(name, verdict, s["verdict"], core_ok, sv, seed_ok))
    return out


# -- rendering ---------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:.0f} %"


def _num(x: float) -> str:
    return "–" if x != x else f"{x:.2f}"


def _rows(lags: list[float]) -> str:
    return "–" if not lags else f"{statistics.median(lags):+g}"


def _vs(a: str, b: str) -> str:
    return f"{a} / {b}"


def split_table(results: list[Result], title: str) -> list[str]:
    """Markdown for one split: per (family, pathology), healthy runs, totals and the targets."""
    by: dict[tuple[str, str | None], list[Result]] = defaultdict(list)
    for r in results:
        by[(r.spec.family, r.spec.pathology)].append(r)
    seeds = sorted({r.spec.seed for r in results})
    lines = [
        f"### {title}: seeds {seeds[0]}–{seeds[-1]}, {len(results)} runs",
        "",
        "Each cell: **ours / seed rules**.",
        "",
        "| family | pathology | runs | recall | early fires | median delay | paired delay (runs) |",
        "|---|---|---:|---|---|---|---|",
    ]

    def row(label: tuple[str, str], rs: list[Result], bold: bool = False) -> str:
        c, s, p = aggregate(rs, "core"), aggregate(rs, "seed"), paired(rs)
        cells = [str(c.n), _vs(_pct(c.recall), _pct(s.recall)), _vs(_pct(c.early_rate), _pct(s.early_rate)),
                 _vs(_num(c.median_delay), _num(s.median_delay)),
                 f"{_vs(_num(p.median('core')), _num(p.median('seed')))} ({p.n})"]
        if bold:
            cells = [f"**{x}**" for x in cells]
        return "| " + " | ".join([*label, *cells]) + " |"

    for fam, path in combinations(include_healthy=False):
        if (fam, path) in by:
            lines.append(row((fam, str(path)), by[(fam, path)]))
    lines.append(row(("**all**", ""), results, bold=True))
    lines += ["", "| healthy family | runs | false stops | any warn/stop |", "|---|---:|---|---|"]
    c_all, s_all = aggregate(results, "core"), aggregate(results, "seed")
    for fam in FAMILIES:
        rs = by.get((fam, None), [])
        if rs:
            c, s = aggregate(rs, "core"), aggregate(rs, "seed")
            lines.append(f"| {fam} | {c.healthy} | {_vs(_pct(c.false_stop_rate), _pct(s.false_stop_rate))} | "
                         f"{_vs(_pct(c.healthy_any_rate), _pct(s.healthy_any_rate))} |")
    lines.append(f"| **all** | **{c_all.healthy}** | "
                 f"**{_vs(_pct(c_all.false_stop_rate), _pct(s_all.false_stop_rate))}** | "
                 f"**{_vs(_pct(c_all.healthy_any_rate), _pct(s_all.healthy_any_rate))}** |")
    p = paired(results)
    lines += [
        "",
        "Targets (ours): " + ", ".join(
            f"{name} {'✅' if ok else '❌'}" for name, ok in check_targets(c_all, p).items()) + ".",
        "",
        f"Paired delay: on the {p.n} runs both detect with no alarm from an expected gauge before onset, ours "
        f"detects first on {p.faster}, the seed rules on {p.slower}, both on the same row on "
        f"{p.n - p.faster - p.slower}; ours comes a median of {_rows(p.row_lag)} logged row(s) later.",
    ]
    for det, label in (("core", "ours"), ("seed", "seed rules")):
        cnt = Counter(a for r in results if r.spec.pathology is None for a in r.outcomes[det].alarms)
        if cnt:
            top = ", ".join(f"`{k}` {v}" for k, v in cnt.most_common(6))
            lines.append(f"Alarms on healthy runs by rule ({label}): {top}.")
    lines.append(f"The seed's 'deserves a look' heuristics (info, not counted) fire on "
                 f"{_pct(s_all.healthy_info_rate)} of healthy runs.")
    lines.append("")
    return lines


def real_table(real: list[RealResult]) -> list[str]:
    lines = ["### Real TRL logs: the readings fixed in `tests/test_real_logs.py`", "",
             "| log | reading | ours | seed rules |", "|---|---|---|---|"]
    for r in real:
        lines.append(f"| `{r.name}` | {r.expected} | {r.core_verdict} {'✅' if r.core_ok else '❌'} | "
                     f"{r.seed_verdict} {'✅' if r.seed_ok else '❌'} |")
    lines.append(f"| **matching the reading** | | **{sum(r.core_ok for r in real)}/{len(real)}** | "
                 f"**{sum(r.seed_ok for r in real)}/{len(real)}** |")
    lines += ["", "Ours must give the verdict, raise the required findings and alarm on no other gauge; the seed "
              "rules must give the verdict and alarm on no other gauge.", ""]
    return lines


def legend() -> list[str]:
    lines = ["### The seed rules (`benchmarks/detection/seed_rules.py`)", "",
             "| gauge | rule | severity | the posts' words (I = Part I, II = Part II, III = Part III) |",
             "|---|---|---|---|"]
    for (gauge, rule), (sev, src) in SEED_RULES.items():
        lines.append(f"| {gauge} | {rule} | {sev} | {src} |")
    return [*lines, ""]


def render(held: list[Result], tune: list[Result], real: list[RealResult], elapsed: float, workers: int,
           quick: bool) -> str:
    """The whole Markdown report."""
    lines = [
        "## Detection quality: the core vs the seed blog's rules",
        "",
        f"Generated by `python benchmarks/detection/bench.py{' --quick' if quick else ''}`; do not edit by hand.",
        "",
        f"Corpus: every `synthetic` family healthy ({HEALTHY_PER_FAMILY} runs per family and seed) "
        "and with every pathology it can have (one run per seed). Each run draws n_steps log-uniform in "
        f"{N_STEPS[0]}–{N_STEPS[1]}, logging_steps from {{{', '.join(map(str, LOGGING_STEPS))}}} (keeping at least "
        f"{MIN_ROWS} logged rows), noise ×{NOISE[0]}–{NOISE[1]}, onset at {_pct(ONSET[0])}–{_pct(ONSET[1])} of the "
        "run, eval rows on half the SFT/DPO runs. *Ours*: `InstrumentCluster` warn/stop findings. *Seed rules*: the "
        "posts' thresholds applied literally, checked on every row (legend below).",
        "",
        "Recall: a warn/stop from an expected gauge at or after onset. Early fires: any warn/stop before onset. "
        "Delay: (first detection − onset) / (n_steps − onset); *median delay* is over each detector's own "
        "detections, *paired delay* over the runs both detect with no alarm from an expected gauge before onset "
        "(a rule already ringing before the onset has detected nothing). Defaults were tuned on the tuning seeds only; "
        "the held-out seeds are the verdict.",
        "",
    ]
    lines += split_table(held, "Held-out")
    lines += split_table(tune, "Tuning")
    if real:
        lines += real_table(real)
    lines += legend()
    lines += [f"Runtime {elapsed:.0f} s with {workers} worker process(es) on {platform.machine()}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds per split (a few seconds)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None,
                    help="Markdown output (default: RESULTS.md beside this file; --quick writes nothing unless given)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    tune_seeds = QUICK_SEEDS["tuning"] if args.quick else TUNING_SEEDS
    held_seeds = QUICK_SEEDS["held-out"] if args.quick else HELD_OUT_SEEDS
    specs = make_specs(held_seeds, "held-out") + make_specs(tune_seeds, "tuning")
    results = run_corpus(specs, workers=args.workers, progress=not args.no_progress)
    held = [r for r in results if r.spec.split == "held-out"]
    tune = [r for r in results if r.spec.split == "tuning"]
    real = score_real_logs() if REAL_LOGS.is_dir() else []
    md = render(held, tune, real, time.perf_counter() - t0, args.workers, args.quick)
    print(md)
    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    if out is not None and not args.no_write:
        out.write_text(md)
        print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
