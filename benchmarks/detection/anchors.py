"""Two of the detection benchmark's anchors (the third, the seed post's rules, is ``seed_rules.py``).

* ``zscore_findings``: the generic detector a user could pick instead of rlcluster, the shape of W&B's
  z-score automation trigger (``wandb.automations.MetricZScoreFilter``, whose defaults are window 30,
  threshold 3.0, either direction): on every raw metric a run logs, the z-score of each logged value
  against the mean and standard deviation of the previous ``WINDOW`` logged values, an alarm on every row
  where |z| > ``THRESHOLD``, no persistence (the trigger has none). Counters and schedules that move by
  construction (step, epoch, num_tokens, episode, eps, learning_rate, step_time) are not watched: no one
  would put an alert on them. Each metric is credited to the gauge that reads it, so its alarms are
  scored like rlcluster's.
* ``load_core_at``: the instrument core as it was at a commit (the rules before issue #10), materialised
  from git into a temporary directory and imported under another package name, so today's and
  yesterday's rules run side by side in one process. The core is stdlib-only with relative imports, so a
  copy of its directory is a complete package. Without git or that commit the anchor is reported missing.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

WINDOW = 30
THRESHOLD = 3.0
IGNORED = frozenset({"step", "epoch", "num_tokens", "episode", "eps", "learning_rate", "step_time",
                     "eval_runtime", "eval_samples_per_second", "eval_steps_per_second"})

# Raw metric -> the gauge it belongs to (rlcluster's gauge ids), for scoring the z-score alarms.
_EXACT = {
    "loss": "loss", "mean_token_accuracy": "loss", "eval_loss": "convergence", "grad_norm": "gradients",
    "reward": "reward", "objective/scores": "reward", "objective/rlhf_reward": "reward",
    "reward_std": "reward_signal", "frac_reward_zero_std": "reward_signal",
    "kl": "kl", "objective/kl": "kl", "objective/non_score_reward": "kl", "policy/approxkl_avg": "kl",
    "entropy": "entropy", "objective/entropy": "entropy", "policy/entropy_avg": "entropy",
    "val/ratio": "policy_ratio", "val/ratio_var": "policy_ratio", "policy/clipfrac_avg": "policy_ratio",
    "loss/policy_avg": "loss", "loss/value_avg": "policy_ratio", "val/clipfrac_avg": "policy_ratio",
    "val/num_eos_tokens": "length",
}
_PREFIX = (("completions/", "length"), ("clip_ratio/", "policy_ratio"), ("logps/", "reward"),
           ("logits/", "reward"), ("rewards/", "reward"))


def metric_gauge(key: str) -> str:
    """The gauge a raw metric belongs to (``other`` when none does)."""
    if key in _EXACT:
        return _EXACT[key]
    if key.startswith("rewards/") and key.endswith("/std"):
        return "reward_signal"
    for prefix, gauge in _PREFIX:
        if key.startswith(prefix):
            return gauge
    return "other"


@dataclass(frozen=True, slots=True)
class ZFinding:
    gauge: str
    rule: str  # "z:<metric>"
    severity: str
    step: int


def zscore_findings(rows: Iterable[Mapping[str, object]], window: int = WINDOW,
                    threshold: float = THRESHOLD, hold: int = 1) -> list[ZFinding]:
    """Every row where a raw metric's z-score against its previous ``window`` values exceeds ``threshold``.

    ``hold`` > 1 (not the trigger's: ``frontier.py`` tunes it) alarms only on the row where that has held ``hold``
    logged rows of the metric in a row, once per such stretch."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for r in rows:
        step = r.get("step")
        if not isinstance(step, (int, float)) or "train_runtime" in r:
            continue
        for k, v in r.items():
            if k in IGNORED or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            s = series.setdefault(k, ([], []))
            s[0].append(int(step))
            s[1].append(float(v))
    out: list[ZFinding] = []
    for key, (steps, vals) in series.items():
        x = np.asarray(vals, dtype=float)
        if len(x) <= window:
            continue
        ok = np.isfinite(x)
        xf = np.where(ok, x, 0.0)
        c1 = np.concatenate([[0.0], np.cumsum(xf)])
        c2 = np.concatenate([[0.0], np.cumsum(xf * xf)])
        cn = np.concatenate([[0], np.cumsum(ok)])
        i = np.arange(window, len(x))
        n = cn[i] - cn[i - window]
        s1 = c1[i] - c1[i - window]
        s2 = c2[i] - c2[i - window]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = s1 / n
            var = np.maximum(s2 / n - mean * mean, 0.0) * n / np.maximum(n - 1, 1)
            z = (x[i] - mean) / np.sqrt(var)
        # a non-finite value is off any scale: the trigger's comparison fails open on NaN, so it is ignored
        hit = ok[i] & (n >= window // 2) & (var > 1e-24) & (np.abs(z) > threshold)
        if hold > 1:
            held, c = np.zeros(len(hit), dtype=bool), 0
            for j, h in enumerate(hit):
                c = c + 1 if h else 0
                held[j] = c == hold
            hit = held
        gauge = metric_gauge(key)
        out.extend(ZFinding(gauge, f"z:{key}", "warn", steps[j]) for j in i[hit])
    out.sort(key=lambda f: f.step)
    return out


# -- the core before issue #10 -----------------------------------------------------------------------

BEFORE_COMMIT = "a7c1fbe"
"""main when issue #10 started: the rules the first release shipped."""


def load_core_at(commit: str = BEFORE_COMMIT, repo: Path | None = None) -> tuple[ModuleType | None, str]:
    """Import ``src/wandb_rlcluster/core`` as of ``commit`` under the name ``rlcluster_core_<commit>``.

    Returns the module and a note; the module is None (and the note says why) when git, the repository or
    the commit is not there (a shallow clone, a source tarball)."""
    repo = repo or Path(__file__).resolve().parents[2]
    name = f"rlcluster_core_{commit}"
    if name in sys.modules:
        return sys.modules[name], f"core at {commit}"
    try:
        listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", commit,
                                  "src/wandb_rlcluster/core/"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"git unavailable ({e.__class__.__name__})"
    files = [f for f in listing.stdout.split() if f.endswith(".py")]
    if listing.returncode != 0 or not files:
        return None, f"commit {commit} not in this checkout's history"
    root = Path(tempfile.mkdtemp(prefix="rlcluster-core-"))
    pkg = root / name
    pkg.mkdir()
    for f in files:
        src = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{f}"], capture_output=True, text=True,
                             timeout=30)
        if src.returncode != 0:
            return None, f"could not read {f} at {commit}"
        (pkg / Path(f).name).write_text(src.stdout)
    sys.path.insert(0, str(root))
    try:
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(str(root))
    return mod, f"core at {commit}"
