"""The shared clock of a TTL session family: one lifecycle for the session and its side stores.

Without it each side store (branch log, branch items, usage, compaction records) expired by its
own writes: writing to a branch let the parent's turns expire under it, and a compaction
summary could expire while the originals it hides came back. So a ``TTLSession`` whose inner
session has a family keeps, in the family's ``"ttl"`` side store, records of the family's
writes::

    {"t": <time of the write>, "c": <start of the family's current lifetime>}

Every write to any member appends one (before the items it stamps), so a write anywhere keeps
the whole family alive (sliding) and a write into a dead family starts a new lifetime. Every
member reads the newest record: the family is dead once ``ttl`` passed since ``t`` (sliding) or
since ``c`` (absolute), and an item stamped before ``c`` belongs to an earlier lifetime.
``item_ttl`` stays per item. Over a store with native expiry, the family's writes also refresh
the expiry of every member at least every ``ttl / 2``, so no member is removed by the store
while the family lives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.memory import Session

from ..core.capabilities import Capability, supports

PURPOSE = "ttl"
"""The side store holding the family's lifecycle records."""

_TRIM_EVERY = 16
"""Records are trimmed to the newest one every this many writes (one range delete)."""


@dataclass(frozen=True)
class State:
    """The family's newest write and the start of its current lifetime."""

    t: float
    c: float


class Lifecycle:
    """Reads and advances one family's lifecycle records."""

    def __init__(
        self,
        store: Session,
        *,
        ttl: float,
        sliding: bool,
        refresh: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.sliding = sliding
        self._refresh = refresh
        self._refreshed: float | None = None
        self._lock = asyncio.Lock()

    async def read(self) -> State | None:
        """The newest record, or None when the family was never written (or was purged)."""
        newest = await self.store.get_items(limit=1)
        return _state(newest[-1]) if newest else None

    def dead(self, state: State | None, now: float, margin: float = 0.0) -> bool:
        """Whether the whole family is dead at ``now`` (None: never written)."""
        if state is None:
            return True
        start = state.t if self.sliding else state.c
        return now - start > self.ttl + margin

    async def touch(self, now: float) -> State:
        """Record a write at ``now``; return the family's state including it."""
        state = await self.read()
        c = now if self.dead(state, now) or state is None else state.c
        record: Any = {"t": now, "c": c}
        if supports(self.store, Capability.SEQUENCED):
            seq = (await self.store.add_sequenced_items([record]))[0]  # type: ignore[attr-defined]
            if seq % _TRIM_EVERY == 0 and supports(self.store, Capability.RANGE_DELETE):
                await self.store.delete_items(before=seq)  # type: ignore[attr-defined]
        else:
            await self.store.add_items([record])
        if self._refresh is not None and (
            self._refreshed is None or now - self._refreshed > self.ttl / 2
        ):
            async with self._lock:
                self._refreshed = now
                await self._refresh()
        return State(now, c)

    async def forget(self) -> None:
        """Delete the records (the family is dead beyond every margin)."""
        await self.store.clear_session()


def _state(record: Any) -> State | None:
    if not isinstance(record, dict):
        return None
    t, c = record.get("t"), record.get("c")
    if isinstance(t, (int, float)) and isinstance(c, (int, float)):
        return State(float(t), float(c))
    return None


__all__ = ["PURPOSE", "Lifecycle", "State"]
