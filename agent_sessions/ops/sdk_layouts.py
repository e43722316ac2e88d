"""The Agents SDK's own storage layouts, opened in place through ``sdk+`` URLs (schemes in
docs/sdk-layouts.md): ``open_session("sdk+redis://host:6379/0", "user-1")`` wraps the SDK's own
``RedisSession`` (with the SDK's defaults) in an ``SDKLayoutSession``, which behaves as the SDK's
classes do (no declared capabilities).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..core.catalog import CatalogQuery, ScanListing, SessionInfo, group_families, utc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import SessionABC

SDK_REDIS_PREFIX = "agents:session"
SDK_SESSIONS_TABLE = "agent_sessions"
SDK_MESSAGES_TABLE = "agent_messages"
SDK_MONGO_DATABASE = "agents"


@dataclass
class _Layout:
    """One store's SDK sessions: how to make one, its catalog, and how to free the client or
    engine they share when the last of them closes."""

    make: Callable[[str], Any]
    catalog: Callable[[], Any]
    release: Callable[[], Any]
    users: int = 0


class SDKLayoutSession(AbstractAsyncContextManager["SDKLayoutSession"]):
    """One of the Agents SDK's own sessions (``.sdk``), opened by an ``sdk+`` URL: the four
    Session methods are the SDK's; ``count_items``, ``sibling``, ``catalog_store`` and
    ``close`` are added for the catalog, migrations and the CLI."""

    def __init__(self, sdk: SessionABC, layout: _Layout) -> None:
        self.sdk, self.session_id, self.session_settings = sdk, sdk.session_id, sdk.session_settings
        self._layout, self._closed = layout, False
        layout.users += 1

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await self.sdk.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        await self.sdk.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        return await self.sdk.pop_item()

    async def clear_session(self) -> None:
        await self.sdk.clear_session()

    async def count_items(self) -> int:
        """Return how many items the session holds (reads them: the SDK keeps no count)."""
        return len(await self.sdk.get_items(None))

    def sibling(self, session_id: str) -> SDKLayoutSession:
        """Return the SDK session ``session_id`` of the same store, sharing the connection."""
        return SDKLayoutSession(self._layout.make(session_id), self._layout)

    def catalog_store(self) -> Any:
        """Return the catalog of this SDK layout (see ``agent_sessions.ops.catalog``)."""
        return self._layout.catalog()

    async def close(self) -> None:
        """Release the shared client or engine when this is its last session; idempotent."""
        if not self._closed:
            self._closed = True
            self._layout.users -= 1
            if not self._layout.users and inspect.isawaitable(result := self._layout.release()):
                await result

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SDKLayoutSession({type(self.sdk).__name__}, session_id={self.session_id!r})"


def _inner_url(url: str) -> str:
    if not url.lower().startswith("sdk+"):
        raise ValueError(f"expected an sdk+ URL, got {url!r}")
    return url[4:]


# -- Redis ---------------------------------------------------------------------------------------


def open_redis(
    url: str,
    session_id: str,
    *,
    key_prefix: str = SDK_REDIS_PREFIX,
    ttl: int | None = None,
    redis_kwargs: dict[str, Any] | None = None,
    cluster: bool = False,
    session_settings: Any = None,
) -> SDKLayoutSession:
    """Open ``session_id`` with the SDK's ``RedisSession`` at ``sdk+redis://...``."""
    from agents.extensions.memory import RedisSession
    from redis.asyncio import Redis, RedisCluster

    client: Any = (RedisCluster if cluster else Redis).from_url(
        _inner_url(url), **(redis_kwargs or {})
    )

    make = partial(
        RedisSession,
        redis_client=client,
        key_prefix=key_prefix,
        ttl=ttl,
        session_settings=session_settings,
    )
    catalog = partial(SDKRedisCatalog, client, key_prefix)
    return SDKLayoutSession(make(session_id), _Layout(make, catalog, client.aclose))


