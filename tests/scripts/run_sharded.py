"""One tiny SFT run under DDP, FSDP2, DeepSpeed ZeRO-2 or ZeRO-3 (2 CPU processes, gloo), with RLClusterCallback and a
reference that measures the FULL per-layer gradient norms collectively; writes result-rank<r>.json.

    torchrun --nproc_per_node 2 tests/scripts/run_sharded.py --engine fsdp2 --out /tmp/x

FSDP2 on CPU: accelerate switches to FSDP only for GPU-like devices; on CPU it silently falls back to DDP. The
test-only patch below (never in the package) makes the accelerator state FSDP when the Trainer asks for FSDP, so the
Trainer builds a real FSDP2 model (DTensor parameters and gradients, Shard(0)). The run records the evidence.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before anything imports deepspeed
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import TrainerCallback

LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


def patch_accelerate_fsdp_on_cpu() -> None:
    """Test-only: let accelerate build FSDP2 on CPU (gloo) when an FSDP plugin is given."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        plugin = kwargs.get("fsdp_plugin")
        if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = plugin

    AcceleratorState.__init__ = init


def ds_config(stage: int) -> dict:
    return {"zero_optimization": {"stage": stage, "overlap_comm": False, "contiguous_gradients": True,
                                  **({"stage3_gather_16bit_weights_on_model_save": True} if stage == 3 else {})},
            "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "train_batch_size": "auto", "bf16": {"enabled": False},
            "fp16": {"enabled": False}, "zero_allow_untested_optimizer": True}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("ddp", "fsdp2", "zero0", "zero1", "zero2", "zero3"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--every", type=int, default=2, help="grad_every (and the forward probes' cadence)")
    ap.add_argument("--probes", type=int, default=0, help="attention_every and sample_every (0: off)")
    ap.add_argument("--rank-alerts", default="{}", help="JSON {rank: alerts YAML} for that rank only")
    ap.add_argument("--no-callback", action="store_true", help="no RLClusterCallback (benchmark baseline)")
    ap.add_argument("--no-reference", action="store_true", help="no reference gradient measurement")
    ap.add_argument("--report", default="wandb")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--fault-rank1", action="store_true",
                    help="rank 1 fails to read its gradient slice (the reduction must still be entered on both ranks)")
    ap.add_argument("--save-steps", type=int, default=0, help="also save every N steps (0: only a stop's save)")
    ap.add_argument("--fsdp-state-dict", default="SHARDED_STATE_DICT",
                    help="FSDP2 checkpoints: SHARDED_STATE_DICT (each rank its shards) or FULL_STATE_DICT")
    a = ap.parse_args()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    for k, v in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(out)), ("WANDB_SILENT", "true"),
                 ("WANDB_DISABLE_GIT", "true"), ("WANDB_CONSOLE", "off"), ("WANDB_PROJECT", "rlcluster-tests")):
        os.environ.setdefault(k, v)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    log_path = out / f"rlcluster-rank{rank}.log"
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logging.getLogger("wandb_rlcluster").addHandler(handler)

    import torch
    import torch.distributed as dist
    from trl import SFTConfig, SFTTrainer

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.tiny import build_model, build_tokenizer, make_dataset

    torch.set_num_threads(1)
    if a.fault_rank1 and rank == 1:
        from wandb_rlcluster.trainer import sharded_grads

        def broken(self, name, grad, weight=1.0):
            raise RuntimeError("injected: this rank cannot read its gradient slice")

        sharded_grads.GradientSums.add = broken
    if a.engine == "fsdp2":
        patch_accelerate_fsdp_on_cpu()
    if a.engine == "zero3":
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")  # before the model: zero.Init must see both processes

    engine_args: dict = {}
    if a.engine == "fsdp2":
        engine_args = {"fsdp": "full_shard", "fsdp_config": {"version": 2,
                                                             "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"],
                                                             "state_dict_type": a.fsdp_state_dict}}
    elif a.engine.startswith("zero"):
        engine_args = {"deepspeed": ds_config(int(a.engine[-1]))}
    config = SFTConfig(output_dir=str(out / "trainer"), max_steps=a.max_steps, per_device_train_batch_size=2,
                       gradient_accumulation_steps=a.grad_accum, learning_rate=1e-3, logging_steps=1,
                       save_strategy="steps" if a.save_steps else "no", save_steps=a.save_steps or 500,
                       report_to=a.report, run_name=f"sharded-{a.engine}", seed=0, use_cpu=True,
                       bf16=False, fp16=False, disable_tqdm=True, dataloader_num_workers=0, max_length=64,
                       max_grad_norm=1.0, ddp_find_unused_parameters=False, **engine_args)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden=a.hidden, layers=a.layers)  # after the config: ZeRO-3's zero.Init

    callbacks: list = []
    cb = None
    if not a.no_callback:
        alerts = json.loads(a.rank_alerts).get(str(rank))
        cb = RLClusterCallback(alerts=alerts, grad_every=a.every, attention_every=a.probes, sample_every=a.probes,
                               lora_every=0, wandb_min_interval=0.0, stall_alert=False, crash_alert=False,
                               guardian=False)
        callbacks.append(cb)
    ref = Reference()
    if not a.no_reference:
        callbacks.append(ref)
    clock = StepClock()
    callbacks.append(clock)
    trainer = SFTTrainer(model=model, args=config, processing_class=tokenizer, train_dataset=make_dataset("sft", 16),
                         callbacks=callbacks)
    ref.trainer = trainer
    t0 = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - t0

    import wandb

    run = wandb.run
    run_dir = str(Path(run.dir).parent) if run is not None else None
    summary = {k: v for k, v in dict(run.summary).items() if k.startswith("rlcluster/")} if run is not None else {}
    if run is not None:
        wandb.finish()
    ckpts = sorted(str(p.relative_to(out)) for p in (out / "trainer").rglob("*") if p.is_file()
                   and "checkpoint-" in str(p))
    result = {
        "rank": rank, "world_size": dist.get_world_size() if dist.is_initialized() else 1, "engine": a.engine,
        "global_step": trainer.state.global_step, "train_seconds": train_seconds, "run_dir": run_dir,
        "stopped_at": cb.stopped_at if cb else None,
        "stop_finding": cb.stop_finding.to_dict() if cb and cb.stop_finding else None,
        "errors": cb.errors if cb else 0, "summary": summary,
        "gauge_table": cb.cluster.summary()["gauges"] if cb else {},
        "log": log_path.read_text(), "checkpoint_files": ckpts,
        "step_times": clock.times, "grad_calls": cb.gradients.grads.calls if cb and cb.gradients.grads else 0,
        "grad_seconds": cb.gradients.grads.seconds if cb and cb.gradients.grads else 0.0,
        "on_log_seconds": cb.on_log_seconds if cb else 0.0,
        "reference": ref.norms, "grad_norm": ref.grad_norm, "sharding": ref.sharding,
    }
    (out / f"result-rank{rank}.json").write_text(json.dumps(result, indent=1, default=str))


