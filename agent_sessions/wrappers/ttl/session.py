"""``TTLSession``: session and item expiry over any Session.

Each item is stored inside an envelope with its write time,
``{"type": "agent_sessions.ttl", "t": 1764694800.12, "item": {...}}`` (absolute mode adds
``"c"``, the lifetime's start). An item is dead when ``now - t > item_ttl``; when a gap longer
than ``ttl`` follows it (sliding: between two later writes, or the newest write and ``now``);
or when ``now - c > ttl`` (absolute). Visible history is everything after the newest dead
item, so it has no holes and an out-of-order stamp can only move the cut, and
``get_items(limit=n)`` reads exactly ``n`` stored items (docs/ttl.md).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from agents.memory import Session

from ...core.base import keeps_write_path, pop_checked_of
from ...core.capabilities import Capability, SupportsFamilyBatch, supports
from ...core.codec import DEFAULT_MAX_ITEM_BYTES, check_size, dumps, encode_batch
from ...core.family import member_purposes
from ..base import SessionWrapper, atomic_replace, check_max_item_bytes
from .boundary import Boundary, newest_dead_by_scan
from .family import PURPOSE, Lifecycle, State

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

TTL_TYPE = "agent_sessions.ttl"
_DEAD = object()
_ALL = 2**62
"""A sequence number above any: everything at or below it is dead."""
ENVELOPE_OVERHEAD = 128
"""Bytes an envelope adds around an item's JSON, at most (type, two timestamps, braces)."""


class _Stale(Exception):
    """A checked pop's item is newer than the lifecycle record it was judged by."""


