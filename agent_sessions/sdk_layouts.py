"""The Agents SDK's own storage layouts, opened in place through ``sdk+`` URLs.

``open_session("sdk+redis://host:6379/0", "user-1")`` returns a session that reads and writes
exactly what the SDK's ``RedisSession`` does, because it *is* the SDK's class (with the SDK's
defaults: key prefix ``agents:session``; tables ``agent_sessions``/``agent_messages``;
database ``agents``), plus what the catalog and the CLI need: ``sibling()`` sharing one client
or engine, ``catalog_store()`` and ``close()``. So an application that switches classes keeps
every conversation, either by opening its old data this way or by copying it into this
package's layout (``agent-sessions copy sdk+redis://... redis://...``) and back.

Schemes: ``sdk+redis``, ``sdk+rediss``, ``sdk+postgresql+asyncpg``, ``sdk+mysql+asyncmy``,
``sdk+mysql+aiomysql``, ``sdk+sqlite+aiosqlite`` (the SDK's ``SQLAlchemySession``),
``sdk+mongodb``, ``sdk+mongodb+srv``. (``sqlite://`` already reads the SDK's SQLite schema.)

Limits: these sessions behave as the SDK's classes do (no sequence numbers, no range delete,
no native-expiry capability, the SDK's own validation and errors); layers that need those
capabilities run over the SDK's classes through the foreign adapter, or after a migration.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .catalog import CatalogQuery, SessionInfo, family_root, utc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

SDK_REDIS_PREFIX = "agents:session"
SDK_SESSIONS_TABLE = "agent_sessions"
SDK_MESSAGES_TABLE = "agent_messages"
SDK_MONGO_DATABASE = "agents"


class _Shared:
    """A client or engine shared by one store's sessions; released with the last of them."""

    def __init__(self, resource: Any, release: Callable[[Any], Any]) -> None:
        self.resource = resource
        self._release = release
        self.users = 0

    def share(self) -> _Shared:
        self.users += 1
        return self

    async def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            result = self._release(self.resource)
            if asyncio.iscoroutine(result):
                await result


