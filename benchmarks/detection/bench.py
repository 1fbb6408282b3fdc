"""Detection-quality benchmark: the core's gauges vs the seed blog's rules on labelled logs.

A labelled corpus is generated with ``wandb_rlcluster.synthetic`` (every family healthy, every
pathology it can have) with varied length, noise, logging interval and onset, over a tuning seed set
and a held-out seed set; the 14 real TRL logs are checked against the fixed readings of
``tests/test_real_logs.py``. Both detectors are scored the same way:

* recall: a warn/stop finding from one of the run's expected gauges at or after onset;
* early: any warn/stop finding before onset (a false alarm on the healthy prefix);
* healthy runs: false stops (any stop finding) and any-finding rate (any warn/stop);
* delay: (first matching step - onset) / (n_steps - onset), median over detected runs.

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (HERE, REPO):  # seed_rules beside this file; tests.test_real_logs for the real-log readings
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from seed_rules import seed_findings  # noqa: E402

from wandb_rlcluster.analyze import analyze_path  # noqa: E402
from wandb_rlcluster.core import analyze_rows  # noqa: E402
from wandb_rlcluster.core.readers import load_rows  # noqa: E402
from wandb_rlcluster.synthetic import FAMILIES, combinations, expected_gauges, generate_run  # noqa: E402

# Seed sets: tune on the first, report both, judge on the second only.
TUNING_SEEDS = range(0, 30)
HELD_OUT_SEEDS = range(100, 150)
QUICK_SEEDS = {"tuning": range(0, 3), "held-out": range(100, 103)}

# The corpus is harder than the generator's defaults (200 steps, every row logged, noise 1, onset
# 30-70 %): runs are 100-2000 steps, logged every 1, 5 or 10 steps, noise x0.5-2, onset 20-85 %.
N_STEPS = (100, 2000)
NOISE = (0.5, 2.0)
LOGGING_STEPS = (1, 5, 10)
ONSET = (0.2, 0.85)
MIN_ROWS = 40
"""Fewest logged rows a corpus run has: below that the start-of-run baselines (10 rows) plus the
persistence windows leave no room to tell a trend from noise, for either detector."""
HEALTHY_PER_FAMILY = 2
"""Healthy runs per family and seed: false alarms are rarer events than misses, so they get more runs."""

TRAINER = {"grpo": "grpo", "grpo_kl": "grpo", "dpo": "dpo", "ppo": "ppo", "sft": "sft"}
DETECTORS = ("core", "seed")
ALARM = frozenset({"warn", "stop"})

TARGETS = {"recall": 0.95, "false_stops": 0.0, "early": 0.05, "healthy_any": 0.10}
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

    first_match: int | None = None  # first alarming step from an expected gauge at/after onset
    first_rule: str = ""  # "gauge/rule" that made it
    early: bool = False  # any alarm before onset
    any_alarm: bool = False
    any_stop: bool = False
    any_info: bool = False
    alarms: tuple[str, ...] = ()  # "gauge/rule" of every alarm (for the healthy-run breakdown)
    early_alarms: tuple[str, ...] = ()


@dataclass
class Result:
    spec: Spec
    onset_step: int | None
    outcomes: dict[str, Outcome] = field(default_factory=dict)


def make_specs(seeds: Iterable[int], split: str, healthy_per_family: int = HEALTHY_PER_FAMILY) -> list[Spec]:
    """Every (family, pathology) pair per seed, each with its own randomly drawn difficulty."""
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
                gen_seed = seed * 10_000 + ci * 10 + rep
                specs.append(Spec(split, seed, fam, path, n_steps, noise, ls, onset, with_eval, gen_seed, rep))
    return specs


def _outcome(alarms: Sequence[tuple[str, str, str, int]], infos: int, onset: int | None,
             expected: tuple[str, ...]) -> Outcome:
    """Reduce (gauge, rule, severity, step) alarms to the scores' inputs."""
    o = Outcome(any_info=infos > 0)
    o.any_alarm = bool(alarms)
    o.any_stop = any(sev == "stop" for _, _, sev, _ in alarms)
    o.alarms = tuple(sorted({f"{g}/{r}" for g, r, _, _ in alarms}))
    if onset is not None:
        o.early_alarms = tuple(sorted({f"{g}/{r}" for g, r, _, s in alarms if s < onset}))
        o.early = bool(o.early_alarms)
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
    cluster = analyze_rows(run.rows, trainer=trainer)
    core = [(f.gauge, f.rule, f.severity, f.step) for f in cluster.findings if f.severity in ALARM]
    infos = sum(f.severity == "info" for f in cluster.findings)
    res.outcomes["core"] = _outcome(core, infos, run.onset_step, expected)
    seed = seed_findings(run.rows, trainer)
    seed_alarms = [(f.gauge, f.rule, f.severity, f.step) for f in seed if f.severity in ALARM]
    infos = sum(f.severity == "info" for f in seed)
    res.outcomes["seed"] = _outcome(seed_alarms, infos, run.onset_step, expected)
    return res


