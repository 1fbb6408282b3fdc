"""The manual's rule pages: one per rule, every link a finding or an alert carries resolves to one, and every
configuration snippet on them does what the page says when a user pastes it.

Why: a rule page is read at the moment an alert fired; a snippet that fails to load, changes nothing, or silences
the wrong alert costs the reader a training run. The snippets are taken from the committed pages (what a user copies)
and run through the product's own loader, callback and alert engine on each rule's example streams.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wandb_rlcluster.alerts.config import load_config
from wandb_rlcluster.analyze import analyze_stream, render_text
from wandb_rlcluster.cli import main
from wandb_rlcluster.core import analyze_rows
from wandb_rlcluster.core.catalog import CATALOG, EXAMPLES
from wandb_rlcluster.core.doc_links import DOCS_URL_ENV, rule_doc_url
from wandb_rlcluster.rules_reference import forwarders, pages_by_id, tunable

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "rules"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def fenced(page: Path, lang: str) -> list[str]:
    return [m[2] for m in FENCE.finditer(page.read_text(encoding="utf-8")) if m[1] == lang]


def resolves(link: str) -> bool:
    """A link without RLCLUSTER_DOCS_URL is the command that prints the page: ``rlcluster rules NAME``, and NAME is
    a rule it knows (it exits 0)."""
    if not link.startswith("rlcluster rules "):
        return False
    return main(["rules", link.removeprefix("rlcluster rules ")]) == 0


def test_every_rule_has_a_page_and_the_index_links_it():
    index = (PAGES / "index.md").read_text(encoding="utf-8")
    for r in CATALOG:
        assert (PAGES / f"{r.id}.md").is_file(), r.id
        assert f"]({r.id}.md)" in index, r.id
    assert {p.stem for p in PAGES.glob("*.md")} == {r.id for r in CATALOG} | {"index", "alert-rules"}


def test_per_function_ids_are_text_not_escaped_markup():
    for r in CATALOG:
        if r.per_function:
            text = (PAGES / f"{r.id}.md").read_text(encoding="utf-8")
            assert text.startswith(f"# {r.id}:&lt;fn&gt;\n"), r.id  # a heading: the entity renders as <fn>
            assert "`" + f"{r.id}:&lt;" not in text, "an entity inside a code span shows as &lt; in the browser"


def test_findings_and_alerts_carry_a_link_that_resolves_to_their_rule_page(monkeypatch, capsys):
    monkeypatch.delenv(DOCS_URL_ENV, raising=False)
    config = load_config()
    seen: set[str] = set()
    for r in CATALOG:
        ex = r.example
        analysis = analyze_stream(ex.rows(True), trainer=ex.trainer, alerts=config, **ex.kwargs)
        out = analysis.to_dict()
        for f in out["findings"]:
            assert f["doc"] == rule_doc_url(f["rule"]) and resolves(f["doc"]), f
            seen.add(f["rule"].split(":")[0])
        for a in out["alerts"]:
            assert resolves(a["doc"]), a
        text = render_text(analysis, color=False)
        assert all(f"see {f['doc']}" in text for f in out["findings"])
    assert seen == {r.id for r in CATALOG}, "every rule's example raised its finding, each linked"


def test_the_base_address_makes_site_links(monkeypatch):
    monkeypatch.setenv(DOCS_URL_ENV, "https://docs.example.org/rlcluster/")
    assert rule_doc_url("reward-ceiling:format") == "https://docs.example.org/rlcluster/rules/reward-ceiling.html"
    ex = CATALOG[0].example
    f = analyze_rows(ex.rows(True), trainer=ex.trainer, **ex.kwargs).findings[0]
    assert f.to_dict()["doc"].startswith("https://docs.example.org/rlcluster/rules/")


@pytest.mark.parametrize("rid", sorted(pages_by_id()))
def test_the_pages_alerts_yaml_snippets_load_and_do_what_they_say(rid, tmp_path):
    page = PAGES / f"{rid}.md"
    blocks = fenced(page, "yaml")
    rules = pages_by_id()[rid]
    for r in rules:
        want = tunable(r)
        tune = [b for b in blocks if b.startswith("gauges:") and f"  {r.gauge}:\n" in b]
        assert bool(tune) == bool(want), "a rule with parameters shows how to set them"
        if tune:
            f = tmp_path / "tune.yaml"
            f.write_text(tune[0], encoding="utf-8")
            got = load_config(f).gauge_params[r.gauge]
            assert {k: list(v) if isinstance(v, tuple) else v for k, v in got.items()} == want
    silence = [b for b in blocks if b.startswith("rules:")]
    if not any(forwarders(r) for r in rules):
        assert not silence and "Nothing to silence" in page.read_text(encoding="utf-8")
        return
    shipped = load_config()
    silenced = [r for r in rules if forwarders(r)]  # a page with two gauges' entries has a snippet for each
    assert len(silence) == len(silenced)
    for r, snippet in zip(silenced, silence, strict=True):
        f = tmp_path / "silence.yaml"
        f.write_text(snippet, encoding="utf-8")
        quiet = load_config(f)
        ex = r.example
        doc = rule_doc_url(r.id)
        only = r.gauge if len(rules) > 1 else None  # a page of two gauges: this entry's alerts only

        def alerted(config, ex=ex, doc=doc, only=only):
            a = analyze_stream(ex.rows(True), trainer=ex.trainer, alerts=config, **ex.kwargs)
            return [e for e in a.alerts if e.kind == "firing" and e.doc == doc and only in (None, e.gauge)], a.cluster

        probe = f"{r.id}:fn" if r.per_function else r.id
        for fw in forwarders(r):  # the shipped rule takes the finding; the pasted one no longer does
            before, now = shipped.rule(fw.name), quiet.rule(fw.name)
            assert before is not None and (before.when is not None or re.fullmatch(before.finding, probe))
            assert now is None or now.when is None and not re.fullmatch(now.finding, probe), fw.name
        after, analysis = alerted(quiet)
        assert not after, f"the page's silence snippet leaves {[e.rule for e in after]}"
        assert any(x.rule.split(":")[0] == r.id for x in analysis.findings), "the finding itself stays"


def test_the_pages_python_snippets_set_the_parameters():
    pytest.importorskip("transformers")
    for rid, rules in pages_by_id().items():
        for code in fenced(PAGES / f"{rid}.md", "python"):
            scope: dict = {}
            exec(compile(code, f"docs/rules/{rid}.md", "exec"), scope)
            gauge = next(r.gauge for r in rules if f'"{r.gauge}"' in code)
            want = tunable(next(r for r in rules if r.gauge == gauge))
            got = scope["callback"].params[gauge]
            assert {k: list(v) if isinstance(v, tuple) else v for k, v in got.items()} == want, rid


def test_rules_prints_one_rule_and_suggests_the_closest_for_a_typo(capsys):
    assert main(["rules", "kl-warn"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== Gauge rule") and "kl-warn  (gauge kl; severity warn)" in out
    for part in ("What it means:", "What to do:", "Change it (alerts.yaml):", "Silence it (alerts.yaml):",
                 "Page: rules/kl-warn.html in the built manual"):
        assert part in out
    # kl-warn is also a shipped alert rule (kl > 0.5 held 3 rows): both are printed, each under its kind
    assert "== Alert rule" in out and "kl > 0.5" in out
    assert main(["rules", "reward-ceiling:format"]) == 0
    assert "reward-ceiling:<fn>" in capsys.readouterr().out
    assert main(["rules", "kl-wran"]) == 2
    err = capsys.readouterr().err
    assert "no rule 'kl-wran'" in err and "did you mean kl-warn" in err


def test_slack_and_email_carry_the_rules_page(monkeypatch, capsys):
    """The alert a person reads at 3 a.m. links to what it means: Slack's context line and the e-mail body."""
    from wandb_rlcluster.alerts.channels import AlertMessage, EmailChannel, SlackWebhookChannel
    from wandb_rlcluster.alerts.engine import AlertEvent

    e = AlertEvent(kind="firing", rule="kl-warn", gauge="kl", severity="warn", step=3, value=0.7, metric="kl",
                   title="KL 0.7 > 0.5", text="drifting", notify=True)
    assert e.doc == "rlcluster rules kl-warn" and resolves(e.doc) and e.to_dict()["doc"] == e.doc
    stall = AlertEvent(kind="firing", rule="stall", gauge="watchdog", severity="warn", step=3, value=None, metric="",
                       title="stalled", text="no step", notify=True)
    assert stall.doc == "rlcluster rules stall" and resolves(stall.doc)
    monkeypatch.setenv(DOCS_URL_ENV, "https://docs.example.org/rlcluster")
    msg = AlertMessage(title=e.title, text=e.text, severity="warn", rule="kl-warn", gauge="kl", step=3,
                       doc=rule_doc_url("kl-warn"))
    slack = SlackWebhookChannel("https://hooks.example.org/x").payload(msg)
    context = slack["blocks"][-1]["elements"][0]["text"]
    assert "<https://docs.example.org/rlcluster/rules/kl-warn.html|rule docs>" in context
    mail = EmailChannel("smtp.example.org", 25, "a@example.org", ["b@example.org"]).build(msg)
    assert "docs:  https://docs.example.org/rlcluster/rules/kl-warn.html" in mail.get_content()


