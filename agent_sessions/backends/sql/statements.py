"""What the dialects that run SQLAlchemy Core constructs through the store's
``AsyncConnection`` share (PostgreSQL, SQLite): the tables, the reads and the deleting half of a
swap. Each subclass says how a one-statement operation and a transaction start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Executable,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    delete,
    false,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ...core.base import Row
from .common import SqlDialect, Tables, check_version, prunable_end

SID = bindparam("sid", type_=String)
N = bindparam("n", type_=BigInteger)
_AFTER = bindparam("after", type_=BigInteger)
_BEFORE = bindparam("before", type_=BigInteger)
_LIMIT = bindparam("limit", type_=BigInteger)


class CoreDialect(SqlDialect):
    """Statements as Core constructs over ``{prefix}sessions``/``messages``/``schema``."""

    via_connection = True

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        md = MetaData()
        self.s = Table(
            tables.sessions, md,
            Column("session_id", String, primary_key=True), Column("last_seq", BigInteger),
            Column("created_at", DateTime(timezone=True)),
            Column("updated_at", DateTime(timezone=True)),
        )
        self.m = m = Table(
            tables.messages, md,
            Column("session_id", String, primary_key=True),
            Column("seq", BigInteger, primary_key=True), Column("message_data", Text),
        )
        self.schema = Table(
            tables.schema, md, Column("table_name", String), Column("version", Integer)
        )
        self.mine = m.c.session_id == SID
        self.newest = select(m.c.seq).where(self.mine).order_by(m.c.seq.desc()).limit(1)
        self._loads: dict[tuple[bool, bool, bool], Executable] = {}
        self._counts: dict[tuple[bool, bool], Executable] = {}

    async def single(self, conn: AsyncConnection) -> None:
        """Set ``conn`` up for one statement that is atomic by itself."""

    async def begin(self, conn: AsyncConnection) -> None:
        """Start the transaction of a multi-statement write on ``conn``."""

    def _bounded(self, stmt: Any, after: int | None, before: int | None) -> Any:
        stmt = stmt.where(self.mine)
        if after is not None:
            stmt = stmt.where(self.m.c.seq > _AFTER)
        if before is not None:
            stmt = stmt.where(self.m.c.seq < _BEFORE)
        return stmt

    async def version(self, conn: AsyncConnection, missing_ok: bool) -> Any:
        """The schema version of these tables (None: no row; or no table and ``missing_ok``)."""
        schema = self.schema
        query = select(schema.c.version).where(schema.c.table_name == self.t.messages)
        try:
            return (await conn.execute(query)).scalar()
        except Exception as exc:
            if missing_ok and self.missing_table(exc):
                await conn.rollback()
                return None
            raise

    async def check(self, conn: AsyncConnection) -> None:
        """Raise unless the tables carry a version this code reads and the columns it uses."""
        check_version(self.t, await self.version(conn, False))
        await conn.execute(select(self.s.c.session_id, self.s.c.last_seq).where(false()))
        await conn.execute(select(self.m.c.seq, self.m.c.message_data).where(false()))

    async def load(
        self,
        conn: Any,
        session_id: str,
        limit: int | None,
        after: int | None,
        before: int | None,
    ) -> list[Row]:
        key = (limit is None, after is not None, before is not None)
        stmt = self._loads.get(key)
        if stmt is None:
            query = self._bounded(select(self.m.c.seq, self.m.c.message_data), after, before)
            seq = self.m.c.seq
            stmt = self._loads[key] = (
                query.order_by(seq) if limit is None else query.order_by(seq.desc()).limit(_LIMIT)
            )
        await self.single(conn)
        args = {"sid": session_id, "after": after, "before": before, "limit": limit}
        out: list[Row] = [(r[0], r[1]) for r in await conn.execute(stmt, args)]
        if limit is not None:
            out.reverse()
        return out

    async def count(self, conn: Any, session_id: str, after: int | None, before: int | None) -> int:
        key = (after is not None, before is not None)
        stmt = self._counts.get(key)
        if stmt is None:
            stmt = self._counts[key] = self._bounded(
                select(func.count()).select_from(self.m), after, before
            )
        await self.single(conn)
        args = {"sid": session_id, "after": after, "before": before}
        return int((await conn.execute(stmt, args)).scalar_one())

    async def delete_before(self, conn: Any, session_id: str, before: int) -> int:
        await self.single(conn)
        stmt = delete(self.m).where(self.mine, self.m.c.seq < _BEFORE)
        return int((await conn.execute(stmt, {"sid": session_id, "before": before})).rowcount)

    async def swap_delete(
        self,
        conn: AsyncConnection,
        session_id: str,
        expected: list[Row] | None,
        prune: Callable[[str], bool] | None,
    ) -> bool:
        """The deleting half of ``replace_rows``, inside the caller's transaction: return
        False, deleting nothing, unless the newest ``len(expected)`` rows are ``expected``;
        else delete them (every row when ``expected`` is None) and the oldest rows ``prune``
        accepts."""
        m, sid = self.m, {"sid": session_id}
        if expected is None:
            await conn.execute(delete(m).where(self.mine), sid)
            return True
        newest = select(m.c.seq, m.c.message_data).where(self.mine)
        newest = newest.order_by(m.c.seq.desc()).limit(len(expected))
        if [(r[0], r[1]) for r in await conn.execute(newest, sid)][::-1] != list(expected):
            return False
        first = expected[0][0]
        if prune is not None:
            older = select(m.c.seq, m.c.message_data).where(self.mine, m.c.seq < first)
            rows = [(r[0], r[1]) for r in await conn.execute(older.order_by(m.c.seq), sid)]
            end = prunable_end(rows, prune)
            if end is not None:
                await conn.execute(delete(m).where(self.mine, m.c.seq <= end), sid)
        await conn.execute(delete(m).where(self.mine, m.c.seq >= first), sid)
        return True
