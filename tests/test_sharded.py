"""RLClusterCallback under sharded training: DDP, FSDP2, DeepSpeed ZeRO-2 and ZeRO-3, two real CPU processes (gloo).

Each run (tests/scripts/run_sharded.py under torchrun) trains a tiny Llama with TRL's SFTTrainer, the callback, and a
reference callback that measures the FULL per-layer gradient norms collectively (FSDP2: ``full_tensor()``; ZeRO:
DeepSpeed's ``safe_get_full_grad``; before max_grad_norm clipping). Rank 1 alone has a stop rule. The tests read what
wandb wrote (offline) and each rank's result file.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.readers.wandb import find_run_dirs, read_offline_run
from wandb_rlcluster.trainer.sharded_grads import GradientSums

pytestmark = pytest.mark.slow  # two-rank torch.distributed runs under each engine

SCRIPT = Path(__file__).parent / "scripts" / "run_sharded.py"
STOP_RULE = "rules:\n  - name: loss-any\n    gauge: loss\n    when: \"loss > 0\"\n    for: 4\n    severity: stop\n"
MAX_STEPS = 8
PORTS = itertools.count(20000 + (os.getpid() * 16) % 20000)  # a fresh rendezvous port for every run
TIMEOUT = 420  # a hang (a collective on one rank) fails the test instead of blocking the suite


def deepspeed_available() -> bool:
    try:
        import deepspeed  # noqa: F401
    except Exception:  # noqa: BLE001 - deepspeed can fail to import with more than ImportError (its ops, CUDA)
        return False
    return True


def run_sharded(out: Path, engine: str, *args: str) -> tuple[dict, dict]:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(out), "PYTHONUNBUFFERED": "1",
           "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    env.pop("WANDB_API_KEY", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(next(PORTS)), str(SCRIPT), "--engine", engine, "--out", str(out),
           *args]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        output, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # torchrun and both ranks
        output, _ = p.communicate()
        pytest.fail(f"{engine}: the 2-process run hung (> {TIMEOUT}s):\n{output[-4000:]}")
    assert p.returncode == 0, f"{engine} run failed ({p.returncode}):\n{output[-6000:]}"
    return tuple(json.loads((out / f"result-rank{r}.json").read_text()) for r in (0, 1))  # type: ignore[return-value]


_RUNS: dict[str, tuple[dict, dict]] = {}


def engine_run(factory: pytest.TempPathFactory, engine: str) -> tuple[dict, dict]:
    """One run per engine and session, shared by the tests that read it (CPU is scarce)."""
    if engine not in _RUNS:
        if engine.startswith("zero") and not deepspeed_available():
            pytest.skip("deepspeed is not installed (pip install -e .[dev])")
        out = factory.mktemp(f"sharded-{engine}")
        rule = out / "stop-rank1.yaml"
        rule.write_text(STOP_RULE)
        _RUNS[engine] = run_sharded(out, engine, "--max-steps", str(MAX_STEPS), "--every", "2", "--probes", "2",
                                    "--rank-alerts", json.dumps({"1": str(rule)}))
    return _RUNS[engine]


ENGINES = ["ddp", "fsdp2", "zero2", "zero3"]


@pytest.mark.parametrize("engine", ENGINES)
def test_sharding_is_really_on(tmp_path_factory: pytest.TempPathFactory, engine: str):
    res0, res1 = engine_run(tmp_path_factory, engine)
    assert res0["world_size"] == res1["world_size"] == 2
    sh = res0["sharding"]
    if engine == "ddp":
        assert sh["distributed_type"] == "DistributedType.MULTI_CPU" and not sh["is_fsdp_enabled"]
    elif engine == "fsdp2":
        assert sh["is_fsdp_enabled"] and sh["param_types"] == ["DTensor"], sh
        assert sh["placements"] == ["(Shard(dim=0),)"], sh
    else:
        assert sh["is_deepspeed_enabled"] and sh["engine_type"] == "DeepSpeedEngine", sh
        assert sh["zero_stage"] == int(engine[-1]), sh
        if engine == "zero3":  # the parameters really are partitioned: this rank holds none of them whole
            assert sh["local_numel"] < sh["full_numel"], sh


@pytest.mark.parametrize("engine", ENGINES)
def test_layer_norms_equal_the_full_gradient_reference(tmp_path_factory: pytest.TempPathFactory, engine: str):
    """What the callback wrote to W&B = the full-tensor norms (1e-4 relative), before clipping; the total it read
    = the grad_norm the Trainer logged for the same step."""
    res0, res1 = engine_run(tmp_path_factory, engine)
    assert res0["errors"] == 0 and res1["errors"] == 0, res0["log"]
    history = read_offline_run(res0["run_dir"]).history
    rows = [r for r in history if any(k.startswith("rlcluster/gradients/layer_") and k.endswith("_norm") for k in r)]
    assert len(rows) >= 2, f"per-layer norms logged at {len(rows)} steps"
    logged_grad_norm = {r["train/global_step"]: r["train/grad_norm"] for r in history if "train/grad_norm" in r}
    clipped = 0
    for row in rows:
        step = row["train/global_step"]
        ref = res0["reference"][str(step)]
        layer_keys = [k for k in ref if k.startswith("layer_")]
        assert len(layer_keys) == 2  # the tiny model's two decoder layers
        for k in [*layer_keys, "measured_norm"]:
            got = row[f"rlcluster/gradients/{k}"]
            assert got == pytest.approx(ref[k], rel=1e-4), (engine, step, k, got, ref[k])
        assert row["rlcluster/gradients/measured_norm"] == pytest.approx(logged_grad_norm[step], rel=1e-4)
        clipped += logged_grad_norm[step] > 1.0  # max_grad_norm: the pre-clip value was recovered
        ratio = max(row[f"rlcluster/gradients/{k}"] for k in layer_keys) / min(
            row[f"rlcluster/gradients/{k}"] for k in layer_keys)
        assert history_value(history, step, "rlcluster/gradients/layer_spread") == pytest.approx(ratio, rel=1e-6)
    assert clipped, "no measured step was clipped: the pre-clip path went untested"
    assert res0["summary"]["rlcluster/gradients/nonfinite"] == 0
    assert 0 <= res0["summary"]["rlcluster/gradients/sparsity"] < 0.01


def history_value(history: list[dict], step: int, key: str) -> float:
    return next(r[key] for r in history if r.get("train/global_step") == step and key in r)


@pytest.mark.parametrize("engine", ENGINES)
def test_stop_lands_on_the_same_step_and_its_save_completes(tmp_path_factory: pytest.TempPathFactory, engine: str):
    res0, res1 = engine_run(tmp_path_factory, engine)
    assert res1["stop_finding"] is not None and res1["stop_finding"]["rule"] == "loss-any"
    assert res0["stop_finding"] is None  # rank 0 saw nothing itself, and still stopped with rank 1
    assert res0["stopped_at"] == res1["stopped_at"] == res0["global_step"] == res1["global_step"] < MAX_STEPS
    ckpt = f"trainer/checkpoint-{res0['stopped_at']}/"
    files = [f[len(ckpt):] for f in res0["checkpoint_files"] if f.startswith(ckpt)]
    assert "trainer_state.json" in files, files
    if engine == "fsdp2":  # each rank's shards of the model, written by both ranks
        assert {"pytorch_model_fsdp_0/__0_0.distcp", "pytorch_model_fsdp_0/__1_0.distcp"} <= set(files), files
    elif engine == "ddp":
        assert "model.safetensors" in files, files
    else:
        step = res0["stopped_at"]
        states = [f for f in files if f.startswith(f"global_step{step}/") and f.endswith("model_states.pt")]
        assert states, files
        assert "model.safetensors" in files, files  # ZeRO-3: gathered 16-bit weights (the config asks for them)
    assert len(find_run_dirs(Path(res0["run_dir"]).parent)) == 1  # one W&B run: the main process's


@pytest.mark.parametrize("engine", ENGINES)
def test_forward_probes_run_under_every_engine(tmp_path_factory: pytest.TempPathFactory, engine: str):
    """Whole parameters on every rank (DDP, ZeRO-2): the forward probes run on the main process. Sharded parameters
    (FSDP2, ZeRO-3): every rank runs them at the same step and the main process reports; the run says so (W&B
    summary, gauge table). FSDP2 trains exactly like DDP here, so its probe values must be DDP's."""
    res0, _ = engine_run(tmp_path_factory, engine)
    history = read_offline_run(res0["run_dir"]).history
    keys = {k for r in history for k in r}
    assert "rlcluster/attention_entropy/mean" in keys and "rlcluster/samples/repetition_rate" in keys
    mean = history_value(history, 2, "rlcluster/attention_entropy/mean")
    assert 0 < mean <= history_value(history, 2, "rlcluster/attention_entropy/max_possible") + 1e-6
    summary, table = res0["summary"], res0["gauge_table"]
    assert table["attention_entropy"]["status"] != "no-data" and table["samples"]["status"] != "no-data"
    label = {"fsdp2": "FSDP2", "zero3": "DeepSpeed ZeRO-3"}.get(engine)
    if label:
        for gid, name in (("attention_entropy", "attention entropy"), ("samples", "samples")):
            text = f"{name} under {label}: every rank runs the probe at the same step"
            assert summary[f"rlcluster/probes/{gid}"].startswith(text), summary
            assert table[gid]["note"].startswith(text)
        assert summary["rlcluster/probes/gradients"].startswith(f"gradient stats under {label}: from the full")
    else:
        assert not any(k.startswith("rlcluster/probes/") and "off under" in str(v) for k, v in summary.items())
    if engine == "fsdp2":
        ddp = read_offline_run(engine_run(tmp_path_factory, "ddp")[0]["run_dir"]).history
        for key in ("rlcluster/attention_entropy/mean", "rlcluster/attention_entropy/head_std",
                    "rlcluster/samples/repetition_rate", "rlcluster/samples/mean_chars"):
            assert history_value(history, 2, key) == pytest.approx(history_value(ddp, 2, key), rel=1e-4), key
    assert "off under" not in res0["log"]


