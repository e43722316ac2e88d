"""What a backend offers the session catalog: the page query, the session info, the store
protocol, and the rules for side-store ids that every store shares.

A backend session implements :class:`SupportsCatalog`; :mod:`agent_sessions.ops.catalog` builds
the catalog on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

from .ids import SIBLING_MARK


@dataclass(frozen=True)
class SessionInfo:
    """One session as the catalog sees it (no items are read to build it).

    ``created_at``/``updated_at`` are timezone-aware UTC, or None where the store keeps no
    such time (a store written before this version, or by a layout that has none).
    ``item_count`` counts the session's own items, not those of its side stores.
    """

    session_id: str
    created_at: datetime | None
    updated_at: datetime | None
    item_count: int

    def as_dict(self) -> dict[str, Any]:
        """Return the info as JSON-ready values (times as ISO 8601 text)."""
        return {
            "session_id": self.session_id,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
            "item_count": self.item_count,
        }


@dataclass(frozen=True)
class CatalogQuery:
    """What one page request asks a store for.

    Sessions with ``session_id > after`` (all when None), ids starting with ``prefix``,
    updated at or after ``updated_after`` and strictly before ``updated_before``, ordered by id,
    at most ``limit``. Side-store ids (starting with ``SIBLING_MARK``) only when ``internal``.
    A store that keeps no update time excludes its sessions whenever a time bound is given.
    """

    limit: int
    after: str | None = None
    prefix: str | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    internal: bool = False

    def matches(self, info: SessionInfo) -> bool:
        """Whether ``info`` passes this query's filters (for stores that filter client-side)."""
        sid = info.session_id
        if self.after is not None and not sid > self.after:
            return False
        if self.prefix is not None and not sid.startswith(self.prefix):
            return False
        if not self.internal and is_side_store(sid):
            return False
        if self.updated_after is not None or self.updated_before is not None:
            if info.updated_at is None:
                return False
            if self.updated_after is not None and info.updated_at < self.updated_after:
                return False
            if self.updated_before is not None and info.updated_at >= self.updated_before:
                return False
        return True


@runtime_checkable
class CatalogStore(Protocol):
    """What a backend implements for the catalog (returned by its ``catalog_store()``)."""

    async def exists(self) -> bool:
        """Whether the store (file, tables, collections) exists; creates nothing."""
        ...

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        """Return the sessions ``query`` selects, ordered by id."""
        ...

    async def family_ids(self, session_id: str) -> list[str]:
        """Return the ids of every side store whose family root is ``session_id``."""
        ...

    async def delete(self, session_ids: Sequence[str]) -> int:
        """Delete everything stored under each id (items, counters, metadata); return how many
        of them existed."""
        ...


@runtime_checkable
class SupportsCatalog(Protocol):
    """A session whose store can be listed (every backend of this package)."""

    def catalog_store(self) -> CatalogStore:
        """Return the catalog of the store this session lives in (sharing its connection)."""
        ...


def is_side_store(session_id: str) -> bool:
    """Whether ``session_id`` names a layer's side store rather than a user's session."""
    return session_id.startswith(SIBLING_MARK)


def side_store_kind(session_id: str) -> str:
    """The purpose a layer gave the side store ``session_id`` (its outermost one)."""
    return session_id[1:].partition(SIBLING_MARK)[0]


def family_root(session_id: str) -> str:
    """Return the user session a side-store id belongs to (``session_id`` itself for a user id).

    Side-store ids nest (a side store of a side store), so the parent is unwrapped until it is
    no side-store id any more.
    """
    while session_id.startswith(SIBLING_MARK):
        _purpose, sep, parent = session_id[1:].partition(SIBLING_MARK)
        if not sep:
            break
        session_id = parent
    return session_id


def utc(value: Any) -> datetime | None:
    """Normalise a stored time to an aware UTC datetime (naive values are read as UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, (int, float)):
        when = datetime.fromtimestamp(value, timezone.utc)
    elif isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            try:
                when = datetime.fromtimestamp(float(text), timezone.utc)
            except ValueError:
                return None
    else:
        return None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(
        timezone.utc
    )
