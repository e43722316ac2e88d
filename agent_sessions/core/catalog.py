"""What a backend offers the session catalog (:mod:`agent_sessions.ops.catalog` builds on it):
the page query, the session info, the store protocol and the rules for side-store ids."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

from .ids import SIBLING_MARK


@dataclass(frozen=True)
class SessionInfo:
    """One session as the catalog sees it (no items are read): times are aware UTC or None
    where the store keeps none; ``item_count`` excludes its side stores. ``user_id``,
    ``title`` and ``metadata`` are what ``SessionCatalog.tag`` set (None where the catalog
    did not read them: see ``SessionCatalog.with_tags``)."""

    session_id: str
    created_at: datetime | None
    updated_at: datetime | None
    item_count: int
    user_id: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the info as JSON-ready values (times as ISO 8601 text)."""
        times = {"created_at": self.created_at, "updated_at": self.updated_at}
        iso = {name: None if when is None else when.isoformat() for name, when in times.items()}
        return {**asdict(self), **iso}


@dataclass(frozen=True)
class CatalogQuery:
    """One page request: at most ``limit`` sessions ordered by id, after ``after``, starting
    with ``prefix``, updated in [``updated_after``, ``updated_before``) (none without an update
    time when a bound is given); side stores only when ``internal``."""

    limit: int
    after: str | None = None
    prefix: str | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    internal: bool = False

    def matches(self, info: SessionInfo) -> bool:
        """Whether ``info`` passes this query's filters (for stores that filter client-side)."""
        sid, when = info.session_id, info.updated_at
        low, high = self.updated_after, self.updated_before
        in_time = (
            when is not None and (low is None or when >= low) and (high is None or when < high)
        )
        return (
            (self.after is None or sid > self.after)
            and (self.prefix is None or sid.startswith(self.prefix))
            and (self.internal or not is_side_store(sid))
            and (in_time or (low is None and high is None))
        )


@runtime_checkable
class CatalogStore(Protocol):
    """What a backend implements for the catalog (returned by its ``catalog_store()``)."""

    async def exists(self) -> bool:
        """Whether the store (file, tables, collections) exists; creates nothing."""

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        """Return the sessions ``query`` selects, ordered by id."""

    async def family_ids(self, session_id: str) -> list[str]:
        """Return the ids of every side store whose family root is ``session_id``."""

    async def delete(self, session_ids: Sequence[str]) -> int:
        """Delete everything stored under each id (items, counters, metadata); return how many
        of them existed."""


@runtime_checkable
class SupportsFamilies(Protocol):
    """A catalog store that finds the side stores of many sessions in one pass (optional:
    without it the catalog asks ``family_ids`` once per session, each a pass over the side
    stores)."""

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        """Map each of ``session_ids`` to the ids of its side stores, as ``family_ids``."""


@runtime_checkable
class SupportsInfos(Protocol):
    """A catalog store that reads sessions by id without a listing (optional: for a store
    whose listing by prefix passes over the whole store, such as Redis's SCAN)."""

    async def infos(self, session_ids: Sequence[str]) -> dict[str, SessionInfo]:
        """The info of each of ``session_ids`` the store holds (the others are left out)."""


class ScanListing:
    """Pages of a listing whose ids come in no order (Redis's SCAN). The sorted ids are taken
    at a listing's first page and reused by the page that continues it (``after`` is the last
    id the previous page returned), so paging through N sessions is one pass over the store,
    not one per page. As with SCAN itself, a session added meanwhile may be missed; one
    deleted meanwhile is left out."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[str, list[str]]] = {}

    async def page(
        self,
        query: CatalogQuery,
        pattern: str,
        scan: Callable[[], Awaitable[Iterable[str]]],
        infos: Callable[[list[str]], Awaitable[list[SessionInfo | None]]],
    ) -> list[SessionInfo]:
        """The page ``query`` selects among the ids ``scan`` finds for ``pattern``; ``infos``
        reads a chunk of them (None for one that is gone)."""
        kept = self._kept.pop(pattern, None)
        if kept is not None and query.after is not None and query.after == kept[0]:
            ids = kept[1]
        else:
            ids = sorted(set(await scan()))
        start = 0 if query.after is None else bisect_right(ids, query.after)
        out: list[SessionInfo] = []
        while start < len(ids) and len(out) < query.limit:
            chunk = ids[start : start + query.limit]
            start += len(chunk)
            out.extend(i for i in await infos(chunk) if i is not None and query.matches(i))
        out = out[: query.limit]
        if len(out) == query.limit:
            self._kept[pattern] = (out[-1].session_id, ids)
        return out


def group_families(side_ids: Iterable[str], roots: Sequence[str]) -> dict[str, list[str]]:
    """``side_ids`` grouped under those of ``roots`` that are their family root."""
    families: dict[str, list[str]] = {root: [] for root in roots}
    for sid in side_ids:
        members = families.get(family_root(sid))
        if members is not None:
            members.append(sid)
    return families


@runtime_checkable
class SupportsCatalog(Protocol):
    """A session whose store can be listed (every backend of this package)."""

    def catalog_store(self) -> CatalogStore:
        """Return the catalog of the store this session lives in (sharing its connection)."""


def is_side_store(session_id: str) -> bool:
    """Whether ``session_id`` names a layer's side store rather than a user's session."""
    return session_id.startswith(SIBLING_MARK)


def side_store_kind(session_id: str) -> str:
    """The purpose a layer gave the side store ``session_id`` (its outermost one)."""
    return session_id[1:].partition(SIBLING_MARK)[0]


def family_root(session_id: str) -> str:
    """Return the user session a side-store id belongs to (``session_id`` itself for a user id),
    unwrapping nested side-store ids (a side store of a side store)."""
    while session_id.startswith(SIBLING_MARK):
        _purpose, sep, parent = session_id[1:].partition(SIBLING_MARK)
        if not sep:
            break
        session_id = parent
    return session_id


def utc(value: Any) -> datetime | None:
    """Normalise a stored time to an aware UTC datetime (naive values are read as UTC)."""
    if isinstance(value, bytes):
        value = value.decode()
    when = value if isinstance(value, datetime) else None
    if isinstance(value, str):
        with suppress(ValueError):
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if when is None and isinstance(value, (int, float, str)):
        with suppress(ValueError):
            when = datetime.fromtimestamp(float(value), timezone.utc)
    if when is None:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
