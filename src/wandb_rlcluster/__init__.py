"""wandb-rlcluster: an instrument cluster for RL / preference-optimisation post-training."""

from .core import GAUGE_IDS, InstrumentCluster, analyze_rows

__version__ = "0.1.0"
__all__ = ["GAUGE_IDS", "InstrumentCluster", "__version__", "analyze_rows"]
