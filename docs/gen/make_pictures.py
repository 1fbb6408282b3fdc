"""The manual's pictures, made by the product itself: `make docs` runs this (never edit docs/img/ by hand).

Why a script: a picture drawn by hand drifts from what the product shows. This one runs the real demo (a KL runaway
that the callback stops) and a healthy run, opens each run's own `dashboard.html` in headless Chromium, sends the
demo's stop alert through the real Slack channel to a loopback webhook and renders the posted Block Kit payload the
way Slack lays it out, renders the e-mail the e-mail channel builds for the same alert, and draws the detection
frontier from the table `benchmarks/detection/frontier.py` generated. Everything runs offline (W&B offline, no hub,
no network: the browser gets only file:// pages and flags that keep it off the network).

    python docs/gen/make_pictures.py            # all pictures (two demo runs: a few minutes on 2 cores)
    python docs/gen/make_pictures.py --reuse    # keep the demo runs already under build/docs-pictures/

Needs Debian's `chromium` (`apt-get install chromium`) and pillow (the `docs` extra).
"""

from __future__ import annotations

import argparse
import html
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's code, installed or not (the demo runs get it too)
IMG = ROOT / "docs" / "img"
WORK = ROOT / "build" / "docs-pictures"
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--force-device-scale-factor=1"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        sys.exit("make_pictures: Debian's chromium is needed for the screenshots: apt-get install -y chromium "
                 "(the pictures in docs/img/ were left as they were)")
    return found


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    """A headless Chromium screenshot of one local page, with a fresh profile each time."""
    with tempfile.TemporaryDirectory(prefix="rlcluster-chrome-") as profile:
        subprocess.run([chromium(), *CHROME_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                        f"--screenshot={png}", page.as_uri()], capture_output=True, timeout=180, check=True)


def save_small(img, out: Path, width: int | None = None, colors: int = 128) -> None:
    """Scale to ``width`` and store as a palette PNG: these are flat UI pictures, a palette keeps them small."""
    from PIL import Image

    if width and img.width > width:
        img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    img.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        out, optimize=True)
    print(f"  {out.relative_to(ROOT)}  {img.width}x{img.height}  {out.stat().st_size // 1024} KB")


def crop_to_content(img, background=(255, 255, 255), pad: int = 12):
    from PIL import Image, ImageChops

    rgb = img.convert("RGB")
    box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, background)).getbbox()
    if box is None:
        raise SystemExit("make_pictures: a screenshot came out blank")
    x0, y0, x1, y1 = box
    return rgb.crop((max(0, x0 - pad), max(0, y0 - pad), min(rgb.width, x1 + pad), min(rgb.height, y1 + pad)))


# ----------------------------------------------------------------------------------------------- the runs


