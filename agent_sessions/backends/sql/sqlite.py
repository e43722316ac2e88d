"""SQLite statements for the SQL store (``sqlite+aiosqlite``), as SQLAlchemy Core constructs
run through the store's ``AsyncConnection``.

Writes take the write lock up front (``BEGIN IMMEDIATE``); operations on one engine are also
serialized in-process, since SQLAlchemy may hand one shared connection to several tasks (an
in-memory database uses a single static connection). The connection is kept between operations
and after errors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy import String, bindparam, func, insert, literal, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from ...core.base import Row
from .common import SCHEMA_VERSION, Refused, Tables, causes, run_check
from .statements import SID, CoreDialect

T = TypeVar("T")


def create_statements(t: Tables) -> list[str]:
    """The DDL of schema version 1 (TEXT compares byte by byte in SQLite)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {t.schema} (table_name TEXT PRIMARY KEY, "
        "version INTEGER NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {t.sessions} (session_id TEXT PRIMARY KEY, "
        "last_seq INTEGER NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
        "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
        f"CREATE TABLE IF NOT EXISTS {t.messages} (session_id TEXT NOT NULL, "
        "seq INTEGER NOT NULL, message_data TEXT NOT NULL, "
        "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (session_id, seq))",
        f"INSERT OR IGNORE INTO {t.schema} (table_name, version) "
        f"VALUES ('{t.messages}', {SCHEMA_VERSION})",
    ]


def _stamp(epoch: float) -> str:
    """``epoch`` as CURRENT_TIMESTAMP text (UTC)."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


class SqliteDialect(CoreDialect):
    """Statements for SQLite 3.35+ (``RETURNING``)."""

    exclusive = True
    # Dropping the connection of an in-memory database would drop the database; aiosqlite
    # finishes a statement even when its caller is cancelled, and writes roll back on error.
    discard_on_error = False

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        s, m = self.s, self.m
        bump = sqlite_insert(s).values(session_id=SID, last_seq=bindparam("n"))
        self._bump = bump.on_conflict_do_update(
            index_elements=[s.c.session_id],
            set_={
                "last_seq": s.c.last_seq + bump.excluded.last_seq,
                "updated_at": func.current_timestamp(),
            },
        ).returning(s.c.last_seq)
        self._insert = insert(m)
        self._pop = (
            m.delete()
            .where(self.mine, m.c.seq == self.newest.scalar_subquery())
            .returning(m.c.message_data)
        )

    async def _write(self, conn: AsyncConnection, statements: Callable[[], Awaitable[T]]) -> T:
        await conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            result = await statements()
        except BaseException:
            await conn.rollback()
            raise
        await conn.commit()
        return result

    async def prepare(self, conn: Any, create: bool) -> None:
        if await self.version(conn, create) is None and create:

            async def run() -> None:
                for statement in create_statements(self.t):
                    await conn.exec_driver_sql(statement)

            await self._write(conn, run)
        await self.check(conn)
        await conn.rollback()

    async def _append_rows(
        self, conn: AsyncConnection, session_id: str, payloads: list[str]
    ) -> int:
        n = len(payloads)
        last = int((await conn.execute(self._bump, {"sid": session_id, "n": n})).scalar_one())
        rows = [
            {"session_id": session_id, "seq": last - n + 1 + i, "message_data": p}
            for i, p in enumerate(payloads)
        ]
        await conn.execute(self._insert, rows)
        return last

    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        return await self._write(conn, lambda: self._append_rows(conn, session_id, payloads))

    async def pop(self, conn: Any, session_id: str) -> str | None:
        async def run() -> Any:
            return (await conn.execute(self._pop, {"sid": session_id})).scalar()

        value = await self._write(conn, run)
        return None if value is None else str(value)

    async def pop_checked(
        self, conn: Any, session_id: str, check: Callable[[str], Any]
    ) -> Any:
        await conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            value = (await conn.execute(self._pop, {"sid": session_id})).scalar()
            outcome = None if value is None else run_check(check, str(value))
        except BaseException:
            await conn.rollback()
            raise
        await (conn.rollback() if isinstance(outcome, Refused) else conn.commit())
        return outcome

    async def clear(self, conn: Any, session_id: str) -> None:
        async def run() -> None:
            await conn.execute(self.m.delete().where(self.mine), {"sid": session_id})

        await self._write(conn, run)

    async def replace_rows(
        self,
        conn: Any,
        session_id: str,
        expected: list[Row] | None,
        payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        async def run() -> bool:
            if not await self.swap_delete(conn, session_id, expected, prune):
                return False
            if payloads:
                await self._append_rows(conn, session_id, payloads)
            return True

        return await self._write(conn, run)

    async def delete_before(self, conn: Any, session_id: str, before: int) -> int:
        return await self._write(conn, lambda: super(SqliteDialect, self).delete_before(
            conn, session_id, before
        ))

    async def rewrite(self, conn: Any, session_id: str, rows: list[Row]) -> int:
        m = self.m
        stmt = (
            update(m)
            .where(m.c.session_id == bindparam("sid"), m.c.seq == bindparam("at"))
            .values(message_data=bindparam("data"))
        )

        async def run() -> int:
            args = [{"sid": session_id, "at": seq, "data": p} for seq, p in rows]
            return int((await conn.execute(stmt, args)).rowcount)  # summed over the rows

        return await self._write(conn, run)

    async def write_at(
        self, conn: Any, session_id: str, rows: list[Row], created: float, updated: float
    ) -> int:
        s = self.s
        mark = sqlite_insert(s).values(
            session_id=SID, last_seq=rows[-1][0],
            created_at=literal(_stamp(created), String),  # the text CURRENT_TIMESTAMP writes
            updated_at=literal(_stamp(updated), String),
        )
        mark = mark.on_conflict_do_update(
            index_elements=[s.c.session_id],
            set_={
                "last_seq": func.max(s.c.last_seq, mark.excluded.last_seq),
                "created_at": mark.excluded.created_at,
                "updated_at": mark.excluded.updated_at,
            },
        )
        sid = {"sid": session_id}

        async def run() -> int:
            count = func.count()
            held = int((await conn.execute(self._bounded(
                self.m.select().with_only_columns(count), None, None), sid)).scalar_one())
            if held:
                return held
            await conn.execute(mark, sid)
            await conn.execute(self._insert, [
                {"session_id": session_id, "seq": seq, "message_data": p} for seq, p in rows
            ])
            return 0

        return await self._write(conn, run)

    def unavailable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, sqlite3.OperationalError) and "unable to open" in str(e)
            for e in causes(exc)
        )

    def missing_table(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, sqlite3.OperationalError)
            and ("no such table" in str(e) or "no such column" in str(e))
            for e in causes(exc)
        )
