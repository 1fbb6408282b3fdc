"""``rlcluster rules``: the rule catalog as a table, as JSON, one rule in the terminal, and the manual's rule pages.

The pages (``docs/rules/<rule id>.md``, one per rule id, and ``docs/rules/index.md``) and their pictures
(``docs/rules/img/<gauge>-<id>.svg``) are generated from ``core/catalog.py``, the examples' streams run through the
real ``analyze_rows`` and the shipped ``alerts.yaml``; ``tests/test_rule_catalog.py`` regenerates them and fails when
the committed copy is stale, and ``tests/test_rule_pages.py`` runs every page's configuration snippets.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .core.catalog import ANY_GAUGE, CATALOG, INSTRUMENTS, POST, Rule, budget, gauge_class, threshold_text, thresholds
from .core.cluster import analyze_rows
from .core.doc_links import DOCS_URL_ENV, rule_doc_url
from .svgplot import line_chart

BUDGET_NONE = "-"
"""The false-alarm budget column of a rule held k rows: it declares none."""

SERIES = "The Post-Training Instrument Cluster"
PART_URL = {
    "I": "https://chrisvoncsefalvay.com/posts/post-training-instrument-cluster/",
    "II": "https://chrisvoncsefalvay.com/posts/post-training-instrument-cluster-rl/",
    "III": "https://chrisvoncsefalvay.com/posts/post-training-instrument-cluster-grpo/",
}
SOURCES = {POST: f"{SERIES}, Part II", INSTRUMENTS: f"{SERIES}, Parts I and III (summarised)"}
"""A seed's source as a reader can find it: the blog series by Chris von Csefalvay."""

FIRING, HEALTHY, ONSET, FIRES, LINE = "#c0392b", "#2471a3", "#777777", "#6c3483", "#d68910"

# The level a rule compares its plotted key with, drawn on its picture: ("abs", param) the parameter itself (a
# band parameter gives two lines), ("rel", param) the parameter times the stream's level before the pathology starts
# (a rule that compares with a running baseline), ("at", value) a fixed level. A rule decided by a sequential test
# or across keys has no single line: its picture shows where the pathology starts and where the rule fires.
LINES: dict[str, tuple[str, Any]] = {
    "kl-warn": ("abs", "warn"), "kl-stop": ("abs", "stop"), "kl-negative": ("abs", "negative"),
    "kl-high-at-start": ("abs", "warn"), "kl-spike": ("abs", "spike_min"),
    "ratio-warn": ("abs", "ratio_warn"), "ratio-stop": ("abs", "ratio_stop"),
    "clip-high": ("abs", "clip_warn"), "clip-stop": ("abs", "clip_stop"), "clip-low": ("abs", "clip_low"),
    "value-clip-high": ("abs", "value_clip"), "truncation": ("abs", "truncation"),
    "zero-std-dead": ("abs", "zero_std_stop"), "zero-std-high": ("abs", "zero_std_warn"),
    "zero-std-solved": ("abs", "zero_std_warn"), "reward-std-low": ("abs", "std_low"),
    "reward-component-dead": ("abs", "component_dead"), "reward-ceiling": ("abs", "rollout_ceiling"),
    "advantage-decided-by": ("abs", "rollout_decides"), "sample-repetition": ("abs", "repetition"),
    "rollout-repetition": ("abs", "rollout_repetitive"), "identical-groups": ("abs", "rollout_identical"),
    "empty-completions": ("abs", "rollout_empty"), "grad-sparse": ("abs", "sparsity"),
    "grad-layer-imbalance": ("abs", "layer_spread"), "memory-pressure": ("abs", "mem_high"),
    "lora-layer-imbalance": ("abs", "layer_cv"), "accuracy-chance": ("abs", "accuracy_chance"),
    "length-paid": ("abs", "rollout_paid_corr"), "reward-outliers": ("abs", "rollout_outlier_z"),
    "margin-negative": ("at", 0.0), "grad-zero": ("at", 0.0), "lr-zero-long": ("at", 0.0),
    "length-explosion": ("rel", "explode"), "length-collapse": ("rel", "collapse"),
    "entropy-collapse": ("rel", "collapse_ratio"), "entropy-collapse-persistent": ("rel", "stop_ratio"),
    "entropy-sharpening": ("rel", "sharpening_ratio"), "grad-explosion": ("rel", "explode_ratio"),
    "grad-vanishing": ("rel", "vanish_ratio"), "grad-spike": ("rel", "spike_ratio"),
    "loss-spike": ("rel", "spike_ratio"), "loss-spike-single": ("rel", "spike_ratio_now"),
    "loss-spike-repeated": ("rel", "spike_ratio_now"), "throughput-declining": ("rel", "slowdown"),
    "attention-collapse": ("rel", "collapse_ratio"), "lora-norm-explosion": ("rel", "norm_explosion"),
    "lora-rank-collapse": ("rel", "rank_collapse"),
}


