"""Rollout statistics and evidence: the pure core (core/rollouts.py) and what people read of it.

The real TRL runs (GRPO paying for length, RLOO paying for one repeated letter) are in
tests/test_rollouts_trl.py; these tests build batches by hand, each shaped to show one statistic.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time

import pytest

from wandb_rlcluster.alerts.channels import AlertMessage, EmailChannel, SlackWebhookChannel
from wandb_rlcluster.core import InstrumentCluster
from wandb_rlcluster.core.rollouts import (
    ROLLOUT_KEYS,
    RolloutBatch,
    RolloutStats,
    batch_from_table,
    evidence_focus,
    evidence_lines,
    evidence_table,
    repetition_rate,
)


def batch(completions: list[str], rewards: dict[str, list[float]], group_size: int = 4, **kw) -> RolloutBatch:
    n = len(completions)
    prompts = [f"prompt {i // group_size}" for i in range(n)]
    return RolloutBatch(step=kw.pop("step", 1), prompts=prompts, completions=completions, rewards=rewards,
                        group_size=group_size, **kw)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa",
                                "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma")) for _ in range(n))


# -- statistics ------------------------------------------------------------------------------------------------


def test_length_paid_inside_groups_although_the_batch_says_the_opposite():
    """Group A answers short and scores high, group B long and low: across the batch, length and reward are
    anti-correlated; inside each group the longer completion wins. Only the within-group view sees the pay."""
    rng = random.Random(0)
    comps, rew = [], []
    for base_len, base_reward in ((5, 10.0), (40, 1.0)):
        for k in range(4):
            comps.append(words(rng, base_len + 3 * k))
            rew.append(base_reward + 0.5 * k)
    out = RolloutStats().update(batch(comps, {"judge": rew}))
    lengths = [len(c) for c in comps]
    mean_l, mean_r = statistics.mean(lengths), statistics.mean(rew)
    batch_corr = sum((a - mean_l) * (b - mean_r) for a, b in zip(lengths, rew, strict=True)) / math.sqrt(
        sum((a - mean_l) ** 2 for a in lengths) * sum((b - mean_r) ** 2 for b in rew))
    assert batch_corr < -0.8
    assert out["rollouts/length_reward_corr"] > 0.8  # characters of random words: nearly linear in words
    assert out["rollouts/length_reward_dof"] == 6
    # the real lengths win over characters when given (tokens), and the unit is reported with the examples
    out_tok = RolloutStats().update(batch(comps, {"judge": rew}, lengths=[10, 9, 8, 7, 10, 9, 8, 7]))
    assert out_tok["rollouts/length_reward_corr"] < -0.95


def test_identical_and_near_identical_groups():
    rng = random.Random(1)
    long = words(rng, 60)
    edited = long.replace("alpha", "ALPHA", 1) if "alpha" in long else long + " x"
    comps = ["Paris"] * 4 + [long, long, edited, long] + [words(rng, 60) for _ in range(4)]
    out = RolloutStats().update(batch(comps, {"r": [1.0] * 12}))
    assert out["rollouts/identical_group_frac"] == pytest.approx(1 / 3)
    assert out["rollouts/near_identical_group_frac"] == pytest.approx(2 / 3)
    assert out["rollouts/distinct_frac"] == pytest.approx((1 + 2 + 4) / 12)


def test_loops_that_differ_in_their_first_letters_are_near_identical_by_counts():
    """'seaaaa…' and 'staaaa…' share few distinct 4-grams but nearly all of them by count."""
    comps = ["se" + "a" * 22, "st" + "a" * 22, "se" + "a" * 22, "t" + "a" * 23]
    out = RolloutStats().update(batch(comps, {"letter_a": [22, 22, 22, 23]}))
    assert out["rollouts/near_identical_group_frac"] == 1.0
    assert out["rollouts/identical_group_frac"] == 0.0
    assert out["rollouts/repetitive_frac"] == 1.0 and out["rollouts/repetition_mean"] > 0.8


def test_repetition_rate_words_and_characters():
    assert repetition_rate("the cat sat on the mat and then went home to sleep") == 0.0
    assert repetition_rate("I am sure. " * 20) > 0.8  # word 3-grams
    assert repetition_rate("aaaaaaaaaaaaaaaaaaaa") > 0.8  # no spaces: character 4-grams
    assert repetition_rate("sky") == 0.0  # too short to tell


def test_empty_and_unfinished_completions():
    comps = ["", "  ", "an answer", "another answer"]
    out = RolloutStats().update(batch(comps, {"r": [0, 0, 1, 1]}, eos=[True, True, False, None]))
    assert out["rollouts/empty_frac"] == 0.5
    assert out["rollouts/no_eos_frac"] == pytest.approx(1 / 3)  # the unknown one is left out


def test_ceiling_needs_spread_first_and_declared_ceilings_count_at_once():
    stats = RolloutStats()
    flat = stats.update(batch(["a", "b", "c", "d"], {"acc": [0.0] * 4}))
    assert "rollouts/reward/acc/ceiling_frac" not in flat  # no spread yet: 0 is not a ceiling
    stats.update(batch(["a", "b", "c", "d"], {"acc": [0.0, 1.0, 0.0, 0.0]}))
    late = stats.update(batch(["a", "b", "c", "d"], {"acc": [1.0, 1.0, 1.0, 0.0]}))
    assert late["rollouts/reward/acc/ceiling_frac"] == 0.75 and late["rollouts/ceiling_frac_max"] == 0.75
    declared = RolloutStats(ceilings={"acc": 1.0}).update(batch(["a", "b", "c", "d"], {"acc": [1.0] * 4}))
    assert declared["rollouts/reward/acc/ceiling_frac"] == 1.0
    # the running range survives a checkpoint
    restored = RolloutStats()
    restored.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert restored.update(batch(["a", "b", "c", "d"], {"acc": [1.0] * 4}))["rollouts/reward/acc/ceiling_frac"] == 1


def test_one_reward_function_decides_the_advantage():
    # format is 1 everywhere but in one completion; accuracy varies inside every group but is weighted 0.01
    fmt = [1.0] * 8
    fmt[3] = 0.0
    acc = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    out = RolloutStats().update(batch(list("abcdefgh"), {"format": fmt, "accuracy": acc},
                                      weights={"format": 1.0, "accuracy": 0.01}))
    assert out["rollouts/reward/format/advantage_share"] > 0.9
    assert out["rollouts/advantage_share_max"] == out["rollouts/reward/format/advantage_share"]
    single = RolloutStats().update(batch(list("abcd"), {"format": [0, 1, 0, 1]}))
    assert "rollouts/advantage_share_max" not in single  # one function always decides alone: nothing to say


def test_reward_outliers_only_for_continuous_rewards():
    rng = random.Random(3)
    rewards = [rng.gauss(1.0, 0.1) for _ in range(16)]
    rewards[5] = 9.0
    out = RolloutStats().update(batch([f"c{i}" for i in range(16)], {"judge": rewards}))
    assert out["rollouts/reward_outlier_frac"] == pytest.approx(1 / 16) and out["rollouts/reward_outlier_z"] > 30
    binary = RolloutStats().update(batch([f"c{i}" for i in range(16)], {"acc": [float(i == 5) for i in range(16)]}))
    assert "rollouts/reward_outlier_z" not in binary


def test_every_key_written_is_documented():
    rng = random.Random(4)
    comps = [words(rng, 10) for _ in range(8)]
    out = RolloutStats().update(batch(comps, {"f": [rng.random() for _ in range(8)], "g": [0, 1] * 4},
                                      eos=[True] * 8))
    documented = {k.replace("<fn>", "*") for k in ROLLOUT_KEYS}
    for k in out:
        generic = "rollouts/reward/*/" + k.rsplit("/", 1)[1] if k.startswith("rollouts/reward/") else k
        assert generic in documented, k


def test_the_key_registry_knows_every_fixed_rollout_key():
    """Alert rules on rollouts/... validate without an 'unknown metric' warning; W&B's rlcluster/rollouts/... read
    back offline as inputs."""
    from wandb_rlcluster.core.keys import LIVE_INPUT_KEYS, Normalizer

    fixed = {k for k in ROLLOUT_KEYS if "<fn>" not in k}
    assert fixed == {k for k in LIVE_INPUT_KEYS if k.startswith("rollouts/")}
    row = Normalizer().normalize({"rlcluster/rollouts/repetitive_frac": 0.6,
                                  "rlcluster/rollouts/reward/acc/ceiling_frac": 0.9,
                                  "rlcluster/samples/rollout_repetitive_frac": 0.6, "train/global_step": 3})
    assert row is not None and row.values == {"rollouts/repetitive_frac": 0.6, "rollouts/reward/acc/ceiling_frac": 0.9}


def test_stats_cost_for_64_completions_of_512_tokens():
    """The issue's budget: a few ms for 64 x 512 tokens (benchmarks/bench_callback.py measures it properly)."""
    rng = random.Random(5)
    comps = [words(rng, 400) for _ in range(64)]  # ~512 tokens of prose each
    b = batch(comps, {"f": [rng.random() for _ in range(64)], "g": [float(rng.random() > 0.5) for _ in range(64)]},
              group_size=8, lengths=[512] * 64, eos=[True] * 64, advantages=[0.0] * 64)
    stats = RolloutStats()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        stats.update(b)
        times.append(time.perf_counter() - t0)
    print(f"rollout statistics, 64 x 512 tokens: median {statistics.median(times) * 1e3:.2f} ms")
    assert statistics.median(times) < 0.05  # generous: a shared 2-core machine; ~3-6 ms measured


