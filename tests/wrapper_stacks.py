"""Shared pieces of the wrapper tests: a controllable clock, inners, and a native-expiry stub."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_sessions import Capability, InMemorySession
from agent_sessions.core.base import STORE_CAPABILITIES


class FakeClock:
    """A clock the test moves by hand; starts at a fixed wall-clock-like time."""

    def __init__(self, start: float = 1_764_700_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class NativeExpiryMemorySession(InMemorySession):
    """An in-memory session with the SupportsNativeExpiry capability, driven by a FakeClock:
    every write sets the session's deadline, and ``sweep()`` does what the store's expiry
    would (Redis EXPIRE / a Mongo TTL index) once that deadline has passed."""

    capabilities = STORE_CAPABILITIES | {Capability.NATIVE_EXPIRY}

    def __init__(self, session_id: str, *, clock: FakeClock, **options: Any) -> None:
        super().__init__(session_id, **options)
        self.clock = clock
        self.native_ttl: float | None = None
        self.deadline: float | None = None

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        self.native_ttl = ttl_seconds

    def _member_options(self) -> dict[str, Any]:
        return {**super()._member_options(), "clock": self.clock}

    async def _append(self, payloads: list[str]) -> list[int]:
        seqs = await super()._append(payloads)
        if self.native_ttl is not None:
            self.deadline = self.clock() + self.native_ttl
        return seqs

    async def sweep(self) -> None:
        if self.deadline is not None and self.clock() > self.deadline:
            await self._clear()


class CountingSession(InMemorySession):
    """Records the limit of every get_items call that reaches the store."""

    def __init__(self, session_id: str, **options: Any) -> None:
        super().__init__(session_id, **options)
        self.limits: list[int | None] = []

    async def get_items(self, limit: int | None = None) -> Any:
        self.limits.append(limit)
        return await super().get_items(limit)


class YieldingSession(InMemorySession):
    """Gives the event loop one turn before each operation, so a test can cancel a
    multi-step task (like a rotation) deterministically between any two operations."""

    async def get_items(self, limit: int | None = None) -> Any:
        await asyncio.sleep(0)
        return await super().get_items(limit)

    async def add_items(self, items: Any) -> None:
        await asyncio.sleep(0)
        await super().add_items(items)

    async def pop_item(self) -> Any:
        await asyncio.sleep(0)
        return await super().pop_item()

    async def clear_session(self) -> None:
        await asyncio.sleep(0)
        await super().clear_session()

    async def get_sequenced_items(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return await super().get_sequenced_items(*args, **kwargs)

    async def rewrite_items(self, pairs: Any) -> int:
        await asyncio.sleep(0)
        return await super().rewrite_items(pairs)


class IdentitySummarizer:
    """ "Summarises" a part of the history as exactly those items: the view then always equals
    the full history, so the kit's exact assertions check that compaction keeps the contract."""

    name = "identity"

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        return [*previous_summary, *items]
