"""Where a bounded reward sits in its range, and what that level explains (issue #28: noise from the level).

A verifier reward is a mean of per-completion scores in a fixed range, so its level says how often a group
of G completions scores alike by chance: at success rate p a group is all-correct with probability p^G and
all-wrong with (1 - p)^G. Two readings follow that need no knowledge of G:

* the uniform groups are mostly **solved** prompts when p > 1/2 (p^G > (1 - p)^G for every G) and mostly
  **failed** ones below: a vanishing group signal on the success side is a task being learned, on the failure
  side a task too hard for the model;
* a zero gradient in group-relative training is explained when most groups are uniform on the success side
  and the reward is still moving; a reward frozen to the digit, or sitting on the failure side, is not.

The level is the reward itself when every reward seen lies in [0, 1] (a success rate), its share of the highest
reward seen for a larger non-negative reward (a sum of 0/1 verifiers starts at 0), and unknown for a signed one
(a penalty scale has no floor that means "every completion failed"): the rules then read as they did without it.
"""

from __future__ import annotations

import math
from typing import Any

from .fields import slot_names
from .gauge import finite


class RewardLevel:
    """The reward's level as a success rate in [0, 1], its smoothed value, and whether it is frozen."""

    __slots__ = ("lo", "hi", "last", "same", "smooth", "alpha", "n")

    def __init__(self, alpha: float = 0.3) -> None:
        self.lo = math.inf
        self.hi = -math.inf
        self.last = math.nan
        self.same = 0  # consecutive rows whose reward equals the previous one exactly
        self.smooth = math.nan
        self.alpha = alpha
        self.n = 0

    def push(self, r: float | None) -> float:
        """Take one row's reward (None or non-finite: ignored); returns the row's level (nan when unknown)."""
        if r is None or not finite(r):
            return math.nan
        self.n += 1
        self.same = self.same + 1 if r == self.last else 0
        self.last = r
        lo = self.lo = min(self.lo, r)
        hi = self.hi = max(self.hi, r)
        # level(r), inline: it is read on every row of three gauges
        if lo < 0.0:
            p = math.nan
        elif hi <= 1.0:
            p = min(max(r, 0.0), 1.0)
        else:
            p = min(max(r, 0.0), hi) / hi
        smooth = self.smooth
        self.smooth = p if smooth != smooth else smooth + self.alpha * (p - smooth)
        return p

    def level(self, r: float) -> float:
        """``r`` as a success rate: itself for a reward in [0, 1], its share of the highest seen for a larger
        non-negative one (a sum of verifiers), nan for a signed reward (no floor says "every completion failed")."""
        if self.lo < 0.0:
            return math.nan
        if self.hi <= 1.0:
            return min(max(r, 0.0), 1.0)
        return min(max(r, 0.0), self.hi) / self.hi

    @property
    def now(self) -> float:
        """The last row's level (nan before any reward)."""
        return self.level(self.last) if self.n else math.nan

    @property
    def frozen(self) -> bool:
        """The reward repeated its previous value exactly: a sampled mean does not do that while the policy moves."""
        return self.same >= 1

    def success_side(self, smoothed: bool = False) -> bool:
        """The uniform groups are mostly all-correct (level > 1/2); False when the level is unknown."""
        p = self.smooth if smoothed else self.now
        return p == p and p > 0.5

    def state_dict(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi, "last": self.last, "same": self.same, "smooth": self.smooth,
                "alpha": self.alpha, "n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in slot_names(self):
            if k in state:
                setattr(self, k, int(state[k]) if k in ("same", "n") else float(state[k]))
