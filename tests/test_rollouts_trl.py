"""Rollout evidence end to end: real tiny TRL GRPO and RLOO runs with ``RLClusterCallback.attach(trainer)``.

Two runs (fresh processes, W&B offline, a loopback Slack server, TRL's own ``log_completions`` table on):

- GRPO with a reward that pays for characters: the within-group length-reward correlation fires
  (length/length-paid) before the mean-length rule (length/length-grew, the post's > 30 % change, which a test
  rule turns into a stop so the run ends there);
- RLOO with a reward that counts one letter, sampled at temperature 1.3: completions loop on it ('caaaaaa…'): the
  repetition statistics climb and samples/rollout-repetition fires (a test rule stops the run there, the early exit
  of a run allowed 80 steps). At temperature 1.0 some CPUs' kernels (AVX2, plain) led the same run to collapse onto
  one short word first (identical groups, zero reward spread, no gradient left) and it never looped; the hotter
  sampling keeps spread in every group, so the count reward keeps paying for one more letter on any CPU.

Each alert of those gauges must carry the offending completions -- the very texts TRL logged for that
step -- in alerts.jsonl, in the W&B table rlcluster/rollouts/evidence, in the wandb.alert text and in the
Slack payload; ``rlcluster analyze`` reads the same statistics back from TRL's completions tables.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from wandb_rlcluster.analyze import analyze_stream
from wandb_rlcluster.dashboard import build_dashboard
from wandb_rlcluster.readers.wandb import read_offline_run
from wandb_rlcluster.rollouts_offline import add_evidence, with_rollouts

from .test_alerts_e2e import _Hook
from .test_callback_trl import metrics_run, run_trainer

pytestmark = pytest.mark.trains  # trains a tiny model for real (make test-kernels)

RULES = """
channels:
  slack: {{type: slack, webhook_url_env: TEST_SLACK_WEBHOOK, min_severity: warn}}
watchdog: {{stall_alert: false, crash_alert: false, guardian: false}}
rules:
  - name: test-stop-on-{gauge}
    gauge: {gauge}
    finding: "{finding}"
    severity: stop
    title: "test: {finding} at step {{step}}, stopping"
