"""The resilient layer: retries, a circuit breaker and a durable on-disk spool, so a session stays
writable while its backend is down, and every write reaches it exactly once, in order."""

from .markers import BATCH_KEY
from .policy import CircuitBreaker, RetryPolicy
from .session import ResilienceStatus, ResilientSession
from .spool import Spool

__all__ = [
    "BATCH_KEY",
    "CircuitBreaker",
    "ResilienceStatus",
    "ResilientSession",
    "RetryPolicy",
    "Spool",
]
