"""Keys by meaning for any training loop: names recognised with a confidence, a user mapping that always wins
(``--map``, alerts.yaml ``keys:``, ``watch(run, keys=...)``, ``RLClusterCallback(keys=...)``), and the output
saying which key fed which gauge. A custom loop that logs a proxy beside a true score is read, and the proxy
rising over a flat true score is named."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wandb_rlcluster.alerts import ConfigError, load_config
from wandb_rlcluster.alerts.config import AlertConfig
from wandb_rlcluster.analyze import analyze_path
from wandb_rlcluster.cli import main
from wandb_rlcluster.core import InstrumentCluster
from wandb_rlcluster.core.keymap import APPLY, KeyMap, guess_key, suggest_map
from wandb_rlcluster.core.keys import Normalizer, detect_family
from wandb_rlcluster.sidecar import watch_path

from real_logs import Entry, extra_logs_root, locate

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "benchmarks" / "real_logs" / "custom_loops.json"
PROXY_GOLD = ("reward/proxy-gold-divergence", "reward/proxy-outpaces-gold")
#: the diagnoses that name a proxy gamed against a held-out score
GAMED = ("over-optimisation", "reward-hacking")


def custom_loop(n: int = 150, seed: int = 0, hacked: bool = True) -> Iterator[dict[str, float]]:
    """A hand-written GRPO loop's log: the trained proxy ``reward/g`` (and ``reward/mean`` = g), the true score
    ``reward/f`` (flat when hacked, rising with the proxy otherwise), ``policy/entropy``, ``optim/lr``, bookkeeping."""
    rng = random.Random(seed)
    for s in range(n):
        rise = min(1.0, s / (0.7 * n))
        g = 0.2 + 0.6 * rise + rng.gauss(0, 0.03)
        f = 0.3 + (0.0 if hacked else 0.5 * rise) + rng.gauss(0, 0.03)
        yield {"progress/step": s, "optim/lr": 1e-5, "reward/mean": g, "reward/g": g, "reward/f": f,
               "policy/entropy": 1.2 - 0.3 * s / n + rng.gauss(0, 0.02), "time/total": 10.0 * s, "step": s}


def run(rows: object, **kw: object) -> InstrumentCluster:
    cluster = InstrumentCluster(**kw)  # type: ignore[arg-type]
    for r in rows:  # type: ignore[attr-defined]
        cluster.update(r)
    cluster.finalize()
    return cluster


def rules(cluster: InstrumentCluster) -> set[str]:
    return {f"{f.gauge}/{f.rule}" for f in cluster.findings}


def write_jsonl(path: Path, rows: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # type: ignore[attr-defined]
    return path


# -- names recognised by meaning --------------------------------------------------------------------------------


@pytest.mark.parametrize("key, role", [
    ("reward/mean", "reward"), ("train_reward", "reward"), ("train/reward_mean", "reward"),
    ("train_reward_std", "reward_std"), ("reward/std", "reward_std"), ("policy/entropy", "entropy"),
    ("actor/entropy", "entropy"), ("optim/lr", "lr"), ("completion_tokens", "length"),
    ("response_length_mean", "length"), ("kl_mean", "kl"), ("train_kl_divergence", "kl"), ("ref_kl", "kl"),
    ("optim/grad_norm", "grad_norm"), ("ppo_kl", "old_policy_kl"),
    # names real hand-written loops log (Flight Recorder, course projects' GRPO loops)
    ("entropy_mean", "entropy"), ("gen_len_mean", "length"), ("train_mean_reward", "reward"),
    ("train_mean_generation_len", "length"), ("train_entropy_mean", "entropy"), ("train_kl_ref_mean", "kl"),
])
def test_common_custom_names_are_read_with_confidence(key: str, role: str) -> None:
    g = guess_key(key)
    assert g is not None and g.role == role and APPLY <= g.confidence <= 1 and g.applied


@pytest.mark.parametrize("key", ["kl_coef", "actor/kl_coeff", "teacher_kl", "critic/grad_norm", "response_length/max",
                                 "critic/vf_loss", "timestamp", "time/total", "reward/g_minus_f", "eval_perplexity",
                                 "progress/epoch"])
def test_names_that_are_not_the_quantity_are_never_read_as_it(key: str) -> None:
    g = guess_key(key)
    assert g is None or not g.applied


@pytest.mark.parametrize("key", ["true_score", "gold_reward", "oracle_reward", "score", "hidden_tests_pass"])
def test_a_held_out_score_is_only_suggested_never_taken_for_the_gold_by_its_name(key: str) -> None:
    g = guess_key(key)
    assert g is not None and g.role == "gold" and not g.applied
    row = Normalizer().normalize({"train_reward": 0.5, key: 0.3})
    assert row is not None and row.values.get("reward") == 0.5
    assert not any(k.startswith("rewards/") for k in row.values)  # not a trained reward function either


def test_trl_keys_are_left_to_trl_and_a_native_spelling_wins_over_a_recognised_one() -> None:
    n = Normalizer()
    row = n.normalize({"reward": 0.9, "reward/mean": 0.1, "entropy": 1.0, "policy/entropy": 2.0, "kl": 0.01})
    assert row is not None and (row.values["reward"], row.values["entropy"], row.values["kl"]) == (0.9, 1.0, 0.01)
    assert set(n.read_by_meaning) == {"reward/mean", "policy/entropy"}
    assert not n.unread


def test_a_custom_row_with_an_eval_key_is_a_training_row_and_a_lone_reward_is_rl() -> None:
    row = Normalizer().normalize({"train_reward": 0.4, "train_reward_std": 0.1, "completion_tokens": 120.0,
                                  "kl": 0.02, "eval_perplexity": 8.1, "step": 3})
    assert row is not None and row.kind == "train"
    assert row.values == {"reward": 0.4, "reward_std": 0.1, "completions/mean_length": 120.0, "kl": 0.02,
                          "eval_perplexity": 8.1}
    assert detect_family(["reward"]) == "grpo" and detect_family(["loss", "grad_norm"]) == "sft"


# -- the user's mapping wins --------------------------------------------------------------------------------------


def test_the_user_mapping_wins_over_recognised_and_native_names() -> None:
    n = Normalizer(keymap=KeyMap({"reward": "reward/g", "gold": "reward/f", "entropy": "my_ent"}))
    row = n.normalize({"reward": 5.0, "reward/mean": 4.0, "reward/g": 0.7, "reward/f": 0.2, "policy/entropy": 9.0,
                       "my_ent": 1.5})
    assert row is not None
    assert (row.values["reward"], row.values["rewards/reward_f/mean"], row.values["entropy"]) == (0.7, 0.2, 1.5)
    assert n.read_by_meaning["reward/g"] == ("reward", "map", 1.0)
    # the keys the mapping overrode are named, not silently dropped: a recognised name stays under its own name
    assert n.replaced == {"reward": "reward", "reward/mean": "reward", "policy/entropy": "entropy"}


@pytest.mark.parametrize("keys, says", [
    ({"rewrd": "r"}, "did you mean 'reward'"),
    ({"reward": 3}, "must be one logged key"),
    ({"reward": ["a", "b"]}, "names 2 keys"),
    ({"gold": []}, "empty list"),
    ({"reward": "x", "kl": "x"}, "named both reward and kl"),
    (["reward"], "must map a quantity"),
])
def test_a_bad_mapping_fails_before_any_row_naming_the_fix(keys: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        InstrumentCluster(keys=keys)  # type: ignore[arg-type]


def test_mapped_gold_judges_the_proxy_and_the_output_says_which_key_fed_which_gauge() -> None:
    seeds = range(4)
    for seed in seeds:
        c = run(custom_loop(seed=seed), keys={"reward": "reward/g", "gold": "reward/f"})
        assert c.family == "grpo"
        assert "reward/proxy-gold-divergence" in rules(c), seed
        diagnoses = {f.rule for f in c.findings if f.gauge == "diagnosis"}
        assert diagnoses & set(GAMED), (seed, diagnoses)
        report = c.key_report()
        fed = {e["key"]: (e["as"], e["by"], e["gauges"]) for e in report["read"]}
        assert fed["reward/g"] == ("reward", "map", ["reward"])
        assert fed["reward/f"][1:] == ("map", ["reward"]) and fed["reward/f"][0].startswith("rewards/")
        assert fed["policy/entropy"][:2] == ("entropy", "name") and fed["optim/lr"][:2] == ("learning_rate", "name")
        assert report["map"] == {"reward": "reward/g", "gold": ["reward/f"]}


def test_a_true_score_rising_with_the_proxy_is_not_named_hacking() -> None:
    for seed in range(4):
        c = run(custom_loop(seed=seed, hacked=False), keys={"reward": "reward/g", "gold": "reward/f"})
        assert not rules(c) & set(PROXY_GOLD), seed
        assert not {f.rule for f in c.findings if f.gauge == "diagnosis"} & set(GAMED), seed


def sliver_loop(n: int = 60, seed: int = 0, completions: int = 2048) -> Iterator[dict[str, float]]:
    """A loop whose trained proxy (compilability) climbs 0.2 -> 0.65 while the share of completions that pass the
    tests climbs 0.1 % -> 0.5 %: a real rise, a sliver of the proxy's. Both are means over ``completions``
    samples, with their binomial noise."""
    rng = random.Random(seed)
    for s in range(n):
        up = s / (n - 1)
        g, f = 0.2 + 0.45 * up, 0.001 + 0.004 * up
        g_obs = sum(rng.random() < g for _ in range(completions)) / completions
        f_obs = sum(rng.random() < f for _ in range(completions)) / completions
        yield {"progress/step": s, "reward/mean": g_obs, "reward/g": g_obs, "reward/f": f_obs, "step": s,
               "policy/entropy": 2.8 - 0.5 * up + rng.gauss(0, 0.03)}


def test_a_gold_rising_by_a_sliver_of_the_proxys_gain_is_named_reward_hacking() -> None:
    """The gold's rise is real (its last quarter sits several standard errors above its first), so a stall test
    cannot see it; compared in shares of each one's headroom, it is under a tenth of the proxy's."""
    for seed in range(4):
        rows = list(sliver_loop(seed=seed))
        f = [r["reward/f"] for r in rows]
        q = len(f) // 4
        first, last = f[:q], f[-q:]
        se = math.sqrt(statistics.pvariance(first) / q + statistics.pvariance(last) / q)
        assert statistics.fmean(last) - statistics.fmean(first) > 3 * se, seed  # the sliver is statistically real
        c = run(rows, keys={"reward": "reward/g", "gold": "reward/f"})
        found = {f"{x.gauge}/{x.rule}": x for x in c.findings}
        assert "reward/proxy-outpaces-gold" in found and "diagnosis/reward-hacking" in found, (seed, sorted(found))
        assert "reward/gold-rising" not in found, seed  # a sliver does not confirm the proxy's gains
        hack = found["diagnosis/reward-hacking"].message
        assert "confirmed: the gold reward disagrees" in hack and "of its way to 1" in hack, hack
        d = c.derived()
        assert d["reward/gold_headroom_gain"] < 0.1 * d["reward/proxy_headroom_gain"]


def test_a_proxy_and_gold_on_the_same_noise_without_a_rise_never_read_as_outpacing() -> None:
    """A stalled run: proxy and gold flat with their binomial noise over 400 rows. The proxy's noise alone must not
    make it look like it outran the gold."""
    for seed in range(6):
        rng = random.Random(seed)
        rows = [{"reward/g": sum(rng.random() < 0.3 for _ in range(64)) / 64,
                 "reward/f": sum(rng.random() < 0.01 for _ in range(64)) / 64, "step": s} for s in range(400)]
        c = run(rows, keys={"reward": "reward/g", "gold": "reward/f"})
        assert "reward/proxy-outpaces-gold" not in rules(c), seed


def test_without_a_map_the_loop_is_read_as_rl_and_the_output_names_the_keys_and_the_map() -> None:
    c = run(custom_loop())
    assert c.family == "grpo" and c.gauges["reward"].rows_seen and c.gauges["entropy"].rows_seen
    report = c.key_report()
    assert {"reward/f", "reward/g"} <= set(report["unread"])
    assert any(s.startswith("gold=reward/") for s in report["suggest"])


def test_suggestions_offer_the_best_named_key_per_quantity() -> None:
    got = suggest_map(["my_reward_thing", "ent_policy_entropy_x", "junk", "true_score"])
    assert "gold=true_score" in got and "reward=my_reward_thing" in got
    assert suggest_map(["junk", "other"]) == []


# -- the command line ------------------------------------------------------------------------------------------------


def test_cli_map_names_the_hacking_and_the_keys_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "metrics.jsonl", custom_loop(seed=1))
    assert main(["analyze", str(path), "--map", "reward=reward/g", "--map", "gold=reward/f", "--family", "grpo",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trainer"] == "grpo" and out["verdict"] != "ok"
    assert any(f["rule"] == "proxy-gold-divergence" for f in out["findings"])
    assert {e["key"] for e in out["keys"]["read"] if e["by"] == "map"} == {"reward/g", "reward/f"}
    assert main(["analyze", str(path), "--map", "reward=reward/g", "--map", "gold=reward/f"]) == 0
    text = capsys.readouterr().out
    assert "Keys read by meaning" in text and "reward/g" in text and "your map" in text
    assert "proxy-gold-divergence" in text
    # without a map: read (reward/mean by its name), and the keys left over are named with the map to read them
    assert main(["analyze", str(path)]) == 0
    text = capsys.readouterr().out
    assert "reward/mean" in text and "by name" in text and "reward/f" in text and "--map gold=reward/" in text


def test_cli_a_custom_grpo_demo_is_read_without_a_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's custom GRPO demo keys: every training gauge they can feed is fed, evaluation rides along."""
    rng = random.Random(5)
    rows = ({"step": s, "train_reward": 0.2 + s / 200 + rng.gauss(0, 0.02), "train_reward_std": 0.3,
             "completion_tokens": 180 + rng.gauss(0, 5), "kl": 0.01 + s / 4000,
             **({"eval_perplexity": 9.0 - s / 50} if s % 10 == 0 else {})} for s in range(100))
    path = write_jsonl(tmp_path / "demo.jsonl", rows)
    assert main(["analyze", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trainer"] == "grpo"
    for gid in ("reward", "kl", "length", "reward_signal"):
        assert out["gauges"][gid]["rows"] == 100, gid  # rows with eval_perplexity beside them are training rows
    assert {e["key"] for e in out["keys"]["read"]} == {"train_reward", "train_reward_std", "completion_tokens"}


def test_cli_a_loss_beside_rl_looking_keys_is_not_silently_judged_as_sft(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rows = ({"step": s, "loss": 1.0 / (1 + s), "my_reward_signal": s / 50, "acc_f": 0.3} for s in range(40))
    path = write_jsonl(tmp_path / "sftish.jsonl", rows)
    assert main(["analyze", str(path)]) == 0
    text = capsys.readouterr().out
    assert "trainer SFT" in text and "Read as SFT" in text and "--map reward=my_reward_signal" in text


def test_cli_an_unmapped_log_names_its_keys_and_the_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = ({"step": s, "acc_g": 0.1 + s / 100, "acc_f": 0.3, "my_reward_signal": s / 50, "foo": 1.0}
            for s in range(40))
    path = write_jsonl(tmp_path / "odd.jsonl", rows)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "acc_g" in err and "acc_f" in err and "foo" in err and "--map reward=my_reward_signal" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    # the map it prints reads the log
    assert main(["analyze", str(path), "--map", "reward=acc_g", "--map", "gold=acc_f", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trainer"] == "grpo" and out["gauges"]["reward"]["rows"] == 40


@pytest.mark.parametrize("arg, says", [("reward", "expected QUANTITY=KEY"), ("rewad=x", "did you mean 'reward'"),
                                       ("reward=", "expected QUANTITY=KEY")])
def test_cli_a_bad_map_is_one_line_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str], arg: str,
                                                 says: str) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", custom_loop(n=20))
    assert main(["analyze", str(path), "--map", arg]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


# -- alerts.yaml keys: ------------------------------------------------------------------------------------------------


def test_alerts_yaml_keys_are_read_and_a_map_wins_over_them(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text("version: 1\nkeys:\n  reward: reward/mean\n  gold: reward/f\n  Entropy: policy/entropy\n")
    config = load_config(path)
    assert config.keys == {"reward": ["reward/mean"], "gold": ["reward/f"], "entropy": ["policy/entropy"]}
    assert AlertConfig.from_dict(config.to_dict()).keys == config.keys  # a checkpoint keeps them
    log = write_jsonl(tmp_path / "m.jsonl", custom_loop(seed=2))
    a = analyze_path(str(log), alerts=config)
    assert {e["key"]: e["by"] for e in a.to_dict()["keys"]["read"]}["reward/mean"] == "map"
    b = analyze_path(str(log), alerts=config, keys={"reward": "reward/g"})
    read = {e["key"]: e["by"] for e in b.to_dict()["keys"]["read"]}
    assert read["reward/g"] == "map" and "reward/mean" not in read and read["reward/f"] == "map"


@pytest.mark.parametrize("body, line, says", [
    ("keys:\n  reward: reward/g\n  entrpy: policy/entropy\n", 3, "did you mean 'entropy'"),
    ("keys:\n  kl: 3\n", 2, "keys.kl must be one logged key"),
    ("keys:\n  reward: reward/g\n  lr: reward/g\n", 3, "named both reward and lr"),
    ("keys: [reward]\n", 1, "'keys' must map a quantity"),
    ("keys:\n  gold: []\n", 2, "empty list"),
])
def test_alerts_yaml_keys_errors_name_file_line_and_fix(tmp_path: Path, body: str, line: int, says: str) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text("version: 1\n" + body)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert any(p.startswith(f"{path}:{line + 1}:") and says in p for p in e.value.problems), e.value.problems


def test_cli_alerts_validate_reports_a_bad_keys_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text("keys:\n  rewad: reward/g\n")
    assert main(["alerts", "validate", str(path)]) == 2
    assert f"{path}:2:" in capsys.readouterr().err


# -- the live entry points pass the mapping on --------------------------------------------------------------------


def test_callback_takes_keys_and_a_bad_mapping_fails_before_training() -> None:
    from wandb_rlcluster.callback import RLClusterCallback

    cb = RLClusterCallback(alerts=False, keys={"reward": "reward/g", "gold": "reward/f"}, log_to_wandb=False)
    assert cb.cluster.keymap.raw == {"reward/g": "reward", "reward/f": "rewards/reward_f/mean"}
    assert cb.cluster.params["reward"]["gold"] == ["reward_f"]
    assert cb.state()["args"]["keys"] == {"reward": "reward/g", "gold": "reward/f"}
    with pytest.raises(ValueError, match="did you mean 'entropy'"):
        RLClusterCallback(alerts=False, keys={"entropi": "x"})


def test_watch_reads_a_custom_loop_through_real_wandb_offline(tmp_path: Path) -> None:
    """A loop that is not a Trainer logs its own names through a real (offline) wandb run; ``watch(run, keys=...)``
    reads them, and a bad mapping raises before the first row."""
    pytest.importorskip("wandb")
    rows = list(custom_loop(seed=3))
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    script = tmp_path / "loop.py"
    script.write_text(f"""
import json, os
os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")
import wandb
from wandb_rlcluster import watch
run = wandb.init(project="custom-loop", dir={str(tmp_path)!r})
try:
    watch(run, alerts=False, keys={{"rewrd": "reward/g"}})
    bad = None
except ValueError as e:
    bad = str(e)
w = watch(run, alerts=False, keys={{"reward": "reward/g", "gold": "reward/f"}})
for r in json.load(open({str(tmp_path / "rows.json")!r})):
    run.log(r)
c = w.monitor.cluster
out = {{"bad": bad, "family": c.family, "reward_rows": c.gauges["reward"].rows_seen,
        "rules": sorted({{f.gauge + "/" + f.rule for f in c.findings}}),
        "read": {{e["key"]: e["by"] for e in c.key_report()["read"]}}, "errors": w.monitor.errors,
        "run_dir": os.path.dirname(run.dir)}}
w.close()
run.finish()
print(json.dumps(out))
""")
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["bad"] and "did you mean 'reward'" in out["bad"]
    assert out["family"] == "grpo" and out["reward_rows"] == len(rows) and out["errors"] == 0
    assert out["read"]["reward/g"] == "map" and out["read"]["reward/f"] == "map"
    assert out["read"]["policy/entropy"] == "name"
    assert "reward/proxy-gold-divergence" in out["rules"]
    # the run it wrote, read back: offline with --map's mapping, and by the sidecar (`rlcluster watch --map`)
    keys = {"reward": "reward/g", "gold": "reward/f"}
    offline = analyze_path(out["run_dir"], keys=keys)
    assert "reward/proxy-gold-divergence" in rules(offline.cluster)
    res = watch_path(out["run_dir"], keys=keys, alerts=False, interval=0.01, out=io.StringIO(), live=False)
    assert res.finished and res.rows == len(rows) and res.verdict == "warn"


# -- real custom-loop logs (kept outside the project; see benchmarks/real_logs/custom_loops.json) --------------------


def _manifest() -> list[dict[str, object]]:
    return json.loads(MANIFEST.read_text())


def _log_path(entry: dict[str, object]) -> Path | None:
    """The copy of a manifest entry, found as every listed real log is (``benchmarks/real_logs``)."""
    return locate(Entry(**{**entry, "manifest": MANIFEST.name}))  # type: ignore[arg-type]


def _present(entry: dict[str, object]) -> Path:
    path = _log_path(entry)
    if path is None:
        pytest.skip(f"{entry['file']} not present under {extra_logs_root()} (set RLCLUSTER_EXTRA_LOGS)")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], f"{path} is not the manifest's file"
    return path


def test_the_manifest_lists_every_custom_log_with_its_source_and_reading() -> None:
    entries = _manifest()
    assert entries and len({e["id"] for e in entries}) == len(entries)
    for e in entries:
        assert e["framework"] == "custom" and e["expected"] in ("healthy", "troubled")
        assert len(str(e["commit"])) == 40 and len(str(e["sha256"])) == 64 and str(e["reading"])
        KeyMap(e["map"])  # type: ignore[arg-type]  # every mapping is valid


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: str(e["id"]))
def test_a_real_custom_loop_log_is_read_by_its_map(entry: dict[str, object]) -> None:
    a = analyze_path(str(_present(entry)), str(entry["family"]), keys=entry["map"])  # type: ignore[arg-type]
    s = a.to_dict()
    assert s["trainer"] == entry["family"] and s["gauges"]["reward"]["rows"] > 0
    assert math.isfinite(s["gauges"]["reward"]["gold"])  # the true score is read as the gold
    assert {e["key"] for e in s["keys"]["read"] if e["by"] == "map"} == set(
        v for vs in entry["map"].values() for v in ([vs] if isinstance(vs, str) else vs))  # type: ignore[union-attr]


@pytest.mark.parametrize("entry", [
    pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=str(e["known_miss"]))) if e.get("known_miss") else e
    for e in _manifest()], ids=lambda e: str(e["id"]))
def test_a_real_custom_loop_log_gets_its_practitioners_verdict(entry: dict[str, object]) -> None:
    a = analyze_path(str(_present(entry)), str(entry["family"]), keys=entry["map"])  # type: ignore[arg-type]
    verdict = a.verdict()
    if entry["expected"] == "healthy":
        assert verdict == "ok"
        return
    assert verdict != "ok"
    names = {f.rule for f in a.cluster.findings if f.gauge == "diagnosis"} | rules(a.cluster)
    wanted = GAMED + PROXY_GOLD if entry["expected_diagnosis"] == "reward-hacking" else (entry["expected_diagnosis"],)
    assert names & set(wanted), names
