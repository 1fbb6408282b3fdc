"""Calibration harness (issue 47): does every rule keep its false-alarm budget under every kind of healthy noise?

Every rule of the core (``analyze_rows``, the whole ``InstrumentCluster``) reads healthy streams of each trainer
family (GRPO without and with a KL term, DPO, PPO, SFT; ``streams.py``) under each noise model of the grid
(``noise.py``: iid Gaussian; AR(1) 0.5, 0.8, 0.95; t(3) outliers; binomial success rates at group sizes 4, 8, 16;
band-limited; slow saturating drift; logged every step and every 10). A rule's false-alarm rate under a model is
the share of healthy runs of a family on which it raised a warn or a stop; the table shows the worst family. It is
judged against the rule's declared budget (``Rule.alarm_budget``, ``core/rule.py``): a rule is **over** when its
rate exceeds the budget by more than chance allows (one-sided binomial test at ``ALPHA``: with 30 runs a cell, a
2 % budget is over from 3 warned runs), and the harness exits 1 when any rule is over under any model.

The same harness measures delays (``--delays``): a graded change (abrupt, or a ramp over 20 rows; 1-10 noise
sigmas, in the direction that hurts: reward down, KL, length, loss, gradient norm up, entropy and margin down) is
laid on one key of an iid stream at half the run, and each rule's first warn at or after it is read, beside the
clairvoyant CUSUM: Page's CUSUM on the key's true standardised residual (it knows the path, the noise and the
change's size and sign), its threshold set by simulation so that it false-alarms on the default budget's share of
healthy runs of the same length. A ramp's anchor is the same CUSUM (tuned to the ramp's final size).

Seeds: the tuning seeds are 0-29 (``TUNING_SEEDS``); **50000-50099 are reserved for the final score**
(``FINAL_SEEDS``, ``--final``): run once, whole, after the rules are settled, and reported as such. The CI slice
(``tests/test_calibration.py``) runs a reduced grid on seeds 0-1.

Run (from the checkout's root; about 5 minutes on two cores)::

    PYTHONPATH=src python benchmarks/calibration/harness.py              # the grid on the tuning seeds
    PYTHONPATH=src python benchmarks/calibration/harness.py --delays     # and the delay table
    PYTHONPATH=src python benchmarks/calibration/harness.py --final      # the reserved seeds (once, at the end)

Not a test (``tests/test_calibration.py`` is).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
for _p in (HERE.parent / "detection", HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from calibration import noise, streams  # noqa: E402
from calibration.streams import Change  # noqa: E402
from wandb_rlcluster.core import analyze_rows  # noqa: E402
from wandb_rlcluster.core.catalog import CATALOG  # noqa: E402
from wandb_rlcluster.core.rule import FALSE_ALARM_BUDGET  # noqa: E402

TUNING_SEEDS = range(0, 30)
FINAL_SEEDS = range(50000, 50100)
"""Reserved for the final score: no tuning reads them (``--final`` runs them, once)."""
SLICE_SEEDS = range(0, 2)
N_ROWS = (120, 250, 500)
"""Logged rows of a healthy run: drawn per seed among these (the false-alarm rate grows with a run's length)."""
ALPHA = 0.05
ALARM = frozenset({"warn", "stop"})
SIZES = (1.0, 2.0, 3.0, 5.0, 10.0)
DELAY_ROWS = 250
DELAY_SEEDS = range(0, 4)
CHANGES: dict[str, tuple[tuple[str, float], ...]] = {
    "grpo": (("rewards/accuracy_reward/mean", -1.0), ("entropy", -1.0), ("completions/mean_length", 1.0),
             ("grad_norm", 1.0)),
    "grpo_kl": (("kl", 1.0), ("rewards/accuracy_reward/mean", -1.0)),
    "dpo": (("loss", 1.0), ("rewards/chosen", -1.0), ("grad_norm", 1.0)),
    "ppo": (("objective/kl", 1.0), ("objective/scores", -1.0), ("policy/entropy_avg", -1.0)),
    "sft": (("loss", 1.0), ("grad_norm", 1.0)),
}
"""Per family, the keys a graded change is laid on and the direction that hurts."""

BUDGETS = {r.id: r.alarm_budget() for r in CATALOG}


def budget_of(rule: str) -> float:
    """A rule's budget (a per-function rule ``id:fn`` by its id; a rule the catalog lacks: the default)."""
    return BUDGETS.get(rule.split(":", 1)[0], FALSE_ALARM_BUDGET)


@dataclass(frozen=True)
class Job:
    family: str
    model: str
    seed: int
    n_rows: int
    change: Change | None = None


@dataclass
class Outcome:
    job: Job
    #: rule id -> the first step it warned (or stopped) at
    first: dict[str, int] = field(default_factory=dict)
    #: the clairvoyant CUSUM's first alarm row index (delay jobs), or None
    cusum_row: int | None = None


def n_rows_for(seed: int) -> int:
    return N_ROWS[seed % len(N_ROWS)]


def healthy_jobs(seeds: Iterable[int], models: Sequence[str] = noise.MODELS,
                 families: Sequence[str] = streams.FAMILIES) -> list[Job]:
    jobs = []
    for m in models:
        for f in families:
            if m in noise.BINOMIAL and f not in streams.BINOMIAL_FAMILIES:
                continue
            jobs.extend(Job(f, m, s, n_rows_for(s)) for s in seeds)
    return jobs


def delay_jobs(seeds: Iterable[int], families: Sequence[str] = streams.FAMILIES,
               sizes: Sequence[float] = SIZES) -> list[Job]:
    jobs = []
    for f in families:
        for key, d in CHANGES[f]:
            for shape in ("abrupt", "ramp"):
                for size in sizes:
                    ch = Change(key, d, size, shape, DELAY_ROWS // 2)
                    jobs.extend(Job(f, "iid", s, DELAY_ROWS, ch) for s in seeds)
    return jobs


def run_job(job: Job) -> Outcome:
    """Generate the stream and let the whole cluster read it (as the callback would: ``max_steps`` known)."""
    s = streams.make_stream(job.family, job.model, job.seed, job.n_rows, job.change)
    c = analyze_rows(s.rows, trainer=streams.TRAINER[job.family], max_steps=s.n_steps)
    out = Outcome(job)
    for f in c.findings:
        if f.severity in ALARM:
            rid = f.rule.split(":", 1)[0]
            if rid not in out.first or f.step < out.first[rid]:
                out.first[rid] = int(f.step)
    if job.change is not None and s.residual is not None:
        out.cusum_row = cusum_alarm(s.residual, job.change)
    return out


def run_all(jobs: list[Job], workers: int = 2, progress: bool = True) -> list[Outcome]:
    bar = _progress(len(jobs), progress)
    out: list[Outcome] = []
    if workers <= 1:
        for j in jobs:
            out.append(run_job(j))
            bar.update(1)
    else:
        with get_context("fork" if sys.platform != "win32" else "spawn").Pool(workers) as pool:
            for o in pool.imap_unordered(run_job, jobs, chunksize=4):
                out.append(o)
                bar.update(1)
    bar.close()
    index = {j: i for i, j in enumerate(jobs)}
    out.sort(key=lambda o: index[o.job])
    return out


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool) -> _NoBar:
    if enabled:
        try:
            from tqdm import tqdm
            return tqdm(total=total, desc="calibration", unit="run", file=sys.stderr)  # type: ignore[no-any-return]
        except ImportError:  # the numbers do not need it
            pass
    return _NoBar()


# -- false alarms ---------------------------------------------------------------------------------------------------
def binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return float(sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def over_budget(k: int, n: int, budget: float, alpha: float = ALPHA) -> bool:
    """More warned runs than a rule within ``budget`` makes by chance (one-sided, at ``alpha``)."""
    return n > 0 and k / n > budget and binom_tail(k, n, budget) < alpha


@dataclass
class Cell:
    """One rule under one model: the worst family's warned runs out of its runs."""

    warned: int
    runs: int
    family: str
    over: bool

    @property
    def rate(self) -> float:
        return self.warned / self.runs if self.runs else 0.0


def false_alarms(outcomes: Iterable[Outcome]) -> dict[str, dict[str, Cell]]:
    """rule -> model -> its worst family's cell (an over-budget family first, then the highest rate)."""
    runs: dict[tuple[str, str], int] = defaultdict(int)
    warned: dict[tuple[str, str, str], int] = defaultdict(int)
    for o in outcomes:
        runs[(o.job.model, o.job.family)] += 1
        for rid in o.first:
            warned[(rid, o.job.model, o.job.family)] += 1
    table: dict[str, dict[str, Cell]] = defaultdict(dict)
    for (rid, model, fam), k in warned.items():
        n = runs[(model, fam)]
        cell = Cell(k, n, fam, over_budget(k, n, budget_of(rid)))
        old = table[rid].get(model)
        if old is None or (cell.over, cell.rate) > (old.over, old.rate):
            table[rid][model] = cell
    return table


def any_warned(outcomes: Iterable[Outcome]) -> dict[str, tuple[int, int]]:
    """model -> (healthy runs with any warn or stop, runs)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes:
        out[o.job.model][1] += 1
        out[o.job.model][0] += bool(o.first)
    return {m: (v[0], v[1]) for m, v in out.items()}


def alarm_table(outcomes: list[Outcome], models: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The markdown table (rules that warned at least once) and the (rule, model) pairs over budget."""
    table = false_alarms(outcomes)
    short = {m: m.replace("_every10", "/10") for m in models}
    lines = ["| rule | budget | " + " | ".join(short[m] for m in models) + " |",
             "|---|---|" + "---|" * len(models)]
    over: list[tuple[str, str]] = []
    for rid in sorted(table):
        cells = []
        for m in models:
            c = table[rid].get(m)
            if c is None:
                cells.append("·")
                continue
            mark = " **✗**" if c.over else ""
            cells.append(f"{c.warned}/{c.runs} {c.family}{mark}")
            if c.over:
                over.append((rid, m))
        lines.append(f"| {rid} | {budget_of(rid):.1%} | " + " | ".join(cells) + " |")
    totals = any_warned(outcomes)
    lines.append("| **any rule** | | " + " | ".join(
        f"{totals[m][0]}/{totals[m][1]} ({totals[m][0] / max(totals[m][1], 1):.0%})" if m in totals else "·"
        for m in models) + " |")
    return lines, over


# -- delays ---------------------------------------------------------------------------------------------------------
_THRESHOLDS: dict[tuple[float, int], float] = {}


def cusum_threshold(size: float, n: int, rate: float = FALSE_ALARM_BUDGET, sims: int = 4000) -> float:
    """Page's CUSUM threshold h for a shift of ``size`` sigmas: it crosses on ``rate`` of iid N(0, 1) runs of ``n``
    rows (by simulation, seeded: the same h every time)."""
    key = (size, n)
    if key not in _THRESHOLDS:
        z = np.random.default_rng(12345).standard_normal((sims, n))
        s = np.zeros(sims)
        peak = np.zeros(sims)
        for i in range(n):
            s = np.maximum(0.0, s + size * (z[:, i] - size / 2.0))
            peak = np.maximum(peak, s)
        _THRESHOLDS[key] = float(np.quantile(peak, 1.0 - rate))
    return _THRESHOLDS[key]


def cusum_alarm(residual: np.ndarray, change: Change) -> int | None:
    """The first row at or after the change's onset where the clairvoyant CUSUM crosses (None: never)."""
    h = cusum_threshold(change.size, len(residual))
    s = 0.0
    for i, r in enumerate(change.direction * residual):
        s = max(0.0, s + change.size * (r - change.size / 2.0))
        if s > h:
            return i if i >= change.onset else None
    return None


def _rows_after(o: Outcome, step: int | None) -> int | None:
    """Rows from the change's onset to ``step`` (None: no alarm at or after the onset)."""
    assert o.job.change is not None
    if step is None:
        return None
    row = step - 1  # a delay stream logs every step: step = row index + 1
    return row - o.job.change.onset if row >= o.job.change.onset else None


def delay_table(outcomes: list[Outcome], sizes: Sequence[float] = SIZES) -> list[str]:
    """Per change (family, key, direction, shape): the median delay in rows of the first rule to warn, which rule
    that was most often, and the clairvoyant CUSUM's median delay; '-' where fewer than half the runs warned."""
    groups: dict[tuple[str, str, float, str], dict[float, list[Outcome]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        ch = o.job.change
        assert ch is not None
        groups[(o.job.family, ch.key, ch.direction, ch.shape)][ch.size].append(o)
    head = "| family | change | shape | " + " | ".join(f"{s:g}σ rule / CUSUM" for s in sizes) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(sizes)]
    for (fam, key, d, shape), by_size in groups.items():
        cells = []
        for size in sizes:
            os_ = by_size.get(size, [])
            prod, rules, cus = [], defaultdict(int), []
            for o in os_:
                hits = [(_rows_after(o, st), rid) for rid, st in o.first.items()]
                hits = [(dl, rid) for dl, rid in hits if dl is not None]
                if hits:
                    dl, rid = min(hits)
                    prod.append(dl)
                    rules[rid] += 1
                if o.cusum_row is not None:
                    cus.append(o.cusum_row - o.job.change.onset)  # type: ignore[union-attr]
            p = _med(prod, len(os_))
            c = _med(cus, len(os_))
            top = max(rules, key=lambda r: rules[r]) if rules else ""
            cells.append(f"{p} {top} / {c}".replace("  ", " "))
        sign = "↑" if d > 0 else "↓"
        lines.append(f"| {fam} | {key} {sign} | {shape} | " + " | ".join(cells) + " |")
    return lines


def rule_delay_table(outcomes: list[Outcome], sizes: Sequence[float] = SIZES) -> list[str]:
    """Per rule: its median delay (rows) over the abrupt changes it warned on at or after the onset, by size."""
    per: dict[str, dict[float, list[int]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        ch = o.job.change
        assert ch is not None
        if ch.shape != "abrupt":
            continue
        for rid, st in o.first.items():
            dl = _rows_after(o, st)
            if dl is not None:
                per[rid][ch.size].append(dl)
    lines = ["| rule | " + " | ".join(f"{s:g}σ" for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for rid in sorted(per):
        lines.append(f"| {rid} | " + " | ".join(
            f"{statistics.median(per[rid][s]):g} ({len(per[rid][s])})" if per[rid][s] else "·" for s in sizes) + " |")
    return lines


def _med(xs: list[int], n: int) -> str:
    return f"{statistics.median(xs):g}" if xs and 2 * len(xs) >= n else "-"


# -- main -----------------------------------------------------------------------------------------------------------
def seed_range(text: str) -> range:
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=seed_range, default=TUNING_SEEDS, help="seed range, e.g. 0-29 (default)")
    ap.add_argument("--final", action="store_true", help="the reserved seeds 50000-50099 (once, at the end)")
    ap.add_argument("--models", nargs="*", default=list(noise.MODELS), choices=noise.MODELS)
    ap.add_argument("--families", nargs="*", default=list(streams.FAMILIES), choices=streams.FAMILIES)
    ap.add_argument("--delays", action="store_true", help="also the delay table on graded changes")
    ap.add_argument("--no-alarms", action="store_true", help="skip the false-alarm grid")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the markdown here")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    seeds = FINAL_SEEDS if a.final else a.seeds
    t0 = time.time()
    lines = [f"# Calibration: {seeds.start}-{seeds.stop - 1}, {len(a.models)} noise models, "
             f"{len(a.families)} families", ""]
    over: list[tuple[str, str]] = []
    if not a.no_alarms:
        outs = run_all(healthy_jobs(seeds, a.models, a.families), a.workers, not a.quiet)
        table, over = alarm_table(outs, a.models)
        lines += ["## Healthy runs warned, per rule and noise model (worst family; ✗ over budget)", "", *table, ""]
        lines.append(f"Over budget: {', '.join(f'{r} under {m}' for r, m in over) or 'none'}.")
        lines.append("")
    if a.delays:
        fams = [f for f in a.families if f in CHANGES]
        outs = run_all(delay_jobs(DELAY_SEEDS, fams), a.workers, not a.quiet)
        lines += ["## Delay (rows) on graded changes, iid noise: first rule to warn / clairvoyant CUSUM", "",
                  *delay_table(outs), "", "## Per rule: median delay on abrupt changes (runs it warned on)", "",
                  *rule_delay_table(outs), ""]
    lines.append(f"_{time.time() - t0:.0f} s._")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
