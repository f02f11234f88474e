"""Backoffs shared by the watches and the agent's loops: doubling, capped, with jitter for the streams."""

from __future__ import annotations

import random
from typing import Final

BACKOFF_BASE_SECONDS: Final = 0.2
BACKOFF_CAP_SECONDS: Final = 30.0


def backoff_delay(failures: int, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS) -> float:
    """Seconds to wait after ``failures`` consecutive failures (0 for the first retry's base): doubling, capped."""
    if failures < 0:
        raise ValueError("failures cannot be negative")
    # 2**failures grows without bound; cap the exponent first so a long outage cannot overflow a float.
    delay: float = base * 2 ** min(failures, 64)
    return min(cap, delay)


class Backoff:
    """One stream's backoff (a watch's reconnects): doubling with jitter, reset on success.

    The jitter (up to +50 %) keeps many replicas, or many watches, from reconnecting in lockstep after an
    API server restart.
    """

    def __init__(self, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next(self, rand: float | None = None) -> float:
        delay = backoff_delay(self.failures, self.base, self.cap)
        self.failures += 1
        return min(self.cap, delay * (1 + 0.5 * (random.random() if rand is None else rand)))

    def reset(self) -> None:
        self.failures = 0