def run_corpus(specs: list[Spec], workers: int = 2, progress: bool = True) -> list[Result]:
    """Score every spec, in ``workers`` processes, with a progress bar."""
    bar = _progress(len(specs), progress)
    out: list[Result] = []
    if workers <= 1:
        for s in specs:
            out.append(score_spec(s))
            bar.update(1)
    else:
        # long runs first so that the two workers finish together
        order = sorted(specs, key=lambda s: -s.n_steps // s.logging_steps)
        with get_context("spawn" if sys.platform == "darwin" else "fork").Pool(workers) as pool:
            for r in pool.imap_unordered(score_spec, order, chunksize=4):
                out.append(r)
                bar.update(1)
    bar.close()
    key = {s: i for i, s in enumerate(specs)}
    out.sort(key=lambda r: key[r.spec])
    return out


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool) -> object:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm comes with transformers; the benchmark does not need it
        return _NoBar()
    return tqdm(total=total, desc="scoring runs", unit="run", file=sys.stderr)


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


def delay(first: int, onset: int, n_steps: int) -> float:
    """Detection delay as a share of the run left after onset (0 = at onset, 1 = at the last step)."""
    return (first - onset) / max(n_steps - onset, 1)


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
        if o.first_match is not None:
            s.detected += 1
            assert r.onset_step is not None
            s.delays.append(delay(o.first_match, r.onset_step, r.spec.n_steps))
    return s


def check_targets(core: Scores, seed: Scores) -> dict[str, bool]:
    """The issue's targets, judged on one split."""
    return {
        f"recall >= {TARGETS['recall']:.2f}": core.recall >= TARGETS["recall"],
        "no false stops on healthy runs": core.false_stops == 0,
        f"early fires <= {TARGETS['early']:.0%}": core.early_rate <= TARGETS["early"],
        f"healthy runs with any finding <= {TARGETS['healthy_any']:.0%}": core.healthy_any_rate <= TARGETS["healthy_any"],
        "median delay <= seed rules'": not core.median_delay > seed.median_delay,
    }


# -- real logs ---------------------------------------------------------------------------------


@dataclass
class RealResult:
    name: str
    expected: str
    core_verdict: str
    core_ok: bool  # verdict, required findings and allowed gauges all as in tests/test_real_logs.py
    seed_verdict: str
    seed_ok: bool  # verdict and allowed gauges (the seed has no rule names to require)


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
        core_ok = s["verdict"] == verdict and required <= fired and alarming <= allowed and s["trainer"] == trainer
        seed = [f for f in seed_findings(load_rows(path).rows, trainer) if f.severity in ALARM]
        sv = "stop" if any(f.severity == "stop" for f in seed) else ("warn" if seed else "ok")
        seed_ok = sv == verdict and {f.gauge for f in seed} <= allowed
        out.append(RealResult(name, verdict, s["verdict"], core_ok, sv, seed_ok))
    return out


# -- rendering ---------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:.0f} %"


def _rate(x: float) -> str:
    return "–" if x != x else f"{x:.2f}"


def _pair(a: str, b: str) -> str:
    return f"{a} / {b}"


