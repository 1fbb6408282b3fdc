"""Offline analysis: a whole log through the instrument core, rendered for people or tools."""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import DIAGNOSIS_ID, FAMILY_LABELS, GAUGE_IDS, GAUGE_TITLES, InstrumentCluster, Row
from .core.cluster import RunSettings, resolve_warn_sooner
from .core.findings import SEVERITY_RANK, STATUSES
from .core.frameworks import FRAMEWORK_LABELS, detect_framework_rows
from .core.keymap import KeyMap, merge_keys
from .core.text import clean_text
from .readers import LoadedLog, LogReadError, load_rows
from .readers.stream import StreamedLog, open_stream
from .readers.verl import load_verl_log

# The one series per gauge that the sparkline shows (first key present wins).
SPARK_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("loss",),
    "gradients": ("grad_norm",),
    "learning_rate": ("learning_rate",),
    "attention_entropy": ("attention_entropy/mean",),
    "samples": ("samples/repetition_rate",),
    "lora": ("lora/norm_mean",),
    "efficiency": ("step_time", "efficiency/tokens_per_s"),
    "convergence": ("eval_loss", "loss"),
    "reward": ("reward", "objective/scores", "rewards/margins", "accuracy"),
    "kl": ("kl", "objective/kl"),
    "policy_ratio": ("val/ratio", "policy/clipfrac_avg", "clip_ratio/region_mean"),
    "length": ("completions/mean_length", "val/num_eos_tokens"),
    "entropy": ("entropy", "objective/entropy"),
    "reward_signal": ("frac_reward_zero_std", "reward_std"),
}

# Derived values shown in the table, per gauge (in order; missing ones skipped).
SHOW: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "loss_ewma", "spike_ratio"),
    "gradients": ("grad_norm", "spike_ratio", "spikes"),
    "learning_rate": ("learning_rate", "peak", "frac_at_zero"),
    "attention_entropy": ("mean", "vs_start"),
    "samples": ("repetition_rate", "rollout_repetitive_frac", "rollout_identical_groups"),
    "lora": ("norm_mean", "effective_rank", "norm_vs_start"),
    "efficiency": ("tokens_per_s", "step_time", "slowdown", "samples_per_s"),
    "convergence": ("eval_loss", "gap", "progress", "rows_since_improvement"),
    "reward": ("reward_ewma", "trend_t", "proxy_gold_gap", "margin_ewma", "accuracy_ewma"),
    "kl": ("kl", "kl_ewma", "kl_z"),
    "policy_ratio": ("ratio", "clip", "clip_asymmetry"),
    "length": ("mean_length", "vs_baseline", "clipped_ratio", "num_eos_tokens"),
    "entropy": ("entropy", "vs_start"),
    "reward_signal": ("frac_zero_std", "reward_std", "dead_components"),
}

BARS = "▁▂▃▄▅▆▇█"
CHUNK = 2048  # rows normalised before the gauges run over them, gauge by gauge


class Downsampler:
    """Keeps at most ``2 * size`` bucket means of a stream: bounded memory, O(1) amortised."""

    __slots__ = ("size", "vals", "weight", "_acc", "_n")

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self.vals: list[float] = []
        self.weight = 1
        self._acc = 0.0
        self._n = 0

    def push(self, x: float) -> None:
        self._acc += x
        self._n += 1
        if self._n >= self.weight:
            self.vals.append(self._acc / self._n)
            self._acc, self._n = 0.0, 0
            if len(self.vals) >= 2 * self.size:
                v = self.vals
                self.vals = [(v[i] + v[i + 1]) / 2 for i in range(0, len(v) - 1, 2)]
                self.weight *= 2

    def extend(self, xs: list[float]) -> None:
        """``push`` each of ``xs`` in turn (one call for a chunk of rows)."""
        acc, n, weight = self._acc, self._n, self.weight
        for x in xs:
            acc += x
            n += 1
            if n >= weight:
                self.vals.append(acc / n)
                acc, n = 0.0, 0
                if len(self.vals) >= 2 * self.size:
                    v = self.vals
                    self.vals = [(v[i] + v[i + 1]) / 2 for i in range(0, len(v) - 1, 2)]
                    self.weight = weight = weight * 2
        self._acc, self._n = acc, n

    def series(self) -> list[float]:
        tail = [self._acc / self._n] if self._n else []
        return self.vals + tail


