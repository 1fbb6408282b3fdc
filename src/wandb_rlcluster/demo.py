"""`rlcluster demo`: a real TRL run on a tiny local model, with the plugin attached, catching a real failure.

No W&B account (offline), no GPU, no model hub. The pathology is real, not
simulated: the run is set up so that it actually happens —

- ``kl``: GRPO with beta = 0.04 and a learning rate ~7x the healthy run's (2e-3 against 3e-4): the policy runs away
  from its reference, KL passes 0.5 (warn) and then 1.0 for 3 steps (stop), and training stops;
- ``length``: a reward that pays for characters, on a model that starts out ending early:
  completions grow to the cap (length explosion, then reward hacking);
- ``entropy``: a reward model whose taste the policy cannot reach (words like "jazz"; its best answer, "sea",
  scores 0.2): the policy finds that answer early and keeps sharpening onto it while the reward stays stuck,
  so entropy collapses with the score flat (entropy collapse);
- ``none``: a healthy GRPO run (sane learning rate, beta 0.1): the reward climbs, nothing alarms.

``trainer="dpo"`` runs a healthy DPO run (60 steps, learning rate 5e-4, beta 0.1, chosen " <word> again" over
rejected " no"): the margin grows and the same outputs are written. It has no pathology setting; leaving the
pathology out (None) picks ``kl`` for GRPO and ``none`` for DPO.

Every GRPO demo starts from a tiny model pretrained for a few seconds to answer with a word and an EOS.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PATHOLOGIES = ("kl", "length", "entropy", "none")
PRETRAIN_STEPS = 120
TRAINERS = ("grpo", "dpo")


def reward_length_chars(completions: list[Any], **kwargs: Any) -> list[float]:
    """Pays for length (characters / 10): the reward a length-hacking policy loves."""
    from .tiny import _texts

    return [len(t) / 10.0 for t in _texts(completions)]


def reward_letter_a_share(completions: list[Any], **kwargs: Any) -> list[float]:
    """The share of the letter 'a' among the answer's characters: the policy collapses onto 'a'-heavy answers.

    A share, not a count, so it does not also pay for length (which would truncate first).
    """
    from .tiny import _texts

    return [t.lower().count("a") / max(1, len(t.strip())) for t in _texts(completions)]


class _AboveTheBar(logging.Handler):
    """The plugin's alert lines go above the progress bar (tqdm.write), not through it."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm.auto import tqdm

        tqdm.write(self.format(record), file=sys.stderr)


class NoisyJudge:
    """A reward that carries no information: a fresh random score per completion (seeded, so runs repeat).

    With a learning rate far too high, updates driven by noise alone random-walk the policy away from its reference:
    KL climbs while the reward goes nowhere -- the runaway the KL gauge is for.
    """

    __name__ = "noisy_judge"

    def __init__(self, seed: int = 0) -> None:
        import random

        self.rng = random.Random(seed)

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        return [self.rng.random() for _ in completions]


def reward_like_ocean(completions: list[Any], **kwargs: Any) -> list[float]:
    """A reward model with a taste, for the healthy run: letter overlap (Jaccard) of the answer with "ocean".

    Dense (the twelve answer words score 0.11-0.43, "ocean" 1), so groups keep their spread and the reward can climb
    steadily from ~0.3 without the policy collapsing within the demo's 80 steps.
    """
    from .tiny import _texts

    target = set("ocean")
    out = []
    for text in _texts(completions):
        words = text.split()
        answer = set(words[0].lower()) if words else set()
        out.append(len(target & answer) / len(target | answer))
    return out


