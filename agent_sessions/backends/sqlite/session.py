"""Embedded backend on SQLite (the standard library's ``sqlite3``): the default store.

All sessions of one file with the same settings share one connection, owned by one worker
thread; each operation is one function queued to it and answered to the caller's event loop,
so any threads and loops may share a file or a session. A write is one hand-off (one thread hop)
that a cancelled caller waits out, so its outcome is settled when ``CancelledError`` arrives.
Writes take the write lock up front (``BEGIN IMMEDIATE``), waiting up to ``busy_timeout`` for
other connections. A session collected without ``close()`` gives its hold back; the last one
stops the worker and closes the file. The schema is the Agents SDK's, so either opens the other's.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ...core.base import STORE_CAPABILITIES, BaseSession, Row, StoreOptions
from ...core.capabilities import Capability
from ...core.codec import decode_item, encode_item
from ...core.family import SharedMembers, purposes_in
from ...core.registry import StoreHold
from ...core.sqltext import IDENTIFIER, check_identifier, sqlite_time
from ...errors import (
    BackendUnavailableError,
    CommitConflictError,
    SequenceConflictError,
    SessionClosedError,
    UnknownSchemeError,
)
from .textsearch import TextIndexSchema

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ...core.textsearch import Between, Equal

T = TypeVar("T")

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


_QUOTES = {'"': '"', "`": "`", "[": "]"}


def sqlite_table_name(name: str, what: str) -> str:
    """Return the table ``name`` names: a plain identifier as is, or one SQL-quoted the ways
    SQLite reads (``"t"``, `` `t` ``, ``[t]``; the SDK passes its names to SQL verbatim, so
    its users may have quoted them) unquoted. Anything else raises ValueError, so no name
    reaches SQL text unless it is a plain identifier."""
    if isinstance(name, str) and len(name) >= 2 and _QUOTES.get(name[0]) == name[-1]:
        inner, close = name[1:-1], name[-1]
        if close != "]":
            inner = inner.replace(close * 2, close)
        if IDENTIFIER.fullmatch(inner):
            return inner
        raise ValueError(
            f"{what}: a quoted table name must hold a plain identifier (letters, digits, "
            f"underscore; at most 63 characters, not starting with a digit), got {name!r}"
        )
    return check_identifier(name, what)


_ROWS_PER_INSERT = 400
"""Rows per INSERT statement: 800 parameters, under the limit of 999 of SQLite before 3.32."""


class _Schema:
    """SQL text for one pair of tables, built once per process (``_schema``)."""

    def __init__(self, sessions: str, messages: str) -> None:
        s = sqlite_table_name(sessions, "sessions_table")
        m = sqlite_table_name(messages, "messages_table")
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
        self.delete = f"DELETE FROM {m} WHERE session_id = ?"
        self.clear = [self.delete, f"DELETE FROM {s} WHERE session_id = ?"]
        self._text: TextIndexSchema | None = None

    @property
    def text(self) -> TextIndexSchema:
        """The SQL of these tables' text index (built on first use)."""
        if self._text is None:
            self._text = TextIndexSchema(*self.key)
        return self._text

    def insert_rows(self, raw: sqlite3.Connection, sid: str, payloads: list[str]) -> int:
        """Insert ``payloads`` as rows of ``sid``, in order; return the last row's id.

        Multi-row INSERTs: a batch of 20 takes about 40% less time than ``executemany``."""
        if len(payloads) == 1:
            return raw.execute(self.insert, (sid, payloads[0])).lastrowid or 0
        last = 0
        for start in range(0, len(payloads), _ROWS_PER_INSERT):
            chunk = payloads[start : start + _ROWS_PER_INSERT]
            sql = self.insert + ", (?, ?)" * (len(chunk) - 1)
            last = raw.execute(sql, [part for p in chunk for part in (sid, p)]).lastrowid or 0
        return last

    def appender(self, sid: str, payloads: list[str]) -> Callable[[sqlite3.Connection], list[int]]:
        """The write that appends ``payloads`` to ``sid`` and returns their ids."""

        def append(raw: sqlite3.Connection) -> list[int]:
            raw.execute(self.touch, (sid,))
            last = self.insert_rows(raw, sid, payloads)
            # One writer holds the lock and AUTOINCREMENT only grows: the ids are contiguous.
            return list(range(last - len(payloads) + 1, last + 1))

        return append

    def popper(self, sid: str, check: Callable[[str], T]) -> Callable[..., T | None]:
        """The write that deletes ``sid``'s newest row and returns ``check`` of its text."""

        def pop(raw: sqlite3.Connection) -> T | None:
            rows = raw.execute(self.pop, (sid,)).fetchall()  # drain RETURNING before the check
            return check(rows[0][0]) if rows else None

        return pop

    def read(
        self,
        raw: sqlite3.Connection,
        sid: str,
        limit: int | None = None,
        after: int | None = None,
        before: int | None = None,
    ) -> list[Any]:
        """``sid``'s rows in a range, oldest first (with a limit: the newest ``limit``)."""
        sql, params = _range_sql(self.select, after, before)
        if limit is None:
            return raw.execute(sql + " ORDER BY id", (sid, *params)).fetchall()
        rows = raw.execute(sql + " ORDER BY id DESC LIMIT ?", (sid, *params, limit)).fetchall()
        return rows[::-1]

    def create_all(self, raw: sqlite3.Connection) -> None:
        """Create the tables and index if missing (run inside a write transaction)."""
        for statement in self.create:
            raw.execute(statement)


