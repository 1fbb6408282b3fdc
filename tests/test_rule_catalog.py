"""The rule catalog: every rule the core can raise is a declared entry with an example that fires by
its row and a healthy stream it stays quiet on; the reference page is generated from it and never stale; impossible
values are a finding.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from wandb_rlcluster.cli import main
from wandb_rlcluster.core import analyze_rows
from wandb_rlcluster.core.breaks_gauge import BREAKS_ID
from wandb_rlcluster.core.catalog import (
    ANY_GAUGE,
    CATALOG,
    EXAMPLES,
    INSTRUMENTS,
    POST,
    budget,
    by_key,
    gauge_class,
    raised_rules,
    threshold_text,
    thresholds,
)
from wandb_rlcluster.core.cluster import GAUGE_IDS, InstrumentCluster
from wandb_rlcluster.core.diagnosis import DIAGNOSIS_ID
from wandb_rlcluster.core.policy_ratio import PolicyRatioGauge
from wandb_rlcluster.core.sanity import RANGES, RULE
from wandb_rlcluster.core.streams import ppo
from wandb_rlcluster.rules_reference import LINES, plot_key, plot_name, render_pages

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "src" / "wandb_rlcluster" / "core"


def hits(rule, firing: bool):
    ex = rule.example
    cluster = analyze_rows(ex.rows(firing), trainer=ex.trainer, **ex.kwargs)
    return [f for f in cluster.findings
            if f.rule.split(":")[0] == rule.id and (rule.gauge == ANY_GAUGE or f.gauge == rule.gauge)]


# -- the catalog against the source -----------------------------------------------------------------------------------


def test_every_rule_the_code_can_raise_has_an_entry_and_every_entry_is_raised():
    raised = raised_rules(CORE)  # read afresh from the source files, not the cached scan
    unresolved = sorted(r for r in raised if r.startswith("?"))
    assert not unresolved, f"rule ids the catalog's reader cannot resolve (teach raised_rules): {unresolved}"
    assert len(raised) >= 100  # the scan reads the real gauges (106 ids when the catalog was written)
    ids = {r.id for r in CATALOG}
    assert not set(raised) - ids, f"raised but not in the catalog: {sorted(set(raised) - ids)}"
    assert not ids - set(raised), f"in the catalog but never raised: {sorted(ids - set(raised))}"
    assert len(by_key()) == len(CATALOG), "two entries for one (gauge, rule)"


def test_declared_severities_are_the_ones_the_code_raises():
    """A declaration states its severities beside the rule; the source's ``check`` calls are what counts."""
    raised = raised_rules(CORE)
    for r in CATALOG:
        assert set(r.severities) == raised.get(r.id, set()), (
            f"{r.key}: declared {r.severities}, the code raises {sorted(raised.get(r.id, set()))}")
        assert list(r.severities) == sorted(r.severities, key=("info", "warn", "stop").index), r.key


def test_the_catalog_lists_the_gauges_declarations_in_gauge_order():
    order = [*GAUGE_IDS, BREAKS_ID, ANY_GAUGE, DIAGNOSIS_ID]
    gauges = [r.gauge for r in CATALOG]
    assert gauges == sorted(gauges, key=order.index)
    assert set(gauges) == set(order)


def test_the_reader_finds_every_way_a_rule_id_is_written(tmp_path):
    """A literal id, an f-string per reward function, a prefix template, a constant imported under another name,
    the diagnoser's patterns; anything else comes back unresolved (so the catalog test fails, not passes)."""
    (tmp_path / "names.py").write_text('RULE = "made-up-range"\n')
    (tmp_path / "mod.py").write_text(
        "from .names import RULE as OTHER\n"
        "class NonFiniteTracker:\n"
        "    def check(gauge, key, value, prefix):\n"
        "        gauge.check(f'{prefix}-broken', True, 'warn', key, value, '')\n"
        "def rules(self, fn, rid):\n"
        "    self.check('plain-rule', True, 'info', 'k', 1.0, '')\n"
        "    self.check(f'per-fn:{fn}', True, 'warn', 'k', 1.0, '')\n"
        "    NonFiniteTracker.check(self, 'k', 1.0, 'thing')\n"
        "    self.check(pat.name, True, 'warn', '', None, '')\n"
        "    self.check(rid, True, 'stop', 'k', 1.0, '')\n"
        "    Finding('g', OTHER, 'warn', 1, 'k', 1.0, '')\n")
    found = raised_rules(tmp_path)
    assert found["plain-rule"] == {"info"} and found["per-fn"] == {"warn"} and found["thing-broken"] == {"warn"}
    assert found["made-up-range"] == {"warn"} and found["dead-run"] == {"warn"}
    assert "?rid" in found