# -- evidence ----------------------------------------------------------------------------------------------------


def test_evidence_leads_with_what_the_rule_is_about_then_top_reward():
    comps = ["short", "a much longer answer that pays", "ok", "the the the the the the the the the the"]
    stats = RolloutStats()
    stats.update(batch(comps, {"judge": [0.1, 3.0, 0.2, 1.0], "fmt": [1, 1, 0, 1]}, advantages=[-1, 2, -0.5, 0.1],
                       lengths=[2, 7, 1, 10], eos=[True, False, True, True]))
    rep = stats.evidence("repetitive")
    assert rep[0]["why"].startswith("most repetitive") and rep[0]["completion"].startswith("the the")
    assert rep[1]["why"] == "top reward" and rep[1]["completion"] == comps[1]
    assert rep[1]["rewards"] == {"judge": 3.0, "fmt": 1.0} and rep[1]["advantage"] == 2.0
    assert rep[1]["length"] == 7 and rep[1]["length_unit"] == "tokens" and rep[1]["eos"] is False
    paid = stats.evidence("length")
    assert [e["why"] for e in paid[:2]] == ["top reward", "shortest in the same group"]
    assert stats.evidence("no_eos")[0]["completion"] == comps[1]
    assert evidence_focus("rollouts/reward/acc/ceiling_frac") == "ceiling:acc"
    assert evidence_focus("train/completions/mean_length") == "length" and evidence_focus("kl") is None