def test_unreadable_engine_says_unavailable(tmp_path: Path):
    """DeepSpeed without ZeRO (stage 0) reduces and clips gradients inside its own step: no gradient statistics,
    and the run says so (log, W&B summary, gauge table) instead of logging something wrong."""
    if not deepspeed_available():
        pytest.skip("deepspeed is not installed (pip install -e .[dev])")
    res0, res1 = run_sharded(tmp_path, "zero0", "--max-steps", "4", "--every", "2")
    assert res0["sharding"]["zero_stage"] == 0
    text = "gradient stats: unavailable under DeepSpeed without ZeRO: its optimizer (AdamW) is not a ZeRO optimizer"
    assert res0["summary"]["rlcluster/probes/gradients"].startswith(text)
    assert res0["gauge_table"]["gradients"]["note"].startswith(text)
    assert res0["log"].count(text) == 1
    keys = {k for r in read_offline_run(res0["run_dir"]).history for k in r}
    assert not any(k.startswith("rlcluster/gradients/layer_") for k in keys)
    assert "rlcluster/gradients/measured_norm" not in keys and "rlcluster/gradients/sparsity" not in keys
    assert res0["errors"] == res1["errors"] == 0 and res0["global_step"] == res1["global_step"] == 4


def test_a_rank_that_cannot_read_its_slice_still_joins_the_reduction(tmp_path: Path):
    """Rank 1 fails to read its ZeRO gradient partition at every measured step: it still enters the all_reduce (with a
    failure flag), so nobody waits forever; both ranks drop those measurements and training finishes."""
    if not deepspeed_available():
        pytest.skip("deepspeed is not installed (pip install -e .[dev])")
    res0, res1 = run_sharded(tmp_path, "zero2", "--max-steps", "4", "--every", "2", "--fault-rank1")
    assert res0["global_step"] == res1["global_step"] == 4
    assert res1["errors"] >= 2 and res0["errors"] >= 2  # measured steps 2 and 4, on both ranks
    assert "1 rank(s) could not read their gradient partition" in res0["log"]
    keys = {k for r in read_offline_run(res0["run_dir"]).history for k in r}
    assert not any(k.startswith("rlcluster/gradients/layer_") for k in keys)
    assert "rlcluster/gradients/measured_norm" not in keys


