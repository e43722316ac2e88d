"""The catalog of tables reached through a SQLAlchemy ``AsyncEngine`` (statements in
``core.sqltext``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ...core.catalog import CatalogQuery, SessionInfo, group_families
from ...core.sqltext import family_sql, page_sql, rows_to_infos, side_stores_sql, sqlite_time
from ...errors import BackendUnavailableError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


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
            return sqlite_time(when)
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
            return bool(await conn.run_sync(lambda c: all(inspect(c).has_table(n) for n in names)))

    async def _fetch(self, sql: str, params: dict[str, Any]) -> list[Any]:
        from sqlalchemy import text

        async with self._connect() as conn:
            result = await conn.execute(text(sql), params)
            return list(result.fetchall())

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        sql, params = page_sql(self.sessions, self.messages, query, self._time)
        return rows_to_infos(await self._fetch(sql, params))

    async def family_ids(self, session_id: str) -> list[str]:
        sql, params = family_sql(self.sessions, session_id)
        return [str(r[0]) for r in await self._fetch(sql, params)]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        rows = await self._fetch(*side_stores_sql(self.sessions))
        return group_families((str(r[0]) for r in rows), session_ids)

    async def delete(self, session_ids: Sequence[str]) -> int:
        from sqlalchemy import bindparam, text

        ids = list(session_ids)
        if not ids:
            return 0
        sqlite = self.engine.dialect.name == "sqlite"
        async with self._connect(begin=True) as conn:
            if sqlite:  # freed pages are zeroed, so no erased text stays in the file
                await conn.execute(text("PRAGMA secure_delete = ON"))
            for table in (self.messages, self.sessions):
                statement = text(f"DELETE FROM {table} WHERE session_id IN :ids").bindparams(
                    bindparam("ids", expanding=True)
                )
                result = await conn.execute(statement, {"ids": ids})
        if sqlite:  # the WAL holds the erased pages as they were: copy it back, empty it
            async with self._connect() as conn:
                await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        return int(result.rowcount)
