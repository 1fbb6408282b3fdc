"""The callback's state in a checkpoint (transformers' ``ExportableState``): its arguments and what it has seen.

``state()`` stores the rules themselves (not a path), the gauges' windows and baselines, the alert states and the
rollout statistics; transformers rebuilds the callback from ``args`` and sets each of ``attributes`` on it. A resume
without ``restore_callback_states_from_checkpoint`` takes the same state from ``trainer_state.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from transformers.trainer_callback import ExportableState

from ..core.cluster import check_warn_sooner, checked_params
from ..core.text import clean_text

logger = logging.getLogger("wandb_rlcluster")

ARGS = ("trainer", "params", "stop_on", "save_on_stop", "grad_every", "attention_every", "lora_every", "sample_every",
        "sample_tokens", "log_to_wandb", "wandb_min_interval", "prefix", "channel_wait", "gold_rewards",
        "warn_sooner", "keys")
"""The constructor arguments a checkpoint stores, as the callback keeps them (``alerts`` and liveness apart)."""


def checked_args(params: Mapping[str, Mapping[str, Any]] | None, warn_sooner: int | None,
                 restored: bool) -> tuple[dict[str, dict[str, Any]], int | None]:
    """The gauge parameters and ``warn_sooner`` checked: a bad one raises ValueError, except in the arguments of a
    checkpoint written by an older version (``restored``), where it is left out with a warning so the resume runs."""
    checked, problems = checked_params(params)
    if problems and not restored:
        raise ValueError("; ".join(problems))
    for problem in problems:  # a checkpoint of an older version: a resume must not fail on a renamed knob
        logger.warning("rlcluster: the checkpoint's %s; left out", problem)
    sooner: int | None = None
    if warn_sooner is not None:
        try:
            sooner = check_warn_sooner(warn_sooner)
        except ValueError as e:
            if not restored:
                raise
            logger.warning("rlcluster: the checkpoint's %s; using 0", e)
            sooner = 0
    return checked, sooner


class CheckpointState(ExportableState):
    """``state()`` and the attributes it names, for RLClusterCallback."""

    cluster: Any
    engine: Any
    alert_config: Any
    rollouts: Any
    liveness_args: dict[str, Any]
    _restored: bool

    def state(self) -> dict[str, Any]:
        return {
            # the rules themselves, not a path: a relative path breaks in another directory, and an AlertConfig
            # object has no path at all
            "args": {"alerts": self.alert_config.to_dict() if self.alert_config is not None else False,
                     **{k: getattr(self, k) for k in ARGS}, **self.liveness_args, "restored": True},
            "attributes": {"cluster_state": self.cluster.state_dict(),
                           "engine_state": self.engine.state_dict() if self.engine else {},
                           **({"rollout_state": self.rollout_state} if self.rollouts.stats is not None else {})},
        }

    def restore_from_trainer_state(self, state: Any) -> None:
        """transformers restores callback state only with restore_callback_states_from_checkpoint=True; the state is
        in trainer_state.json either way, so take it from there when resuming."""
        stored = (getattr(state, "stateful_callbacks", None) or {}).get(type(self).__name__)
        if isinstance(stored, list):
            stored = stored[-1] if stored else None
        if stored and not self._restored and self.cluster.rows == 0 and state.global_step > 0:
            attributes = stored.get("attributes", {})
            self.cluster_state = attributes.get("cluster_state", {})
            self.engine_state = attributes.get("engine_state", {})
            if attributes.get("rollout_state"):
                self.rollout_state = attributes["rollout_state"]

    @property
    def cluster_state(self) -> dict[str, Any]:
        return self.cluster.state_dict()

    @cluster_state.setter
    def cluster_state(self, value: Mapping[str, Any]) -> None:
        try:
            self.cluster.load_state_dict(value)
            self._restored = True
        except Exception as e:  # noqa: BLE001 - a damaged state must not stop a resume
            logger.warning("rlcluster: could not restore gauge state from the checkpoint (%s); starting fresh",
                           clean_text(e, 300))

    @property
    def engine_state(self) -> dict[str, Any]:
        return self.engine.state_dict() if self.engine else {}

    @engine_state.setter
    def engine_state(self, value: Mapping[str, Any]) -> None:
        if self.engine is not None and value:
            try:
                self.engine.load_state_dict(value)
            except Exception as e:  # noqa: BLE001
                logger.warning("rlcluster: could not restore alert state from the checkpoint (%s)", clean_text(e, 300))

    @property
    def rollout_state(self) -> dict[str, Any]:
        return self.rollouts.state_dict()

    @rollout_state.setter
    def rollout_state(self, value: Mapping[str, Any]) -> None:
        self.rollouts.load_state_dict(value)
