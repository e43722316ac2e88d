"""Catalogs of the SQL layouts: a sessions table (``session_id``, ``created_at``, ``updated_at``)
beside a messages table keyed by ``session_id``.

That shape is shared by this package's SQLite and SQLAlchemy schemas and by the Agents SDK's
``SQLiteSession`` and ``SQLAlchemySession`` tables, so one set of statements serves all four.
Prefixes are matched with ``substr`` (SQLite's ``LIKE`` ignores case), bounded below by the
prefix itself so the primary key index narrows the scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...catalog import CatalogQuery, SessionInfo, utc
from ...core.ids import SIBLING_MARK
from ...errors import BackendUnavailableError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..sqlite import SQLiteSession


def _like_escape(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def page_sql(
    sessions: str, messages: str, query: CatalogQuery, time_param: Any
) -> tuple[str, dict[str, Any]]:
    """The SELECT of one catalog page and its named parameters; ``time_param(dt)`` renders a
    time bound the way the database compares it."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": query.limit}
    if query.after is not None:
        where.append("s.session_id > :after")
        params["after"] = query.after
    if query.prefix:
        where.append("s.session_id >= :prefix AND substr(s.session_id, 1, :plen) = :prefix")
        params["prefix"], params["plen"] = query.prefix, len(query.prefix)
    if not query.internal:
        where.append("substr(s.session_id, 1, 1) <> :mark")
        params["mark"] = SIBLING_MARK
    if query.updated_after is not None:
        where.append("s.updated_at >= :updated_after")
        params["updated_after"] = time_param(query.updated_after)
    if query.updated_before is not None:
        where.append("s.updated_at < :updated_before")
        params["updated_before"] = time_param(query.updated_before)
    sql = (
        "SELECT s.session_id, s.created_at, s.updated_at, "
        f"(SELECT count(*) FROM {messages} m WHERE m.session_id = s.session_id) "
        f"FROM {sessions} s"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + " ORDER BY s.session_id LIMIT :limit", params


def family_sql(sessions: str, root: str) -> tuple[str, dict[str, Any]]:
    """The SELECT of candidate side-store ids of ``root`` (the caller checks each one)."""
    pattern = f"{SIBLING_MARK}%{SIBLING_MARK}{_like_escape(root)}"
    return (
        f"SELECT session_id FROM {sessions} WHERE session_id LIKE :pattern ESCAPE '!'",
        {"pattern": pattern},
    )


def _sqlite_time(when: datetime) -> str:
    # CURRENT_TIMESTAMP text; whole seconds, which the catalog's own check refines.
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _rows_to_infos(rows: Sequence[Sequence[Any]]) -> list[SessionInfo]:
    return [SessionInfo(str(r[0]), utc(r[1]), utc(r[2]), int(r[3] or 0)) for r in rows]


class SQLiteFileCatalog:
    """The catalog of a :class:`~agent_sessions.backends.sqlite.SQLiteSession`'s database,
    run on the session's own connection (so it sees a private ``:memory:`` database too)."""

    def __init__(self, session: SQLiteSession) -> None:
        self.session = session
        self.sessions = session.sessions_table
        self.messages = session.messages_table

    async def exists(self) -> bool:
        path = self.session.path
        if path == ":memory:":
            return True
        names = (self.sessions, self.messages)

        def probe() -> bool:
            if not os.path.isfile(path):
                return False
            uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True)
            try:
                found = conn.execute(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                    names,
                ).fetchone()[0]
            except sqlite3.DatabaseError:
                return False
            finally:
                conn.close()
            return bool(found == 2)

        return await asyncio.to_thread(probe)

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        sql, params = page_sql(self.sessions, self.messages, query, _sqlite_time)

        def run(raw: sqlite3.Connection) -> list[Any]:
            return raw.execute(sql, params).fetchall()

        return _rows_to_infos(await self.session._run(run))

    async def family_ids(self, session_id: str) -> list[str]:
        sql, params = family_sql(self.sessions, session_id)

        def run(raw: sqlite3.Connection) -> list[Any]:
            return raw.execute(sql, params).fetchall()

        return [str(r[0]) for r in await self.session._run(run)]

    async def delete(self, session_ids: Sequence[str]) -> int:
        ids = list(session_ids)
        marks = ", ".join("?" for _ in ids)
        statements = (
            f"DELETE FROM {self.messages} WHERE session_id IN ({marks})",
            f"DELETE FROM {self.sessions} WHERE session_id IN ({marks})",
        )

        def run(raw: sqlite3.Connection) -> int:
            raw.execute("BEGIN IMMEDIATE")
            try:
                raw.execute(statements[0], ids)
                existed = raw.execute(statements[1], ids).rowcount
            except BaseException:
                raw.execute("ROLLBACK")
                raise
            raw.execute("COMMIT")
            return int(existed)

        return await self.session._run(run) if ids else 0


