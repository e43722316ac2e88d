"""Sessions in PostgreSQL, MariaDB/MySQL or SQLite through a SQLAlchemy ``AsyncEngine``.

SQLAlchemy provides the engine (URL handling, connection pool, dialect detection); the SQL of
each operation is run directly on the pooled driver connection (``postgres``,
``mysql``, ``sqlite`` in this package), so an operation costs about what the raw driver costs.

Layout (schema version 1): ``{prefix}sessions`` holds one row per session with a counter,
``{prefix}messages`` one row per item keyed by ``(session_id, seq)``, ``{prefix}schema`` the
schema version. See docs/sqlalchemy.md.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from agents.memory.session_settings import SessionSettings

from ...core.extras import missing

try:
    from sqlalchemy import event
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import Engine, make_url
    from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
    from sqlalchemy.pool import PoolProxiedConnection, QueuePool
    from sqlalchemy.util import greenlet_spawn
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise missing("SQLAlchemySession", "sqlalchemy", _exc) from _exc

from ...core.base import STORE_CAPABILITIES, BaseSession, Row, StoreOptions, one_guarded
from ...core.capabilities import Capability
from ...core.codec import DEFAULT_MAX_ITEM_BYTES
from ...core.mutation import finish
from ...core.options import explicit_options
from ...errors import (
    BackendDataError,
    BackendUnavailableError,
    CommitConflictError,
    InvalidItemError,
    SequenceConflictError,
)
from .common import Refused, SqlDialect, Tables, TextFilters, causes, split_words

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ...core.textsearch import Between, Equal

T = TypeVar("T")

_DRIVERS = {
    ("postgresql", "asyncpg"),
    ("mysql", "asyncmy"),
    ("mysql", "aiomysql"),
    ("mariadb", "asyncmy"),
    ("mariadb", "aiomysql"),
    ("sqlite", "aiosqlite"),
}
_RETRIES = 5
_INT64_MAX = 2**63 - 1
_KEEP_IDLE = 4
_BORN = "agent_sessions_born"
"""Key in a pooled connection's ``info``: when it was connected (``time.monotonic()``)."""


def _stamp_birth(dbapi_connection: Any, record: Any) -> None:
    record.info[_BORN] = time.monotonic()


def _make_dialect(engine: AsyncEngine, tables: Tables) -> SqlDialect:
    name = engine.dialect.name
    if name == "postgresql":
        from .postgres import PostgresDialect

        return PostgresDialect(tables, engine.dialect)
    if name in ("mysql", "mariadb"):
        from .mysql import MySQLDialect

        return MySQLDialect(tables, engine.dialect)
    from .sqlite import SqliteDialect

    return SqliteDialect(tables, engine.dialect)


def _check_engine(engine: Any) -> AsyncEngine:
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"engine must be a sqlalchemy.ext.asyncio.AsyncEngine, got {type(engine).__name__}; "
            "create one with create_async_engine('postgresql+asyncpg://...')"
        )
    if (engine.dialect.name, engine.driver) not in _DRIVERS:
        raise ValueError(
            f"SQLAlchemySession supports postgresql+asyncpg, mysql/mariadb+asyncmy, "
            f"mysql/mariadb+aiomysql and sqlite+aiosqlite, not "
            f"{engine.dialect.name}+{engine.driver}"
        )
    return engine


