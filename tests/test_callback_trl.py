"""RLClusterCallback inside real TRL trainers (tiny local models, wandb offline), read back from disk.

Each training runs in a fresh process (tests/scripts/run_trainer.py), as a user's
script would; the test then reads the offline W&B run that wandb wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.readers.wandb import find_run_dirs, read_offline_run

pytestmark = pytest.mark.trains  # trains a tiny model for real (make test-kernels)

SCRIPT = Path(__file__).parent / "scripts" / "run_trainer.py"

# rlcluster keys each trainer's run must carry (beyond the common ones).
COMMON = {"rlcluster/gradients/grad_norm", "rlcluster/gradients/sparsity", "rlcluster/gradients/status",
          "rlcluster/learning_rate/learning_rate", "rlcluster/efficiency/steps_per_s",
          "rlcluster/attention_entropy/mean", "rlcluster/samples/repetition_rate", "rlcluster/findings"}
GRPO = {"rlcluster/reward/reward", "rlcluster/reward_signal/frac_zero_std", "rlcluster/length/mean_length",
        "rlcluster/length/clipped_ratio", "rlcluster/entropy/entropy", "rlcluster/policy_ratio/clip",
        "rlcluster/reward_signal/status", "rlcluster/length/status"}
EXPECT = {
    "grpo": GRPO,
    "grpo_kl": GRPO | {"rlcluster/kl/kl", "rlcluster/kl/status"},
    "rloo": GRPO | {"rlcluster/kl/kl"},
    "dpo": {"rlcluster/reward/margin", "rlcluster/reward/accuracy_ewma", "rlcluster/loss/loss",
            "rlcluster/convergence/status"},
    "kto": {"rlcluster/reward/margin", "rlcluster/loss/loss"},
    "online_dpo": {"rlcluster/kl/kl", "rlcluster/reward/margin", "rlcluster/entropy/entropy"},
    "sft": {"rlcluster/loss/loss", "rlcluster/convergence/status"},
    "sft_peft": {"rlcluster/loss/loss", "rlcluster/lora/norm_mean", "rlcluster/lora/effective_rank",
                 "rlcluster/lora/rank", "rlcluster/lora/status"},
}
ABSENT = {"grpo": {"rlcluster/kl/kl", "rlcluster/kl/status"}, "dpo": {"rlcluster/kl/kl"},
          "sft": {"rlcluster/lora/norm_mean", "rlcluster/kl/kl"}}


def run_trainer(out: Path, kind: str, *args: str, timeout: int = 300, nproc: int = 0, cwd: Path | None = None,
                env_extra: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(out), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    env.pop("WANDB_API_KEY", None)
    base = ["--kind", kind.replace("_peft", ""), "--out", str(out), *args]
    if kind.endswith("_peft"):
        base.append("--peft")
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port",
               str(29500 + os.getpid() % 1000), str(SCRIPT), *base]
    else:
        cmd = [sys.executable, str(SCRIPT), *base]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert p.returncode == 0, f"training failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads((out / "result-rank0.json").read_text()) | {"stderr": p.stderr}


_SHARED: dict[tuple[str, ...], dict] = {}


def shared_run(factory: pytest.TempPathFactory, kind: str, *args: str) -> dict:
    """One real run per (kind, args) and test session: the tests that only read a run share it (CPU is scarce)."""
    key = (kind, *args)
    if key not in _SHARED:
        _SHARED[key] = run_trainer(factory.mktemp(f"run-{kind}"), kind, *args)
    return _SHARED[key]


def metrics_run(factory: pytest.TempPathFactory, kind: str, order: str = "after") -> dict:
    """The 4-step run of ``kind`` read by the metric and panel-key tests (SFT evaluates every 2 steps)."""
    extra = ("--eval-steps", "2") if kind == "sft" else ()
    return shared_run(factory, kind, "--order", order, "--max-steps", "4", *extra)


@pytest.mark.parametrize("order", ["after", "before"])
@pytest.mark.parametrize("kind", list(EXPECT))
def test_callback_metrics_reach_wandb(tmp_path_factory: pytest.TempPathFactory, kind: str, order: str):
    res = metrics_run(tmp_path_factory, kind, order)
    assert res["errors"] == 0 and not res["sink_errors"], res["stderr"][-3000:]
    # the trainer's max_steps reached the core: a 4-step run logged every step is planned as 4 logged rows
    assert res["planned_rows"] == pytest.approx(res["max_steps"] / res["logging_steps"]), res["planned_rows"]
    names = res["order"]
    assert names.index("RLClusterCallback") < names.index("WandbCallback") if order == "before" else \
        names.index("RLClusterCallback") > names.index("WandbCallback")
    run = read_offline_run(res["run_dir"])
    assert run.finished
    ours = [row for row in run.history if any(k.startswith("rlcluster/") for k in row)]
    assert ours, "no rlcluster rows in the W&B run"
    keys = {k for row in ours for k in row}
    missing = (COMMON | EXPECT[kind]) - keys
    assert not missing, f"missing in W&B: {sorted(missing)}"
    assert not (ABSENT.get(kind, set()) & keys)
    # every rlcluster row sits on the trainer's step axis, at a step TRL itself logged
    trl_steps = {row["train/global_step"] for row in run.history if "train/loss" in row or "train/reward" in row
                 or "train/objective/kl" in row}
    for row in ours:
        assert "train/global_step" in row
        if "rlcluster/findings" in row and row["train/global_step"] <= res["global_step"]:
            assert row["train/global_step"] in trl_steps | {res["global_step"]}
    statuses = {v for row in ours for k, v in row.items() if k.endswith("/status")}
    assert statuses <= {0, 1, 2}
    assert res["is_peft"] == kind.endswith("_peft")


def ppo_rows_run(factory: pytest.TempPathFactory, real_logs: Path) -> dict:
    """The real PPO log's rows fed through a real ``Trainer.log()`` with the callback (once per session)."""
    key = ("ppo-rows",)
    if key in _SHARED:
        return _SHARED[key]
    out = factory.mktemp("run-ppo-rows")
    script = out / "ppo_rows.py"
    script.write_text(f"""
import json, os
os.environ.update(WANDB_MODE="offline", WANDB_DIR={str(out)!r}, WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
import wandb
from transformers import Trainer, TrainingArguments
from wandb_rlcluster import RLClusterCallback
from wandb_rlcluster.tiny import build_model, build_tokenizer
rows = json.load(open({str(real_logs / "ppo_trl_kartik_v1_seed2026.json")!r}))
tok = build_tokenizer()
cb = RLClusterCallback(grad_every=0, attention_every=0, sample_every=0, wandb_min_interval=0)
args = TrainingArguments(output_dir={str(out / "out")!r}, report_to="wandb", use_cpu=True, save_strategy="no")
trainer = Trainer(model=build_model(tok), args=args, callbacks=[cb])
stopped = None
for r in rows:
    trainer.state.global_step = int(r["step"])
    trainer.log({{k: v for k, v in r.items() if k not in ("step", "epoch")}})
    if trainer.control.should_training_stop and stopped is None:
        stopped = trainer.state.global_step
run_dir = os.path.dirname(wandb.run.dir)
wandb.finish()
json.dump({{"run_dir": run_dir, "stopped": stopped, "family": cb.cluster.family, "verdict": cb.cluster.verdict(),
           "stop": cb.stop_finding.to_dict() if cb.stop_finding else None}}, open({str(out / "r.json")!r}, "w"))
""")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert p.returncode == 0, p.stderr[-4000:]
    _SHARED[key] = json.loads((out / "r.json").read_text())
    return _SHARED[key]


