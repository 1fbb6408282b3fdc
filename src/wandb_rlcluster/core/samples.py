"""Gauge 5: generated samples, repetition loops and format drift (live runs only)."""

from __future__ import annotations

from .gauge import Gauge, finite
from .keys import Row
from .rollouts import ROLLOUT_DEFAULTS, ROLLOUT_INPUTS, ROLLOUT_OUTPUTS, SAMPLES_ROLLOUT_RULES, samples_rules
from .rule import INSTRUMENTS, Example, Rule
from .streams import after, live


class SamplesGauge(Gauge):
    """Gauge 5 — generated samples: repetition loops and format drift (live runs only).

    Reads the greedy probe samples and, with rollouts (``RLClusterCallback.attach`` or a W&B completions
    table), the training completions themselves (``core/rollouts.py``).
    """

    id = "samples"
    title = "Generation samples"
    inputs = ("samples/repetition_rate", *ROLLOUT_INPUTS["samples"])
    outputs = ("repetition_rate", "distinct_2", "mean_chars", *ROLLOUT_OUTPUTS["samples"])
    live_only = True
    defaults = {"repetition": 0.5, "repetition_for": 2, **ROLLOUT_DEFAULTS["samples"]}

    def observe(self, row: Row) -> None:
        samples_rules(self, row)
        r = row.values.get("samples/repetition_rate")
        if r is None or not finite(r):
            return
        self.derived["repetition_rate"] = r
        for k in ("samples/distinct_2", "samples/mean_chars"):
            if k in row.values:
                self.derived[k.split("/", 1)[1]] = row.values[k]
        self.check("sample-repetition", r > self.p["repetition"], "warn", "samples/repetition_rate", r,
                   lambda: f"{r:.0%} of sampled n-grams are repeats: generations are looping.",
                   for_=self.p["repetition_for"])


#: The samples gauge's rules: the live probe's, then the training completions' (``core/rollouts.py``).
SAMPLES_RULES: tuple[Rule, ...] = (
    Rule(
        "samples", "sample-repetition", severities=("warn",),
        reads="samples/repetition_rate (live probe generations)",
        test="level above a line, held `repetition_for` rows",
        params=("repetition", "repetition_for"),
        means="generations are looping",
        fix="add a repetition penalty; check the reward for paying repeats",
        seed="repetition loops, format drift", seed_source=INSTRUMENTS,
        example=Example(
            "sft", lambda i, g: live(i, g, **{"samples/repetition_rate": 0.1 + 0.6 * after(i, 60)}),
            lambda i, g: live(i, g, **{"samples/repetition_rate": 0.1}), 100, 60, 61, "samples/repetition_rate"),
    ),
    *SAMPLES_ROLLOUT_RULES,
)