def _range_sql(base: str, after: int | None, before: int | None) -> tuple[str, list[Any]]:
    sql, params = base, []
    if after is not None:
        sql += " AND id > ?"
        params.append(after)
    if before is not None:
        sql += " AND id < ?"
        params.append(before)
    return sql, params


def _check_settings(busy_timeout: float, synchronous: str) -> None:
    if synchronous.upper() not in _SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
    if busy_timeout < 0:
        raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout!r}")


class _Job:
    """One queued call: ``fn(conn, *args)`` run on the worker, answered to ``loop``."""

    __slots__ = ("args", "delivered", "fn", "future", "loop", "schema", "waiter")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        schema: _Schema | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn, self.args, self.schema, self.loop = fn, args, schema, loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.delivered = False
        self.waiter: asyncio.Future[None] | None = None

    def deliver(self, result: Any, error: BaseException | None) -> None:
        """Runs on the caller's loop: hand over the outcome (or wake a cancelled caller)."""
        self.delivered = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        if self.future.done():  # the caller was cancelled; the outcome is discarded
            return
        if error is None:
            self.future.set_result(result)
        else:
            self.future.set_exception(error)


_STALE = object()  # a guarded write found another newest item
_STOP = object()
_RELEASE = object()  # queued by a collected session's finalizer: one hold to give back


@functools.lru_cache(maxsize=64)
def _schema(sessions: str, messages: str) -> _Schema:
    return _Schema(sessions, messages)