def run_demo(name: str, pathology: str, reuse: bool) -> Path:
    """`rlcluster demo` into build/docs-pictures/<name>/demo-out; returns that directory."""
    out = WORK / name / "demo-out"
    if reuse and (out / "dashboard.html").exists():
        # the run is kept; its dashboard is drawn again by this checkout's code (as the demo draws it: from the run)
        run = sorted((out / "wandb").glob("offline-run-*"))[-1]
        subprocess.run([sys.executable, "-m", "wandb_rlcluster", "dashboard", str(run), "--out",
                        str(out / "dashboard.html")], env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                       capture_output=True, timeout=300, check=True)
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TQDM_DISABLE": "1",
           # this checkout's code, whatever is installed: the pictures show what this source does
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    print(f"rlcluster demo --pathology {pathology} ...", flush=True)
    p = subprocess.run([sys.executable, "-m", "wandb_rlcluster", "demo", "--out", str(out), "--pathology", pathology],
                       cwd=out.parent, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0 or not (out / "dashboard.html").exists():
        sys.exit(f"make_pictures: the {pathology} demo failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    # what the terminal showed, paths as the user's `demo-out/...`: the getting-started page shows this run's words
    # beside this run's dashboard, never another run's
    # (the alerts are log lines on stderr, printed while it trains; the summary is stdout, printed at the end)
    said = [x for x in p.stderr.splitlines() if x.startswith("rlcluster")] + p.stdout.splitlines()
    (out.parent / "transcript.txt").write_text("\n".join(said).replace(str(out.parent) + os.sep, "") + "\n",
                                               encoding="utf-8")
    return out


def transcript(out: Path, stem: str) -> None:
    """The demo's terminal output, as getting-started.md includes it under the dashboard picture of the same run."""
    text = (out.parent / "transcript.txt").read_text(encoding="utf-8")
    lines = [re.sub(r"offline-run-[\w-]+", "offline-run-…", line.rstrip()) for line in text.splitlines()
             if not line.startswith("[")]  # library log lines ("[INFO] Running in WANDB offline mode"), not ours
    (IMG / f"{stem}.txt").write_text("\n".join(lines).strip("\n") + "\n", encoding="utf-8")
    print(f"  {(IMG / f'{stem}.txt').relative_to(ROOT)}")


#: The manual's text column is about 720 px wide on a laptop screen: the dashboard is shot at that width (it
#: reflows to one panel per row) and shown at its own size, so its text reads as the browser draws it.
COLUMN = 720
DASHBOARD_BG = (245, 246, 248)


def dashboard_pictures(out: Path, stem: str, full: bool) -> None:
    from PIL import Image

    page = (out / "dashboard.html").read_text(encoding="utf-8")
    # the header names the run directory: show it as the user's `demo-out/...`, not the build path it ran in
    shown = out.parent / "page.html"
    shown.write_text(page.replace(str(out.parent) + os.sep, ""), encoding="utf-8")
    shot = out.parent / "shot.png"
    screenshot(shown, shot, COLUMN, 9000 if full else 1600)
    img = crop_to_content(Image.open(shot), background=DASHBOARD_BG, pad=0)
    # the first screen: the verdict, a status tile per gauge and the first primary RL metrics (reward, then KL)
    save_small(img.crop((0, 0, img.width, min(img.height, 1420))), IMG / f"{stem}.png", colors=192)
    if full:
        save_small(img, IMG / f"{stem}-full.png", colors=96)


def journal_alert(out: Path, rule: str | None = None) -> dict:
    """The last notified alert record of the demo's journal (``rule``: that rule's)."""
    records = [json.loads(line) for line in (out / "trainer" / "alerts.jsonl").read_text().splitlines() if line]
    alerts = [r for r in records if r.get("type") == "alert" and r.get("kind") == "firing" and r.get("notify")]
    if rule:
        alerts = [r for r in alerts if r["rule"] == rule]
    if not alerts:
        sys.exit(f"make_pictures: no {rule or 'notified'} alert in {out}/trainer/alerts.jsonl")
    return alerts[-1]


def alert_message(rec: dict):
    """The message the notifier hands the channels for this journal record (as alerts/notify.py builds it)."""
    from wandb_rlcluster.alerts.channels import AlertMessage

    return AlertMessage(title=rec["title"], text=rec["text"], severity=rec["severity"], rule=rec["rule"],
                        gauge=rec["gauge"], step=rec["step"], run_name=None, run_url=None, value=rec.get("value"),
                        evidence=tuple(rec.get("evidence") or ()), doc=rec.get("doc") or None)


# ----------------------------------------------------------------------------------------------- Slack


def posted_slack_payload(msg) -> dict:
    """Send ``msg`` through the real Slack channel to a loopback webhook and return the JSON it posted."""
    from wandb_rlcluster.alerts.channels import SlackWebhookChannel

    got: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        SlackWebhookChannel(f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/docs").send(msg)
    finally:
        server.shutdown()
    return json.loads(got[0])


# Slack draws its emoji as images; so does this page (no emoji font needed)
EMOJI_SVG = {
    "warning": '<svg viewBox="0 0 20 20"><path d="M10 1.5 19 18H1z" fill="#f2c744" stroke="#b8860b"/>'
               '<rect x="9" y="7" width="2" height="6" fill="#222"/><rect x="9" y="14.5" width="2" height="2" '
               'fill="#222"/></svg>',
    "rotating_light": '<svg viewBox="0 0 20 20"><rect x="3" y="15" width="14" height="3" fill="#666"/>'
                      '<path d="M5 15V9a5 5 0 0 1 10 0v6z" fill="#e01e5a"/><circle cx="8" cy="9" r="1.6" '
                      'fill="#fff" opacity=".7"/></svg>',
    "information_source": '<svg viewBox="0 0 20 20"><rect x="1" y="1" width="18" height="18" rx="3" '
                          'fill="#3b82c4"/><text x="10" y="15" font-size="13" text-anchor="middle" fill="#fff" '
                          'font-family="serif" font-weight="bold">i</text></svg>',
    "white_check_mark": '<svg viewBox="0 0 20 20"><rect x="1" y="1" width="18" height="18" rx="3" fill="#2eb67d"/>'
                        '<path d="M5 10l3.5 3.5L15 6" stroke="#fff" stroke-width="2.5" fill="none"/></svg>',
    "bell": '<svg viewBox="0 0 20 20"><path d="M4 15h12l-2-3V8a4 4 0 0 0-8 0v4z" fill="#f2c744"/>'
            '<circle cx="10" cy="16.5" r="1.8" fill="#b8860b"/></svg>',
}


def _emoji(text: str) -> str:
    return re.sub(r":([a-z_]+):", lambda m: f'<span class="emoji">{EMOJI_SVG[m[1]]}</span>'
                  if m[1] in EMOJI_SVG else m[0], text)


def mrkdwn(text: str) -> str:
    """Slack mrkdwn to HTML, for the parts the channel uses: <url|label> links, *bold*, `code`, line breaks.

    The channel has already escaped &, < and > in user text (Slack's own rule), which is also HTML's escaping;
    the only raw angle brackets left are the channel's links."""
    text = re.sub(r"<([^|<>]+)\|([^<>]+)>", r'<a href="\1">\2</a>', text)
    text = re.sub(r"`([^`\n]+)`", r"<code>\1</code>", text)
    text = re.sub(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])", r"<b>\1</b>", text)
    return _emoji(text).replace("\n", "<br>")


SLACK_CSS = """
body { margin: 0; background: #fff; font: 15px/1.47 Lato, 'DejaVu Sans', Arial, sans-serif; color: #1d1c1d; }
.channel { width: 720px; padding: 8px 0; }
.bar { border-bottom: 1px solid #ddd; padding: 10px 20px; font-weight: bold; font-size: 17px; }
.msg { display: flex; padding: 10px 20px; }
.avatar { width: 36px; height: 36px; border-radius: 6px; background: #1e293b; color: #fff; font-weight: bold;
          font-size: 13px; display: flex; align-items: center; justify-content: center; margin-right: 10px;
          flex: none; }
.who b { font-weight: 900; } .app { background: #e8e8e8; color: #616061; font-size: 10px; font-weight: bold;
       padding: 1px 3px; border-radius: 2px; margin: 0 4px; } .time { color: #616061; font-size: 12px; }
.header { font-size: 18px; font-weight: 900; margin: 4px 0 6px; }
.section { margin: 4px 0; } .context { color: #616061; font-size: 13px; margin-top: 6px; }
code { font: 12px 'DejaVu Sans Mono', monospace; color: #e01e5a; background: #f6f6f6; border: 1px solid #ddd;
       border-radius: 3px; padding: 1px 3px; }
a { color: #1264a3; text-decoration: none; }
.emoji svg { width: 20px; height: 20px; vertical-align: -4px; }
"""


def slack_page(messages: list[tuple[dict, str]]) -> str:
    """A Slack channel showing each posted payload as one message (header, sections, context)."""
    shown = []
    for payload, label in messages:
        blocks = []
        for b in payload["blocks"]:
            if b["type"] == "header":
                blocks.append(f'<div class="header">{_emoji(html.escape(b["text"]["text"]))}</div>')
            elif b["type"] == "section":
                blocks.append(f'<div class="section">{mrkdwn(b["text"]["text"])}</div>')
            elif b["type"] == "context":
                blocks.append('<div class="context">' + " ".join(mrkdwn(e["text"]) for e in b["elements"]) + "</div>")
        who = f'<b>rlcluster</b><span class="app">APP</span><span class="time">{label}</span>'
        shown.append(f'<div class="msg"><div class="avatar">rl</div><div><div class="who">{who}</div>'
                     f'{"".join(blocks)}</div></div>')
    return (f"<!doctype html><meta charset=utf-8><style>{SLACK_CSS}</style><div class=channel>"
            f'<div class="bar"># rl-alerts</div>{"".join(shown)}</div>')


EMAIL_CSS = """
body { margin: 0; background: #fff; font: 14px/1.45 'DejaVu Sans', Arial, sans-serif; color: #202124; }
.mail { width: 760px; padding: 16px 22px; }
.subject { font-size: 19px; margin-bottom: 10px; }
.hdr { color: #5f6368; font-size: 12.5px; } .hdr b { color: #202124; font-weight: normal; }
pre { font: 13px/1.5 'DejaVu Sans Mono', monospace; white-space: pre-wrap; margin: 14px 0 0;
      border-top: 1px solid #e0e0e0; padding-top: 12px; }
"""


def email_page(em) -> str:
    hdr = "".join(f'<div class="hdr">{k}: <b>{html.escape(str(em[k]))}</b></div>' for k in ("From", "To", "Date"))
    body = em.get_content()
    return (f"<!doctype html><meta charset=utf-8><style>{EMAIL_CSS}</style><div class=mail>"
            f'<div class="subject">{html.escape(str(em["Subject"]))}</div>{hdr}<pre>{html.escape(body)}</pre></div>')


def channel_pictures(out: Path) -> None:
    from PIL import Image

    from wandb_rlcluster.alerts.channels import EmailChannel

    msgs = [alert_message(journal_alert(out, "kl-warn")), alert_message(journal_alert(out, "kl-stop"))]
    page = slack_page([(posted_slack_payload(m), f"step {m.step}") for m in msgs])
    html_path = WORK / "slack.html"
    html_path.write_text(page, encoding="utf-8")
    screenshot(html_path, WORK / "slack.png", 760, 900)
    save_small(crop_to_content(Image.open(WORK / "slack.png")), IMG / "slack-alert.png")

    em = EmailChannel("smtp.example.com", 587, "rl@example.com", ["oncall@example.com"], starttls=True).build(msgs[1])
    html_path = WORK / "email.html"
    html_path.write_text(email_page(em), encoding="utf-8")
    screenshot(html_path, WORK / "email.png", 800, 700)
    save_small(crop_to_content(Image.open(WORK / "email.png")), IMG / "email-alert.png")


# ----------------------------------------------------------------------------------------------- frontier


SHORT = {  # the operating points labelled on the picture (every point has its full name as a tooltip)
    "ours": "rlcluster as shipped",
    "ours, warn_sooner=1": "warn_sooner=1",
    "ours, warn_sooner=2": "warn_sooner=2",
    "z-score > 3, held 1 row": "z > 3, no hold (W&B's z-score trigger)",
    "z-score > 3, held 3 rows": "z > 3 held 3 rows",
}


def frontier_svg() -> None:
    out = IMG / "frontier.svg"
    out.write_text(frontier_svg_text(), encoding="utf-8")
    print(f"  {out.relative_to(ROOT)}  {out.stat().st_size // 1024} KB")


def frontier_svg_text() -> str:
    """The speed / false-alarm frontier as an SVG, from the table frontier.py wrote (FRONTIER.md)."""
    src = ROOT / "benchmarks" / "detection" / "FRONTIER.md"
    points = []
    for line in src.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[1].endswith("%") and cells[2].endswith("%"):
            points.append((cells[0], float(cells[2].rstrip("%")), float(cells[4].rstrip("%"))))
    if not points:
        sys.exit(f"make_pictures: no operating points in {src}")
    w, h, left, right, top, bottom = 720, 420, 64, 24, 20, 50

    def x(v: float) -> float:  # healthy runs warned, on log10(1 + %) so 0-5 % is readable next to 97 %
        return left + (w - left - right) * math.log10(1 + v) / math.log10(101)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - v / 100)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" font-family="sans-serif" '
             f'font-size="11"><rect width="{w}" height="{h}" fill="#fff"/>',
             f'<rect x="{x(0):.1f}" y="{y(100):.1f}" width="{x(5) - x(0):.1f}" height="{y(47.5) - y(100):.1f}" '
             'fill="#2e7d32" opacity=".12"/>',
             f'<text x="{x(0) + 4:.1f}" y="{y(100) + 14:.1f}" fill="#2e7d32">targets: ≤ 5 % healthy warned,</text>',
             f'<text x="{x(0) + 4:.1f}" y="{y(100) + 28:.1f}" fill="#2e7d32">≥ 47.5 % caught within a quarter</text>']
    for v in (0, 1, 2, 5, 10, 20, 50, 100):
        parts.append(f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{top}" y2="{h - bottom}" stroke="#eee"/>'
                     f'<text x="{x(v):.1f}" y="{h - bottom + 14}" text-anchor="middle">{v}</text>')
    for v in range(0, 101, 20):
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">healthy runs warned '
                 '(%, log scale)</text>')
    parts.append(f'<text transform="translate(14 {(top + h - bottom) / 2}) rotate(-90)" text-anchor="middle">'
                 'caught within a quarter of the run after onset (%)</text>')
    for label, healthy, quarter in points:
        ours = label.startswith("ours")
        colour = "#c62828" if ours else "#607d8b"
        parts.append(f'<circle cx="{x(healthy):.1f}" cy="{y(quarter):.1f}" r="{5 if ours else 3.5}" '
                     f'fill="{colour}"><title>{html.escape(label)}: {healthy} % healthy warned, {quarter} % '
                     'caught within a quarter</title></circle>')
        short = SHORT.get(label.split(" (")[0])
        if short:
            right_side = x(healthy) < w * 0.7
            parts.append(f'<text x="{x(healthy) + (8 if right_side else -8):.1f}" y="{y(quarter) + 4:.1f}" '
                         f'fill="{colour}" text-anchor="{"start" if right_side else "end"}">{html.escape(short)}'
                         '</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


ORACLE_FRONTIER = ROOT / "benchmarks" / "detection" / "frontier.svg"


def oracle_frontier_svg() -> None:
    """The calibrated-detection frontier with the oracle beside it, as benchmarks/detection/frontier_plot.py drew it
    (redrawn first from the points its last run saved, when it saved them)."""
    src = ORACLE_FRONTIER
    if src.with_suffix(".json").is_file():
        subprocess.run([sys.executable, str(src.parent / "frontier_plot.py"), "--redraw"], check=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(src.parent)])})
    copy_picture(src, "frontier-oracle.svg", "benchmarks/detection/frontier_plot.py")


