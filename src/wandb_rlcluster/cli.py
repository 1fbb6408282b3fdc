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
    if not analysis.cluster.recognised():
        return _fail(f"{args.path!r} has no training metrics this tool knows (loss, grad_norm, reward, kl, "
                     "rewards/margins, ...): is it a trainer log?")
    out = render_json(analysis) if args.format == "json" else render_text(analysis)
    print(out)
    verdict = analysis.cluster.verdict()
    if args.fail_on and SEVERITY_LEVEL[verdict] >= SEVERITY_LEVEL[args.fail_on]:
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """Write a generated GRPO log with a known pathology and analyse it, as a user would."""
    import json
    from pathlib import Path

    from .analyze import analyze_path, render_text
    from .synthetic import generate_run

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = generate_run("grpo_kl", args.pathology, n_steps=args.steps, seed=args.seed, onset=0.5)
    path = out / "trainer_state.json"
    path.write_text(json.dumps({"global_step": args.steps, "max_steps": args.steps, "log_history": run.rows},
                               indent=1))
    print(f"Generated a {args.steps}-step GRPO log (beta > 0) with pathology '{args.pathology}' starting at step "
          f"{run.onset_step}: {path}\n")
    analysis = analyze_path(str(path))
    print(render_text(analysis))
    caught = [f for f in analysis.cluster.findings
              if f.severity != "info" and f.gauge in run.expected_gauges and f.step >= run.onset_step]
    print()
    if caught:
        first = min(caught, key=lambda f: f.step)
        print(f"Caught: {first.gauge}/{first.rule} at step {first.step}, "
              f"{first.step - run.onset_step} steps after the pathology began.")
    else:
        print(f"Not caught: no {'/'.join(run.expected_gauges)} alarm after step {run.onset_step}.")
    print("Try it on your own run:  rlcluster analyze path/to/checkpoint-N/trainer_state.json")
    return 0 if caught else 1


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

    d = sub.add_parser(
        "demo",
        help="analyse a generated GRPO log with a known pathology (no account, no GPU, no network)",
    )
    d.add_argument("--out", default="demo-out", help="directory for the generated log (default: demo-out)")
    d.add_argument("--pathology", default="kl_runaway",
                   choices=("kl_runaway", "reward_hacking", "entropy_collapse", "length_explosion",
                            "reward_std_collapse", "truncation", "nan", "dead_run"))
    d.add_argument("--steps", type=int, default=400)
    d.add_argument("--seed", type=int, default=0)
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


if __name__ == "__main__":
    sys.exit(main())
