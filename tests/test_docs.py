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

from real_logs import real_log

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
    for page in ("index.html", "getting-started.html", "faq.html", "rules/index.html", "gauges/kl.html"):
        assert (site / page).is_file(), page
    # every rule's page is built where a finding's link points once RLCLUSTER_DOCS_URL names the site
    from wandb_rlcluster.core.catalog import CATALOG
    from wandb_rlcluster.core.doc_links import rule_doc_url

    for r in CATALOG:
        url = rule_doc_url(r.id, base=site.as_uri())
        assert (site / url.removeprefix(site.as_uri() + "/")).is_file(), url
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


RECORD = re.compile(r"(?<!-)\b[Rr]ounds? \d|\b[Rr]ound's\b|\b(?:this|the|a|each|every|last|next) round\b"
                    r"|issue #\d+|(?<![\w&/])#\d{2,}\b|`[0-9a-f]{7,40}`|\bcommit [0-9a-f]{7,40}\b"
                    r"|INSTRUMENTS\.md|the post \(Part II\)")


#: Words about where the pages were written, not about the product: "here" as a place ("not available here"), the
#: machine they were measured on, the project's shared folders, an anchor carrying an issue number, the blog post
#: named as "the seed post" (a reader does not know which), the gauges by number.
PLACE = re.compile(r"\b(?:available|unavailable|unreachable|reachable|tested|measured|installed|run|ran|used|checked|"
                   r"done|found|timed)\s+here\b|\bthis (?:[\w'-]+ ){0,2}machine\b|\b(?:an|the) earlier machine\b"
                   r"|\.\./shared\b|#[\w-]*-issue-\d+\b|\bseed post\b|\bother sessions\b|\bGauges? \d+\s*[–-]\s*\d+",
                   re.I)


def user_pages() -> list[Path]:
    """The manual's pages outside its Development section (read from mkdocs.yml's nav), and the rule pages."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    user_nav = nav.split("  - Development:", 1)[0]
    pages = [DOCS / p for p in re.findall(r"([\w/-]+\.md)\s*$", user_nav, re.M)]
    assert len(pages) > 30 and all(p.is_file() for p in pages)
    return pages + sorted((DOCS / "rules").glob("*.md"))


def test_user_pages_carry_no_project_record_and_cite_what_a_reader_can_open():
    """Rounds, commits and issue numbers are the project's record (the Development section); a rule page quotes the
    blog series with a link, never a file of the project's own a reader cannot open; no page talks about the machine
    or the folders it was written with (PLACE)."""
    found = []
    for page in [*user_pages(), ROOT / "README.md"]:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            m = RECORD.search(line) or PLACE.search(line)
            if m:
                found.append(f"{page.relative_to(ROOT)}:{n}: {m[0]!r} in {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_the_place_check_catches_what_it_is_for():
    """The words the issue found in the pages are caught (a check that cannot fail checks nothing)."""
    for said in ("FSDP/DeepSpeed were not available here.", "the real W&B server, which is unreachable here",
                 "on this 2-core machine; on an earlier machine", "Measured on this project's 2-core machine",
                 "`../shared/real-logs/`", "(performance.md#the-compiled-core-issue-39)", "the seed post's 30 %",
                 "Gauges 4–6 (attention entropy, samples, LoRA)", "while up to seven other sessions shared it"):
        assert PLACE.search(said), said
    for fine in ("where the rule fires", "readable here on GitHub", "there", "a left-out progress bar"):
        assert not PLACE.search(fine), fine


def test_the_manual_states_counts_the_code_has():
    from wandb_rlcluster.core import GAUGE_IDS

    words = {7: "seven", 8: "eight", 9: "nine", 10: "ten", 12: "twelve", 14: "fourteen", 15: "fifteen"}
    folder = real_log("verl")  # the count is checked where the real logs are (../shared), not on a user's clone
    if folder.is_dir():
        verl = len(list(folder.glob("*.log.gz")))
        assert f"holds {words[verl]} real public verl logs" in (DOCS / "frameworks.md").read_text(encoding="utf-8")
    for path in [*DOCS.glob("*.md"), ROOT / "README.md", *(ROOT / "src" / "wandb_rlcluster").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        for n, w in words.items():
            assert n == len(GAUGE_IDS) or f"{w}-gauge" not in text, f"{path.name}: '{w}-gauge' ({len(GAUGE_IDS)})"


def test_api_pages_show_no_raw_sphinx_roles(tmp_path: Path):
    """mkdocstrings renders Google-style docstrings: a :class:`X` role would show as text."""
    import ast

    for mod in ("callback.py", "alerts/engine.py", "alerts/config.py", "core/cluster.py", "core/findings.py"):
        tree = ast.parse((ROOT / "src" / "wandb_rlcluster" / mod).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.Module)):
                doc = ast.get_docstring(node) or ""
                assert not re.search(r":(class|meth|func|attr):`", doc), f"{mod}: {doc[:80]}"


def test_pictures_drawn_from_committed_data_are_current():
    """The frontiers are redrawn by `make docs-build` (make_pictures.py --figures): the committed copies must be what
    it draws, so the picture on the site is the run the text quotes."""
    sys.path.insert(0, str(DOCS / "gen"))
    try:
        import make_pictures
    finally:
        sys.path.remove(str(DOCS / "gen"))
    fix = "run `python docs/gen/make_pictures.py --figures` (make docs-build does)"
    assert (DOCS / "img" / "frontier.svg").read_text(encoding="utf-8") == make_pictures.frontier_svg_text(), fix
    assert (DOCS / "img" / "frontier-oracle.svg").read_bytes() == make_pictures.ORACLE_FRONTIER.read_bytes(), fix


def test_getting_started_shows_the_transcript_of_the_pictured_run():
    """The terminal transcript and the dashboard picture under it come from one demo run (make_pictures.py writes
    both): the page includes the file, and the transcript's stop is the one its journal and dashboard show."""
    page = GETTING_STARTED.read_text(encoding="utf-8")
    assert '--8<-- "img/demo-kl-transcript.txt"' in page
    assert page.index("demo-kl-transcript.txt") < page.index("img/dashboard-kl.png")
    transcript = (DOCS / "img" / "demo-kl-transcript.txt").read_text(encoding="utf-8")
    stop = re.search(r"rlcluster stopped training at step (\d+) of \d+ \(rule ([\w-]+)\)", transcript)
    assert stop, "the KL demo's transcript shows where it stopped"
    assert re.search(rf"step\s+{stop[1]}\s+STOP\s+{stop[2]}", transcript)
    assert "see rlcluster rules " in transcript, "made with this checkout's code (every finding names its rule)"