def documented(rule: Rule) -> Rule:
    """The rule as its page documents it: a gauge parameter its words name in backticks (length-explosion's
    `baseline_rows`) is one of its parameters too, shown in its thresholds and its "Change it" snippets."""
    cls = gauge_class(rule.gauge)
    if cls is None:
        return rule
    named = re.findall(r"`(\w+)`", f"{rule.reads} {rule.test}")
    extra = tuple(dict.fromkeys(n for n in named if n in cls.defaults and n not in rule.params))
    return replace(rule, params=rule.params + extra) if extra else rule


#: The catalog as the pages and ``rlcluster rules`` document it (``documented``).
RULES_DOCUMENTED: tuple[Rule, ...] = tuple(documented(r) for r in CATALOG)


def rule_id(rule: Rule) -> str:
    return f"{rule.id}:<fn>" if rule.per_function else rule.id


def rule_glob(rule: Rule) -> str:
    """How an ``alerts.yaml`` ``finding:`` pattern names the rule (a per-function rule: every function)."""
    return f"{rule.id}:*" if rule.per_function else rule.id


def first_fire(rule: Rule, firing: bool = True) -> int | None:
    """The row (step) of the rule's first finding on its example's stream, or None."""
    ex = rule.example
    cluster = analyze_rows(ex.rows(firing), trainer=ex.trainer, **ex.kwargs)
    for f in cluster.findings:
        if f.rule.split(":")[0] == rule.id and (rule.gauge == ANY_GAUGE or f.gauge == rule.gauge):
            return f.step
    return None


def seed_text(rule: Rule) -> str:
    return f"{SOURCES[rule.seed_source]}: “{rule.seed}”" if rule.seed_source else "none"


def rule_records() -> list[dict[str, Any]]:
    """One plain record per rule: what the table, the JSON and the page show."""
    out = []
    for r in RULES_DOCUMENTED:
        ex = r.example
        out.append({
            "id": rule_id(r), "gauge": r.gauge, "severity": "/".join(r.severities),
            "threshold": threshold_text(r), "thresholds": thresholds(r),
            "false_alarm_budget": None if budget(r) == BUDGET_NONE else budget(r),
            "seed": r.seed or "none", "seed_source": r.seed_source or None, "origin": r.origin or None,
            "reads": r.reads, "test": r.test, "means": r.means, "fix": r.fix, "doc": rule_doc_url(r.id),
            "example": {"trainer": ex.trainer, "rows": ex.n, "onset": ex.onset, "fire_by": ex.fire_by,
                        "plot": ex.plot, **({"kwargs": dict(ex.kwargs)} if ex.kwargs else {})},
        })
    return out


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(records: list[dict[str, Any]]) -> str:
    """The text table of ``rlcluster rules``."""
    cols = (("id", 30), ("gauge", 17), ("severity", 9), ("threshold", 44), ("budget", 14), ("seed", 60))
    lines = ["  ".join(name.ljust(w) for name, w in cols).rstrip()]
    for rec in records:
        cells = [rec["id"], rec["gauge"], rec["severity"], rec["threshold"], rec["false_alarm_budget"] or BUDGET_NONE,
                 (f"{SOURCES.get(rec['seed_source'], '')}: " if rec["seed_source"] else "") + rec["seed"]]
        lines.append("  ".join(_cut(str(c), w).ljust(w) for c, (_, w) in zip(cells, cols, strict=True)).rstrip())
    lines.append(f"{len(records)} rules. Thresholds are read from the gauges' defaults (override them per gauge in "
                 "alerts.yaml or params=); budget: the false-alarm budget (ARL0) of a rule that decides by a "
                 "sequential test, '-' for a rule held k rows. One rule in full: rlcluster rules ID.")
    return "\n".join(lines) + "\n"


