"""``rlcluster analyze DIR|GLOB...`` over a folder of runs as a user runs it: a real subprocess on generated runs of
several formats (JSON Lines, trainer_state.json checkpoints, a printed HF log, a verl console log, a real W&B offline
run), hostile files among them, the ranking, every output format, the CI gate, and the fleet page in a real browser.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wandb_rlcluster import sweep
from wandb_rlcluster.sweep import VERDICT_RANK, SweepOptions, analyze_sweep

from .conftest import PACKAGE_ROOT
from .test_hostile_input import unprivileged
from .test_report_dashboard import CHROME_FLAGS, CHROMIUM
from synthetic import generate_run

ROOT = Path(__file__).resolve().parents[1]


def _verl_console_log(path: Path, steps: int = 120) -> None:
    """A gzipped verl console log as verl prints it (Ray prefix, ``step:N - key:value`` lines): a PPO run learning
    steadily, so a sweep has one to discover without the real logs of ../shared."""
    import gzip
    import math

    lines = [f"Total training steps: {steps}"]
    for step in range(steps):
        score = 0.6 * (1 - math.exp(-step / 40)) + 0.02 * math.sin(step)
        metrics = {"critic/kl": 0.001 * step, "critic/kl_coeff": 0.001, "actor/entropy_loss": 0.45 - 0.001 * step,
                   "actor/pg_loss": 0.01 * math.cos(step), "actor/pg_clipfrac": 0.002, "actor/ppo_kl": 0.0001,
                   "actor/grad_norm": 2.0 + 0.1 * math.sin(step / 3), "critic/vf_loss": 0.5,
                   "critic/vf_clipfrac": 0.01, "critic/score/mean": score, "critic/rewards/mean": score,
                   "response_length/mean": 200 - 0.2 * step, "response_length/clip_ratio": 0.01}
        body = " - ".join(f"{k}:{v:.3f}" for k, v in metrics.items())
        lines.append(f"\x1b[2m\x1b[36m(main_task pid=4242)\x1b[0m step:{step} - {body}")
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
SEVERITY = {"ok": 0, "warn": 1, "stop": 2}
HOSTILE = ("cut.json", "binary.jsonl", "empty.jsonl")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    return subprocess.run([sys.executable, "-m", "wandb_rlcluster", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def _jsonl(path: Path, rows: list[dict[str, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


WANDB_WRITER = textwrap.dedent("""
    import json, sys
    import wandb

    rows = json.load(open(sys.argv[1]))
    run = wandb.init(project="sweep")
    for r in rows:
        wandb.log({f"train/{k}": v for k, v in r.items() if k != "step"}, step=int(r["step"]))
    wandb.finish()