def _text(raw: Any) -> Any:
    return raw.decode() if isinstance(raw, bytes) else raw


class SDKRedisCatalog:
    """The catalog of the SDK's Redis layout: per session a hash ``P:<id>`` (``session_id`` and
    times in Unix seconds), a list ``P:<id>:messages`` and a counter ``P:<id>:counter``; found
    by SCAN for hashes (on every primary of a Cluster)."""

    def __init__(self, client: Any, key_prefix: str) -> None:
        self.client, self.prefix = client, key_prefix
        self._listing = ScanListing()

    async def exists(self) -> bool:
        await self.client.ping()
        return True

    async def _all(self) -> list[str]:
        """The id of every session under the prefix (its hash is ``P:<id>``)."""
        from ..backends.redis.catalog import glob_escape

        pattern = f"{glob_escape(self.prefix)}:*"
        keys = self.client.scan_iter(match=pattern, count=1000, _type="hash")
        return [_text(raw)[len(self.prefix) + 1 :] async for raw in keys]

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        return await self._listing.page(query, "", self._all, self._infos)

    async def infos(self, session_ids: Sequence[str]) -> dict[str, SessionInfo]:
        return {i.session_id: i for i in await self._infos(list(session_ids)) if i is not None}

    async def _infos(self, session_ids: list[str]) -> list[SessionInfo | None]:
        """Each session's info, or None for a hash without the SDK's ``session_id`` field
        (e.g. this package's ``P:{id}:meta`` under the same prefix); one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        for sid in session_ids:
            key = f"{self.prefix}:{sid}"
            pipe.hmget(key, "session_id", "created_at", "updated_at").llen(f"{key}:messages")
        replies = await pipe.execute()
        return [
            SessionInfo(session_id, utc(created), utc(updated), int(count))
            if _text(sid) == session_id
            else None
            for session_id, (sid, created, updated), count in zip(
                session_ids, replies[::2], replies[1::2], strict=True
            )
        ]

    async def family_ids(self, session_id: str) -> list[str]:
        return (await self.families([session_id]))[session_id]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        return group_families(await self._all(), session_ids)

    async def delete(self, session_ids: Sequence[str]) -> int:
        existed = 0
        for sid in session_ids:
            key = f"{self.prefix}:{sid}"
            # One DEL per key: the SDK's keys carry no hash tag, so on a Cluster they may sit
            # in different slots.
            results = await asyncio.gather(
                *(self.client.delete(k) for k in (key, f"{key}:messages", f"{key}:counter"))
            )
            existed += int(results[0]) > 0 or int(results[1]) > 0
        return existed


# -- SQLAlchemy ----------------------------------------------------------------------------------


def open_sqlalchemy(
    url: str,
    session_id: str,
    *,
    create_tables: bool = True,
    sessions_table: str = SDK_SESSIONS_TABLE,
    messages_table: str = SDK_MESSAGES_TABLE,
    engine_kwargs: dict[str, Any] | None = None,
    session_settings: Any = None,
) -> SDKLayoutSession:
    """Open ``session_id`` with the SDK's ``SQLAlchemySession`` at ``sdk+postgresql+asyncpg://``
    (or ``sdk+mysql+asyncmy://``, ``sdk+sqlite+aiosqlite://``...)."""
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    from ..backends.sqlite import check_identifier

    check_identifier(sessions_table, "sessions_table")
    check_identifier(messages_table, "messages_table")
    engine = create_async_engine(_inner_url(url), **(engine_kwargs or {}))

    make = partial(
        SQLAlchemySession,
        engine=engine,
        create_tables=create_tables,
        sessions_table=sessions_table,
        messages_table=messages_table,
        session_settings=session_settings,
    )

    def catalog() -> Any:
        from ..backends.sql.catalog import EngineCatalog

        return EngineCatalog(engine, sessions_table, messages_table, naive_times=True)

    return SDKLayoutSession(make(session_id), _Layout(make, catalog, engine.dispose))


# -- MongoDB -------------------------------------------------------------------------------------


def open_mongodb(
    url: str,
    session_id: str,
    *,
    database: str | None = None,
    sessions_collection: str = SDK_SESSIONS_TABLE,
    messages_collection: str = SDK_MESSAGES_TABLE,
    client: Any = None,
    client_kwargs: dict[str, Any] | None = None,
    session_settings: Any = None,
) -> SDKLayoutSession:
    """Open ``session_id`` with the SDK's ``MongoDBSession`` at ``sdk+mongodb://...`` (database:
    the URI's, else ``agents``); a given ``client`` is used instead and not closed."""
    from agents.extensions.memory import MongoDBSession

    owned = client is None
    if client is None:
        from ..backends.mongodb.session import make_client

        client = make_client(_inner_url(url), **(client_kwargs or {}))
    if database is None:
        from urllib.parse import urlsplit

        database = urlsplit(_inner_url(url)).path.lstrip("/") or SDK_MONGO_DATABASE
    make = partial(
        MongoDBSession,
        client=client,
        database=database,
        sessions_collection=sessions_collection,
        messages_collection=messages_collection,
        session_settings=session_settings,
    )
    catalog = partial(SDKMongoCatalog, client[database], sessions_collection, messages_collection)
    release = client.close if owned else lambda: None
    return SDKLayoutSession(make(session_id), _Layout(make, catalog, release))


class SDKMongoCatalog:
    """The catalog of the SDK's MongoDB layout: session documents, and message documents with a
    list of items in ``message_data`` (older SDKs: one item each); only those of the session's
    current ``_generation`` count (a clear advances it)."""

    def __init__(self, db: Any, sessions: str, messages: str) -> None:
        self.db, self.sessions_name = db, sessions
        self.sessions, self.messages = db[sessions], db[messages]

    async def exists(self) -> bool:
        return self.sessions_name in await self.db.list_collection_names()

    async def _count(self, doc: Any) -> int:
        generation = doc.get("_generation") or {"$in": [0, None]}
        query = {"session_id": doc["session_id"], "generation": generation}
        total = 0
        async for message in self.messages.find(query, {"message_data": 1}):
            data = message.get("message_data")
            total += len(data) if isinstance(data, list) else 1
        return total

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        conditions: list[dict[str, Any]] = []
        if query.after is not None:
            conditions.append({"session_id": {"$gt": query.after}})
        if query.prefix:
            conditions.append({"session_id": {"$regex": "^" + re.escape(query.prefix)}})
        flt = {"$and": conditions} if conditions else {}
        out: list[SessionInfo] = []
        async for doc in self.sessions.find(flt).sort("session_id", 1):
            info = SessionInfo(
                str(doc["session_id"]),
                utc(doc.get("created_at")),
                utc(doc.get("updated_at")),
                await self._count(doc),
            )
            if query.matches(info):
                out.append(info)
                if len(out) >= query.limit:
                    break
        return out

    async def family_ids(self, session_id: str) -> list[str]:
        return (await self.families([session_id]))[session_id]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        found = [str(d["session_id"]) async for d in self.sessions.find({}, {"session_id": 1})]
        return group_families(found, session_ids)

    async def delete(self, session_ids: Sequence[str]) -> int:
        ids = list(session_ids)
        if not ids:
            return 0
        await self.messages.delete_many({"session_id": {"$in": ids}})
        result = await self.sessions.delete_many({"session_id": {"$in": ids}})
        return int(result.deleted_count)


__all__ = [
    "SDK_MESSAGES_TABLE",
    "SDK_MONGO_DATABASE",
    "SDK_REDIS_PREFIX",
    "SDK_SESSIONS_TABLE",
    "SDKLayoutSession",
    "open_mongodb",
    "open_redis",
    "open_sqlalchemy",
]