def test_every_entry_is_complete_and_its_parameters_are_the_gauges():
    for r in CATALOG:
        assert r.reads and r.test and r.means and r.fix, r.key
        assert r.severities and set(r.severities) <= {"info", "warn", "stop"}, (r.key, r.severities)
        assert (r.seed == "none") == (r.seed_source == ""), r.key
        assert r.seed_source in ("", POST, INSTRUMENTS), r.key
        cls = gauge_class(r.gauge)
        for name in r.params:
            assert cls is not None, r.key
            known = set(cls.defaults) | {k for fd in cls.family_defaults.values() for k in fd}
            assert name in known, f"{r.key}: {name} is not a parameter of {cls.__name__}"


def test_thresholds_are_read_from_the_gauge_not_copied(monkeypatch):
    clip = by_key()[("policy_ratio", "clip-high")]
    assert thresholds(clip)["clip_warn"] == {"default": 0.3, "grpo": 0.4}
    monkeypatch.setitem(PolicyRatioGauge.family_defaults, "grpo", {"clip_warn": 0.45, "clip_stop": 0.6})
    assert "grpo: 0.45" in threshold_text(clip)


def _normal(text: str) -> str:
    return " ".join(text.replace("*", "").split())


def test_seed_words_are_quoted_verbatim():
    shared_dir = ROOT.parent / "shared"
    texts = {POST: (shared_dir / "seed" / "post-training-instrument-cluster-part-2.txt"),
             INSTRUMENTS: shared_dir / "INSTRUMENTS.md"}
    if not all(p.exists() for p in texts.values()):
        pytest.skip("shared/ (the seed and INSTRUMENTS.md) is not beside this checkout")
    corpus = {k: _normal(p.read_text(encoding="utf-8")) for k, p in texts.items()}
    for r in CATALOG:
        if r.seed_source:
            assert _normal(r.seed) in corpus[r.seed_source], f"{r.key}: not in {r.seed_source}: {r.seed!r}"


# -- every example, through the real analyzer ---------------------------------------------------------------------


@pytest.mark.parametrize("rule", CATALOG, ids=[f"{r.gauge}/{r.id}" for r in CATALOG])
def test_rule_fires_by_its_row_and_stays_quiet_on_its_healthy_stream(rule):
    ex = rule.example
    fired = hits(rule, True)
    assert fired, f"{rule.key} did not fire on its example"
    first = fired[0]
    assert ex.onset <= first.step <= ex.fire_by, (f"{rule.key} fired at row {first.step}, expected between its onset "
                                                  f"{ex.onset} and row {ex.fire_by}: {first.message}")
    assert first.severity in rule.severities and first.message
    quiet = hits(rule, False)
    assert not quiet, f"{rule.key} fired on its healthy stream at row {quiet[0].step}: {quiet[0].message}"


def test_examples_are_deterministic_and_the_same_length():
    for key, ex in EXAMPLES.items():
        a, b = ex.rows(True), ex.rows(True)
        assert json.dumps(a) == json.dumps(b), key
        assert len([r for r in a if "eval_loss" not in r]) == len([r for r in ex.rows(False) if "eval_loss" not in r])


# -- the seed's lines, with their sources in the message ----------------------------------------------------------


def _grpo_clip(level: float, n: int = 80) -> list[dict[str, float]]:
    g = np.random.default_rng(3)
    return [{"step": i, "reward": 0.5 + 0.05 * g.normal(), "learning_rate": 1e-6,
             "clip_ratio/region_mean": level + 0.01 * g.normal()} for i in range(1, n + 1)]


def test_a_grpo_run_at_35_percent_clipped_is_silent_and_the_message_says_why_40():
    """The post's 30 % is PPO's; the series' GRPO guidance (Part III) calls over 40 % excessive and 10-30 % healthy."""
    quiet = analyze_rows(_grpo_clip(0.35), trainer="grpo")
    assert not [f for f in quiet.findings if f.rule == "clip-high"]
    loud = [f for f in analyze_rows(_grpo_clip(0.45), trainer="grpo").findings if f.rule == "clip-high"]
    assert loud and "Part III" in loud[0].message and "40 %" in loud[0].message
    rows = [{"step": i, **ppo(i, np.random.default_rng(i), clip=0.35)} for i in range(1, 60)]
    ppo_hit = [f for f in analyze_rows(rows, trainer="ppo").findings if f.rule == "clip-high"]
    assert ppo_hit and "the post's line" in ppo_hit[0].message
    custom = [f for f in analyze_rows(_grpo_clip(0.45), trainer="grpo",
                                      params={"policy_ratio": {"clip_warn": 0.42}}).findings if f.rule == "clip-high"]
    assert custom and "your clip_warn" in custom[0].message