class SQLiteStore:
    """One SQLite file with one set of settings: its ``sqlite3`` connection, owned by one
    worker thread, and the tables created there. Shared by every session of that file and
    settings (:func:`open_store` and the ``SQLiteSession`` constructor find the same store);
    the last user to give its hold back stops the worker and closes the file.

    Use :func:`open_store`; :meth:`session` opens a handle.
    """

    _registry: ClassVar[dict[tuple[str, float, str], SQLiteStore]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self, key: tuple[str, float, str], path: str, busy_timeout: float, synchronous: str
    ) -> None:
        self.key, self.path = key, path
        self.busy_timeout, self.synchronous = busy_timeout, synchronous
        self.users, self.closed = 0, False
        self.conn: sqlite3.Connection | None = None  # touched by the worker thread only
        self.schemas: set[tuple[str, str]] = set()  # likewise
        self.text_schemas: set[tuple[str, str]] = set()  # tables whose text index exists; likewise
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False  # the closing job was queued: no other may follow
        self._start_lock = threading.Lock()
        self._inherited: list[sqlite3.Connection | None] = []  # see _after_fork
        self.pid = os.getpid()
        self.members = SharedMembers()

    @classmethod
    def acquire(cls, path: str, busy_timeout: float, synchronous: str) -> SQLiteStore:
        """The shared store of ``path`` and these settings, one user more (a private one for
        ``":memory:"``)."""
        store: SQLiteStore | None
        if path == ":memory:":
            store = cls(
                (f":memory:{id(object())}", busy_timeout, synchronous),
                path,
                busy_timeout,
                synchronous,
            )
            store.users = 1
            return store
        given = (path, float(busy_timeout), synchronous)
        with cls._registry_lock:
            # An absolute path seen before skips realpath (three system calls, a third of the
            # cost of a new session object); relative ones depend on the working directory.
            store = cls._registry.get(given) if os.path.isabs(path) else None
            if store is not None and not store.closed:
                store.users += 1
                return store
        real = os.path.realpath(os.path.expanduser(path))
        key = (real, float(busy_timeout), synchronous)
        with cls._registry_lock:
            store = cls._registry.get(key)
            if store is None or store.closed:
                store = cls._registry[key] = cls(key, real, busy_timeout, synchronous)
            if os.path.isabs(path):
                cls._registry[given] = store
            store.users += 1
            return store

    def session(self, session_id: str, **options: Any) -> SQLiteSession:
        """A session of this store (``options`` as for :class:`SQLiteSession`, without the
        path and connection settings), holding a share of it until closed."""
        return SQLiteSession(session_id, self.path, _store=self.share(), **options)

    def catalog(
        self, sessions_table: str = "agent_sessions", messages_table: str = "agent_messages"
    ) -> Any:
        """Return the catalog of these tables (see ``agent_sessions.ops.catalog``)."""
        return self.session(
            "catalog", sessions_table=sessions_table, messages_table=messages_table
        ).catalog_store()

    def share(self) -> SQLiteStore:
        with self._registry_lock:
            if self.closed:
                raise SessionClosedError("the SQLite connection is closed")
            self.users += 1
        return self

    def _drop_use(self) -> bool:
        """Give back one hold; True when it was the last (the database is then closed)."""
        with self._registry_lock:
            self.users -= 1
            if self.users > 0:
                return False
            self.closed = True
            for key in [k for k, store in self._registry.items() if store is self]:
                del self._registry[key]
        return True

    def release_share(self) -> bool:
        """Give back one hold without I/O if others remain; False (nothing done) otherwise."""
        with self._registry_lock:
            if self.users <= 1:
                return False
            self.users -= 1
            return True

    def release_later(self) -> None:
        """Give back one hold from a finalizer: only a reentrant ``SimpleQueue.put`` here (a
        finalizer may run inside any code, even under our locks); the worker does the rest,
        or the next worker of this database does when none runs."""
        self._jobs.put(_RELEASE)

    async def release(self) -> None:
        last = self._drop_use()
        if last and self.pid == os.getpid():
            job = self._submit(_close_connection, (), None, last=True)
            if job is not None:
                await _settled(job)

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        schema: _Schema | None,
        last: bool = False,
    ) -> _Job | None:
        """Queue one job (``last``: the closing one, or None when no worker ever started).

        Under the lock, so a job is either queued before the closing one (and runs) or
        refused: none can wait behind a stopped worker, whatever thread submits it.
        """
        if self.pid != os.getpid():
            self._after_fork()
        job = _Job(fn, args, schema, asyncio.get_running_loop())
        with self._start_lock:
            if self._stopped:
                raise SessionClosedError("the SQLite connection is closed")
            if last:
                self._stopped = True
                if self._thread is None:
                    return None
            elif self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name=f"agent_sessions-sqlite:{self.path}", daemon=True
                )
                self._thread.start()
            self._jobs.put(job)
            if last:
                self._jobs.put(_STOP)
        return job

    def _after_fork(self) -> None:
        # A forked child inherits the connection object but not the worker thread: it opens its
        # own. The inherited connection is kept unclosed: closing it could touch files the
        # parent still uses. The lock is replaced, not taken: a parent thread may have held it
        # at the fork, and nothing would release it in the child.
        self._inherited.append(self.conn)
        self._start_lock = threading.Lock()
        self.conn, self.schemas, self.text_schemas = None, set(), set()
        self._jobs, self._thread, self._stopped = queue.SimpleQueue(), None, self.closed
        self.pid = os.getpid()

    async def call(self, fn: Callable[..., T], args: tuple[Any, ...], schema: _Schema) -> T:
        """Run ``fn(conn, *args)`` on the worker thread as one queued call.

        Once queued the call always runs to its end; a cancelled caller waits for that end
        before the cancellation propagates, so the outcome is settled.
        """
        if self.closed:
            raise SessionClosedError("the SQLite connection is closed")
        job = self._submit(fn, args, schema)
        assert job is not None
        return await _settled(job)  # type: ignore[no-any-return]

    # -- the worker thread ---------------------------------------------------------------

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is _STOP:
                return
            if job is _RELEASE:
                if self._drop_use():
                    with self._start_lock:
                        self._stopped = True
                    self._close_connection()
                    return
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                if job.fn is _close_connection:
                    self._close_connection()
                else:
                    conn = self.conn if self.conn is not None else self._open()
                    if job.schema is not None and job.schema.key not in self.schemas:
                        _write(conn, job.schema.create_all)
                        self.schemas.add(job.schema.key)
                    result = job.fn(conn, *job.args)
            except BaseException as exc:  # handed to the caller
                error = exc
            try:
                job.loop.call_soon_threadsafe(job.deliver, result, error)
            except RuntimeError:  # the caller's loop was closed: nobody is waiting
                pass
            del job, result, error

    def _close_connection(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout
            )
        except sqlite3.Error as exc:
            raise BackendUnavailableError(
                f"cannot open SQLite database {self.path!r}: {exc}; check the path and its "
                "permissions"
            ) from exc
        try:
            self._configure(conn)
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        return conn

    def _configure(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        deadline = time.monotonic() + self.busy_timeout
        while True:  # switching to WAL needs a moment of exclusive access
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute("PRAGMA secure_delete = ON")  # freed pages hold no erased text


def _close_connection() -> None:
    """Marks the job that closes the connection (the worker does it)."""


async def _settled(job: _Job) -> Any:
    """Await ``job``'s outcome; when cancelled, first wait until the worker has finished it."""
    try:
        return await job.future
    except asyncio.CancelledError:
        if not job.delivered:
            job.waiter = job.loop.create_future()
            while not job.waiter.done():
                try:
                    await asyncio.shield(job.waiter)
                except asyncio.CancelledError:
                    pass
        raise


def _write(raw: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn`` inside one IMMEDIATE transaction; all of it commits or none of it.

    A failed ``COMMIT`` (a deferred constraint, a full disk, an I/O error) rolls back too, so
    the connection is never left inside a transaction.
    """
    raw.execute("BEGIN IMMEDIATE")
    try:
        result = fn(raw)
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
    return result


def _register_in(
    raw: sqlite3.Connection, schema: _Schema, registry: str, purpose: str, entry: str
) -> None:
    """Inside a write transaction: list ``purpose`` in the family registry ``registry`` unless
    it is listed (``BaseSession._register`` as one step of a larger write)."""
    records = []
    for (payload,) in raw.execute(
        f"SELECT message_data FROM {schema.key[1]} WHERE session_id = ? ORDER BY id", (registry,)
    ):
        try:
            records.append(decode_item(payload))
        except ValueError:
            continue  # skipped, as a read of the registry skips it
    if purpose not in purposes_in(records):
        raw.execute(schema.touch, (registry,))
        raw.execute(schema.insert, (registry, entry))


class SQLiteSession(BaseSession):
    """A session stored in a SQLite database file (or in memory).

    Args:
        session_id: the conversation's id.
        path: database file; ``":memory:"`` (default) keeps a private in-memory database.
            ``db_path`` is accepted as an alias, as in the SDK.
        sessions_table, messages_table: table names (plain identifiers, optionally SQL-quoted:
            ``'"t"'`` names table ``t``), SDK defaults.
        busy_timeout: seconds a write waits for another process's write lock.
        synchronous: SQLite's ``synchronous`` pragma. ``"NORMAL"`` (default) keeps every
            committed write across a process crash or kill; only a power loss or OS crash can
            roll back the last commits. ``"FULL"`` survives those too, at one fsync per write.
        session_settings, max_item_bytes, strict: see :class:`BaseSession`.
    """

    capabilities = STORE_CAPABILITIES | {Capability.TEXT_SEARCH}
    _single_dispatch_writes = True

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
        _store: SQLiteStore | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(session_id, **options)
        _check_settings(busy_timeout, synchronous)
        self.schema = _schema(sessions_table, messages_table)
        self.sessions_table, self.messages_table = self.schema.key
        self.path = str(path if db_path is None else db_path)
        self.store = _store or SQLiteStore.acquire(self.path, busy_timeout, synchronous.upper())
        # Collected without close(): the hold goes back, so the worker and file do not leak.
        self._hold = weakref.finalize(self, self.store.release_later)
        self._hold.atexit = False
        if self._shared_member:
            self._hold.detach()  # it took no hold: the store keeps it

    @property
    def db_path(self) -> str:
        """The database path (the SDK's attribute name)."""
        return self.path

    def store_key(self) -> tuple[Any, ...] | None:
        """Where this session's items live (database file, tables, id), the same for every
        object of this session; None for a private in-memory database."""
        if self.path == ":memory:":
            return None
        return ("sqlite", self.store.path, self.messages_table, self.session_id)

    def _shared_members(self) -> tuple[SharedMembers, dict[str, Any]]:
        return self.store.members, {
            "path": self.path,
            "sessions_table": self.sessions_table,
            "messages_table": self.messages_table,
            "_store": self.store,
        }

    def _member_options(self) -> dict[str, Any]:
        return {**self._shared_members()[1], "_store": self.store.share()}

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await self.store.call(fn, args, self.schema)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise BackendUnavailableError(
                    f"SQLite database {self.path!r} stayed locked by another connection for "
                    f"longer than busy_timeout={self.store.busy_timeout}s; nothing was written. "
                    "Retry, or raise busy_timeout if writers hold long transactions"
                ) from exc
            raise

    async def _append(self, payloads: list[str]) -> list[int]:
        return await self._run(_write, self.schema.appender(self.session_id, payloads))

    def _same_store(self, other: object) -> bool:
        """Whether ``other`` is a SQLiteSession on this connection and tables (one job can
        serve both: the worker creates the job's schema only)."""
        return (
            isinstance(other, SQLiteSession)
            and other.store is self.store
            and other.schema.key == self.schema.key
        )

    async def _append_family(self, writes: list[tuple[BaseSession, list[str]]]) -> list[list[int]]:
        # One transaction: every batch (and each side store's registration, checked inside it)
        # commits or none does.
        steps: list[tuple[tuple[str, str, str] | None, Callable[..., list[int]]]] = []
        for session, payloads in writes:
            if not self._same_store(session):
                return await super()._append_family(writes)
            assert isinstance(session, SQLiteSession)
            register = None
            unlisted = session.unlisted
            if unlisted is not None:
                registry, purpose = unlisted
                if not self._same_store(registry):
                    return await super()._append_family(writes)
                entry = encode_item({"purpose": purpose}, 0, registry.max_item_bytes)
                register = (registry.session_id, purpose, entry)
            steps.append((register, session.schema.appender(session.session_id, payloads)))
        schema = self.schema

        def append(raw: sqlite3.Connection) -> list[list[int]]:
            out = []
            for register, appender in steps:
                if register is not None:
                    _register_in(raw, schema, *register)
                out.append(appender(raw))
            return out

        result: list[list[int]] = await self._run(_write, append)
        for session, _ in writes:
            session.listed()
        return result

    async def _commit(
        self,
        ops: list[tuple[str, BaseSession, list[str]]],
        expect: list[tuple[BaseSession, int | None]],
    ) -> list[Any] | None:
        if not all(self._same_store(s) for s in [s for _, s, _ in ops] + [g for g, _ in expect]):
            return None
        newest = f"SELECT max(id) FROM {self.messages_table} WHERE session_id = ?"
        checks = [(guard.session_id, seq) for guard, seq in expect]
        steps = [
            s.schema.appender(s.session_id, payloads)  # type: ignore[attr-defined]
            if kind == "append"
            else s.schema.popper(s.session_id, str)  # type: ignore[attr-defined]
            for kind, s, payloads in ops
        ]

        def run(raw: sqlite3.Connection) -> list[Any] | object:  # one BEGIN IMMEDIATE job
            for gid, seq in checks:
                if raw.execute(newest, (gid,)).fetchone()[0] != seq:
                    return _STALE
            return [step(raw) for step in steps]

        result = await self._run(_write, run)
        if result is _STALE:
            raise CommitConflictError("a session's newest item moved; nothing was written")
        return result  # type: ignore[no-any-return]

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        schema, sid = self.schema, self.session_id
        return await self._run(lambda raw: schema.read(raw, sid, limit, after, before))

    async def _load_family(
        self, reads: list[tuple[BaseSession, int | None, int | None, int | None]]
    ) -> list[list[Row]]:
        if not all(self._same_store(s) for s, *_ in reads):
            return await super()._load_family(reads)
        queries = [(s.schema, s.session_id, *bounds) for s, *bounds in reads]  # type: ignore[attr-defined]

        def load(raw: sqlite3.Connection) -> list[list[Row]]:
            # One read transaction: the results are one snapshot of the store.
            began = not raw.in_transaction
            if began:
                raw.execute("BEGIN")
            try:
                return [schema.read(raw, *query) for schema, *query in queries]
            finally:
                if began:
                    raw.execute("COMMIT")

        return await self._run(load)

    async def _pop(self) -> str | None:
        return await self._pop_row_checked(lambda text: text)  # type: ignore[no-any-return]

    async def _pop_row_checked(self, check: Callable[[str], Any]) -> Any:
        """Delete the newest row and return ``check(payload)`` in one transaction, rolled
        back when ``check`` raises. ``check`` runs on the worker thread."""
        return await self._run(_write, self.schema.popper(self.session_id, check))

    async def _clear(self) -> None:
        statements, sid, text = self.schema.clear, self.session_id, self.schema.text

        def clear(raw: sqlite3.Connection) -> None:
            text.erasing(raw, [sid], lambda: [raw.execute(sql, (sid,)) for sql in statements])

        await self._run(_write, clear)

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        sql, params = _range_sql(self.schema.count, after, before)
        args = (self.session_id, *params)
        return await self._run(lambda raw: raw.execute(sql, args).fetchone()[0])  # type: ignore[no-any-return]

    async def _delete_before(self, before: int) -> int:
        sql, args = self.schema.delete + " AND id < ?", (self.session_id, before)
        return await self._run(_write, lambda raw: raw.execute(sql, args).rowcount)

    async def _rewrite(self, rows: list[Row]) -> int:
        sql = f"UPDATE {self.messages_table} SET message_data = ? WHERE session_id = ? AND id = ?"
        args, sid, text = (
            [(p, self.session_id, seq) for seq, p in rows],
            self.session_id,
            self.schema.text,
        )

        def rewrite(raw: sqlite3.Connection) -> int:
            return text.erasing(raw, [sid], lambda: raw.executemany(sql, args).rowcount)  # summed

        return await self._run(_write, rewrite)

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        # The SDK layout numbers items by the table's row id, shared by every session of the
        # file: a number another session holds cannot be written here.
        schema, sid, m = self.schema, self.session_id, self.messages_table
        s = schema.key[0]
        stamp = [sqlite_time(created), sqlite_time(updated)]
        seqs = [seq for seq, _ in rows]

        def write(raw: sqlite3.Connection) -> None:
            (held,) = raw.execute(schema.count, (sid,)).fetchone()
            if held:
                raise SequenceConflictError(
                    f"session {sid!r} already holds {held} item(s); write_sequenced_items "
                    "fills an empty session only. Nothing was written"
                )
            taken = []
            for start in range(0, len(seqs), 500):  # by primary key: O(n log table)
                chunk = seqs[start : start + 500]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT id FROM {m} WHERE id IN ({marks})"
                taken += [row[0] for row in raw.execute(sql, chunk)]
            if taken:
                raise SequenceConflictError(
                    f"session {sid!r}: item number(s) {taken[:5]} are held by other sessions "
                    f"of {self.path!r} (this layout numbers items across the whole file); "
                    "copy into a new file or an sqlite+aiosqlite:// URL. Nothing was written"
                )
            raw.execute(
                f"INSERT INTO {s} (session_id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET created_at = excluded.created_at, "
                "updated_at = excluded.updated_at",
                (sid, *stamp),
            )
            raw.executemany(
                f"INSERT INTO {m} (id, session_id, message_data) VALUES (?, ?, ?)",
                [(seq, sid, payload) for seq, payload in rows],
            )

        await self._run(_write, write)

    async def _close(self) -> None:
        self._hold.detach()
        await self.store.release()

    def _release_at_once(self) -> bool:
        if type(self)._close is not SQLiteSession._close or not self.store.release_share():
            return False  # a subclass's own _close, or the last hold: the file is closed
        self._hold.detach()
        return True

    async def _replace_rows(
        self, expected: list[Row] | None, payloads: list[str], prune: Callable[[str], bool] | None
    ) -> bool:
        """The SDK compaction hook's atomic swap (see ``core.sdk_compaction``)."""
        sid, schema = self.session_id, self.schema

        def replace(raw: sqlite3.Connection) -> bool:
            if expected is None:
                raw.execute(schema.delete, (sid,))
            else:
                current = schema.read(raw, sid, len(expected))
                if [tuple(r) for r in current] != [tuple(r) for r in expected]:
                    return False
                first = expected[0][0]
                if prune is not None:
                    end = None
                    for row_id, text in schema.read(raw, sid, before=first):
                        if not prune(text):
                            break
                        end = row_id
                    if end is not None:
                        raw.execute(schema.delete + " AND id <= ?", (sid, end))
                raw.execute(schema.delete + " AND id >= ?", (sid, first))
            if payloads:
                raw.execute(schema.touch, (sid,))
                schema.insert_rows(raw, sid, payloads)
            return True

        return await self._run(_write, replace)

    async def _search_text(
        self, words: list[str], limit: int, equal: Equal, between: Between
    ) -> list[tuple[int, str, float]]:
        # FTS5 (see textsearch.py): the index is created on the file's first search and the
        # session listed (its items indexed) on its own first, each in one write transaction.
        text, sid, store, key = self.schema.text, self.session_id, self.store, self.schema.key

        def search(raw: sqlite3.Connection) -> list[Any]:
            if key not in store.text_schemas:
                _write(raw, text.create_all)
                store.text_schemas.add(key)
            try:
                listed = raw.execute(text.is_listed, (sid,)).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                _write(raw, text.create_all)  # dropped by another connection meanwhile
                listed = None
            if not listed and not _write(raw, lambda raw: text.list_session(raw, sid)):
                return []  # no items
            return text.run_search(raw, sid, words, limit, equal, between)

        try:
            rows = await self._run(search)
        except sqlite3.OperationalError as exc:
            if "fts5" not in str(exc):
                raise
            raise BackendUnavailableError(
                f"search_text needs SQLite's FTS5, which this Python's sqlite3 lacks ({exc})"
            ) from exc
        return [(seq, payload, float(score)) for seq, payload, score in rows]

    async def drop_text_index(self) -> None:
        """Remove the text index of this session's tables, for every session of the file
        (its triggers, FTS5 table and list of sessions), in one transaction; the next
        ``search_text`` creates it again and indexes that session."""
        text, store, key = self.schema.text, self.store, self.schema.key

        def drop(raw: sqlite3.Connection) -> None:
            _write(raw, text.drop_all)
            store.text_schemas.discard(key)

        self._check_open()
        await self._run(drop)

    def catalog_store(self) -> Any:
        """Return the catalog of this database's tables (see ``agent_sessions.ops.catalog``)."""
        from .catalog import SQLiteFileCatalog

        return SQLiteFileCatalog(self)


def _url_path(url: str) -> str:
    rest = url.split("://", 1)[1]
    if not rest.startswith("/"):
        raise UnknownSchemeError(
            f"SQLite URLs have three slashes before a relative path and four before an absolute "
            f"one (sqlite:///rel.db, sqlite:////abs/path.db), got {url!r}"
        )
    return rest[1:] or ":memory:"


def open_url(url: str, session_id: str, **options: Any) -> SQLiteSession:
    """``open_session``'s opener for ``sqlite:///rel.db``, ``sqlite:////abs.db`` and
    ``sqlite:///:memory:``."""
    return SQLiteSession(session_id, _url_path(url), **options)


def open_store(url: str, *, busy_timeout: float = 5.0, synchronous: str = "NORMAL") -> StoreHold:
    """Open the store of the SQLite file at ``url`` (as in :func:`open_url`; shared with its
    sessions of the same settings); ``await store.close()`` when done."""
    _check_settings(busy_timeout, synchronous)
    return StoreHold(SQLiteStore.acquire(_url_path(url), busy_timeout, synchronous.upper()))


__all__ = ["SQLiteSession", "SQLiteStore", "open_store", "open_url"]
