"""A real multi-epoch SFT run's loss staircase is not a loss oscillation.

Trained for several epochs on a small data set, the loss is flat within an epoch and drops at each epoch boundary: a
staircase, which after the period reading's detrending is a sawtooth at the epoch's period. ``loss-oscillating``
reads the loss's period, so the loss gauge must not take that sawtooth for a swing: a period within 15 % of the rows
per epoch (from TRL's logged ``epoch``) is not one. The synthetic streams in test_early_warning.py test this guard;
this file tests it on the rows of a real ``trl.SFTTrainer`` run. The run memorises random token sequences (no
generalisation between samples, so a batch's loss depends on how many passes it has had), 4 optimizer steps to an
epoch, at a constant learning rate high enough that each pass lowers the log loss by 0.06 to 0.4. The other guard,
the skew of the row-to-row steps, does not hold this run by itself (its skew is -0.4 to -0.8 where the swing is
read, the limit 1.0), so the tests below turn it off to pin the epoch guard.

Why 4 steps an epoch and not 6: a noise-free staircase of 6 rows an epoch puts only 0.66-0.68 of its detrended
variance in its fundamental (the rule needs ``osc_share`` 0.65), so a real one, with batch noise, reads as a swing
only now and then (96 sequences, 10 epochs: 2 seeds in 3, at the last rows; 13 epochs: 1 in 3), and a test on it
could pass for want of a swing to suppress. At 4 rows an epoch a clean staircase puts 0.80 there: with the ``epoch``
key dropped and the skew guard off, this run fires the rule at step 40 for seeds 0, 2, 3, 4 and 5 (seed 1 peaks at
a share of 0.63 once the amplitude passes 0.12). Seed 3 reads a swing at every reading from row 39 on (share 0.73 to
0.83, amplitude 0.15 to 0.23). The run stops at 12 epochs: at 13, the memorised tail, where samples are forgotten
between visits, swings for real and the live rule fires at step 50 for seeds 2 and 4, ``epoch`` or not.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import tempfile
from collections.abc import Mapping
from typing import Any

import pytest

# Nothing here may reach the Hub (tiny.py sets the same defaults; this covers an earlier hub import).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from transformers import PrinterCallback  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from wandb_rlcluster.callback import RLClusterCallback  # noqa: E402
from wandb_rlcluster.core import InstrumentCluster, analyze_rows  # noqa: E402
from wandb_rlcluster.tiny import build_model, build_tokenizer  # noqa: E402

# TRL 1.16 itself still calls the deprecated transformers alias; that is not ours to fix.
pytestmark = [pytest.mark.trains,  # trains a tiny model for real (make test-kernels)
              pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")]

SEED = 3  # the largest margin on both sides of the six seeds tried (see above)
SEQUENCES = 64  # random token sequences to memorise
SEQ_LEN = 16
BATCH = 16
STEPS_PER_EPOCH = SEQUENCES // BATCH  # 4 logged rows an epoch (logging_steps=1)
EPOCHS = 12  # stops before the memorised tail, where forgetting between visits makes the loss swing for real
LEARNING_RATE = 6e-3
HIDDEN = 256  # the tiny model's width: enough capacity to memorise 64 x 16 random tokens in a dozen epochs

SKEW_OFF = {"loss": {"osc_skew": 1e9}}  # the other staircase guard (step skew) off: only the epoch guard is left


def _train(seed: int = SEED) -> tuple[list[dict[str, Any]], RLClusterCallback, int]:
    """Run the real SFTTrainer with the product's callback attached; return its log history, the callback and the
    planned steps."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden=HIDDEN, layers=2, heads=4, seed=seed)
    rng = random.Random(seed)
    # ids 4.. skip the special tokens; an already tokenized data set goes into SFT as it is
    ids = [[rng.randrange(4, len(tokenizer)) for _ in range(SEQ_LEN)] for _ in range(SEQUENCES)]
    callback = RLClusterCallback(alerts=False, stop_on=None, log_to_wandb=False, grad_every=0, attention_every=0,
                                 lora_every=0, sample_every=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small runs 2x faster on one thread, and far faster on a busy box
    try:
        with tempfile.TemporaryDirectory() as out:
            args = SFTConfig(
                output_dir=out,
                num_train_epochs=EPOCHS,
                per_device_train_batch_size=BATCH,
                gradient_accumulation_steps=1,
                learning_rate=LEARNING_RATE,
                lr_scheduler_type="constant",  # the same drop each pass; a decaying rate would flatten the later steps
                warmup_steps=0,
                logging_steps=1,
                save_strategy="no",
                report_to="none",
                seed=seed,
                use_cpu=True,
                bf16=False,  # TRL defaults to bf16 autocast, on CPU too: fp32 is what the numbers here were measured in
                fp16=False,
                activation_checkpointing=False,  # TRL defaults to recomputing activations: slower, nothing saved
                disable_tqdm=True,
                dataloader_num_workers=0,
                max_length=SEQ_LEN + 2,
            )
            trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_dict({"input_ids": ids}),
                                 processing_class=tokenizer, callbacks=[callback])
            trainer.remove_callback(PrinterCallback)
            trainer.train()
    finally:
        torch.set_num_threads(threads)
    return list(trainer.state.log_history), callback, int(trainer.state.max_steps)


