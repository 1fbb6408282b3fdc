"""verl without a code change: ``VERL_USE_EXTERNAL_MODULES=wandb_rlcluster.verl_plugin``.

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` in every process that imports it, the Ray
TaskRunner that runs the PPO loop and calls ``wandb.init`` included. Importing this module makes every W&B run
that process starts watched (``watch_on_init``): the gauges read verl's keys by meaning, ``rlcluster/*`` goes
into the same run, alerts go to ``alerts.jsonl`` beside the run's files and to the channels of the alert file
named by ``RLCLUSTER_ALERTS`` (default: the shipped rules). It notifies; it does not stop verl (see
docs/frameworks.md for the three-line trainer subclass that does).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("wandb_rlcluster")


def install() -> None:
    """Watch every W&B run started in this process from now on (idempotent). A bad alert file raises its
    ConfigError (file, line and fix) here, at verl's start, before training; anything else is one warning."""
    from .alerts import ConfigError
    from .pipeline import load_alerts

    try:
        alerts = load_alerts(os.environ.get("RLCLUSTER_ALERTS") or None)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001
        logger.warning("rlcluster: verl plugin not installed (%s: %s); training runs unwatched", type(e).__name__, e)
        return
    try:
        from .live.watch import watch_on_init

        watch_on_init(framework=os.environ.get("RLCLUSTER_FRAMEWORK", "verl"), alerts=alerts)
    except Exception as e:  # noqa: BLE001 - a monitoring add-on must never stop verl from starting
        logger.warning("rlcluster: verl plugin not installed (%s: %s); training runs unwatched", type(e).__name__, e)


install()