def test_ppo_shaped_rows_through_real_trainer_log(tmp_path_factory: pytest.TempPathFactory,
                                                 real_logs: Path):
    """PPO is gone from TRL 1.16: feed the real PPO log's rows through a real Trainer.log() with the callback."""
    res = ppo_rows_run(tmp_path_factory, real_logs)
    assert res["family"] == "ppo" and res["verdict"] == "stop"
    assert res["stop"]["rule"] == "reward-stop"  # the shipped alert rule forwarding the flat-line stop finding
    assert res["stopped"] == res["stop"]["step"]  # the trainer was told to stop on the very row that decided it
    hist = read_offline_run(res["run_dir"]).history
    kl_rows = [row for row in hist if "rlcluster/kl/kl" in row]
    assert len(kl_rows) == 100
    assert {row["train/global_step"] for row in kl_rows} == set(range(1, 101))
    assert any(row.get("rlcluster/reward/status") == 2 for row in hist)
    assert any(row.get("rlcluster/length/status") == 1 for row in hist)  # no EOS ever: warn


@pytest.mark.parametrize("max_steps", [45, 0, 46], ids=["last-row-at-max-steps", "max-steps-unknown",
                                                        "a-summary-row-at-max-steps"])
def test_throttled_writes_send_what_got_worse_at_once_and_the_all_clear_later(tmp_path: Path, max_steps: int):
    """With W&B writes thinned (an interval no row reaches), the row where KL's status rose is written at once;
    the row where it fell back to ok is not: it goes out with the next written row, here the last one (max_steps
    known), the row written at the end of training (max_steps unknown), or Trainer's end-of-training summary row
    (train_runtime, ...: no gauge reads it). Every status and alert series in W&B ends where the callback ended."""
    out = tmp_path
    script = out / "throttle.py"
    script.write_text(f"""
import json, os
os.environ.update(WANDB_MODE="offline", WANDB_DIR={str(out)!r}, WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
import wandb
from transformers import Trainer, TrainingArguments
from wandb_rlcluster import RLClusterCallback
from wandb_rlcluster.tiny import build_model, build_tokenizer
tok = build_tokenizer()
cb = RLClusterCallback(trainer="grpo", grad_every=0, attention_every=0, sample_every=0, wandb_min_interval=1e9)
args = TrainingArguments(output_dir={str(out / "out")!r}, report_to="wandb", use_cpu=True, save_strategy="no")
trainer = Trainer(model=build_model(tok), args=args, callbacks=[cb])
trainer.state.max_steps = {max_steps}
kl = [0.05] * 10 + [0.8] * 5 + [0.05] * 30
statuses = []
for step, k in enumerate(kl, start=1):
    trainer.state.global_step = step
    trainer.log({{"loss": 0.01, "reward": 0.5 + 0.001 * step, "reward_std": 0.2, "kl": k, "grad_norm": 1.0,
                  "learning_rate": 1e-6, "entropy": 0.8, "completions/mean_length": 200.0}})
    statuses.append(cb.cluster.gauges["kl"].status)
if {max_steps} == 46:
    trainer.state.global_step = 46
    trainer.log({{"train_runtime": 1.0, "train_samples_per_second": 45.0, "train_loss": 0.01}})
cb.on_train_end(trainer.args, trainer.state, trainer.control)
run_dir = os.path.dirname(wandb.run.dir)
wandb.finish()
res = {{"run_dir": run_dir, "statuses": statuses, "written": cb.sink.rows_logged, "alerts": cb.engine.states()}}
json.dump(res, open({str(out / "r.json")!r}, "w"))
""")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.loads((out / "r.json").read_text())
    st = res["statuses"]
    rose = st.index("warn") + 1  # steps are 1-based
    fell = rose + st[rose - 1:].index("ok")
    assert rose <= 15 < fell < 45
    hist = [row for row in read_offline_run(res["run_dir"]).history if "rlcluster/findings" in row]
    ours = {row["train/global_step"]: row for row in hist}
    assert ours[rose]["rlcluster/kl/status"] == 1  # the warning went out on its own row
    assert fell not in ours  # the all-clear waited ...
    assert hist[-1]["train/global_step"] == max(max_steps, 45)  # ... for the last row
    assert hist[-1]["rlcluster/kl/status"] == 0
    assert any(ours[rose][f"rlcluster/alerts/{a}"] == 2 for a in res["alerts"])  # an alert fired with the warning
    for name, final in res["alerts"].items():  # every alert series ends in the engine's final state
        assert [row[f"rlcluster/alerts/{name}"] for row in hist][-1] == final, name
    assert res["written"] == len(hist) < 10  # the rest was thinned out