def test_evidence_is_cut_escaped_and_redacted():
    secret = "call me at 555-0100 \x1b[2J\nNEW LINE " + "x" * 1000
    stats = RolloutStats()
    stats.update(batch([secret, "b", "c", "d"], {"r": [9, 1, 1, 1]}))
    ex = stats.evidence(max_chars=80)[0]
    assert len(ex["completion"]) <= 80 + 20  # escapes may lengthen what was cut to 80
    assert "\x1b" not in ex["completion"] and "\n" not in ex["completion"] and "\\x1b" in ex["completion"]
    masked = stats.evidence(redact=lambda t: t.replace("555-0100", "[phone]"))[0]["completion"]
    assert "[phone]" in masked and "555" not in masked
    assert stats.evidence(redact=lambda t: None)[0]["completion"] == "[text withheld]"

    def broken(_: str) -> str:
        raise RuntimeError("redactor down")

    withheld = stats.evidence(redact=broken)[0]
    assert withheld["completion"].startswith("[text withheld") and "555" not in withheld["prompt"] + withheld[
        "completion"]


def test_evidence_reaches_slack_and_email_escaped_and_can_stay_numbers_only():
    stats = RolloutStats()
    stats.update(batch(["<!channel> pay me & <http://evil|click>", "b", "c", "d"], {"r": [9, 1, 1, 1]},
                       lengths=[12, 1, 1, 1]))
    ev = tuple(stats.evidence())
    msg = AlertMessage(title="Reward: reward-outliers", text="read the examples", severity="warn",
                       rule="reward-warn", gauge="reward", step=7, evidence=ev)
    slack = SlackWebhookChannel("http://127.0.0.1:9/services/T/B/x").payload(msg)
    blob = json.dumps(slack)
    assert "Examples from step 7" in blob and "&lt;!channel&gt; pay me &amp; &lt;http://evil|click&gt;" in blob
    assert "<!channel>" not in blob  # no ping, no forged link: neither in the blocks nor in the fallback text
    mail = EmailChannel("127.0.0.1", 25, "a@b.c", ["d@e.f"]).build(msg).get_content()
    assert "Examples from step 7:" in mail and "reward 9" in mail and "12 tokens" in mail
    quiet = AlertMessage(title="t", text="x", severity="warn", rule="r", gauge="reward", step=7, evidence=tuple(
        {k: v for k, v in e.items() if k not in ("prompt", "completion")} for e in ev), evidence_text=False)
    blob = json.dumps(SlackWebhookChannel("http://127.0.0.1:9/services/T/B/x").payload(quiet))
    assert "Examples from step 7" in blob and "pay me" not in blob and "reward 9" in blob