def test_ratio_outside_the_posts_outer_band_warns_and_does_not_stop():
    """The post: 'if it regularly exceeds 2.0 or drops below 0.5, the policy updates are too aggressive' -- a
    warning, not a stop sign (only KL > 1.0 is called that)."""
    rows = [{"step": i, **ppo(i, np.random.default_rng(i), ratio=2.5 if i > 30 else 1.0)} for i in range(1, 60)]
    cluster = analyze_rows(rows, trainer="ppo")
    out = [f for f in cluster.findings if f.rule in ("ratio-stop", "ratio-warn")]
    assert {f.rule: f.severity for f in out} == {"ratio-stop": "warn", "ratio-warn": "warn"}
    assert all(f.step >= 31 for f in out) and "regularly exceeds 2.0" in out[0].message + out[1].message
    assert cluster.verdict() == "warn"


# -- sanity of values ---------------------------------------------------------------------------------------------

# the key shape of a real TRL PPO log (shared/real-logs/ppo_trl_kartik_v1_seed2026.json)
PPO_KEYS = ("eps", "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
            "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
            "val/clipfrac_avg", "policy/entropy_avg", "val/ratio", "val/ratio_var", "val/num_eos_tokens", "lr",
            "episode", "epoch")


def _ppo_log(n: int = 100, entropy: float = 25.0, seed: int = 0) -> list[dict[str, float]]:
    g = np.random.default_rng(seed)
    rows = []
    for i in range(1, n + 1):
        kl = 0.2 + 0.01 * i + 0.05 * g.normal()
        scores = 0.1 + 0.004 * i + 0.05 * g.normal()
        rows.append({"eps": 0, "objective/kl": kl, "objective/entropy": entropy + 0.5 * g.normal(),
                     "objective/non_score_reward": -0.05 * kl, "objective/rlhf_reward": scores - 0.05 * kl,
                     "objective/scores": scores, "policy/approxkl_avg": 0.01 + 0.002 * g.normal(),
                     "policy/clipfrac_avg": abs(0.06 + 0.01 * g.normal()), "loss/policy_avg": 0.01 * g.normal(),
                     "loss/value_avg": abs(0.5 + 0.05 * g.normal()), "val/clipfrac_avg": abs(0.02 * g.normal()),
                     "policy/entropy_avg": 0.34 + 0.01 * g.normal(), "val/ratio": 1.0 + 0.01 * g.normal(),
                     "val/ratio_var": 1e-4, "val/num_eos_tokens": 24.0, "lr": 5e-6, "episode": 4 * i,
                     "epoch": 0.01 * i, "step": i})
    assert set(rows[0]) == {*PPO_KEYS, "step"}
    return rows


def test_a_ppo_log_with_negative_entropy_on_every_step_gets_the_sanity_finding_once():
    cluster = analyze_rows(_ppo_log(entropy=-106.0))
    assert cluster.family == "ppo"
    found = [f for f in cluster.findings if f.rule == RULE]
    assert len(found) == 1, found
    f = found[0]
    assert (f.gauge, f.severity, f.metric, f.step) == ("entropy", "warn", "objective/entropy", 1)
    assert f.value is not None and f.value < -100
    assert "objective/entropy" in f.message and "[0, inf)" in f.message and "sign" in f.message
    assert cluster.verdict() == "warn"
    healthy = analyze_rows(_ppo_log(entropy=25.0))
    assert not [f for f in healthy.findings if f.rule == RULE] and healthy.verdict() == "ok"


def test_impossible_shares_ratios_and_sizes_are_findings_and_float_noise_is_not():
    rows = _ppo_log(60)
    rows[10]["policy/clipfrac_avg"] = 6.4  # a percentage logged as a share
    rows[20]["val/ratio"] = 0.0  # a probability ratio cannot be 0
    rows[30]["val/clipfrac_avg"] = 1.0 + 1e-9  # float noise at the bound
    rows[40]["loss/value_avg"] = float("nan")  # non-finite: the nonfinite rules' business, not this one
    found = {f.metric: f for f in analyze_rows(rows, trainer="ppo").findings if f.rule == RULE}
    assert set(found) == {"policy/clipfrac_avg", "val/ratio"}, found
    assert "percentage" in found["policy/clipfrac_avg"].message and found["val/ratio"].step == 21
    assert "(0, inf)" in found["val/ratio"].message


def test_every_ranged_key_is_read_by_the_gauge_that_checks_it():
    """A range checked by a gauge that never reads rows carrying the key would never fire."""
    for key, rng in RANGES.items():
        cls = gauge_class(rng.gauge)
        assert cls is not None, key
        assert rng.low <= (rng.high if rng.high < math.inf else rng.low + 1), key
        row = {"step": 1, key: -5.0}
        cluster = InstrumentCluster(trainer="grpo" if rng.gauge != "policy_ratio" else "ppo")
        for k in cls.inputs[:1]:  # the gauge reads a row once it holds one of its inputs
            row.setdefault(k, 0.5)
        cluster.update(row)
        assert [f for f in cluster.findings if f.rule == RULE and f.metric == key], key


