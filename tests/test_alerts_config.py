"""alerts.yaml validation: every malformed case fails fast with FILE:LINE, a reason and a fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.alerts import ConfigError, load_config
from wandb_rlcluster.alerts.config import DEFAULT_PATH, parse_duration

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          timeout=120)


def test_shipped_rules_are_valid_and_root_file_is_the_shipped_one():
    cfg = load_config()
    assert not cfg.warnings
    names = {r.name for r in cfg.rules}
    assert {"kl-warn", "kl-stop", "seq-kl-warn", "seq-kl-stop"} <= names
    kl_stop = cfg.rule("kl-stop")
    assert kl_stop is not None and kl_stop.severity == "stop" and kl_stop.for_ == 3 and kl_stop.trainers == ("grpo",)
    if not DEFAULT_PATH.resolve().is_relative_to(REPO / "src"):  # make test-compiled: the package is the wheel's
        pytest.skip("the package under test is not the checkout's src/ (an installed wheel); the checkout's link is "
                    "checked when it is")
    assert (REPO / "alerts.yaml").resolve() == DEFAULT_PATH.resolve()
    p = cli("alerts", "validate", str(REPO / "alerts.yaml"))
    assert p.returncode == 0 and "OK" in p.stdout


BAD = [
    ("bad yaml", "rules:\n  - name: a\n    gauge: kl\n   when: 'kl > 1'\n", 4, "invalid YAML"),
    ("unknown severity", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    severity: critical\n", 5,
     "severity"),
    ("negative for", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    for: -2\n", 5, "'for' must be >= 1"),
    ("malformed expression", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl >> 1'\n", 4, "column"),
    ("unknown gauge", "rules:\n  - name: a\n    gauge: kll\n    when: 'kl > 1'\n", 3, "did you mean 'kl'"),
    ("wrong type", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    for: three\n", 5, "integer"),
    ("duplicate names", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n  - name: a\n    gauge: kl\n"
     "    when: 'kl > 2'\n", 5, "duplicate rule name"),
    ("unknown field", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    sevrity: warn\n", 5,
     "did you mean 'severity'"),
    ("bad duration", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    cooldown: soon\n", 5, "duration"),
    ("when and finding", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    finding: '*'\n", 2,
     "exactly one of"),
    ("template attribute", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n"
     "    title: '{value.__class__}'\n", 5, "not allowed"),
    ("secret in file", "channels:\n  slack:\n    type: slack\n    webhook_url: https://hooks.slack.com/x\n"
     "rules: []\n", 2, "never put secrets"),
    ("unknown channel", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    channels: [pager]\n", 5,
     "unknown channel"),
    ("unknown trainer", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    trainers: [grpoo]\n", 5,
     "did you mean 'grpo'"),
    ("unknown gauge param", "gauges:\n  kl:\n    stopp: 2.0\n", 3, "did you mean 'stop'"),
    ("gauge param not finite", "gauges:\n  kl:\n    warn: .nan\n", 3, "must be a finite number"),
    ("gauge param infinite", "gauges:\n  reward:\n    shift_h: .inf\n", 3, "must be a finite number"),
    ("shift clip not above 0", "gauges:\n  reward:\n    shift_clip: 0\n", 3, "must be above 0"),
    ("inhibits unknown", "rules:\n  - name: a\n    gauge: kl\n    when: 'kl > 1'\n    inhibits: [nope]\n", 5,
     "inhibits unknown rule"),
]


@pytest.mark.parametrize(("case", "text", "line", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_file_line_and_fix(tmp_path: Path, case: str, text: str, line: int, needle: str):
    f = tmp_path / "alerts.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    assert any(p.startswith(f"{f}:{line}: ") and needle in p for p in exc.value.problems), exc.value.problems
    p = cli("alerts", "validate", str(f))
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert f"{f}:{line}: " in p.stderr


def test_unknown_metric_is_a_warning_with_did_you_mean(tmp_path: Path):
    f = tmp_path / "a.yaml"
    f.write_text("rules:\n  - name: len\n    gauge: length\n    when: 'completions/mean_lenght > 500'\n"
                 "  - name: custom\n    gauge: reward\n    when: 'rewards/my_judge/mean < 0.1'\n")
    cfg = load_config(f)
    assert cfg.rule("len") is not None
    assert any(":4: warning" in w and "did you mean 'completions/mean_length'" in w for w in cfg.warnings)
    p = cli("alerts", "validate", str(f))
    assert p.returncode == 0 and "did you mean" in p.stderr


def test_user_file_overrides_by_name_and_disables(tmp_path: Path):
    f = tmp_path / "mine.yaml"
    f.write_text("rules:\n  - name: kl-stop\n    when: 'kl > 2.0'\n  - name: entropy-warn\n    enabled: false\n"
                 "  - name: my-rule\n    gauge: reward\n    when: 'reward < -1'\n    severity: warn\n")
    cfg = load_config(f)
    kl = cfg.rule("kl-stop")
    assert kl is not None and kl.when is not None and kl.when.text == "kl > 2.0"
    assert kl.for_ == 3 and kl.severity == "stop"  # the other fields are still the shipped ones
    assert cfg.rule("entropy-warn") is None
    assert cfg.rule("my-rule") is not None and cfg.rule("kl-warn") is not None


def test_extends_none_starts_empty(tmp_path: Path):
    f = tmp_path / "only.yaml"
    f.write_text("extends: none\nrules:\n  - name: only\n    gauge: kl\n    when: 'kl > 0.1'\n")
    assert [r.name for r in load_config(f).rules] == ["only"]


def test_missing_file_and_callback_fails_before_training(tmp_path: Path):
    from wandb_rlcluster import RLClusterCallback

    with pytest.raises(ConfigError, match="no such file"):
        RLClusterCallback(alerts=tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: a\n    gauge: kl\n    when: 'kl >'\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:4: "):
        RLClusterCallback(alerts=bad)


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600), ("1h30m", 5400), ("45s", 45), (90, 90), ("0", 0),
                                               ("soon", None), (-1, None), ("", None)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("params, says", [
    ({"reward": {"shift_k": "1"}}, "params.reward.shift_k must be like 1.0, not '1'"),
    ({"reward": {"shfit_k": 1.0}}, "did you mean 'shift_k'"),
    ({"kl": {"warn": float("nan")}}, "params.kl.warn must be a finite number"),
    ({"reward": {"shift_clip": 0}}, "params.reward.shift_clip must be above 0"),
    ({"diagnosis": {"clear": "5"}}, "params.diagnosis.clear must be like 5"),
    ({"policy_ratio": {"ratio_warn": (1.5, 0.7)}}, "must be finite, increasing and not negative"),
    ({"policy_ratio": {"ratio_warn": ["a", "b"]}}, "params.policy_ratio.ratio_warn must be like (0.7, 1.5)"),
    ({"length": {"drift": -1}}, "params.length.drift must be above 0"),
    ({"kl": {"noisy_p1": 1.0}}, "params.kl.noisy_p1 must be between 0 and 1"),
    ({"reward": {"runaway_share": 1e308}}, "params.reward.runaway_share must be at most 1e+09 in size"),
    ({"reward": {"runaway_share": 20.0}}, "params.reward.runaway_share is a share (above 1 turns its reading off)"),
    ({"reward": {"window": 10**400}}, "params.reward.window must be at most 1e+09 in size"),
    ({"reward": {"window": 10**7}}, "params.reward.window counts rows or items: at most 100,000"),
    ({"reward": {"window": -3}}, "params.reward.window counts rows or items: not below 0"),
    ({"reward": None}, "params.reward must be a mapping of parameter: value"),
    ({"rewrad": {}}, "unknown gauge id 'rewrad' (did you mean 'reward'?)"),
])
def test_python_params_are_checked_before_training_like_the_yaml(params, says):
    """The callback's ``params=`` get the checks ``alerts.yaml``'s ``gauges:`` get, when the callback is built: a
    string where a number belongs used to raise in the middle of the run (on the first row the rule read), and a
    misspelt name was ignored without a word. The defaults and a valid override still build."""
    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.core import analyze_rows

    with pytest.raises(ValueError, match=re.escape(says)):
        RLClusterCallback(params=params, alerts=False)
    with pytest.raises(ValueError, match=re.escape(says)):
        analyze_rows([{"step": 1.0, "reward": 0.1}], trainer="grpo", params=params)
    RLClusterCallback(params={"kl": {"warn": 0.3, "stop": 0.8}, "reward": {"shift_clip": 3}}, alerts=False)


def test_python_params_take_numpy_numbers_tuples_and_lists_and_a_checkpoint_keeps_them():
    """numpy numbers, a pair given as a list (JSON and YAML give tuples back as lists) and gold names as a tuple are
    made plain Python values; the callback's checkpoint arguments are JSON and rebuild the same callback. A
    checkpoint written by an older version with a parameter this one no longer has leaves it out with a warning
    (``restored``): transformers rebuilds the callback from the checkpoint, so raising would fail the resume."""
    import numpy as np

    from wandb_rlcluster import RLClusterCallback
    from wandb_rlcluster.core import InstrumentCluster

    params = {"kl": {"warn": np.float32(0.25)}, "reward": {"window": np.int64(20), "gold": ("verifier",)},
              "policy_ratio": {"ratio_warn": [0.6, 1.6]}}
    cluster = InstrumentCluster(trainer="ppo", params=params)
    assert cluster.params["kl"]["warn"] == 0.25 and type(cluster.params["kl"]["warn"]) is float
    assert cluster.params["reward"]["window"] == 20 and type(cluster.params["reward"]["window"]) is int
    assert cluster.params["policy_ratio"]["ratio_warn"] == (0.6, 1.6)
    assert cluster.gauges["reward"].p["gold"] == ["verifier"]
    cb = RLClusterCallback(params=params, alerts=False, log_to_wandb=False)
    args = json.loads(json.dumps(cb.state()))["args"]
    again = type(cb)(**args)
    assert again.params == cb.params and again.params["policy_ratio"]["ratio_warn"] == (0.6, 1.6)
    old = dict(args, params={"reward": {"shfit_k": 1.0, "shift_h": 10.0}})
    with pytest.raises(ValueError, match="did you mean 'shift_k'"):
        type(cb)(**dict(old, restored=False))
    resumed = type(cb)(**old)
    assert resumed.params == {"reward": {"shift_h": 10.0}}


def test_alerts_modules_import_no_circle():
    """config.py imports watchdog.py and located.py; neither imports config.py back (no import circle)."""
    import ast

    from wandb_rlcluster.alerts import located, watchdog

    for mod in (watchdog, located):
        tree = ast.parse(Path(mod.__file__).read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "config" not in imported, f"{mod.__name__} imports config back"
        assert not any(m and m.endswith("alerts.config") for m in imported)