class StepClock(TrainerCallback):
    """When each optimizer step ended (the benchmark's steady-state time leaves startup and W&B setup out)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter())


class Reference(TrainerCallback):
    """Full per-layer gradient norms at every optimizer step, gathered collectively (every rank, same step): the full
    gradient tensors (FSDP2: ``full_tensor()``; ZeRO: DeepSpeed's ``safe_get_full_grad``), independent of the
    callback's local-sums path. Keys are the step the Trainer logs them at (global_step + 1)."""

    def __init__(self) -> None:
        self.trainer = None
        self.norms: dict[int, dict[str, float]] = {}
        self.grad_norm: dict[int, float] = {}
        self.sharding: dict = {}
        self._zero_step = None

    def _record(self, named_grads, step: int) -> None:
        layers: dict[int, float] = {}
        total = 0.0
        for name, g in named_grads:
            sq = float(g.double().pow(2).sum())
            total += sq
            m = LAYER_RE.search(name)
            if m:
                layers[int(m.group(1))] = layers.get(int(m.group(1)), 0.0) + sq
        out = {f"layer_{i:02d}_norm": math.sqrt(v) for i, v in sorted(layers.items())}
        out["measured_norm"] = math.sqrt(total)
        self.norms[step] = out

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        trainer = self.trainer
        engine = getattr(trainer, "deepspeed", None) or (trainer.model_wrapped if args.deepspeed else None)
        params = list(trainer.model.named_parameters())
        sh: dict = {"is_fsdp_enabled": bool(getattr(trainer, "is_fsdp_enabled", False)),
                    "is_deepspeed_enabled": bool(getattr(trainer, "is_deepspeed_enabled", False)),
                    "param_types": sorted({type(p.data).__name__ if not hasattr(p, "placements") else
                                           type(p).__name__ for _, p in params}),
                    "placements": sorted({str(getattr(p, "placements", None)) for _, p in params}),
                    "distributed_type": str(trainer.accelerator.state.distributed_type)}
        if engine is not None and hasattr(engine, "zero_optimization_stage"):
            sh["zero_stage"] = int(engine.zero_optimization_stage())
            sh["engine_type"] = type(engine).__name__
            sh["zero_optimizer"] = type(engine.optimizer).__name__
            sh["local_numel"] = sum(p.numel() for _, p in params)
            sh["full_numel"] = sum(int(getattr(p, "ds_numel", p.numel())) for _, p in params)
            from deepspeed.utils import safe_get_full_grad

            zero_opt = engine.optimizer
            original = zero_opt.step

            def step(*a, **k):
                self._record([(n, safe_get_full_grad(p)) for n, p in params if p.requires_grad],
                             state.global_step + 1)
                return original(*a, **k)

            zero_opt.step = step
        else:  # DDP / FSDP2: the gradients before transformers clips them to max_grad_norm
            accelerator = trainer.accelerator
            clip = accelerator.clip_grad_norm_

            def clip_and_record(*a, **k):
                self._record_full(state.global_step + 1)
                return clip(*a, **k)

            accelerator.clip_grad_norm_ = clip_and_record
        self.sharding = sh

    def _record_full(self, step: int) -> None:
        named = []
        for n, p in self.trainer.model.named_parameters():
            if p.grad is None:
                continue
            g = p.grad
            if hasattr(g, "full_tensor"):
                g = g.full_tensor()  # a collective: every rank, every parameter, same order
            named.append((n, g.detach()))
        self._record(named, step)

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "grad_norm" in logs:
            self.grad_norm[state.global_step] = float(logs["grad_norm"])


if __name__ == "__main__":
    sys.exit(main())
