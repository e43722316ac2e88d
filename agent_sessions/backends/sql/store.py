"""The SQL store: one set of tables behind one SQLAlchemy ``AsyncEngine``.

A :class:`SQLStore` owns the engine (SQLAlchemy's pool with a check-out check that costs no
round trip, the drivers' own timeouts), the tables' setup and version check, and the SQL of its
dialect; a session is a handle ``(store, session_id)``. Stores opened from one URL and options
are shared (one engine per event loop) and disposed when the last user releases them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar, TypeVar, cast

from ...core.extras import missing

try:
    from sqlalchemy import event
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import Engine, make_url
    from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
    from sqlalchemy.util import await_only, greenlet_spawn
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise missing("SQLAlchemySession", "sqlalchemy", _exc) from _exc

from ...core.mutation import finish
from ...errors import BackendDataError, BackendUnavailableError
from .common import SqlDialect, Tables, causes

T = TypeVar("T")

_DRIVERS = {
    ("postgresql", "asyncpg"),
    ("mysql", "asyncmy"),
    ("mysql", "aiomysql"),
    ("mariadb", "asyncmy"),
    ("mariadb", "aiomysql"),
    ("sqlite", "aiosqlite"),
}
_DRIVER_EXTRAS = {"asyncpg": "postgres", "asyncmy": "mysql", "aiomysql": "mysql"}
_AUTH_CODES = {1044, 1045, 1698}  # MySQL/MariaDB: access denied (to the server, to the db)
_UNKNOWN_DB_CODE = 1049


def check_engine(engine: Any) -> AsyncEngine:
    """Return ``engine`` if it is an ``AsyncEngine`` of a supported driver, else raise."""
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


def _make_dialect(engine: AsyncEngine, tables: Tables) -> SqlDialect:
    name = engine.dialect.name
    if name == "postgresql":
        from .postgres import PostgresDialect

        return PostgresDialect(tables)
    if name in ("mysql", "mariadb"):
        from .mysql import MySQLDialect

        return MySQLDialect(tables, mariadb=bool(getattr(engine.dialect, "is_mariadb", False)))
    from .sqlite import SqliteDialect

    return SqliteDialect(tables)


def engine_options(
    url: str,
    engine_kwargs: dict[str, Any] | None,
    connect_timeout: float,
    command_timeout: float | None,
) -> dict[str, Any]:
    """``create_async_engine`` arguments for a store opened from ``url``: the driver's own
    connect and command timeouts (the caller's ``engine_kwargs`` win)."""
    parsed = make_url(url)
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    defaults: dict[str, Any] = {}
    connect_args: dict[str, Any] = {}
    if backend == "postgresql":
        connect_args = {"timeout": connect_timeout, "command_timeout": command_timeout}
        # Autocommit: each one-statement operation is one round trip (else BEGIN, statement,
        # COMMIT); the others set their own level.
        defaults["isolation_level"] = "AUTOCOMMIT"
    elif backend in ("mysql", "mariadb"):
        connect_args = {
            "connect_timeout": connect_timeout,
            # Autocommit: a read or a pop is one round trip; writes open their own transaction.
            "autocommit": True,
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        }
        if driver == "asyncmy":
            connect_args["read_timeout"] = command_timeout
        if "charset" not in parsed.query:
            connect_args["charset"] = "utf8mb4"
    if backend in ("postgresql", "mysql", "mariadb"):
        # Every operation ends its own transaction (a failed one drops its connection), so
        # check-in needs no reset.
        defaults["pool_reset_on_return"] = None
    merged = {**defaults, **(engine_kwargs or {})}
    merged["connect_args"] = {**connect_args, **(engine_kwargs or {}).get("connect_args", {})}
    return merged


def _closed(driver_connection: Any) -> bool:
    """Whether the driver already knows its connection is closed (no I/O)."""
    is_closed = getattr(driver_connection, "is_closed", None)  # asyncpg
    if is_closed is not None:
        return bool(is_closed())
    if hasattr(driver_connection, "connected"):  # asyncmy
        return not driver_connection.connected
    return bool(getattr(driver_connection, "closed", False))  # aiomysql


def refused_to_send(exc: BaseException) -> bool:
    """Whether asyncpg refused to start a statement because its protocol was not idle: it
    had read the server's termination notice (the socket still open). Nothing was sent."""
    return any(
        type(e).__name__ == "InternalClientError"
        and type(e).__module__.startswith("asyncpg")
        and "cannot switch to state" in str(e)
        for e in causes(exc)
    )


class _Health:
    """SQLAlchemy's custom pessimistic disconnect handling for one engine, without a round
    trip: a connection is replaced at check-out when its driver knows it is closed, or when it
    was made before the server was last found gone (the others of that time are dead too)."""

    def __init__(self) -> None:
        self.lost_at = 0.0

    def connect(self, dbapi_connection: Any, record: Any) -> None:
        record.info["agent_sessions_born"] = time.monotonic()

    def checkout(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if _closed(dbapi_connection.driver_connection):
            raise sa_exc.DisconnectionError("the driver connection is closed")
        if self.lost_at and record.info.get("agent_sessions_born", 0.0) <= self.lost_at:
            raise sa_exc.DisconnectionError("made before the server was found gone")

    def handle_error(self, ctx: Any) -> None:
        if refused_to_send(ctx.original_exception):
            ctx.is_disconnect = True
        if ctx.is_disconnect:
            self.lost_at = time.monotonic()


_health: weakref.WeakKeyDictionary[Engine, _Health] = weakref.WeakKeyDictionary()


def health(engine: AsyncEngine) -> _Health:
    """The disconnect handling of ``engine``, installed on first use."""
    with SQLStore._lock:
        found = _health.get(engine.sync_engine)
        if found is None:
            found = _health[engine.sync_engine] = _Health()
            for name in ("connect", "checkout", "handle_error"):
                event.listen(engine.sync_engine, name, getattr(found, name))
        return found


def _create_engine(url: str, kwargs: dict[str, Any]) -> AsyncEngine:
    try:
        return check_engine(create_async_engine(url, **kwargs))
    except ImportError as exc:
        parsed = make_url(url)
        extra = _DRIVER_EXTRAS.get(parsed.get_driver_name(), "sqlalchemy")
        raise missing(f"the URL scheme {parsed.drivername}://", extra, exc) from exc


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


def _to_end(awaitable: Awaitable[T]) -> T:
    """The result of a coroutine that never suspends (it calls synchronous code only)."""
    coro = cast(Coroutine[Any, Any, T], awaitable)
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise RuntimeError("a dialect method on a Connection suspended")


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class SQLStore:
    """The tables ``tables`` in the database of one engine (the caller's, or one per event loop
    built from ``url``): their setup, their SQL, and the running of each operation.

    Use :func:`open_store` or :meth:`for_engine`; :meth:`session` opens a handle.
    """

    _registry: ClassVar[dict[tuple[str, str], SQLStore]] = {}
    _by_engine: ClassVar[weakref.WeakKeyDictionary[Engine, dict[Tables, SQLStore]]] = (
        weakref.WeakKeyDictionary()
    )
    _lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(
        self,
        tables: Tables,
        *,
        engine: AsyncEngine | None = None,
        url: str = "",
        engine_kwargs: dict[str, Any] | None = None,
        key: tuple[str, str] | None = None,
    ) -> None:
        self.tables = tables
        self.key = key
        self.users = 0
        self._url, self._kwargs = url, engine_kwargs or {}
        self._engines: dict[asyncio.AbstractEventLoop | None, AsyncEngine] = {}
        if engine is not None:
            self._engines[None] = engine
            health(engine)
        self.dialect = _make_dialect(self.engine, tables)
        # Engines whose tables were checked (each loop's engine, and with it an in-memory
        # database, starts empty), and the check in progress per engine.
        self._ready: weakref.WeakSet[Engine] = weakref.WeakSet()
        self._preparing: weakref.WeakKeyDictionary[Engine, asyncio.Future[None]] = (
            weakref.WeakKeyDictionary()
        )
        # SQLite: operations on one engine must not overlap (one shared connection).
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # -- opening and sharing --------------------------------------------------------------

    @classmethod
    def for_engine(cls, engine: AsyncEngine, tables: Tables) -> SQLStore:
        """The store of ``tables`` in the caller's ``engine`` (which the caller disposes)."""
        check_engine(engine)
        with cls._lock:
            by_tables = cls._by_engine.setdefault(engine.sync_engine, {})
            store = by_tables.get(tables)
            if store is None:
                store = by_tables[tables] = cls(tables, engine=engine)
            return store

    @classmethod
    def acquire(cls, url: str, engine_kwargs: dict[str, Any], tables: Tables) -> SQLStore:
        """The shared store of ``url``, these engine arguments and ``tables``, one user more."""
        key = (url, repr((sorted(engine_kwargs.items()), tables)))
        with cls._lock:
            store = cls._registry.get(key)
            if store is None:
                store = cls(tables, url=url, engine_kwargs=engine_kwargs, key=key)
                cls._registry[key] = store
            store.users += 1
            return store

    @property
    def owned(self) -> bool:
        """Whether this store built its engines (and disposes them when released)."""
        return self.key is not None

    @property
    def engine(self) -> AsyncEngine:
        """The engine of the running event loop (driver connections belong to one loop)."""
        loop = _loop()
        with self._lock:
            engines = self._engines
            engine = engines.get(loop) if self.owned else engines[None]
            if engine is None and loop is not None and None in engines:
                engine = engines[loop] = engines.pop(None)  # built before any loop ran
            if engine is None and loop is None and engines:
                engine = next(iter(engines.values()))
            if engine is None:
                engine = engines[loop] = _create_engine(self._url, self._kwargs)
                health(engine)
            return engine

    def share(self) -> SQLStore:
        """One user more (a side store opened from a session of this store)."""
        with self._lock:
            self.users += 1
        return self

    def release_share(self) -> bool:
        """Give up one use without I/O if others remain; False (nothing done) otherwise."""
        with self._lock:
            if not self.owned or self.users <= 1:
                return False
            self.users -= 1
            return True

    def forget(self) -> None:
        """Undo one ``acquire`` of a user that never ran (no connection exists)."""
        with self._lock:
            self.users -= 1
            if self.users <= 0 and self._registry.get(self.key) is self:  # type: ignore[arg-type]
                del self._registry[self.key]  # type: ignore[arg-type]

    async def release(self) -> None:
        """One user fewer; the last disposes the engines (a caller's engine stays open)."""
        with self._lock:
            self.users -= 1
            if not self.owned or self.users > 0:
                return
            if self._registry.get(self.key) is self:  # type: ignore[arg-type]
                del self._registry[self.key]  # type: ignore[arg-type]
            engines, self._engines = self._engines, {}
        running = _loop()
        for loop, engine in engines.items():
            # Connections of another (maybe closed) loop cannot be closed from this one.
            await engine.dispose(close=loop is running)

    def session(self, session_id: str, **options: Any) -> Any:
        """A session of this store (see :class:`SQLAlchemySession` for ``options``; tables are
        created if missing in a store opened from a URL, as ``from_url`` does)."""
        from .session import SQLAlchemySession

        options.setdefault("create_tables", self.owned)
        return SQLAlchemySession(
            session_id, engine=None, _store=self.share(), **options  # type: ignore[arg-type]
        )

    async def close(self) -> None:
        """Release the use :func:`open_store` took."""
        await self.release()

    def catalog(self) -> Any:
        """Return the catalog of these tables (see ``agent_sessions.catalog``)."""
        from .catalog import EngineCatalog

        return EngineCatalog(self.engine, self.tables.sessions, self.tables.messages)

    # -- running an operation -------------------------------------------------------------

    async def run(
        self, op: Callable[[SqlDialect, Any], Awaitable[T]], *, write: bool, create: bool
    ) -> T:
        """Run ``op(dialect, driver_connection)`` on a pooled connection; a write is awaited
        to its end even when the caller is cancelled (its outcome is then settled)."""
        if self.engine.sync_engine not in self._ready:
            await self._prepare(create)
        if not self.dialect.exclusive:
            return await self._attempt(op, write)
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        async with lock:
            return await self._attempt(op, write)

    async def _attempt(self, op: Callable[[SqlDialect, Any], Awaitable[T]], write: bool) -> T:
        try:
            return await self._once(op, write)
        except BackendUnavailableError as exc:
            # The one retry: asyncpg sent nothing on a connection the server had ended.
            if not refused_to_send(exc):
                raise
        return await self._once(op, write)

    async def _once(self, op: Callable[[SqlDialect, Any], Awaitable[T]], write: bool) -> T:
        engine = self.engine
        held: list[Any] = []  # the connection while an operation runs on it
        if write:
            # A write checks out before it becomes uncancellable (the connect timeout cancels).
            try:
                held.append(await greenlet_spawn(self._checkout, engine))
            except Exception as exc:
                raise self._translate(engine, exc, False) from exc
        # Check-out (a read's), statements and check-in in one greenlet.
        work: Awaitable[T] = greenlet_spawn(self._on_connection, engine, op, held)
        try:
            if not write:
                return await work
            # A write that was sent may still commit on the server after its connection is
            # dropped, so a cancelled caller waits for its outcome.
            result, cancelled = await finish(work)
        except BaseException as exc:
            if held and self.dialect.discard_on_error:
                self._drop(engine, held[0], exc)  # outside the greenlet: no I/O
            elif held:  # SQLite: a local rollback; the connection stays usable
                await greenlet_spawn(held[0].close)
            if isinstance(exc, Exception):
                raise self._translate(engine, exc, write and bool(held)) from exc
            raise
        if cancelled is not None:
            raise cancelled
        return result

    def _on_connection(
        self,
        engine: AsyncEngine,
        op: Callable[[SqlDialect, Any], Awaitable[T]],
        held: list[Any],
    ) -> T:
        """Run ``op`` on the connection in ``held`` (checked out if none) inside SQLAlchemy's
        greenlet: on its ``Connection``, or on the driver connection of a pooled one. On an
        error the connection stays in ``held``."""
        if not held:
            held.append(self._checkout(engine))
        if self.dialect.via_connection:
            result = _to_end(op(self.dialect, held[0]))
        else:
            result = await_only(op(self.dialect, held[0].driver_connection))
        held.pop().close()  # no server I/O: every operation ends its own transaction
        return result

    def _checkout(self, engine: AsyncEngine) -> Any:
        """A ``Connection`` of the pool, or a pooled raw connection (in the greenlet)."""
        sync = engine.sync_engine
        return sync.connect() if self.dialect.via_connection else sync.raw_connection()

    def _drop(self, engine: AsyncEngine, conn: Any, exc: BaseException) -> None:
        """Invalidate and return a connection an operation failed on (its state is unknown;
        no I/O), noting when the server was found gone."""
        if self.dialect.unavailable(exc):
            health(engine).lost_at = time.monotonic()
        conn.invalidate(exc)
        conn.close()

    def _translate(self, engine: AsyncEngine, exc: Exception, write: bool) -> Exception:
        url = engine.url.render_as_string(hide_password=True)
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
        if self.dialect.unavailable(exc):
            outcome = " (the write may or may not have taken effect)" if write else ""
            return BackendUnavailableError(
                f"the database at {url} is unreachable or did not answer in time: "
                f"{type(exc).__name__}: {exc}{outcome}; check that it runs and accepts "
                "connections"
            )
        if self.dialect.missing_table(exc):
            t = self.tables
            return BackendDataError(
                f"the tables {t.sessions}/{t.messages} are missing or not agent_sessions "
                f"tables ({exc}); create them with create_tables=True or the statements in "
                "docs/sqlalchemy.md, or pick another table_prefix"
            )
        if not isinstance(exc, sa_exc.DBAPIError) and any(
            "Integrity" in cls.__name__ for cls in type(exc).__mro__
        ):
            # The driver's constraint error, as SQLAlchemy (and the SDK's class) raises it.
            return sa_exc.IntegrityError(None, None, exc)
        return exc

    async def _prepare(self, create: bool) -> None:
        key = self.engine.sync_engine
        preparing = self._preparing.get(key)
        if (
            preparing is None
            or preparing.get_loop() is not asyncio.get_running_loop()
            or (preparing.done() and preparing.exception() is not None)
        ):
            preparing = self._preparing[key] = asyncio.ensure_future(self._prepare_now(create))
        await asyncio.shield(preparing)

    async def _prepare_now(self, create: bool) -> None:
        engine = self.engine

        async def prepare(d: SqlDialect, conn: Any) -> None:
            if hasattr(d, "mariadb"):  # known only once the first connection was made
                d.mariadb = bool(getattr(engine.dialect, "is_mariadb", False))
            await d.prepare(conn, create)

        await self._attempt(prepare, False)
        self._ready.add(engine.sync_engine)


def open_store(
    url: str,
    *,
    engine_kwargs: dict[str, Any] | None = None,
    connect_timeout: float = 10.0,
    command_timeout: float | None = 30.0,
    table_prefix: str = "agent_sessions_",
    sessions_table: str | None = None,
    messages_table: str | None = None,
) -> SQLStore:
    """Open the store at ``url`` (shared with sessions opened from the same URL and options);
    ``await store.close()`` when done. Arguments as in :meth:`SQLAlchemySession.from_url`."""
    tables = Tables.build(table_prefix, sessions_table, messages_table)
    kwargs = engine_options(str(url), engine_kwargs, connect_timeout, command_timeout)
    return SQLStore.acquire(str(url), kwargs, tables)


__all__ = ["SQLStore", "check_engine", "engine_options", "open_store"]
