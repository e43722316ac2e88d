"""What a session declares it can do beyond the SDK's four methods.

Every session of this package carries ``capabilities``, a small immutable set of
:class:`Capability` (a class attribute on backends; computed from the inner session when a
wrapper is built). Layers ask :func:`supports` once and never probe methods or types: a session
from outside (the SDK's classes, a user's own) declares nothing, so it supports nothing here.

The ``Supports*`` protocols name the methods that come with each capability, for typing.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping
    from datetime import datetime

    from agents.items import TResponseInputItem
    from agents.memory import Session


class Capability(enum.Enum):
    """One optional ability of a session (keep this set small)."""

    SEQUENCED = "sequenced"
    """Items carry sequence numbers: ``add_sequenced_items``, ``get_sequenced_items``,
    ``count_items`` (:class:`SupportsSequencedItems`)."""
    RANGE_DELETE = "range_delete"
    """``delete_items(before=seq)`` deletes the oldest items atomically (with SEQUENCED)."""
    NATIVE_EXPIRY = "native_expiry"
    """``set_sliding_ttl(seconds)``: the store expires the session (and its family) itself."""
    REWRITE = "rewrite"
    """``rewrite_items([(seq, item), ...])`` replaces payloads in place, numbering unchanged."""
    SEQUENCED_WRITE = "sequenced_write"
    """``write_sequenced_items(pairs, created_at=, updated_at=)`` fills an empty session at
    given numbers and times, so a copy keeps every pointer into it
    (:class:`SupportsSequencedWrite`)."""
    FAMILY = "family"
    """``side_store(purpose)`` opens side storage sharing this session's store and lifecycle."""
    FAMILY_BATCH = "family_batch"
    """``get_sequenced_family(reads)``, ``add_sequenced_family(writes)``: several sessions'
    reads or appends in one round trip where they share this store
    (:class:`SupportsFamilyBatch`)."""
    GUARDED_WRITE = "guarded_write"
    """``append_if_newest(guard, seq, items)``, ``pop_if_newest(guard, seq)``: a write that
    happens only while another session of the store is unchanged (:class:`SupportsGuardedWrite`)."""
    CHECKED_POP = "checked_pop"
    """``pop_checked(check)``: remove the newest item only if ``check`` accepts it
    (:class:`SupportsCheckedPop`)."""
    TEXT_SEARCH = "text_search"
    """``search_text(query, limit=, equal=, between=)``: the store ranks this session's items
    by the words of their top-level ``"text"`` field, with its own full-text index (SQLite
    FTS5, PostgreSQL tsvector + GIN, MariaDB FULLTEXT) (:class:`SupportsTextSearch`)."""


NO_CAPABILITIES: frozenset[Capability] = frozenset()


def capabilities_of(session: object) -> frozenset[Capability]:
    """Return what ``session`` declares (an empty set for a session that declares nothing).

    Only a declared ``capabilities`` attribute counts (the instance's own or its class's): a
    proxy that forwards unknown attributes to another session, like the SDK's
    EncryptedSession, does not inherit what that session declares.
    """
    try:
        caps: Any = vars(session).get("capabilities")
    except TypeError:  # no __dict__ (slots)
        caps = None
    if caps is None:
        caps = getattr(type(session), "capabilities", None)
    return caps if isinstance(caps, frozenset) else NO_CAPABILITIES


def supports(session: object, capability: Capability) -> bool:
    """Whether ``session`` declares ``capability``."""
    return capability in capabilities_of(session)


