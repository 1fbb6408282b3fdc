"""Benchmark: what reading a large or hostile log costs (time and peak memory), one fresh process per case.

Not a test: it prints figures for the README (Performance). Run with `make bench-readers` or
`python benchmarks/bench_readers.py --mb 100`. Cases:

* a 100 MB single-line JSON list of rows (what ``json.dump(log_history, f)`` writes);
* the same 100 MB line broken: one string of 50 M escaped quotes closed by a line break and ``]``
  (so the token rewrite runs over all of it: the shape that cost 22.7 s / 6.2 GB before the rewrite
  scanned a masked copy, and ~2 minutes for 80 KB before that), the same with 100 M plain characters,
  and the string simply cut off at the end of the file (named as cut off without any rewrite);
* a checkpoint caught mid-write: an indented ``trainer_state.json`` cut off at half its size,
  and the whole file for comparison.

Peak memory is the child's peak resident set size (``VmHWM``), interpreter and imports included;
``baseline`` is that of a process that only imports the reader. Time is wall clock and CPU time of the
child (CPU time is the figure to compare on a shared, loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "detection"))  # the labelled-log generator
from synthetic import generate_run

CHILD = r"""
import json, resource, sys, time
from wandb_rlcluster.readers import LogReadError, load_rows
t0, c0 = time.perf_counter(), time.process_time()
if sys.argv[1] == "-":
    outcome = "imports only"
else:
    try:
        log = load_rows(sys.argv[1])
        outcome = f"{len(log.rows)} rows"
    except LogReadError as e:
        outcome = "error: " + str(e).split(": ", 2)[-1][:90]
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
try:  # VmHWM: this process's peak RSS since exec (ru_maxrss can carry the parent's peak across fork+exec)
    with open("/proc/self/status") as fh:
        rss = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
except (OSError, StopIteration):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mb": rss, "outcome": outcome}))
"""


def measure(path: str) -> dict[str, object]:
    p = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"child failed on {path}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=100.0, help="size of the single-line files, MB")
    args = ap.parse_args()
    target = int(args.mb * 1e6)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        run = generate_run("grpo_kl", "kl_runaway", n_steps=4000, seed=0, onset=0.8)
        row_text = json.dumps(run.rows)[1:-1]  # rows without the list brackets
        reps = max(1, target // (len(row_text) + 2))
        single = d / "single_line.json"
        with single.open("w") as fh:
            fh.write("[" + ", ".join([row_text] * reps) + "]")
        quotes = d / "escaped_quotes_line.json"
        quotes.write_text('[{"a": "' + '\\"' * (target // 2) + '\n]')
        plain = d / "plain_string_line.json"
        plain.write_text('[{"a": "' + "a" * target + '\n]')
        broken = d / "broken_line.json"
        broken.write_text('[{"note": "' + '\\"' * (target // 2))
        state = {"global_step": 4000 * reps, "log_history": run.rows * reps}
        whole = d / "trainer_state.json"
        whole.write_text(json.dumps(state, indent=2))
        cut = d / "checkpoint-cut" / "trainer_state.json"
        cut.parent.mkdir()
        data = whole.read_bytes()
        cut.write_bytes(data[: len(data) // 2])
        del data, state

        cases = [("baseline (imports only)", "-"), ("single-line JSON list of rows", str(single)),
                 ("one string of escaped quotes, then a line break and ]", str(quotes)),
                 ("one string of plain characters, then a line break and ]", str(plain)),
                 ("one string of escaped quotes, cut off at the end", str(broken)),
                 ("trainer_state.json (indented), whole", str(whole)),
                 ("trainer_state.json cut off at half (mid-write checkpoint)", str(cut))]
        print(f"{'case':<58} {'size':>8} {'time':>8} {'CPU':>8} {'peak RSS':>9}  outcome")
        for label, path in cases:
            size = "" if path == "-" else f"{Path(path).stat().st_size / 1e6:.0f} MB"
            r = measure(path)
            print(f"{label:<58} {size:>8} {r['seconds']:>7.2f}s {r['cpu']:>7.2f}s {r['peak_mb']:>7.0f}MB  "
                  f"{r['outcome']}")


if __name__ == "__main__":
    main()
