"""Embedded backend on SQLite through aiosqlite: the default store.

All sessions of one database file in a process share one aiosqlite connection (one worker
thread). Each operation is a single function run on that thread, so a write is one hand-off that
a cancelled caller cannot interrupt halfway, and costs one thread hop rather than one per
statement. Writes take the database's write lock up front (``BEGIN IMMEDIATE``) and wait up to
``busy_timeout`` for other processes, so several processes can share a file.

The schema is the Agents SDK's (``agent_sessions`` / ``agent_messages``), so a database written
by the SDK's ``SQLiteSession`` opens here and vice versa.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, TypeVar

import aiosqlite
from agents.memory import SessionSettings

from ..core.base import BaseSession, Row, check_before
from ..core.codec import DEFAULT_MAX_ITEM_BYTES
from ..core.options import explicit_options
from ..errors import BackendUnavailableError, SessionClosedError

T = TypeVar("T")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def check_identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise ValueError."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(
            f"{what} must be a plain identifier (letters, digits, underscore; at most 63 "
            f"characters, not starting with a digit), got {name!r}"
        )
    return name


class _Schema:
    """SQL text for one pair of tables, built once."""

    def __init__(self, sessions: str, messages: str) -> None:
        s, m = check_identifier(sessions, "sessions_table"), check_identifier(
            messages, "messages_table"
        )
        self.key = (s, m)
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {s} (session_id TEXT PRIMARY KEY, "
            "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
            "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
            f"CREATE TABLE IF NOT EXISTS {m} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "session_id TEXT NOT NULL, message_data TEXT NOT NULL, "
            "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
            f"FOREIGN KEY (session_id) REFERENCES {s} (session_id) ON DELETE CASCADE)",
            f"CREATE INDEX IF NOT EXISTS idx_{m}_session_id ON {m} (session_id, id)",
        ]
        self.touch = (
            f"INSERT INTO {s} (session_id) VALUES (?) ON CONFLICT(session_id) "
            "DO UPDATE SET updated_at = CURRENT_TIMESTAMP"
        )
        self.insert = f"INSERT INTO {m} (session_id, message_data) VALUES (?, ?)"
        self.select = f"SELECT id, message_data FROM {m} WHERE session_id = ?"
        self.count = f"SELECT COUNT(*) FROM {m} WHERE session_id = ?"
        self.pop = (
            f"DELETE FROM {m} WHERE id = (SELECT id FROM {m} WHERE session_id = ? "
            "ORDER BY id DESC LIMIT 1) RETURNING message_data"
        )
        self.clear = [
            f"DELETE FROM {m} WHERE session_id = ?",
            f"DELETE FROM {s} WHERE session_id = ?",
        ]


def _range_sql(base: str, after: int | None, before: int | None) -> tuple[str, list[Any]]:
    sql, params = base, []
    if after is not None:
        sql += " AND id > ?"
        params.append(after)
    if before is not None:
        sql += " AND id < ?"
        params.append(before)
    return sql, params


class _Database:
    """One aiosqlite connection to one file, shared by every session of that file."""

    _registry: ClassVar[dict[str, _Database]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, key: str, path: str, busy_timeout: float, synchronous: str) -> None:
        self.key = key
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.users = 0
        self.conn: aiosqlite.Connection | None = None
        self._opening: asyncio.Future[aiosqlite.Connection] | None = None
        self._schemas: set[tuple[str, str]] = set()
        self.closed = False
        self.pid = os.getpid()

    @classmethod
    def acquire(cls, path: str, busy_timeout: float, synchronous: str) -> _Database:
        if path == ":memory:":
            db = cls(f":memory:{id(object())}", path, busy_timeout, synchronous)
            db.users = 1
            return db
        key = os.path.realpath(os.path.expanduser(path))
        with cls._registry_lock:
            found = cls._registry.get(key)
            db = found if found is not None and not found.closed else cls(
                key, key, busy_timeout, synchronous
            )
            cls._registry[key] = db
            db.users += 1
            return db

    def share(self) -> _Database:
        with self._registry_lock:
            if self.closed:
                raise SessionClosedError("the SQLite connection is closed")
            self.users += 1
        return self

    async def release(self) -> None:
        with self._registry_lock:
            self.users -= 1
            last = self.users <= 0
            if last:
                self.closed = True
                if self._registry.get(self.key) is self:
                    del self._registry[self.key]
        if last and self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()

    async def connection(self, schema: _Schema) -> aiosqlite.Connection:
        if self.pid != os.getpid():
            # A forked child inherits the connection object but not its worker thread: using it
            # would wait forever, so the child opens its own.
            self.pid, self.conn, self._opening, self._schemas = os.getpid(), None, None, set()
        conn = self.conn
        if conn is None:
            if self.closed:
                raise SessionClosedError("the SQLite connection is closed")
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._open())
            try:
                conn = await asyncio.shield(self._opening)
            except BaseException:
                if self._opening.done() and self._opening.exception() is not None:
                    self._opening = None
                raise
        if schema.key not in self._schemas:
            await _on_thread(conn, self._create_schema, conn, schema)
            self._schemas.add(schema.key)
        return conn

    async def _open(self) -> aiosqlite.Connection:
        conn = aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        # aiosqlite's worker thread is not a daemon: an unclosed session would hang exit.
        conn._thread.daemon = True
        try:
            await conn
        except sqlite3.Error as exc:
            # aiosqlite stops its thread on a failed connect; wait for that while this loop
            # is alive, or the thread would later report to a closed loop.
            await asyncio.to_thread(conn._thread.join, 5)
            raise BackendUnavailableError(
                f"cannot open SQLite database {self.path!r}: {exc}; check the path and its "
                "permissions"
            ) from exc
        await _on_thread(conn, self._configure, conn)
        self.conn = conn
        return conn

    def _configure(self, conn: aiosqlite.Connection) -> None:
        raw = conn._conn
        raw.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        deadline = time.monotonic() + self.busy_timeout
        while True:  # switching to WAL needs a moment of exclusive access
            try:
                raw.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        raw.execute(f"PRAGMA synchronous = {self.synchronous}")

    @staticmethod
    def _create_schema(conn: aiosqlite.Connection, schema: _Schema) -> None:
        raw = conn._conn
        raw.execute("BEGIN IMMEDIATE")
        try:
            for statement in schema.create:
                raw.execute(statement)
            raw.execute("COMMIT")
        except BaseException:
            raw.execute("ROLLBACK")
            raise


async def _on_thread(conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` on the connection's worker thread as one queued call.

    Once queued the call always runs to its end; a cancelled caller waits for that end before
    the cancellation propagates, so the outcome is settled (and the worker thread never reports
    to an event loop that was closed in the meantime).
    """
    if not conn._running or conn._connection is None:
        raise ValueError("Connection closed")
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    conn._tx.put_nowait((future, partial(fn, *args)))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({future})
        if not future.cancelled():
            future.exception()  # retrieved: the caller asked to be cancelled instead
        raise


