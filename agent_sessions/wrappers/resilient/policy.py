"""Retry with exponential backoff and jitter, and a circuit breaker."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from ...core.options import check_int

BreakerState = Literal["closed", "open", "half-open"]


def check_number(name: str, value: object, *, positive: bool = False) -> None:
    """Raise ValueError unless ``value`` is a number >= 0 (> 0 when ``positive``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value > 0 if positive else value >= 0)
    ):
        raise ValueError(f"{name} must be a number {'>' if positive else '>='} 0, got {value!r}")


@dataclass(frozen=True)
class RetryPolicy:
    """How an operation on the primary is retried when it is unavailable.

    Attempt ``k`` (from 0) waits ``uniform(0, min(max_delay, base_delay * 2**k))`` before the
    next one ("full jitter"); all attempts and waits of one call together take at most
    ``total_timeout`` seconds (an attempt still running then is cancelled).

    Attributes:
        attempts: tries per call (1: no retry).
        base_delay: first backoff bound, seconds.
        max_delay: largest backoff bound, seconds.
        total_timeout: bound on one call's attempts and waits, seconds.
    """

    attempts: int = 4
    base_delay: float = 0.05
    max_delay: float = 1.0
    total_timeout: float = 5.0

    def __post_init__(self) -> None:
        check_int("attempts", self.attempts, 1)
        check_number("base_delay", self.base_delay)
        check_number("max_delay", self.max_delay)
        check_number("total_timeout", self.total_timeout, positive=True)

    def backoffs(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits between attempts (``attempts - 1`` of them)."""
        draw = (rng or random).uniform
        for k in range(self.attempts - 1):
            yield draw(0.0, min(self.max_delay, self.base_delay * 2**k))


class CircuitBreaker:
    """Stops calling a primary that keeps failing.

    ``closed``: calls go through; ``failure_threshold`` failed calls in a row (each after its
    retries) open it. ``open``: no calls for ``reset_timeout`` seconds, then ``half-open``: the
    next call is a single probe (no retries); its success closes the breaker, its failure opens
    it again.
    """

    def __init__(
        self,
        failure_threshold: int = 1,
        reset_timeout: float = 5.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_int("failure_threshold", failure_threshold, 1)
        check_number("reset_timeout", reset_timeout)
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half-open`` (reset_timeout has passed since it opened)."""
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.reset_timeout:
            return "half-open"
        return "open"

    def allows(self) -> bool:
        """Whether a call to the primary may be made now."""
        return self.state != "open"

    def record_success(self) -> None:
        self._failures, self._opened_at = 0, None

    def record_failure(self) -> None:
        self._failures += 1
        if self.state == "half-open" or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(state={self.state!r}, failure_threshold="
            f"{self.failure_threshold}, reset_timeout={self.reset_timeout})"
        )