class EngineCatalog:
    """The catalog of tables reached through a SQLAlchemy ``AsyncEngine`` (PostgreSQL,
    MariaDB/MySQL, SQLite): this package's layout or the Agents SDK's."""

    def __init__(
        self, engine: AsyncEngine, sessions: str, messages: str, *, naive_times: bool = False
    ) -> None:
        self.engine = engine
        self.sessions = sessions
        self.messages = messages
        self.naive_times = naive_times  # the SDK's TIMESTAMP columns hold no zone

    def _time(self, when: datetime) -> Any:
        name = self.engine.dialect.name
        if name == "sqlite":
            return _sqlite_time(when)
        if self.naive_times or name in ("mysql", "mariadb"):  # no zone stored; read as UTC
            return when.astimezone(timezone.utc).replace(tzinfo=None)
        return when

    @contextlib.asynccontextmanager
    async def _connect(self, begin: bool = False) -> AsyncIterator[Any]:
        """A connection, with connection failures reported as BackendUnavailableError."""
        from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

        url = self.engine.url.render_as_string(hide_password=True)
        try:
            opened = self.engine.begin() if begin else self.engine.connect()
            conn = await opened.__aenter__()
        except (OSError, OperationalError, InterfaceError, DBAPIError) as exc:
            reason = getattr(exc, "orig", None) or exc
            raise BackendUnavailableError(
                f"cannot connect to the database at {url}: {reason}; check that it runs, and "
                "the URL's host, port, database name, user and password"
            ) from exc
        try:
            yield conn
        except BaseException as exc:
            if not await opened.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await opened.__aexit__(None, None, None)

    async def exists(self) -> bool:
        from sqlalchemy import inspect

        url = self.engine.url
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            if not await asyncio.to_thread(os.path.isfile, url.database):
                return False  # connecting would create the file
        names = (self.sessions, self.messages)
        async with self._connect() as conn:
            return bool(
                await conn.run_sync(lambda c: all(inspect(c).has_table(n) for n in names))
            )

    async def _fetch(self, sql: str, params: dict[str, Any]) -> list[Any]:
        from sqlalchemy import text

        async with self._connect() as conn:
            result = await conn.execute(text(sql), params)
            return list(result.fetchall())

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        sql, params = page_sql(self.sessions, self.messages, query, self._time)
        return _rows_to_infos(await self._fetch(sql, params))

    async def family_ids(self, session_id: str) -> list[str]:
        sql, params = family_sql(self.sessions, session_id)
        return [str(r[0]) for r in await self._fetch(sql, params)]

    async def delete(self, session_ids: Sequence[str]) -> int:
        from sqlalchemy import bindparam, text

        ids = list(session_ids)
        if not ids:
            return 0
        async with self._connect(begin=True) as conn:
            for table in (self.messages, self.sessions):
                statement = text(f"DELETE FROM {table} WHERE session_id IN :ids").bindparams(
                    bindparam("ids", expanding=True)
                )
                result = await conn.execute(statement, {"ids": ids})
        return int(result.rowcount)