def _write(raw: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn`` inside one IMMEDIATE transaction; all of it commits or none of it."""
    raw.execute("BEGIN IMMEDIATE")
    try:
        result = fn(raw)
    except BaseException:
        raw.execute("ROLLBACK")
        raise
    raw.execute("COMMIT")
    return result


class SQLiteSession(BaseSession):
    """A session stored in a SQLite database file (or in memory).

    Args:
        session_id: the conversation's id.
        path: database file; ``":memory:"`` (default) keeps a private in-memory database.
            ``db_path`` is accepted as an alias, as in the SDK.
        sessions_table, messages_table: table names (plain identifiers), SDK defaults.
        busy_timeout: seconds a write waits for another process's write lock.
        synchronous: SQLite's ``synchronous`` pragma. ``"NORMAL"`` (default) keeps every
            committed write across a process crash or kill; only a power loss or OS crash can
            roll back the last commits. ``"FULL"`` survives those too, at one fsync per write.
        session_settings, max_item_bytes, strict: see :class:`BaseSession`.
    """

    _single_dispatch_writes = True

    @explicit_options
    def __init__(
        self,
        session_id: str,
        path: str | os.PathLike[str] = ":memory:",
        *,
        db_path: str | os.PathLike[str] | None = None,
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
        _database: _Database | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        strict: bool = False,
        _internal_id: bool = False,
    ) -> None:
        super().__init__(
            session_id,
            session_settings=session_settings,
            max_item_bytes=max_item_bytes,
            strict=strict,
            _internal_id=_internal_id,
        )
        if db_path is not None:
            path = db_path
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout!r}")
        self._schema = _Schema(sessions_table, messages_table)
        self.sessions_table, self.messages_table = self._schema.key
        self.path = str(path)
        self._db = _database or _Database.acquire(self.path, busy_timeout, synchronous.upper())

    @property
    def db_path(self) -> str:
        """The database path (the SDK's attribute name)."""
        return self.path

    def sibling(self, session_id: str) -> SQLiteSession:
        """Return a session of the same database and tables, sharing the connection."""
        return SQLiteSession(
            session_id,
            self.path,
            sessions_table=self.sessions_table,
            messages_table=self.messages_table,
            max_item_bytes=self.max_item_bytes,
            strict=self.strict,
            _database=self._db.share(),
            _internal_id=True,
        )

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        conn = await self._db.connection(self._schema)
        try:
            return await _on_thread(conn, fn, conn._conn, *args)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise BackendUnavailableError(
                    f"SQLite database {self.path!r} stayed locked by another connection for "
                    f"longer than busy_timeout={self._db.busy_timeout}s; nothing was written. "
                    "Retry, or raise busy_timeout if writers hold long transactions"
                ) from exc
            raise
        except ValueError as exc:
            if str(exc) in ("Connection closed", "no active connection"):
                raise SessionClosedError("the SQLite connection was closed") from exc
            raise

    async def _append(self, payloads: list[str]) -> list[int]:
        sid, schema = self.session_id, self._schema

        def append(raw: sqlite3.Connection) -> list[int]:
            raw.execute(schema.touch, (sid,))
            if len(payloads) == 1:
                last = raw.execute(schema.insert, (sid, payloads[0])).lastrowid
            else:
                raw.executemany(schema.insert, [(sid, p) for p in payloads])
                last = raw.execute("SELECT last_insert_rowid()").fetchone()[0]
            assert last is not None
            # One writer holds the lock and AUTOINCREMENT only grows: the ids are contiguous.
            return list(range(last - len(payloads) + 1, last + 1))

        return await self._run(_write, append)

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        sql, params = _range_sql(self._schema.select, after, before)
        if limit is None:
            sql += " ORDER BY id"
        else:
            sql += " ORDER BY id DESC LIMIT ?"
            params.append(limit)
        args = (self.session_id, *params)

        def load(raw: sqlite3.Connection) -> list[Row]:
            rows = raw.execute(sql, args).fetchall()
            if limit is not None:
                rows.reverse()
            return rows

        return await self._run(load)

    async def _pop(self) -> str | None:
        sql, sid = self._schema.pop, self.session_id

        def pop(raw: sqlite3.Connection) -> str | None:
            rows = raw.execute(sql, (sid,)).fetchall()  # drain RETURNING before COMMIT
            return rows[0][0] if rows else None

        return await self._run(_write, pop)

    async def _clear(self) -> None:
        statements, sid = self._schema.clear, self.session_id

        def clear(raw: sqlite3.Connection) -> None:
            for statement in statements:
                raw.execute(statement, (sid,))

        await self._run(_write, clear)

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        sql, params = _range_sql(self._schema.count, after, before)
        args = (self.session_id, *params)

        def count(raw: sqlite3.Connection) -> int:
            return raw.execute(sql, args).fetchone()[0]  # type: ignore[no-any-return]

        return await self._run(count)

    async def delete_items(self, *, before: int) -> int:
        """Atomically delete this session's items with sequence number < ``before``; return
        how many were deleted (capability ``SupportsRangeDelete``, used to purge)."""
        before = check_before(before)
        self._check_open()
        sql = f"DELETE FROM {self.messages_table} WHERE session_id = ? AND id < ?"
        args = (self.session_id, before)

        def delete(raw: sqlite3.Connection) -> int:
            return raw.execute(sql, args).rowcount

        return await self._mutate(self._run(_write, delete))  # type: ignore[no-any-return]

    async def _close(self) -> None:
        await self._db.release()

    def catalog_store(self) -> Any:
        """Return the catalog of this database's tables (see ``agent_sessions.catalog``)."""
        from ._catalog_sql import SQLiteFileCatalog

        return SQLiteFileCatalog(self)


__all__ = ["SQLiteSession", "check_identifier"]