def test_two_processes_stop_together_and_log_once(tmp_path: Path):
    """Rank 1 alone decides to stop (its KL threshold is tiny); both ranks must stop at the same step."""
    strict = tmp_path / "strict-alerts.yaml"
    strict.write_text("rules:\n  - name: kl-stop\n    when: \"kl > 0\"\n    for: 1\n")
    res0 = run_trainer(tmp_path, "grpo_kl", "--max-steps", "8", "--rank-alerts", json.dumps({"1": str(strict)}),
                       "--every", "2", nproc=2, timeout=400)
    res1 = json.loads((tmp_path / "result-rank1.json").read_text())
    assert res0["world_size"] == 2 and res1["world_size"] == 2
    assert res1["stop_finding"] is not None and res1["stop_finding"]["rule"] == "kl-stop"
    assert res0["stop_finding"] is None  # rank 0 saw nothing itself ...
    assert res0["stopped_at"] == res1["stopped_at"] is not None  # ... and still stopped at the same step
    assert res0["global_step"] == res1["global_step"] == res0["stopped_at"] < 8
    runs = find_run_dirs(tmp_path / "wandb")
    assert len(runs) == 1, "only the main process may create a W&B run"
    journal = Path(res0["output_dir"]) / "alerts.jsonl"
    assert not journal.exists() or "kl-stop" not in journal.read_text()  # rank 1's alert is not rank 0's to send
    hist = read_offline_run(runs[0]).history
    steps = [row["train/global_step"] for row in hist if "rlcluster/kl/kl" in row]  # one per training log row
    assert steps == list(range(1, res0["stopped_at"] + 1)), f"rlcluster rows duplicated or missing: {steps}"


