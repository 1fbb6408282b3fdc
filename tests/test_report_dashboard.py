"""The W&B report spec (offline) and the local HTML dashboard, opened in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wandb_rlcluster.core import GAUGE_IDS
from wandb_rlcluster.layouts import LAYOUT_NAMES, load_layout
from wandb_rlcluster.report import build_report, report_from_spec, report_spec

pytestmark = pytest.mark.slow  # report specs for every trainer and a real browser


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("family", LAYOUT_NAMES)
def test_every_layout_has_every_gauge(family):
    layout = load_layout(family)
    assert layout.gauges() == set(GAUGE_IDS)


@pytest.mark.parametrize("trainer", ["grpo", "rloo", "dpo", "kto", "ppo", "online_dpo", "sft"])
def test_offline_spec_has_every_gauge_and_loads_back(tmp_path: Path, trainer: str):
    out = tmp_path / "report.json"
    p = cli("report", "--entity", "acme", "--project", "rl", "--trainer", trainer, "--out", str(out))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    spec = json.loads(text)
    assert spec["project"] == {"name": "rl", "entityName": "acme"}
    flat = json.dumps(spec)
    for g in GAUGE_IDS:  # a status chart per gauge, on the rlcluster keys the callback logs
        assert f"rlcluster/{g}/status" in flat
    assert "train/global_step" in flat
    built = build_report("acme", "rl", trainer)
    # the CLI writes exactly what the builder makes (panel and runset ids are random per build)
    assert _without_ids(json.loads(report_spec(built))) == _without_ids(spec)
    loaded = report_from_spec(text)
    # the loaded object is the built one: the same title, runsets and panels (wandb-workspaces adds private
    # bookkeeping fields on load, so compare what it would save), and byte-identical when written again
    assert (loaded.title, loaded.entity, loaded.project) == (built.title, built.entity, built.project)
    assert [type(b).__name__ for b in loaded.blocks] == [type(b).__name__ for b in built.blocks]
    assert report_spec(loaded) == text  # ids survive the round trip: byte-identical
    assert loaded == report_from_spec(report_spec(loaded))


def _without_ids(o: object) -> object:
    if isinstance(o, dict):
        return {k: _without_ids(v) for k, v in o.items() if k not in ("id", "__id__", "ref")}
    if isinstance(o, list):
        return [_without_ids(v) for v in o]
    return o


def test_thresholds_from_alert_rules_annotate_panels():
    flat = report_spec(build_report("acme", "rl", "grpo"))
    assert "KL to reference (per token) · warn > 0.5 · stop > 1.0" in flat
    flat = report_spec(build_report("acme", "rl", "ppo"))
    assert "warn > 6" in flat and "stop > 20" in flat


@pytest.mark.parametrize(("args", "needle"), [
    (["--trainer", "banana", "--out", "x.json"], "unknown trainer"),
    (["--save"], "API key"),
])
def test_report_bad_input(tmp_path: Path, args: list[str], needle: str, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "report", "--entity", "a", "--project", "b", *args],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_dashboard_bad_input(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for args in (["dashboard", str(bad)], ["dashboard", str(tmp_path / "missing.json")],
                 ["dashboard", str(bad), "--trainer", "banana"]):
        p = cli(*args, "--out", str(tmp_path / "d.html"))
        assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--window-size=1400,4200"]
RECTS_JS = """<script>
window.addEventListener('load', () => {
  const out = [...document.querySelectorAll('.panel')].map(p => {
    const r = p.querySelector('svg').getBoundingClientRect();
    return {title: p.querySelector('h3').firstChild.textContent, x: r.x, y: r.y, w: r.width, h: r.height,
            empty: !!p.querySelector('svg.empty')};
  });
  const pre = document.createElement('pre'); pre.id = 'rects'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (CI installs it in .ci/run)")
def test_dashboard_renders_panels_in_real_browser(tmp_path: Path, real_logs: Path):
    from PIL import Image, ImageStat

    out = tmp_path / "dashboard.html"
    p = cli("dashboard", str(real_logs / "grpo_aaipl_srinath_500.json"), "--out", str(out))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained, static
    prof = tmp_path / "profile"
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={prof}", f"--screenshot={shot}", out.as_uri()],
                   capture_output=True, timeout=120, check=True)
    # the same page plus a measuring script (a test-only copy) tells where each panel was laid out
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", RECTS_JS + "</body>"))
    dom = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={prof}2", "--virtual-time-budget=3000",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    rects = json.loads(dom.split('<pre id="rects">')[1].split("</pre>")[0].replace("&quot;", '"'))
    img = Image.open(shot).convert("L")
    assert len(rects) >= 14
    checked = 0
    for r in rects:
        if r["y"] + r["h"] > img.height:
            continue
        box = (int(r["x"]), int(r["y"]), int(r["x"] + r["w"]), int(r["y"] + r["h"]))  # the plot itself
        var = ImageStat.Stat(img.crop(box)).var[0]
        print(f"{r['title']}: variance {var:.0f}{' (empty)' if r['empty'] else ''}")
        if r["empty"]:
            assert var < 60, f"{r['title']}: an empty panel should be nearly blank ({var:.0f})"
        else:
            assert var > 120, f"{r['title']}: a panel with data rendered blank ({var:.0f})"
            checked += 1
    assert checked >= 8
    # the whole page is not blank either, and the header carries the verdict colour
    assert ImageStat.Stat(img).var[0] > 500