class _Store:
    """One engine's view of one set of tables: its SQL, whether the tables were checked, and
    (for engines this module owns) a few idle connections kept out of the pool, which saves
    the pool's check-out and check-in on every operation."""

    def __init__(
        self,
        engine: AsyncEngine,
        tables: Tables,
        keep_idle: int,
        timeouts: tuple[float | None, float | None],
        reset_on_checkin: bool = True,
    ) -> None:
        self.engine = engine
        self.dialect = _make_dialect(engine, tables)
        # Whether the pool's check-in does I/O (a ROLLBACK): only engines this module built
        # with pool_reset_on_return=None are known not to.
        self.reset_on_checkin = reset_on_checkin
        # When the server was last found unreachable: connections made before are not reused
        # (after a restart or pg_terminate_backend each would fail one operation in turn).
        self.broken_at = 0.0
        self.ready = False
        self.preparing: asyncio.Future[None] | None = None
        # Whether the full-text index (tables, triggers) was found or made (search_text).
        self.text_ready = False
        self.lock = asyncio.Lock() if self.dialect.exclusive else None
        self.keep_idle = keep_idle
        self.idle: list[PoolProxiedConnection] = []
        # (command, connect) limits the session enforces where the driver does not.
        self.watchdog = timeouts[0] if self.dialect.watchdog else None
        self.connect_limit = timeouts[1] if self.dialect.watchdog else None

    async def checkin(self, fairy: PoolProxiedConnection) -> None:
        if len(self.idle) < self.keep_idle:
            self.idle.append(fairy)
            return
        pool = self.engine.sync_engine.pool
        if (
            not (self.dialect.checkin_needs_greenlet and self.reset_on_checkin)
            and isinstance(pool, QueuePool)
            and pool.checkedin() < pool.size()
        ):
            fairy.close()  # into the pool's queue, which has room: no I/O
        else:
            # A reset, or a pool that closes the connection (full, or one that keeps none):
            # the async driver's close awaits, which SQLAlchemy runs only inside a greenlet.
            await greenlet_spawn(fairy.close)

    def usable(self, fairy: PoolProxiedConnection) -> bool:
        """Whether ``fairy`` may carry an operation: not known closed, and made after the
        server was last found unreachable (no I/O)."""
        if self.broken_at and fairy.info.get(_BORN, 0.0) <= self.broken_at:
            return False
        return not self.dialect.is_closed(fairy.driver_connection)

    def server_lost(self) -> None:
        """The server went away: drop the idle connections and retire every older one."""
        self.broken_at = time.monotonic()
        idle, self.idle = self.idle, []
        for fairy in idle:
            _drop(fairy)

    async def release_idle(self) -> None:
        """Give the idle connections back to the pool."""
        self.keep_idle = 0
        idle, self.idle = self.idle, []
        for fairy in idle:
            await self.checkin(fairy)


def _settle(store: _Store, checkout: asyncio.Future[PoolProxiedConnection]) -> None:
    """Keep (idle) or drop the connection of a checkout its caller no longer waits for; no
    I/O, as a done callback."""
    if checkout.cancelled() or checkout.exception() is not None:
        return
    fairy = checkout.result()
    if len(store.idle) < store.keep_idle and store.usable(fairy):
        store.idle.append(fairy)
    else:
        _drop(fairy)


def _drop(fairy: PoolProxiedConnection, exc: BaseException | None = None) -> None:
    """Invalidate and return a connection (no I/O: the driver connection is terminated)."""
    try:
        fairy.invalidate(exc)
    finally:
        fairy.close()


_stores: weakref.WeakKeyDictionary[Engine, dict[Tables, _Store]] = weakref.WeakKeyDictionary()
_stores_lock = threading.Lock()


def _store_for(
    engine: AsyncEngine,
    tables: Tables,
    keep_idle: int = 0,
    timeouts: tuple[float | None, float | None] = (None, None),
    reset_on_checkin: bool = True,
) -> _Store:
    with _stores_lock:
        by_tables = _stores.get(engine.sync_engine)
        if by_tables is None:
            by_tables = _stores[engine.sync_engine] = {}
            if not event.contains(engine.sync_engine, "connect", _stamp_birth):
                event.listen(engine.sync_engine, "connect", _stamp_birth)
        store = by_tables.get(tables)
        if store is None:
            store = by_tables[tables] = _Store(
                engine, tables, keep_idle, timeouts, reset_on_checkin
            )
        return store


def _stores_of(engine: AsyncEngine) -> list[_Store]:
    with _stores_lock:
        return list(_stores.get(engine.sync_engine, {}).values())