""")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep as it lies on disk: healthy and faulty runs in several formats, plus hostile files."""
    root = tmp_path_factory.mktemp("sweep")
    aside = tmp_path_factory.mktemp("wandb_home")  # wandb's config and cache: not part of the sweep
    healthy = root / "healthy"
    for seed in (1, 2):
        _jsonl(healthy / f"grpo-seed{seed}.jsonl", generate_run("grpo", None, n_steps=300, seed=seed).rows)
    faulty = root / "faulty"
    _jsonl(faulty / "kl-runaway.jsonl", generate_run("grpo_kl", "kl_runaway", n_steps=300, seed=3, onset=0.5).rows)
    hacked = generate_run("grpo", "length_explosion", n_steps=300, seed=4, onset=0.5).rows
    ckpt = root / "trainer-out"  # a Trainer output_dir: its latest checkpoint is the run
    for step, upto in ((100, 100), (300, 300)):
        state = ckpt / f"checkpoint-{step}" / "trainer_state.json"
        state.parent.mkdir(parents=True)
        state.write_text(json.dumps({"global_step": step, "log_history": hacked[:upto]}))
        (state.parent / "config.json").write_text('{"model_type": "qwen2"}')  # model files are not runs
    printed = generate_run("dpo", None, n_steps=200, seed=5).rows  # the HF Trainer's printed stdout
    (root / "dpo-stdout.log").write_text("Training...\n" + "".join(f"{ {k: v for k, v in r.items()} }\n"
                                                                   for r in printed))
    _verl_console_log(root / "verl-ppo.log.gz")
    # hostile: a checkpoint cut off mid-write, a binary file with a log's name, an empty log
    (root / "cut.json").write_text(json.dumps({"log_history": hacked})[:5000])
    (root / "binary.jsonl").write_bytes(bytes(range(256)) * 8)
    (root / "empty.jsonl").write_text("")
    (root / "notes.md").write_text("# not a log: not a run")
    # a real W&B offline run, written by wandb itself
    wb = root / "wb"
    wb.mkdir()
    (wb / "rows.json").write_text(json.dumps(generate_run("grpo", None, n_steps=60, seed=6).rows))
    (wb / "writer.py").write_text(WANDB_WRITER)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(wb), "WANDB_SILENT": "true",
           "WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "off", "WANDB_CONFIG_DIR": str(aside / "config"),
           "WANDB_CACHE_DIR": str(aside / "cache"), "WANDB_DATA_DIR": str(aside / "data")}
    p = subprocess.run([sys.executable, str(wb / "writer.py"), str(wb / "rows.json")], env=env, cwd=wb,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    (wb / "rows.json").unlink()
    (wb / "writer.py").unlink()
    return root


def _sweep_json(folder: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    p = cli("analyze", str(folder), "--format", "json", *extra)
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads(p.stdout)


def test_every_run_found_once_and_ranked_worst_first(sweep_dir: Path) -> None:
    p, out = _sweep_json(sweep_dir)
    assert p.returncode == 0, p.stderr
    runs = out["runs"]
    names = sorted(Path(r["path"]).relative_to(sweep_dir).as_posix() for r in runs)
    wandb_runs = [n for n in names if n.startswith("wb/")]
    assert len(wandb_runs) == 1 and "/offline-run-" in wandb_runs[0]  # one run folder, not its files
    assert sorted(set(names) - set(wandb_runs)) == sorted([
        "healthy/grpo-seed1.jsonl", "healthy/grpo-seed2.jsonl", "faulty/kl-runaway.jsonl",
        "trainer-out/checkpoint-300/trainer_state.json", "dpo-stdout.log", "verl-ppo.log.gz", *HOSTILE])
    by_name = {Path(r["path"]).name: r for r in runs}
    formats = {r["source_format"] for r in runs if r["verdict"] != "error"}
    assert {"jsonl", "trainer_state", "wandb_offline_run", "verl_console"} <= formats, formats
    assert by_name["verl-ppo.log.gz"]["framework"] == "verl"
    # hostile inputs are rows with the reason, never the sweep's failure
    for name in HOSTILE:
        row = by_name[name]
        assert row["verdict"] == "error" and name in row["reason"] and "\n" not in row["reason"], row
    assert "cut off" in by_name["cut.json"]["reason"]
    # worst first: the verdict, then the run that went wrong soonest
    inf = float("inf")
    keys = [(-VERDICT_RANK[r["verdict"]], inf if r["first_stop_step"] is None else r["first_stop_step"],
             inf if r["first_warn_step"] is None else r["first_warn_step"]) for r in runs]
    assert keys == sorted(keys)
    assert [r["rank"] for r in runs] == list(range(1, len(runs) + 1))
    assert by_name["kl-runaway.jsonl"]["verdict"] == "stop"  # what the tool exists to stop
    assert out["verdict"] == "stop" and out["counts"]["error"] == len(HOSTILE)
    for r in runs:  # a row's first warn is its rule's step, inside the run, never after its first stop
        if r["verdict"] in ("warn", "stop"):
            assert r["rule"] and r["first_step"] <= r["first_warn_step"] <= r["last_step"]
            assert r["first_stop_step"] is None or r["first_warn_step"] <= r["first_stop_step"]
            assert r["fired"] and all(f["spark"] for f in r["fired"])


def test_sweep_rows_match_single_file_analysis(sweep_dir: Path) -> None:
    """A run's row in a sweep says what `rlcluster analyze FILE` says of it alone."""
    _, out = _sweep_json(sweep_dir)
    for r in out["runs"]:
        if r["verdict"] == "error":
            continue
        single = cli("analyze", r["path"], "--format", "json")
        alone = json.loads(single.stdout)
        assert alone["verdict"] == r["verdict"] and alone["rows"] == r["rows"], r["path"]
        serious = sorted((f for f in alone["findings"] if f["severity"] != "info"), key=lambda f: f["step"])
        assert (serious[0]["step"] if serious else None) == r["first_warn_step"]
        assert (f"{serious[0]['gauge']}/{serious[0]['rule']}" if serious else "") == r["rule"]


def test_alert_rules_in_a_sweep(sweep_dir: Path) -> None:
    """With --alerts the rows are the alert rules' verdicts and steps, as `analyze FILE --alerts` gives them."""
    p = cli("analyze", str(sweep_dir / "healthy"), str(sweep_dir / "faulty"), "--alerts", "--format", "json",
            "--progress")
    assert p.returncode == 0, p.stderr
    runs = json.loads(p.stdout)["runs"]
    assert len(runs) == 3
    progress = [line for line in p.stderr.splitlines() if " runs" in line]  # not a TTY: a line per tenth
    assert progress and progress[-1].split("] ")[1].startswith("3/3 runs")
    for r in runs:
        alone = json.loads(cli("analyze", r["path"], "--alerts", "--format", "json").stdout)
        assert alone["verdict"] == r["verdict"]
        fired = sorted((e for e in alone["alerts"] if e["kind"] == "firing" and e["severity"] != "info"),
                       key=lambda e: e["step"])
        assert (fired[0]["step"] if fired else None) == r["first_warn_step"]


def test_formats_agree(sweep_dir: Path) -> None:
    _, out = _sweep_json(sweep_dir)
    order = [r["path"] for r in out["runs"]]
    p = cli("analyze", str(sweep_dir), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [r["path"] for r in rows] == order and [r["verdict"] for r in rows] == [r["verdict"] for r in out["runs"]]
    p = cli("analyze", str(sweep_dir), "--format", "md")
    lines = p.stdout.splitlines()
    assert lines[0].startswith("| # | verdict") and len(lines) == 2 + len(order)
    assert all(line.count(" | ") >= 6 for line in lines[2:])
    p = cli("analyze", str(sweep_dir))
    table = p.stdout.splitlines()
    assert table[0].startswith(f"rlcluster analyze · {len(order)} run(s)")
    ranked = [line for line in table if line[:6].strip().isdigit()]
    assert [line.split()[-1] for line in ranked] == order
    assert f"Not judged ({len(HOSTILE)}):" in p.stdout


def test_fail_on_over_the_sweep(sweep_dir: Path, tmp_path: Path) -> None:
    _, out = _sweep_json(sweep_dir)
    worst = out["verdict"]
    for level in ("warn", "stop"):
        p = cli("analyze", str(sweep_dir), "--fail-on", level, "--format", "csv")
        assert p.returncode == (1 if SEVERITY[worst] >= SEVERITY[level] else 0), (level, worst, p.stderr)
    # healthy runs alone are never stopped: the gate passes (and the unreadable files do not fail it)
    p = cli("analyze", str(sweep_dir / "healthy"), str(sweep_dir / "binary.jsonl"), "--fail-on", "stop")
    assert p.returncode == 0, p.stdout
    # nothing readable at all, or nothing to read: one line on stderr, exit 2
    p = cli("analyze", str(sweep_dir / "binary.jsonl"), str(sweep_dir / "empty.jsonl"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    (tmp_path / "nothing").mkdir()
    p = cli("analyze", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "no training logs found" in p.stderr


def test_glob_and_single_file(sweep_dir: Path) -> None:
    p, out = _sweep_json(Path(f"{sweep_dir}/**/*.jsonl"))
    names = sorted(Path(r["path"]).name for r in out["runs"])
    assert names == sorted(["grpo-seed1.jsonl", "grpo-seed2.jsonl", "kl-runaway.jsonl", "binary.jsonl",
                            "empty.jsonl"])
    p = cli("analyze", str(sweep_dir / "nope-*.jsonl"))
    assert p.returncode == 2 and "matches no file" in p.stderr
    # one FILE: the single-run report, not a sweep table
    p = cli("analyze", str(sweep_dir / "faulty" / "kl-runaway.jsonl"))
    assert p.stdout.startswith(f"rlcluster analyze · {sweep_dir / 'faulty' / 'kl-runaway.jsonl'}")
    assert "Findings (" in p.stdout and "run(s)" not in p.stdout


def test_unreadable_file_is_a_row(tmp_path: Path) -> None:
    prefix = unprivileged()
    _jsonl(tmp_path / "ok.jsonl", generate_run("grpo", None, n_steps=120, seed=7).rows)
    locked = tmp_path / "locked.jsonl"
    _jsonl(locked, generate_run("grpo", None, n_steps=50, seed=8).rows)
    locked.chmod(0)
    try:
        p = subprocess.run([*prefix, sys.executable, "-m", "wandb_rlcluster", "analyze", str(tmp_path), "--format",
                            "json"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)})
    finally:
        locked.chmod(0o644)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(p.stdout)["runs"]}
    assert rows["locked.jsonl"]["verdict"] == "error" and "locked.jsonl" in rows["locked.jsonl"]["reason"]
    assert rows["ok.jsonl"]["verdict"] != "error"


_ANALYZE_ONE = sweep.analyze_one


def _dies_on_boom(path: str, options: SweepOptions) -> sweep.RunRecord:
    """The worker's function, except that a run named boom kills its process (as the OOM killer would)."""
    if path.endswith("boom.jsonl"):
        os._exit(9)
    return _ANALYZE_ONE(path, options)


def test_a_run_that_kills_its_process_is_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed mid-run takes its pool down: the other runs are analysed again, the culprit is a row."""
    paths = []
    for seed in range(4):
        _jsonl(tmp_path / f"run{seed}.jsonl", generate_run("grpo", None, n_steps=80, seed=seed).rows)
        paths.append(str(tmp_path / f"run{seed}.jsonl"))
    _jsonl(tmp_path / "boom.jsonl", generate_run("grpo", None, n_steps=80, seed=9).rows)
    paths.insert(2, str(tmp_path / "boom.jsonl"))
    monkeypatch.setattr(sweep, "analyze_one", _dies_on_boom)  # forked workers inherit the patched module
    seen: list[int] = []
    records = analyze_sweep(paths, SweepOptions(), jobs=2, progress=lambda done, total, rec: seen.append(done))
    by_name = {Path(r.path).name: r for r in records}
    assert sorted(by_name) == sorted(Path(p).name for p in paths)
    assert by_name["boom.jsonl"].verdict == "error" and "died" in by_name["boom.jsonl"].reason
    assert all(r.verdict != "error" for name, r in by_name.items() if name != "boom.jsonl")
    assert seen == list(range(1, len(paths) + 1))  # each run counted once, retries included


# Test-only: click headers as a user would, and write the row order after each click into the DOM.
CLICK_JS = """<script>
window.addEventListener('load', () => {
  const order = () => [...document.querySelectorAll('#runs tbody tr')].map(
      tr => tr.cells[2].dataset.v + '\\t' + tr.cells[3].dataset.v);
  const th = name => [...document.querySelectorAll('#runs th')].find(h => h.textContent === name);
  const out = {initial: order()};
  th('run').click(); out.run_up = order(); out.run_aria = th('run').getAttribute('aria-sort');
  th('run').click(); out.run_down = order();
  th('first warn').click(); out.warn_up = order();
  const pre = document.createElement('pre'); pre.id = 'clicks'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (CI installs it in .ci/run)")
def test_fleet_page_in_real_browser(sweep_dir: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    page_path = tmp_path / "fleet.html"
    p = cli("analyze", str(sweep_dir), "--format", "json", "--html", str(page_path))
    runs = json.loads(p.stdout)["runs"]
    page = page_path.read_text()
    assert "http://" not in page and "https://" not in page and "src=" not in page  # self-contained
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'prof'}", f"--screenshot={shot}",
                    page_path.as_uri()], capture_output=True, timeout=120, check=True)
    img = Image.open(shot).convert("L")
    table = img.crop((0, 0, img.width, min(img.height, 60 * len(runs))))  # the rows: the page below is empty
    assert ImageStat.Stat(table).var[0] > 500  # drawn, not blank
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", CLICK_JS + "</body>"))
    dom = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'prof2'}",
                          "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    import html

    clicks = json.loads(html.unescape(dom.split('<pre id="clicks">')[1].split("</pre>")[0]))
    paths = [r["path"] for r in runs]
    assert [x.split("\t")[0] for x in clicks["initial"]] == paths  # the page keeps the ranking
    assert [x.split("\t")[0] for x in clicks["run_up"]] == sorted(paths)
    assert clicks["run_aria"] == "ascending"
    assert [x.split("\t")[0] for x in clicks["run_down"]] == [x.split("\t")[0] for x in clicks["run_up"]][::-1]
    warn_steps = [float(x.split("\t")[1]) for x in clicks["warn_up"]]
    assert warn_steps == sorted(warn_steps)  # numbers sort as numbers; runs that never warned last
    # each judged run that fired shows one sparkline per fired gauge, with its mark
    assert page.count('<tr data-rank=') == len(runs)
    fired = sum(len([f for f in r["fired"] if f["step"] >= 0]) for r in runs)
    assert page.count('class="mark"') == fired > 0


def test_fleet_page_escapes_what_came_from_disk() -> None:
    """Paths, rule messages and reasons are text on the page, never markup or script."""
    from wandb_rlcluster.fleet import build_fleet_page
    from wandb_rlcluster.sweep import Fired, RunRecord, error_record

    evil = '<img src=x onerror="alert(1)">'
    page = build_fleet_page([
        RunRecord(path=f"runs/{evil}.jsonl", verdict="warn", first_warn_step=3, rule="kl/kl-warn", message=evil,
                  rows=10, first_step=0, last_step=9, fired=[Fired("kl", "warn", 3, [0.1, 0.2, 0.9])]),
        error_record(f"{evil}.json", f"cannot read {evil}: </script><script>alert(2)</script>"),
    ])
    assert "<img" not in page and "alert(2)</script>" not in page and page.count("<script>") == 1
    assert page.count('<tr data-rank=') == 2 and page.count('class="mark"') == 1