def render_json(records: list[dict[str, Any]]) -> str:
    return json.dumps(records, indent=1, default=list) + "\n"


# -- the picture ------------------------------------------------------------------------------------------------------


def plot_key(rule: Rule) -> str:
    """The key the picture draws: the example's, unless both streams agree on it (the difference is elsewhere,
    e.g. the other reward component): then the key on which they differ most, relative to its spread."""
    ex = rule.example
    fire, calm = ex.rows(True), ex.rows(False)

    def gap(key: str) -> float:
        a = [r.get(key, math.nan) for r in fire]
        b = [r.get(key, math.nan) for r in calm]
        pairs = [(x, y) for x, y in zip(a, b, strict=False) if math.isfinite(x) and math.isfinite(y)]
        if not pairs:
            return 0.0
        scale = max(abs(v) for p in pairs for v in p) or 1.0
        return max(abs(x - y) for x, y in pairs) / scale

    if gap(ex.plot) > 1e-9 or any(ex.plot in r and not math.isfinite(r[ex.plot]) for r in fire):
        return ex.plot
    keys = sorted({k for r in fire for k in r} - {"step"})
    best = max(keys, key=gap, default=ex.plot)
    return best if gap(best) > 1e-9 else ex.plot


def param_value(rule: Rule, name: str) -> Any:
    """The parameter's value for the example's trainer family (its family default, else the default)."""
    row = thresholds(rule).get(name, {})
    return row.get(rule.example.trainer, row.get("default"))


