"""Benchmark: RLClusterCallback's overhead on a real (tiny) TRL GRPO run.

The same GRPO training (tiny local Llama, CPU, W&B offline, logging every step)
runs without the callback, with it (defaults: stall watchdog, crash hooks and
guardian on), with it but its liveness alerts off, and with it attached to the
trainer (``cb.attach(trainer)``: rollout statistics every step), alternated in one
process, several times; the figures are the median wall-time ratios, the callback's
own cost per ``on_log`` call, the rollout statistics' cost per step (and, on a
synthetic batch, for 64 completions of 512 tokens), and the watchdog's per-step cost
on the training thread. Not a test: it prints figures for the README.

    python benchmarks/bench_callback.py --steps 100 --repeat 5
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_DISABLE_GIT", "true")
os.environ.setdefault("WANDB_CONSOLE", "off")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kind", default="grpo_kl")
    args = ap.parse_args()

    import wandb
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.tiny import make_trainer

    class StepClock(TrainerCallback):
        """First in the list: the wall clock at each step's end, so steady steps can be told from the run's fixed
        costs (imports, the guardian's start, W&B's first write, the end-of-run summary and report)."""

        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, *args: object, **kwargs: object) -> None:
            self.ends.append(time.perf_counter())

    tmp = tempfile.mkdtemp(prefix="rlcluster-bench-")
    os.environ["WANDB_DIR"] = tmp
    times: dict[str, list[float]] = {"none": [], "on": [], "off": [], "attach": []}
    steady: dict[str, list[float]] = {"none": [], "on": [], "off": [], "attach": []}  # median step after warm-up
    per_log_us: list[float] = []
    attach_log_us: list[float] = []
    rollout_us: list[float] = []
    callbacks_seen: list[RLClusterCallback] = []
    plan = ["none", "on", "off", "attach"] * args.repeat
    off = {"stall_alert": False, "crash_alert": False, "guardian": False}
    make_trainer(args.kind, output_dir=f"{tmp}/warm", max_steps=2).train()  # warm-up: imports, allocator
    for i, mode in enumerate(tqdm(plan, desc="alternating runs", unit="run")):
        with_cb = mode != "none"
        cbs = [RLClusterCallback(**(off if mode == "off" else {}))] if with_cb else []
        clock = StepClock()
        trainer = make_trainer(args.kind, output_dir=f"{tmp}/run{i}", callbacks=[clock, *cbs], report_to="wandb",
                               max_steps=args.steps, seed=0, run_name=f"bench-{i}-{with_cb}")
        if mode == "attach":
            cbs[0].attach(trainer)
        t0 = time.perf_counter()
        trainer.train()
        times[mode].append(time.perf_counter() - t0)
        gaps = [b - a for a, b in zip(clock.ends[10:], clock.ends[11:], strict=False)]
        steady[mode].append(statistics.median(gaps) if gaps else float("nan"))
        wandb.finish()
        if with_cb:
            cb = cbs[0]
            callbacks_seen.append(cb)
            if mode == "attach":
                rollout_us.append(cb.rollout_seconds / max(1, cb.rollout_calls) * 1e6)
                attach_log_us.append(cb.on_log_seconds / max(1, cb.on_log_calls) * 1e6)
            elif mode == "on":
                per_log_us.append(cb.on_log_seconds / max(1, cb.on_log_calls) * 1e6)
    base, ours = statistics.median(times["none"]), statistics.median(times["on"])
    ratios = [b / a for a, b in zip(times["none"], times["on"], strict=True)]
    quiet = statistics.median(times["off"])
    live_ratios = [b / a for a, b in zip(times["off"], times["on"], strict=True)]
    print(f"{args.kind}, {args.steps} steps, logging every step, {args.repeat} alternated pairs (tiny Llama on CPU)")
    print(f"  without callback: median {base:.2f} s  ({base / args.steps * 1e3:.1f} ms/step)")
    print(f"  with callback:    median {ours:.2f} s  ({ours / args.steps * 1e3:.1f} ms/step)")
    print(f"  ratio with/without: median of pairs {statistics.median(ratios):.3f}  "
          f"(ratio of medians {ours / base:.3f})")
    step_ratios = [b / a for a, b in zip(steady["none"], steady["on"], strict=True)]
    print(f"  per step, after 10 warm-up steps (the median step of each run): without "
          f"{statistics.median(steady['none']) * 1e3:.1f} ms, with {statistics.median(steady['on']) * 1e3:.1f} ms; "
          f"ratio median of pairs {statistics.median(step_ratios):.3f} (pairs "
          f"{', '.join(f'{r:.3f}' for r in step_ratios)}); the rest of the whole-run ratio is the run's fixed cost")
    fixed = [(b - sb * args.steps) - (a - sa * args.steps) for a, b, sa, sb in
             zip(times["none"], times["on"], steady["none"], steady["on"], strict=True)]
    print(f"  fixed cost per train() (whole run minus steps x median step, with minus without): median "
          f"{statistics.median(fixed) * 1e3:.0f} ms")
    print(f"  callback on_log cost (core + W&B log call): median {statistics.median(per_log_us):.0f} µs per call")
    print(f"  callback errors: {sum(cb.errors for cb in callbacks_seen)}")
    print(f"  with callback, liveness alerts off: median {quiet:.2f} s  ({quiet / args.steps * 1e3:.1f} ms/step)")
    print(f"  watchdog + crash hooks + guardian on/off: median of pairs {statistics.median(live_ratios):.3f}  "
          f"(ratio of medians {ours / quiet:.3f})")
    attached = statistics.median(times["attach"])
    attach_ratios = [b / a for a, b in zip(times["none"], times["attach"], strict=True)]
    vs_cb = [b / a for a, b in zip(times["on"], times["attach"], strict=True)]
    print(f"  with callback + attach(trainer): median {attached:.2f} s  ({attached / args.steps * 1e3:.1f} ms/step)")
    print(f"  ratio attach/without: median of pairs {statistics.median(attach_ratios):.3f}  (ratio of medians "
          f"{attached / base:.3f}; pairs {', '.join(f'{r:.3f}' for r in attach_ratios)})")
    print(f"  ratio attach/plain callback: median of pairs {statistics.median(vs_cb):.3f}  (ratio of medians "
          f"{attached / ours:.3f})")
    print(f"  rollout statistics in the run ({args.kind}: its 4 completions of <= 8 tokens a step): median "
          f"{statistics.median(rollout_us):.0f} µs per step")
    extra = statistics.median(attach_log_us) - statistics.median(per_log_us)
    print(f"  callback on_log cost with attach: median {statistics.median(attach_log_us):.0f} µs per call, "
          f"{extra:+.0f} µs vs without (rollout statistics + their W&B keys): {extra / (ours / args.steps * 1e6):.2%} "
          f"of a {ours / args.steps * 1e3:.1f} ms step, a ratio of {1 + extra / (ours / args.steps * 1e6):.4f}")
    spread = max(times["none"]) / min(times["none"])
    print(f"  noise: the same no-callback run took {min(times['none']):.2f}-{max(times['none']):.2f} s "
          f"(max/min {spread:.2f})")
    ms, evidence_ms = _rollout_stats_ms()
    print(f"  rollout statistics for 64 completions of 512 tokens (8 groups of 8, 2 reward functions): median "
          f"{ms:.2f} ms per step; the examples for one alert {evidence_ms:.3f} ms")
    on, off_ns = _liveness_hook_ns(tmp)
    print(f"  liveness cost on the training thread, through the callback's per-step hooks: {on - off_ns:.0f} ns "
          f"per step ({on:.0f} ns with the watchdog thread and guardian running, {off_ns:.0f} ns with them off)")


def _rollout_stats_ms(n: int = 64, tokens: int = 512, group: int = 8, repeat: int = 51) -> tuple[float, float]:
    """Median ms of RolloutStats.update on a synthetic batch of n completions of ~``tokens`` tokens of prose."""
    import random

    from wandb_rlcluster.core.rollouts import RolloutBatch, RolloutStats

    rng = random.Random(0)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    words = int(tokens * 0.78)  # ~1.3 tokens per English word
    comps = [" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(n)]
    batch = RolloutBatch(step=1, prompts=[f"prompt {i // group}" for i in range(n)], completions=comps,
                         rewards={"accuracy": [float(rng.random() > 0.5) for _ in range(n)],
                                  "judge": [rng.random() for _ in range(n)]},
                         advantages=[rng.gauss(0, 1) for _ in range(n)], lengths=[float(tokens)] * n,
                         eos=[True] * n, group_size=group)
    stats = RolloutStats()
    times, ev = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        stats.update(batch)
        t1 = time.perf_counter()
        stats.evidence("repetitive")
        times.append(t1 - t0)
        ev.append(time.perf_counter() - t1)
    return statistics.median(times) * 1e3, statistics.median(ev) * 1e3


def _liveness_hook_ns(tmp: str, n: int = 100_000) -> tuple[float, float]:
    """ns per step of the hooks a step calls (step begin, pre-optimizer, optimizer, step end), liveness on vs off."""
    from transformers import TrainerControl, TrainerState

    from wandb_rlcluster import RLClusterCallback

    out = []
    for on in (True, False):
        cb = RLClusterCallback(grad_every=0, lora_every=0, attention_every=0, sample_every=0, stall_alert=on,
                               crash_alert=False, guardian=on)
        state, control = TrainerState(), TrainerControl()
        if on:  # watchdog thread and guardian process running; no Trainer.train on this stack: mute that warning
            logging.getLogger("wandb_rlcluster").setLevel(logging.ERROR)
            cb.liveness.start(f"{tmp}/hooks", None, {})
            logging.getLogger("wandb_rlcluster").setLevel(logging.NOTSET)
        t0 = time.perf_counter()
        for i in range(n):
            state.global_step = i
            cb.on_step_begin(None, state, control)
            cb.on_pre_optimizer_step(None, state, control)
            cb.on_optimizer_step(None, state, control)
            cb.on_step_end(None, state, control)
        out.append((time.perf_counter() - t0) / n * 1e9)
        if on:
            cb.liveness.end()
    return out[0], out[1]


if __name__ == "__main__":
    main()