class SparkSeries:
    """Each gauge's sparkline series (``SPARK_KEYS``: the first key a row has), collected row by row and handed to
    the downsamplers a chunk at a time. Which key each gauge takes is worked out once per row shape."""

    __slots__ = ("samplers", "pending", "_keys", "_picks", "_rows")

    def __init__(self, samplers: dict[str, Downsampler]) -> None:
        self.samplers = samplers
        self.pending: dict[str, list[float]] = {gid: [] for gid in samplers}
        self._keys: tuple[str, ...] = ()
        self._picks: list[tuple[Callable[[float], None], str]] = []
        self._rows = 0

    def add(self, vals: dict[str, float]) -> None:
        keys = tuple(vals)
        if keys != self._keys:
            self._keys = keys
            self._picks = []
            for gid, ks in SPARK_KEYS.items():
                for k in ks:
                    if k in vals:
                        self._picks.append((self.pending[gid].append, k))
                        break
        for append, k in self._picks:
            x = vals[k]
            if x - x == 0.0:  # finite (row values are floats)
                append(x)
        self._rows += 1
        if self._rows >= CHUNK:  # bounded memory on the row-by-row path too
            self.flush()

    def flush(self) -> None:
        self._rows = 0
        for gid, xs in self.pending.items():
            if xs:
                self.samplers[gid].extend(xs)
                xs.clear()


def sparkline(values: list[float], width: int = 24) -> str:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return ""
    if len(vals) > width:  # bucket means down to the width (each bucket non-empty since len > width)
        step = len(vals) / width
        buckets = [vals[int(i * step):int((i + 1) * step)] for i in range(width)]
        vals = [sum(b) / len(b) for b in buckets]
    lo, hi = min(vals), max(vals)
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        return BARS[3] * len(vals)
    return "".join(BARS[min(7, int((v - lo) / (hi - lo) * 8))] for v in vals)


@dataclass
class Analysis:
    """The result of analysing one log."""

    cluster: InstrumentCluster
    source: str
    source_format: str
    sparks: dict[str, list[float]] = field(default_factory=dict)
    first_step: int = 0
    last_step: int = 0
    alerts: list[Any] | None = None  # AlertEvents when rules were applied
    #: example completions per finding, (gauge, rule, step) -> examples (rollouts_offline.add_evidence)
    evidence: dict[tuple[str, str, int], list[dict[str, Any]]] = field(default_factory=dict)
    #: lines of a text log that are not log rows (a printed log's banners, warnings, progress bars; broken rows)
    skipped_lines: int = 0

    def verdict(self) -> str:
        """The worst finding; with alert rules, the worst alert that fired (as the live run would act)."""
        if self.alerts is None:
            return self.cluster.verdict()
        rank = max((SEVERITY_RANK[e.severity] for e in self.alerts if e.kind == "firing"), default=0)
        return STATUSES[rank]

    def to_dict(self) -> dict[str, Any]:
        out = self.cluster.summary()
        if self.evidence:
            for f in out["findings"]:
                ex = self.evidence.get((f["gauge"], f["rule"], f["step"]))
                if ex:
                    f["evidence"] = ex
        if self.alerts is not None:
            out["verdict"] = self.verdict()
            out["findings_verdict"] = self.cluster.verdict()
            out["alerts"] = [e.to_dict() for e in self.alerts]
        out["source"] = self.source
        out["format"] = self.source_format
        out["framework"] = self.cluster.framework
        if self.cluster.warn_sooner:  # how it was read, where that differs from the defaults
            out["warn_sooner"] = self.cluster.warn_sooner
        out["steps"] = [self.first_step, self.last_step]
        if self.skipped_lines:
            out["skipped_lines"] = self.skipped_lines
        restarts = self.cluster.normalizer.restarts
        if restarts:
            out["step_restarts_at_rows"] = restarts
        return out


