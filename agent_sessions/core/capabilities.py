"""What a session declares it can do beyond the SDK's four methods: ``capabilities``, a
frozenset of :class:`Capability` that layers test with :func:`supports` (never by probing
methods; a foreign session declares nothing). ``Supports*`` type each capability's methods."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence
    from datetime import datetime

    from agents.items import TResponseInputItem
    from agents.memory import Session


class Capability(enum.Enum):
    """One optional ability of a session (keep this set small); see its ``Supports*``."""

    SEQUENCED = "sequenced"
    """Items carry sequence numbers (:class:`SupportsSequencedItems`)."""
    RANGE_DELETE = "range_delete"
    """``delete_items(before=seq)`` (:class:`SupportsRangeDelete`)."""
    NATIVE_EXPIRY = "native_expiry"
    """The store expires the session and its family itself (:class:`SupportsNativeExpiry`)."""
    REWRITE = "rewrite"
    """Payloads replaced in place, numbering unchanged (:class:`SupportsRewrite`)."""
    SEQUENCED_WRITE = "sequenced_write"
    """An empty session filled at given numbers and times (:class:`SupportsSequencedWrite`)."""
    FAMILY = "family"
    """``side_store(purpose)``: side storage sharing the store and lifecycle."""
    FAMILY_BATCH = "family_batch"
    """Several sessions' reads or appends in one round trip (:class:`SupportsFamilyBatch`)."""
    GUARDED_WRITE = "guarded_write"
    """A write made only while another session is unchanged (:class:`SupportsGuardedWrite`)."""
    COMMIT = "commit"
    """Several sessions' writes in one atomic step, guarded by expected newest numbers
    (:class:`SupportsCommit`; call :func:`agent_sessions.core.commit.commit`)."""
    CHECKED_POP = "checked_pop"
    """Pop the newest item only if a check accepts it (:class:`SupportsCheckedPop`)."""
    TEXT_SEARCH = "text_search"
    """Ranked search by the store's full-text index (:class:`SupportsTextSearch`)."""


NO_CAPABILITIES: frozenset[Capability] = frozenset()


def capabilities_of(session: object) -> frozenset[Capability]:
    """Return what ``session`` declares (empty when nothing): its instance's or class's own
    ``capabilities``, never one a proxy forwards from its inner session."""
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
    """:attr:`Capability.SEQUENCED`: numbers are unique per session, increase in commit order
    and are never reused (not even after ``pop_item``); reads cost O(result)."""

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Append ``items`` as one all-or-nothing batch; return their sequence numbers."""

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` with ``after < seq < before``: the latest ``limit`` (all when
        None), oldest first."""

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many items have ``after < seq < before``."""


@runtime_checkable
class SupportsRangeDelete(Protocol):
    """:attr:`Capability.RANGE_DELETE`. Numbers are never reused, not even after
    ``clear_session``, so a purge racing a clear cannot delete newer items."""

    async def delete_items(self, *, before: int) -> int:
        """Atomically delete the items numbered below ``before``; return how many."""


@runtime_checkable
class SupportsNativeExpiry(Protocol):
    """:attr:`Capability.NATIVE_EXPIRY` (Redis EXPIRE, a MongoDB TTL index)."""

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        """From the next write on, make each write set all of this session's stored data to
        expire ``ttl_seconds`` later, in the same round trip; ``None`` stops it."""

    async def refresh_expiry(self) -> None:
        """Restart the sliding ttl as a write would, without writing."""


@runtime_checkable
class SupportsRewrite(Protocol):
    """:attr:`Capability.REWRITE`."""

    async def rewrite_items(self, pairs: list[tuple[int, TResponseInputItem]]) -> int:
        """Replace the item numbered ``seq`` by ``item`` for each pair in one atomic step,
        skipping numbers that no longer exist; return how many were replaced."""


@runtime_checkable
class SupportsSequencedWrite(Protocol):
    """:attr:`Capability.SEQUENCED_WRITE` (copies, imports)."""

    async def write_sequenced_items(
        self,
        pairs: list[tuple[int, TResponseInputItem]],
        *,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
    ) -> None:
        """Atomically store each ``(seq, item)`` at ``seq`` (positive, increasing) into this
        empty session with these times (now when None); later appends number above.

        Raises:
            SequenceConflictError: the session holds items or a number is taken.
        """


Read = tuple["Session", "int | None", "int | None", "int | None"]
"""``(session, limit, after, before)``: one read of ``get_sequenced_family``."""


@runtime_checkable
class SupportsFamilyBatch(Protocol):
    """:attr:`Capability.FAMILY_BATCH`: sessions sharing this store are served together, any
    other one by its own methods."""

    async def get_sequenced_family(
        self, reads: list[Read]
    ) -> list[list[tuple[int, TResponseInputItem]]]:
        """Run each read as ``get_sequenced_items``; results in order (one snapshot where the
        store reads them together)."""

    async def add_sequenced_family(
        self, writes: list[tuple[Session, list[TResponseInputItem]]]
    ) -> list[list[int]]:
        """Append each ``(session, items)`` in order as ``add_sequenced_items``, all-or-nothing
        where the store writes them together; return each batch's numbers."""

    async def add_encoded_family(self, writes: list[tuple[Session, list[str]]]) -> list[list[int]]:
        """``add_sequenced_family`` of already encoded texts (``codec.encode_batch``)."""


