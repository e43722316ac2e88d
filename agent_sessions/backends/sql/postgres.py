"""PostgreSQL statements for the SQL store, as SQLAlchemy Core constructs run through a
``Connection`` of the store's engine (asyncpg), so the pool and the engine's events see every
statement. An operation runs inside one SQLAlchemy greenlet (see ``SQLStore``): the methods are
coroutines for the dialects' common interface, but call the synchronous ``Connection`` and never
suspend, which spares a greenlet switch per call.

Every operation but ``clear`` and the multi-statement writes is one statement in autocommit
mode, hence one round trip and atomic by itself:

- append: a data-modifying CTE bumps the session's counter (``INSERT .. ON CONFLICT DO UPDATE``
  locks the session row, so concurrent writers of one session queue up and get contiguous
  numbers in commit order) and inserts the whole batch from one ``unnest`` of a text array.
- pop: ``DELETE .. WHERE seq = (SELECT .. ORDER BY seq DESC LIMIT 1 FOR UPDATE) RETURNING``.
  A concurrent pop that deleted the locked row makes the sub-select move on to the next one,
  so two pops never return the same row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg.exceptions as pg  # type: ignore[import-untyped]
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Executable,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    delete,
    false,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from ...core.base import Row
from .common import (
    SCHEMA_VERSION,
    Refused,
    SqlDialect,
    Tables,
    causes,
    check_version,
    prunable_end,
    run_check,
)

_UNAVAILABLE = (
    OSError,
    asyncio.TimeoutError,
    pg.ConnectionDoesNotExistError,
    pg.PostgresConnectionError,
    pg.CannotConnectNowError,
    pg.AdminShutdownError,
    pg.CrashShutdownError,
    pg.TooManyConnectionsError,
)
_SID = bindparam("sid", type_=String)
_N = bindparam("n", type_=BigInteger)
_AFTER = bindparam("after", type_=BigInteger)
_BEFORE = bindparam("before", type_=BigInteger)
_LIMIT = bindparam("limit", type_=BigInteger)


def create_statements(t: Tables) -> list[str]:
    """The DDL of schema version 1 (``COLLATE "C"``: ids compare byte by byte)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {t.schema} (table_name VARCHAR(64) PRIMARY KEY, "
        "version INTEGER NOT NULL)",
        f'CREATE TABLE IF NOT EXISTS {t.sessions} (session_id VARCHAR(512) COLLATE "C" '
        "PRIMARY KEY, last_seq BIGINT NOT NULL, "
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
        "updated_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        # TEXT, not JSONB: items may hold "\u0000" escapes, which jsonb rejects.
        f'CREATE TABLE IF NOT EXISTS {t.messages} (session_id VARCHAR(512) COLLATE "C" '
        "NOT NULL, seq BIGINT NOT NULL, message_data TEXT NOT NULL, "
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (session_id, seq))",
        f"INSERT INTO {t.schema} (table_name, version) VALUES ('{t.messages}', {SCHEMA_VERSION}) "
        "ON CONFLICT (table_name) DO NOTHING",
    ]


def _autocommit(conn: Connection) -> None:
    """One statement, no BEGIN/COMMIT round trips (asyncpg sets the level without I/O)."""
    conn.execution_options(isolation_level="AUTOCOMMIT")


def _read_committed(conn: Connection) -> None:
    """A transaction whose later statements see the rows of a writer an earlier one waited
    for (the connection's default level may be stricter)."""
    conn.execution_options(isolation_level="READ COMMITTED")


