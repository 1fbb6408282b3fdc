"""Alert rules (alerts.yaml): validation, evaluation, and dispatch to the journal, W&B and direct channels."""

from .config import AlertConfig, ConfigError, Rule, load_config, parse_duration
from .engine import AlertEngine, AlertEvent

__all__ = ["AlertConfig", "AlertEngine", "AlertEvent", "ConfigError", "Rule", "load_config", "parse_duration"]