@runtime_checkable
class SupportsGuardedWrite(Protocol):
    """:attr:`Capability.GUARDED_WRITE`: a one-round-trip write for a layer keeping a view of
    ``guard``. Either method may decline, writing nothing (``guard`` of another store, or no
    atomic check here); the layer then takes its general path."""

    async def append_if_newest(
        self, guard: Session, seq: int | None, items: list[TResponseInputItem]
    ) -> list[int] | None:
        """``add_sequenced_items`` only if ``guard``'s newest number is ``seq`` (None: empty),
        atomically; the new numbers, or None when nothing was written."""

    async def pop_if_newest(
        self, guard: Session, seq: int | None, *, newest: int | None = None
    ) -> tuple[bool, Any]:
        """``pop_item`` only if ``guard``'s newest number is ``seq`` and (when given) this
        session's is ``newest``, atomically: ``(True, item or None)``, else ``(False, None)``."""


@runtime_checkable
class SupportsCommit(Protocol):
    """:attr:`Capability.COMMIT`."""

    async def commit(
        self, ops: Sequence[Any], expect: Sequence[tuple[Session, int | None]]
    ) -> list[Any]:
        """Run ``ops`` (``core.commit.Append``/``Pop``) in order as one atomic step while
        each ``(session, seq)`` of ``expect`` holds, else raise ``CommitConflictError`` having
        written nothing; sessions of another store go through ``core.commit.commit_by_api``."""


@runtime_checkable
class SupportsCheckedPop(Protocol):
    """:attr:`Capability.CHECKED_POP`."""

    async def pop_checked(self, check: Callable[[Any], Any]) -> Any:
        """Remove the newest item and return ``check(item)``; None when empty. When ``check``
        raises, nothing is removed. ``check`` may run off the loop's thread."""


TEXT_FIELD = "text"
"""The top-level item field that :attr:`Capability.TEXT_SEARCH` indexes."""


@runtime_checkable
class SupportsTextSearch(Protocol):
    """:attr:`Capability.TEXT_SEARCH` (SQLite FTS5, PostgreSQL tsvector, MariaDB FULLTEXT).
    The index follows every write in the same transaction; a missing, non-string or empty
    ``"text"`` is not indexed."""

    async def search_text(
        self,
        query: str,
        *,
        limit: int = 10,
        equal: Mapping[str, Collection[str]] | None = None,
        between: Mapping[str, tuple[float | None, float | None]] | None = None,
    ) -> list[tuple[int, TResponseInputItem, float]]:
        """The ``limit`` best ``(seq, item, score)`` for any word (``\\w+``) of ``query``, best
        first (score scale is the store's). Filtered before ranking: ``equal`` maps a field to
        accepted strings, ``between`` to an inclusive ``(low, high)`` (None: open). No words
        or ``limit <= 0``: ``[]``.

        Raises:
            ValueError: a field name is not ``[a-z_]{1,32}``.
        """


@runtime_checkable
class SupportsFamily(Protocol):
    """:attr:`Capability.FAMILY` (call :func:`agent_sessions.core.family.side_store`)."""

    def side_store(self, purpose: str) -> Session:
        """Return this session's side store for ``purpose``."""


__all__ = [
    "NO_CAPABILITIES",
    "Capability",
    "Read",
    "SupportsCheckedPop",
    "SupportsCommit",
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
