"""Shared fixtures: where the real logs live (beside the checkout, never in it); the benchmarks' modules on the path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# One intra-op thread per test process (and, through the environment, per subprocess it starts: the demo, torchrun's
# ranks, the W&B writers). The tiny models gain nothing from a second thread on an idle machine (the pretraining of
# the demo's model: 1.4 s on one thread or two), but under xdist the other worker keeps the other core busy, and a
# thread that waits for a descheduled peer at every op's barrier spins: with one core busy, the same pretraining took
# 6.0 s on two threads, 1.5 s on one, and the entropy demo 89 s against 18 s. Set before anything imports torch (its
# OpenMP runtime reads it once); an OMP_NUM_THREADS already set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # pragma: no cover - no pytest plugin here imports torch, but one could
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
DETECTION = BENCHMARKS / "detection"
# The labelled-log generator (``synthetic``), the seed-rule anchor, the harness and the real-log locator live beside
# the benchmarks, not in the installed package: they are test and benchmark data, not product.
for _p in (BENCHMARKS, DETECTION):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import wandb_rlcluster  # noqa: E402

from real_logs import absent, real_log, real_logs_root  # noqa: E402 - needs the path above

#: The folder the package under test is imported from, for a subprocess's PYTHONPATH: the checkout's src/, or
#: build/compiled (the compiled wheel unpacked) under ``make test-compiled``.
PACKAGE_ROOT = Path(wandb_rlcluster.__file__).resolve().parents[1]
if os.environ.get("RLCLUSTER_EXPECT_COMPILED"):  # make test-compiled: the suite must not pass on the pure core
    from wandb_rlcluster.core.build import core_build

    assert core_build() == "compiled", f"RLCLUSTER_EXPECT_COMPILED is set but the core under test is {core_build()}"


def shared_log(*parts: str) -> Path:
    """A real log under ../shared/real-logs ($RLCLUSTER_REAL_LOGS); skips the calling test when it is absent."""
    path = real_log(*parts)
    reason = absent(path)
    if reason:
        pytest.skip(reason)
    return path


def skipped_param(reason: str) -> list:
    """The params of a test parametrized over real logs that are absent: one that skips with ``reason``, so the test
    says why instead of pytest's 'got empty parameter set'."""
    return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="absent")]


def shared_log_params(subdir: str, pattern: str) -> list:
    """pytest params, one per real log matching ``pattern`` in ``subdir`` (id: its name), or one that skips with the
    reason where the folder is absent."""
    folder = real_log(subdir)
    reason = absent(folder)
    if reason:
        return skipped_param(reason)
    return [pytest.param(p, id=p.name) for p in sorted(folder.glob(pattern))]


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The folder of real TRL logs (its top level); skips where it is absent or holds none."""
    root = real_logs_root()
    if not root.is_dir() or not any(root.glob("*.json")):
        pytest.skip(f"real logs not present at {root} (set RLCLUSTER_REAL_LOGS to the shared real-logs folder)")
    return root


@pytest.fixture(scope="session")
def verl_ppo_log() -> Path:
    """A real verl PPO console log (Qwen2.5-0.5B, GSM8K, 435 steps) whose KL to the reference crosses 0.15 in its
    second third: the run the watch/sidecar tests replay through real wandb."""
    return shared_log("verl", "eric-haibin-lin__gsm8k_Qwen2.5-0.5B-ppo-resp512.log.gz")


# Modules whose tests share one expensive module- or session-scoped result (a training run, a W&B run written by a
# subprocess, a detection corpus): under pytest-xdist each worker would build its own copy, so each module is one
# group of tests that runs on one worker (make test passes --dist loadgroup; the scheduler below does the grouping).
SHARED_RUN_MODULES = frozenset({
    "test_gold_trl", "test_hardening_runs", "test_rollouts_trl", "test_sft_epoch_staircase", "test_wandb_thinning",
    "test_watch", "test_sidecar", "test_verl_layout", "test_wandb_offline", "test_detection_slice",
    "test_gauge_outputs", "test_sweep", "test_sources", "test_sources_trl",
})
# test_callback_trl's session-shared runs (metrics_run, ppo_rows_run), read by tests in several modules: one group per
# run rather than per module, so the many different runs still spread over the workers. Keyed by the test's file and
# name; the value turns its parameter id (``grpo-after``: kind, then order) into the run's group.
SHARED_RUN_TESTS = {
    # GRPO's "after" run is also read by test_rollouts_trl (a group of its own): it joins that group
    "test_callback_trl.py::test_callback_metrics_reach_wandb":
        lambda ids: "test_rollouts_trl" if ids == "grpo-after" else f"metrics-run-{ids}",
    "test_panel_keys.py::test_every_plotted_key_exists_in_a_real_run": lambda ids: f"metrics-run-{ids}-after",
    "test_panel_keys.py::test_sft_eval_loss_is_stored_as_eval_slash_loss": lambda ids: "metrics-run-sft-after",
    "test_callback_trl.py::test_ppo_shaped_rows_through_real_trainer_log": lambda ids: "ppo-rows-run",
    "test_panel_keys.py::test_every_plotted_ppo_key_exists_in_the_replayed_ppo_run": lambda ids: "ppo-rows-run",
}
# the rule pages rendered once (render_pages, 4 s) for the two tests that compare and read them
SHARED_RUN_TESTS.update({f"test_rule_catalog.py::{name}": lambda ids: "rule-pages" for name in (
    "test_the_committed_rule_pages_and_pictures_are_current", "test_rule_pictures_show_the_decision")})
# test_sharded's two-rank run per engine (engine_run), read by four tests each; FSDP2's probe test also reads DDP's run.
SHARED_RUN_TESTS.update({
    f"test_sharded.py::{name}": lambda ids: "sharded-" + ("ddp" if ids in ("ddp", "fsdp2") else ids)
    for name in ("test_sharding_is_really_on", "test_layer_norms_equal_the_full_gradient_reference",
                 "test_stop_lands_on_the_same_step_and_its_save_completes",
                 "test_forward_probes_run_under_every_engine")
})


def shared_run_group(nodeid: str) -> str | None:
    """The group of tests sharing one expensive result that ``nodeid`` belongs to (None: it shares none)."""
    path, _, rest = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    if file.removesuffix(".py") in SHARED_RUN_MODULES:
        return file.removesuffix(".py")
    name, _, ids = rest.partition("[")
    group = SHARED_RUN_TESTS.get(f"{file}::{name}")
    return group(ids.removesuffix("]")) if group is not None else None


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadgroup``: xdist's load-scope scheduler, each group of :func:`shared_run_group` one unit of work
    sent whole to one worker, every other test a unit of its own.

    Not xdist's own loadgroup scheduler: it reads an ``xdist_group`` mark through a suffix it writes into the test's
    node id, and with pytest >= 9.2 (structured node ids) that write no longer takes, so every group was split over
    the workers and each worker trained its own copy of the shared run (pytest-xdist issue #1386). Units go out
    biggest group first (xdist's loadscope order), then single tests in collection order, which
    :func:`pytest_collection_modifyitems` puts training tests first.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_run_group(nodeid) or nodeid

    return SharedRunScheduling(config, log)


def _cost_rank(item: pytest.Item) -> int:
    """0: trains a model; 1: slow without training; 2: the rest. Long tests go out first, so that the last minutes of
    a parallel run are many short tests spread over the workers, not one long test on one of them."""
    if item.get_closest_marker("trains"):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (by fixture scope)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("numprocesses", None):  # only under xdist: a plain run keeps the files' order
        items.sort(key=_cost_rank)  # stable: a module's tests keep their order and stay together within a rank