def analyze_stream(rows: Iterable[Mapping[str, object]], trainer: str | None = None, *, source: str = "<rows>",
                   source_format: str = "rows", max_steps: int = 0, alerts: Any = None,
                   observer: Callable[[Row, InstrumentCluster, set[str]], None] | None = None,
                   params: Mapping[str, Mapping[str, Any]] | None = None, warn_sooner: int | None = None,
                   framework: str | None = None, keys: Mapping[str, Any] | None = None) -> Analysis:
    """Feed rows through a fresh cluster, keeping a downsampled series per gauge for display.

    ``framework`` (``trl``, ``verl``, ``openrlhf``; None: detected from the first rows' keys) says whose key
    vocabulary the rows speak (``core/frameworks.py``). ``keys`` maps quantities to the keys a custom loop logs
    them under (``{"reward": "reward/g", "gold": "reward/f"}``, ``core/keymap.py``), over the alert file's ``keys:``.

    With ``alerts`` (an AlertConfig) the rules are evaluated row by row exactly as the
    live callback does (no cooldown: offline there is no wall clock to wait on).
    ``observer(row, cluster, updated_gauges)`` is called after each row (the dashboard
    records its series there, in the same pass).
    """
    params = merge_params(alerts.gauge_params if alerts is not None else None, params)
    keymap = KeyMap(merge_keys(getattr(alerts, "keys", None), keys))  # a bad mapping fails before any row is read
    if framework is None:
        framework, rows = detect_framework_of(rows)
    # the run's settings, resolved once (the framework's family implied where no trainer is given)
    settings = RunSettings.resolve(trainer=trainer, max_steps=max_steps, params=params,
                                   warn_sooner=resolve_warn_sooner(warn_sooner, alerts), framework=framework,
                                   keys=keymap)
    if settings.family is None and (alerts is not None or observer is not None):
        # Rules and observers read the gauges row by row; a cluster still detecting its family holds its
        # first rows back and feeds them in one go, so rules would never see them (an alert in the first
        # rows was missed). Detect first, on the same rows, then replay every row with the family known.
        trainer, rows = detect_trainer(rows, keymap, framework)
        settings = settings.with_family(trainer)
    cluster = InstrumentCluster(settings=settings)
    engine = None
    events: list[Any] = []
    if alerts is not None:
        from .alerts import AlertEngine

        engine = AlertEngine(alerts, clock=None, warn_sooner=cluster.warn_sooner)
    samplers = {gid: Downsampler() for gid in GAUGE_IDS}
    spark = SparkSeries(samplers)
    norm = cluster.normalizer
    first = None
    chunk: list[Row] = []
    for raw in rows:
        if type(raw) is not dict and not isinstance(raw, Mapping):
            continue
        row = norm.normalize(raw)
        if row is None:
            continue
        if first is None:
            first = row.step
        if engine is not None or observer is not None:  # they read gauge state after each row: row by row
            fired = cluster.update_row(row)
            if engine is not None and cluster.gauges:
                events.extend(engine.evaluate(row.step, raw, cluster, fired, cluster.last_updated))
            if observer is not None:
                observer(row, cluster, cluster.last_updated)
        else:
            chunk.append(row)
            if len(chunk) >= CHUNK:
                cluster.update_batch(chunk)
                chunk = []
        if row.kind != "summary":
            spark.add(row.values)
    cluster.update_batch(chunk)
    spark.flush()
    final = cluster.finalize()
    if engine is not None and final:  # as the callback's on_train_end: end-of-log findings through the rules
        events += engine.evaluate(cluster.last_step, {}, cluster, final, findings_only=True)
    return Analysis(cluster, source, source_format, {g: s.series() for g, s in samplers.items()},
                    first or 0, cluster.last_step, alerts=events if engine is not None else None)


def detect_trainer(rows: Iterable[Mapping[str, object]], keys: KeyMap | None = None, framework: str | None = None
                   ) -> tuple[str | None, Iterator[Mapping[str, object]]]:
    """(family, the same rows again): the family an auto-detecting cluster settles on, decided by the same
    rule (a throwaway cluster over the first rows, reading the same keys), and an iterator that replays every row
    from the start."""
    it = iter(rows)
    seen: list[Mapping[str, object]] = []
    probe = InstrumentCluster(keys=keys, framework=framework)
    for raw in it:
        seen.append(raw)
        if isinstance(raw, Mapping):
            probe.update(raw)
            if probe.family is not None:
                break
    if probe.family is None:
        probe.finalize()  # a short log: the family from whatever was seen
    family = probe.family if probe.rows else None
    return family, itertools.chain(seen, it)