def test_the_sanity_finding_is_reported_once_per_key_across_a_resume():
    rows = _ppo_log(40, entropy=-106.0)
    first = InstrumentCluster(trainer="ppo")
    for r in rows[:20]:
        first.update(r)
    second = InstrumentCluster(trainer="ppo")
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for r in rows[20:]:
        second.update(r)
    assert len([f for f in first.findings if f.rule == RULE]) == 1
    assert len([f for f in second.findings if f.rule == RULE and f.step > 20]) == 0


# -- the command and the generated page ---------------------------------------------------------------------------


def test_rules_command_lists_every_rule_as_a_table_and_as_json(capsys):
    assert main(["rules"]) == 0
    table = capsys.readouterr().out
    for r in CATALOG:
        assert re.search(rf"^{re.escape(r.id)}", table, re.M), r.id
    assert main(["rules", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert len(records) == len(CATALOG)
    clip = next(x for x in records if x["id"] == "clip-high")
    assert clip["thresholds"]["clip_warn"] == {"default": 0.3, "grpo": 0.4}
    assert clip["false_alarm_budget"] is None and clip["seed_source"] == POST and "Part III" in clip["origin"]


@pytest.fixture(scope="module")
def generated():
    return render_pages()


@pytest.mark.slow
def test_the_committed_rule_pages_and_pictures_are_current(tmp_path, generated):
    """CI's check (make test): regenerate the pages and their pictures and compare with the committed copy."""
    folder = ROOT / "docs" / "rules"
    pages, plots = generated
    fix = "regenerate them: rlcluster rules --markdown (or python docs/gen/make_rules.py; make docs-build runs it)"
    committed = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.md")}
    assert set(committed) == set(pages), f"pages added or removed; {fix}"
    stale_pages = sorted(n for n in pages if committed[n] != pages[n])
    assert not stale_pages, f"stale rule pages {stale_pages[:5]}; {fix}"
    pictures = {p.name: p.read_text(encoding="utf-8") for p in (folder / "img").glob("*.svg")}
    assert set(pictures) == set(plots), f"pictures added or removed; {fix}"
    stale = sorted(n for n in plots if pictures[n] != plots[n])
    assert not stale, f"stale pictures {stale[:5]}; {fix}"
    assert main(["rules", "--markdown", str(tmp_path / "rules")]) == 0
    assert {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "rules").glob("*.md")} == pages
    assert len(list((tmp_path / "rules" / "img").glob("*.svg"))) == len(CATALOG)


def test_rule_pictures_show_the_decision(generated):
    """Readable and honest: a firing stream unlike the healthy one, more than two ticks on each axis, text of
    12 px or more, and the rule's line drawn where the rule compares a level with one."""
    _pages, plots = generated
    for r in CATALOG:
        svg = plots[plot_name(r)]
        ex = r.example
        key = plot_key(r)
        fire = [x.get(key) for x in ex.rows(True)]
        calm = [x.get(key) for x in ex.rows(False)]
        assert any(a != b and not (a != a and b != b) for a, b in zip(fire, calm, strict=True)), r.id
        sizes = [int(v) for v in re.findall(r'font-size="(\d+)"', svg)]
        assert sizes and min(sizes) >= 12, r.id
        ticks = re.findall(r'<text x="[\d.]+" y="[\d.]+" text-anchor="(end|middle)"', svg)
        assert ticks.count("end") > 2 and ticks.count("middle") > 2, f"{r.id}: more than two ticks per axis"
        if r.id in LINES and key == ex.plot:
            assert re.search(r'<line [^>]*stroke="#d68910" stroke-width="1.5" stroke-dasharray="7,4"/>', svg), r.id
    assert sum(r.id in LINES for r in CATALOG) >= 40
    for rid, (kind, what) in LINES.items():  # a line names a parameter the rule really has
        assert kind == "at" or any(what in r.params for r in CATALOG if r.id == rid), rid


def test_the_budget_column_names_the_arl_of_a_rule_that_decides_by_a_sequential_test():
    """kl-warn decides by a CUSUM whose threshold comes from an ARL0 budget: the reference says which; a rule held
    k rows declares none ('-' in the table, null in the JSON)."""
    from wandb_rlcluster.core.sequential import arl_for
    from wandb_rlcluster.rules_reference import rule_records

    recs = {r["id"]: r for r in rule_records()}
    assert f"{arl_for(0):,.0f} rows" in recs["kl-warn"]["false_alarm_budget"]
    assert recs["kl-stop"]["false_alarm_budget"] is None
    budgeted = [r for r in CATALOG if r.budgeted]
    assert budgeted and all(budget(r) != "-" for r in budgeted)
