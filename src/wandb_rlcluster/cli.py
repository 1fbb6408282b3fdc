"""The ``rlcluster`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .core.keys import FAMILIES, canonical_family
from .core.readers import LogReadError

SEVERITY_LEVEL = {"ok": 0, "warn": 1, "stop": 2}


def _fail(msg: str) -> int:
    print(f"rlcluster: {msg}" if not msg.startswith("rlcluster:") else msg, file=sys.stderr)
    return 2


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .analyze import analyze_path, render_json, render_text

    try:
        trainer = canonical_family(args.trainer) if args.trainer else None
    except ValueError as e:
        return _fail(str(e))
    try:
        analysis = analyze_path(args.path, trainer)
    except LogReadError as e:
        return _fail(str(e).splitlines()[0] if str(e) else "cannot read input")
    except (OSError, MemoryError) as e:
        return _fail(f"cannot read {args.path!r}: {e}")
    if analysis.cluster.rows == 0:
        return _fail(f"{args.path!r} holds no usable log rows (no numeric values)")
    out = render_json(analysis) if args.format == "json" else render_text(analysis)
    print(out)
    verdict = analysis.cluster.verdict()
    if args.fail_on and SEVERITY_LEVEL[verdict] >= SEVERITY_LEVEL[args.fail_on]:
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlcluster",
        description="Instrument cluster for RL / preference-optimisation training with TRL.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser(
        "analyze",
        help="read a training log and report the gauges and findings",
        description="Read a trainer_state.json, a list of log rows, JSON Lines, a HF stdout log or a W&B "
        "history CSV export; print the gauge table and findings.",
    )
    a.add_argument("path", help="trainer_state.json, rows .json/.jsonl, stdout .log, or W&B history .csv")
    a.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    a.add_argument("--trainer", help=f"trainer family instead of auto-detection: {', '.join(FAMILIES)}, rloo, cpo")
    a.add_argument(
        "--fail-on", choices=("warn", "stop"), help="exit 1 when the verdict reaches this severity (CI gate)",
    )
    a.set_defaults(func=_cmd_analyze)
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


if __name__ == "__main__":
    sys.exit(main())