def test_the_dashboard_links_each_rule_name_to_its_page(tmp_path, monkeypatch, capsys):
    import json

    from wandb_rlcluster.dashboard import build_dashboard

    monkeypatch.delenv(DOCS_URL_ENV, raising=False)
    ex = EXAMPLES[("kl", "kl-stop")]
    log = tmp_path / "run.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in ex.rows(True)), encoding="utf-8")
    page, analysis = build_dashboard(str(log), trainer=ex.trainer)
    links = set(re.findall(r'<span class="rule" title="(rlcluster rules [\w-]+)"', page))
    assert "rlcluster rules kl-stop" in links and all(resolves(x) for x in links)
    assert {f["doc"] for f in analysis.to_dict()["findings"]} <= links
    monkeypatch.setenv(DOCS_URL_ENV, "https://docs.example.org/rlcluster")
    page, analysis = build_dashboard(str(log), trainer=ex.trainer)
    hrefs = set(re.findall(r'<a href="([^"]+)"', page))
    assert "https://docs.example.org/rlcluster/rules/kl-stop.html" in hrefs
    assert {f["doc"] for f in analysis.to_dict()["findings"]} <= hrefs


def test_every_name_an_alert_or_a_finding_prints_resolves(capsys):
    """A finding names its gauge rule, an alert its alert rule (or a liveness alert): `rlcluster rules NAME` prints
    each, and a name that is both kinds (kl-warn) prints both."""
    from wandb_rlcluster.alerts.watchdog import RESERVED_RULES

    shipped = [r.name for r in load_config().rules]
    assert {"length-warn", "seq-kl-warn", "kl-warn"} <= set(shipped)
    for name in [*dict.fromkeys(r.id for r in CATALOG), *shipped, *RESERVED_RULES]:
        assert main(["rules", name]) == 0, name
        out = capsys.readouterr().out
        assert out.startswith(name) or f"\n{name}  (" in out, name
    both = {r.id for r in CATALOG} & set(shipped)
    assert "kl-warn" in both
    for name in both:
        main(["rules", name])
        out = capsys.readouterr().out
        assert "== Gauge rule" in out and "== Alert rule" in out, name


def test_in_plain_words_is_plain():
    """A rule's "In plain words" carries no statistical terms (they stay in the line that gives the test in those
    terms) and no garbled counts ("rules of 2 of those 2 groups")."""
    from wandb_rlcluster.rules_reference import JARGON

    for page in PAGES.glob("*.md"):
        text = page.read_text(encoding="utf-8")
        for section in re.findall(r"In plain words\n\n(.*?)\n\n", text, re.S):
            assert not [t for t in JARGON if t in section], (page.name, section)
            assert not re.search(r"\b(\d+) of those \1\b", section), (page.name, section)


def test_an_alert_rule_of_the_users_own_file_resolves_with_that_file(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text('rules:\n  - name: verbose-and-rewarded\n    gauge: reward\n    when: "kl > 0.3"\n    for: 2\n'
                    "    severity: warn\n", encoding="utf-8")
    assert main(["rules", "verbose-and-rewarded"]) == 2
    assert "--alerts FILE" in capsys.readouterr().err
    assert main(["rules", "verbose-and-rewarded", "--alerts", str(mine)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verbose-and-rewarded  (alert rule in ") and "kl > 0.3" in out and "2 logged rows" in out