@runtime_checkable
class SupportsSequencedItems(Protocol):
    """The methods of :attr:`Capability.SEQUENCED`: each item's sequence number is unique per
    session and increasing in commit order, never reused (not even after ``pop_item``); reads
    cost O(result), not O(history)."""

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Append ``items`` as one all-or-nothing batch; return their sequence numbers."""
        ...

    async def get_sequenced_items(
        self,
        limit: int | None = None,
        *,
        after: int | None = None,
        before: int | None = None,
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` pairs with ``after < seq < before``, the latest ``limit``
        of them (all when None), in chronological order."""
        ...

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many items have ``after < seq < before``."""
        ...


@runtime_checkable
class SupportsRangeDelete(Protocol):
    """The method of :attr:`Capability.RANGE_DELETE`. A backend offering it never reuses a
    session's sequence numbers, not even after ``clear_session``: a purge that read number N
    before a concurrent clear would otherwise delete the items written after it."""

    async def delete_items(self, *, before: int) -> int:
        """Atomically delete every item with a sequence number below ``before``; return how
        many were deleted. Items written concurrently (higher numbers) are never touched."""
        ...


@runtime_checkable
class SupportsNativeExpiry(Protocol):
    """The method of :attr:`Capability.NATIVE_EXPIRY` (Redis EXPIRE, a MongoDB TTL index)."""

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        """From now on, make every write set all of this session's stored data (items and
        bookkeeping) to expire ``ttl_seconds`` after that write, in the same round trip.
        ``None`` stops setting expiry. Takes effect at the next write."""
        ...

    async def refresh_expiry(self) -> None:
        """Set this session's stored data to expire the sliding ttl from now, as a write
        would, without writing (keeps a family's quiet members alive)."""
        ...


@runtime_checkable
class SupportsRewrite(Protocol):
    """The method of :attr:`Capability.REWRITE`."""

    async def rewrite_items(self, pairs: list[tuple[int, TResponseInputItem]]) -> int:
        """Replace the item numbered ``seq`` by ``item`` for each pair, in one atomic step;
        numbers that no longer exist are skipped. Returns how many items were replaced."""
        ...


@runtime_checkable
class SupportsSequencedWrite(Protocol):
    """The method of :attr:`Capability.SEQUENCED_WRITE` (copies, imports)."""

    async def write_sequenced_items(
        self,
        pairs: list[tuple[int, TResponseInputItem]],
        *,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
    ) -> None:
        """Store each ``(seq, item)`` at number ``seq`` (positive, increasing) in one atomic
        step into this session, which must hold no items, and record its creation and last
        update times (now when None). Later appends get numbers above the highest written.
        Raises SequenceConflictError, writing nothing, when the session holds items or a
        number is taken in the store."""
        ...


Read = tuple["Session", "int | None", "int | None", "int | None"]
"""``(session, limit, after, before)``: one read of ``get_sequenced_family``."""


@runtime_checkable
class SupportsFamilyBatch(Protocol):
    """The methods of :attr:`Capability.FAMILY_BATCH`. The sessions are sequenced sessions;
    those sharing this store (itself, its side stores) are served together, any other one by
    its own methods."""

    async def get_sequenced_family(
        self, reads: list[Read]
    ) -> list[list[tuple[int, TResponseInputItem]]]:
        """Run each ``(session, limit, after, before)`` as ``session.get_sequenced_items``;
        return the results in order (one snapshot where the store reads them together)."""
        ...

    async def add_sequenced_family(
        self, writes: list[tuple[Session, list[TResponseInputItem]]]
    ) -> list[list[int]]:
        """Append each ``(session, items)`` batch in order, as ``session.add_sequenced_items``,
        all-or-nothing where the store writes them together; return each batch's numbers."""
        ...

    async def add_encoded_family(self, writes: list[tuple[Session, list[str]]]) -> list[list[int]]:
        """``add_sequenced_family`` of batches a layer already validated and encoded (each
        text from ``codec.encode_batch`` or checked by ``codec.check_size``), so nothing is
        encoded twice; a session of another store gets them decoded."""
        ...


@runtime_checkable
class SupportsGuardedWrite(Protocol):
    """The methods of :attr:`Capability.GUARDED_WRITE`: a one-round-trip write for a layer
    that keeps a view of ``guard`` (a branch log, a compaction view). Either may decline,
    writing nothing, when ``guard`` is not of this store or the store cannot check and write
    in one atomic step; a layer then takes its general path."""

    async def append_if_newest(
        self, guard: Session, seq: int | None, items: list[TResponseInputItem]
    ) -> list[int] | None:
        """Append ``items`` as ``add_sequenced_items`` only if ``guard``'s newest sequence
        number is ``seq`` (None: it holds no items), checked and written in one atomic step;
        return the new numbers, or None when nothing was written."""
        ...

    async def pop_if_newest(
        self, guard: Session, seq: int | None, *, newest: int | None = None
    ) -> tuple[bool, Any]:
        """Pop as ``pop_item`` only if ``guard``'s newest number is ``seq`` and (when given)
        this session's newest number is ``newest``, in one atomic step: ``(True, item or
        None)``; ``(False, None)`` when nothing was popped."""
        ...


@runtime_checkable
class SupportsCheckedPop(Protocol):
    """The method of :attr:`Capability.CHECKED_POP`."""

    async def pop_checked(self, check: Callable[[Any], Any]) -> Any:
        """Remove the newest item and return ``check(item)``; when ``check`` raises, nothing
        is removed and the exception propagates. None when the session is empty. ``check``
        may run off the event loop's thread, so it must not touch loop state."""
        ...


TEXT_FIELD = "text"
"""The top-level item field that :attr:`Capability.TEXT_SEARCH` indexes."""


@runtime_checkable
class SupportsTextSearch(Protocol):
    """The method of :attr:`Capability.TEXT_SEARCH`. The index follows every write of the
    session (add, pop, rewrite, delete, clear, erase) in the same transaction; an item whose
    ``"text"`` is missing, not a string or empty is not indexed."""

    async def search_text(
        self,
        query: str,
        *,
        limit: int = 10,
        equal: Mapping[str, Collection[str]] | None = None,
        between: Mapping[str, tuple[float | None, float | None]] | None = None,
    ) -> list[tuple[int, TResponseInputItem, float]]:
        """The ``limit`` items whose ``"text"`` best matches any word of ``query``, as
        ``(seq, item, score)``, best first (a higher score is better; its scale is the
        store's own). Filters apply before ranking: for each ``field: values`` of ``equal``
        the item's top-level string ``field`` is one of ``values``; for each
        ``field: (low, high)`` of ``between`` its top-level number is within, inclusive (None
        leaves that side open). Field names are ``[a-z_]{1,32}``, else ValueError. Query
        words are words (``\\w+``), never the store's query syntax; a query without words or
        a ``limit <= 0`` returns ``[]``."""
        ...


@runtime_checkable
class SupportsFamily(Protocol):
    """The method of :attr:`Capability.FAMILY` (use :func:`agent_sessions.core.family.
    side_store` rather than calling it)."""

    def side_store(self, purpose: str) -> Session:
        """Return this session's side store for ``purpose``."""
        ...


__all__ = [
    "Capability",
    "NO_CAPABILITIES",
    "Read",
    "SupportsCheckedPop",
    "SupportsFamily",
    "SupportsFamilyBatch",
    "SupportsGuardedWrite",
    "SupportsNativeExpiry",
    "SupportsRangeDelete",
    "SupportsRewrite",
    "SupportsSequencedItems",
    "SupportsSequencedWrite",
    "capabilities_of",
    "supports",
]