def copy_picture(src: Path, name: str, maker: str) -> None:
    """A benchmark's own picture into the manual as ``name`` (kept as it is when the benchmark has not drawn it)."""
    if not src.is_file():
        print(f"  {src.relative_to(ROOT)} missing: run {maker} first (picture kept)")
        return
    out = IMG / name
    out.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    print(f"  {out.relative_to(ROOT)}  {out.stat().st_size // 1024} KB")


FAULTS_OVERVIEW = ROOT / "benchmarks" / "faults" / "faults_overview.svg"


def faults_overview_svg() -> None:
    """The fault-injection benchmark on one picture, as its last scoring run drew it (benchmarks/faults/score.py)."""
    copy_picture(FAULTS_OVERVIEW, "faults-overview.svg", "benchmarks/faults/bench.py")


# A sweep as a team lays one out: one idea, a few seeds and settings, some runs gone wrong (generated, labelled).
FLEET_RUNS = (("beta0.04-lr1e-6-s0", "grpo_kl", None), ("beta0.04-lr1e-6-s1", "grpo_kl", None),
              ("beta0.04-lr5e-6-s0", "grpo_kl", "kl_runaway"), ("beta0-lr1e-6-s0", "grpo", None),
              ("beta0-lr1e-6-s1", "grpo", "reward_hacking"), ("beta0-lr5e-6-s0", "grpo", "entropy_collapse"),
              ("beta0-lr5e-6-s1", "grpo", "length_explosion"), ("maxlen256-s0", "grpo", "truncation"),
              ("easy-prompts-s0", "grpo", "reward_std_collapse"), ("beta0.04-lr2e-6-s0", "grpo_kl", None))