def test_resume_keeps_baselines(tmp_path: Path):
    """A run resumed from a checkpoint continues its gauges: the length baseline does not restart."""
    params = json.dumps({"length": {"baseline_rows": 3}, "kl": {"start_rows": 3}})
    first = run_trainer(tmp_path / "a", "grpo_kl", "--max-steps", "6", "--save-steps", "3", "--params", params,
                        "--report", "none")
    ckpt = tmp_path / "a" / "trainer" / "checkpoint-3"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    stored = state["stateful_callbacks"]["RLClusterCallback"]
    assert stored["attributes"]["cluster_state"]["rows"] == 3
    resumed = run_trainer(tmp_path / "b", "grpo_kl", "--max-steps", "6", "--params", params, "--report", "none",
                          "--resume", str(ckpt))
    assert resumed["global_step"] == 6
    assert resumed["cluster_rows"] == first["cluster_rows"]  # 3 restored + 3 new (+ the summary row)
    assert resumed["length_baseline"] == first["length_baseline"]
    fresh = run_trainer(tmp_path / "c", "grpo_kl", "--max-steps", "3", "--params", params, "--report", "none")
    assert fresh["cluster_rows"] < resumed["cluster_rows"]


def test_wandb_outage_never_reaches_training(tmp_path: Path):
    """The wandb-core service is killed mid-run: logging fails, training finishes, gauges keep working."""
    res = run_trainer(tmp_path, "grpo_kl", "--max-steps", "5", "--user-wandb-init", "--kill-wandb-at", "2")
    assert res["global_step"] == 5
    assert res["sink_errors"].get("log", 0) >= 1
    assert res["cluster_rows"] >= 5  # the core kept computing after W&B died
    assert "W&B log failed" in res["stderr"]
    assert "Traceback" not in res["stderr"].split("wandb.finish failed")[0]


def test_no_wandb_run_still_computes_and_stops(tmp_path: Path):
    """report_to='none': nothing is logged, the gauges still run and a stop rule still stops training."""
    strict = tmp_path / "strict-alerts.yaml"
    strict.write_text("rules:\n  - name: kl-stop\n    when: \"kl > 0\"\n    for: 1\n")
    res = run_trainer(tmp_path, "grpo_kl", "--max-steps", "6", "--report", "none", "--alerts", str(strict))
    assert res["run_dir"] is None
    journal = [json.loads(x) for x in (Path(res["output_dir"]) / "alerts.jsonl").read_text().splitlines()]
    assert any(j["rule"] == "kl-stop" and j["kind"] == "firing" for j in journal)  # written locally, no W&B
    assert res["stop_finding"]["rule"] == "kl-stop"
    assert res["global_step"] == res["stopped_at"] < 6
    assert not list(tmp_path.glob("wandb/*run-*"))