"""


@pytest.fixture(scope="module")
def slack():
    class Hook(_Hook):
        bodies: list[dict] = []

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/services/T000/B000/rollouts", Hook.bodies
    srv.shutdown()


def _run(tmp: Path, url: str, kind: str, rewards: str, gauge: str, finding: str, steps: int, **overrides) -> dict:
    rules = tmp / "alerts.yaml"
    rules.write_text(RULES.format(gauge=gauge, finding=finding))
    ov = {"pretrain_steps": 120, "per_device_train_batch_size": 16, "log_completions": True, **overrides}
    res = run_trainer(tmp, kind, "--max-steps", str(steps), "--every", "1000", "--rewards", rewards,
                      "--attach", "{}", "--alerts", str(rules), "--overrides", json.dumps(ov),
                      "--cb-kwargs", json.dumps({"channel_wait": 5.0}), timeout=600,
                      env_extra={"TEST_SLACK_WEBHOOK": url})
    res["journal"] = [json.loads(x) for x in (Path(res["output_dir"]) / "alerts.jsonl").read_text().splitlines()]
    res["run"] = read_offline_run(res["run_dir"])
    return res


@pytest.fixture(scope="module")
def grpo_length(tmp_path_factory: pytest.TempPathFactory, slack) -> dict:
    return _run(tmp_path_factory.mktemp("grpo-length"), slack[0], "grpo", "length_chars", "length",
                "length-grew", 30, max_completion_length=48, learning_rate=2e-3)


@pytest.fixture(scope="module")
def rloo_loop(tmp_path_factory: pytest.TempPathFactory, slack) -> dict:
    return _run(tmp_path_factory.mktemp("rloo-loop"), slack[0], "rloo", "letter_a", "samples",
                "rollout-repetition", 80, max_completion_length=24, learning_rate=3e-3, beta=0.0, temperature=1.3)


def _first(res: dict, gauge: str, rule: str) -> int:
    steps = [f["step"] for f in res["findings"] if f["gauge"] == gauge and f["rule"] == rule]
    assert steps, f"{gauge}/{rule} never fired: {[(f['gauge'], f['rule'], f['step']) for f in res['findings']]}"
    return steps[0]


def _trl_completions(res: dict, step: int) -> list[str]:
    """What TRL itself logged for that step (log_completions=True): the W&B completions table."""
    run = res["run"]
    refs = [t for t in run.tables if t["key"] == "completions"]
    for row in run.history:
        ref = row.get("completions")
        if isinstance(ref, dict) and row.get("train/global_step") == step:
            doc = json.loads((Path(run.path) / "files" / ref["path"]).read_text())
            return [r[doc["columns"].index("completion")] for r in doc["data"]]
    raise AssertionError(f"no completions table at step {step} ({len(refs)} tables)")


def _check_evidence_everywhere(res: dict, bodies: list[dict], rule: str, metric: str) -> list[dict]:
    """The alert's examples are the step's real completions, in the journal, the W&B table, wandb.alert, Slack."""
    alert = next(r for r in res["journal"] if r.get("type", "alert") == "alert" and r["rule"] == rule
                 and r["kind"] == "firing" and r["metric"] == metric)
    step, evidence = alert["step"], alert.get("evidence")
    assert evidence, alert
    logged = _trl_completions(res, step)
    for ex in evidence:
        assert ex["completion"] in logged, (ex, logged)
        assert ex["step"] == step and ex["length_unit"] == "tokens" and set(ex["rewards"]) and "reward" in ex
    # one outcome per alert and channel: this alert went to Slack once, and was sent
    outcomes = [r for r in res["journal"] if r.get("type") == "channel" and r["alert"] == alert["id"]]
    assert [o["outcome"] for o in outcomes] == ["sent"], outcomes
    # the W&B table logged at that step
    run = res["run"]
    tables = [(row.get("train/global_step"), row["rlcluster/rollouts/evidence"]) for row in run.history
              if isinstance(row.get("rlcluster/rollouts/evidence"), dict)]
    ref = next(r for s, r in tables if s == step)
    doc = json.loads((Path(run.path) / "files" / ref["path"]).read_text())
    col = doc["columns"].index("completion")
    in_table = {r[col] for r in doc["data"] if r[doc["columns"].index("alert")] == rule}
    assert {ex["completion"] for ex in evidence} <= in_table
    # wandb.alert (W&B forwards it to its own Slack integration) and the loopback Slack payload
    assert any(f"Examples from step {step}" in a["text"] and evidence[0]["completion"][:20] in a["text"]
               for a in run.alerts), [a["text"][:200] for a in run.alerts]
    msgs = [json.dumps(b) for b in bodies if f"Examples from step {step}" in json.dumps(b)]
    assert msgs and any(json.dumps(evidence[0]["completion"])[1:-1][:20] in m for m in msgs)
    return evidence


def test_grpo_length_paid_inside_groups_fires_before_the_mean_length_rule(grpo_length: dict, slack):
    res = grpo_length
    assert res["rollout_problem"] == "" and res["errors"] == 0
    assert res["rollout_calls"] >= res["global_step"] - 1  # one judged batch per logged step
    paid, grew = _first(res, "length", "length-paid"), _first(res, "length", "length-grew")
    print(f"GRPO length run: length-paid at step {paid}, length-grew (mean length +30 %) at step {grew}; "
          f"rollout statistics {res['rollout_seconds'] / max(1, res['rollout_calls']) * 1e3:.2f} ms per step")
    assert paid < grew
    assert res["stopped_at"] == grew  # the test rule: the run ends where the mean-length rule fires
    evidence = _check_evidence_everywhere(res, slack[1], "length-warn", "rollouts/length_reward_corr")
    # what the length rule is about: the top-reward completion and the shortest of its own group
    assert [e["why"] for e in evidence[:2]] == ["top reward", "shortest in the same group"]
    assert evidence[0]["length"] > evidence[1]["length"] and evidence[0]["reward"] > evidence[1]["reward"]
    assert evidence[0]["group"] == evidence[1]["group"]


def test_rloo_one_repeated_letter_loops_and_the_alert_shows_the_loops(rloo_loop: dict, slack):
    """What holds for any trajectory of this run (the step it loops at is the CPU's): it loops within 80 steps, the
    alert that stops it is the repetition rule, on a row where over half the completions loop, with those loops as
    its examples everywhere it is sent."""
    res = rloo_loop
    assert res["rollout_problem"] == "" and res["errors"] == 0
    rep = _first(res, "samples", "rollout-repetition")  # fires before the 80-step bound
    assert res["stopped_at"] == rep == res["global_step"] <= 80
    history = [r for r in res["run"].history if "rlcluster/rollouts/repetition_mean" in r]
    # every judged step's statistics are in W&B, identical-group ones included, each under its own step
    steps = [r["train/global_step"] for r in history]
    assert steps == sorted(set(steps)) and len(steps) == res["rollout_calls"] and steps[-1] == rep, steps
    assert all("rlcluster/rollouts/near_identical_group_frac" in r for r in history)
    last = history[-1]
    print(f"RLOO loop run: rollout-repetition at step {rep}; last step repetition "
          f"{last['rlcluster/rollouts/repetition_mean']:.2f}, near-identical groups "
          f"{max(r['rlcluster/rollouts/near_identical_group_frac'] for r in history):.2f} (max)")
    assert last["rlcluster/rollouts/repetitive_frac"] > 0.5  # the rule's own line, on the row it fired
    assert history[0]["rlcluster/rollouts/repetition_mean"] < 0.1  # the pretrained model answered with words
    # samples-warn fired at the same step and was journaled but not sent (the stop rule of its own gauge silences
    # it): the notified alert is the stop, and it carries the same examples
    warn = next(r for r in res["journal"] if r.get("rule") == "samples-warn" and r.get("kind") == "firing")
    assert warn["step"] == rep
    assert warn["suppressed"] == "inhibited by test-stop-on-samples" and warn["evidence"]
    evidence = _check_evidence_everywhere(res, slack[1], "test-stop-on-samples", "rollouts/repetitive_frac")
    # the journaled warn carries real completions of its own step too (the examples follow the finding that
    # fired it: repetition, or identical groups when those fired first on that row)
    logged = _trl_completions(res, warn["step"])
    assert all(ex["completion"] in logged for ex in warn["evidence"]), warn["evidence"]
    if warn["metric"] == "rollouts/repetitive_frac":
        assert evidence == warn["evidence"]
    top = evidence[0]
    # the loop is on the letter the reward counts
    assert top["why"].startswith("most repetitive") and top["repetition"] > 0.5, top
    assert top["completion"].lower().count("a") >= 4, top
    # a cross-gauge reading of the run (reward hacking: the letter count pays for length too), where this trajectory
    # gave one: the alert a person gets at 3 a.m. shows the completions that earned the reward
    diag = next((r for r in res["journal"] if r.get("gauge") == "diagnosis" and r.get("kind") == "firing"
                 and "reward-hacking" in r["title"]), None)
    if diag is not None:
        hacked = _check_evidence_everywhere(res, slack[1], diag["rule"], diag["metric"])
        assert hacked[0]["why"] == "top reward"


def test_offline_analysis_of_trl_completions_tables_gives_the_same_statistics(grpo_length: dict):
    """A W&B run without the callback's rollout keys: rlcluster analyze judges TRL's completions tables."""
    run = grpo_length["run"]
    live = {r["train/global_step"]: r for r in run.history if "rlcluster/rollouts/completions" in r}
    run.history = [{k: v for k, v in r.items() if not k.startswith("rlcluster/")} for r in run.history]
    run.tables = [t for t in run.tables if not t["key"].startswith("rlcluster/")]
    rows, source = with_rollouts(run)
    assert source is not None and source.judged >= len(live) - 1 and not source.skipped
    offline = {r["train/global_step"]: r for r in rows if "rollouts/completions" in r}
    same_steps = sorted(set(live) & set(offline))
    assert len(same_steps) >= len(live) - 1
    for s in same_steps:
        a, b = live[s], offline[s]
        for k in ("completions", "groups", "distinct_frac", "identical_group_frac", "near_identical_group_frac",
                  "repetition_mean", "empty_frac"):
            assert b[f"rollouts/{k}"] == pytest.approx(a[f"rlcluster/rollouts/{k}"]), (s, k)
        # characters offline, tokens live (the byte tokenizer: one more, the EOS): the same correlation, nearly
        if "rlcluster/rollouts/length_reward_corr" in a:
            assert b["rollouts/length_reward_corr"] == pytest.approx(a["rlcluster/rollouts/length_reward_corr"],
                                                                     abs=0.1)
    analysis = analyze_stream(rows, "grpo", source="stripped")
    add_evidence(analysis, source)
    found = analysis.to_dict()["findings"]
    paid = next(f for f in found if f["rule"] == "length-paid")
    assert paid["step"] == _first(grpo_length, "length", "length-paid")
    assert paid["evidence"] and paid["evidence"][0]["completion"] in _trl_completions(grpo_length, paid["step"])
    assert paid["evidence"][0]["length_unit"] == "chars"


def test_analyze_and_dashboard_show_the_alerts_examples(grpo_length: dict):
    run_dir = grpo_length["run_dir"]
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", run_dir, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    paid = next(f for f in out["findings"] if f["rule"] == "length-paid")
    assert paid["evidence"][0]["why"] == "top reward"
    text = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", run_dir], capture_output=True,
                          text=True, timeout=120).stdout
    assert "e.g. top reward" in text
    page, _ = build_dashboard(run_dir)
    tip = page.split("length-paid:", 1)[1].split("</title>", 1)[0]
    assert "&#10;e.g. top reward" in tip


def test_without_attach_nothing_changes(tmp_path_factory: pytest.TempPathFactory):
    """The plain callback (callbacks=[RLClusterCallback()]) writes no rollout keys and no examples."""
    res = metrics_run(tmp_path_factory, "grpo")
    assert res["rollout_calls"] == 0 and res["rollout_problem"] is None
    keys = {k for row in read_offline_run(res["run_dir"]).history for k in row}
    assert not [k for k in keys if "rollouts" in k]
    assert all("evidence" not in a for a in res["alerts"])


def test_a_trainer_laid_out_differently_costs_one_warning_and_nothing_else(tmp_path: Path, caplog):
    """Another TRL (here: a GRPOTrainer whose reward step takes other arguments) or another trainer: attach()
    says so once, and the run trains and is judged exactly as without it."""
    import logging

    from trl import GRPOTrainer

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.tiny import make_trainer
    from wandb_rlcluster.trainer.trl_rollouts import RolloutTap

    class OtherGRPO(GRPOTrainer):
        def _calculate_rewards(self, batch, prompts, completions, completion_ids_list):
            return super()._calculate_rewards(batch, prompts, completions, completion_ids_list)

    caplog.set_level(logging.WARNING, logger="wandb_rlcluster")
    cb = RLClusterCallback(alerts=False, grad_every=0, attention_every=0, lora_every=0, sample_every=0)
    trainer = make_trainer("grpo", output_dir=str(tmp_path / "t"), max_steps=2)
    trainer.__class__ = OtherGRPO
    cb.attach(trainer)
    off = [r for r in caplog.records if "rollout statistics and alert examples are off" in r.getMessage()]
    assert len(off) == 1 and "takes (batch, prompts" in off[0].getMessage()
    assert cb in trainer.callback_handler.callbacks and cb.rollouts.tap is None
    trainer.train()
    assert cb.cluster.rows >= 2 and cb.rollout_calls == 0 and cb.errors == 0
    assert not any(k.startswith("rollouts/") for k in cb.cluster.keys_seen)
    # a batch the tap cannot read at run time: one more warning for that tap, then silence (it switched off)
    caplog.clear()
    tap = RolloutTap(make_trainer("grpo", output_dir=str(tmp_path / "u"), max_steps=1))
    assert tap.install() and tap.active
    for _ in range(3):
        tap._record(None, ([], [], ["x"], 7), {})  # completion ids that are not sequences
    assert not tap.active and tap.take(1) is None
    assert len([r for r in caplog.records if "are off" in r.getMessage()]) == 1


def test_rollout_state_travels_in_checkpoints(tmp_path: Path):
    """Each reward function's range (what its ceiling is judged against) is saved with the callback's state and
    restored when the rebuilt callback is attached again; without attach() the state has no rollout entry."""
    from transformers.trainer_callback import TrainerState

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.core.rollouts import RolloutBatch
    from wandb_rlcluster.tiny import make_trainer

    plain = RLClusterCallback(alerts=False)
    assert "rollout_state" not in plain.state()["attributes"]
    cb = RLClusterCallback(alerts=False).attach(make_trainer("grpo", output_dir=str(tmp_path / "a"), max_steps=1))
    cb.rollouts.stats.update(RolloutBatch(step=1, prompts=["p"] * 4, completions=list("abcd"),
                                     rewards={"acc": [0.0, 1.0, 0.0, 0.5]}, group_size=4))
    state = json.loads(json.dumps(cb.state()))  # what trainer_state.json holds
    assert state["attributes"]["rollout_state"]["hi"] == {"acc": 1.0}
    # transformers' restore_callback_states_from_checkpoint=True: from args, then the attributes, then the user's attach
    rebuilt = RLClusterCallback(**state["args"])
    for k, v in state["attributes"].items():
        setattr(rebuilt, k, v)
    rebuilt.attach(make_trainer("grpo", output_dir=str(tmp_path / "b"), max_steps=1))
    assert rebuilt.rollouts.stats.hi == {"acc": 1.0} and rebuilt.rollouts.stats.lo == {"acc": 0.0}
    # and the plain resume path: the state read back from trainer_state.json in on_train_begin
    trainer = make_trainer("grpo", output_dir=str(tmp_path / "c"), max_steps=1)
    resumed = RLClusterCallback(alerts=False).attach(trainer)
    resumed.on_train_begin(trainer.args, TrainerState(global_step=5, stateful_callbacks={"RLClusterCallback": state}),
                           None)
    assert resumed.rollouts.stats.hi == {"acc": 1.0}
