"""wandb-rlcluster: an instrument cluster for RL / preference-optimisation post-training."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .callback import RLClusterCallback
    from .core import GAUGE_IDS, InstrumentCluster, analyze_rows
    from .live.watch import watch, watch_on_init

__version__ = "0.1.0"
__all__ = ["GAUGE_IDS", "InstrumentCluster", "RLClusterCallback", "__version__", "analyze_rows", "watch",
           "watch_on_init"]


def __getattr__(name: str) -> Any:
    # Nothing is imported with the package itself: the guardian process (``python -m
    # wandb_rlcluster.guard.guardian``, started beside every training run) would pay ~170 ms of CPU for the core.
    if name in ("GAUGE_IDS", "InstrumentCluster", "analyze_rows"):
        from . import core

        return getattr(core, name)
    if name == "core":  # as bound when the package imported it itself
        return importlib.import_module(".core", __name__)
    # The callback pulls in transformers and torch; the analyzer and the core must not pay for that.
    if name == "RLClusterCallback":
        from .callback import RLClusterCallback

        return RLClusterCallback
    if name == "watch":  # any loop that logs to W&B (verl, OpenRLHF, your own): no transformers needed
        from .live.watch import watch

        return watch
    if name == "watch_on_init":  # watch the run a framework is about to create (verl's trainer calls wandb.init)
        from .live.watch import watch_on_init

        return watch_on_init
    raise AttributeError(f"module 'wandb_rlcluster' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
