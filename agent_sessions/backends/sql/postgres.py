"""PostgreSQL SQL for the SQLAlchemy backend, run on asyncpg connections.

Every operation but ``clear`` is one statement in autocommit mode, hence one round trip and
atomic by itself:

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

from ...core.base import Row
from .common import (
    SCHEMA_VERSION,
    Refused,
    SqlDialect,
    Tables,
    causes,
    check_version,
    delete_for_swap,
    range_clause,
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


def _unsent(exc: BaseException) -> bool:
    """Whether asyncpg refused to start the operation because its connection had already
    broken: the server's termination notice (pg_terminate_backend, a restart) arrived on the
    pooled connection before its socket closed. Nothing was sent, so the connection is
    dropped and the operation runs again on another."""
    return isinstance(exc, pg.InternalClientError) and (
        str(exc).startswith("cannot switch to state") or str(exc) == "not connected"
    )


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


class _Held(Exception):
    """Rolls back a ``write_at`` into a session that holds rows."""

    def __init__(self, held: int) -> None:
        self.held = held


class PostgresDialect(SqlDialect):
    """SQL for PostgreSQL (asyncpg)."""

    checkin_needs_greenlet = False  # asyncpg runs in autocommit; check-in does no I/O

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        s, m = tables.sessions, tables.messages
        self._append = (
            f"WITH c AS (INSERT INTO {s} AS s (session_id, last_seq) VALUES ($1, $2::bigint) "
            "ON CONFLICT (session_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq, "
            "updated_at = now() RETURNING last_seq), "
            f"i AS (INSERT INTO {m} (session_id, seq, message_data) "
            "SELECT $1, c.last_seq - $2::bigint + u.ord, u.data "
            "FROM c, unnest($3::text[]) WITH ORDINALITY AS u(data, ord)) "
            "SELECT last_seq FROM c"
        )
        self._pop = (
            f"DELETE FROM {m} WHERE session_id = $1 AND seq = (SELECT seq FROM {m} "
            "WHERE session_id = $1 ORDER BY seq DESC LIMIT 1 FOR UPDATE) RETURNING message_data"
        )
        self._clear = [
            # first: locks the counter row, so it waits for a writer in progress
            f"UPDATE {s} SET updated_at = now() WHERE session_id = $1",
            f"DELETE FROM {m} WHERE session_id = $1",
        ]
        self._delete_before = f"DELETE FROM {m} WHERE session_id = $1 AND seq < $2"
        self._loads: dict[tuple[bool, bool, bool], str] = {}
        self._counts: dict[tuple[bool, bool], str] = {}

    async def prepare(self, conn: Any, create: bool) -> None:
        t = self.t
        version = await self._version(conn, create)
        if version is None and create:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", t.lock_key())
                for statement in create_statements(t):
                    await conn.execute(statement)
            version = await self._version(conn, False)
        check_version(t, version)
        await conn.execute(f"SELECT session_id, last_seq FROM {t.sessions} WHERE false")
        await conn.execute(f"SELECT session_id, seq, message_data FROM {t.messages} WHERE false")

    async def _version(self, conn: Any, missing_ok: bool) -> Any:
        try:
            return await conn.fetchval(
                f"SELECT version FROM {self.t.schema} WHERE table_name = $1", self.t.messages
            )
        except pg.UndefinedTableError:
            if missing_ok:
                return None
            raise

    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        return int(await conn.fetchval(self._append, session_id, len(payloads), payloads))

    async def load(
        self,
        conn: Any,
        session_id: str,
        limit: int | None,
        after: int | None,
        before: int | None,
    ) -> list[Row]:
        key = (limit is None, after is not None, before is not None)
        sql = self._loads.get(key)
        if sql is None:
            bounds, _ = range_clause(after, before, lambda i: f"${i + 2}")
            sql = f"SELECT seq, message_data FROM {self.t.messages} WHERE session_id = $1{bounds}"
            n = 2 + key[1] + key[2]
            sql += " ORDER BY seq" if limit is None else f" ORDER BY seq DESC LIMIT ${n}"
            self._loads[key] = sql
        args: list[Any] = [session_id]
        args += [b for b in (after, before) if b is not None]
        if limit is not None:
            args.append(limit)
        rows = await conn.fetch(sql, *args)
        out = [(r[0], r[1]) for r in rows]
        if limit is not None:
            out.reverse()
        return out

    async def pop(self, conn: Any, session_id: str) -> str | None:
        value = await conn.fetchval(self._pop, session_id)
        return None if value is None else str(value)

    async def pop_checked(
        self, conn: Any, session_id: str, check: Callable[[str], Any]
    ) -> Any:
        # The pop's row lock is held across the check: a concurrent pop waits for its outcome.
        tx = conn.transaction(isolation="read_committed")
        await tx.start()
        try:
            value = await conn.fetchval(self._pop, session_id)
            outcome = None if value is None else run_check(check, str(value))
        except BaseException:
            await tx.rollback()
            raise
        await (tx.rollback() if isinstance(outcome, Refused) else tx.commit())
        return outcome

    async def clear(self, conn: Any, session_id: str) -> None:
        # READ COMMITTED: the second statement sees the rows of a writer the first waited for.
        async with conn.transaction(isolation="read_committed"):
            for statement in self._clear:
                await conn.execute(statement, session_id)

    async def replace_rows(
        self,
        conn: Any,
        session_id: str,
        expected: list[Row] | None,
        payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        async def fetch(sql: str, args: tuple[Any, ...]) -> list[Row]:
            return [(r[0], r[1]) for r in await conn.fetch(sql, *args)]

        async def execute(sql: str, args: tuple[Any, ...]) -> object:
            return await conn.execute(sql, *args)

        async with conn.transaction(isolation="read_committed"):
            await conn.execute(self._clear[0], session_id)  # locks the counter row
            if not await delete_for_swap(
                fetch, execute, self.t.messages, ("$1", "$2"), session_id, expected, prune
            ):
                return False
            if payloads:
                await conn.fetchval(self._append, session_id, len(payloads), payloads)
        return True

    async def delete_before(self, conn: Any, session_id: str, before: int) -> int:
        status = await conn.execute(self._delete_before, session_id, before)
        return int(str(status).rsplit(" ", 1)[-1])  # "DELETE <n>"

    async def rewrite(self, conn: Any, session_id: str, rows: list[Row]) -> int:
        status = await conn.execute(
            f"UPDATE {self.t.messages} AS m SET message_data = v.data "
            "FROM unnest($2::bigint[], $3::text[]) AS v(seq, data) "
            "WHERE m.session_id = $1 AND m.seq = v.seq",
            session_id,
            [seq for seq, _ in rows],
            [payload for _, payload in rows],
        )
        return int(str(status).rsplit(" ", 1)[-1])  # "UPDATE <n>"

    async def write_at(
        self, conn: Any, session_id: str, rows: list[Row], created: float, updated: float
    ) -> int:
        s, m = self.t.sessions, self.t.messages
        try:
            async with conn.transaction():
                # first: locks the counter row, so appends wait for this write
                await conn.execute(
                    f"INSERT INTO {s} AS s (session_id, last_seq, created_at, updated_at) "
                    "VALUES ($1, $2::bigint, to_timestamp($3), to_timestamp($4)) "
                    "ON CONFLICT (session_id) DO UPDATE SET "
                    "last_seq = GREATEST(s.last_seq, EXCLUDED.last_seq), "
                    "created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at",
                    session_id, rows[-1][0], created, updated,
                )
                held = int(await conn.fetchval(
                    f"SELECT COUNT(*) FROM {m} WHERE session_id = $1", session_id
                ))
                if held:
                    raise _Held(held)
                await conn.execute(
                    f"INSERT INTO {m} (session_id, seq, message_data) "
                    "SELECT $1, u.seq, u.data "
                    "FROM unnest($2::bigint[], $3::text[]) AS u(seq, data)",
                    session_id, [seq for seq, _ in rows], [payload for _, payload in rows],
                )
        except _Held as refused:
            return refused.held
        return 0

    async def count(self, conn: Any, session_id: str, after: int | None, before: int | None) -> int:
        key = (after is not None, before is not None)
        sql = self._counts.get(key)
        if sql is None:
            bounds, _ = range_clause(after, before, lambda i: f"${i + 2}")
            sql = f"SELECT count(*) FROM {self.t.messages} WHERE session_id = $1{bounds}"
            self._counts[key] = sql
        args = [b for b in (after, before) if b is not None]
        return int(await conn.fetchval(sql, session_id, *args))

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.is_closed())

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

    def retryable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, (pg.DeadlockDetectedError, pg.SerializationError)) or _unsent(e)
            for e in causes(exc)
        )

    def missing_table(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, (pg.UndefinedTableError, pg.UndefinedColumnError)) for e in causes(exc)
        )