def test_evidence_table_has_a_column_per_reward_function():
    class E:  # what the table needs of an alert event: its rule, step and examples
        def __init__(self, rule: str, evidence: list[dict]) -> None:
            self.rule, self.step, self.evidence = rule, 3, evidence

    stats = RolloutStats()
    stats.update(batch(["x", "y", "z", "w"], {"f": [1, 2, 3, 4], "g": [0, 0, 1, 1]}, advantages=[0, 0, 1, 1]))
    cols, rows = evidence_table([E("length-warn", stats.evidence("length")), E("samples-warn", stats.evidence())])
    assert cols[:5] == ["step", "alert", "why", "prompt", "completion"] and {"reward:f", "reward:g"} <= set(cols)
    assert len(rows) == len(stats.evidence("length")) + len(stats.evidence())
    assert all(len(r) == len(cols) for r in rows)
    lines = evidence_lines(stats.evidence())
    assert lines[0].startswith("top reward · reward 5 (f 4, g 1) · adv +1.00 · 1 chars") and lines[0].endswith('"w"')


def test_batch_from_trl_completions_table():
    cols = ["step", "prompt", "completion", "acc", "fmt", "note", "advantage"]
    data = [[5, "p", f"c{i}", float(i % 2), 1.0, "extra", 0.5] for i in range(8)]
    b = batch_from_table(cols, data, reward_names=["acc", "fmt"], weights=[1.0, 0.5], group_size=4)
    assert b is not None and b.step == 5 and len(b) == 8 and list(b.rewards) == ["acc", "fmt"]
    assert b.totals()[1] == 1.5 and b.advantages == [0.5] * 8 and b.length_unit == "chars"
    guessed = batch_from_table(cols, data)  # numeric columns between completion and advantage
    assert guessed is not None and list(guessed.rewards) == ["acc", "fmt"]
    assert batch_from_table(["a", "b"], [[1, 2]]) is None


# -- gauges -----------------------------------------------------------------------------------------------------


def _row(step: int, **rollouts: float) -> dict[str, float]:
    base = {"reward": 1.0, "completions/mean_length": 50.0, "frac_reward_zero_std": 0.1, "reward_std": 0.5,
            "step": step, "loss": 0.0}
    return base | {f"rollouts/{k}": v for k, v in rollouts.items()}


