"""The instrument core: pure Python + numpy, no wandb, no torch.

Shared by the live callback, the offline analyzer, the alert engine and the
report builder.
"""

from .cluster import GAUGE_CLASSES, GAUGE_IDS, GAUGE_TITLES, REPORTING_CLASSES, InstrumentCluster, analyze_rows
from .diagnosis import DIAGNOSIS_ID, PATTERNS
from .findings import Finding
from .keys import FAMILIES, FAMILY_LABELS, Normalizer, Row, canonical_family, detect_family
from .settings import RunSettings

__all__ = [
    "DIAGNOSIS_ID",
    "FAMILIES",
    "FAMILY_LABELS",
    "GAUGE_CLASSES",
    "GAUGE_IDS",
    "GAUGE_TITLES",
    "Finding",
    "InstrumentCluster",
    "Normalizer",
    "PATTERNS",
    "REPORTING_CLASSES",
    "Row",
    "RunSettings",
    "analyze_rows",
    "canonical_family",
    "detect_family",
]
