"""The manual: the strict MkDocs build, the getting-started commands run as written, the README as a front page.

Why: documentation that is not built and run in CI drifts. The strict build fails on a broken link, a missing picture,
a page outside the nav or an API page whose object moved; the getting-started blocks marked runnable are run as a
user would (on a tiny local model, W&B offline); every other block there must say why it is not run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.core import GAUGE_IDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started.md"
MARK = re.compile(r"<!-- docs-test: (runnable|skip: (.+?)) -->")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def blocks(page: Path) -> list[tuple[str | None, str | None, str, str]]:
    """(mark, why-not, language, code) for each fenced block, the mark being the comment on the line before it."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.fullmatch(before.strip())
        out.append((mark and mark[1].split(":")[0], mark and mark[2], m[1], m[2]))
    return out


def test_every_getting_started_block_is_run_or_says_why_not():
    found = blocks(GETTING_STARTED)
    assert len(found) >= 5
    for mark, why, lang, code in found:
        assert mark in ("runnable", "skip"), f"block without a docs-test mark in getting-started.md:\n{code[:200]}"
        if mark == "skip":
            assert why and len(why.strip()) > 10, f"a skipped block must say why:\n{code[:200]}"
        else:
            assert lang == "bash", "runnable blocks are bash"
    assert sum(m == "runnable" for m, *_ in found) >= 2


@pytest.mark.slow
def test_getting_started_runnable_blocks(tmp_path: Path):
    """Run the runnable blocks in order in one fresh directory, `.venv/bin/` being this interpreter's."""
    bindir = Path(sys.executable).parent
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("WANDB_RUN_ID", None)
    for mark, _why, _lang, code in blocks(GETTING_STARTED):
        if mark != "runnable":
            continue
        script = code.replace(".venv/bin/", f"{bindir}/")
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, f"{script}\n--- stderr:\n{p.stderr[-3000:]}"
    # what the page says the blocks leave behind
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, "one W&B offline run"
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    assert analysis["trainer"] == "grpo" and analysis["rows"] > 0
    assert analysis["verdict"] in ("ok", "warn", "stop")
    assert set(GAUGE_IDS) <= set(analysis["gauges"])
    page = (tmp_path / "dashboard.html").read_text()
    assert "<svg" in page and "<script" not in page
    journal = tmp_path / "out" / "alerts.jsonl"
    if analysis["verdict"] != "ok":  # the callback journals what its rules raised; each record is one JSON object
        for line in journal.read_text().splitlines():
            assert json.loads(line)["type"] in ("alert", "channel")


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
                    reason="the docs extra (mkdocs, mkdocs-material, mkdocstrings) is not installed: pip install "
                           "'.[docs]' (make test installs it)")
@pytest.mark.slow
def test_mkdocs_strict_build(tmp_path: Path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    # the nav's pages are there, the API pages carry the docstrings, the pictures came along
    for page in ("index.html", "getting-started.html", "faq.html", "reference/rules.html", "gauges/kl.html"):
        assert (site / page).is_file(), page
    assert "Watches a TRL / transformers run" in (site / "api" / "callback.html").read_text()
    assert "attach" in (site / "api" / "callback.html").read_text()
    assert "InstrumentCluster" in (site / "api" / "core.html").read_text()
    assert "AlertEngine" in (site / "api" / "alerts.html").read_text()
    for img in (DOCS / "img").iterdir():
        assert (site / "img" / img.name).is_file()
    # offline: no page pulls a font or a script from the network
    for html_file in site.rglob("*.html"):
        text = html_file.read_text()
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html_file


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:45])
    assert "make demo" in first_screen and "make test" in first_screen
    assert "callbacks=[RLClusterCallback()]" in first_screen
    assert re.search(r'<img src="docs/img/[\w-]+\.png"', first_screen), "a picture made by the product, up top"
    # every relative link and picture resolves, so the front page works on GitHub
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) + re.findall(r'src="([^"]+)"', text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert len(local) >= 15
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_manual_pictures_are_small_and_made_by_the_script():
    pictures = sorted((DOCS / "img").iterdir())
    names = {p.name for p in pictures}
    assert {"dashboard-kl.png", "dashboard-healthy.png", "slack-alert.png", "email-alert.png"} <= names
    assert sum(p.stat().st_size for p in pictures) < 600_000, "keep the manual's pictures to a few hundred KB"
    script = (DOCS / "gen" / "make_pictures.py").read_text()
    for name in names:  # every picture is one the script writes (none drawn by hand)
        stem = name.rsplit(".", 1)[0]
        assert stem in script or stem.removesuffix("-full") in script, name


def test_rule_reference_is_current():
    """Until `rlcluster rules` (the rule catalog) exists, the page is generated from the shipped alert rules."""
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "rules", "--help"], capture_output=True, timeout=120)
    if p.returncode == 0:
        pytest.skip("`rlcluster rules` exists: the rule catalog's own tests keep docs/reference/rules.md current")
    sys.path.insert(0, str(DOCS / "gen"))
    try:
        import make_rules
    finally:
        sys.path.remove(str(DOCS / "gen"))
    assert (DOCS / "reference" / "rules.md").read_text(encoding="utf-8") == make_rules.from_alert_rules(), \
        "docs/reference/rules.md is stale: run `python docs/gen/make_rules.py` (make docs does)"
