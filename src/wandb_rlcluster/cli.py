"""The ``rlcluster`` command line.

Exit codes mean one thing each: 0 done, 1 ``analyze --fail-on`` reached, 2 anything wrong with the
input, the configuration or the environment, said in one line on stderr (never a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .core.cluster import WARN_SOONER_MAX
from .core.findings import SEVERITY_RANK
from .core.frameworks import FRAMEWORKS
from .core.keys import FAMILIES, canonical_family
from .core.text import clean_text
from .readers import LogReadError

if TYPE_CHECKING:
    from .sweep import RunRecord

if TYPE_CHECKING:
    from .alerts import AlertConfig

EXIT_OK, EXIT_FAIL_ON, EXIT_BAD_INPUT = 0, 1, 2
REPORT_TITLE_MAX = 128  # W&B's limit on a report title


def _say(msg: object, stream: TextIO | None = None) -> None:
    """Print one item of output with its control characters escaped (file names, metric names and
    titles come from logs and configs, and a raw ESC sequence could rewrite the terminal)."""
    print(clean_text(msg), file=stream or sys.stdout)


def _fail(msg: str) -> int:
    msg = " ".join(str(msg).split()) or "failed (no reason given)"
    _say(f"rlcluster: {msg}" if not msg.startswith("rlcluster:") else msg, sys.stderr)
    return EXIT_BAD_INPUT


def _trainer_and_alerts(args: argparse.Namespace) -> tuple[str | None, object | None, int]:
    """(trainer family or None, AlertConfig or None, exit code): shared by analyze, dashboard and report."""
    try:
        trainer = canonical_family(args.trainer) if args.trainer else None
    except ValueError as e:
        return None, None, _fail(str(e))
    alerts = None
    if getattr(args, "alerts", None):
        alerts, code = _load_alerts(None if args.alerts == "default" else args.alerts)
        if alerts is None:
            return None, None, code
    return trainer, alerts, 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .sweep import is_single_run

    trainer, alerts, code = _trainer_and_alerts(args)
    if code:
        return code
    gold = [g.strip() for item in (args.gold or []) for g in item.split(",") if g.strip()]
    keys, problem = _parse_map(args.map)
    if problem:
        return _fail(problem)
    filters, problem = _parse_filters(args.filter)
    if problem:
        return _fail(problem)
    if args.tracking_uri:  # MLflow's client reads it from the environment (a sweep's workers too)
        os.environ["MLFLOW_TRACKING_URI"] = args.tracking_uri
    if len(args.path) == 1 and args.format in ("text", "json") and is_single_run(args.path[0]):
        return _analyze_one_run(args, args.path[0], trainer, alerts, gold, keys)
    return _analyze_sweep(args, trainer, gold, keys)


def _analyze_one_run(args: argparse.Namespace, path: str, trainer: str | None, alerts: object | None,
                     gold: list[str], keys: dict[str, object] | None) -> int:
    """One log, as ``rlcluster analyze FILE`` has always printed it (``--html``: its one-row fleet page too)."""
    from .analyze import analyze_path, render_json, render_text
    from .sweep import use_byte_progress

    bar = use_byte_progress(args.progress)  # drawn only while a large log is streamed, or a W&B run's history read
    if bar is not None and path.startswith("wandb:"):
        bar.unit = "rows"
    try:
        analysis = analyze_path(path, trainer, alerts=alerts, params={"reward": {"gold": gold}} if gold else None,
                                warn_sooner=args.warn_sooner, framework=args.framework, keys=keys, progress=bar)
    except LogReadError as e:
        return _fail(str(e).splitlines()[0] if str(e) else "cannot read input")
    except MemoryError:
        return _fail(f"cannot read {path!r}: it does not fit in memory")
    except OSError as e:
        return _fail(f"cannot read {path!r}: {e.strerror or type(e).__name__}")
    finally:
        if bar is not None:
            bar.close()
    if not analysis.cluster.recognised():
        return _fail(analysis.cluster.unmapped_message(path))
    if args.html:
        from .sweep import record_of

        code = _write_fleet_page(args.html, [record_of(analysis, path)])
        if code:
            return code
    out = render_json(analysis) if args.format == "json" else render_text(analysis)
    print(out)  # render_text escapes what came from the log; JSON escapes control characters itself
    verdict = analysis.verdict()
    if args.fail_on and SEVERITY_RANK[verdict] >= SEVERITY_RANK[args.fail_on]:
        return EXIT_FAIL_ON
    return EXIT_OK


FILTERS = ("state", "tag", "name")


def _parse_filters(items: list[str] | None) -> tuple[dict[str, str], str | None]:
    """``--filter state=finished --filter tag=baseline --filter name=grpo`` as a mapping, or a one-line problem."""
    out: dict[str, str] = {}
    for item in items or []:
        field_, sep, value = item.partition("=")
        field_ = field_.strip().lower()
        if not sep or field_ not in FILTERS or not value.strip():
            return {}, (f"--filter {item!r}: expected state=STATE, tag=TAG or name=TEXT (which runs of a "
                        "wandb:/mlflow:/trackio: project to read)")
        if field_ in out and out[field_] != value.strip():  # it kept the last one silently: a sweep of other runs
            return {}, (f"--filter {field_}= is given twice ({out[field_]!r} and {value.strip()!r}); each field "
                        "takes one value: give one, or sweep once per value")
        out[field_] = value.strip()
    return out, None


def _parse_map(items: list[str] | None) -> tuple[dict[str, object] | None, str | None]:
    """``--map ROLE=KEY`` options as a mapping (``gold`` may repeat), or a one-line problem saying the fix."""
    from .core.keymap import ALL_ROLES, GOLD_ROLE, canonical_role, check_keys

    keys: dict[str, object] = {}
    gold: list[str] = []
    for item in items or []:
        role, sep, key = item.partition("=")
        if not sep or not key.strip():
            return None, (f"--map {item!r}: expected QUANTITY=KEY, e.g. --map reward=reward/mean "
                          f"(quantities: {', '.join(ALL_ROLES)})")
        r = canonical_role(role) or role.strip()
        if r == GOLD_ROLE:
            gold.append(key.strip())
            keys[r] = gold
        else:
            keys[r] = key.strip()  # a later --map for the same quantity wins
    _, problems = check_keys(keys, "--map")
    return (keys or None), (problems[0] if problems else None)


def _analyze_sweep(args: argparse.Namespace, trainer: str | None, gold: list[str],
                   keys: dict[str, object] | None) -> int:
    """Every run under the folders and globs given, in parallel, ranked worst first (``sweep.py``)."""
    import time

    from .analyze import _use_color
    from .sweep import (
        RENDERERS,
        SweepOptions,
        analyze_sweep,
        default_jobs,
        discover,
        rank,
        render_table_text,
        use_progress,
        worst_verdict,
    )

    paths, problems = discover(args.path, _parse_filters(args.filter)[0])
    if not paths:
        if problems:
            return _fail(problems[0].reason)
        return _fail(f"no training logs found in {', '.join(repr(p) for p in args.path)} (trainer_state.json, "
                     "JSON Lines, printed logs, CSV, W&B run folders)")
    options = SweepOptions(trainer=trainer, alerts=args.alerts, gold=tuple(gold), warn_sooner=args.warn_sooner,
                           framework=args.framework, keys=keys)
    jobs = max(1, min(args.jobs or default_jobs(), len(paths)))
    start = time.perf_counter()
    records = rank([*analyze_sweep(paths, options, jobs=jobs, progress=use_progress(args.progress)), *problems])
    elapsed = time.perf_counter() - start
    if args.html:
        code = _write_fleet_page(args.html, records)
        if code:
            return code
    if args.format == "text":
        print(render_table_text(records, color=_use_color(sys.stdout), elapsed=elapsed, jobs=jobs))
    else:
        print(RENDERERS[args.format](records))
    if all(r.verdict == "error" for r in records):
        return _fail(f"none of the {len(records)} run(s) could be read (see the table for each reason)")
    if args.fail_on and SEVERITY_RANK[worst_verdict(records)] >= SEVERITY_RANK[args.fail_on]:
        return EXIT_FAIL_ON
    return EXIT_OK


def _write_fleet_page(path: str, records: Sequence[RunRecord]) -> int:
    from pathlib import Path

    from .fleet import build_fleet_page

    try:
        Path(path).write_text(build_fleet_page(records), encoding="utf-8")
    except OSError as e:
        return _fail(f"cannot write {path!r}: {e.strerror or e}")
    _say(f"wrote the fleet page ({len(records)} run(s)) to {path}", sys.stderr)
    return EXIT_OK


def _load_alerts(path: str | None) -> tuple[AlertConfig | None, int]:
    """(AlertConfig or None, exit code): prints every problem as FILE:LINE: message."""
    from .alerts import ConfigError, load_config

    try:
        config = load_config(path)
    except ConfigError as e:
        for p in e.problems:
            _say(p, sys.stderr)
        return None, EXIT_BAD_INPUT
    for w in config.warnings:
        _say(w, sys.stderr)
    return config, EXIT_OK


def _cmd_watch(args: argparse.Namespace) -> int:
    from .readers.wandb import WandbReadError
    from .sidecar import watch_path

    alerts = None
    if args.alerts:
        alerts, code = _load_alerts(args.alerts)
        if alerts is None:
            return code
    keys, problem = _parse_map(args.map)
    if problem:
        return _fail(problem)
    try:
        result = watch_path(args.run, framework=args.framework, alerts=alerts, journal=args.journal,
                            interval=args.interval, idle_timeout=args.idle_timeout, wait=args.wait,
                            warn_sooner=args.warn_sooner, keys=keys)
    except (WandbReadError, LogReadError) as e:
        return _fail(str(e).splitlines()[0])
    if args.fail_on and SEVERITY_RANK[result.verdict] >= SEVERITY_RANK[args.fail_on]:
        return EXIT_FAIL_ON
    return EXIT_OK


def _cmd_alerts_validate(args: argparse.Namespace) -> int:
    config, code = _load_alerts(args.file)
    if config is None:
        return code
    rules = config.rules
    by_sev: dict[str, int] = {}
    for r in rules:
        by_sev[r.severity] = by_sev.get(r.severity, 0) + 1
    _say(f"{args.file}: OK — {len(rules)} rules ({', '.join(f'{n} {s}' for s, n in sorted(by_sev.items()))}), "
          f"{len(config.channels)} channels; from {' + '.join(config.sources)}")
    return 0


def _cmd_alerts_test(args: argparse.Namespace) -> int:
    """Send one test alert through each configured channel, synchronously, and report each result.

    Exit 2 when any channel fails: a channel that cannot deliver is a configuration to fix."""
    from .alerts.channels import AlertMessage
    from .alerts.notify import build_channels

    config, code = _load_alerts(args.file)
    if config is None:
        return code
    if not config.channels:
        _say(f"{args.file}: no channels configured (add a 'channels:' section); W&B alerts need no test")
        return EXIT_OK
    channels, problems = build_channels(config)
    failed = len(problems)
    for p in problems:
        _say(f"FAIL  {p}", sys.stderr)
    msg = AlertMessage(title="rlcluster test alert", text="If you can read this, this channel works.",
                       severity="info", rule="test", gauge="kl", step=0)
    for ch in channels:
        try:
            ch.send(msg)
            _say(f"OK    {ch.name}")
        except Exception as e:  # noqa: BLE001 - report, never traceback
            failed += 1
            text = ch.redact(str(e)) if hasattr(ch, "redact") else str(e)  # channel errors are redacted already
            _say(f"FAIL  {ch.name}: {text}", sys.stderr)
    return EXIT_BAD_INPUT if failed else EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    """Build the fourteen-gauge W&B report: --out writes its spec offline, --save saves it to W&B."""
    import os
    from pathlib import Path

    from .layouts import LAYOUT_NAMES
    from .report import build_report, report_spec

    try:
        trainer = args.trainer.lower() if args.trainer.lower() in LAYOUT_NAMES else canonical_family(args.trainer)
    except ValueError as e:
        return _fail(f"{e} (layouts: {', '.join(LAYOUT_NAMES)})")
    if args.title is not None and not 0 < len(args.title) <= REPORT_TITLE_MAX:
        return _fail(f"--title is {len(args.title)} characters long; W&B report titles are 1-{REPORT_TITLE_MAX}")
    alerts = None
    if args.alerts:
        alerts, code = _load_alerts(args.alerts)
        if alerts is None:
            return code
    if args.save and not (os.environ.get("WANDB_API_KEY") or _netrc_has_key()):
        return _fail("--save needs a W&B API key: set WANDB_API_KEY or run `wandb login` (or use --out FILE)")
    try:
        report = build_report(args.entity, args.project, trainer, runs=args.runs, alerts=alerts, title=args.title)
    except Exception as e:  # noqa: BLE001 - a one-line reason, never a traceback
        return _fail(f"cannot build the report: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if args.out:
        try:
            Path(args.out).write_text(report_spec(report), encoding="utf-8")
        except OSError as e:
            return _fail(f"cannot write {args.out!r}: {e.strerror or e}")
        _say(f"wrote the report spec ({trainer} layout, {args.entity}/{args.project}) to {args.out}")
        _say(f"save it with: rlcluster report --entity {args.entity} --project {args.project} "
             f"--trainer {trainer} --save")
        return 0
    try:
        report.save()
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return _fail(f"could not save the report to W&B: {msg}")
    _say(report.url)
    return 0


def _cmd_automations_export(args: argparse.Namespace) -> int:
    """Map the rules W&B can evaluate itself to W&B Automations (see automations.py)."""
    import os
    import re

    from .automations import ExportError, export, plan, render_inputs, render_plan, render_unmapped

    if args.json and not args.dry_run:
        return _fail("--json prints the GraphQL inputs of a dry run: add --dry-run (without it, export creates the "
                     "automations in W&B)")
    if args.run_name is not None:
        try:
            re.compile(args.run_name)
        except re.error as e:
            return _fail(f"--run-name {args.run_name!r} is not a regular expression ({e}); e.g. --run-name '^grpo-'")
    config, code = _load_alerts(args.file)
    if config is None:
        return code
    planned, unmapped = plan(config, args.project, args.run_name)
    target = (f"the generic webhook {args.webhook!r}" if args.webhook else
              f"the Slack integration posting to {args.slack_channel!r}" if args.slack_channel else
              f"the first Slack integration of {args.entity!r}")
    if args.dry_run:
        text = (render_inputs(planned, args.project, bool(args.webhook)) if args.json else
                render_plan(planned, unmapped, args.entity, args.project, target))
        for line in text.splitlines():  # rule names and texts come from a file: escaped like every output
            _say(line)
        return 0
    if not (os.environ.get("WANDB_API_KEY") or _netrc_has_key()):
        return _fail("creating automations needs a W&B API key: set WANDB_API_KEY or run `wandb login` "
                     "(or use --dry-run)")
    try:
        created = export(planned, args.entity, args.project, slack_channel=args.slack_channel, webhook=args.webhook,
                         echo=_say)
    except ExportError as e:
        return _fail(str(e))
    except Exception as e:  # noqa: BLE001 - a one-line reason, never a traceback
        return _fail(f"could not reach W&B: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    for line in render_unmapped(unmapped):
        _say(line)
    _say(f"{len(created)} automation(s) created in {args.entity}/{args.project}, notifying {target}; "
         f"{len(unmapped)} rule(s) cannot map and stay with the callback")
    return 0


def _netrc_has_key() -> bool:
    import netrc
    import os

    try:
        n = netrc.netrc(os.path.expanduser("~/.netrc"))
    except (OSError, netrc.NetrcParseError):
        return False
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0]
    return n.authenticators(host) is not None


def _cmd_dashboard(args: argparse.Namespace) -> int:
    """Write a self-contained HTML dashboard of each run given (a shell glob such as wandb/offline-run-*/ gives
    several: one page each, named after its run)."""
    trainer, alerts, code = _trainer_and_alerts(args)
    if code:
        return code
    runs = list(dict.fromkeys(args.run))
    outs = [args.out] if len(runs) == 1 else _dashboard_names(args.out, runs)
    worst = 0
    for run, out in zip(runs, outs, strict=True):
        worst = max(worst, _write_dashboard(run, out, trainer, alerts, args.warn_sooner))
    return worst


def _dashboard_names(out: str, runs: list[str]) -> list[str]:
    """One output file per run: ``dashboard.html`` becomes ``dashboard-<run>.html``, ``<run>`` the run's folder name
    (a W&B run) or file name; where two files share a name (``trainer_state.json``), their folders tell them apart."""
    from pathlib import Path

    base = Path(out)
    suffix = base.suffix or ".html"
    paths = [Path(r.rstrip("/\\")) for r in runs]
    stems = [p.name.removesuffix(".wandb") if p.is_dir() or p.suffix == ".wandb" else p.stem for p in paths]
    stems = [f"{p.parent.name}-{st}" if stems.count(st) > 1 else st for p, st in zip(paths, stems, strict=True)]
    names: list[str] = []
    for stem in stems:
        name, n = f"{base.stem}-{stem or 'run'}{suffix}", 2
        while str(base.with_name(name)) in names:
            name, n = f"{base.stem}-{stem or 'run'}-{n}{suffix}", n + 1
        names.append(str(base.with_name(name)))
    return names


def _write_dashboard(run: str, out: str, trainer: str | None, alerts: Any, warn_sooner: int | None) -> int:
    from pathlib import Path

    from .dashboard import build_dashboard

    try:
        page, analysis = build_dashboard(run, trainer, alerts, warn_sooner=warn_sooner)
    except LogReadError as e:
        return _fail(str(e).splitlines()[0] if str(e) else "cannot read input")
    except MemoryError:
        return _fail(f"cannot read {run!r}: it does not fit in memory")
    except OSError as e:
        return _fail(f"cannot read {run!r}: {e.strerror or type(e).__name__}")
    if not analysis.cluster.recognised():
        return _fail(f"{run!r} has no training metrics this tool knows: is it a trainer log?")
    try:
        Path(out).write_text(page, encoding="utf-8")
    except OSError as e:
        return _fail(f"cannot write {out!r}: {e.strerror or e}")
    fw = getattr(analysis.cluster, "framework", "trl")
    layout_name = fw if fw in ("verl", "openrlhf") else analysis.cluster.family
    _say(f"wrote {out} ({layout_name} layout, verdict {analysis.verdict()}); open it in a browser")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """A real TRL run on a tiny local model with the plugin attached (see demo.py)."""
    from .demo import print_summary, run_demo

    try:
        result = run_demo(args.out, args.trainer, args.pathology, args.steps, args.seed)
    except ValueError as e:
        return _fail(str(e))
    print_summary(result)
    return 0  # 1 means only "--fail-on reached"; a demo that ran is a success, whatever it caught


def _cmd_rules(args: argparse.Namespace) -> int:
    """The rule catalog: a table, JSON, one rule in full, or the manual's rule pages (``rules_reference.py``)."""
    from pathlib import Path

    from .alerts import ConfigError, load_config
    from .alerts.reference import render_alert_table
    from .rules_reference import render_json, render_table, rule_records, write_reference

    if args.markdown:
        try:
            written = write_reference(args.markdown)
        except OSError as e:
            return _fail(f"cannot write {args.markdown!r}: {e.strerror or e}")
        pages = sum(p.suffix == ".md" for p in written)
        _say(f"wrote {pages} pages in {args.markdown} and {len(written) - pages} pictures in "
             f"{Path(args.markdown) / 'img'}")
        return 0
    try:
        config = load_config(args.alerts)
    except ConfigError as e:
        return _fail(str(e))
    if args.rule:
        return _print_named_rule(args.rule, args.format, config)
    records = rule_records()
    if args.format == "json":
        sys.stdout.write(render_json(records))
    else:
        sys.stdout.write(render_table(records) + "\n" + render_alert_table(config))
    return 0