def test_gauges_read_rollout_keys_with_persistence_and_tunable_thresholds():
    c = InstrumentCluster(trainer="grpo")
    fired = []
    for s in range(1, 6):
        fired += c.update(_row(s, length_reward_corr=0.8, length_reward_dof=24, repetitive_frac=0.9,
                               repetition_mean=0.8, near_identical_group_frac=0.75, identical_group_frac=0.5,
                               empty_frac=0.0, **{"reward/acc/ceiling_frac": 0.9, "ceiling_frac_max": 0.9}))
    by = {(f.gauge, f.rule): f.step for f in fired}
    assert by[("length", "length-paid")] == 3
    assert by[("samples", "rollout-repetition")] == 2
    assert by[("samples", "identical-groups")] == 3
    assert by[("reward_signal", "reward-ceiling:acc")] == 5
    assert c.gauges["length"].derived["group_length_reward_corr"] == 0.8
    # a stricter threshold (alerts.yaml gauges: length: {rollout_paid_corr: 0.9}) keeps it quiet
    strict = InstrumentCluster(trainer="grpo", params={"length": {"rollout_paid_corr": 0.9}})
    quiet = [f for s in range(1, 6) for f in strict.update(_row(s, length_reward_corr=0.8, length_reward_dof=24))]
    assert not [f for f in quiet if f.rule == "length-paid"]
    # too few completions behind the correlation: no finding
    few = InstrumentCluster(trainer="grpo")
    assert not [f for s in range(1, 6) for f in few.update(_row(s, length_reward_corr=1.0, length_reward_dof=3))
                if f.rule == "length-paid"]


def test_notifier_journals_the_text_and_sends_numbers_only_when_asked(tmp_path, monkeypatch):
    """text_to_channels=False: the journal keeps the (redacted) completions, Slack gets the numbers only."""
    import threading
    from http.server import ThreadingHTTPServer

    from wandb_rlcluster.alerts import AlertEngine, load_config
    from wandb_rlcluster.alerts.notify import Notifier

    from .test_alerts_e2e import _Hook

    class Hook(_Hook):
        bodies: list[dict] = []

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("TEST_SLACK_WEBHOOK", f"http://127.0.0.1:{srv.server_address[1]}/services/T/B/notifier")
    rules = tmp_path / "alerts.yaml"
    rules.write_text("channels:\n  slack: {type: slack, webhook_url_env: TEST_SLACK_WEBHOOK, min_severity: warn}\n")
    config = load_config(str(rules))
    stats = RolloutStats()
    stats.update(batch(["secret plan: the the the the the the the", "b", "c", "d"], {"r": [5, 1, 1, 1]}))
    c = InstrumentCluster(trainer="grpo")
    engine = AlertEngine(config, clock=None)
    events = []
    for s in range(1, 4):
        row = _row(s, repetitive_frac=0.9, repetition_mean=0.8)
        events += engine.evaluate(s, row, c, c.update(row), c.last_updated)
    (e,) = [e for e in events if e.rule == "samples-warn"]
    e.evidence = stats.evidence("repetitive", redact=lambda t: t.replace("secret", "[x]"))
    try:
        for text_to_channels in (True, False):
            Hook.bodies.clear()
            n = Notifier(config, tmp_path / f"alerts-{text_to_channels}.jsonl", use_wandb=False)
            n.evidence_text = text_to_channels
            n.handle([e])
            n.close(5.0)
            records = [json.loads(x) for x in (tmp_path / f"alerts-{text_to_channels}.jsonl").read_text().splitlines()]
            alert = next(r for r in records if r["type"] == "alert")
            assert alert["evidence"][0]["completion"].startswith("[x] plan: the the")  # redacted, in the journal
            assert [r["outcome"] for r in records if r["type"] == "channel"] == ["sent"]
            (body,) = Hook.bodies
            blob = json.dumps(body)
            assert "Examples from step 2" in blob and "reward 5" in blob and "secret" not in blob
            assert ("[x] plan" in blob) is text_to_channels
    finally:
        srv.shutdown()
