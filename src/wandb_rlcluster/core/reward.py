"""Gauge 9, reward dynamics: improving, flat, volatile, shifting, hacked, over-optimised against a gold reward.

Most of the seed post's "what to watch for" items are trends and spreads, not level lines: the reward rules judge
the reward against its own start and its own row-to-row noise, per reward function and, when the user names one,
against a held-out gold reward (``GoldCoupling``), because signals that never look at a trusted reward cannot tell
hacking from learning. The DPO family's margin, accuracy and chosen/rejected rewards are read here too.

The gauge composes parts, each with its statistics, its decision and its ``Rule`` declarations: the shared reward
series (``reward_series.py``), its level and plateau (``reward_level.py``), shifts (``reward_shift.py``), volatility
(``reward_volatility.py``), length-paid hacking (``reward_hacking.py``), gold coupling (``reward_gold.py``),
per-function components (``reward_components.py``) and the preference families (``reward_preference.py``). Its
checkpoint holds every part's statistics flat, under the names they had when the gauge held them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .gauge import Gauge, finite
from .keys import Row
from .part import GaugePart, load_parts_state, parts_state
from .reward_components import COMPONENT_RULES, RewardComponentsPart
from .reward_gold import GOLD_RULES, GoldCoupling, RewardGoldPart
from .reward_hacking import HACKING_RULES, RewardHackingPart
from .reward_level import LEVEL_RULES, RewardLevelPart
from .reward_preference import PREFERENCE_RULES, RewardPreferencePart
from .reward_series import PREFERENCE_FAMILIES, RewardSeries
from .reward_shift import SHIFT_RULES, RewardShiftPart
from .reward_volatility import VOLATILITY_RULES, RewardVolatilityPart
from .rollouts import REWARD_ROLLOUT_RULES, ROLLOUT_DEFAULTS, ROLLOUT_OUTPUTS, reward_rules
from .rule import Rule

__all__ = ["PREFERENCE_FAMILIES", "GoldCoupling", "RewardGauge", "RULES"]


class RewardGauge(Gauge):
    """Gauge 9 — reward dynamics.

    GRPO/RLOO/PPO: is the reward improving, flat-lined, unstable, shifting, or climbing suspiciously
    together with length (hacking)? A sudden upward shift alone is only ``info``: a policy that finds
    the solution jumps too; it becomes a warning in the reward-hacking diagnosis, when length or KL
    moves with it. A shift is a CUSUM against the reward's own noise, each row's fall clipped at
    ``shift_clip`` sigmas (twice that on a second row out): two heavy-tailed rows in a row are not a drop
    (unclipped, two rows at -8 sigma crossed ``shift_h`` = 12 by themselves), a drop that holds still is.
    Signals that never look at a trusted reward cannot tell hacking from learning, so
    a user can name held-out *gold* reward functions (TRL: weight 0 in ``reward_weights``, still
    logged as ``rewards/<fn>/mean``): the trained ``reward`` is the proxy, and the proxy rising while
    the gold stalls or falls is over-optimisation (Gao et al. 2023), unless the gold only stalled with the trained
    component whose batch noise it shares while another one carries the rise (``gold_explained_se``,
    ``gold_stall_se``). Without gold, the per-function
    rewards still show one component carrying the whole rise (``info``: a format reward is usually
    learned long before correctness), or pinned at its ceiling while the others stay flat for 50
    logged steps (``warn``: that component gives no signal any more and nothing else is learned).

    DPO family: margin and accuracy together — never the chosen reward alone, which often falls in
    healthy runs; but a chosen reward climbing past +1 without the rejected side falling is the
    post's "unbounded reward growth", read over a share of the run (``runaway_share``) and over its second
    half (``runaway_half_t``: per-step noise hides a slow runaway from any short window). A margin falling
    from its peak is read against a fit of the raw margin since that peak (``margin_peak_rows``), not only
    the run's second half, which still holds the climb up to the peak.
    """

    id = "reward"
    title = "Reward dynamics"
    inputs = ("reward", "objective/scores", "objective/rlhf_reward", "rewards/margins", "rewards/chosen",
              "rewards/accuracies", "accuracy", "margin")
    outputs = ("reward", "reward_ewma", "trend_t", "length_corr", "accuracy_ewma", "margin", "margin_ewma",
               "margin_peak", "chosen_ewma", "reward_noise", "volatility_ratio", "volatile_evidence", "shift_up",
               "shift_down", "gold", "gold_ewma", "gold_peak", "proxy_gold_gap", "proxy_gain_since_gold_peak",
               "gold_trend_t", "gold_half_t", "margin_recent_t", "plateau_gain_ucb", "gold_drop",
               "proxy_headroom_gain", "gold_headroom_gain", "gold_share_ucb",
               *ROLLOUT_OUTPUTS["reward"])
    defaults = {
        "window": 15, "min_rows": 50, "warmup_share": 0.08, "plateau_t": 1.0, "plateau_for": 20,
        "plateau_gain": 2.0, "plateau_z": 2.0,
        "flat_span": 1e-2, "flat_rows": 20, "flat_stop_rows": 50,
        "hack_length_ratio": 1.5, "hack_corr": 0.6, "hack_gain_sigma": 3.0, "pays_rows": 6, "pays_window": 12,
        "pays_corr": 0.8, "pays_jump_z": 8.0,
        "volatile_ratio": 2.2, "volatile_warmup": 30, "volatile_ratio_rl": 1.8,
        "volatile_window": 30, "volatile_warmup_rl": 16, "volatile_arl": 20000.0, "volatile_tol": 1.25,
        # shift: a CUSUM (k sigmas allowance per row, h to fire, each row's fall clipped at shift_clip sigmas)
        "shift_k": 1.0, "shift_h": 12.0, "shift_clip": 4.0, "shift_alpha": 0.05,
        "drop_share": 0.4, "drop_sigma": 4.0, "drop_for": 5,
        "drop_within": 50, "drop_gain_sigma": 3.0, "ceiling_drop_share": 0.1,
        "gold": [], "gold_stall_rows": 15, "gold_gap_sigma": 3.0, "gold_for": 10, "gold_stall_t": 0.5, "gold_half": 0,
        "gold_alpha": 0.1, "gold_drop_se": 4.0, "gold_drop_for": 3, "gold_rho": 0.3, "gold_noise_rows": 60,
        "gold_explained_se": 2.0, "gold_stall_se": 4.0, "gold_rising_t": 2.0,
        "gold_share": 0.1, "gold_share_z": 2.0, "gold_share_for": 3,
        "component_gain_sigma": 4.0, "component_flat_sigma": 1.0, "component_for": 10, "component_dead": 0.01,
        "saturated_for": 50, "saturated_level": 0.8,
        "margin_collapse": 0.5, "margin_collapse_se": 3.0, "margin_peak_min": 0.2, "accuracy_chance": 0.55,
        "dpo_min_rows": 30,
        "margin_learning_t": 2.0, "margin_plateau_growth": 0.2, "plateau_accuracy": 0.7, "margin_plateau_for": 15,
        "margin_plateau_rows": 20,
        "margin_shrink": 0.15, "margin_shrink_t": -2.0, "margin_shrink_sd": 5.0, "margin_shrink_for": 6,
        "margin_peak_rows": 20,
        "runaway_level": 1.0, "runaway_t": 3.0, "runaway_settle": 0.67, "runaway_share": 0.05, "runaway_half_t": 5.0,
        **ROLLOUT_DEFAULTS["reward"],
    }

    def setup(self) -> None:
        self.part_series = series = RewardSeries(self)
        self.part_level = RewardLevelPart(self, series)
        self.part_shift = shifts = RewardShiftPart(self, series)
        self.part_volatility = vol = RewardVolatilityPart(self)
        self.part_hacking = RewardHackingPart(self, series, shifts)
        self.part_gold = RewardGoldPart(self, series, vol)
        self.part_components = RewardComponentsPart(self)
        self.part_preference = RewardPreferencePart(self, vol)

    def parts(self) -> tuple[GaugePart, ...]:
        return (self.part_series, self.part_level, self.part_shift, self.part_volatility, self.part_hacking,
                self.part_gold, self.part_components, self.part_preference)

    @property
    def coupling(self) -> GoldCoupling:
        """The gold's coupling to the trained components (``reward_gold.GoldCoupling``)."""
        return self.part_gold.coupling

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out.update(parts_state(self.parts()))
        self.part_components.state_into(out)
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        comps = state.get("components") or {}
        rest = load_parts_state(self.parts(), {k: v for k, v in state.items() if k != "components"})
        super().load_state_dict(rest)
        self.part_components.load_components(comps)

    def plan_long(self) -> None:
        self.part_preference.plan_long()

    def plan_short(self) -> None:
        self.part_volatility.plan_short()

    def observe(self, row: Row) -> None:
        if row.kind != "train":
            return
        reward_rules(self, row)
        v = row.values
        if self.family in PREFERENCE_FAMILIES or "rewards/margins" in v:
            self.part_preference.observe(row)
            return
        if self.family == "reward":
            self.part_preference.observe_reward_model(v)
            return
        key = "reward" if "reward" in v else ("objective/scores" if "objective/scores" in v else None)
        if key is None:
            return
        r = v[key]
        if not finite(r):
            return
        e = self.part_series.push(r)
        gold = self.part_gold
        self.part_level.observe(key, r, gold.gold_score(v))
        self.part_volatility.observe(key, r, e, v.get("reward_std"))
        self.part_shift.observe(key, r, e)
        self.part_hacking.observe(key, r, v.get("completions/mean_length"))
        comp_keys = self.part_components.scan(v, gold.gold_keys)
        gold.observe(v, key, r, e, comp_keys)
        self.part_components.observe(v)


#: The reward gauge's rules (``core/catalog.py`` collects every module's): each part's, in this order.
RULES: tuple[Rule, ...] = (
    *LEVEL_RULES,
    *HACKING_RULES,
    *SHIFT_RULES,
    *VOLATILITY_RULES,
    *GOLD_RULES,
    *COMPONENT_RULES,
    *PREFERENCE_RULES,
    *REWARD_ROLLOUT_RULES,
)
