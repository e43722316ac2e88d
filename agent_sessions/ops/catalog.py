"""The session catalog: list (pages by id, no items read), inspect and erase the sessions of
a store on every backend. A session is deleted with its *family*: the side stores layers keep
for it (ids from :func:`agent_sessions.core.ids.derive_sibling_id`), never listed as sessions.
The store lists families itself: every family with a side store has a registry side store
(``core.family.REGISTRY``) whose id ends with the root's id, so a root is listed, found and
erased through it whether or not it has a row of its own (cleared, or a memory scope, which
never writes to its root). Backends offer a ``CatalogStore`` through ``catalog_store()``; the
common rules are here::

    catalog = await SessionCatalog.open("sqlite:///app.db")
    page = await catalog.list_sessions(prefix="user-42:", limit=50)
    await catalog.delete_sessions([info.session_id for info in page.sessions])
    await catalog.close()
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ..core.catalog import (
    CatalogQuery,
    CatalogStore,
    SessionInfo,
    SupportsCatalog,
    SupportsFamilies,
    SupportsInfos,
    family_root,
    is_side_store,
    side_store_kind,
)
from ..core.family import REGISTRY, close_quietly
from ..core.ids import (
    SCOPE_MARK,
    SCOPE_NAME,
    SIBLING_MARK,
    derive_sibling_id,
    is_scope_id,
    validate_session_id,
)
from ..errors import SessionError, SessionNotFoundError

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 10_000
_PROBE_ID = "agent-sessions-catalog"
_LISTING = f"{SIBLING_MARK}{REGISTRY}{SIBLING_MARK}"
"""Starts the id of every family's registry; the rest of that id is the family's root."""

INFO = "info"
"""The purpose of the side store that holds a session's ``user_id``, ``title`` and
``metadata`` (one record, the newest). It is found by the store's listing like every side
store (erased, copied and exported with its family), but not listed in the family's registry:
layers (encryption, TTL) leave it as written."""
_INFO_PREFIX = f"{SIBLING_MARK}{INFO}{SIBLING_MARK}"
_INFO_TYPE = "agent_sessions.info"
_USER_ID = re.compile(r"[A-Za-z0-9_.@+\-]{1,100}\Z")  # as a memory scope's user_id
MAX_TITLE = 500
"""Longest ``title``, in characters."""
MAX_METADATA_BYTES = 16_384
"""Largest ``metadata``, as compact UTF-8 JSON."""
_KEEP: Any = object()


class InvalidTagError(SessionError, ValueError):
    """A ``user_id``, ``title`` or ``metadata`` that cannot be stored; nothing was written."""


def check_tags(
    user_id: str | None, title: str | None, metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The info record for these tags (None: unset).

    Raises:
        InvalidTagError: a tag of the wrong type or size, or metadata that is not JSON.
    """
    if user_id is not None and (not isinstance(user_id, str) or not _USER_ID.match(user_id)):
        raise InvalidTagError(
            f"user_id must be 1-100 characters A-Z a-z 0-9 _ . @ + - (as a memory scope's), "
            f"got {user_id!r}; hash other identifiers first"
        )
    if title is not None and (not isinstance(title, str) or len(title) > MAX_TITLE):
        raise InvalidTagError(f"title must be a str of at most {MAX_TITLE} characters")
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
            raise InvalidTagError("metadata must be a dict with str keys")
        try:
            text = json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidTagError(f"metadata is not JSON: {exc}") from None
        if len(text.encode()) > MAX_METADATA_BYTES:
            raise InvalidTagError(
                f"metadata is {len(text.encode())} bytes as JSON, above {MAX_METADATA_BYTES}"
            )
        metadata = json.loads(text)
    return {"type": _INFO_TYPE, "user_id": user_id, "title": title, "metadata": metadata}


def _tags(record: Any) -> dict[str, Any]:
    """The ``user_id``, ``title`` and ``metadata`` of a stored info record."""
    if not isinstance(record, dict) or record.get("type") != _INFO_TYPE:
        return {"user_id": None, "title": None, "metadata": None}
    return {name: record.get(name) for name in ("user_id", "title", "metadata")}


@dataclass(frozen=True)
class Page:
    """One page of sessions; pass ``next_cursor`` back to get the next (None: no more)."""

    sessions: list[SessionInfo]
    next_cursor: str | None