def detect_framework_of(rows: Iterable[Mapping[str, object]], limit: int = 16
                        ) -> tuple[str, Iterator[Mapping[str, object]]]:
    """(framework, the same rows again): ``trl``, ``verl`` or ``openrlhf`` from the first rows' keys."""
    it = iter(rows)
    head = list(itertools.islice(it, limit))
    return detect_framework_rows(head, limit), itertools.chain(head, it)


def _is_wandb_run(path: Path) -> bool:
    try:
        if path.suffix == ".wandb":
            return True
        if not path.is_dir():
            return False
        return any(path.glob("run-*.wandb")) or any(path.glob("*run-*/run-*.wandb")) or any(
            path.glob("wandb/*run-*/run-*.wandb"))
    except OSError:  # a directory we may not list: the log reader says so in one line
        return False


def load_any(path: str, progress: Callable[[int, int], None] | None = None) -> LoadedLog:
    """A trainer log file, a W&B offline run (directory or ``.wandb`` file), or a run in another tracker
    (``sources.py``: TensorBoard event files, ``wandb:``, ``mlflow:`` and ``trackio:`` paths)."""
    from .sources import load_source

    tracked = load_source(path, progress)
    if tracked is not None:
        return tracked
    p = Path(path)
    if _is_wandb_run(p):
        from .readers.wandb import WandbReadError, read_offline_run

        try:
            run = read_offline_run(p)
        except WandbReadError as e:
            raise LogReadError(str(e).splitlines()[0]) from None
        if not run.history:
            raise LogReadError(f"rlcluster: cannot read {path!r}: the W&B run has no history rows yet "
                               "(wandb flushes its file every ~15 s while a run is open)")
        from .rollouts_offline import with_rollouts  # TRL's completions tables -> rollout statistics

        rows, rollouts = with_rollouts(run)
        return LoadedLog(rows=rows, source_format="wandb_offline_run", path=str(run.path),
                         meta={"run_id": run.run_id, "rollouts": rollouts})
    streamed = open_stream(path)  # a large JSON Lines file or trainer_state.json: read a row at a time, none kept
    if streamed is not None:
        return streamed
    verl = load_verl_log(path)  # a verl console log (step:N - key:value lines) before the generic text readers
    if verl is not None:
        if not verl.rows:
            raise LogReadError(f"rlcluster: cannot read {path!r}: the verl log has no step:N metric lines yet")
        return verl
    return load_rows(path)