def seconds(value: float | timedelta | None, name: str) -> float | None:
    """Return ``value`` as positive finite seconds (None stays None), else raise ValueError."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"{name} must be a number of seconds or a datetime.timedelta, got {value!r}"
        )
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive and finite, got {value!r} seconds")
    return float(value)


def _time(envelope: Any, key: str) -> float | None:
    """Return a finite timestamp from a TTL envelope, or None when it is not one."""
    if type(envelope) is not dict or envelope.get("type") != TTL_TYPE or "item" not in envelope:
        return None
    value = envelope.get(key)
    if type(value) is float:  # the common case, checked first: reads call this per item
        return value if math.isfinite(value) else None
    return float(value) if type(value) is int else None


class TTLSession(SessionWrapper):
    """Expire a session ``ttl`` after its last write (or its creation), and/or each item
    ``item_ttl`` after it was written.

    Args:
        inner: any Session; it stores the envelopes.
        ttl: session lifetime, seconds or ``timedelta``; None for no session expiry.
        sliding: True (default): ``ttl`` counts from the last write; False: from the first.
        item_ttl: per-item lifetime; None for none. At least one of ``ttl``/``item_ttl``.
        clock: returns the current time in seconds (default ``time.time``, wall clock).
        clock_skew: seconds by which hosts' clocks may disagree. Reads hide data the moment it
            is dead by this host's clock; physical removal (``purge_expired``, native expiry)
            waits ``clock_skew`` longer so a slower host never sees data vanish early.
        max_item_bytes: largest accepted item; default: the inner session's cap minus the
            envelope, or 16 MiB for a session without a cap.

    Expired data is removed physically: when ``inner`` supports native expiry (Redis,
    MongoDB) every write also sets the store's expiry, so a dead session disappears by
    itself; otherwise, and for dead prefixes of live sessions, call :meth:`purge_expired`.

    Passes on the inner's sequence numbers, range delete, rewrite in place and family, so
    layers above that keep pointers into the history (branching, compaction, usage) stay exact
    while old items expire. Ranged reads cost one extra small read: see ``ttl.boundary``.
    """

    expires_items: ClassVar[bool] = True
    """Items vanish from reads on their own (see ``foreign.expiring_layer``)."""

    passes: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.SEQUENCED, Capability.RANGE_DELETE, Capability.REWRITE, Capability.FAMILY}
    )
    offers: ClassVar[frozenset[Capability]] = frozenset({Capability.CHECKED_POP})

    def __init__(
        self,
        inner: Session,
        ttl: float | timedelta | None = None,
        *,
        sliding: bool = True,
        item_ttl: float | timedelta | None = None,
        clock: Callable[[], float] = time.time,
        clock_skew: float = 5.0,
        max_item_bytes: int | None = None,
        _lifecycle: Lifecycle | None = None,
    ) -> None:
        super().__init__(inner)
        self.ttl = seconds(ttl, "ttl")
        self.item_ttl = seconds(item_ttl, "item_ttl")
        if self.ttl is None and self.item_ttl is None:
            raise ValueError("TTLSession needs ttl= (session lifetime) and/or item_ttl=")
        number = isinstance(clock_skew, (int, float)) and not isinstance(clock_skew, bool)
        if not (number and math.isfinite(clock_skew) and clock_skew >= 0):
            raise ValueError(f"clock_skew must be >= 0 seconds, got {clock_skew!r}")
        self.sliding = bool(sliding)
        self.clock = clock
        self.clock_skew = float(clock_skew)
        if max_item_bytes is None:
            cap = getattr(inner, "max_item_bytes", None)
            max_item_bytes = DEFAULT_MAX_ITEM_BYTES
            if isinstance(cap, int):
                max_item_bytes = max(1, cap - ENVELOPE_OVERHEAD)
        self.max_item_bytes = check_max_item_bytes(max_item_bytes)
        # With a family, session expiry is the family's (ttl.family), shared by its members.
        self._family_expiry = self.ttl is not None and (
            _lifecycle is not None or supports(inner, Capability.FAMILY)
        )
        self._life = _lifecycle
        self._owner = _lifecycle is None
        self._state: State | None = None
        # The methods whose writes go with the family's record in one round trip (see
        # ``_add_with_record``): where the inner session can and keeps its usual write path.
        batch = self._family_expiry and supports(inner, Capability.FAMILY_BATCH)
        self._batch_via = {
            via
            for via in ("add_items", "add_sequenced_items")
            if batch and keeps_write_path(inner, via, "add_sequenced_items")
        }
        if supports(inner, Capability.NATIVE_EXPIRY):
            # The whole session is dead at the latest this long after its last write.
            lifetimes = [s for s in (self.ttl, self.item_ttl) if s is not None]
            inner.set_sliding_ttl(min(lifetimes) + self.clock_skew)  # type: ignore[attr-defined]

    def wrap_member(self, member: Session) -> TTLSession:
        """Return a TTLSession over the side store ``member`` with this one's settings and
        this family's lifecycle: a write to any member keeps the whole family alive."""
        return TTLSession(
            member,
            self.ttl,
            sliding=self.sliding,
            item_ttl=self.item_ttl,
            clock=self.clock,
            clock_skew=self.clock_skew,
            _lifecycle=self._lifecycle() if self._family_expiry else None,
        )

    def _lifecycle(self) -> Lifecycle:
        if self._life is None:
            assert self.ttl is not None
            self._life = Lifecycle(
                self.inner, ttl=self.ttl, sliding=self.sliding, clock_skew=self.clock_skew
            )
        return self._life

    async def _sync(self) -> None:
        """Read the family's lifecycle state before a read (family expiry only)."""
        if self._family_expiry:
            self._state = await self._lifecycle().current(self.clock())

    # -- expiry rules --------------------------------------------------------------------------

    def _dead(self, envelope: Any, newer_t: float, now: float, margin: float = 0.0) -> bool:
        """Whether ``envelope`` is dead, given the write time of the next newer item (``now``
        for the newest) and a removal margin."""
        t = _time(envelope, "t")
        if t is None:
            return True  # not ours, or damaged: its age is unknown, so it is never shown
        if self.item_ttl is not None and now - t > self.item_ttl + margin:
            return True
        if self.ttl is None:
            return False
        if self._family_expiry:
            state = self._state
            return state is None or t < state.d or self._lifecycle().dead(state, now, margin)
        if self.sliding:
            return newer_t - t > self.ttl + margin
        c = _time(envelope, "c")
        return c is None or now - c > self.ttl + margin

    def _visible_from(self, envelopes: list[Any], now: float) -> int:
        """Return the index after the newest dead envelope (0 when none is dead)."""
        if self._family_expiry and self.item_ttl is None:
            # ``_dead`` with the family's verdict taken once: alive, an item is dead only when
            # it is not ours or older than the current lifetime.
            state = self._state
            if state is None or self._lifecycle().dead(state, now):
                return len(envelopes)
            start = state.d
            for i in range(len(envelopes) - 1, -1, -1):
                t = _time(envelopes[i], "t")
                if t is None or t < start:
                    return i + 1
            return 0
        newer_t = now
        for i in range(len(envelopes) - 1, -1, -1):
            envelope = envelopes[i]
            if self._dead(envelope, newer_t, now):
                return i + 1
            newer_t = envelope["t"]
        return 0

    # -- the Session API -----------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the latest ``limit`` live items, oldest first; reads ``limit`` stored items."""
        limit = self.resolve_limit(limit)
        if limit is not None and limit <= 0:
            return []
        await self._sync()
        envelopes: list[Any] = await self.inner.get_items(limit)
        start = self._visible_from(envelopes, self.clock())
        return [envelope["item"] for envelope in envelopes[start:]]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one batch, stamped with the current time.

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        await self._add(items, "add_items")

    async def _add(self, items: list[TResponseInputItem], via: str) -> Any:
        """Stamp ``items`` and store them with the inner session's method ``via``; where it
        can (FAMILY_BATCH), after the family's lifecycle record in the same round trip.
        Returns what ``via`` returns (``[]`` for no items)."""
        inner = self.inner
        if not items or via not in self._batch_via:
            envelopes = await self._stamp(items)
            return await getattr(inner, via)(envelopes) if envelopes else []
        life = self._lifecycle()
        texts = encode_batch(items, self.max_item_bytes)  # validate before anything is written
        now = self.clock()
        record, state = await life.stamp(now)
        store = life.store
        family: SupportsFamilyBatch = inner  # type: ignore[assignment]
        # Texts built around values already checked (the items' texts; finite floats) rather
        # than encoded and validated again: what their dicts would encode to.
        if not math.isfinite(now):
            encode_batch([record])  # raises InvalidItemError, naming the value
        records = [check_size(dumps(record), 0, _limit(store))]
        head = f'{{"type":"{TTL_TYPE}","t":{dumps(now)},"item":'
        limit = _limit(inner)
        envelopes = [check_size(f"{head}{text}}}", i, limit) for i, text in enumerate(texts)]
        [recorded], seqs = await family.add_encoded_family([(store, records), (inner, envelopes)])
        self._state = state
        await life.recorded(state, recorded)
        return seqs

    async def _stamp(self, items: list[TResponseInputItem]) -> list[Any]:
        encode_batch(items, self.max_item_bytes)  # validate before anything is written
        if not items:
            return []
        now = self.clock()
        stamp: dict[str, Any] = {"type": TTL_TYPE, "t": now}
        if self._family_expiry:
            self._state = await self._lifecycle().touch(now)
        elif self.ttl is not None and not self.sliding:
            stamp["c"] = await self._lifetime_start(now)
        return [{**stamp, "item": item} for item in items]

    # -- sequenced items (offered when the inner session has them) ------------------------------

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Like ``add_items``; returns the new items' sequence numbers (the inner's)."""
        self._inner(Capability.SEQUENCED)
        return await self._add(items, "add_sequenced_items")  # type: ignore[no-any-return]

    @cached_property
    def _boundary(self) -> Boundary:
        """Where the visible history starts, for ranged reads (made by the first one)."""
        ttl = None if self._family_expiry else self.ttl
        return Boundary(
            ttl=ttl, sliding=self.sliding, item_ttl=self.item_ttl, dead=self._dead, time=_time
        )

    async def _newest_dead(self) -> int:
        boundary = self._boundary
        async with boundary.lock:
            await self._sync()
            now = self.clock()
            state = self._state
            if self._family_expiry and (state is None or self._lifecycle().dead(state, now)):
                return _ALL
            await boundary.refresh(self.inner, now)
            return boundary.newest_dead(now, state.d if state is not None else None)

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return the live ``(seq, item)`` with after < seq < before, the latest ``limit``,
        oldest first."""
        inner = self._inner(Capability.SEQUENCED)
        if limit is not None and limit <= 0:
            return []
        after = await self._live_after(after)
        rows = await inner.get_sequenced_items(limit, after=after, before=before)
        # An envelope not ours newer than the boundary was written since the refresh: hidden.
        return [(seq, env["item"]) for seq, env in rows if _time(env, "t") is not None]

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many live items have after < seq < before."""
        inner = self._inner(Capability.SEQUENCED)
        return await inner.count_items(after=await self._live_after(after), before=before)  # type: ignore[no-any-return]

    async def _live_after(self, after: int | None) -> int:
        """``after`` raised to the newest dead item's number."""
        dead = await self._newest_dead()
        return dead if after is None else max(after, dead)

    async def delete_items(self, *, before: int) -> int:
        """Delete the stored items numbered below ``before`` (live or not); return how many."""
        return await self._inner(Capability.RANGE_DELETE).delete_items(before=before)  # type: ignore[no-any-return]

    async def rewrite_items(self, pairs: list[tuple[int, TResponseInputItem]]) -> int:
        """Replace the live items numbered ``seq`` by ``item`` for each pair, in one atomic step,
        keeping their write times (REWRITE); dead or missing numbers are skipped. Returns how
        many were replaced."""
        inner = self._inner(Capability.REWRITE)
        encode_batch([item for _, item in pairs], self.max_item_bytes)
        if not pairs:
            return 0
        seqs = [seq for seq, _ in pairs]
        stored = dict(
            await self._inner(Capability.SEQUENCED).get_sequenced_items(
                after=max(min(seqs) - 1, await self._newest_dead()), before=max(seqs) + 1
            )
        )
        return await inner.rewrite_items(  # type: ignore[no-any-return]
            [
                (seq, {**stored[seq], "item": item})
                for seq, item in pairs
                if _time(stored.get(seq), "t") is not None
            ]
        )

    async def _lifetime_start(self, now: float) -> float:
        newest = await self.inner.get_items(limit=1)
        if newest and not self._dead(newest[-1], now, now):
            c = _time(newest[-1], "c")
            if c is not None:
                return c
        return now

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest stored item; return it if live, else None (it was expired data,
        so removing it is just early cleanup). Never returns an expired item. A pop does not
        count as a write: sliding expiry then counts from the newest remaining item."""
        envelope: Any = await self.inner.pop_item()
        if envelope is None:
            return None
        await self._sync()
        now = self.clock()
        return None if self._dead(envelope, now, now) else envelope["item"]  # type: ignore[no-any-return]

    async def pop_checked(self, check: Callable[[Any], Any]) -> Any:
        """``pop_item`` with a layer's ``check`` of the live item, through the inner
        session's checked pop (CHECKED_POP: inside the pop's transaction on
        SQLite and SQLAlchemy, a compare-and-pop script on Redis); a dead newest item is
        removed and None returned, as ``pop_item`` does."""
        await self._sync()
        while True:
            unwrap = functools.partial(self._checked, check, self.clock(), self._state)
            try:
                result = await pop_checked_of(self.inner, unwrap)
            except _Stale:
                self._state = await self._lifecycle().read()
                continue
            return None if result is _DEAD else result

    def _checked(
        self, check: Callable[[Any], Any], now: float, state: State | None, envelope: Any
    ) -> Any:
        """``pop_checked``'s check: ``check`` of a live item, else ``_DEAD``. Raises _Stale
        (nothing removed) for an item dead by a lifecycle record ``state`` read before another
        object's write of it: that write stored a newer record first."""
        if not self._dead(envelope, now, now):
            return check(envelope["item"])
        t = _time(envelope, "t")
        if self._family_expiry and t is not None and (state is None or t > state.t):
            raise _Stale
        return _DEAD

    # -- the SDK compaction session's hooks (see core.sdk_compaction) ---------------------------

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The SDK's hook over the inner session's: the live items among the latest ``limit``
        stored ones; the replacement is stamped now. The transaction also drops the oldest
        items that are dead on their own (their item or session lifetime is over)."""
        reader = getattr(self.inner, "_get_compaction_snapshot", None)
        if reader is None:
            return None
        await self._sync()
        now = self.clock()

        def prune(envelope: Any) -> bool:
            t = _time(envelope, "t")
            if t is None:
                return False  # not ours: never deleted here
            if self._dead(envelope, t, now, self.clock_skew):
                return True
            return prune_prefix is not None and prune_prefix(envelope["item"])

        raw = await reader(limit, prune_prefix=prune)
        if raw is None:
            return None
        start = self._visible_from(raw.items, now)
        items = [envelope["item"] for envelope in raw.items[start:]]

        async def replace_suffix(index: int, output: list[TResponseInputItem]) -> bool:
            raw_start = 0 if index == 0 else start + index  # dead items go with the suffix
            return bool(await raw.replace_suffix(raw_start, await self._stamp(output)))

        return type(raw)(items, raw.complete or start > 0, replace_suffix)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The SDK's hook: stamp ``items`` now and replace the whole history with them in one
        transaction of the inner session; False when it cannot."""
        return await atomic_replace(self.inner, await self._stamp(items))

    # -- maintenance ---------------------------------------------------------------------------

    async def purge_expired(self, *, dry_run: bool = False) -> int:
        """Delete this session's dead items from the store; return how many were deleted
        (with ``dry_run``, how many would be, deleting nothing).

        Safe while the session is in use: it deletes only items dead by ``clock_skew`` more
        than reads require, in one atomic range delete; its cost grows with the live items.
        Over a session with native expiry but no range deletion it returns 0 (the store
        removes the whole session once it is dead).

        Raises:
            NotImplementedError: the inner session can neither delete ranges nor expire data.
        """
        inner: Any = self.inner
        if not (supports(inner, Capability.SEQUENCED) and supports(inner, Capability.RANGE_DELETE)):
            if supports(inner, Capability.NATIVE_EXPIRY):
                return 0
            raise NotImplementedError(
                f"{type(inner).__name__} offers neither range deletion nor native expiry, so "
                "expired items stay stored (they are never returned); wrap one of "
                "agent_sessions' backends to have them removed"
            )
        await self._sync()
        now = self.clock()
        purged = 0
        if self._family_expiry and self._owner:
            for purpose in await member_purposes(self.inner):
                if purpose != PURPOSE:
                    member = self.side_store(purpose)
                    assert isinstance(member, TTLSession)
                    purged += await member.purge_expired(dry_run=dry_run)
        dead, _ = await newest_dead_by_scan(
            inner,
            lambda envelope, newer_t: self._dead(envelope, newer_t, now, self.clock_skew),
            now,
            keep_live=False,
        )
        if dead:
            purged += await (inner.count_items if dry_run else inner.delete_items)(before=dead + 1)
        return purged


def _limit(session: object) -> int:
    """The largest item ``session`` accepts (the default for a session that does not say)."""
    limit = getattr(session, "max_item_bytes", DEFAULT_MAX_ITEM_BYTES)
    return limit if isinstance(limit, int) else DEFAULT_MAX_ITEM_BYTES
