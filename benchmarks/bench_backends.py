"""Backends: ours vs the raw driver (benchmarks/raw.py) vs the SDK's class of the same name,
on SQLite, Redis, PostgreSQL, MariaDB (and MongoDB when AGENT_SESSIONS_MONGODB_URL is set),
at histories of 100 / 10k / 100k items (``--quick``: 100 / 10k), in one run.

    python benchmarks/bench_backends.py [--quick] [--only sqlite,redis,postgres,mariadb,mongodb]

Per history size every contender gets its own session, prefilled untimed; then each operation
alternates the contenders call by call in shuffled order. ``pop`` and ``add 1`` are followed by
an untimed ``add``/``pop`` so the history keeps its size; ``add 20`` runs last and grows it.
At the smallest size ``get(limit=20)`` and ``add 1`` are also timed on a fresh object per call.
A server that cannot be reached is skipped with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import raw
from benchmarks.harness import (
    Factory,
    Result,
    alternate,
    close,
    item,
    later,
    new_id,
    prefill,
    purge,
)

REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get(
    "AGENT_SESSIONS_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "AGENT_SESSIONS_MARIADB_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"
)
MONGODB_URL = os.environ.get("AGENT_SESSIONS_MONGODB_URL")
RUN = uuid.uuid4().hex[:8]
PREFIX = f"benchbackends_{RUN}"
"""Every key and table of this run starts with it; ``purge`` removes them at the end."""


@dataclass
class Backend:
    name: str
    contenders: dict[str, Factory]
    """ours, raw, SDK (in that order): session id -> a new object."""
    cleanup: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)


async def sqlite_backend(tmp: str) -> Backend:
    from agents.memory import SQLiteSession as SDKSQLiteSession

    from agent_sessions import SQLiteSession

    ours_path, sdk_path = os.path.join(tmp, "ours.db"), os.path.join(tmp, "sdk.db")
    keep = SQLiteSession("keep-open", ours_path)  # an application keeps its file open
    await keep.get_items(limit=1)
    db = await raw.RawAiosqlite.connect(os.path.join(tmp, "raw.db"), "messages")

    async def ours(sid: str) -> Any:
        return SQLiteSession(sid, ours_path)

    async def raw_(sid: str) -> Any:
        return raw.RawAiosqlite(db, "messages", sid)

    async def sdk(sid: str) -> Any:
        return SDKSQLiteSession(sid, sdk_path)

    return Backend(
        "SQLite (file, WAL)",
        {"ours": ours, "raw aiosqlite": raw_, "SDK SQLiteSession": sdk},
        [keep.close, db.close],
    )


async def redis_backend() -> Backend:
    from agents.extensions.memory import RedisSession as SDKRedisSession
    from redis.asyncio import Redis

    from agent_sessions.backends.redis import RedisSession

    clients = [Redis.from_url(REDIS_URL) for _ in range(3)]
    await clients[0].ping()

    async def ours(sid: str) -> Any:
        return RedisSession(sid, client=clients[0], key_prefix=f"{PREFIX}-ours")

    async def raw_(sid: str) -> Any:
        return raw.RawRedisList(clients[1], f"{PREFIX}-raw", sid)

    async def sdk(sid: str) -> Any:
        return SDKRedisSession(sid, redis_client=clients[2], key_prefix=f"{PREFIX}-sdk")

    return Backend(
        "Redis (loopback)",
        {"ours": ours, "raw redis-py list": raw_, "SDK RedisSession": sdk},
        [c.aclose for c in clients],
    )


async def postgres_backend() -> Backend:
    import asyncpg  # type: ignore[import-untyped]
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession as SDKSession
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    prefix = f"{PREFIX}_"
    conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""))
    table = f"{prefix}raw"
    for statement in raw.TABLE_POSTGRES:
        await conn.execute(statement.format(t=table))
    engine = create_async_engine(PG_URL)
    keep = SQLAlchemySession.from_url("keep-open", url=PG_URL, table_prefix=f"{prefix}o_")

    async def ours(sid: str) -> Any:
        return SQLAlchemySession.from_url(sid, url=PG_URL, table_prefix=f"{prefix}o_")

    async def raw_(sid: str) -> Any:
        return raw.RawAsyncpg(conn, table, sid)

    async def sdk(sid: str) -> Any:
        return SDKSession(
            sid,
            engine=engine,
            create_tables=True,
            sessions_table=f"{prefix}s_sessions",
            messages_table=f"{prefix}s_messages",
        )

    async def drop() -> None:
        await keep.close()
        await conn.close()
        async with engine.begin() as c:
            for name in ("s_messages", "s_sessions", "o_messages", "o_sessions", "o_schema", "raw"):
                await c.execute(text(f"DROP TABLE IF EXISTS {prefix}{name}"))
        await engine.dispose()

    return Backend(
        "PostgreSQL (asyncpg)",
        {"ours": ours, "raw asyncpg": raw_, "SDK SQLAlchemySession": sdk},
        [drop],
    )


async def mariadb_backend() -> Backend:
    import asyncmy
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession as SDKSession
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    prefix = f"{PREFIX}_"
    conn = await asyncmy.connect(
        host="127.0.0.1", port=3306, user="root", database="test", charset="utf8mb4",
        autocommit=True,
    )  # fmt: skip
    table = f"{prefix}raw"
    async with conn.cursor() as cur:
        for statement in raw.TABLE_MYSQL:
            await cur.execute(statement.format(t=table))
    engine = create_async_engine(MARIADB_URL + "?charset=utf8mb4")
    s, m = f"{prefix}s_sessions", f"{prefix}s_messages"
    # The SDK's create_tables fails on MySQL (VARCHAR without a length): its schema, by hand.
    async with engine.begin() as c:
        await c.execute(
            text(
                f"CREATE TABLE {s} (session_id VARCHAR(255) PRIMARY KEY, created_at TIMESTAMP "
                "NOT NULL DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP NOT NULL DEFAULT "
                "CURRENT_TIMESTAMP)"
            )
        )
        await c.execute(
            text(
                f"CREATE TABLE {m} (id INTEGER AUTO_INCREMENT PRIMARY KEY, session_id "
                "VARCHAR(255) NOT NULL, message_data LONGTEXT NOT NULL, created_at TIMESTAMP "
                f"NOT NULL DEFAULT CURRENT_TIMESTAMP, INDEX {m}_st (session_id, created_at), "
                f"FOREIGN KEY (session_id) REFERENCES {s} (session_id) ON DELETE CASCADE)"
            )
        )
    keep = SQLAlchemySession.from_url("keep-open", url=MARIADB_URL, table_prefix=f"{prefix}o_")

    async def ours(sid: str) -> Any:
        return SQLAlchemySession.from_url(sid, url=MARIADB_URL, table_prefix=f"{prefix}o_")

    async def raw_(sid: str) -> Any:
        return raw.RawAsyncmy(conn, table, sid)

    async def sdk(sid: str) -> Any:
        return SDKSession(sid, engine=engine, sessions_table=s, messages_table=m)

    async def drop() -> None:
        await keep.close()
        conn.close()
        async with engine.begin() as c:
            for name in ("s_messages", "s_sessions", "o_messages", "o_sessions", "o_schema", "raw"):
                await c.execute(text(f"DROP TABLE IF EXISTS {prefix}{name}"))
        await engine.dispose()

    return Backend(
        "MariaDB (asyncmy)",
        {"ours": ours, "raw asyncmy": raw_, "SDK SQLAlchemySession": sdk},
        [drop],
    )


async def mongodb_backend() -> Backend:
    from agents.extensions.memory.mongodb_session import MongoDBSession as SDKMongoDBSession
    from pymongo import AsyncMongoClient

    from agent_sessions.backends.mongodb import MongoDBSession

    assert MONGODB_URL
    client: Any = AsyncMongoClient(MONGODB_URL)
    database = f"bench_{RUN}"
    collection = client[database]["raw"]
    await collection.create_index([("session_id", 1), ("_id", 1)])

    async def ours(sid: str) -> Any:
        return MongoDBSession(sid, client=client, database=database)

    async def raw_(sid: str) -> Any:
        return raw.RawMongo(collection, sid)

    async def sdk(sid: str) -> Any:
        return SDKMongoDBSession(sid, client=client, database=f"{database}_sdk")

    async def drop() -> None:
        await client.drop_database(database)
        await client.drop_database(f"{database}_sdk")
        await client.close()

    return Backend(
        "MongoDB", {"ours": ours, "raw pymongo": raw_, "SDK MongoDBSession": sdk}, [drop]
    )


BACKENDS: dict[str, Callable[[str], Awaitable[Backend]]] = {
    "sqlite": sqlite_backend,
    "redis": lambda _tmp: redis_backend(),
    "postgres": lambda _tmp: postgres_backend(),
    "mariadb": lambda _tmp: mariadb_backend(),
    "mongodb": lambda _tmp: mongodb_backend(),
}


async def _pop(session: Any) -> Any:
    return await session.pop_item()


async def measure(backend: Backend, sizes: list[int], calls: int) -> list[Result]:
    """Every operation at every size for every contender of ``backend``."""
    one = [item(0)]
    batch = [item(i) for i in range(20)]
    results: list[Result] = []

    async def add_one(s: Any) -> Any:
        return await s.add_items(one)

    async def add_batch(s: Any) -> Any:
        return await s.add_items(batch)

    async def get20(s: Any) -> Any:
        return await s.get_items(limit=20)

    async def get_all(s: Any) -> Any:
        return await s.get_items()

    # Every size's sessions are open at once and alternate with each other too, so load drift
    # on a shared machine cannot pass for a cost that grows with history.
    names = list(backend.contenders)
    ids = {(name, size): new_id(f"{size}") for name in names for size in sizes}
    warm: dict[str, Any] = {}
    for (name, size), sid in ids.items():
        warm[f"{name} @{size}"] = await backend.contenders[name](sid)
        await prefill(warm[f"{name} @{size}"], size)
    small = {f"{name} @{sizes[0]}": warm[f"{name} @{sizes[0]}"] for name in names}

    def result(op: str, mode: str, samples: dict[str, list[float]], note: str = "") -> None:
        for size in sizes:
            if f"{names[0]} @{size}" in samples:
                per = {name: samples[f"{name} @{size}"] for name in names}
                results.append(Result(backend.name, op, size, mode, per, note))
        print(f"  {backend.name}: {op} {mode} done", flush=True)

    try:
        result("get(limit=20)", "warm", await alternate(warm, get20, calls))
        result("get() all", "warm", await alternate(small, get_all, calls // 2))
        result("pop", "warm", await alternate(warm, _pop, calls, restore=add_one))
        result("add 1", "warm", await alternate(warm, add_one, calls, restore=_pop))
        fresh = {
            f"{n} @{sizes[0]}": later(backend.contenders[n], ids[(n, sizes[0])]) for n in names
        }
        result("get(limit=20)", "fresh", await alternate(small, get20, calls, fresh=fresh))
        result("add 1", "fresh", await alternate(small, add_one, calls, fresh=fresh, restore=_pop))
        result(
            "add 20",
            "warm",
            await alternate(warm, add_batch, calls // 5),
            note="history grows by 20 per call",
        )
    finally:
        for session in warm.values():
            await session.clear_session()
            await close(session)
    return results


PURGE: dict[str, dict[str, Any]] = {
    "redis": {"redis_url": REDIS_URL},
    "postgres": {"sql_urls": (PG_URL,)},
    "mariadb": {"sql_urls": (MARIADB_URL,)},
}
"""What ``purge`` must sweep after each server backend."""


async def collect(quick: bool, only: list[str] | None = None) -> tuple[list[Result], list[str]]:
    """Run every reachable backend; return the results and notes on skipped backends."""
    sizes = [100, 10_000] if quick else [100, 10_000, 100_000]
    calls = 100 if quick else 300
    results: list[Result] = []
    notes: list[str] = []
    tmp = tempfile.mkdtemp(prefix="bench-backends-")
    for key, open_backend in BACKENDS.items():
        if only and key not in only:
            continue
        if key == "mongodb" and not MONGODB_URL:
            notes.append(
                "MongoDB: not measured (no server here; set AGENT_SESSIONS_MONGODB_URL). The "
                "in-process stand-in has no storage engine, so its numbers would mean nothing."
            )
            continue
        try:
            backend = await open_backend(tmp)
        except Exception as exc:  # a server that is down: skip with the reason
            notes.append(f"{key}: skipped, {type(exc).__name__}: {exc}")
            continue
        try:
            results += await measure(backend, sizes, calls)
        finally:
            for step in backend.cleanup:
                await step()
            if key in PURGE:
                await purge(PREFIX, **PURGE[key])
    return results, notes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 / 10k items, fewer calls")
    parser.add_argument("--only", default="", help="comma-separated backends")
    args = parser.parse_args()
    found, skipped = asyncio.run(collect(args.quick, [o for o in args.only.split(",") if o]))
    from benchmarks.report import print_results

    print_results(found)
    for line in skipped:
        print(line)