def fleet_picture() -> None:
    """The fleet page of a generated sweep (`rlcluster analyze sweep/ --html`), as Chromium draws it."""
    from PIL import Image

    sys.path.insert(0, str(ROOT / "benchmarks" / "detection"))
    from synthetic import generate_run

    work = WORK / "fleet"
    shutil.rmtree(work, ignore_errors=True)
    (work / "sweep").mkdir(parents=True)
    for seed, (name, family, pathology) in enumerate(FLEET_RUNS):
        rows = generate_run(family, pathology, n_steps=600, seed=100 + seed, onset=0.55).rows
        (work / "sweep" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-m", "wandb_rlcluster", "analyze", "sweep", "--html", "fleet.html"], cwd=work,
                   env=env, capture_output=True, timeout=300, check=False)
    # a laptop's screen: the whole table must fit 1280 px; the manual shows it at its own size (it scrolls sideways
    # in a narrow column rather than shrinking until it cannot be read)
    screenshot(work / "fleet.html", work / "fleet.png", 1280, 900)
    save_small(crop_to_content(Image.open(work / "fleet.png"), background=(250, 250, 250)), IMG / "fleet-page.png",
               colors=64)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reuse", action="store_true", help="keep demo runs already under build/docs-pictures/")
    ap.add_argument("--fleet-only", action="store_true", help="only the fleet page (no demo runs: seconds)")
    ap.add_argument("--figures", action="store_true", help="only the pictures drawn from committed data (the two "
                    "frontiers): seconds, no training and no browser; make docs-build runs this")
    args = ap.parse_args(argv)
    IMG.mkdir(parents=True, exist_ok=True)
    if args.figures:
        print("pictures:")
        frontier_svg()
        oracle_frontier_svg()
        return 0
    chromium()
    IMG.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    if args.fleet_only:
        print("pictures:")
        fleet_picture()
        return 0
    kl = run_demo("kl", "kl", args.reuse)
    healthy = run_demo("healthy", "none", args.reuse)
    print("pictures:")
    dashboard_pictures(kl, "dashboard-kl", full=True)
    transcript(kl, "demo-kl-transcript")
    dashboard_pictures(healthy, "dashboard-healthy", full=False)
    channel_pictures(kl)
    frontier_svg()
    oracle_frontier_svg()
    faults_overview_svg()
    fleet_picture()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
