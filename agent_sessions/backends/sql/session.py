"""Sessions in PostgreSQL, MariaDB/MySQL or SQLite through a SQLAlchemy ``AsyncEngine``.

A session is a handle on a :class:`~.store.SQLStore`, which owns the engine and the tables.

Layout (schema version 1): ``{prefix}sessions`` holds one row per session with a counter,
``{prefix}messages`` one row per item keyed by ``(session_id, seq)``, ``{prefix}schema`` the
schema version. See docs/sqlalchemy.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agents.memory.session_settings import SessionSettings

from ...core.base import STORE_CAPABILITIES, BaseSession, Row, StoreOptions
from ...core.codec import DEFAULT_MAX_ITEM_BYTES
from ...core.options import explicit_options
from ...errors import SequenceConflictError
from .common import Refused, SqlDialect, Tables
from .store import SQLStore, open_store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine
    from typing_extensions import Unpack

T = TypeVar("T")


class SQLAlchemySession(BaseSession):
    """A session stored through a SQLAlchemy ``AsyncEngine`` (PostgreSQL, MariaDB, SQLite).

    Args:
        session_id: the conversation's id.
        engine: an ``AsyncEngine`` (``postgresql+asyncpg``, ``mysql+asyncmy``,
            ``mysql+aiomysql``, ``mariadb+...``, ``sqlite+aiosqlite``); the caller owns it.
        create_tables: create the tables if missing (idempotent, safe when several processes
            start at once). Otherwise they must exist (see docs/sqlalchemy.md).
        table_prefix: prefix of the table names ``{prefix}sessions``, ``{prefix}messages``
            and ``{prefix}schema``; letters, digits and underscores only.
        sessions_table, messages_table: override single table names (the SDK's arguments).
        ensure_ascii: the SDK's argument, accepted and kept as ``ensure_ascii``: items are
            stored as UTF-8 JSON either way (what reads return is the same).
        session_settings, max_item_bytes, strict: see :class:`BaseSession`.

    Raises:
        ValueError: a table name is not a plain identifier, or the engine's driver is not
            supported.
    """

    capabilities = STORE_CAPABILITIES

    def __init__(
        self,
        session_id: str,
        *,
        engine: AsyncEngine,
        create_tables: bool = False,
        table_prefix: str = "agent_sessions_",
        sessions_table: str | None = None,
        messages_table: str | None = None,
        ensure_ascii: bool = True,
        _store: SQLStore | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(session_id, **options)
        self.ensure_ascii = ensure_ascii
        self.table_prefix = table_prefix
        self._create_tables = bool(create_tables)
        if _store is None:
            tables = Tables.build(table_prefix, sessions_table, messages_table)
            _store = SQLStore.for_engine(engine, tables)
        self.store = _store
        self._tables = _store.tables
        # Every write's outcome is awaited to its end by the store (also when cancelled).
        self._single_dispatch_writes = True

    @classmethod
    @explicit_options
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        engine_kwargs: dict[str, Any] | None = None,
        create_tables: bool = True,
        connect_timeout: float = 10.0,
        command_timeout: float | None = 30.0,
        table_prefix: str = "agent_sessions_",
        sessions_table: str | None = None,
        messages_table: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        strict: bool = False,
        ensure_ascii: bool = True,
    ) -> SQLAlchemySession:
        """Open ``session_id`` in the database at ``url``.

        Sessions opened with the same URL and options share one store (one engine per event
        loop), disposed when the last of them closes.

        Args:
            url: a SQLAlchemy async URL, e.g. ``postgresql+asyncpg://user:pw@host/db``.
            engine_kwargs: extra arguments for ``create_async_engine`` (pool size, ...).
            create_tables: create the tables if missing (default True here).
            connect_timeout: seconds to wait for a new connection before failing with
                BackendUnavailableError.
            command_timeout: seconds an operation may wait for the server before failing with
                BackendUnavailableError (None: no limit); the driver's own timeout (asyncpg's
                ``command_timeout``, asyncmy's ``read_timeout``; aiomysql has none).
            table_prefix, sessions_table, messages_table: as in the constructor.
            session_settings, max_item_bytes, strict: as in the constructor.
        """
        store = open_store(
            url,
            engine_kwargs=engine_kwargs,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            table_prefix=table_prefix,
            sessions_table=sessions_table,
            messages_table=messages_table,
        )
        try:
            return cls(
                session_id,
                engine=None,  # type: ignore[arg-type]
                create_tables=create_tables,
                table_prefix=table_prefix,
                session_settings=session_settings,
                max_item_bytes=max_item_bytes,
                strict=strict,
                ensure_ascii=ensure_ascii,
                _store=store,
            )
        except BaseException:
            store.forget()
            raise

    @staticmethod
    def schema_statements(
        dialect: str,
        *,
        table_prefix: str = "agent_sessions_",
        sessions_table: str | None = None,
        messages_table: str | None = None,
    ) -> list[str]:
        """Return the SQL that ``create_tables=True`` runs, for migration tools or a DBA.

        ``dialect`` is ``"postgresql"``, ``"mariadb"``, ``"mysql"`` or ``"sqlite"``.
        """
        tables = Tables.build(table_prefix, sessions_table, messages_table)
        if dialect == "postgresql":
            from .postgres import create_statements

            return create_statements(tables)
        if dialect in ("mariadb", "mysql"):
            from .mysql import create_statements as mysql_statements

            return mysql_statements(tables, mariadb=dialect == "mariadb")
        if dialect == "sqlite":
            from .sqlite import create_statements as sqlite_statements

            return sqlite_statements(tables)
        raise ValueError(
            f"dialect must be 'postgresql', 'mariadb', 'mysql' or 'sqlite', got {dialect!r}"
        )

    # -- SDK-compatible attributes --------------------------------------------------------

    @property
    def engine(self) -> AsyncEngine:
        """The engine in use (for a URL-opened session: the one of the running loop)."""
        return self.store.engine

    @property
    def sessions_table(self) -> str:
        """Name of the sessions table."""
        return self._tables.sessions

    @property
    def messages_table(self) -> str:
        """Name of the items table."""
        return self._tables.messages

    def _member_options(self) -> dict[str, Any]:
        return {
            "engine": None,
            "create_tables": self._create_tables,
            "table_prefix": self.table_prefix,
            "_store": self.store.share() if self.store.owned else self.store,
        }

    async def _run(self, op: Callable[[SqlDialect, Any], Awaitable[T]], write: bool) -> T:
        return await self.store.run(op, write=write, create=self._create_tables)

    # -- BaseSession hooks ------------------------------------------------------------------

    async def _append(self, payloads: list[str]) -> list[int]:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> int:
            return await d.append(conn, sid, payloads)

        last = await self._run(op, write=True)
        return list(range(last - len(payloads) + 1, last + 1))

    async def _append_unnumbered(self, payloads: list[str]) -> None:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> None:
            await d.append_unnumbered(conn, sid, payloads)

        await self._run(op, write=True)

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> list[Row]:
            return await d.load(conn, sid, limit, after, before)

        return await self._run(op, write=False)

    async def _pop(self) -> str | None:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> str | None:
            return await d.pop(conn, sid)

        return await self._run(op, write=True)

    async def _pop_row_checked(self, check: Callable[[str], Any]) -> Any:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> Any:
            return await d.pop_checked(conn, sid, check)

        outcome = await self._run(op, write=True)
        if isinstance(outcome, Refused):
            raise outcome.error
        return outcome

    async def _replace_rows(
        self,
        expected: list[Row] | None,
        payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        """The SDK compaction hook's atomic swap (see ``core.sdk_compaction``)."""
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> bool:
            return await d.replace_rows(conn, sid, expected, payloads, prune)

        return await self._run(op, write=True)

    async def _clear(self) -> None:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> None:
            await d.clear(conn, sid)

        await self._run(op, write=True)

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> int:
            return await d.count(conn, sid, after, before)

        return await self._run(op, write=False)

    async def _delete_before(self, before: int) -> int:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> int:
            return await d.delete_before(conn, sid, before)

        return await self._run(op, write=True)

    async def _rewrite(self, rows: list[Row]) -> int:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> int:
            return await d.rewrite(conn, sid, rows)

        return await self._run(op, write=True)

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        sid = self.session_id

        async def op(d: SqlDialect, conn: Any) -> int:
            return await d.write_at(conn, sid, rows, created, updated)

        held = await self._run(op, write=True)
        if held:
            raise SequenceConflictError(
                f"session {sid!r} already holds {held} item(s); write_sequenced_items fills "
                "an empty session only. Nothing was written"
            )

    async def _close(self) -> None:
        if self.store.owned:
            await self.store.release()

    def _owns_resources(self) -> bool:
        return self.store.owned  # the caller's engine: close() is a no-op

    def _release_at_once(self) -> bool:
        if type(self)._close is not SQLAlchemySession._close:
            return False  # a subclass's own _close must run
        return self.store.release_share()

    def catalog_store(self) -> Any:
        """Return the catalog of these tables (see ``agent_sessions.catalog``)."""
        return self.store.catalog()


async def open_url(url: str, session_id: str, **options: Any) -> SQLAlchemySession:
    """``open_session`` entry for ``postgresql+asyncpg://``, ``mysql+asyncmy://``,
    ``mysql+aiomysql://``, ``mariadb+...://`` and ``sqlite+aiosqlite://`` URLs."""
    return SQLAlchemySession.from_url(session_id, url=url, **options)


__all__ = ["SQLAlchemySession", "open_url"]