@pytest.fixture(scope="module")
def run() -> tuple[list[dict[str, Any]], RLClusterCallback, int]:
    """One real run serves every test (CPU is scarce)."""
    return _train()


def _train_rows(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in history if "loss" in r]


def _oscillating(cluster: InstrumentCluster) -> list[str]:
    return [f.message for f in cluster.findings if f.rule == "loss-oscillating"]


def _without_epoch(history: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    return [{k: v for k, v in r.items() if k != "epoch"} for r in history]


def test_the_run_forms_an_epoch_staircase(run: tuple[list[dict[str, Any]], RLClusterCallback, int]) -> None:
    """The premise: the real loss really is a staircase of 4-row epochs (else the other tests would mean nothing)."""
    history, _, max_steps = run
    rows = _train_rows(history)
    assert max_steps == EPOCHS * STEPS_PER_EPOCH
    assert len(rows) == max_steps, "logging_steps=1: one train row per optimizer step"
    assert all(r.get("epoch") == pytest.approx((i + 1) / STEPS_PER_EPOCH) for i, r in enumerate(rows))
    logs = [math.log(r["loss"]) for r in rows]
    epochs = [logs[e * STEPS_PER_EPOCH:(e + 1) * STEPS_PER_EPOCH] for e in range(EPOCHS)]
    means = [statistics.fmean(e) for e in epochs]
    drops = [a - b for a, b in zip(means, means[1:], strict=False)]
    spreads = [statistics.pstdev(e) for e in epochs]
    # each epoch's mean loss at least 3 % under the one before (measured: 7.6 % or more), 5x over the run (10.8x)
    assert min(drops) > 0.03, drops
    assert means[0] - means[-1] > math.log(5.0), means
    # and flat within an epoch against those drops (measured: a median spread of 0.027 against a median drop of 0.25)
    assert statistics.median(spreads) < 0.25 * statistics.median(drops), (spreads, drops)


def test_the_callback_reads_no_oscillation_on_the_staircase(
        run: tuple[list[dict[str, Any]], RLClusterCallback, int]) -> None:
    """What a user runs: the callback inside the trainer raises nothing on the loss gauge, and it saw the epochs."""
    _, callback, _ = run
    cluster = callback.cluster
    assert callback.errors == 0
    assert cluster.family == "sft"
    assert not _oscillating(cluster)
    assert not [f for f in cluster.findings if f.gauge == "loss" and f.severity in ("warn", "stop")], cluster.findings
    assert cluster.gauges["loss"].epoch_rows == pytest.approx(STEPS_PER_EPOCH)


def test_the_epoch_counter_alone_keeps_the_staircase_quiet(
        run: tuple[list[dict[str, Any]], RLClusterCallback, int]) -> None:
    """The logged rows offline, with the skew guard off: the epoch guard by itself holds."""
    history, _, max_steps = run
    cluster = analyze_rows(history, trainer="sft", params=SKEW_OFF, max_steps=max_steps)
    assert not _oscillating(cluster)
    assert cluster.gauges["loss"].epoch_rows == pytest.approx(STEPS_PER_EPOCH)
    # the default guards read the same rows the same way offline as live
    assert not _oscillating(analyze_rows(history, trainer="sft", max_steps=max_steps))


def test_without_its_guards_the_staircase_reads_as_an_oscillation(
        run: tuple[list[dict[str, Any]], RLClusterCallback, int]) -> None:
    """The same rows without ``epoch`` and with the skew guard off fire ``loss-oscillating`` at the epoch's period:
    the staircase does trip the period reading, so the quiet above is the guard's doing and this test can fail."""
    history, _, max_steps = run
    cluster = analyze_rows(_without_epoch(history), trainer="sft", params=SKEW_OFF, max_steps=max_steps)
    messages = _oscillating(cluster)
    assert messages, "the staircase no longer reads as a swing: this file's guard tests prove nothing"
    assert f"repeating every {STEPS_PER_EPOCH} logged rows" in messages[0], messages