def _print_named_rule(name: str, fmt: str, config: Any) -> int:
    """``rlcluster rules NAME``: the gauge rule, the alert rule and the liveness alert of that name, each that exists
    (``kl-warn`` is both a gauge rule and a shipped alert rule: both are printed)."""
    from .alerts.reference import find_alert_rules, is_liveness, render_alert_rule_text, render_liveness_text
    from .rules_reference import closest, find_rules, render_json, render_rule_text, rule_records

    gauge_rules, alert_rules = find_rules(name), find_alert_rules(name, config)
    if not gauge_rules and not alert_rules and not is_liveness(name):
        near = closest(name, extra=[r.name for r in config.rules])
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        return _fail(f"no rule {clean_text(name, 60)!r}{hint} (every rule: rlcluster rules; an alert rule of your own "
                     "file: rlcluster rules NAME --alerts FILE)")
    if fmt == "json":
        ids = {r.id for r in gauge_rules}
        records = [{**x, "kind": "gauge rule"} for x in rule_records() if x["id"].split(":")[0] in ids]
        records += [{"kind": "alert rule", "name": r.name, "gauge": r.gauge, "severity": r.severity,
                     "when": r.when.text if r.when else None, "finding": r.finding, "for": r.for_,
                     "trainers": list(r.trainers), "title": r.title, "text": r.text} for r in alert_rules]
        sys.stdout.write(render_json(records))
        return 0
    parts = []
    if gauge_rules:
        parts.append(("Gauge rule (raised by a gauge: a finding)", render_rule_text(gauge_rules)))
    if alert_rules:
        parts.append(("Alert rule (alerts.yaml: what notifies you or stops training)",
                      render_alert_rule_text(alert_rules)))
    if is_liveness(name):
        parts.append(("Liveness alert", render_liveness_text(name)))
    for heading, text in parts:
        if len(parts) > 1:
            sys.stdout.write(f"== {heading}\n\n")
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


