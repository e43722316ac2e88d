"""The shared clock of a TTL session family: one lifecycle for the session and its side stores.

Each side store expiring by its own writes let a branch's parent expire under it, or a
compaction summary expire while the originals it hides came back. So every write to any member
first appends to the family's ``"ttl"`` side store a record
``{"t": <write time>, "c": <start of the current lifetime>, "d": <end of the last one>}``. The
family is dead once ``ttl`` passed since the newest ``t`` (sliding) or ``c`` (absolute); an item
stamped before ``d`` belongs to an earlier lifetime (``d`` comes from the dead record, so racing
writers agree on it). ``item_ttl`` stays per item. Over native expiry, family writes refresh
every member's expiry at least every ``ttl / 2``.

A record seen before is reused without a read while it says the family is alive
``clock_skew`` ahead of ``now``: a write into a live family only moves ``t`` later, and ``c`` and
``d`` change only after the family died. Where the store names its location (``store_key()``)
that knowledge is shared by the process's objects (docs/ttl.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from agents.memory import Session

from ...core.capabilities import Capability, supports
from ...core.family import REGISTRY, member_purposes, side_store

PURPOSE = "ttl"
"""The side store holding the family's lifecycle records."""

_TRIM_EVERY = 64
"""Records are trimmed to the newest one every this many writes (one range delete)."""

_KNOWN: dict[Hashable, State] = {}
"""Newest record seen per family store location (process-wide; see the module doc)."""
_REFRESHED: dict[Hashable, float] = {}
"""When this process last pushed native expiry to every member, per family store location."""
_KNOWN_MAX = 4096


def _put(known: dict[Hashable, Any], key: Hashable, value: Any) -> None:
    """Set ``known[key]``, re-inserted last so the oldest entries are evicted first."""
    known.pop(key, None)
    if len(known) >= _KNOWN_MAX:
        del known[next(iter(known))]
    known[key] = value


@dataclass(frozen=True)
class State:
    """The family's newest write, the start of its current lifetime and the end of the
    previous one."""

    t: float
    c: float
    d: float


class Lifecycle:
    """Reads and advances one family's lifecycle records."""

    def __init__(self, session: Session, *, ttl: float, sliding: bool, clock_skew: float) -> None:
        """The lifecycle of ``session``'s family. What the process knows of it is shared under
        ``session.store_key()``, else under the lifecycle side store's (opened now for that;
        otherwise when first needed)."""
        self._session = session
        self._store: Session | None = None
        self.ttl, self.sliding, self.clock_skew = ttl, sliding, clock_skew
        located = getattr(session, "store_key", None)
        if callable(located):
            location = located()
            self._key: Hashable | None = None if location is None else (PURPOSE, location)
        else:
            located = getattr(self.store, "store_key", None)
            self._key = located() if callable(located) else None
        self._known: State | None = None
        self._native = supports(session, Capability.NATIVE_EXPIRY)
        self._refreshed: float | None = None
        self._lock = asyncio.Lock()

    @property
    def store(self) -> Session:
        """The side store holding the records (opened on first use: an object built per
        request that answers from what the process knows never opens it)."""
        if self._store is None:
            self._store = side_store(self._session, PURPOSE)
        return self._store

    async def read(self) -> State | None:
        """The newest record, or None when the family was never written (or was purged)."""
        newest = await self.store.get_items(limit=1)
        state = _state(newest[-1]) if newest else None
        if state is not None:
            self._remember(state)
        return state

    async def current(self, now: float) -> State | None:
        """The family's state for answering at ``now``: a record seen before while it still
        says alive ``clock_skew`` ahead (no round trip), else the newest one read."""
        known = self._known if self._key is None else _KNOWN.get(self._key, self._known)
        if known is not None and not self.dead(known, now, -self.clock_skew):
            return known
        return await self.read()

    def _remember(self, state: State) -> None:
        self._known = state
        if self._key is not None:
            _put(_KNOWN, self._key, state)

    def dead(self, state: State | None, now: float, margin: float = 0.0) -> bool:
        """Whether the whole family is dead at ``now`` (None: never written)."""
        if state is None:
            return True
        start = state.t if self.sliding else state.c
        return now - start > self.ttl + margin

    async def touch(self, now: float) -> State:
        """Record a write at ``now``; return the family's state including it."""
        record, state = await self.stamp(now)
        seq = None
        if supports(self.store, Capability.SEQUENCED):
            seq = (await self.store.add_sequenced_items([record]))[0]  # type: ignore[attr-defined]
        else:
            await self.store.add_items([record])
        await self.recorded(state, seq)
        return state

    async def stamp(self, now: float) -> tuple[Any, State]:
        """The record of a write at ``now`` and the family's state including it; the caller
        stores the record before the write's items (``touch``, or in one step with them),
        then calls ``recorded``."""
        # Absolute mode reads the record: a write after an erase must start a new lifetime
        # (``c``); in sliding mode ``c`` decides nothing and a live family keeps its ``d``.
        state = await (self.current(now) if self.sliding else self.read())
        if state is None:
            c, d = now, 0.0
        elif self.dead(state, now):
            c, d = now, (state.t if self.sliding else state.c) + self.ttl
        else:
            c, d = state.c, state.d
        return {"t": now, "c": c, "d": d}, State(now, c, d)

    async def recorded(self, state: State, seq: int | None) -> None:
        """After the record of ``state`` was stored (as number ``seq``, when known): trim the
        older records now and then, push native expiry to the family's members at least every
        ``ttl / 2`` (by this process, for a store that names its location), remember it."""
        trim = seq is not None and seq % _TRIM_EVERY == 0
        if trim and supports(self.store, Capability.RANGE_DELETE):
            await self.store.delete_items(before=seq)  # type: ignore[attr-defined]
        if self._native:
            now, key = state.t, self._key
            last = self._refreshed if key is None else _REFRESHED.get(key, self._refreshed)
            if last is None or not 0 <= now - last <= self.ttl / 2:  # (a clock set back too)
                async with self._lock:
                    await self._refresh_members()
                    self._refreshed = now
                    if key is not None:
                        _put(_REFRESHED, key, now)
        self._remember(state)

    async def _refresh_members(self) -> None:
        """Push native expiry to every member: the store must not remove a side store that
        was not written lately while the family lives."""
        session = self._session
        members = [session, side_store(session, REGISTRY)]
        members += [side_store(session, p) for p in await member_purposes(session)]
        for member in members:
            await member.refresh_expiry()  # type: ignore[attr-defined]


def _state(record: Any) -> State | None:
    if not isinstance(record, dict):
        return None
    t, c, d = record.get("t"), record.get("c"), record.get("d")
    if all(isinstance(v, (int, float)) for v in (t, c, d)):
        return State(float(t), float(c), float(d))  # type: ignore[arg-type]
    return None


__all__ = ["PURPOSE", "Lifecycle", "State"]
