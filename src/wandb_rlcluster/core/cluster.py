"""The instrument cluster: normalise each row, feed every gauge, collect findings.

One object that the live callback, the offline analyzer and the report share.
It imports neither wandb nor torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .breaks_gauge import BREAKS_ID, BreakWatcher
from .diagnosis import DIAGNOSIS_ID, Diagnoser, publish
from .findings import SEVERITY_RANK, STATUSES, Finding
from .gauge import Gauge
from .gauges import GAUGE_CLASSES as GAUGE_CLASSES
from .gauges import GAUGE_IDS as GAUGE_IDS
from .gauges import GAUGE_TITLES as GAUGE_TITLES
from .gauges import GOLD_AWARE as GOLD_AWARE
from .gauges import KNOWN_INPUTS
from .gauges import REPORTING_CLASSES as REPORTING_CLASSES
from .gauges import WATCHER_IDS as WATCHER_IDS
from .keymap import GOLD_ROLE, ROLES, KeyMap, readers, suggest_map
from .keys import FAMILIES, Normalizer, Row, detect_family
from .settings import DETECT_ROWS as DETECT_ROWS
from .settings import WARN_SOONER_MAX as WARN_SOONER_MAX
from .settings import RunSettings as RunSettings
from .settings import check_warn_sooner as check_warn_sooner
from .settings import checked_params as checked_params
from .settings import planned_steps as planned_steps
from .settings import resolve_warn_sooner as resolve_warn_sooner
from .text import clean_text

NO_DATA_NOTES = {
    "kl": "no KL logged (GRPO/RLOO log kl only when beta > 0)",
    "attention_entropy": "live runs only (probe batch through eager attention)",
    "samples": "live runs only (sampled generations)",
    "lora": "live runs only (PEFT adapter weights)",
}


class InstrumentCluster:
    """Feeds rows to the fourteen gauges, then to the diagnoser, and keeps the findings.

    Args:
        trainer: trainer family (``grpo``, ``rloo``, ``dpo``, ``kto``, ``orpo``,
            ``online_dpo``, ``ppo``, ``reward``, ``sft``) or None to detect it
            from the first rows' keys.
        params: per-gauge parameter overrides, ``{gauge_id: {name: value}}``.
        max_steps: the planned run length, when known (enables "LR at zero
            well before the end").
        detect_rows: rows to buffer before guessing the family (live runs use 1:
            TRL logs its full key set on every row).
        framework: ``verl`` or ``openrlhf`` to read that engine's keys by meaning (``core/frameworks.py``);
            None or ``trl``: TRL's vocabulary.
        warn_sooner: logged rows taken off every warn rule's hold (never under one row; stop rules keep
            theirs), 0 to 3; ``AlertEngine(warn_sooner=...)`` does the same to warn alert rules' ``for:``.
            Earlier warnings for more false ones: on the detection benchmark's seen seeds
            (``benchmarks/detection/FRONTIER.md``) 1 row takes the median delay from 0.278 to 0.25 of the run
            after onset and the healthy runs warned from 3.6 % to 8.4 %.
        keys: the user's mapping of quantities to the keys the loop logs them under, ``{"reward": "reward/g",
            "gold": "reward/f", "entropy": "policy/entropy"}`` (``core/keymap.py``): it always wins over names
            recognised by TRL's, a framework's or a custom loop's vocabulary; ``gold`` keys become held-out rewards
            the trained one is judged against.
        recognise_keys: read a custom loop's keys by what their names mean (``policy/entropy``, ``optim/lr``, ...).
        settings: the run's settings already resolved (``RunSettings.resolve``): the other arguments are then
            not read.
    """

    def __init__(
        self,
        trainer: str | None = None,
        params: Mapping[str, Mapping[str, Any]] | None = None,
        max_steps: object = 0,
        detect_rows: int = DETECT_ROWS,
        warn_sooner: object = 0,
        framework: str | None = None,
        keys: Mapping[str, Any] | KeyMap | None = None,
        recognise_keys: bool = True,
        *,
        settings: RunSettings | None = None,
    ) -> None:
        s = settings if settings is not None else RunSettings.resolve(
            trainer, params, max_steps, detect_rows, warn_sooner, framework, keys, recognise_keys)
        self.settings = s
        self.warn_sooner = s.warn_sooner
        self.keymap = s.keymap
        self.detect_rows = s.detect_rows
        self.framework = s.framework
        self.family: str | None = s.family
        self.params = {gid: dict(ps) for gid, ps in s.params.items()}
        self.max_steps = s.max_steps
        self.normalizer = Normalizer(profile=s.profile, keymap=self.keymap or None, recognise=s.recognise_keys)
        self.gauges: dict[str, Gauge] = {}
        self.findings: list[Finding] = []
        self.rows = 0
        self.keys_seen: set[str] = set()
        self._pending: list[Row] = []
        #: The last row fed through update(), normalised, and the gauges that read it (alert rules use both).
        self.last_row: Row | None = None
        self.last_updated: set[str] = set()
        self._informative = 0  # buffered rows that carry a metric some gauge reads
        self.last_step = 0
        if self.family:
            self._build()

    def _build(self) -> None:
        assert self.family in FAMILIES
        self.gauges = {cls.id: cls(self.family, self.params.get(cls.id)) for cls in GAUGE_CLASSES}
        # every quantity's abrupt breaks (core/breaks.py), after the gauges and before the diagnoser
        self.gauges[BREAKS_ID] = BreakWatcher(self.family, self.params.get(BREAKS_ID))
        # Last, so it sees every gauge's rule transitions of the row it is given.
        diagnoser = Diagnoser(self.family, self.params.get(DIAGNOSIS_ID))
        self.gauges[DIAGNOSIS_ID] = diagnoser
        for g in self.gauges.values():
            g.warn_sooner = self.warn_sooner
        publish(self.gauges, diagnoser)
        self.set_max_steps(self.max_steps)

    def set_family(self, trainer: str) -> None:
        """Fix the family before any row arrives (e.g. from the trainer's config class)."""
        if self.family is None and not self._pending and self.rows == 0:
            self.settings = self.settings.with_family(trainer)
            self.family = self.settings.family
            self._build()

    def set_max_steps(self, max_steps: object) -> None:
        self.max_steps = max_steps = planned_steps(max_steps)
        for g in self.gauges.values():  # every gauge: the planned length sets how long its warnings hold
            g.max_steps = max_steps

    # -- streaming -------------------------------------------------------------
    def update(self, raw: Mapping[str, object]) -> list[Finding]:
        """Feed one raw log row (any key spelling); returns findings that fired."""
        row = self.normalizer.normalize(raw)
        if row is None:
            self.last_row = None
            self.last_updated = set()
            return []
        return self.update_row(row)

    def update_row(self, row: Row) -> list[Finding]:
        self.last_row = row
        self.last_updated = set()
        self.rows += 1
        self.last_step = row.step
        if self.family is None:
            self.keys_seen.update(row.values)
            self._pending.append(row)
            if not KNOWN_INPUTS.isdisjoint(row.values):
                self._informative += 1
            if self._informative < self.detect_rows and len(self._pending) < 50 * self.detect_rows:
                return []
            return self._flush_pending()
        if len(self.keys_seen) < 512:
            self.keys_seen.update(row.values)
        return self._feed(row)

    def update_batch(self, rows: list[Row]) -> list[Finding]:
        """Feed many normalised rows at once (offline analysis).

        Gauges are independent, so each gauge runs over the whole batch in
        turn: the same findings as row-by-row feeding, about a third faster in
        CPython because one gauge's code stays hot. Findings come back in
        (step, gauge) order.
        """
        if not rows:
            return []
        out: list[Finding] = []
        i = 0
        while self.family is None and i < len(rows):  # detection needs the first rows one by one
            out.extend(self.update_row(rows[i]))
            i += 1
        rest = rows[i:]
        if not rest:
            return out
        self.rows += len(rest)
        self.last_step = rest[-1].step
        if len(self.keys_seen) < 512:
            for r in rest[:64]:
                self.keys_seen.update(r.values)
        order = {gid: n for n, gid in enumerate(self.gauges)}
        batch: list[Finding] = []
        for g in self.gauges.values():
            batch.extend(g.update_many(rest))
        batch.sort(key=lambda f: (f.step, order[f.gauge]))
        self.findings.extend(batch)
        return out + batch

    def _flush_pending(self) -> list[Finding]:
        if self.family is None:
            self.family = detect_family(self.keys_seen)
            self._build()
        out: list[Finding] = []
        pending, self._pending = self._pending, []
        for row in pending:
            out.extend(self._feed(row))
        return out

    def _feed(self, row: Row) -> list[Finding]:
        out: list[Finding] = []
        updated = self.last_updated
        for gid, g in self.gauges.items():
            seen = g.rows_seen
            fs = g.update(row)
            if g.rows_seen != seen:
                updated.add(gid)
            if fs:
                out.extend(fs)
        if out:
            self.findings.extend(out)
        return out

    def finalize(self) -> list[Finding]:
        """End of stream: flush rows held for detection and run end-of-run checks."""
        out = self._flush_pending() if self._pending or self.family is None else []
        for g in self.gauges.values():
            out.extend(g.finalize())
        self.findings.extend(f for f in out if f not in self.findings)
        return out

    # -- reading ---------------------------------------------------------------
    def derived(self) -> dict[str, float]:
        """``{"<gauge>/<name>": value}`` for every finite derived value now."""
        out: dict[str, float] = {}
        for gid, g in self.gauges.items():
            for k, v in g.derived.items():
                if v == v and not math.isinf(v):
                    out[f"{gid}/{k}"] = v
        return out

    def statuses(self) -> dict[str, str]:
        """Current status of each gauge (``ok``/``warn``/``stop``/``no-data``)."""
        return {gid: (g.status if g.applies() else "no-data") for gid, g in self.gauges.items()
                if gid not in WATCHER_IDS}

    def recognised(self) -> bool:
        """True once any gauge has read one of its inputs (the log is a training log at all)."""
        return any(g.rows_seen for gid, g in self.gauges.items() if gid not in WATCHER_IDS)

    def key_report(self, limit: int = 60) -> dict[str, Any]:
        """Which logged key fed which gauge, where a key was read by the user's mapping or by what its name means
        (``read``: key, as, by, confidence, gauges); the keys no gauge read (``unread``); and the ``--map``
        entries that would read the most telling of them (``suggest``), best guesses first."""
        norm = self.normalizer
        inputs = {g.id: g.inputs for g in GAUGE_CLASSES}
        read = [{"key": raw, "as": canon, "by": by, "confidence": round(conf, 2), "gauges": readers(canon, inputs)}
                for raw, (canon, by, conf) in list(norm.read_by_meaning.items())[:limit]]
        unread = list(norm.unread)
        mapped = {e["as"] for e in read}
        roles = {role for role, canon in ROLES.items() if canon in mapped or canon in self.keys_seen}
        if self.keymap.gold or self.params.get("reward", {}).get("gold"):
            roles.add(GOLD_ROLE)
        out: dict[str, Any] = {"read": read, "unread": unread[:limit]}
        if len(unread) > limit:
            out["unread_more"] = len(unread) - limit
        if norm.replaced:
            out["replaced"] = dict(list(norm.replaced.items())[:limit])
        suggest = suggest_map(unread, roles)
        if suggest:
            out["suggest"] = suggest
        if self.keymap:
            out["map"] = self.keymap.as_dict()
        return out

    def unmapped_message(self, source: str) -> str:
        """Why nothing was read, and how to say what the keys are: the keys seen and the ``--map`` to try."""
        report = self.key_report(limit=12)
        seen = report["unread"] + [k for k in report.get("replaced", {}) if k not in report["unread"]]
        more = report.get("unread_more", 0)
        keys = ", ".join(clean_text(k, 60) for k in seen) + (f" (and {more} more)" if more else "")
        suggest = report.get("suggest") or ["reward=<your reward key>", "gold=<a held-out score, if any>"]
        maps = " ".join(f"--map {clean_text(s, 80)}" for s in suggest)
        family = "" if any(s.startswith(("loss=", "eval_loss=")) for s in suggest) else " --family grpo"
        return (f"{source!r} has no key this tool reads by name (TRL's, verl's, OpenRLHF's or a custom loop's "
                f"common ones); keys seen: {keys or 'none'}. Say which key is what, e.g.: rlcluster analyze "
                f"{source} {maps}{family}")

    def verdict(self) -> str:
        worst = max((SEVERITY_RANK[f.severity] for f in self.findings), default=0)
        return STATUSES[worst]

    def summary(self) -> dict[str, Any]:
        """The analyzer's JSON contract."""
        gauges: dict[str, Any] = {}
        for gid in GAUGE_IDS:
            g = self.gauges.get(gid)
            if g is None:
                gauges[gid] = {"status": "no-data", "rows": 0}
                continue
            s = g.summary()
            if s["status"] == "no-data" and "note" not in s:
                note = NO_DATA_NOTES.get(gid) or (
                    f"not applicable to {self.family}" if not g.applies() else "its inputs were not logged"
                )
                s["note"] = note
            gauges[gid] = s
        findings = sorted(self.findings, key=lambda f: (f.step, -SEVERITY_RANK[f.severity]))
        return {
            "trainer": self.family or "unknown",
            "rows": self.rows,
            "verdict": self.verdict(),
            "gauges": gauges,
            "findings": [f.to_dict() for f in findings],
            "keys": self.key_report(),
        }

    # -- checkpointing ---------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "rows": self.rows,
            "last_step": self.last_step,
            "normalizer": self.normalizer.state_dict(),
            "gauges": {gid: g.state_dict() for gid, g in self.gauges.items()},
            "findings": [f.to_dict() | {"value": f.value if f.value is None or math.isfinite(f.value) else None}
                         for f in self.findings[-200:]],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        fam = state.get("family")
        if fam and fam != self.family:
            self.family = fam
            self._build()
        self.rows = int(state.get("rows", 0))
        self.last_step = int(state.get("last_step", 0))
        self.normalizer.load_state_dict(state.get("normalizer", {}))
        for gid, gs in state.get("gauges", {}).items():
            if gid in self.gauges:
                self.gauges[gid].load_state_dict(gs)
        self.findings = [
            Finding(f["gauge"], f["rule"], f["severity"], int(f["step"]), f["metric"],
                    f["value"] if isinstance(f["value"], (int, float)) else None, f["message"])
            for f in state.get("findings", [])
        ]


def analyze_rows(rows: Iterable[Mapping[str, object]], trainer: str | None = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None, max_steps: object = 0,
                 warn_sooner: object = 0, keys: Mapping[str, Any] | None = None) -> InstrumentCluster:
    """Run a whole log through a fresh cluster and finalize it (``keys``: which logged key is what)."""
    cluster = InstrumentCluster(trainer=trainer, params=params, max_steps=max_steps, warn_sooner=warn_sooner,
                                keys=keys)
    for r in rows:
        if isinstance(r, Mapping):
            cluster.update(r)
    cluster.finalize()
    return cluster
