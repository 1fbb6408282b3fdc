"""The gauge base class: a small stateful object that turns rows into findings.

Like a torchmetrics metric, a gauge has ``update`` (one row in, findings out)
and ``compute`` (its derived values now). Deciding *when* a condition counts
is shared here, Prometheus-style: a rule must hold ``for`` consecutive
evaluations before it fires, fires once, and resolves after it has been false
for ``clear`` evaluations, so one noisy point neither fires nor flaps.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .fields import instance_items
from .findings import SEVERITY_RANK, STATUSES, Finding, Severity
from .keys import Row
from .rule import declared_fix
from .sanity import RANGES, ranges_for
from .sanity import RULE as RANGE_RULE
from .sanity import message as range_message
from .sequential import arl_for
from .stats import is_finite
from .text import clean_text, did_you_mean

Message = str | Callable[..., str]  # a lambda whose defaults bind the values it formats


@dataclass(slots=True)
class Hold:
    """One rule's state: the rows it has been active (``held``), whether it fires, the quiet rows since it fired, and
    its severity's rank. Checkpointed as ``[held, firing, quiet, rank]`` (``to_list`` / ``from_list``)."""

    held: int = 0
    firing: bool = False
    quiet: int = 0
    rank: int = 0

    def to_list(self) -> list[int]:
        return [self.held, int(self.firing), self.quiet, self.rank]

    @classmethod
    def from_list(cls, v: list[Any]) -> Hold:
        return cls(int(v[0]), bool(v[1]), int(v[2]), int(v[3]))