def threshold_lines(rule: Rule, key: str) -> list[tuple[float, str, str]]:
    """The horizontal lines of the rule's picture: ``(y, legend label, colour)``."""
    spec = LINES.get(rule.id)
    if spec is None or key != rule.example.plot:
        return []
    kind, what = spec
    if kind == "at":
        return [(float(what), f"{_num(float(what))}: the rule's line", LINE)]
    value = param_value(rule, what)
    if value is None:
        return []
    if kind == "abs":
        if isinstance(value, (tuple, list)):  # a band: both edges, one legend entry
            label = f"{what} = [{', '.join(_num(float(v)) for v in value)}]"
            return [(float(v), label, LINE) for v in value]
        return [(float(value), f"{what} = {_num(float(value))}", LINE)]
    if "`baseline_rows`" in rule.reads:  # a ratio to the run's start: the median of its first baseline_rows rows
        n = int(param_value(rule, "baseline_rows") or 10)
        first = [r[key] for r in rule.example.rows(True) if key in r and math.isfinite(r[key])][:n]
        if not first:
            return []
        start = sorted(first)[len(first) // 2]
        return [(float(value) * start, f"{what} = {_num(float(value))} × the median of the first {n} rows "
                 "(baseline_rows)", LINE)]
    onset = max(rule.example.onset, 21)  # the rows just before the pathology: the level a running baseline holds
    before = [r[key] for r in rule.example.rows(False)
              if key in r and math.isfinite(r[key]) and onset - 20 <= r["step"] < onset]
    if not before:
        return []
    level = sorted(before)[len(before) // 2]
    return [(float(value) * level, f"{what} = {_num(float(value))} × the level just before onset", LINE)]


def _num(x: float) -> str:
    return f"{x:.4g}"


def render_plot(rule: Rule, fired: int | None) -> str:
    ex = rule.example
    key = plot_key(rule)

    def points(firing: bool) -> list[tuple[float, float]]:
        return [(r["step"], r[key]) for r in ex.rows(firing) if key in r]

    marks = [(float(ex.onset), f"onset {ex.onset}", ONSET)] if ex.onset > 1 else []
    if fired is not None:
        marks.append((float(fired), f"fires {fired}", FIRES))
    return line_chart([("healthy run", HEALTHY, points(False)), ("firing example", FIRING, points(True))],
                      title=f"{rule.id}: {key} ({ex.trainer})", marks=marks, hlines=threshold_lines(rule, key),
                      x_label="step (logged row)")


def plot_name(rule: Rule) -> str:
    return f"{rule.gauge.replace('*', 'any')}-{rule.id}.svg"


# -- configuration: what the page tells a user to write, and what its tests run ----------------------------------


def _yaml_value(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_yaml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


def tunable(rule: Rule) -> dict[str, Any]:
    """The rule's parameters and their defaults, as a user would override them (reward function names excluded)."""
    out: dict[str, Any] = {}
    for name, row in thresholds(rule).items():
        v = row.get("default", next(iter(row.values()), None))
        if v is None or (isinstance(v, list) and not all(isinstance(x, (int, float)) for x in v)):
            continue
        out[name] = list(v) if isinstance(v, tuple) else v
    return out


def _family_note(rule: Rule, name: str) -> str:
    row = thresholds(rule).get(name, {})
    fams = {k: v for k, v in row.items() if k != "default"}
    if not fams:
        return ""
    by: dict[str, list[str]] = {}
    for fam, v in fams.items():
        by.setdefault(_yaml_value(list(v) if isinstance(v, tuple) else v), []).append(fam)
    return "; ".join(f"{', '.join(f)}: {v}" for v, f in by.items())


def tune_yaml(rule: Rule) -> str:
    """An ``alerts.yaml`` that sets the rule's parameters (to today's defaults: change the numbers)."""
    gauge = rule.gauge
    lines = ["gauges:", f"  {gauge}:"]
    for name, v in tunable(rule).items():
        fam = _family_note(rule, name)
        lines.append(f"    {name}: {_yaml_value(v)}   # default" + (f" ({fam})" if fam else ""))
    return "\n".join(lines) + "\n"


def tune_python(rule: Rule) -> str:
    params = "".join(f'    "{k}": {_yaml_value(v)},\n' for k, v in tunable(rule).items())
    return ("from wandb_rlcluster import RLClusterCallback\n\n"
            f'callback = RLClusterCallback(params={{"{rule.gauge}": {{\n{params}}}}})\n'
            "# trainer = GRPOTrainer(..., callbacks=[callback])   (any TRL / transformers trainer)\n")


@dataclass(frozen=True)
class Forwarder:
    """A shipped alert rule that alerts on this catalog rule, and what silencing it takes."""

    name: str
    severity: str
    narrowed: str | None  # the pattern without this rule; None: switch the alert rule off


def _shipped() -> Any:
    from .alerts.config import load_config

    return load_config()


def _rules_of(gauge: str) -> list[Rule]:
    return [r for r in RULES_DOCUMENTED if r.gauge == gauge or (r.gauge == ANY_GAUGE and gauge != "diagnosis")]


def forwarders(rule: Rule) -> list[Forwarder]:
    """The shipped alert rules that would alert on this rule's findings, in file order: finding rules whose pattern
    takes its id (and severity, and example's trainer), and metric rules named after it (``kl-warn``; ``seq-kl-warn``,
    the per-sequence twin)."""
    out = []
    severities = rule.severities
    rank = ("info", "warn", "stop").index
    for ar in _shipped().rules:
        if ar.finding is not None:
            if rule.gauge not in (ar.gauge, ANY_GAUGE) or ar.gauge == "diagnosis" and rule.gauge == ANY_GAUGE:
                continue
            rx = re.compile(ar.finding)
            probe = f"{rule.id}:fn" if rule.per_function else rule.id
            if not rx.fullmatch(probe) or not any(rank(s) >= rank(ar.min_severity) for s in severities):
                continue
            keep = [rule_glob(r) for r in _rules_of(ar.gauge) if r.id != rule.id
                    and rx.fullmatch(f"{r.id}:fn" if r.per_function else r.id)]
            out.append(Forwarder(ar.name, ar.severity, "|".join(dict.fromkeys(keep)) or None))
        elif ar.when is not None and ar.name in (rule.id, f"seq-{rule.id}") and ar.gauge == rule.gauge:
            out.append(Forwarder(ar.name, ar.severity, None))
    return out


def _folded(pattern: str, width: int = 72, indent: str = "      ") -> str:
    """``"a|b|c"`` as a double-quoted YAML scalar broken after a ``|`` before ``width`` characters."""
    lines, line = [], ""
    for part in pattern.split("|"):
        piece = part + "|"
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    lines.append(line.rstrip("|"))
    return '"' + f"\n{indent}".join(lines) + '"'


def silence_yaml(rule: Rule) -> str:
    """An ``alerts.yaml`` that stops the shipped rules alerting on this rule ('' when none does)."""
    fw = forwarders(rule)
    if not fw:
        return ""
    lines = ["rules:"]
    for f in fw:
        lines.append(f"  - name: {f.name}")
        if f.narrowed is None:
            lines.append("    enabled: false")
        else:  # a long pattern folds over lines inside its quotes (YAML reads the breaks as spaces, ignored)
            lines.append("    finding: " + _folded(f.narrowed))
    return "\n".join(lines) + "\n"


# -- the pages -----------------------------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Catalog text in a Markdown paragraph: pipes and angle brackets are text, not table cells or HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _gauge_link(rule: Rule, up: str = "../") -> str:
    if rule.gauge == ANY_GAUGE:
        return f"[any gauge]({up}gauges/index.md) (the one reading the key)"
    return f"[{rule.gauge}]({up}gauges/{rule.gauge}.md)"


def _citation(rule: Rule) -> str:
    if rule.seed_source == POST:
        return f"— *{SERIES}*, [Part II]({PART_URL['II']}) (Chris von Csefalvay)"
    return (f"— summarised from *{SERIES}*, [Part I]({PART_URL['I']}) and [Part III]({PART_URL['III']}) "
            "(Chris von Csefalvay)")


def pages_by_id() -> dict[str, list[Rule]]:
    """The catalog's entries by rule id: one page per id (an id two gauges raise has both entries on its page)."""
    out: dict[str, list[Rule]] = {}
    for r in RULES_DOCUMENTED:
        out.setdefault(r.id, []).append(r)
    return out


def _entry(rule: Rule, fired: int | None, heading: str) -> list[str]:
    ex = rule.example
    key = plot_key(rule)
    lines_drawn = threshold_lines(rule, key)
    sev = "/".join(rule.severities)
    plain = (plain_words(rule.reads), plain_words(rule.test))
    technical = ([f"- **the test in statistical terms** it reads {_md(rule.reads)}; it fires on {_md(rule.test)}"]
                 if plain != (rule.reads, rule.test) else [])
    out = [
        f"{heading} In plain words",
        "",
        f"It reads {_md(plain[0])}, and fires on this test: {_md(plain[1])}. When it fires, {_md(rule.means)}.",
        "",
        *technical,
        f"- **gauge** {_gauge_link(rule)} · **severity** {sev} · **false-alarm budget** {_md(budget(rule))}",
        f"- **thresholds** {_md(threshold_text(rule))}",
        "",
        f"{heading} What to do",
        "",
        f"{_md(rule.fix[:1].upper() + rule.fix[1:])}.".replace("..", "."),
        "",
        f"{heading} Why",
        "",
    ]
    if rule.seed_source:
        out += [f"> {_md(rule.seed)}", ">", f"> {_citation(rule)}", ""]
    else:
        out += ["No line of the blog series this plugin implements states this rule; it guards a failure the "
                "other rules would miss or misread.", ""]
    if rule.origin:
        out += [f"Where the numbers come from: {_md(rule.origin)}.".replace("..", "."), ""]
    kwargs = ", ".join(f"`{k}={v!r}`" for k, v in ex.kwargs.items())
    labels = list(dict.fromkeys(lab for _, lab, _ in lines_drawn))
    drawn = (f"; the dashed orange line{'s are' if len(lines_drawn) > 1 else ' is'} `{_md(labels[0])}`"
             if labels else "")
    swapped = (f" Both streams have the same `{_md(ex.plot)}`; the picture shows `{_md(key)}`, where they differ."
               if key != ex.plot else "")
    out += [
        f"{heading} The picture",
        "",
        f"![{rule.id}: {_md(key)}, the firing example against a healthy run](img/{plot_name(rule)})",
        "",
        f"A {ex.trainer} log of {ex.n} rows{' (' + kwargs + ')' if kwargs else ''}: red, the example the rule must "
        f"fire on (the pathology starts at row {ex.onset}; it must fire by row {ex.fire_by} and fires at row "
        f"{fired}); blue, a healthy run of the same length it stays quiet on{drawn}.{swapped} Both streams are "
        "checked by the test suite on every change.",
        "",
    ]
    return out


def _config_section(rule: Rule, heading: str) -> list[str]:
    out = [f"{heading} Change it", ""]
    if tunable(rule):
        out += [
            "In your own `alerts.yaml` (merged over the shipped rules; pass it as `RLClusterCallback(alerts=\"alerts"
            ".yaml\")` or `rlcluster analyze RUN --alerts alerts.yaml`), with today's defaults — change the numbers"
            + ("; a value set here applies to every trainer family, whatever its own default" if any(
                _family_note(rule, n) for n in tunable(rule)) else "") + ":",
            "",
            "```yaml",
            tune_yaml(rule).rstrip(),
            "```",
            "",
            "Or in Python, the same parameters:",
            "",
            "```python",
            tune_python(rule).rstrip(),
            "```",
            "",
        ]
    else:
        out += ["It has no parameter: it reports a fact about the log (a NaN, an impossible value, a pattern of other "
                "rules), not a level.", ""]
    silence = silence_yaml(rule)
    out += [f"{heading} Silence it", ""]
    if silence:
        fw = forwarders(rule)
        names = ", ".join(f"`{f.name}`" for f in fw)
        out += [
            f"The shipped alert rule{'s' if len(fw) > 1 else ''} {names} alert{'' if len(fw) > 1 else 's'} on it. "
            "This `alerts.yaml` keeps every other alert and drops this one (the finding still shows in "
            "`rlcluster analyze` and the dashboard):",
            "",
            "```yaml",
            silence.rstrip(),
            "```",
            "",
            "Check a file before training with `rlcluster alerts validate alerts.yaml`. More: "
            "[alerts.yaml and its channels](../alerts.md).",
            "",
        ]
    else:
        out += ["No shipped alert rule alerts on it (an info finding, or one the shipped rules do not forward): it "
                "shows in `rlcluster analyze` and the dashboard only. Nothing to silence.", ""]
    return out


def render_rule_page(rid: str, rules: list[Rule], fired: dict[tuple[str, str], int | None]) -> str:
    first = rules[0]
    shown = rule_id(first)
    lines = [
        f"# {_md(shown)}" if first.per_function else f"# {shown}",
        "",
        "<!-- Generated by `rlcluster rules --markdown` from src/wandb_rlcluster/core/catalog.py; do not edit. -->",
        "",
        f"*{_md(first.means[:1].upper() + first.means[1:])}.*".replace("..", "."),
        "",
    ]
    if first.per_function and first.gauge == "breaks":
        lines += [f"One rule per series: it fires as `{rid}:<series>` (e.g. `{rid}:reward`, `{rid}:kl`, "
                  f"`{rid}:rewards/format`), the series being the quantity that broke.", ""]
    elif first.per_function:
        lines += [f"One rule per reward function: it fires as `{rid}:<name>` (e.g. `{rid}:format`), the name being "
                  "the reward function's as your trainer logs it.", ""]
    if len(rules) == 1:
        lines += _entry(first, fired[first.key], "##")
        lines += _config_section(first, "##")
    else:
        lines += [f"Two gauges raise `{rid}`: " + " and ".join(_gauge_link(r) for r in rules) + ".", ""]
        for r in rules:
            lines += [f"## From the {r.gauge} gauge", ""]
            lines += _entry(r, fired[r.key], "###")
            lines += _config_section(r, "###")
    lines += ["## In the terminal", "", "```bash", f"rlcluster rules {rid}", "```", "",
              "[All rules](index.md)", ""]
    return "\n".join(lines).rstrip() + "\n"


#: Statistical terms a rule's test is written in, and the words its page's "In plain words" uses instead (the
#: terms stay on the page, in the line that gives the test in statistical terms).
PLAIN_WORDS = (
    ("Page's CUSUM", "a running sum of the rows' deviations"),
    ("two-sided CUSUM", "a running sum of the rows' deviations, up or down,"),
    ("a CUSUM for the noise", "a running sum of how far the noise exceeds its usual size"),
    ("a CUSUM of", "a running sum of"),
    ("its CUSUM", "its running sum of deviations"),
    ("a noise CUSUM", "a running sum of how far the noise exceeds its usual size"),
    ("CUSUM residuals", "its running sum of deviations"),
    ("CUSUM past", "the running sum of deviations past"),
    ("the CUSUM", "the running sum of deviations"),
    ("AR(1) prewhitened", "corrected for noise that carries over from row to row"),
    ("(AR(1)-aware)", "(allowing for noise that carries over from row to row)"),
    ("(deflated for AR(1) noise)", "(allowing for noise that carries over from row to row)"),
    ("AR(1)-widened", "widened for noise that carries over from row to row"),
    ("ARL0-budget threshold", "threshold set by its false-alarm budget"),
)
JARGON = ("CUSUM", "AR(1)", "ARL0")


def plain_words(test: str) -> str:
    """A rule's test with the statistical terms put in words (a test this table misses keeps them: the rule pages'
    test fails on any left)."""
    for term, words in PLAIN_WORDS:
        test = test.replace(term, words)
    return test


def render_index(fired: dict[tuple[str, str], int | None]) -> str:
    lines = [
        "# Rules",
        "",
        "<!-- Generated by `rlcluster rules --markdown` from src/wandb_rlcluster/core/catalog.py; do not edit. -->",
        "",
        f"Every rule the instruments can raise ({len(CATALOG)} entries), one page each: what it reads and decides, "
        "why, a picture of it firing on an example next to a healthy run, what to do, and the `alerts.yaml` and "
        "Python lines that change or silence it. Every finding and alert links to its rule's page "
        "(`doc` in `rlcluster analyze --format json`, the alerts journal, Slack and e-mail; the rule's name in the "
        "dashboard). In a terminal: `rlcluster rules` lists them, `rlcluster rules ID` prints one.",
        "",
        "A link reads `rlcluster rules <id>`, the command that prints the page in any install; set "
        "`RLCLUSTER_DOCS_URL` to where you serve the built manual (e.g. `https://docs.example.org/rlcluster`, or "
        "`file:///path/to/site` after `make docs`) and they become `<that address>/rules/<id>.html`. The rules "
        "of `alerts.yaml` that turn findings into alerts have their own page: [Alert rules](alert-rules.md); "
        "how the two kinds differ: [Gauge rules and alert rules](../rule-kinds.md).",
        "",
        "Each page quotes the line of the blog series the instruments implement (where one states the "
        f"rule), *{SERIES}* by Chris von Csefalvay ([Part I]({PART_URL['I']}), "
        f"[Part II]({PART_URL['II']}), "
        f"[Part III]({PART_URL['III']})). A rule with a false-alarm budget decides by a sequential test whose "
        "threshold is set by the average run length to a false alarm on stationary noise (ARL0, in logged rows); "
        "the others hold a level for k rows.",
        "",
    ]
    gauge = None
    for r in RULES_DOCUMENTED:
        if r.gauge != gauge:
            gauge = r.gauge
            title = "any gauge" if gauge == ANY_GAUGE else gauge
            lines += ["", f"## {title}", "", "| rule | severity | what it means |", "|---|---|---|"]
        lines.append(f"| [{_md(rule_id(r))}]({r.id}.md){{ .rule-id }} | {'/'.join(r.severities)} | {_md(r.means)} |")
    return "\n".join(lines).rstrip() + "\n"


def render_pages() -> tuple[dict[str, str], dict[str, str]]:
    """The manual's rule pages (``{file name: markdown}``, index.md included) and pictures (``{file name: svg}``)."""
    fired = {r.key: first_fire(r) for r in RULES_DOCUMENTED}
    from .alerts import load_config
    from .alerts.reference import render_alert_rules_page

    pages = {"index.md": render_index(fired), "alert-rules.md": render_alert_rules_page(load_config())}
    for rid, rules in pages_by_id().items():
        pages[f"{rid}.md"] = render_rule_page(rid, rules, fired)
    plots = {plot_name(r): render_plot(r, fired[r.key]) for r in RULES_DOCUMENTED}
    return pages, plots


def write_reference(folder: str | Path) -> list[Path]:
    """Write the pages into ``folder`` and their pictures into ``folder/img``; returns what was written. A rule
    that was removed takes its page and picture with it."""
    root = Path(folder)
    pages, plots = render_pages()
    img = root / "img"
    img.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages.items():
        (root / name).write_text(text, encoding="utf-8")
        written.append(root / name)
    for name, svg in plots.items():
        (img / name).write_text(svg, encoding="utf-8")
        written.append(img / name)
    for old in [*root.glob("*.md"), *img.glob("*.svg")]:
        if old.name not in pages and old.name not in plots:
            old.unlink()
    return written


# -- one rule in the terminal ---------------------------------------------------------------------------------------


def find_rules(name: str) -> list[Rule]:
    """The catalog entries of a rule id (``reward-ceiling:format`` is ``reward-ceiling``)."""
    base = name.strip().split(":", 1)[0]
    return [r for r in RULES_DOCUMENTED if r.id == base]


def closest(name: str, n: int = 3, extra: Iterable[str] = ()) -> list[str]:
    """Up to ``n`` rule ids (and ``extra`` names: alert rules) close to a name that matched none."""
    ids = list(dict.fromkeys([*(r.id for r in RULES_DOCUMENTED), *extra]))
    near = difflib.get_close_matches(name.strip().lower(), ids, n=n, cutoff=0.5)
    return near or [i for i in ids if name.strip().lower() in i][:n]


def _wrap(text: str, width: int = 100, indent: str = "  ") -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent) or [indent]


def render_rule_text(rules: Iterable[Rule]) -> str:
    """One rule as ``rlcluster rules ID`` prints it: the page's words, the snippets and the page's link."""
    out: list[str] = []
    for r in rules:
        ex = r.example
        out += [f"{rule_id(r)}  (gauge {'any' if r.gauge == ANY_GAUGE else r.gauge}; severity "
                f"{'/'.join(r.severities)})", ""]
        for label, text in (("What it means", r.means), ("Reads", r.reads), ("Fires on", r.test),
                            ("Thresholds", threshold_text(r)), ("False-alarm budget", budget(r)),
                            ("What to do", r.fix), ("Seed", seed_text(r)), ("Origin", r.origin)):
            if text:
                out += [f"{label}:", *_wrap(text), ""]
        out += ["Example:", *_wrap(f"{ex.trainer}, {ex.n} rows; the pathology starts at row {ex.onset} and the rule "
                                   f"must fire by row {ex.fire_by}; a healthy run of the same length stays quiet."),
                ""]
        if tunable(r):
            out += ["Change it (alerts.yaml):", *("  " + x for x in tune_yaml(r).splitlines()), "",
                    "or in Python:", *("  " + x for x in tune_python(r).splitlines() if x), ""]
        silence = silence_yaml(r)
        if silence:
            out += ["Silence it (alerts.yaml):", *("  " + x for x in silence.splitlines()), ""]
        link = rule_doc_url(r.id)
        out += [f"Page: {link}" if "://" in link else f"Page: rules/{r.id}.html in the built manual (set "
                f"{DOCS_URL_ENV} to the manual's address and every link points there)", ""]
    return "\n".join(out).rstrip() + "\n"