class _VersionAction(argparse.Action):
    """``--version``: the package's version and the core's build (read only when asked: it imports the core)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from .core.build import core_build

        try:
            v = version("wandb-rlcluster")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        print(f"rlcluster {v} (core: {core_build()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlcluster",
        description="Instrument cluster for RL / preference-optimisation training with TRL.",
    )
    parser.add_argument("--version", action=_VersionAction, help="the version, and whether the core is compiled")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser(
        "analyze",
        help="read a training log and report the gauges and findings",
        description="Read a trainer_state.json, a list of log rows, JSON Lines, a HF stdout log, a verl console "
        "log, a W&B history CSV export or a W&B offline run; print the gauge table and findings. Given folders, globs "
        "or several files: every run in them, analysed in parallel and ranked worst first (a sweep).",
    )
    a.add_argument("path", nargs="+", help="trainer_state.json, rows .json/.jsonl, stdout .log, W&B history .csv, "
                   "W&B run, TensorBoard event file or folder, wandb:ENTITY/PROJECT/RUN_ID, mlflow:EXPERIMENT/RUN_ID, "
                   "trackio:PROJECT/RUN; or folders / globs / projects of them (a sweep: one row per run)")
    a.add_argument("--format", choices=("text", "json", "csv", "md"), default="text",
                   help="output format (default: text); csv and md are the sweep table")
    a.add_argument("--html", metavar="FILE", help="also write the fleet page: a self-contained HTML table, one row "
                   "per run with sparklines of the gauges that fired, sortable by any column")
    a.add_argument("--filter", metavar="FIELD=VALUE", action="append",
                   help="which runs of a wandb:ENTITY/PROJECT, mlflow:EXPERIMENT or trackio:PROJECT to read: "
                        "state=finished|running|crashed|failed, tag=TAG, name=TEXT (in the run's name); "
                        "repeatable, one value per field")
    a.add_argument("--tracking-uri", metavar="URI",
                   help="the MLflow tracking URI of mlflow:EXPERIMENT/RUN_ID paths (default: $MLFLOW_TRACKING_URI)")
    a.add_argument("--jobs", "-j", metavar="N", type=int, default=None,
                   help="processes for a sweep (default: the cores this process may use)")
    a.add_argument("--progress", action="store_true",
                   help="a progress bar on stderr during a sweep, or while a large log is streamed, even when "
                        "stderr is not a terminal")
    a.add_argument("--trainer", "--family", dest="trainer",
                   help=f"trainer family instead of auto-detection: {', '.join(FAMILIES)}, rloo, cpo")
    a.add_argument("--map", metavar="QUANTITY=KEY", action="append",
                   help="which logged key is what, for a custom loop: reward=reward/g, gold=reward/f (a held-out score "
                        "the reward is judged against; repeatable), entropy=, kl=, length=, lr=, loss=, grad_norm=, "
                        "reward_std=, eval_loss=, step=. It always wins over the names the tool recognises, and over "
                        "the keys: section of the --alerts file")
    a.add_argument("--framework", choices=FRAMEWORKS,
                   help="whose metric names the log speaks, instead of auto-detection (verl: step:N console logs "
                        "or W&B runs; openrlhf: W&B runs with train/<key>)")
    a.add_argument(
        "--fail-on", choices=("warn", "stop"), help="exit 1 when the verdict (of any run, in a sweep) reaches this "
        "severity (CI gate)",
    )
    a.add_argument("--alerts", metavar="FILE", nargs="?", const="default",
                   help="also apply alert rules (a YAML file; no FILE: the shipped alerts.yaml); the verdict is "
                        "then the worst alert, as in the live run")
    a.add_argument("--gold", metavar="FN", action="append",
                   help="a held-out reward function logged as rewards/FN/mean (TRL: weight 0 in reward_weights); the "
                        "trained reward is then judged against it (proxy-gold gap, over-optimisation). Repeatable")
    a.add_argument("--warn-sooner", metavar="N", type=int, default=None, choices=range(WARN_SOONER_MAX + 1),
                   help=f"take N logged rows (0 to {WARN_SOONER_MAX}) off every warn rule's hold: earlier warnings, "
                        "and more false ones (the manual's How well it works page gives both); default: the "
                        "--alerts file's warn_sooner:, else 0")
    a.set_defaults(func=_cmd_analyze)

    al = sub.add_parser("alerts", help="check alert rules and channels")
    alsub = al.add_subparsers(dest="alerts_command", required=True)
    v = alsub.add_parser("validate", help="validate an alerts YAML: exit 0, or 2 with FILE:LINE: problem; fix")
    v.add_argument("file", help="the alerts YAML to check (merged over the shipped rules, as the callback does)")
    v.set_defaults(func=_cmd_alerts_validate)
    t = alsub.add_parser("test", help="send one test alert through each channel configured in FILE")
    t.add_argument("file", help="the alerts YAML whose channels: section names the channels to test")
    t.set_defaults(func=_cmd_alerts_test)

    au = sub.add_parser("automations", help="W&B-side rules: export the rules W&B can evaluate itself")
    ausub = au.add_subparsers(dest="automations_command", required=True)
    ae = ausub.add_parser(
        "export", help="create W&B Automations for the rules W&B can evaluate (a threshold held for a window, a "
        "z-score) and for runs that fail or crash; W&B Automations need a paid plan")
    ae.add_argument("file", help="alerts YAML (merged over the shipped rules, as in the callback)")
    ae.add_argument("--entity", required=True, help="the W&B entity (user or team) that owns the project")
    ae.add_argument("--project", required=True, help="the W&B project whose runs the automations watch")
    ae.add_argument("--dry-run", action="store_true", help="print what would be created: no network, no API key")
    ae.add_argument("--json", action="store_true", help="with --dry-run: one JSON line per automation, the GraphQL "
                    "input it would be created with (ids as placeholders)")
    ae.add_argument("--run-name", metavar="REGEX", help="only runs whose W&B display name matches REGEX (W&B filters "
                    "runs by name only: without this, a rule's trainers: scope cannot be kept)")
    dest_ae = ae.add_mutually_exclusive_group()
    dest_ae.add_argument("--slack-channel", metavar="NAME", help="the entity's Slack integration posting to this "
                         "channel (default: its first Slack integration)")
    dest_ae.add_argument("--webhook", metavar="NAME", help="a generic webhook integration of the entity instead")
    ae.set_defaults(func=_cmd_automations_export)

    r = sub.add_parser("report", help="build the fourteen-gauge W&B report for a project")
    r.add_argument("--entity", required=True, help="the W&B entity (user or team) that owns the project")
    r.add_argument("--project", required=True, help="the W&B project whose runs the report shows")
    r.add_argument("--trainer", default="grpo",
                   help="layout: grpo (rloo), dpo (kto, orpo), ppo (online_dpo), sft, verl, openrlhf (their own keys); "
                        "default: grpo")
    r.add_argument("--runs", help="W&B run search string for the report's runsets (default: all runs)")
    r.add_argument("--title", help="the report's title (default: rlcluster run health - <the layout's trainers>)")
    r.add_argument("--alerts", metavar="FILE", help="alert rules whose thresholds annotate the panels")
    dest = r.add_mutually_exclusive_group(required=True)
    dest.add_argument("--out", metavar="FILE", help="write the report spec (JSON) here: no network, no API key")
    dest.add_argument("--save", action="store_true", help="save the report to W&B and print its URL")
    r.set_defaults(func=_cmd_report)

    w = sub.add_parser(
        "watch",
        help="follow a live W&B run from another process (any framework): gauges, alerts, a live verdict",
        description="Follow a run's W&B transaction log (wandb/run-*/run-<id>.wandb; online runs write it too) as "
        "it grows; every logged row goes through the gauges and alert rules of the in-process callback; alerts are "
        "journaled beside the run (rlcluster-watch-alerts.jsonl) and sent to the alert file's channels. Ends when the "
        "run finishes. It never stops the training process: it says where the callback would have.",
    )
    w.add_argument("run", help="a run directory, its .wandb file, or a wandb directory (its newest run); or a "
                   "TensorBoard event file or the folder holding a run's event files")
    w.add_argument("--framework", choices=FRAMEWORKS, help="whose metric names the run logs (default: detected)")
    w.add_argument("--alerts", metavar="FILE", help="alert rules (default: the shipped alerts.yaml)")
    w.add_argument("--journal", metavar="FILE", help="alerts journal (default: <run dir>/rlcluster-watch-alerts.jsonl)")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between polls of the file (default 1)")
    w.add_argument("--idle-timeout", type=float, default=600.0,
                   help="end after this many seconds without a new byte and no exit record (default 600)")
    w.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a run to appear (default: 0, do "
                   "not wait)")
    w.add_argument("--warn-sooner", metavar="N", type=int, default=None, choices=range(WARN_SOONER_MAX + 1),
                   help="take N logged rows (0 to 3) off every warn rule's hold, as in `rlcluster analyze`; default: "
                        "the --alerts file's warn_sooner:, else 0")
    w.add_argument("--map", metavar="QUANTITY=KEY", action="append", help="as in `rlcluster analyze`: which logged "
                   "key is what, for a loop with its own names (reward=reward/g, gold=reward/f, ...)")
    w.add_argument("--fail-on", choices=("warn", "stop"), help="exit 1 when the verdict reaches this severity")
    w.set_defaults(func=_cmd_watch)

    db = sub.add_parser("dashboard", help="write a self-contained HTML dashboard of a run (no network to view)",
                        description="Write one self-contained HTML page per run: the report's panels as static "
                        "pictures, the gauge table, the findings and alerts. Given several runs (a shell glob such "
                        "as wandb/offline-run-*/), one page each, named after its run.")
    db.add_argument("run", nargs="+", help="a log `rlcluster analyze` reads (trainer_state.json, rows .json/.jsonl, "
                    "a stdout .log, a W&B history .csv) or a W&B offline run folder; several: one page each")
    db.add_argument("--out", default="dashboard.html", help="the output file (default: dashboard.html); with "
                    "several runs, each page is named after it: dashboard-<run folder>.html")
    db.add_argument("--trainer", help=f"trainer family instead of auto-detection: {', '.join(FAMILIES)}, rloo, cpo")
    db.add_argument("--alerts", metavar="FILE", help="alert rules to apply (default: the shipped alerts.yaml)")
    db.add_argument("--warn-sooner", metavar="N", type=int, default=None, choices=range(WARN_SOONER_MAX + 1),
                    help="as in `rlcluster analyze`: N logged rows off every warn hold (default: the alerts "
                         "file's warn_sooner:, else 0)")
    db.set_defaults(func=_cmd_dashboard)

    ru = sub.add_parser("rules", help="list every rule (gauge rules and alert rules), or print one in full",
                        description="The gauge rules (one entry per rule id the gauges can raise, thresholds read "
                        "from the gauges' defaults) and the alert rules of the shipped alerts.yaml. Every name a "
                        "finding or an alert prints can be looked up here.")
    ru.add_argument("rule", nargs="?", help="print this rule in full (e.g. kl-warn, length-warn, stall): what it "
                    "means, how it decides, what to do, how to change or silence it; a gauge rule, an alert rule or "
                    "a liveness alert, each kind the name has")
    ru.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    ru.add_argument("--alerts", metavar="FILE", help="also look NAME up among this file's alert rules, merged over "
                    "the shipped alerts.yaml as the callback merges them (default: the shipped rules only)")
    ru.add_argument("--markdown", metavar="DIR", nargs="?", const="docs/rules",
                    help="write the manual's rule pages into DIR instead of printing: one page per rule, an index, "
                         "the alert rules' page and the SVG pictures in DIR/img (default DIR: docs/rules, the "
                         "manual's source in a checkout)")
    ru.set_defaults(func=_cmd_rules)

    d = sub.add_parser(
        "demo",
        help="train a tiny local model with real TRL (CPU, W&B offline) and watch the plugin catch a failure",
    )
    d.add_argument("--out", default="demo-out", help="the folder for the W&B offline run, the alerts journal, the "
                   "report spec and the dashboard (default: demo-out, created in the current folder)")
    d.add_argument("--trainer", default="grpo", choices=("grpo", "dpo"), help="grpo: a GRPO run with a failure "
                   "caused on purpose (see --pathology); dpo: a healthy DPO run (default: grpo)")
    d.add_argument("--pathology", default=None, choices=("kl", "length", "entropy", "none"),
                   help="the GRPO failure to cause (default: kl runaway, which stops training); the DPO demo is a "
                   "healthy run (none)")
    d.add_argument("--steps", type=int, help="the run's max steps (default: enough for the chosen pathology to show "
                   "and be caught)")
    d.add_argument("--seed", type=int, default=0, help="the training seed (the trainer's seed: data order, sampling) "
                   "and the noisy reward's, so a run repeats (default: 0)")
    d.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        return _fail("out of memory (is the input far larger than a training log?)")
    except Exception as e:
        if os.environ.get("RLCLUSTER_DEBUG"):
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        return _fail(f"unexpected {type(e).__name__}: {first} (a bug: please report it; RLCLUSTER_DEBUG=1 shows "
                     "where)")


if __name__ == "__main__":
    sys.exit(main())
