"""PostgreSQL and MariaDB: ours vs the raw driver running the same SQL on one dedicated
connection vs the SDK's SQLAlchemySession, in one run.

``python benchmarks/bench_sql.py [--quick] [--only postgres|mariadb|drivers]``

"drivers" compares ours on asyncmy and on aiomysql (the choice for the ``[mysql]`` extra).
Tables carry a random prefix and are dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from typing import Any

import asyncmy
import asyncpg  # type: ignore[import-untyped]
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession as SDKSession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions.backends import _sql_mysql, _sql_postgres
from agent_sessions.backends._sql_common import Tables
from agent_sessions.backends.sqlalchemy import SQLAlchemySession
from agent_sessions.core.codec import dumps, loads
from benchmarks.harness import Contender, default_scenarios, paired, run_suite

PG_URL = os.environ.get(
    "AGENT_SESSIONS_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "AGENT_SESSIONS_MARIADB_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"
)
RUN = uuid.uuid4().hex[:8]


class RawAsyncpg:
    """The SQL of ``_sql_postgres``, on one asyncpg connection."""

    def __init__(self, conn: asyncpg.Connection, tables: Tables, sid: str) -> None:
        self.conn, self.sid = conn, sid
        self.sql = _sql_postgres.PostgresDialect(tables)
        m = tables.messages
        self.get_sql = (
            f"SELECT seq, message_data FROM {m} WHERE session_id = $1 ORDER BY seq DESC LIMIT $2"
        )
        self.all_sql = f"SELECT seq, message_data FROM {m} WHERE session_id = $1 ORDER BY seq"

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        payloads = [dumps(i) for i in items]
        await self.conn.fetchval(self.sql._append, self.sid, len(payloads), payloads)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            return [loads(r[1]) for r in await self.conn.fetch(self.all_sql, self.sid)]
        rows = await self.conn.fetch(self.get_sql, self.sid, limit)
        return [loads(r[1]) for r in reversed(rows)]

    async def pop_item(self) -> Any:
        value = await self.conn.fetchval(self.sql._pop, self.sid)
        return None if value is None else loads(value)

    async def clear_session(self) -> None:
        async with self.conn.transaction():
            for statement in self.sql._clear:
                await self.conn.execute(statement, self.sid)


class RawMySQL:
    """The SQL of ``_sql_mysql``, on one asyncmy connection in autocommit mode."""

    def __init__(self, conn: Any, tables: Tables, sid: str) -> None:
        self.conn, self.sid = conn, sid
        self.sql = _sql_mysql.MySQLDialect(tables, mariadb=True)
        m = tables.messages
        self.get_sql = (
            f"SELECT seq, message_data FROM {m} WHERE session_id = %s ORDER BY seq DESC LIMIT %s"
        )
        self.all_sql = f"SELECT seq, message_data FROM {m} WHERE session_id = %s ORDER BY seq"

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        payloads = [dumps(i) for i in items]
        n = len(payloads)
        values = ",".join(f"(%s,LAST_INSERT_ID()-{n - 1 - i},%s)" for i in range(n))
        args: list[Any] = [self.sid, n, n]
        for p in payloads:
            args += (self.sid, p)
        async with self.conn.cursor() as cur:
            await cur.execute(
                f"START TRANSACTION;{self.sql._bump};{self.sql._insert}{values};COMMIT", args
            )
            while await cur.nextset():
                pass

    async def get_items(self, limit: int | None = None) -> list[Any]:
        async with self.conn.cursor() as cur:
            if limit is None:
                await cur.execute(self.all_sql, (self.sid,))
                return [loads(r[1]) for r in await cur.fetchall()]
            await cur.execute(self.get_sql, (self.sid, limit))
            return [loads(r[1]) for r in reversed(await cur.fetchall())]

    async def pop_item(self) -> Any:
        async with self.conn.cursor() as cur:
            await cur.execute(self.sql._pop, (self.sid,))
            row = await cur.fetchone()
        return None if row is None else loads(row[0])

    async def clear_session(self) -> None:
        async with self.conn.cursor() as cur:
            await self.conn.begin()
            for statement in self.sql._clear:
                await cur.execute(statement, (self.sid,))
            await self.conn.commit()


async def _drop(engine: AsyncEngine, names: list[str]) -> None:
    async with engine.begin() as conn:
        for name in names:
            await conn.execute(text(f"DROP TABLE IF EXISTS {name}"))


def _names(prefix: str) -> list[str]:
    return [f"{prefix}{t}" for t in ("messages", "sessions", "schema")]


async def bench_postgres(quick: bool, rounds: int, big: int) -> None:
    ours_p, raw_p, sdk_p = f"b{RUN}_o_", f"b{RUN}_r_", f"b{RUN}_s_"
    raw_tables = Tables.build(raw_p, None, None)
    raw_conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""))
    for statement in _sql_postgres.create_statements(raw_tables):
        await raw_conn.execute(statement)
    sdk_engine = create_async_engine(PG_URL)
    keep: list[SQLAlchemySession] = [
        SQLAlchemySession.from_url("keep", url=PG_URL, table_prefix=ours_p)
    ]  # holds the shared engine open across rounds, as an application would

    async def ours(sid: str) -> Any:
        return SQLAlchemySession.from_url(sid, url=PG_URL, table_prefix=ours_p)

    async def raw(sid: str) -> Any:
        return RawAsyncpg(raw_conn, raw_tables, sid)

    async def sdk(sid: str) -> Any:
        return SDKSession(
            sid,
            engine=sdk_engine,
            create_tables=True,
            sessions_table=f"{sdk_p}sessions",
            messages_table=f"{sdk_p}messages",
        )

    contenders = [Contender("ours", ours), Contender("raw asyncpg", raw), Contender("SDK", sdk)]
    try:
        await run_suite(
            "PostgreSQL 15 (asyncpg)", contenders, default_scenarios(quick, big=big), rounds=rounds
        )
        await paired(contenders, 300 if quick else 1500)
    finally:
        await keep[0].close()
        await raw_conn.close()
        await _drop(sdk_engine, _names(ours_p) + _names(raw_p) + _names(sdk_p)[:2])
        await sdk_engine.dispose()


async def bench_mariadb(quick: bool, rounds: int, big: int, drivers: bool) -> None:
    ours_p, raw_p, sdk_p = f"b{RUN}_o_", f"b{RUN}_r_", f"b{RUN}_s_"
    raw_tables = Tables.build(raw_p, None, None)
    raw_conn = await asyncmy.connect(
        host="127.0.0.1",
        port=3306,
        user="root",
        database="test",
        charset="utf8mb4",
        autocommit=True,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    )
    async with raw_conn.cursor() as cur:
        for statement in _sql_mysql.create_statements(raw_tables):
            await cur.execute(statement)
    aiomysql_url = MARIADB_URL.replace("+asyncmy", "+aiomysql")
    sdk_engine = create_async_engine(MARIADB_URL + "?charset=utf8mb4")
    # The SDK's create_tables fails on MySQL (VARCHAR without a length): its schema, by hand.
    async with sdk_engine.begin() as conn:
        await conn.execute(
            text(
                f"CREATE TABLE {sdk_p}sessions (session_id VARCHAR(255) PRIMARY KEY, "
                "created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
                "updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )
        )
        await conn.execute(
            text(
                f"CREATE TABLE {sdk_p}messages (id INTEGER AUTO_INCREMENT PRIMARY KEY, "
                "session_id VARCHAR(255) NOT NULL, message_data TEXT NOT NULL, "
                "created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
                f"INDEX idx_{sdk_p}messages_session_time (session_id, created_at), "
                f"FOREIGN KEY (session_id) REFERENCES {sdk_p}sessions (session_id) "
                "ON DELETE CASCADE)"
            )
        )
    keep = [
        SQLAlchemySession.from_url("keep", url=MARIADB_URL, table_prefix=ours_p),
        SQLAlchemySession.from_url("keep", url=aiomysql_url, table_prefix=ours_p),
    ]

    async def ours(sid: str) -> Any:
        return SQLAlchemySession.from_url(sid, url=MARIADB_URL, table_prefix=ours_p)

    async def ours_aiomysql(sid: str) -> Any:
        return SQLAlchemySession.from_url(sid, url=aiomysql_url, table_prefix=ours_p)

    async def raw(sid: str) -> Any:
        return RawMySQL(raw_conn, raw_tables, sid)

    async def sdk(sid: str) -> Any:
        return SDKSession(
            sid,
            engine=sdk_engine,
            sessions_table=f"{sdk_p}sessions",
            messages_table=f"{sdk_p}messages",
        )

    try:
        if drivers:
            contenders = [
                Contender("ours asyncmy", ours),
                Contender("ours aiomysql", ours_aiomysql),
            ]
            title = "MariaDB 10.11: driver choice"
        else:
            contenders = [
                Contender("ours", ours),
                Contender("raw asyncmy", raw),
                Contender("SDK", sdk),
            ]
            title = "MariaDB 10.11 (asyncmy)"
        await run_suite(title, contenders, default_scenarios(quick, big=big), rounds=rounds)
        await paired(contenders, 300 if quick else 1500)
    finally:
        for s in keep:
            await s.close()
        raw_conn.close()
        await _drop(sdk_engine, _names(ours_p) + _names(raw_p) + _names(sdk_p)[:2])
        await sdk_engine.dispose()


async def main(quick: bool, only: str | None) -> None:
    rounds = 2 if quick else 3
    big = 10_000 if quick else 100_000
    if only in (None, "postgres"):
        await bench_postgres(quick, rounds, big)
    if only in (None, "mariadb"):
        await bench_mariadb(quick, rounds, big, drivers=False)
    if only == "drivers":
        await bench_mariadb(quick, rounds, big, drivers=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer ops, 10k-item big session")
    parser.add_argument("--only", choices=["postgres", "mariadb", "drivers"])
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.only))