class SDKLayoutSession:
    """One of the Agents SDK's own sessions (``.sdk``), opened by an ``sdk+`` URL.

    The four Session methods are the SDK's; ``count_items``, ``sibling``, ``catalog_store`` and
    ``close`` are added for the catalog, migrations and the CLI.
    """

    def __init__(
        self,
        sdk: Any,
        *,
        shared: _Shared,
        make: Callable[[str], Any],
        catalog: Callable[[], Any],
    ) -> None:
        self.sdk = sdk
        self.session_id: str = sdk.session_id
        self.session_settings = sdk.session_settings
        self._shared = shared.share()
        self._make = make
        self._catalog = catalog
        self._closed = False

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The SDK's ``get_items``."""
        items: list[TResponseInputItem] = await self.sdk.get_items(limit)
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """The SDK's ``add_items``."""
        await self.sdk.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """The SDK's ``pop_item``."""
        item: TResponseInputItem | None = await self.sdk.pop_item()
        return item

    async def clear_session(self) -> None:
        """The SDK's ``clear_session``."""
        await self.sdk.clear_session()

    async def count_items(self) -> int:
        """Return how many items the session holds (reads them: the SDK keeps no count)."""
        return len(await self.sdk.get_items(None))

    def sibling(self, session_id: str) -> SDKLayoutSession:
        """Return the SDK session ``session_id`` of the same store, sharing the connection."""
        return SDKLayoutSession(
            self._make(session_id), shared=self._shared, make=self._make, catalog=self._catalog
        )

    def catalog_store(self) -> Any:
        """Return the catalog of this SDK layout (see ``agent_sessions.catalog``)."""
        return self._catalog()

    async def close(self) -> None:
        """Release the shared client or engine when this is its last session; idempotent."""
        if not self._closed:
            self._closed = True
            await self._shared.release()

    async def __aenter__(self) -> SDKLayoutSession:
        return self

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

    inner = _inner_url(url)
    client: Any = (
        RedisCluster.from_url(inner, **(redis_kwargs or {}))
        if cluster
        else Redis.from_url(inner, **(redis_kwargs or {}))
    )

    def make(sid: str) -> Any:
        return RedisSession(
            sid, redis_client=client, key_prefix=key_prefix, ttl=ttl,
            session_settings=session_settings,
        )

    return SDKLayoutSession(
        make(session_id),
        shared=_Shared(client, lambda c: c.aclose()),
        make=make,
        catalog=lambda: SDKRedisCatalog(client, key_prefix),
    )


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class SDKRedisCatalog:
    """The catalog of the SDK's Redis layout: per session a hash ``P:<id>`` (``session_id``,
    ``created_at``, ``updated_at`` in Unix seconds), a list ``P:<id>:messages`` and a counter
    ``P:<id>:counter``. Sessions are found by SCAN (on every primary of a Cluster) for hashes."""

    def __init__(self, client: Any, key_prefix: str) -> None:
        self.client = client
        self.prefix = key_prefix

    async def exists(self) -> bool:
        await self.client.ping()
        return True

    async def _all(self) -> list[tuple[str, str]]:
        """(session id, hash key) of every session under the prefix."""
        found: list[tuple[str, str]] = []
        pattern = f"{_glob_escape(self.prefix)}:*"
        start = len(self.prefix) + 1
        async for raw in self.client.scan_iter(match=pattern, count=1000, _type="hash"):
            key = raw.decode() if isinstance(raw, bytes) else raw
            found.append((key[start:], key))
        return found

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        candidates = sorted(
            (sid, key) for sid, key in await self._all()
            if query.after is None or sid > query.after
        )
        out: list[SessionInfo] = []
        for begin in range(0, len(candidates), query.limit):
            chunk = candidates[begin : begin + query.limit]
            infos = await asyncio.gather(*(self._info(sid, key) for sid, key in chunk))
            out.extend(info for info in infos if info is not None and query.matches(info))
            if len(out) >= query.limit:
                break
        return out[: query.limit]

    async def _info(self, session_id: str, key: str) -> SessionInfo | None:
        """The session's info, or None for a hash that is no SDK session (e.g. the meta key
        ``P:{id}:meta`` of this package's layout under the same prefix): the SDK writes its
        ``session_id`` into every session hash."""
        (sid, created, updated), count = await asyncio.gather(
            self.client.hmget(key, "session_id", "created_at", "updated_at"),
            self.client.llen(f"{key}:messages"),
        )
        if (sid.decode() if isinstance(sid, bytes) else sid) != session_id:
            return None
        return SessionInfo(session_id, utc(created), utc(updated), int(count))

    async def family_ids(self, session_id: str) -> list[str]:
        return [sid for sid, _ in await self._all() if family_root(sid) == session_id]

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

    from .backends.sqlite import check_identifier

    check_identifier(sessions_table, "sessions_table")
    check_identifier(messages_table, "messages_table")
    engine = create_async_engine(_inner_url(url), **(engine_kwargs or {}))

    def make(sid: str) -> Any:
        return SQLAlchemySession(
            sid, engine=engine, create_tables=create_tables, sessions_table=sessions_table,
            messages_table=messages_table, session_settings=session_settings,
        )

    def catalog() -> Any:
        from .backends.sql.catalog import EngineCatalog

        return EngineCatalog(engine, sessions_table, messages_table, naive_times=True)

    return SDKLayoutSession(
        make(session_id),
        shared=_Shared(engine, lambda e: e.dispose()),
        make=make,
        catalog=catalog,
    )


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
    """Open ``session_id`` with the SDK's ``MongoDBSession`` at ``sdk+mongodb://...``;
    ``database`` defaults to the URI's, else the SDK's ``agents``. ``client``: use this client
    (e.g. a test stand-in) instead of one made from the URL; it is not closed."""
    from agents.extensions.memory import MongoDBSession

    owned = client is None
    if client is None:
        from .backends.mongodb import make_client

        client = make_client(_inner_url(url), **(client_kwargs or {}))
    if database is None:
        from urllib.parse import urlsplit

        database = urlsplit(_inner_url(url)).path.lstrip("/") or SDK_MONGO_DATABASE
    db_name: str = database

    def make(sid: str) -> Any:
        return MongoDBSession(
            sid, client=client, database=db_name, sessions_collection=sessions_collection,
            messages_collection=messages_collection, session_settings=session_settings,
        )

    async def release(c: Any) -> None:
        if owned:
            result = c.close()
            if asyncio.iscoroutine(result):
                await result

    return SDKLayoutSession(
        make(session_id),
        shared=_Shared(client, release),
        make=make,
        catalog=lambda: SDKMongoCatalog(client[db_name], sessions_collection, messages_collection),
    )


class SDKMongoCatalog:
    """The catalog of the SDK's MongoDB layout: session documents ``{session_id, created_at,
    updated_at, _seq, _generation}``; message documents ``{session_id, seq, generation,
    message_data: [JSON text, ...]}`` (older SDKs: one document per item, ``message_data``
    text). Only the current generation's documents count (a clear advances it)."""

    def __init__(self, db: Any, sessions: str, messages: str) -> None:
        self.db = db
        self.sessions = db[sessions]
        self.messages = db[messages]
        self.sessions_name = sessions

    async def exists(self) -> bool:
        return self.sessions_name in await self.db.list_collection_names()

    async def _count(self, doc: Any) -> int:
        generation = doc.get("_generation", 0)
        query: dict[str, Any] = {"session_id": doc["session_id"]}
        query["generation"] = generation if generation else {"$in": [0, None]}
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
        cursor = self.sessions.find(flt).sort("session_id", 1)
        async for doc in cursor:
            info = SessionInfo(
                str(doc["session_id"]), utc(doc.get("created_at")), utc(doc.get("updated_at")),
                await self._count(doc),
            )
            if query.matches(info):
                out.append(info)
                if len(out) >= query.limit:
                    break
        return out

    async def family_ids(self, session_id: str) -> list[str]:
        found = [str(d["session_id"]) async for d in self.sessions.find({}, {"session_id": 1})]
        return [sid for sid in found if family_root(sid) == session_id]

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