def reward_like_jazz(completions: list[Any], **kwargs: Any) -> list[float]:
    """A reward model with a taste the policy cannot reach, for the entropy demo: letter overlap (Jaccard) of the answer
    with "jazz", and 0 for an answer that is not a word it knows (the tiny world's answers and prompt words).

    The policy's words share at most one letter with "jazz": the best of them, "sea", scores 0.2 and nothing it can
    say scores more, so the reward stops rising once the policy has found "sea" while GRPO keeps sharpening onto it.
    Without the known-word check, invented words would let the score creep up a letter at a time ("sea" -> "sa" ->
    "a"), which reads as a policy still learning, not as a collapse.
    """
    from .tiny import _ANSWERS, _WORDS, _texts

    known = set(_ANSWERS) | set(_WORDS)
    target = set("jazz")
    out = []
    for text in _texts(completions):
        words = text.split()
        word = words[0].lower() if words else ""
        out.append(len(target & set(word)) / len(target | set(word)) if word in known else 0.0)
    return out


@dataclass
class DemoResult:
    out: Path
    trainer: str
    pathology: str
    steps_run: int = 0
    max_steps: int = 0
    stopped_by: str | None = None
    run_dir: str | None = None
    journal: Path | None = None
    report_spec: Path | None = None
    dashboard: Path | None = None
    alerts: list[Any] = field(default_factory=list)
    verdict: str = "ok"


def run_demo(out: str | Path = "demo-out", trainer: str = "grpo", pathology: str | None = None,
             steps: int | None = None, seed: int = 0, quiet: bool = False) -> DemoResult:
    if trainer not in TRAINERS:
        raise ValueError(f"--trainer must be one of {', '.join(TRAINERS)}")
    if pathology is None:
        pathology = "none" if trainer == "dpo" else "kl"
    if pathology not in PATHOLOGIES:
        raise ValueError(f"--pathology must be one of {', '.join(PATHOLOGIES)}")
    if trainer == "dpo" and pathology != "none":
        raise ValueError(f"the DPO demo is a healthy run with no pathology setting: leave out --pathology "
                         f"{pathology} (or pass --pathology none) with --trainer dpo")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ["WANDB_DIR"] = str(out)
    os.environ.setdefault("WANDB_PROJECT", "rlcluster-demo")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("WANDB_CONSOLE", "off")
    os.environ.setdefault("WANDB_DISABLE_GIT", "true")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import wandb
    from tqdm.auto import tqdm

    plugin_log = logging.getLogger("wandb_rlcluster")
    plugin_log.setLevel(logging.WARNING)
    if not any(isinstance(h, _AboveTheBar) for h in plugin_log.handlers):
        plugin_log.addHandler(_AboveTheBar())
    plugin_log.propagate = False
    # a transformers deprecation notice from inside TRL's generation is not the demo's business
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from .callback import RLClusterCallback
    from .tiny import make_trainer

    result = DemoResult(out=out, trainer=trainer, pathology=pathology)
    # probes more often than the defaults: a demo is short, and every panel should have something to show
    plugin = RLClusterCallback(report=True, grad_every=5, attention_every=10, sample_every=25)

    class ProgressBar(TrainerCallback):
        """Users look, not read: one bar with the plugin's verdict and the last alert."""

        def on_train_begin(self, args, state, control, **kw):
            self.bar = tqdm(total=state.max_steps, desc=f"demo {trainer}/{pathology}", unit="step", disable=quiet)

        def on_log(self, args, state, control, logs=None, **kw):
            fired = [e for e in plugin.alert_events]
            post = {"verdict": plugin.cluster.verdict()}
            if logs and "kl" in logs:
                post["kl"] = f"{logs['kl']:.3f}"
            if fired:
                post["last alert"] = fired[-1].rule
            self.bar.set_postfix(post, refresh=False)
            self.bar.update(state.global_step - self.bar.n)

        def on_train_end(self, args, state, control, **kw):
            self.bar.close()

    common: dict[str, Any] = {"output_dir": str(out / "trainer"), "report_to": "wandb", "seed": seed,
              "callbacks": [plugin, ProgressBar()], "run_name": f"demo-{trainer}-{pathology}"}
    if trainer == "dpo":
        t = make_trainer("dpo", max_steps=steps or 60, learning_rate=5e-4, **common)
    else:
        # Every GRPO demo starts from a briefly pretrained "SFT model" that answers with a word and an EOS, as a real
        # RL run does: from random weights every completion would be truncated and attention uniform (real alarms,
        # but not the ones a demo means to show).
        grpo: dict[str, Any] = {"pretrain_steps": PRETRAIN_STEPS, "max_completion_length": 16, **common}
        if pathology == "kl":
            t = make_trainer("grpo_kl", max_steps=steps or 150, learning_rate=2e-3, beta=0.04,
                             reward_funcs=[NoisyJudge(seed)], **grpo)
        elif pathology == "length":
            t = make_trainer("grpo", max_steps=steps or 80, learning_rate=2e-3, per_device_train_batch_size=16,
                             **{**grpo, "max_completion_length": 48, "reward_funcs": [reward_length_chars]})
        elif pathology == "entropy":
            # the reward stops rising once the policy has found its best answer ("sea", 0.2), and GRPO at a high
            # learning rate with no KL anchor (beta 0) keeps sharpening onto it: entropy collapses with the score
            # flat. The warm-up keeps the first 10 steps, the entropy gauge's start, at the start policy's entropy.
            t = make_trainer("grpo", max_steps=steps or 80, learning_rate=2e-3, warmup_steps=10,
                             per_device_train_batch_size=32, num_generations=8, reward_funcs=[reward_like_jazz], **grpo)
        else:
            # healthy: a sane learning rate, beta 0.1 and 32 completions a step (8 per prompt), so the per-token KL
            # estimate is not dominated by one rare sampled token; the reward climbs ~0.3 -> ~0.55, KL stays < 0.4
            t = make_trainer("grpo_kl", max_steps=steps or 80, learning_rate=3e-4, beta=0.1, num_generations=8,
                             per_device_train_batch_size=32, reward_funcs=[reward_like_ocean], **grpo)
    # disable_tqdm makes transformers print every log row as a dict; the progress bar above replaces both
    t.remove_callback(PrinterCallback)
    result.max_steps = t.args.max_steps
    t.train()
    run = wandb.run
    result.run_dir = str(Path(run.dir).parent) if run is not None else None
    wandb.finish()
    result.steps_run = t.state.global_step
    result.stopped_by = plugin.stop_finding.rule if plugin.stop_finding else None
    result.alerts = [e for e in plugin.alert_events if e.notify]
    journal = Path(t.args.output_dir) / "alerts.jsonl"  # type: ignore[arg-type]  # set by then
    result.journal = journal if journal.exists() else None
    result.report_spec = Path(plugin.report_location) if plugin.report_location else None
    if result.run_dir:
        from .dashboard import build_dashboard

        page, analysis = build_dashboard(result.run_dir)
        result.dashboard = out / "dashboard.html"
        result.dashboard.write_text(page, encoding="utf-8")
        result.verdict = analysis.verdict()
    return result