def _default_engine_kwargs(
    url: str, connect_timeout: float, command_timeout: float | None
) -> dict[str, Any]:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return {"connect_args": {"timeout": connect_timeout, "command_timeout": command_timeout}}
    if backend in ("mysql", "mariadb"):
        connect_args: dict[str, Any] = {
            "connect_timeout": connect_timeout,
            # Autocommit: a read or a pop is one round trip; writes open their own transaction.
            "autocommit": True,
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        }
        if "charset" not in parsed.query:
            connect_args["charset"] = "utf8mb4"
        # Every operation ends its own transaction, so check-in needs no ROLLBACK round trip.
        return {"connect_args": connect_args, "pool_reset_on_return": None}
    return {}


def _engine_options(
    url: str, engine_kwargs: dict[str, Any] | None, timeouts: tuple[float | None, float | None]
) -> tuple[dict[str, Any], tuple[str, str]]:
    """``create_async_engine`` arguments for ``from_url`` and their registry key."""
    defaults = _default_engine_kwargs(url, timeouts[1], timeouts[0])  # type: ignore[arg-type]
    merged = {**defaults, **(engine_kwargs or {})}
    merged["connect_args"] = {
        **defaults.get("connect_args", {}),
        **(engine_kwargs or {}).get("connect_args", {}),
    }
    return merged, (url, repr((sorted(merged.items()), timeouts)))


@functools.lru_cache(maxsize=64)
def _url_options(
    url: str, timeouts: tuple[float | None, float | None]
) -> tuple[dict[str, Any], tuple[str, str]]:
    return _engine_options(url, None, timeouts)


_DRIVER_EXTRAS = {"asyncpg": "postgres", "asyncmy": "mysql", "aiomysql": "mysql"}


def _create_engine(url: str, kwargs: dict[str, Any]) -> AsyncEngine:
    try:
        return create_async_engine(url, **kwargs)
    except ImportError as exc:
        parsed = make_url(url)
        raise missing(
            f"the URL scheme {parsed.drivername}://",
            _DRIVER_EXTRAS.get(parsed.get_driver_name(), "sqlalchemy"),
            exc,
        ) from exc


