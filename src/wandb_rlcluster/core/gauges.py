"""The gauges a cluster runs, in their order: the fourteen gauges, then the break watcher and the diagnoser."""

from __future__ import annotations

from .attention_entropy import AttentionEntropyGauge
from .breaks_gauge import BREAKS_ID, BreakWatcher
from .convergence import ConvergenceGauge
from .diagnosis import DIAGNOSIS_ID, Diagnoser
from .efficiency import EfficiencyGauge
from .entropy import EntropyGauge
from .gauge import Gauge
from .gradients import GradientGauge
from .kl import KLGauge
from .learning_rate import LearningRateGauge
from .length import LengthGauge
from .lora import LoraGauge
from .loss import LossGauge
from .policy_ratio import PolicyRatioGauge
from .reward import RewardGauge
from .reward_signal import RewardSignalGauge
from .samples import SamplesGauge

GAUGE_CLASSES: tuple[type[Gauge], ...] = (
    LossGauge,
    GradientGauge,
    LearningRateGauge,
    AttentionEntropyGauge,
    SamplesGauge,
    LoraGauge,
    EfficiencyGauge,
    ConvergenceGauge,
    RewardGauge,
    KLGauge,
    PolicyRatioGauge,
    LengthGauge,
    EntropyGauge,
    RewardSignalGauge,
)
GAUGE_IDS: tuple[str, ...] = tuple(g.id for g in GAUGE_CLASSES)
#: Everything that writes ``rlcluster/<id>/<key>``: the fourteen gauges, the break watcher and the diagnoser.
REPORTING_CLASSES: tuple[type[Gauge], ...] = (*GAUGE_CLASSES, BreakWatcher, Diagnoser)
#: What reads across the gauges (their rows or their rules), not one of them.
WATCHER_IDS = (BREAKS_ID, DIAGNOSIS_ID)
KNOWN_INPUTS = frozenset(k for g in GAUGE_CLASSES for k in g.inputs)
GAUGE_TITLES: dict[str, str] = {g.id: g.title for g in GAUGE_CLASSES}
#: Gauges whose rules change severity with the reward's progress: they read the gold reward too.
GOLD_AWARE = ("reward", "entropy", "length", "reward_signal", BREAKS_ID, DIAGNOSIS_ID)