def print_summary(r: DemoResult, stream: Any = None) -> None:
    from .analyze import analyze_path, render_text

    w = (stream or sys.stdout).write
    w("\n")
    if r.stopped_by:
        w(f"rlcluster stopped training at step {r.steps_run} of {r.max_steps} (rule {r.stopped_by}).\n")
    else:
        w(f"Training ran all {r.steps_run} steps.\n")
    for e in r.alerts:
        w(f"  alert step {e.step:>4}  {e.severity.upper():<4}  {e.rule}: {e.title}\n")
    w("\nWhere everything is:\n")
    if r.run_dir:
        w(f"  W&B offline run   {r.run_dir}\n")
        w(f"    upload it:      wandb sync {r.run_dir}\n")
    if r.journal:
        w(f"  alert journal     {r.journal}\n")
    if r.report_spec:
        w(f"  W&B report spec   {r.report_spec}\n")
        w("    save it:        rlcluster report --entity <you> --project rlcluster-demo "
          f"--trainer {'grpo' if r.trainer == 'grpo' else 'dpo'} --save\n")
    if r.dashboard:
        w(f"  dashboard         {r.dashboard}   (open it in a browser; no network needed)\n")
    if r.run_dir:
        w(f"\nrlcluster analyze {r.run_dir}\n\n")
        w(render_text(analyze_path(r.run_dir)) + "\n")