class _SharedEngine:
    """The engines made from one URL and options, shared by every session opened with them.

    One engine per event loop (driver connections belong to the loop that opened them); all
    are disposed when the last session using them closes.
    """

    _registry: ClassVar[dict[tuple[str, str], _SharedEngine]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        key: tuple[str, str],
        url: str,
        kwargs: dict[str, Any],
        timeouts: tuple[float | None, float | None],
    ) -> None:
        self.key = key
        self.timeouts = timeouts
        self.url = url
        self.kwargs = kwargs
        self.reset_on_checkin = kwargs.get("pool_reset_on_return", "rollback") is not None
        self.users = 0
        self.engines: dict[asyncio.AbstractEventLoop | None, AsyncEngine] = {}

    @classmethod
    def acquire(
        cls,
        url: str,
        kwargs: dict[str, Any],
        timeouts: tuple[float | None, float | None],
        key: tuple[str, str],
    ) -> _SharedEngine:
        with cls._registry_lock:
            shared = cls._registry.get(key)
            if shared is None:
                shared = cls._registry[key] = cls(key, url, kwargs, timeouts)
            shared.users += 1
        if not shared.engines:
            try:
                shared.current()  # build now, so a bad URL or missing driver fails at once
            except BaseException:
                shared.forget()
                raise
        return shared

    def forget(self) -> None:
        """Undo one ``acquire`` of a session that was never built (no connection exists)."""
        with self._registry_lock:
            self.users -= 1
            if self.users <= 0 and self._registry.get(self.key) is self:
                del self._registry[self.key]

    def share(self) -> _SharedEngine:
        with self._registry_lock:
            self.users += 1
        return self

    def current(self) -> AsyncEngine:
        """The engine for the running event loop (the first one built when none runs)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._registry_lock:
            engine = self.engines.get(loop)
            if engine is None and loop is not None and None in self.engines:
                engine = self.engines[loop] = self.engines.pop(None)  # built before any loop
            if engine is None and loop is None and self.engines:
                engine = next(iter(self.engines.values()))
            if engine is None:
                engine = self.engines[loop] = _check_engine(_create_engine(self.url, self.kwargs))
            return engine

    def release_share(self) -> bool:
        """Give up one share without I/O if others remain; False (nothing done) otherwise."""
        with self._registry_lock:
            if self.users <= 1:
                return False
            self.users -= 1
            return True

    async def release(self) -> None:
        with self._registry_lock:
            self.users -= 1
            if self.users > 0:
                return
            if self._registry.get(self.key) is self:
                del self._registry[self.key]
            engines, self.engines = self.engines, {}
        running = asyncio.get_running_loop()
        for loop, engine in engines.items():
            # Connections of another (maybe closed) loop cannot be closed from this one.
            if loop is running:
                for store in _stores_of(engine):
                    await store.release_idle()
            await engine.dispose(close=loop is running)


_AUTH_CODES = {1044, 1045, 1698}  # MySQL/MariaDB: access denied (to the server, to the db)
_UNKNOWN_DB_CODE = 1049


def _refusal(exc: BaseException) -> str | None:
    """Say why the server refused a connection (credentials, unknown database), else None."""
    for cause in causes(exc):
        sqlstate = getattr(cause, "sqlstate", None)  # asyncpg's errors carry the SQLSTATE
        if sqlstate in ("28000", "28P01"):
            return "wrong user or password"
        if sqlstate == "3D000":
            return "the database does not exist"
        args = getattr(cause, "args", ())
        if type(cause).__module__.startswith(("asyncmy", "pymysql", "aiomysql")) and args:
            if args[0] in _AUTH_CODES:
                return "wrong user or password, or no access to the database"
            if args[0] == _UNKNOWN_DB_CODE:
                return "the database does not exist"
    return None


def _abort(dialect: SqlDialect, conn: Any, fired: list[bool]) -> None:
    fired.append(True)
    dialect.abort(conn)


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

    capabilities = STORE_CAPABILITIES | {Capability.TEXT_SEARCH}

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
        _shared: _SharedEngine | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(session_id, **options)
        self.ensure_ascii = ensure_ascii
        self._tables = Tables.build(table_prefix, sessions_table, messages_table)
        self.table_prefix = table_prefix
        self._create_tables = bool(create_tables)
        self._shared = _shared
        self._engine = None if _shared is not None else _check_engine(engine)
        # Every write's outcome is awaited to its end inside _attempt (also when cancelled).
        self._single_dispatch_writes = True
        self._cached: tuple[asyncio.AbstractEventLoop, _Store] | None = None

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

        Sessions opened with the same URL and options share one engine (per event loop),
        disposed when the last of them closes.

        Args:
            url: a SQLAlchemy async URL, e.g. ``postgresql+asyncpg://user:pw@host/db``.
            engine_kwargs: extra arguments for ``create_async_engine`` (pool size, ...).
            create_tables: create the tables if missing (default True here).
            connect_timeout: seconds to wait for a new connection before failing with
                BackendUnavailableError.
            command_timeout: seconds an operation may wait for the server before its
                connection is given up with BackendUnavailableError (None: no limit).
            table_prefix, sessions_table, messages_table: as in the constructor.
            session_settings, max_item_bytes, strict: as in the constructor.
        """
        if not isinstance(url, str):
            url = str(url)
        timeouts = (command_timeout, connect_timeout)
        if engine_kwargs is None and all(isinstance(t, (int, float, type(None))) for t in timeouts):
            # A session object per request: the URL is parsed once per URL and timeouts.
            merged, key = _url_options(url, timeouts)
        else:
            merged, key = _engine_options(url, engine_kwargs, timeouts)
        shared = _SharedEngine.acquire(url, merged, timeouts, key)
        try:
            return cls(
                session_id,
                engine=None,  # type: ignore[arg-type]
                create_tables=create_tables,
                table_prefix=table_prefix,
                sessions_table=sessions_table,
                messages_table=messages_table,
                session_settings=session_settings,
                max_item_bytes=max_item_bytes,
                strict=strict,
                ensure_ascii=ensure_ascii,
                _shared=shared,
            )
        except BaseException:
            shared.forget()
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
        if self._shared is not None:
            return self._shared.current()
        assert self._engine is not None
        return self._engine

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
            "engine": self._engine,
            "create_tables": self._create_tables,
            "table_prefix": self.table_prefix,
            "sessions_table": self._tables.sessions,
            "messages_table": self._tables.messages,
            "_shared": self._shared.share() if self._shared is not None else None,
        }

    # -- running an operation -------------------------------------------------------------

    async def _run(self, op: Callable[[SqlDialect, Any], Awaitable[T]], write: bool) -> T:
        loop = asyncio.get_running_loop()
        cached = self._cached
        if cached is not None and cached[0] is loop:
            store = cached[1]
        else:
            if self._shared is not None:
                store = _store_for(
                    self.engine,
                    self._tables,
                    _KEEP_IDLE,
                    self._shared.timeouts,
                    self._shared.reset_on_checkin,
                )
            else:
                store = _store_for(self.engine, self._tables)
            self._cached = (loop, store)
        if not store.ready:
            await self._prepare(store)
        if store.lock is None:
            return await self._attempt(store, op, write)
        async with store.lock:
            return await self._attempt(store, op, write)

    async def _attempt(
        self, store: _Store, op: Callable[[SqlDialect, Any], Awaitable[T]], write: bool
    ) -> T:
        for attempt in range(_RETRIES):
            fairy = await self._usable_connection(store)
            conn = fairy.driver_connection
            fired: list[bool] = []
            watchdog = None
            if store.watchdog is not None:
                watchdog = asyncio.get_running_loop().call_later(
                    store.watchdog, _abort, store.dialect, conn, fired
                )
            cancelled: asyncio.CancelledError | None = None
            try:
                if write:
                    # A write that was sent may still commit on the server after its connection
                    # is dropped (an autocommit statement, or one queued behind a lock), so a
                    # cancelled caller waits for its outcome: when CancelledError arrives, the
                    # write either happened or never will.
                    result, cancelled = await finish(op(store.dialect, conn))
                else:
                    result = await op(store.dialect, conn)
            except BaseException as exc:
                self._discard(store, fairy, exc)
                if isinstance(exc, Exception):
                    if fired:
                        raise BackendUnavailableError(
                            f"the database at {self._url(store)} did not answer within "
                            f"{store.watchdog} s (command_timeout); the operation was abandoned"
                            + ("; the write may or may not have taken effect" if write else "")
                        ) from exc
                    if store.dialect.retryable(exc) and attempt < _RETRIES - 1:
                        await asyncio.sleep(random.uniform(0.001, 0.02) * (attempt + 1))
                        continue
                    raise self._translate(store, exc, write) from exc
                raise
            finally:
                if watchdog is not None:
                    watchdog.cancel()
            if cancelled is not None:
                # The write is done; keep the connection without awaiting anything more.
                if len(store.idle) < store.keep_idle or not store.dialect.discard_on_error:
                    store.idle.append(fairy)
                else:
                    _drop(fairy)
                raise cancelled
            await store.checkin(fairy)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def _usable_connection(self, store: _Store) -> PoolProxiedConnection:
        """An idle or pooled connection that is not known to be dead (dead ones are dropped
        without I/O, so a server restart costs at most the one operation that noticed it)."""
        for _ in range(256):
            fairy = store.idle.pop() if store.idle else await self._checkout(store)
            if store.usable(fairy):
                return fairy
            _drop(fairy)
        raise BackendUnavailableError(  # pragma: no cover - a pool of 256 dead connections
            f"every pooled connection to {self._url(store)} is closed; check the server"
        )

    async def _checkout(self, store: _Store) -> PoolProxiedConnection:
        if store.connect_limit is None:
            try:
                return await store.engine.raw_connection()
            except Exception as exc:
                raise self._translate(store, exc, False) from exc
        # The MySQL drivers' connect_timeout does not cover the server's handshake, so the
        # checkout runs as a task of its own; a caller cancelled meanwhile leaves it to finish
        # and settle (wait_for would cancel it mid-checkout or drop the connection it just
        # got: "non-checked-in connection" warnings; tests/test_sql_faults.py::
        # test_a_checkout_abandoned_by_its_caller_leaves_no_connection_out).
        checkout = asyncio.ensure_future(store.engine.raw_connection())
        try:
            done, _ = await asyncio.wait({checkout}, timeout=store.connect_limit)
        except BaseException:
            checkout.add_done_callback(functools.partial(_settle, store))
            raise
        if not done:
            checkout.cancel()
            checkout.add_done_callback(functools.partial(_settle, store))
        failed = checkout.exception() if done else asyncio.TimeoutError()
        if failed is None:
            return checkout.result()
        if not isinstance(failed, Exception):
            raise failed
        raise self._translate(store, failed, False) from failed

    @staticmethod
    def _discard(store: _Store, fairy: PoolProxiedConnection, exc: BaseException) -> None:
        """Drop a connection an operation failed on (its state is unknown); no I/O, so this
        also runs safely during cancellation. On a lost server, drop the idle ones too."""
        if not store.dialect.discard_on_error:
            store.idle.append(fairy)  # its operations end their transactions themselves
            return
        if isinstance(exc, Exception) and store.dialect.unavailable(exc):
            store.server_lost()
        _drop(fairy, exc)

    @staticmethod
    def _url(store: _Store) -> str:
        return store.engine.url.render_as_string(hide_password=True)

    def _translate(self, store: _Store, exc: Exception, write: bool) -> Exception:
        url = self._url(store)
        refused = _refusal(exc)
        if refused is not None:
            return BackendUnavailableError(
                f"the database at {url} refused the connection: {refused} ({exc}); check the "
                "user, password and database name in the URL"
            )
        if isinstance(exc, sa_exc.TimeoutError):
            return BackendUnavailableError(
                f"no connection to {url} became free in time ({exc}); raise the pool size "
                "(engine_kwargs={'pool_size': ...}) or lower concurrency"
            )
        if store.dialect.unavailable(exc):
            outcome = " (the write may or may not have taken effect)" if write else ""
            return BackendUnavailableError(
                f"the database at {url} is unreachable: {type(exc).__name__}: {exc}{outcome}; "
                "check that it runs and accepts connections"
            )
        if store.dialect.missing_table(exc):
            return BackendDataError(
                f"the tables {self._tables.sessions}/{self._tables.messages} are missing or "
                f"not agent_sessions tables ({exc}); create them with create_tables=True or the "
                "statements in docs/sqlalchemy.md, or pick another table_prefix"
            )
        if getattr(exc, "sqlstate", None) == "54000":  # e.g. a tsvector over PostgreSQL's 1 MB
            return InvalidItemError(
                f"the database at {url} refused a value over one of its limits ({exc}); "
                "the statement took no effect"
            )
        if not isinstance(exc, sa_exc.DBAPIError) and any(
            "Integrity" in cls.__name__ for cls in type(exc).__mro__
        ):
            # The driver's constraint error, as SQLAlchemy (and the SDK's class) raises it.
            return sa_exc.IntegrityError(None, None, exc)
        return exc

    async def _prepare(self, store: _Store) -> None:
        if store.preparing is None or (
            store.preparing.done() and store.preparing.exception() is not None
        ):
            store.preparing = asyncio.ensure_future(self._prepare_now(store))
        await asyncio.shield(store.preparing)

    async def _prepare_now(self, store: _Store) -> None:
        fairy = await self._usable_connection(store)
        dialect = store.dialect
        if hasattr(dialect, "mariadb"):  # known only once the first connection was made
            dialect.mariadb = bool(getattr(store.engine.dialect, "is_mariadb", False))
        try:
            await dialect.prepare(fairy.driver_connection, self._create_tables)
        except BaseException as exc:
            self._discard(store, fairy, exc)
            if isinstance(exc, Exception):
                raise self._translate(store, exc, False) from exc
            raise
        await store.checkin(fairy)
        store.ready = True

    # -- BaseSession hooks ------------------------------------------------------------------

    async def _append(self, payloads: list[str]) -> list[int]:
        last = await self._run(
            lambda d, conn: d.append(conn, self.session_id, payloads), write=True
        )
        return list(range(last - len(payloads) + 1, last + 1))

    def _same_store(self, other: object) -> bool:
        """Whether ``other`` is a session of this engine and these tables."""
        return (
            isinstance(other, SQLAlchemySession)
            and other.engine is self.engine
            and (other.sessions_table, other.messages_table)
            == (self.sessions_table, self.messages_table)
        )

    async def _commit(
        self,
        ops: list[tuple[str, BaseSession, list[str]]],
        expect: list[tuple[BaseSession, int | None]],
    ) -> list[Any] | None:
        # One transaction per shape the dialects write with a guard (one op, one guard).
        shape = one_guarded(self, ops, expect, self._same_store)
        if shape is None:
            return None
        kind, _, payloads, guard, seq, own = shape
        if guard is None:
            return [await (self._append(payloads) if kind == "append" else self._pop())]
        sid, gid = self.session_id, guard.session_id
        if kind == "append":
            last = await self._run(
                lambda d, conn: d.append_if_newest(conn, sid, payloads, gid, seq), write=True
            )
            if last is None:
                raise CommitConflictError(f"session {gid!r} moved past {seq}; nothing written")
            return [list(range(last - len(payloads) + 1, last + 1))]
        done, payload = await self._run(
            lambda d, conn: d.pop_if_newest(conn, sid, gid, seq, own), write=True
        )
        if not done:
            raise CommitConflictError(f"session {gid!r} moved past {seq}; nothing popped")
        return [payload]

    async def _append_unnumbered(self, payloads: list[str]) -> None:
        await self._run(
            lambda d, conn: d.append_unnumbered(conn, self.session_id, payloads), write=True
        )

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        return await self._run(
            lambda d, conn: d.load(conn, self.session_id, limit, after, before), write=False
        )

    async def _pop(self) -> str | None:
        return await self._run(lambda d, conn: d.pop(conn, self.session_id), write=True)

    async def _pop_row_checked(self, check: Callable[[str], Any]) -> Any:
        outcome = await self._run(
            lambda d, conn: d.pop_checked(conn, self.session_id, check), write=True
        )
        if isinstance(outcome, Refused):
            raise outcome.error
        return outcome

    async def _replace_rows(
        self, expected: list[Row] | None, payloads: list[str], prune: Callable[[str], bool] | None
    ) -> bool:
        """The SDK compaction hook's atomic swap (see ``core.sdk_compaction``)."""
        return await self._run(
            lambda d, conn: d.replace_rows(conn, self.session_id, expected, payloads, prune),
            write=True,
        )

    async def _clear(self) -> None:
        await self._run(lambda d, conn: d.clear(conn, self.session_id), write=True)

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        return await self._run(
            lambda d, conn: d.count(conn, self.session_id, after, before), write=False
        )

    async def _delete_before(self, before: int) -> int:
        return await self._run(
            lambda d, conn: d.delete_before(conn, self.session_id, before), write=True
        )

    async def _rewrite(self, rows: list[Row]) -> int:
        return await self._run(lambda d, conn: d.rewrite(conn, self.session_id, rows), write=True)

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        held = await self._run(
            lambda d, conn: d.write_at(conn, self.session_id, rows, created, updated), write=True
        )
        if held:
            raise SequenceConflictError(
                f"session {self.session_id!r} already holds {held} item(s); "
                "write_sequenced_items fills an empty session only. Nothing was written"
            )

    async def _search_text(
        self, words: list[str], limit: int, equal: Equal, between: Between
    ) -> list[tuple[int, str, float]]:
        """TEXT_SEARCH with the database's own full-text index (PostgreSQL ``tsvector`` + GIN
        ranked by ``ts_rank``, MariaDB/MySQL ``FULLTEXT`` in natural language mode, SQLite
        FTS5 and ``bm25``). The index is made on the first search of a table set, and a
        session's items are indexed on its first search; from then on triggers keep it in
        step with every write, in the writing transaction. See docs/sqlalchemy.md."""
        filters = TextFilters.of(equal, between)
        terms = split_words(words)
        if not terms or filters.impossible():
            return []
        limit = min(limit, _INT64_MAX)
        sid = self.session_id
        create = self._create_tables

        async def search(d: SqlDialect, conn: Any) -> list[tuple[int, str, float]] | None:
            store = self._cached[1] if self._cached is not None else None
            if store is not None and not store.text_ready:
                await d.prepare_text(conn, create)
                store.text_ready = True
            try:
                return await d.search_text(conn, sid, terms, limit, filters)
            except Exception as exc:
                if not d.missing_table(exc):
                    raise
            # The index was dropped meanwhile (drop_text_index in another process): made again.
            await d.prepare_text(conn, create)
            return await d.search_text(conn, sid, terms, limit, filters)

        found = await self._run(search, write=False)
        if found is None:
            step = await self._index_step(None)
            while step is not None:  # short transactions: no writer waits for the whole
                step = await self._index_step(step)
            found = await self._run(search, write=False) or []
        return found

    async def _index_step(self, after: int | None) -> int | None:
        return await self._run(
            lambda d, conn: d.index_session(conn, self.session_id, after), write=True
        )

    async def drop_text_index(self) -> None:
        """Remove the full-text index of these tables, for every session (its triggers,
        function, tables); the next ``search_text`` creates it again and indexes that
        session."""
        self._check_open()

        async def drop(d: SqlDialect, conn: Any) -> None:
            store = self._cached[1] if self._cached is not None else None
            await d.drop_text(conn)
            if store is not None:
                store.text_ready = False

        await self._run(drop, write=True)

    async def _close(self) -> None:
        if self._shared is not None:
            await self._shared.release()

    def _owns_resources(self) -> bool:
        return self._shared is not None  # the caller's engine: close() is a no-op

    def _release_at_once(self) -> bool:
        if self._shared is None or type(self)._close is not SQLAlchemySession._close:
            return False  # a subclass's own _close must run
        return self._shared.release_share()

    def catalog_store(self) -> Any:
        """Return the catalog of these tables (see ``agent_sessions.catalog``)."""
        from .catalog import EngineCatalog

        return EngineCatalog(self.engine, self._tables.sessions, self._tables.messages)