def analyze_path(path: str, trainer: str | None = None, alerts: Any = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None, warn_sooner: int | None = None,
                 framework: str | None = None, keys: Mapping[str, Any] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Analysis:
    """Read any supported log (file or W&B offline run) and analyse it (raises LogReadError on bad input).

    ``params`` are gauge parameters over the alert file's, e.g. ``{"reward": {"gold": ["verifier"]}}``;
    ``warn_sooner`` rows come off every warn rule's hold (``InstrumentCluster``; None: the alert file's, else 0);
    ``keys`` name the keys a custom loop logs (``analyze_stream``); ``progress(bytes_read, file_bytes)`` is called as
    a large (streamed) log is read, for a progress bar (never for a log read whole: that is quick).
    """
    warn_sooner = resolve_warn_sooner(warn_sooner, alerts)  # a bad value says so before a large log is read
    KeyMap(merge_keys(getattr(alerts, "keys", None), keys))  # and a bad mapping
    log: LoadedLog = load_any(path, progress)
    planned = planned_steps(log)
    if trainer is None and isinstance(log.meta.get("trainer"), str):  # a tracker's run config names its trainer
        trainer = str(log.meta["trainer"])
    for _ in range(2):
        if isinstance(log, StreamedLog):
            log.meter.hook = progress
        analysis = analyze_stream(log.rows, trainer, source=str(path), source_format=log.source_format,
                                  max_steps=planned, alerts=alerts, params=params, warn_sooner=warn_sooner,
                                  framework=framework, keys=keys)
        if not isinstance(log, StreamedLog) or planned_steps(log) == planned:
            break
        # A streamed document's planned length is read from its end before the rows; where the rows' end says
        # otherwise (the number sat elsewhere), the log is read again with the right one: the whole read's findings.
        planned = planned_steps(log)
        log = load_any(path)
    analysis.skipped_lines = sum(int(log.meta.get(k) or 0) for k in ("skipped_lines", "text_lines"))  # type: ignore[call-overload]
    if isinstance(log, StreamedLog):  # a printed log may show it is one only late in the file
        analysis.source_format = log.source_format
    if log.meta.get("rollouts") is not None:
        from .rollouts_offline import add_evidence

        add_evidence(analysis, log.meta["rollouts"])  # type: ignore[arg-type]
    return analysis


#: Keys only a value model (a critic) logs, in any framework's vocabulary (verl ``critic/vf_loss``, OpenRLHF
#: ``critic_loss``, TRL PPO ``loss/value_avg``).
CRITIC_KEY_PARTS = ("vf_loss", "vf_explained_var", "vpred", "values/mean", "value_avg", "critic_loss")


def framework_algorithm(keys: set[str]) -> str:
    """What a framework's run trained, for its heading: a framework log's family is only how its numbers are read
    (per-token, as GRPO's), so a PPO run with a critic is named by the critic's keys, not "GRPO / RLOO"."""
    if any(part in k for k in keys for part in CRITIC_KEY_PARTS):
        return "PPO with a critic"
    return "critic-free (GRPO, RLOO, ...)"


def planned_steps(log: LoadedLog) -> int:
    """The run's planned length (``max_steps``) where the log says it, else 0 (the plateau rule reads it)."""
    max_steps = log.meta.get("max_steps") if isinstance(log.meta, dict) else 0
    return int(max_steps) if isinstance(max_steps, (int, float)) else 0


def merge_params(*layers: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
    """Gauge parameters, later layers winning per gauge and name (None when there are none)."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for gid, ps in (layer or {}).items():
            out.setdefault(gid, {}).update(ps)
    return out or None


# -- rendering ---------------------------------------------------------------------------------

_COLORS = {"ok": "32", "warn": "33", "stop": "31;1", "no-data": "2", "info": "36"}


def _use_color(stream: Any) -> bool:
    return hasattr(stream, "isatty") and stream.isatty() and "NO_COLOR" not in os.environ


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        return f"{v:.3g}" if 1e-3 <= a < 1e5 else f"{v:.2e}"
    return str(v)


DOC_INDENT = " " * 17
"""Where a finding's or an alert's doc link starts: under its message, past the step and severity columns."""


def render_text(analysis: Analysis, color: bool | None = None, stream: Any = None) -> str:
    """The gauge table plus findings in step order, each with its rule's page in the manual."""
    color = _use_color(stream or sys.stdout) if color is None else color

    def paint(text: str, status: str) -> str:
        return f"\x1b[{_COLORS.get(status, '0')}m{text}\x1b[0m" if color else text

    c = clean_text  # everything from the log or the rules: control characters shown as escapes, never sent raw
    s = analysis.to_dict()
    fam = s["trainer"]
    fw = s.get("framework", "trl")
    lines = [
        f"rlcluster analyze · {c(analysis.source)}",
        (f"framework {FRAMEWORK_LABELS.get(fw, fw)} (keys read by meaning; numbers read as {fam}'s) · "
         f"algorithm {framework_algorithm(analysis.cluster.keys_seen)}"
         if fw != "trl" else f"trainer {FAMILY_LABELS.get(fam, fam)}") +
        f" · {s['rows']} rows · steps {analysis.first_step}–{analysis.last_step}"
        f" · verdict {paint(s['verdict'].upper(), s['verdict'])}",
        *([f"{s['skipped_lines']} line(s) of the log are not log rows (banners, warnings, progress bars, broken rows): "
           "skipped"] if s.get("skipped_lines") else []),
        "",
        f"  {'gauge':<24} {'status':<8} {'trend':<24}  key numbers",
        f"  {'-' * 24} {'-' * 8} {'-' * 24}  {'-' * 40}",
    ]
    for gid in GAUGE_IDS:
        g = s["gauges"][gid]
        st = g["status"]
        nums = ", ".join(f"{k}={_fmt(g[k])}" for k in SHOW.get(gid, ()) if g.get(k) is not None)
        if st == "no-data":
            nums = g.get("note", "")
        elif g.get("note"):
            nums = (nums + " · " if nums else "") + g["note"]
        nums = c(nums)
        spark = sparkline(analysis.sparks.get(gid, [])) if st != "no-data" else ""
        lines.append(f"  {GAUGE_TITLES[gid][:24]:<24} {paint(f'{st:<8}', st)} {spark:<24}  {nums}")
    lines.extend(render_keys(s.get("keys") or {}, fam, c))
    findings = list(s["findings"])
    diagnoses = [f for f in findings if f["gauge"] == DIAGNOSIS_ID]
    if diagnoses:  # the cross-gauge picture leads: one named pattern says more than five findings
        lead = [f"Diagnoses ({len(diagnoses)}):"]
        for f in diagnoses:
            sev = f["severity"]
            lead.append(f"  step {f['step']:>6}  {paint(f'{sev.upper():<4}', sev)}  {f['rule']}: {f['message']}")
            lead.append(f"{DOC_INDENT}see {c(f['doc'])}")
        at = lines.index("") + 1  # after the header
        lines[at:at] = [*lead, ""]
    if analysis.alerts is not None:
        fired = [e for e in analysis.alerts if e.kind == "firing"]
        lines.append("")
        lines.append(f"Alerts ({len(fired)} fired; verdict by alert rules {paint(s['verdict'].upper(), s['verdict'])}, "
                     f"by findings {s['findings_verdict'].upper()}):")
        for e in fired:
            note = "" if e.notify else f"  [{e.suppressed}]"
            sev = paint(f"{e.severity.upper():<4}", e.severity)
            lines.append(f"  step {e.step:>6}  {sev}  {c(e.rule)}: {c(e.title)}{note}")
            lines.append(f"{DOC_INDENT}see {c(e.doc)}")
    lines.append("")
    if not findings:
        lines.append("No findings: every gauge stayed inside its thresholds.")
    else:
        n_info = sum(f["severity"] == "info" for f in findings)
        lines.append(f"Findings ({len(findings) - n_info} warn/stop, {n_info} info), in step order:")
        for f in findings:
            sev = f["severity"]
            lines.append(f"  step {f['step']:>6}  {paint(f'{sev.upper():<4}', sev)}  {c(f['gauge'])}/{c(f['rule'])}: "
                         f"{c(f['message'])}")
            lines.append(f"{DOC_INDENT}see {c(f['doc'])}")
            if f.get("evidence") and sev != "info":
                from .core.rollouts import evidence_lines

                lines.extend(f"                 e.g. {c(x)}" for x in evidence_lines(f["evidence"][:2], width=100))
    return "\n".join(lines)


def render_keys(keys: Mapping[str, Any], family: str, c: Callable[[object], str] = clean_text) -> list[str]:
    """The keys section of the text output: which custom key fed which gauge (by the user's mapping or by its
    name, with the confidence), the keys no gauge read, and the ``--map`` that would read the most telling of
    them. Nothing for a log every key of which TRL's or a framework's names already explain."""
    out: list[str] = []
    read = keys.get("read") or []
    if read:
        out += ["", "Keys read by meaning (custom names):"]
        for e in read:
            how = "your map" if e["by"] == "map" else f"by name, confidence {e['confidence']:.0%}"
            to = ", ".join(e["gauges"]) or "no gauge"
            out.append(f"  {c(e['key'])[:40]:<40} -> {c(e['as']):<28} ({how}) -> {c(to)}")
    replaced = keys.get("replaced") or {}
    if replaced:
        out.append("Keys your map overrode (not read): " +
                   c(", ".join(f"{k} ({v})" for k, v in replaced.items())))
    unread = keys.get("unread") or []
    suggest = keys.get("suggest") or []
    if suggest or (unread and read):
        more = keys.get("unread_more", 0)
        if unread:
            out.append(f"Keys no gauge read: {c(', '.join(unread))}" + (f" (and {more} more)" if more else ""))
        if suggest:
            out.append("To read more of them: " + " ".join(f"--map {c(x)}" for x in suggest) +
                       (" --family grpo" if family == "sft" and any(x.startswith(("reward=", "kl=", "entropy="))
                                                                      for x in suggest) else ""))
        if family == "sft" and any(x.startswith(("reward=", "gold=", "kl=")) for x in suggest):
            out.append("Read as SFT because no reward was recognised, yet some keys look like an RL loop's: if it "
                       "is one, name its reward with --map, or the verdict above judges only the loss.")
    return out


def render_json(analysis: Analysis) -> str:
    return json.dumps(analysis.to_dict(), indent=2, allow_nan=False, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, float):
        return None
    raise TypeError(type(o).__name__)