class PostgresDialect(SqlDialect):
    """Statements for PostgreSQL (asyncpg), run on an ``AsyncConnection``."""

    via_connection = True

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        md = MetaData()
        self.s = s = Table(
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
        self.schema = Table(tables.schema, md, Column("table_name", String), Column("version"))
        data = bindparam("data", type_=ARRAY(Text))
        bump = pg_insert(s).values(session_id=_SID, last_seq=_N)
        bump = bump.on_conflict_do_update(
            index_elements=[s.c.session_id],
            set_={"last_seq": s.c.last_seq + bump.excluded.last_seq, "updated_at": func.now()},
        )
        self._bump = bump
        counter = bump.returning(s.c.last_seq).cte("c")
        u = func.unnest(data).table_valued("data", with_ordinality="ord").render_derived("u")
        rows = select(_SID, counter.c.last_seq - _N + u.c.ord, u.c.data).select_from(counter)
        batch = insert(m).from_select(
            ["session_id", "seq", "message_data"], rows.join_from(counter, u, true())
        )
        self._append = select(counter.c.last_seq).add_cte(batch.cte("i"))
        self._mine = m.c.session_id == _SID
        newest = select(m.c.seq).where(self._mine).order_by(m.c.seq.desc()).limit(1)
        self._pop = (
            delete(m)
            .where(self._mine, m.c.seq == newest.with_for_update().scalar_subquery())
            .returning(m.c.message_data)
        )
        # first in a clear or a swap: locks the counter row, so it waits for a writer
        self._touch = update(s).where(s.c.session_id == _SID).values(updated_at=func.now())
        self._loads: dict[tuple[bool, bool, bool], Executable] = {}
        self._counts: dict[tuple[bool, bool], Executable] = {}

    def _bounded(self, stmt: Any, after: int | None, before: int | None) -> Any:
        stmt = stmt.where(self._mine)
        if after is not None:
            stmt = stmt.where(self.m.c.seq > _AFTER)
        if before is not None:
            stmt = stmt.where(self.m.c.seq < _BEFORE)
        return stmt

    async def prepare(self, conn: Any, create: bool) -> None:
        t = self.t
        _autocommit(conn)
        version = await self._version(conn, create)
        if version is None and create:
            conn.commit()
            _read_committed(conn)
            conn.execute(select(func.pg_advisory_xact_lock(t.lock_key())))
            for statement in create_statements(t):
                conn.exec_driver_sql(statement)
            conn.commit()
            version = await self._version(conn, False)
        check_version(t, version)
        conn.execute(select(self.s.c.session_id, self.s.c.last_seq).where(false()))
        conn.execute(select(self.m.c.seq, self.m.c.message_data).where(false()))

    async def _version(self, conn: Connection, missing_ok: bool) -> Any:
        schema = self.schema
        query = select(schema.c.version).where(schema.c.table_name == self.t.messages)
        try:
            return (conn.execute(query)).scalar()
        except Exception as exc:
            if missing_ok and self.missing_table(exc):
                conn.rollback()
                return None
            raise

    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        _autocommit(conn)
        args = {"sid": session_id, "n": len(payloads), "data": payloads}
        return int((conn.execute(self._append, args)).scalar_one())

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
            stmt = query.order_by(seq) if limit is None else query.order_by(seq.desc()).limit(
                _LIMIT
            )
            self._loads[key] = stmt
        _autocommit(conn)
        args = {"sid": session_id, "after": after, "before": before, "limit": limit}
        out: list[Row] = [(r[0], r[1]) for r in conn.execute(stmt, args)]
        if limit is not None:
            out.reverse()
        return out

    async def pop(self, conn: Any, session_id: str) -> str | None:
        _autocommit(conn)
        value = (conn.execute(self._pop, {"sid": session_id})).scalar()
        return None if value is None else str(value)

    async def pop_checked(
        self, conn: Any, session_id: str, check: Callable[[str], Any]
    ) -> Any:
        # The pop's row lock is held across the check: a concurrent pop waits for its outcome.
        _read_committed(conn)
        value = (conn.execute(self._pop, {"sid": session_id})).scalar()
        outcome = None if value is None else run_check(check, str(value))
        if isinstance(outcome, Refused):
            conn.rollback()
        else:
            conn.commit()
        return outcome

    async def clear(self, conn: Any, session_id: str) -> None:
        _read_committed(conn)
        conn.execute(self._touch, {"sid": session_id})
        conn.execute(delete(self.m).where(self._mine), {"sid": session_id})
        conn.commit()

    async def replace_rows(
        self,
        conn: Any,
        session_id: str,
        expected: list[Row] | None,
        payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        m, sid = self.m, {"sid": session_id}
        _read_committed(conn)
        conn.execute(self._touch, sid)
        if expected is not None:
            newest = select(m.c.seq, m.c.message_data).where(self._mine)
            newest = newest.order_by(m.c.seq.desc()).limit(len(expected))
            rows = [(r[0], r[1]) for r in conn.execute(newest, sid)]
            if rows[::-1] != list(expected):
                conn.rollback()
                return False
            first = expected[0][0]
            if prune is not None:
                older = select(m.c.seq, m.c.message_data).where(self._mine, m.c.seq < first)
                end = prunable_end(
                    [(r[0], r[1]) for r in conn.execute(older.order_by(m.c.seq), sid)],
                    prune,
                )
                if end is not None:
                    conn.execute(delete(m).where(self._mine, m.c.seq <= end), sid)
            conn.execute(delete(m).where(self._mine, m.c.seq >= first), sid)
        else:
            conn.execute(delete(m).where(self._mine), sid)
        if payloads:
            args = {"sid": session_id, "n": len(payloads), "data": payloads}
            conn.execute(self._append, args)
        conn.commit()
        return True

    async def delete_before(self, conn: Any, session_id: str, before: int) -> int:
        _autocommit(conn)
        stmt = delete(self.m).where(self._mine, self.m.c.seq < _BEFORE)
        return int((conn.execute(stmt, {"sid": session_id, "before": before})).rowcount)

    async def rewrite(self, conn: Any, session_id: str, rows: list[Row]) -> int:
        m = self.m
        v = func.unnest(
            bindparam("seqs", type_=ARRAY(BigInteger)), bindparam("data", type_=ARRAY(Text))
        ).table_valued("seq", "data").render_derived("v")
        stmt = (
            update(m).values(message_data=v.c.data).where(self._mine, m.c.seq == v.c.seq)
        )
        _autocommit(conn)
        args = {"sid": session_id, "seqs": [q for q, _ in rows], "data": [p for _, p in rows]}
        return int((conn.execute(stmt, args)).rowcount)

    async def write_at(
        self, conn: Any, session_id: str, rows: list[Row], created: float, updated: float
    ) -> int:
        s, m = self.s, self.m
        _read_committed(conn)
        # first: locks the counter row, so appends wait for this write
        times = {"created_at": func.to_timestamp(created), "updated_at": func.to_timestamp(updated)}
        mark = pg_insert(s).values(session_id=_SID, last_seq=rows[-1][0], **times)
        mark = mark.on_conflict_do_update(
            index_elements=[s.c.session_id],
            set_={
                "last_seq": func.greatest(s.c.last_seq, mark.excluded.last_seq),
                "created_at": mark.excluded.created_at,
                "updated_at": mark.excluded.updated_at,
            },
        )
        conn.execute(mark, {"sid": session_id})
        held = int(
            (conn.execute(select(func.count()).where(self._mine), {"sid": session_id}))
            .scalar_one()
        )
        if held:
            conn.rollback()
            return held
        u = func.unnest(
            bindparam("seqs", type_=ARRAY(BigInteger)), bindparam("data", type_=ARRAY(Text))
        ).table_valued("seq", "data").render_derived("u")
        fill = insert(m).from_select(
            ["session_id", "seq", "message_data"], select(_SID, u.c.seq, u.c.data)
        )
        args = {"sid": session_id, "seqs": [q for q, _ in rows], "data": [p for _, p in rows]}
        conn.execute(fill, args)
        conn.commit()
        return 0

    async def count(self, conn: Any, session_id: str, after: int | None, before: int | None) -> int:
        key = (after is not None, before is not None)
        stmt = self._counts.get(key)
        if stmt is None:
            stmt = self._counts[key] = self._bounded(
                select(func.count()).select_from(self.m), after, before
            )
        _autocommit(conn)
        args = {"sid": session_id, "after": after, "before": before}
        return int((conn.execute(stmt, args)).scalar_one())

    def unavailable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, _UNAVAILABLE)
            # asyncpg's "connection is closed": the server ended it (pg_terminate_backend,
            # restart) while it sat in the pool; "another operation is in progress": the
            # server's termination notice arrived before the socket closed
            or (isinstance(e, pg.InterfaceError) and "closed" in str(e))
            or isinstance(e, pg.InternalClientError)
            for e in causes(exc)
        )

    def missing_table(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, (pg.UndefinedTableError, pg.UndefinedColumnError)) for e in causes(exc)
        )