class Gauge:
    """Base class. Subclasses set ``id``/``title``/``inputs`` and implement ``observe``."""

    id: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: Canonical keys this gauge reads (a row with none of them is ignored).
    inputs: ClassVar[tuple[str, ...]] = ()
    #: Every key ``observe`` may write into ``derived`` (logged as ``rlcluster/<id>/<key>``): a static list, so
    #: alert-rule validation knows the metric names without running anything (tests check it stays complete).
    outputs: ClassVar[tuple[str, ...]] = ()
    #: Gauges whose inputs exist only inside a live run (attention, LoRA, ...).
    live_only: ClassVar[bool] = False
    #: Default parameters; ``family_defaults`` overrides them per trainer family.
    defaults: ClassVar[dict[str, Any]] = {}
    family_defaults: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, family: str, params: Mapping[str, Any] | None = None) -> None:
        self.family = family
        self.p: dict[str, Any] = {**self.defaults, **self.family_defaults.get(family, {}), **(params or {})}
        self.derived: dict[str, float] = {}
        self.rows_seen = 0
        self.step = 0
        self.worst: str = "ok"
        self.note = ""
        self._rules: dict[str, Hold] = {}
        #: rule -> (rows it waits for, the gauge's row count, metric, value, message) while a warn rule is active and
        #: building up to its hold (dropped on its first quiet row): the end-of-stream report
        self._building: dict[str, tuple[int, int, str, float | None, Message]] = {}
        self._out: list[Finding] = []
        self._inputs = frozenset(self.inputs)
        #: Where rule transitions are published (the cluster's diagnoser), with this gauge's position.
        self.bus: list[Any] | None = None
        self.bus_pos = 0
        self.row_index = 0
        self._nfiring = 0  # rules firing now: status and firing() are read on every row
        #: The planned run length in steps (the cluster sets it when known) and the persistence factor it gives.
        self.max_steps = 0
        self.planned_rows = 0.0
        self._persist = 1.0
        self._long = 1.0  # long_hold_factor of the planned rows: > 1 in a run planned for over LONG_RUN_ROWS
        self._first_step = 0  # the step of the first row with one: the logging interval is read from it
        self._first_row = 0
        self._planned_est = 0.0  # the planned rows the windows were set from (0: not yet)
        self._plan_guessed = False  # the windows were set before the logging interval showed
        #: Rows taken off every warn rule's hold (``InstrumentCluster(warn_sooner=...)``): configuration, not state.
        self.warn_sooner = 0
        #: (key, lowest, highest, open low bound) of the keys this gauge checks for impossible values
        #: (``core/sanity.py``), and the keys already reported (once per key).
        self._ranges = tuple((k, *r.bounds()) for k, r in ranges_for(self.id))
        self.range_flagged: list[str] = []
        self.setup()

    # -- subclass API ---------------------------------------------------------
    def setup(self) -> None:
        """Create the gauge's streaming statistics."""

    def observe(self, row: Row) -> None:
        """Read one row; update ``self.derived``; call ``self.check`` per rule."""
        raise NotImplementedError

    def finish(self) -> None:
        """End-of-stream checks (``finalize``: the end of an analysed log, or of training). Default: none."""

    def applies(self) -> bool:
        """False where the gauge means nothing for this trainer family."""
        return True

    def plan_short(self) -> None:
        """Called when the planned length is first read (on fresh statistics, before the row is observed) and the
        run is planned for fewer than ``SHORT_RUN_ROWS`` logged rows: rebuild the windows and warm-ups that would
        eat most of it (``self.rows(n)``). Default: nothing."""

    def plan_long(self) -> None:
        """Called when the planned length is first read (and again if the second row shows that the first misread
        it): set windows that cover a share of the run. Default: nothing."""

    def rows(self, n: int, floor: int = 6) -> int:
        """``n`` rows of window or warm-up, shortened by the persistence factor in a short run."""
        return max(min(floor, n), round(n * self._persist))

    def min_rows(self, rows: int, share: float) -> float:
        """Rows a "not learning yet" judgement waits for: ``rows``, or ``share`` of the planned run if more.

        A long run's first 50 rows are its warm-up; judging progress there is judging the schedule."""
        return max(rows, share * self.planned_rows)

    # -- engine ---------------------------------------------------------------
    def update(self, row: Row) -> list[Finding]:
        """Feed one row; returns the findings that fired on it."""
        self._out = []
        self.step = step = row.step
        self.row_index = row.index
        inputs = self._inputs
        if not inputs or not row.values.keys().isdisjoint(inputs):  # iterates the few inputs, not the row
            self.rows_seen = n = self.rows_seen + 1
            # the planned length is steady once the logging interval shows: re-read it on the first rows, then
            # every 16th (it is read on every row of every gauge, and this is the live path)
            if self.max_steps > 0 and step > 0 and (n <= 4 or not n & 15):
                read_plan(self, step)
            self.observe(row)
            if self._ranges:
                self._check_ranges(row.values)
        return self._out

    def update_many(self, rows: list[Row]) -> list[Finding]:
        """Feed many rows in order (the analyzer's batch path); returns the findings that fired on them.

        The same as ``update`` row by row, in one loop: a row none of whose keys this gauge reads is skipped
        without a call, and its step and index are only kept for the last row (nothing reads them in between)."""
        out: list[Finding] = []
        if not rows:
            return out
        inputs = self._inputs
        observe = self.observe
        plan = self.max_steps > 0
        for row in rows:
            if inputs and row.values.keys().isdisjoint(inputs):
                continue
            self._out = []
            self.step = step = row.step
            self.row_index = row.index
            self.rows_seen = n = self.rows_seen + 1
            if plan and step > 0 and (n <= 4 or not n & 15):
                read_plan(self, step)
            observe(row)
            if self._ranges:
                self._check_ranges(row.values)
            if self._out:
                out.extend(self._out)
        last = rows[-1]
        self._out = []
        self.step = last.step
        self.row_index = last.index
        return out

    def _check_ranges(self, values: Mapping[str, float]) -> None:
        """``value-out-of-range``: a value this gauge reads outside its mathematical range, once per key."""
        for key, lo, hi, open_low in self._ranges:
            x = values.get(key)
            if x is None or not (x < lo or x > hi or (open_low and x <= lo)):
                continue  # NaN compares False: non-finite values are the nonfinite rules' business
            if x in (math.inf, -math.inf) or key in self.range_flagged:
                continue
            self.range_flagged.append(key)
            self._out.append(Finding(self.id, RANGE_RULE, "warn", self.step, key, x,
                                     range_message(key, x, RANGES[key])))
            if SEVERITY_RANK["warn"] > SEVERITY_RANK.get(self.worst, 0):
                self.worst = "warn"

    def finalize(self) -> list[Finding]:
        """The end of the stream: end-of-stream checks, then the warn rules that were building when it ended."""
        self._out = []
        if self.rows_seen:
            self.finish()
            report_building(self)
        return self._out

    def check(
        self,
        rule: str,
        active: bool,
        severity: Severity,
        metric: str,
        value: float | None,
        message: Message,
        for_: int = 1,
        clear: int = 5,
        long_hold: bool = True,
    ) -> bool:
        """Advance ``rule``'s state; emit a Finding when it starts firing. Returns firing.

        A ``warn`` rule held ``PERSIST_MIN_FOR`` rows or more is held ``long_hold_factor`` times as long in a run
        planned for over ``LONG_RUN_ROWS`` logged rows, and a row where it is false there takes one row off the
        count instead of resetting it (k of n, not n in a row). ``long_hold=False`` for rules whose statistic
        already spans a share of the run (it does not test more often in a longer run)."""
        st = self._rules.get(rule)
        if not active:  # most calls: a quiet rule that was quiet on its last row too has nothing to update
            if st is None or not (st.held or st.firing):
                return False
        elif st is None:
            st = self._rules[rule] = Hold(rank=SEVERITY_RANK[severity])
        longer = self._long > 1.0 and long_hold and for_ >= PERSIST_MIN_FOR and severity == "warn"
        if active:
            st.held += 1
            st.quiet = 0
            need = self.hold(for_, severity, longer)
            if not st.firing and st.held < need and severity == "warn":
                self._building[rule] = (need, self.rows_seen, metric, value, message)
            if not st.firing and st.held >= need:
                st.firing = True
                self._nfiring += 1
                text = message() if callable(message) else message
                finding = Finding(self.id, rule, severity, self.step, metric, value, text)
                self._out.append(finding)
                if self.bus is not None:
                    self.bus.append((self.row_index, self.bus_pos, self.id, rule, finding))
                if SEVERITY_RANK[severity] > SEVERITY_RANK.get(self.worst, 0):
                    self.worst = severity
        else:
            if self._building:
                self._building.pop(rule, None)
            if longer and st.held > 0 and not st.firing:
                st.held -= 1  # a long run: one quiet row does not undo the rows that held
            else:
                st.held = 0
            if st.firing:
                st.quiet += 1
                if st.quiet >= clear:
                    st.firing = False
                    self._nfiring -= 1
                    if self.bus is not None:
                        self.bus.append((self.row_index, self.bus_pos, self.id, rule, None))
        return st.firing

    def warn_rows(self, n: int) -> int:
        """A warn rule's own row count (one a gauge keeps by hand and then checks with ``for_=1``), ``warn_sooner``
        rows shorter like every other warn hold, never under one row."""
        return max(1, n - self.warn_sooner) if self.warn_sooner else n

    def budget(self, arl: float) -> float:
        """A warn test's ARL0 (rows to a false alarm on healthy noise) under the user's ``warn_sooner`` dial: the rule's
        declared budget divided by ``SOONER_FACTOR`` per step (``core.sequential.arl_for``)."""
        return arl_for(self.warn_sooner, arl)

    def held(self, rule: str) -> int:
        """How many rows ``rule`` has been active (its hold count): for a message that says how long it held."""
        st = self._rules.get(rule)
        return st.held if st is not None else 0

    def fix(self, rule: str, *, sentence: bool = False) -> str:
        """What to do about ``rule``, as its declaration beside the gauge says (``Rule.fix``, ``core/rule.py``): a
        message reads it there instead of writing it again. ``sentence``: capitalised, with its full stop."""
        text = declared_fix(self.id, rule)
        return text[:1].upper() + text[1:] + "." if sentence else text

    def hold(self, for_: int, severity: Severity, longer: bool) -> int:
        """The rows a rule held ``for_`` must be active before it fires in this run: shorter in a short run,
        longer in a long one (``persistence_factor``, ``long_hold_factor``), and ``warn_sooner`` rows shorter for a
        warn rule (never under one row; a stop rule's hold is the user's last line before a run is ended)."""
        if longer:
            need = round(for_ * self._long)
        elif for_ < PERSIST_MIN_FOR or self._persist == 1.0 or severity != "warn":
            need = for_
        else:
            need = round(for_ * self._persist)
        return self.warn_rows(need) if severity == "warn" else need

    def firing(self) -> list[str]:
        if not self._nfiring:
            return []
        return [r for r, st in self._rules.items() if st.firing]

    @property
    def status(self) -> str:
        """Current status: the worst severity among rules firing now."""
        if not self.rows_seen:
            return "no-data"
        if not self._nfiring:
            return "ok"
        rank = max((st.rank for st in self._rules.values() if st.firing), default=0)
        return STATUSES[rank]

    def compute(self) -> dict[str, float]:
        return dict(self.derived)

    def summary(self) -> dict[str, Any]:
        """What the analyzer prints: worst status over the run plus derived values."""
        if not self.rows_seen or not self.applies():
            status = "no-data"
        else:
            status = self.worst if self.worst in ("warn", "stop") else "ok"
        out: dict[str, Any] = {"status": status, "current": self.status, "rows": self.rows_seen}
        for k, v in self.derived.items():
            out[k] = None if not math.isfinite(v) else round(v, 6)
        if self.note:
            out["note"] = self.note
        return out

    # -- checkpointing --------------------------------------------------------
    _SKIP_STATE: ClassVar[frozenset[str]] = frozenset({"family", "p", "_out", "_inputs", "bus", "bus_pos",
                                                        "_building", "warn_sooner", "_ranges"})

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state, so a resumed run keeps its baselines."""
        return state_of(self, self._SKIP_STATE)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for k, v in state.items():
            if k == "_rules":
                self._rules = {str(rule): Hold.from_list(st) for rule, st in v.items()}
            else:
                load_field(self, k, v)
        self._nfiring = sum(1 for st in self._rules.values() if st.firing)


def state_of(obj: object, skip: frozenset[str]) -> dict[str, Any]:
    """An object's checkpoint: each attribute not in ``skip`` that is a statistic (its ``state_dict``, nested under
    ``__state__``), a hold table (``_rules``), a number, a string, a dict or a list; anything else is left out."""
    out: dict[str, Any] = {}
    for k, v in instance_items(obj):
        if k in skip:
            continue
        if hasattr(v, "state_dict"):
            out[k] = {"__state__": v.state_dict()}
        elif k == "_rules":
            out[k] = {rule: st.to_list() for rule, st in v.items()}
        elif isinstance(v, (int, float, str, bool, type(None))):
            out[k] = v
        elif isinstance(v, dict):
            out[k] = {str(a): b for a, b in v.items()}
        elif isinstance(v, list):
            out[k] = list(v)
    return out


def load_field(obj: Any, k: str, v: Any) -> None:
    """Restore one attribute ``state_of`` wrote: a statistic loads its own state, anything else is set."""
    cur: Any = getattr(obj, k, None)
    if isinstance(v, dict) and "__state__" in v and hasattr(cur, "load_state_dict"):
        cur.load_state_dict(v["__state__"])
    elif not hasattr(cur, "load_state_dict"):
        try:
            setattr(obj, k, v)
        except AttributeError:  # compiled: a name this version of the object does not have
            return
        except TypeError:  # compiled: JSON gives a tuple back as a list
            if not (isinstance(v, list) and isinstance(cur, tuple)):
                raise
            setattr(obj, k, tuple(v))


def read_plan(g: Gauge, step: int) -> None:
    """Planned logged rows: the rows seen plus the steps left over the logging interval seen so far.

    The windows are set from the first row's estimate; the second row shows the interval, and where the
    first one misread it (a first row at step 1 with ``logging_first_step``, or at step 5001 of a resumed run)
    the gauge starts over from the second row with windows set from the better estimate."""
    n = g.rows_seen
    if not g._first_step:
        g._first_step, g._first_row = step, n
    interval_known = n > g._first_row and step > g._first_step
    if interval_known:
        est = n + (g.max_steps - step) * (n - g._first_row) / (step - g._first_step)
    else:
        est = g.max_steps * n / step
    g.planned_rows = max(est, float(n))
    g._persist = persistence_factor(g.planned_rows)
    g._long = long_hold_factor(g.planned_rows)
    misread = (g._plan_guessed and interval_known
               and abs(g.planned_rows - g._planned_est) > 0.25 * g.planned_rows)
    if not g._planned_est or misread:
        if misread:
            g.setup()  # the rows so far lost to the statistics, against windows sized for another run
        g._planned_est, g._plan_guessed = g.planned_rows, not interval_known
        if g._persist < 1.0:
            g.plan_short()
        g.plan_long()
    elif interval_known:
        g._plan_guessed = False


def report_building(g: Gauge) -> None:
    """Report, as ``info``, each ``warn`` rule that was active on the last row this gauge read, its hold at least
    ``BUILDING_SHARE`` complete (a hold of 3 rows or more: 2 of 3, 3 of 5, 6 of 10).

    A test that has not decided raises no alert (issue #28): on healthy runs under autocorrelated noise with
    outliers, one outlier row near the end left a rule 6 of 7 rows into its hold and the end pass warned. A
    pathology that sets in late (the last 20 rows of a run) is still shown where the user looks, as the
    evidence so far ("building: 6 of 7 rows"); an alert rule with ``min_severity: info`` turns it into an alert.
    The rule's state is left as it was: it did not fire on a row."""
    for rule, (need, seen, metric, value, message) in g._building.items():
        st = g._rules[rule]  # only warn rules are kept here, from their active rows
        if st.firing or seen != g.rows_seen or st.held < BUILDING_SHARE * need:
            continue
        try:  # the text of the last row it held on; the end of a run must not fail on one message
            text = message() if callable(message) else message
        except Exception:  # noqa: BLE001
            text = rule
        g._out.append(Finding(g.id, rule, "info", g.step, metric, value,
                                 f"{BUILDING_PREFIX}{st.held} of {need} rows when the log ended (a warning "
                                 f"needs all {need}): {text}"))


SHORT_RUN_ROWS = 100
"""A run planned for fewer logged rows than this holds its trend and spread rules for proportionally fewer rows."""
PERSIST_FLOOR = 0.4
"""... but never for less than this share of the rule's own ``for_``."""
PERSIST_MIN_FOR = 5
"""Rules held for fewer rows than this filter single-row outliers, which a short run has as often: left alone,
as are ``stop`` rules (their hold is the user's last line before a run is ended)."""


BUILDING_SHARE = 0.6
"""A ``warn`` rule held this share of its rows when the stream ends is reported then, as ``info``
(``Gauge.finalize``)."""
BUILDING_PREFIX = "building: "
"""How such a report's message begins."""

LONG_RUN_ROWS = 300
"""A run planned for more logged rows than this holds its warn rules longer (``long_hold_factor``)."""
LONG_HOLD_PER_DOUBLING = 0.5
"""... by this share of the rule's ``for_`` per doubling of the planned rows past ``LONG_RUN_ROWS``."""


def long_hold_factor(planned_rows: float) -> float:
    """How many times a rule's ``for_`` a run planned for ``planned_rows`` logged rows holds it: 1, or
    1 + 0.5 * log2(rows / 300) past 300 rows (x1.5 at 600, x2 at 1,200, x2.4 at 2,000).

    A run of 2,000 rows offers a noise-driven excursion seven times as many chances to hold 5 rows as one of 300
    (measured in docs/detection-history.md). Read with a leaky count (a quiet row takes one off), so a pathology that
    flickers still builds up.
    """
    if planned_rows <= LONG_RUN_ROWS:
        return 1.0
    return 1.0 + LONG_HOLD_PER_DOUBLING * math.log2(planned_rows / LONG_RUN_ROWS)


def persistence_factor(planned_rows: float) -> float:
    """The share of a rule's ``for_`` rows that a run planned for ``planned_rows`` logged rows holds it.

    A trend or spread rule held 20 rows must see the pathology for half of a 40-row run's remaining rows; a
    run that short has 20x fewer rows than a 2000-row one to raise a false alarm on, so it can decide sooner
    (measured in docs/detection-history.md).
    """
    return min(max(planned_rows / SHORT_RUN_ROWS, PERSIST_FLOOR), 1.0)


finite = is_finite
"""A number that is neither NaN nor infinite (None: False): ``stats.is_finite``, the gauges' name for it."""


POSITIVE_PARAMS = {
    ("reward", "shift_clip"): "each row's reward fall is clipped at this many sigmas; 0 or less silences "
                              "reward-shift-down or turns it on every row",
    ("policy_ratio", "ratio_var_x"): "the ratio variance's growth is read as a multiple of its start",
    ("length", "drift"): "a mean-length change is read as this share of the baseline",
    ("length", "trend_now"): "a length trend is read once the mean moved this share of the baseline",
}
"""Numeric parameters that only make sense above 0, and why."""

UNIT_PARAMS = {("kl", "noisy_p1"): "a probability"}
"""Numeric parameters strictly between 0 and 1."""

MAX_PARAM = 1e9
"""The largest magnitude a numeric parameter may have (windows of 1e308 rows overflow)."""

MAX_ROWS_PARAM = 100_000
"""The largest count (window, hold, warm-up: the parameters whose default is an int): a window is memory."""


def _as_float(x: Any) -> float:
    """``float(x)``, infinite where ``x`` is an int too large for a float (10**400 raises OverflowError)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def check_param(gauge: type[Gauge], key: object, value: object, where: str = "params") -> tuple[Any, str | None]:
    """``(value, None)`` with ``value`` as a plain Python number, tuple or list, or ``(None, why)`` when it cannot
    be ``gauge``'s parameter ``key``: an unknown name, a value unlike the default (a number where a number belongs,
    numpy's included; a pair of numbers for a pair; a list of names for a list), NaN or infinite, past
    ``MAX_PARAM``, a negative count, a share outside [0, 10], or 0 or less where only a positive value makes sense.

    The one check that ``alerts.yaml`` (``where="gauges"``, with its line) and Python callers
    (``params={...}``, before the first row) share: a typo must not be ignored silently, and a string where a
    number belongs must not raise in the middle of a training run."""
    defaults = {**{k: v for fd in gauge.family_defaults.values() for k, v in fd.items()}, **gauge.defaults}
    gid = gauge.id
    if not isinstance(key, str) or key not in defaults:
        return None, (f"{where}.{gid}: unknown parameter {clean_text(key, 40)!r}"
                      f"{did_you_mean(str(key), defaults)}; parameters: {', '.join(sorted(defaults))}")
    default = defaults[key]
    unlike = f"{where}.{gid}.{key} must be like {default!r}, not {clean_text(repr(value), 60)}"

    def real(x: object) -> bool:
        return isinstance(x, numbers.Real) and not isinstance(x, bool)

    if isinstance(default, tuple):  # a (low, high) pair; JSON and YAML give it back as a list
        if not isinstance(value, (list, tuple)) or len(value) != len(default) or not all(real(x) for x in value):
            return None, unlike
        pair = tuple(_as_float(x) for x in value)
        if not all(math.isfinite(x) and 0 <= x <= MAX_PARAM for x in pair) or list(pair) != sorted(set(pair)):
            return None, f"{where}.{gid}.{key} must be finite, increasing and not negative, like {default!r}"
        return pair, None
    if isinstance(default, list):  # reward function names
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
            return None, unlike
        return list(value), None
    if not isinstance(default, (int, float)) or isinstance(default, bool):
        return (value, None) if type(value) is type(default) else (None, unlike)
    if not real(value):
        return None, unlike
    return _check_number(gid, key, value, default, where)



def _check_number(gid: str, key: str, value: object, default: int | float, where: str) -> tuple[Any, str | None]:
    """``check_param`` for a number: finite, within ``MAX_PARAM``, positive or a share or a count where it must be."""
    x = _as_float(value)
    if math.isnan(x) or (math.isinf(x) and not isinstance(value, numbers.Integral)):
        return None, f"{where}.{gid}.{key} must be a finite number (like {default!r}), not {value!r}"
    if abs(x) > MAX_PARAM:  # an int of 400 digits reads as infinite here
        return None, (f"{where}.{gid}.{key} must be at most {MAX_PARAM:g} in size (like {default!r}), "
                      f"not {clean_text(repr(value), 60)}")
    why = POSITIVE_PARAMS.get((gid, key))
    if why is not None and x <= 0:
        return None, f"{where}.{gid}.{key} must be above 0 (like {default!r}), not {value!r}: {why}"
    if (gid, key) in UNIT_PARAMS and not 0 < x < 1:
        return None, (f"{where}.{gid}.{key} must be between 0 and 1 (like {default!r}), not {value!r}: "
                      f"{UNIT_PARAMS[(gid, key)]}")
    if "share" in key and not 0 <= x <= 10:  # above 1: never reached, the reading is off
        return None, (f"{where}.{gid}.{key} is a share (above 1 turns its reading off) and must be from 0 to 10 "
                      f"(like {default!r}), not {value!r}")
    if isinstance(default, int) and x > MAX_ROWS_PARAM:
        return None, (f"{where}.{gid}.{key} counts rows or items: at most {MAX_ROWS_PARAM:,} (like {default!r}), "
                      f"not {value!r}")
    if isinstance(default, int) and x < 0:
        return None, f"{where}.{gid}.{key} counts rows or items: not below 0 (like {default!r}), not {value!r}"
    if isinstance(default, int):  # a count: 20.0 from YAML or JSON is 20, and the core (compiled, too) takes an int
        if not x.is_integer():
            return None, (f"{where}.{gid}.{key} counts rows or items: a whole number (like {default!r}), "
                          f"not {value!r}")
        return int(x), None
    return x, None
