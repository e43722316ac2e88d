""" "Raw": the minimal code a user would write with each driver for the same job, nothing of
agent_sessions inside (no shared statements, scripts or codec).

The fastest idiomatic code, so a ratio never flatters us: each class keeps one connection (or
client) open in autocommit mode, encodes with orjson when it is installed (as ours does; the
standard library's ``json`` otherwise) and uses the natural schema: one table of rows
``(id autoincrement, session_id, message_data)`` with an index on ``(session_id, id)``, or one
Redis list per session. Every operation is one statement, so one round trip and atomic on its
own: a multi-row ``INSERT`` (``unnest`` of an array on PostgreSQL), one ``RPUSH``, one
``DELETE ... RETURNING``. They do not validate items, number them durably across clears, or
survive cancellation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

dumps_bytes: Callable[[Any], bytes]
dumps: Callable[[Any], str]
loads: Callable[[str | bytes], Any]
try:
    import orjson

    dumps_bytes, loads = orjson.dumps, orjson.loads

    def dumps(value: Any) -> str:
        return orjson.dumps(value).decode()

except ImportError:  # pragma: no cover - the bench extra installs orjson
    dumps, loads = json.dumps, json.loads

    def dumps_bytes(value: Any) -> bytes:
        return json.dumps(value).encode()


TABLE_SQLITE = [
    "CREATE TABLE IF NOT EXISTS {t} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "session_id TEXT NOT NULL, message_data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS {t}_sid ON {t} (session_id, id)",
]
TABLE_POSTGRES = [
    "CREATE TABLE IF NOT EXISTS {t} (id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, "
    "message_data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS {t}_sid ON {t} (session_id, id)",
]
TABLE_MYSQL = [
    "CREATE TABLE IF NOT EXISTS {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
    "session_id VARCHAR(255) NOT NULL, message_data LONGTEXT NOT NULL, "
    "INDEX {t}_sid (session_id, id)) ENGINE=InnoDB",
]


class RawAiosqlite:
    """aiosqlite, one autocommit connection (WAL, synchronous=NORMAL, as a careful user sets)."""

    def __init__(self, db: Any, table: str, session_id: str) -> None:
        self.db, self.t, self.sid = db, table, session_id

    @staticmethod
    async def connect(path: str, table: str) -> Any:
        import aiosqlite

        db = await aiosqlite.connect(path, isolation_level=None)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        for statement in TABLE_SQLITE:
            await db.execute(statement.format(t=table))
        return db

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        values = ", ".join(["(?, ?)"] * len(items))
        params: list[str] = []
        for i in items:
            params += (self.sid, dumps(i))
        await self.db.execute(
            f"INSERT INTO {self.t} (session_id, message_data) VALUES {values}", params
        )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            rows = await self.db.execute_fetchall(
                f"SELECT message_data FROM {self.t} WHERE session_id = ? ORDER BY id", (self.sid,)
            )
            return [loads(r[0]) for r in rows]
        rows = await self.db.execute_fetchall(
            f"SELECT message_data FROM {self.t} WHERE session_id = ? ORDER BY id DESC LIMIT ?",
            (self.sid, limit),
        )
        return [loads(r[0]) for r in reversed(list(rows))]

    async def pop_item(self) -> Any:
        rows = list(
            await self.db.execute_fetchall(
                f"DELETE FROM {self.t} WHERE id = (SELECT id FROM {self.t} WHERE session_id = ? "
                "ORDER BY id DESC LIMIT 1) RETURNING message_data",
                (self.sid,),
            )
        )
        return loads(rows[0][0]) if rows else None

    async def clear_session(self) -> None:
        await self.db.execute(f"DELETE FROM {self.t} WHERE session_id = ?", (self.sid,))


class RawRedisList:
    """redis-py, one list per session: RPUSH, LRANGE, RPOP, DEL."""

    def __init__(self, client: Any, prefix: str, session_id: str) -> None:
        self.client, self.key = client, f"{prefix}:{session_id}"

    async def add_items(self, items: list[Any]) -> None:
        await self.client.rpush(self.key, *[dumps_bytes(i) for i in items])

    async def get_items(self, limit: int | None = None) -> list[Any]:
        start = 0 if limit is None else -limit
        return [loads(v) for v in await self.client.lrange(self.key, start, -1)]

    async def pop_item(self) -> Any:
        value = await self.client.rpop(self.key)
        return None if value is None else loads(value)

    async def clear_session(self) -> None:
        await self.client.delete(self.key)


class RawAsyncpg:
    """asyncpg, one connection; a batch is one ``INSERT ... SELECT unnest($2)``."""

    def __init__(self, conn: Any, table: str, session_id: str) -> None:
        self.conn, self.t, self.sid = conn, table, session_id

    async def add_items(self, items: list[Any]) -> None:
        await self.conn.execute(
            f"INSERT INTO {self.t} (session_id, message_data) SELECT $1, unnest($2::text[])",
            self.sid,
            [dumps(i) for i in items],
        )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            rows = await self.conn.fetch(
                f"SELECT message_data FROM {self.t} WHERE session_id = $1 ORDER BY id", self.sid
            )
            return [loads(r[0]) for r in rows]
        rows = await self.conn.fetch(
            f"SELECT message_data FROM {self.t} WHERE session_id = $1 ORDER BY id DESC LIMIT $2",
            self.sid,
            limit,
        )
        return [loads(r[0]) for r in reversed(rows)]

    async def pop_item(self) -> Any:
        value = await self.conn.fetchval(
            f"DELETE FROM {self.t} WHERE id = (SELECT id FROM {self.t} WHERE session_id = $1 "
            "ORDER BY id DESC LIMIT 1) RETURNING message_data",
            self.sid,
        )
        return None if value is None else loads(value)

    async def clear_session(self) -> None:
        await self.conn.execute(f"DELETE FROM {self.t} WHERE session_id = $1", self.sid)


class RawAsyncmy:
    """asyncmy, one autocommit connection; ``executemany`` sends one multi-row INSERT."""

    def __init__(self, conn: Any, table: str, session_id: str) -> None:
        self.conn, self.t, self.sid = conn, table, session_id

    async def add_items(self, items: list[Any]) -> None:
        async with self.conn.cursor() as cur:
            await cur.executemany(
                f"INSERT INTO {self.t} (session_id, message_data) VALUES (%s, %s)",
                [(self.sid, dumps(i)) for i in items],
            )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        async with self.conn.cursor() as cur:
            if limit is None:
                await cur.execute(
                    f"SELECT message_data FROM {self.t} WHERE session_id = %s ORDER BY id",
                    (self.sid,),
                )
                return [loads(r[0]) for r in await cur.fetchall()]
            await cur.execute(
                f"SELECT message_data FROM {self.t} WHERE session_id = %s "
                "ORDER BY id DESC LIMIT %s",
                (self.sid, limit),
            )
            return [loads(r[0]) for r in reversed(await cur.fetchall())]

    async def pop_item(self) -> Any:
        async with self.conn.cursor() as cur:
            await cur.execute(
                f"DELETE FROM {self.t} WHERE session_id = %s ORDER BY id DESC LIMIT 1 "
                "RETURNING message_data",
                (self.sid,),
            )
            row = await cur.fetchone()
        return None if row is None else loads(row[0])

    async def clear_session(self) -> None:
        async with self.conn.cursor() as cur:
            await cur.execute(f"DELETE FROM {self.t} WHERE session_id = %s", (self.sid,))


class RawMongo:
    """PyMongo's async client, one document per item ordered by ``_id``."""

    def __init__(self, collection: Any, session_id: str) -> None:
        self.c, self.sid = collection, session_id

    async def add_items(self, items: list[Any]) -> None:
        await self.c.insert_many([{"session_id": self.sid, "data": dumps(i)} for i in items])

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            cursor = self.c.find({"session_id": self.sid}).sort("_id", 1)
            return [loads(d["data"]) async for d in cursor]
        cursor = self.c.find({"session_id": self.sid}).sort("_id", -1).limit(limit)
        return [loads(d["data"]) async for d in cursor][::-1]

    async def pop_item(self) -> Any:
        doc = await self.c.find_one_and_delete({"session_id": self.sid}, sort=[("_id", -1)])
        return None if doc is None else loads(doc["data"])

    async def clear_session(self) -> None:
        await self.c.delete_many({"session_id": self.sid})