def _check_time(name: str, value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _members(root: str, found: Sequence[str]) -> list[str]:
    """The side stores among ``found`` whose family root is ``root``, sorted."""
    return sorted(sid for sid in found if is_side_store(sid) and family_root(sid) == root)


class SessionCatalog(AbstractAsyncContextManager["SessionCatalog"]):
    """Lists and erases the sessions of the store of ``session`` (a backend session of this
    package), over its connection; ``owned``: ``close()`` closes ``session`` too."""

    def __init__(self, session: SupportsCatalog, *, owned: bool = False) -> None:
        if not isinstance(session, SupportsCatalog):
            raise TypeError(
                f"{type(session).__name__} offers no catalog; pass a backend session of "
                "agent_sessions (InMemorySession, SQLiteSession, RedisSession, "
                "SQLAlchemySession, MongoDBSession), not a wrapper or a foreign class"
            )
        self.session, self.store, self._owned = session, session.catalog_store(), owned

    @classmethod
    async def open(cls, url: str, **options: Any) -> SessionCatalog:
        """Open the catalog of the store at ``url`` (options as for ``open_session``);
        ``close()`` closes the connection it opened."""
        from ..core.registry import open_session

        session = await open_session(url, _PROBE_ID, **options)
        try:
            return cls(session, owned=True)  # type: ignore[arg-type]
        except BaseException:
            await session.close()
            raise

    async def close(self) -> None:
        """Close the session this catalog owns (one it opened, or given with ``owned=True``)."""
        if self._owned:
            self._owned = False
            await self.session.close()  # type: ignore[attr-defined]

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def exists(self) -> bool:
        """Whether the store exists (a file, its tables, its collections); creates nothing."""
        return await self.store.exists()

    async def list_sessions(
        self,
        *,
        prefix: str | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
    ) -> Page:
        """Return one page (``limit`` 1 to 10000) of sessions ordered by id, after ``cursor``
        (the previous page's ``next_cursor``): ids starting with ``prefix``, last written at or
        after ``updated_after`` and before ``updated_before`` (naive times are UTC)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE_SIZE:
            raise ValueError(f"limit must be an int from 1 to {MAX_PAGE_SIZE}, got {limit!r}")
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        if cursor is not None and not isinstance(cursor, str):
            raise TypeError(f"cursor must be a str from Page.next_cursor, got {cursor!r}")
        query = CatalogQuery(
            limit,
            cursor,
            prefix or None,
            _check_time("updated_after", updated_after),
            _check_time("updated_before", updated_before),
        )
        found, more = await self._roots(query)
        # The cursor follows what the store returned, not what the filter kept, so a page that
        # the client-side check thinned out never ends the listing early.
        return Page([s for s, kept in found if kept], found[-1][0].session_id if more else None)

    async def _roots(self, query: CatalogQuery) -> tuple[list[tuple[SessionInfo, bool]], bool]:
        """The first ``query.limit`` family roots ``query`` selects, each with whether it passes
        the query's client-side check, and whether more may follow: the sessions with a row
        merged with the roots of the families' registries (two index ranges), a root without
        a row shown with its registry's times and no items."""
        rows = (await self.store.list_page(query))[: query.limit]
        if getattr(self.store, "lists_families", False):  # the store lists them (Redis)
            return [(info, query.matches(info)) for info in rows], len(rows) == query.limit
        registries = CatalogQuery(
            query.limit,
            None if query.after is None else _LISTING + query.after,
            _LISTING + (query.prefix or ""),
            query.updated_after,
            query.updated_before,
            internal=True,
        )
        listed = (await self.store.list_page(registries))[: query.limit]
        found = {info.session_id: (info, query.matches(info)) for info in rows}
        for reg in listed:
            root = reg.session_id[len(_LISTING) :]
            if root not in found and not is_side_store(root):  # a nested family's: not a root
                info = SessionInfo(root, reg.created_at, reg.updated_at, 0)
                found[root] = (info, registries.matches(reg))
        more = query.limit in (len(rows), len(listed)) or len(found) > query.limit
        return [found[sid] for sid in sorted(found)[: query.limit]], more

    async def iter_sessions(
        self,
        *,
        prefix: str | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[SessionInfo]:
        """Yield every matching session, page by page (ordered by id)."""
        page = Page([], None)
        while True:
            page = await self.list_sessions(
                prefix=prefix,
                updated_after=updated_after,
                updated_before=updated_before,
                limit=page_size,
                cursor=page.next_cursor,
            )
            for info in page.sessions:
                yield info
            if page.next_cursor is None:
                return

    async def get(self, session_id: str) -> SessionInfo | None:
        """Return the info of ``session_id``, or None when the store has no such session."""
        validate_session_id(session_id, internal=True)
        if is_side_store(session_id):
            return await self._get(session_id)
        own = await self._get(session_id)
        reg = None if own is not None else await self._get(_LISTING + session_id)
        return own if reg is None else SessionInfo(session_id, reg.created_at, reg.updated_at, 0)

    async def _get(self, session_id: str) -> SessionInfo | None:
        """The info of the row of ``session_id`` (a root or a side store), or None."""
        if isinstance(self.store, SupportsInfos):
            return (await self.store.infos([session_id])).get(session_id)
        # The id is the smallest string starting with itself: if it exists, it comes first.
        query = CatalogQuery(limit=5, prefix=session_id, internal=is_side_store(session_id))
        found = await self.store.list_page(query)
        return next((info for info in found if info.session_id == session_id), None)

    async def require(self, session_id: str) -> SessionInfo:
        """Like :meth:`get`, but raise :class:`SessionNotFoundError` for an unknown id."""
        info = await self.get(session_id)
        if info is None:
            raise SessionNotFoundError(
                f"no session {session_id!r} in this store; list the ids with "
                "`agent-sessions list URL` (check the URL and options such as table_prefix)"
            )
        return info

    async def family(self, session_id: str) -> list[str]:
        """Return the ids of ``session_id``'s side stores (not the id itself)."""
        validate_session_id(session_id)
        return _members(session_id, await self.store.family_ids(session_id))

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        """Map each of ``session_ids`` to its side stores' ids (as :meth:`family`): one pass
        over the store's side stores where the store offers it, not one per session."""
        if isinstance(session_ids, str):
            raise TypeError("session_ids must be a list of ids, not one str")
        roots = list(dict.fromkeys(validate_session_id(sid) for sid in session_ids))
        if len(roots) > 1 and isinstance(self.store, SupportsFamilies):
            found = await self.store.families(roots)
            return {root: _members(root, found.get(root, [])) for root in roots}
        return {root: await self.family(root) for root in roots}

    async def delete_sessions(self, session_ids: Sequence[str]) -> int:
        """Delete each session and its whole family (every side store of every layer); return
        how many of them existed (with a row or a side store). Final: a session written again
        starts at number 1; stop its writers first (a racing write may survive)."""
        if isinstance(session_ids, str):
            raise TypeError("session_ids must be a list of ids, not one str")
        roots = [validate_session_id(sid) for sid in session_ids]
        existed = 0
        for start in range(0, len(roots), 500):
            chunk = list(dict.fromkeys(roots[start : start + 500]))
            families = await self.families(chunk)
            grown = [root for root in chunk if families[root]]
            members = [*(m for root in grown for m in families[root]), *grown]
            # The registries go last: a family whose erase stops half-way is still listed.
            for ids in (
                [m for m in members if not m.startswith(_LISTING)],
                [m for m in members if m.startswith(_LISTING)],
            ):
                if ids:
                    await self.store.delete(ids)
            bare = [root for root in chunk if not families[root]]
            existed += len(grown) + (await self.store.delete(bare) if bare else 0)
        return existed

    erase = delete_sessions

    @asynccontextmanager
    async def _info_store(self, session_id: str) -> AsyncIterator[Any]:
        info = self.session.sibling(derive_sibling_id(session_id, INFO))  # type: ignore[attr-defined]
        try:
            yield info
        finally:
            await close_quietly(info)

    async def tags(self, session_id: str) -> dict[str, Any]:
        """The ``user_id``, ``title`` and ``metadata`` of ``session_id`` (None: unset)."""
        async with self._info_store(validate_session_id(session_id)) as info:
            return _tags(next(iter(await info.get_items(1)), None))

    async def tag(
        self,
        session_id: str,
        *,
        user_id: str | None = _KEEP,
        title: str | None = _KEEP,
        metadata: Mapping[str, Any] | None = _KEEP,
    ) -> dict[str, Any]:
        """Set the ``user_id``, ``title`` and/or JSON ``metadata`` of ``session_id`` (one not
        passed stays, None unsets it; the session need not hold items yet); return them all.

        Raises:
            InvalidTagError: a bad tag (nothing written).
        """
        given = {"user_id": user_id, "title": title, "metadata": metadata}
        tags = {**await self.tags(session_id)}
        tags.update({name: value for name, value in given.items() if value is not _KEEP})
        record = check_tags(**tags)
        async with self._info_store(session_id) as info:
            if not any(tags.values()):
                await self.store.delete([info.session_id])
                return _tags(record)
            await info.add_items([record])
            # One record is kept: the older ones (titles a user changed) do not stay behind.
            newest = await info.get_sequenced_items(1)
            await info.delete_items(before=newest[0][0])
        return _tags(record)

    async def with_tags(self, infos: Sequence[SessionInfo]) -> list[SessionInfo]:
        """``infos`` with their ``user_id``, ``title`` and ``metadata`` read (one read each)."""
        return [replace(info, **await self.tags(info.session_id)) for info in infos]

    async def tagged(
        self, *, user_id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> AsyncIterator[SessionInfo]:
        """Yield the tagged sessions of ``user_id`` (any user: None) whose metadata holds each
        key of ``metadata`` with that value, ordered by id, with their tags; a session tagged
        before its first item has no times and 0 items."""
        after: str | None = None
        while True:
            query = CatalogQuery(limit=1000, after=after, prefix=_INFO_PREFIX, internal=True)
            page = await self.store.list_page(query)
            for found in (info for info in page if query.matches(info)):
                root = family_root(found.session_id)
                tags = await self.tags(root)
                held = tags["metadata"] or {}
                if (user_id is None or tags["user_id"] == user_id) and all(
                    key in held and held[key] == value for key, value in (metadata or {}).items()
                ):
                    info = await self.get(root) or SessionInfo(root, None, None, 0)
                    yield replace(info, **tags)
            if len(page) < 1000:
                return
            after = page[-1].session_id

    async def erase_all(self) -> int:
        """Delete every session and side store of the store, also side stores no family
        lists any more (a registry lost to an older version's erase); return how many ids
        were deleted."""
        deleted, after = 0, None
        while page := await self.store.list_page(CatalogQuery(500, after, internal=True)):
            deleted += await self.store.delete([info.session_id for info in page])
            after = page[-1].session_id  # a row the store would not delete ends no loop
        return deleted

    async def stats(self) -> dict[str, Any]:
        """Return totals: sessions, items, side stores (also by kind, e.g. ``branches``,
        ``branch segments``, ``usage``, ``info``), oldest/newest update."""
        sessions = items = 0
        kinds: defaultdict[str, Counter[str]] = defaultdict(Counter)
        oldest: datetime | None = None
        newest: datetime | None = None
        after: str | None = None
        while True:
            page = await self.store.list_page(CatalogQuery(limit=1000, after=after, internal=True))
            for info in page:
                if is_side_store(info.session_id):
                    name = side_store_kind(info.session_id)
                    # A branch's own items are one store per branch (seg.<key>): counted under
                    # one kind, so the table does not grow with every branch (issue 41).
                    kind = kinds["branch segments" if name.startswith("seg.") else name]
                    kind["stores"] += 1
                    kind["items"] += info.item_count
                    continue
                sessions, items = sessions + 1, items + info.item_count
                if (when := info.updated_at) is not None:
                    oldest, newest = min(oldest or when, when), max(newest or when, when)
            if len(page) < 1000:
                break
            after = page[-1].session_id
        return {
            "sessions": sessions,
            "items": items,
            "side_stores": sum(kind["stores"] for kind in kinds.values()),
            "side_store_items": sum(kind["items"] for kind in kinds.values()),
            "side_stores_by_kind": {name: dict(kind) for name, kind in sorted(kinds.items())},
            "oldest_update": None if oldest is None else oldest.isoformat(),
            "newest_update": None if newest is None else newest.isoformat(),
        }


async def memory_scopes(catalog: SessionCatalog) -> list[str]:
    """The root ids of the store's memory scopes, sorted: those in the reserved namespace
    (``SCOPE_MARK + "memory:<agent>:<user>"``), and those v0.3 wrote under
    ``memory:<agent>:<user>`` (told from a conversation of that name by their memory side
    stores)."""
    found = []
    async for info in catalog.iter_sessions(prefix=SCOPE_MARK + SCOPE_NAME, page_size=1000):
        if is_scope_id(info.session_id):
            found.append(info.session_id)
    async for info in catalog.iter_sessions(prefix=SCOPE_NAME, page_size=1000):
        sid = info.session_id
        if is_scope_id(SCOPE_MARK + sid) and any(
            side_store_kind(member).startswith("memory.") for member in await catalog.family(sid)
        ):
            found.append(sid)
    return sorted(found)


async def memory_scopes_of_user(catalog: SessionCatalog, user_id: str) -> list[str]:
    """The root ids of ``user_id``'s memory scopes (``memory:*:<user_id>``), sorted."""
    return [sid for sid in await memory_scopes(catalog) if sid.rpartition(":")[2] == user_id]


__all__ = [
    "INFO",
    "CatalogQuery",
    "CatalogStore",
    "InvalidTagError",
    "Page",
    "SessionCatalog",
    "SessionInfo",
    "SupportsCatalog",
    "family_root",
    "check_tags",
    "is_side_store",
    "memory_scopes",
    "memory_scopes_of_user",
    "side_store_kind",
]
