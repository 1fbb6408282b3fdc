"""The abrupt-break watcher: every quantity the gauges read, tested for a step change decided in rows (issue #47).

Not one of the fourteen gauges: like the diagnoser it reads across them, and the cluster runs it after them (before
the diagnoser, which sees its rule transitions). For each series (``break_meaning.SERIES_KEYS``, each reward
function's mean, the gold, the completion length spread) it keeps one ``breaks.BreakTest``; a decided break is a
finding that says what broke, at which step, by how much (sigmas of the series' own noise and a share of its level),
that it held, and what usually breaks a run that way, narrowed by what broke with it. A break in the harmful direction
warns (``abrupt-break``); one in the other is news only (``abrupt-shift``), and a reward that jumps up is left to
``reward-shift-up``. A proxy reward and a gold that moved together row by row and part at once is
``proxy-gold-split``: the reward function (or the gold) changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .break_meaning import MEANINGS, SERIES_KEYS, Meaning, cause_text
from .breaks import (
    BREAK_ARL,
    DELAY,
    HOLD_SHARE,
    MAX_DELAY,
    MIN_REF,
    SHORT_DELAY,
    SHORT_MIN_REF,
    Break,
    BreakTest,
    fit_from,
)
from .gauge import Gauge, finite
from .keys import Row, is_reward_function_key
from .rule import Example, Rule
from .stats import RollingCorrelation
from .streams import grpo

BREAKS_ID = "breaks"
SPLIT_ROWS = 32
"""Rows of paired proxy and gold changes read for their coupling before a break."""
SPLIT_AT_ONCE = 8
"""A split is a break decided within this many rows of its onset (a slow drift apart is the gold rules' business)."""
MOVED_SIGMAS = 3.0
"""Another series moved with a break when its rows since the onset sit this many of its sigmas from where it was."""


class BreakWatcher(Gauge):
    """Tests every series a row carries for an abrupt break (see the module docstring)."""

    id = BREAKS_ID
    title = "Abrupt breaks"
    inputs = ()
    outputs = ("score", "breaks")
    defaults = {"arl": BREAK_ARL, "gold": [], "clear": 10, "watch_rows": 30, "split_corr": 0.5, "split_sigma": 2.0,
                "max_series": 48}

    def setup(self) -> None:
        self.tests: dict[str, BreakTest] = {}
        self.kinds: dict[str, str] = {}
        self.steps: dict[str, list[int]] = {}
        #: series -> [harmful, key, break, rows followed, still on, message]: a break followed while it holds
        self.open: dict[str, list[Any]] = {}
        self.gold_keys = tuple(f"rewards/{g}/mean" for g in self.p["gold"])
        self.pairs: list[list[float]] = []  # (proxy change, gold change) per row both were logged
        self.last_pair: list[float] = []
        self.split_on = False
        self.count = 0
        self.min_ref, self.delay = MIN_REF, DELAY

    def plan_short(self) -> None:
        """A run planned for under ``SHORT_RUN_ROWS`` rows (a short fine-tune, a fault benchmark's 60 steps): its
        series are read from a 12-row reference 4 rows behind, so that a break in its first half is tested at all
        (the reference's small-sample terms widen its thresholds meanwhile)."""
        self.min_ref, self.delay = SHORT_MIN_REF, SHORT_DELAY
    # -- the row --
    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        series = self._series(row.values)
        decided: list[tuple[str, str, float, Break]] = []
        for name, key, x in series:
            test = self.tests.get(name)
            if test is None:
                if len(self.tests) >= self.p["max_series"]:
                    continue
                test = self.tests[name] = BreakTest(float(self.p["arl"]), self.min_ref, self.delay)
            steps = self.steps.setdefault(name, [])
            steps.append(self.step)
            if len(steps) > MAX_DELAY + 2:
                del steps[0]
            b = test.push(x)
            if b is not None:
                decided.append((name, key, x, b))
        self._pair(row.values)
        names = {d[0] for d in decided}
        for name, key, x, b in decided:
            self._report(name, key, x, b, names)
        self._follow(series, names)
        if self.split_on and not (names & {"reward", "gold"}):
            self.split_on = self.check("proxy-gold-split", False, "warn", "reward", None, "",
                                       clear=self.p["clear"])
        self.derived["score"] = max((t.score for t in self.tests.values()), default=0.0)
        self.derived["breaks"] = float(self.count)

    def _series(self, v: Mapping[str, float]) -> list[tuple[str, str, float]]:
        """(series, key, value) for every finite value the row carries that a series is read from."""
        out: list[tuple[str, str, float]] = []
        seen: set[str] = set()
        for key, name, kind in SERIES_KEYS:
            x = v.get(key)
            if x is not None and name not in seen and finite(x):
                seen.add(name)
                self.kinds[name] = kind
                if not MEANINGS[kind].log:
                    out.append((name, key, x))
                elif x > 0:  # a multiplicative quantity on its logarithm (a 0 or a negative estimate is skipped)
                    out.append((name, key, math.log(x)))
        gold = [v[k] for k in self.gold_keys if k in v and finite(v[k])]
        if gold:
            out.append(("gold", self.gold_keys[0], sum(gold) / len(gold)))
            self.kinds["gold"] = "gold"
        lo, hi, mean = (v.get("completions/min_length"), v.get("completions/max_length"),
                        v.get("completions/mean_length"))
        if lo is not None and hi is not None and mean is not None and finite(hi - lo) and finite(mean) and mean > 0:
            out.append(("length_spread", "completions/max_length", (hi - lo) / mean))
            self.kinds["length_spread"] = "length_spread"
        for key, x in v.items():
            if (key.endswith("/mean") and key not in self.gold_keys and is_reward_function_key(key)
                    and finite(x)):
                name = key[:-5]
                out.append((name, key, x))
                self.kinds[name] = "component"
        return out

    # -- a decided break --
    def _report(self, name: str, key: str, x: float, b: Break, names: set[str]) -> None:
        kind = self.kinds[name]
        meaning = MEANINGS[kind]
        before, after = self._levels(name, b)
        if not b.abrupt or not self._material(meaning, b, before, after):
            return  # a slow shift is the trend rules' business; a tiny one nobody acts on
        self.count += 1
        harmful = meaning.harmful == 0 or b.sign == meaning.harmful
        text = self._message(name, key, b, names, before, after)
        if harmful or kind != "reward":  # a reward jumping up is reward-shift-up's news
            self.open[name] = [harmful, key, b, 0, True, text]
            self._advance(name, True, self._raw(name, x))
        if kind in ("reward", "gold") and self.gold_keys:
            self._split(name, key, x, b, names)

    def _raw(self, name: str, x: float) -> float:
        return math.exp(x) if MEANINGS[self.kinds[name]].log else x

    def _levels(self, name: str, b: Break) -> tuple[float, float]:
        """The series' level before the break and after it, in its own units."""
        level = b.before.expect(b.onset)
        return self._raw(name, level), self._raw(name, level + b.size)

    @staticmethod
    def _material(meaning: Meaning, b: Break, before: float, after: float) -> bool:
        """A break a user would act on: ``min_share`` of its level (judged where the level stands clear of 0: two
        sigmas of the rows; a multiplicative quantity's by its ratio) and ``min_abs`` in its units."""
        change = abs(after - before)
        if meaning.log:  # a multiplicative quantity: a halving is as large as a doubling
            return change >= meaning.min_abs and max(after / before, before / after) - 1.0 >= meaning.min_share
        clear_of_zero = abs(before) >= 2.0 * b.before.sig_x
        return change >= meaning.min_abs and (not clear_of_zero or change >= meaning.min_share * abs(before))

    def _onset_step(self, name: str, b: Break) -> int:
        steps = self.steps[name]
        back = b.decided - b.onset + 1
        return steps[-back] if back <= len(steps) else steps[0]

    def _message(self, name: str, key: str, b: Break, names: set[str], before: float, after: float) -> str:
        meaning = MEANINGS[self.kinds[name]]
        rows = b.decided - b.onset + 1
        moved, quiet = [], []
        for other, test in self.tests.items():
            if other == name or not MEANINGS[self.kinds[other]].policy:
                continue
            d = test.displacement(rows)
            if other in names or abs(d) >= MOVED_SIGMAS:
                moved.append(other)
            elif d == d:
                quiet.append(other)
        share = f"{after / before - 1.0:+.0%}, " if abs(before) > 0 else ""
        scale = " of its logarithm" if meaning.log else ""
        return (f"{meaning.label} ({key}) broke {'down' if b.sign < 0 else 'up'} at step {self._onset_step(name, b)}: "
                f"from {before:.4g} to {after:.4g} ({share}{b.sigmas:+.1f} sigma of its own noise{scale}), and "
                f"held the {rows} rows since. {cause_text(meaning, b.sign, moved, quiet).capitalize()}.")

    def _follow(self, series: list[tuple[str, str, float]], names: set[str]) -> None:
        """Each open break: active while its rows stay ``HOLD_SHARE`` of it away from the old level, for at most
        ``watch_rows`` rows (then it is the run's new level); its rule resolves ``clear`` rows after."""
        for name, _key, x in series:
            o = self.open.get(name)
            if o is None or name in names:
                continue
            b = o[2]
            o[3] += 1
            o[4] = o[4] and b.displaced(self.tests[name].n, x) >= HOLD_SHARE and o[3] < self.p["watch_rows"]
            if not (self._advance(name, o[4], self._raw(name, x)) or o[4]):
                del self.open[name]

    def _advance(self, name: str, on: bool, x: float) -> bool:
        """The break's rule on this row (``on``: it holds); a quantity that spikes for a row or three and comes
        back warns only once its break held ``confirm`` rows. Returns firing."""
        harmful, key, _b, _rows, _on, text = self.open[name]
        meaning = MEANINGS[self.kinds[name]]
        clear = self.p["clear"]
        if harmful:
            return self.check(f"abrupt-break:{name}", on, "warn", key, x,
                              lambda: text + " " + self.fix("abrupt-break", sentence=True), for_=meaning.confirm,
                              clear=clear, long_hold=False)
        return self.check(f"abrupt-shift:{name}", on, "info", key, x, text, clear=clear)

    # -- proxy and gold --
    def _pair(self, v: Mapping[str, float]) -> None:
        proxy = v.get("reward", v.get("objective/scores"))
        gold = [v[k] for k in self.gold_keys if k in v and finite(v[k])]
        if proxy is None or not finite(proxy) or not gold:
            return
        g = sum(gold) / len(gold)
        if self.last_pair:
            self.pairs.append([proxy - self.last_pair[0], g - self.last_pair[1]])
            if len(self.pairs) > SPLIT_ROWS + MAX_DELAY:
                del self.pairs[0]
        self.last_pair = [proxy, g]

    def _split(self, name: str, key: str, x: float, b: Break, names: set[str]) -> None:
        """The proxy (or the gold) broke at once while the other, which moved with it row by row before, held (a gold
        rising alone is the task being learned, not a split)."""
        other = "gold" if name == "reward" else "reward"
        test = self.tests.get(other)
        rows = b.decided - b.onset + 1
        before = self.pairs[:-rows][-SPLIT_ROWS:]
        if name == "gold" and b.sign > 0:
            return  # the gold rising past a proxy that holds is the task being learned
        if test is None or other in names or len(before) < SPLIT_ROWS // 2 or rows > SPLIT_AT_ONCE:
            return
        corr = RollingCorrelation(len(before))
        for a, c in before:
            corr.push(a, c)
        r, moved = corr.corr(), test.displacement(rows)
        if not (r >= self.p["split_corr"] and abs(moved) < self.p["split_sigma"]):
            return
        label = MEANINGS[self.kinds[name]].label
        text = (f"{label} broke {'down' if b.sign < 0 else 'up'} at step {self._onset_step(name, b)} "
                f"({b.sigmas:+.1f} sigma) while {MEANINGS[self.kinds[other]].label}, which had moved with it row by "
                f"row (correlation {r:.2f} over {len(before)} rows), held ({moved:+.1f} sigma): one of the two "
                f"scores changed, not the policy. " + self.fix("proxy-gold-split", sentence=True))
        self.split_on = self.check("proxy-gold-split", True, "warn", key, x, text, clear=self.p["clear"])

    # -- checkpointing --
    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["tests"] = {k: t.state_dict() for k, t in self.tests.items()}
        out["open"] = {k: [o[0], o[1], _break_list(o[2]), o[3], o[4], o[5]] for k, o in self.open.items()}
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict({k: v for k, v in state.items() if k not in ("tests", "open")})
        self.tests = {}
        for k, s in state.get("tests", {}).items():
            t = self.tests[k] = BreakTest(float(self.p["arl"]), self.min_ref, self.delay)
            t.load_state_dict(s)
        self.open = {k: [bool(o[0]), str(o[1]), _break_from(o[2]), int(o[3]), bool(o[4]), str(o[5])]
                     for k, o in state.get("open", {}).items()}


def _break_list(b: Break) -> list[Any]:
    f = b.before
    return [b.onset, b.decided, b.sign, b.size, b.sigmas, b.share, b.how,
            [f.level, f.slope, f.at, f.rho, f.sig_u, f.sig_x, f.rows, f.se_level, f.se_slope, f.sum_infl], b.flat]


def _break_from(v: list[Any]) -> Break:
    return Break(int(v[0]), int(v[1]), int(v[2]), float(v[3]), float(v[4]), float(v[5]), str(v[6]), fit_from(v[7]),
                 float(v[8]) if len(v) > 8 else math.nan)


# -- the rules --

def _dropped(i: int, g: Any) -> dict[str, float]:
    """A GRPO row whose reward falls by 45 % at row 100 and stays there."""
    row = grpo(i, g)
    if i >= 100:
        row["reward"] = 0.55 * row["reward"]
    return row


def _kl_eased(i: int, g: Any, falls: bool) -> dict[str, float]:
    """A GRPO row with a KL term around 0.05 that falls to 0.02 at row 100 (``falls``)."""
    return {**grpo(i, g), "kl": (0.02 if falls and i >= 100 else 0.05) + 0.004 * float(g.normal())}


def _split(i: int, g: Any, splits: bool) -> dict[str, float]:
    """A GRPO row whose gold equals its proxy reward until row 100, where the proxy falls by 70 % (``splits``)."""
    row = grpo(i, g)
    gold = row["reward"]
    if splits and i >= 100:
        row["reward"] = 0.3 * gold
    return {**row, "rewards/gold/mean": gold}


RULES: tuple[Rule, ...] = (
    Rule(
        BREAKS_ID, "abrupt-break", severities=("warn",),
        reads="every quantity the gauges read, one series each: the reward and each reward function's mean, the "
              "gold, KL, entropy, mean completion length and its spread, clip and truncation ratios, grad norm, "
              "loss, DPO margins, chosen and rejected rewards, accuracy",
        test="a step change of unknown size and start (core/breaks.py): each row read against the run's own recent "
             "rows (their level, slope, row-to-row correlation and robust spread, from a 64-row window kept 8 rows "
             "behind), then running sums of the evidence for a shift of 1, 2 or 4 sigmas either way, each row "
             "clipped at 3.5 sigmas, and a jump past the budget's quantile that the next two rows hold; decided "
             "within 12 rows of its start and material (a share of the level per quantity); in the harmful "
             "direction (reward, gold, margins or accuracy down; KL, grad norm, loss, clipping or truncation up; "
             "entropy or length either way)",
        params=("arl", "watch_rows", "clear"),
        means="the quantity moved to a new level at once and stayed there: a restore, a sampler or config change, a "
              "reward function change or a data change",
        fix="read what changed at that step (a checkpoint restore, a config or sampler change, the reward "
            "function, the data) and compare samples from before and after it",
        origin="abrupt changes a person sees at once (a reward halving in one logged step) were warned 35 rows late "
               "or never by rules held k rows; this one is budgeted (one false break per 200,000 healthy rows per "
               "series), measured under AR(1), t(3)-outlier, binomial and band-limited noise by "
               "benchmarks/breaks/calibrate.py",
        per_function=True, budgeted=True, budget_param="arl",
        example=Example("grpo", _dropped, grpo, 200, 100, 105, "reward"),  # a 4.6-sigma fall: decided by row 105
    ),
    Rule(
        BREAKS_ID, "abrupt-shift", severities=("info",),
        reads="the same series as abrupt-break",
        test="the same test, a break in the direction that does not harm the run (KL, loss or grad norm down; "
             "margins up...); a reward jumping up is reward-shift-up's",
        params=("arl",),
        means="a quantity moved to a new level at once in the direction that does not harm the run: a config "
              "change (a KL coefficient, a learning rate), an epoch boundary, a restore",
        fix="check that the change at that step was meant",
        per_function=True, budgeted=True, budget_param="arl",
        example=Example("grpo", lambda i, g: _kl_eased(i, g, True), lambda i, g: _kl_eased(i, g, False), 200, 100,
                        104, "kl"),
    ),
    Rule(
        BREAKS_ID, "proxy-gold-split", severities=("warn",),
        reads="the trained reward and the gold reward (rewards/<gold>/mean, named with gold: [...])",
        test="one of the two breaks (abrupt-break's test) while the other, whose row-to-row changes correlated with "
             "it over the 32 rows before (at least split_corr), stays within split_sigma of its level",
        params=("split_corr", "split_sigma"),
        means="the two scores stopped agreeing at once: the reward function (or the gold) changed, not the policy",
        fix="diff the reward function and the gold scorer at that step, and read samples they now score apart",
        budgeted=True, budget_param="arl",
        example=Example("grpo", lambda i, g: _split(i, g, True), lambda i, g: _split(i, g, False), 200, 100, 103,
                        "reward", kwargs={"params": {"reward": {"gold": ["gold"]}}}),
    ),
)