def split_table(results: list[Result], title: str) -> list[str]:
    """Markdown for one split: per (family, pathology), healthy runs, totals and the targets."""
    by: dict[tuple[str, str | None], list[Result]] = defaultdict(list)
    for r in results:
        by[(r.spec.family, r.spec.pathology)].append(r)
    seeds = sorted({r.spec.seed for r in results})
    lines = [f"### {title} (seeds {seeds[0]}–{seeds[-1]}, {len(results)} runs)", ""]
    lines += [
        "| family | pathology | runs | recall (ours / seed) | early fires (ours / seed) | median delay (ours / seed) |",
        "|---|---|---:|---|---|---|",
    ]
    for fam, path in combinations(include_healthy=False):
        rs = by.get((fam, path), [])
        if not rs:
            continue
        c, s = aggregate(rs, "core"), aggregate(rs, "seed")
        lines.append(f"| {fam} | {path} | {c.n} | {_pair(_pct(c.recall), _pct(s.recall))} | "
                     f"{_pair(_pct(c.early_rate), _pct(s.early_rate))} | "
                     f"{_pair(_rate(c.median_delay), _rate(s.median_delay))} |")
    c_all, s_all = aggregate(results, "core"), aggregate(results, "seed")
    lines.append(f"| **all** | | **{c_all.n}** | **{_pair(_pct(c_all.recall), _pct(s_all.recall))}** | "
                 f"**{_pair(_pct(c_all.early_rate), _pct(s_all.early_rate))}** | "
                 f"**{_pair(_rate(c_all.median_delay), _rate(s_all.median_delay))}** |")
    lines += ["", "| healthy family | runs | false stops (ours / seed) | any warn/stop (ours / seed) |",
              "|---|---:|---|---|"]
    for fam in FAMILIES:
        rs = by.get((fam, None), [])
        if not rs:
            continue
        c, s = aggregate(rs, "core"), aggregate(rs, "seed")
        lines.append(f"| {fam} | {c.healthy} | {_pair(_pct(c.false_stop_rate), _pct(s.false_stop_rate))} | "
                     f"{_pair(_pct(c.healthy_any_rate), _pct(s.healthy_any_rate))} |")
    lines.append(f"| **all** | **{c_all.healthy}** | "
                 f"**{_pair(_pct(c_all.false_stop_rate), _pct(s_all.false_stop_rate))}** | "
                 f"**{_pair(_pct(c_all.healthy_any_rate), _pct(s_all.healthy_any_rate))}** |")
    lines += ["", "Targets (ours): " + ", ".join(
        f"{name} {'✅' if ok else '❌'}" for name, ok in check_targets(c_all, s_all).items())]
    # what still rings on healthy runs, so a reader can see where the remaining false alarms come from
    for det, label in (("core", "ours"), ("seed", "seed rules")):
        cnt = Counter(a for r in results if r.spec.pathology is None for a in r.outcomes[det].alarms)
        if cnt:
            top = ", ".join(f"`{k}` {v}" for k, v in cnt.most_common(6))
            lines.append(f"Healthy-run alarms by rule ({label}): {top}.")
    lines.append("")
    return lines


def real_table(real: list[RealResult]) -> list[str]:
    lines = ["### Real TRL logs (readings fixed in `tests/test_real_logs.py`)", "",
             "| log | expected | ours | seed rules |", "|---|---|---|---|"]
    for r in real:
        lines.append(f"| `{r.name}` | {r.expected} | {r.core_verdict} {'✅' if r.core_ok else '❌'} | "
                     f"{r.seed_verdict} {'✅' if r.seed_ok else '❌'} |")
    lines.append(f"| **matching the reading** | | **{sum(r.core_ok for r in real)}/{len(real)}** | "
                 f"**{sum(r.seed_ok for r in real)}/{len(real)}** |")
    lines += ["", "Ours must match the verdict, raise the required findings and alarm on no other gauge; the seed "
              "rules must match the verdict and alarm on no other gauge.", ""]
    return lines


def render(held: list[Result], tune: list[Result], real: list[RealResult], elapsed: float, workers: int,
           quick: bool) -> str:
    """The whole Markdown report."""
    lines = [
        "## Detection quality: the core vs the seed blog's rules",
        "",
        "Generated by `python benchmarks/detection/bench.py`" + (" --quick" if quick else "") + "; do not edit by hand.",
        "",
        f"Corpus: every `wandb_rlcluster.synthetic` family healthy ({HEALTHY_PER_FAMILY} runs per family and seed) "
        "and with every pathology it can have, one run per seed; per run n_steps log-uniform "
        f"{N_STEPS[0]}–{N_STEPS[1]}, logging_steps from {{{', '.join(map(str, LOGGING_STEPS))}}} (at least "
        f"{MIN_ROWS} logged rows), noise ×{NOISE[0]}–{NOISE[1]}, onset {ONSET[0]:.0%}–{ONSET[1]:.0%} of the run, "
        "eval rows on half the SFT/DPO runs. *ours*: `InstrumentCluster` findings (warn/stop); *seed*: the posts' "
        "thresholds applied literally, one check per row (`benchmarks/detection/seed_rules.py`). Recall: a warn/stop "
        "from an expected gauge at or after onset. Early: any warn/stop before onset. Delay: (first detection − "
        "onset) / (n_steps − onset), median over detected runs. Defaults were tuned on the tuning seeds only.",
        "",
    ]
    lines += split_table(held, "Held-out seeds")
    lines += split_table(tune, "Tuning seeds")
    if real:
        lines += real_table(real)
    lines += [f"Runtime {elapsed:.0f} s with {workers} worker process(es) on {platform.machine()}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds per split (a minute's smoke run)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS, help="where to write the Markdown (default RESULTS.md)")
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
    if not args.no_write:
        args.out.write_text(md)
        print(f"written to {args.out}", file=sys.stderr)
    return 0


def iter_slice(seeds: Iterable[int], split: str = "held-out", per_combo: int = 1) -> Iterator[Result]:
    """Score a small slice in-process (the CI test's entry point)."""
    for spec in make_specs(seeds, split, healthy_per_family=per_combo):
        yield score_spec(spec)


if __name__ == "__main__":
    sys.exit(main())