def test_throttle_thins_wandb_rows_but_keeps_changes_and_probe_values(tmp_path: Path):
    """Thinning as a fast run sees it (an interval no row reaches; the default 0.25 s does this to ~20 ms steps, but
    a loaded machine's steps can be slower than that): fewer rlcluster rows, never losing the first or the last step,
    nor a row that carries the probes' values (steps 5 and 10)."""
    res = run_trainer(tmp_path, "grpo_kl", "--max-steps", "12", "--wandb-interval", "1e9", "--every", "5")
    hist = read_offline_run(res["run_dir"]).history
    steps = [row["train/global_step"] for row in hist if "rlcluster/kl/kl" in row]
    assert 1 in steps and 12 in steps  # first row and last step always go out
    assert len(steps) < 12, steps  # the rest: only where something got worse
    assert [row["train/global_step"] for row in hist if "rlcluster/attention_entropy/mean" in row] == [5, 10]
    assert res["cluster_rows"] >= 12  # the gauges still saw every row


def test_analyze_reads_the_wandb_offline_run(tmp_path: Path):
    """`rlcluster analyze` on the run directory wandb wrote: TRL's train/* keys plus the live probes' inputs."""
    res = run_trainer(tmp_path, "grpo_kl", "--max-steps", "6", "--every", "2")
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", res["run_dir"], "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["format"] == "wandb_offline_run"
    assert out["trainer"] == "grpo"
    assert out["steps"] == [1, 6]
    g = out["gauges"]
    assert g["kl"]["status"] != "no-data" and g["reward_signal"]["status"] != "no-data"
    # live-only gauges are fed offline from the rlcluster/<probe> keys the callback logged
    assert g["attention_entropy"]["status"] != "no-data"
    assert g["samples"]["status"] != "no-data"
    p2 = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", str(Path(res["run_dir"]).parent.parent)],
                        capture_output=True, text=True, timeout=120)
    assert p2.returncode == 0 and "GRPO" in p2.stdout  # the wandb/ folder's parent works too


def test_two_processes_alert_written_once(tmp_path: Path):
    """Both ranks decide the same stop; the journal and the W&B run get the alert exactly once."""
    strict = tmp_path / "strict-alerts.yaml"
    strict.write_text("rules:\n  - name: kl-stop\n    when: \"kl > 0\"\n    for: 2\n")
    res0 = run_trainer(tmp_path, "grpo_kl", "--max-steps", "8", "--alerts", str(strict), "--every", "4", nproc=2,
                       timeout=400)
    res1 = json.loads((tmp_path / "result-rank1.json").read_text())
    assert res0["stopped_at"] == res1["stopped_at"] == res0["global_step"] == res1["global_step"] < 8
    journal = [json.loads(x) for x in (Path(res0["output_dir"]) / "alerts.jsonl").read_text().splitlines()]
    assert [j["rule"] for j in journal if j.get("kind") == "firing"].count("kl-stop") == 1
    run = read_offline_run(find_run_dirs(tmp_path / "wandb")[0])
    assert [a["title"] for a in run.alerts].count(next(j["title"] for j in journal if j["rule"] == "kl-stop")) == 1


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_two_processes_other_trainers_stop_together(tmp_path: Path, kind: str):
    """Beyond GRPO: an SFT and a DPO run under torchrun stop together when only rank 1 decides to."""
    strict = tmp_path / "strict-alerts.yaml"
    strict.write_text("rules:\n  - name: loss-any\n    gauge: loss\n    when: \"loss > 0\"\n    for: 2\n"
                      "    severity: stop\n")
    res0 = run_trainer(tmp_path, kind, "--max-steps", "6", "--rank-alerts", json.dumps({"1": str(strict)}),
                       "--every", "3", nproc=2, timeout=400)
    res1 = json.loads((tmp_path / "result-rank1.json").read_text())
    assert res1["stop_finding"]["rule"] == "loss-any" and res0["stop_finding"] is None
    assert res0["stopped_at"] == res1["stopped_at"] == res0["global_step"] == res1["global_step"] == 2