def test_gradient_sums_over_shards_equal_the_whole():
    """The additive statistics of slices, summed as the all_reduce sums them, are the whole tensor's."""
    import torch

    g = torch.Generator().manual_seed(0)
    grads = {"model.layers.0.w": torch.randn(7, 5, generator=g), "model.layers.1.w": torch.randn(9, generator=g),
             "model.embed": torch.randn(4, 3, generator=g)}
    grads["model.layers.1.w"][2] = 0.0
    grads["model.layers.0.w"][1, 1] = float("inf")
    whole = GradientSums(2)
    for n, t in grads.items():
        whole.add(n, t)
    parts = [GradientSums(2) for _ in range(3)]
    for n, t in grads.items():
        for i, chunk in enumerate(t.reshape(-1).chunk(3)):
            parts[i].add(n, chunk)
    total = sum((p.pack() for p in parts), torch.zeros_like(whole.pack()))
    summed = GradientSums.unpack(total, 2)
    a, b = whole.stats(), summed.stats()
    assert a[0] == b[0] and a[1].keys() == b[1].keys()
    assert a[0]["gradients/nonfinite"] == 1 and a[0]["gradients/sparsity"] == pytest.approx(1 / 56)
    assert math.isinf(b[1]["layer_00_norm"]) and b[1]["layer_01_norm"] == pytest.approx(a[1]["layer_01_norm"])
    # a replicated slice (HSDP: two copies) counted at half weight on each holder adds up to one copy
    half = GradientSums(2)
    half.add("model.layers.1.w", grads["model.layers.1.w"], 0.5)
    half.add("model.layers.1.w", grads["model.layers.1.w"], 0.5)
    assert half.stats()[1]["layer_01_norm"] == pytest.approx(a[1]["layer_01_norm"])