_SESSION_OPTIONS = frozenset({"session_settings", "max_item_bytes", "strict"})


class SQLStore:
    """The store of one database URL and options: the engine (one per event loop) that its
    handles and every ``from_url`` session of the same URL and options share, and the
    tables' catalog. It holds a share of the engine until ``await store.close()``."""

    def __init__(self, url: str, **options: Any) -> None:
        wrong = _SESSION_OPTIONS & options.keys()
        if wrong:
            raise TypeError(f"{sorted(wrong)} are per-session options: pass them to session()")
        self.url = url
        self._options = options
        # A handle that never does I/O holds the store's share of the engine and tables.
        self._anchor = SQLAlchemySession.from_url("store", url=url, **options)

    def session(self, session_id: str, **options: Any) -> SQLAlchemySession:
        """A session handle on this store (``options``: session_settings, max_item_bytes,
        strict)."""
        return SQLAlchemySession.from_url(session_id, url=self.url, **self._options, **options)

    def catalog(self) -> Any:
        """The catalog of this store's tables (see ``agent_sessions.ops.catalog``)."""
        return self._anchor.catalog_store()

    async def close(self) -> None:
        """Give back this store's share of the engine (disposed when no handle holds one)."""
        await self._anchor.close()


async def open_store(url: str, **options: Any) -> SQLStore:
    """``open_store`` entry for the URLs of :func:`open_url`; ``options`` are ``from_url``'s
    except the per-session ones."""
    return SQLStore(url, **options)


async def open_url(url: str, session_id: str, **options: Any) -> SQLAlchemySession:
    """``open_session`` entry for ``postgresql+asyncpg://``, ``mysql+asyncmy://``,
    ``mysql+aiomysql://``, ``mariadb+...://`` and ``sqlite+aiosqlite://`` URLs."""
    return SQLAlchemySession.from_url(session_id, url=url, **options)


__all__ = ["SQLAlchemySession", "SQLStore", "open_store", "open_url"]
