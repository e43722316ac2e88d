"""What the SQLAlchemy backend's per-dialect SQL modules share: table names, their interface,
and the operations whose SQL is the same on every database.

That SQL is built with SQLAlchemy Core and compiled once per store for its engine's dialect;
the compiled text runs directly on the driver connection that SQLAlchemy's pool hands out, so
a statement costs one driver call, not a trip through SQLAlchemy's execution layer.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import operator
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    bindparam,
    column,
    delete,
    false,
    func,
    literal_column,
    select,
    table,
    true,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement, quoted_name
from sqlalchemy.sql.expression import TableClause

from ...core.base import Row
from ...core.sqltext import check_identifier
from ...errors import BackendDataError

SCHEMA_VERSION = 1
"""The layout these modules read and write; stored per messages table in the schema table."""
BACKFILL_ROWS = 5000
"""Items a session's first search indexes per transaction (a writer waits for one at most)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Tables:
    """The three table names of one store (validated identifiers)."""

    sessions: str
    messages: str
    schema: str

    @classmethod
    def build(cls, prefix: str, sessions_table: str | None, messages_table: str | None) -> Tables:
        if not isinstance(prefix, str):
            raise ValueError(f"table_prefix must be a str, got {type(prefix).__name__}")
        key = (prefix, sessions_table, messages_table)
        if all(isinstance(k, (str, type(None))) for k in key):
            return _built(*key)  # a session object per request: names checked once
        return cls._check(*key)

    @classmethod
    def _check(cls, prefix: str, sessions_table: str | None, messages_table: str | None) -> Tables:
        return cls(
            check_identifier(sessions_table or f"{prefix}sessions", "sessions_table/table_prefix"),
            check_identifier(messages_table or f"{prefix}messages", "messages_table/table_prefix"),
            check_identifier(f"{prefix}schema", "table_prefix"),
        )

    def lock_key(self) -> int:
        """A signed 64-bit number naming this store, for database-wide advisory locks."""
        digest = hashlib.sha256(f"agent_sessions:{self.messages}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)


def derived_name(base: str, suffix: str) -> str:
    """``base + suffix``, shortened with a hash of ``base`` when longer than an identifier may
    be (63 characters), so every derived name stays unique and valid."""
    if len(base) + len(suffix) <= 63:
        return base + suffix
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[: 63 - len(suffix) - 9]}_{digest}{suffix}"


@dataclass(frozen=True)
class TextTables:
    """The names of a table set's full-text index (Capability.TEXT_SEARCH), made on the
    first ``search_text``: ``index`` holds the indexed text of registered sessions' items,
    keyed by ``(session_id, seq)``; ``registry`` the registered sessions; ``name(suffix)``
    names the functions and triggers that keep ``index`` in step with the messages table."""

    index: str
    registry: str
    messages: str

    @classmethod
    def of(cls, t: Tables) -> TextTables:
        m = t.messages
        return cls(derived_name(m, "_text"), derived_name(m, "_text_sessions"), m)

    def name(self, suffix: str) -> str:
        return derived_name(self.messages, f"_text_{suffix}")


_PIECE = re.compile(r"[^\W_]+")


def split_words(words: list[str]) -> list[str]:
    """A query's words (``\\w+``) as the databases' parsers split text: ``_`` separates
    words there (as in FTS5's ``unicode61``), so ``snake_case`` is searched as two words.
    First occurrence kept, every one (no cut: issue 40, defect 8), not folded: the database
    folds them as it folded the text it indexed (Python's ``lower`` turns ``İ`` into ``i``
    and a combining dot, which no index holds: defect 9)."""
    pieces = (p for w in words for p in _PIECE.findall(w))
    return list(dict.fromkeys(pieces))


def text_missing(t: Tables, module: str) -> BackendDataError:
    """The error of a full-text index that is missing and may not be created here."""
    return BackendDataError(
        f"the full-text index of {t.messages} does not exist; search_text creates it "
        "when the session has create_tables=True, or run the statements of "
        f"agent_sessions.backends.sql.{module}.text_statements() once"
    )


@dataclass(frozen=True)
class TextFilters:
    """The ``equal``/``between`` filters of ``search_text``, as checked by
    ``core.textsearch.check_search`` (field names ``[a-z_]{1,32}``, so they can be written
    into a JSON path)."""

    equal: tuple[tuple[str, tuple[str, ...]], ...] = ()
    between: tuple[tuple[str, float | None, float | None], ...] = ()

    @classmethod
    def of(
        cls,
        equal: Mapping[str, Collection[str]],
        between: Mapping[str, tuple[float | None, float | None]],
    ) -> TextFilters:
        for name in (*equal, *between):
            if not _FIELD.fullmatch(name):  # checked already; a JSON path must never vary
                raise ValueError(f"filter field names are [a-z_]{{1,32}}, got {name!r}")
        return cls(
            tuple((name, tuple(values)) for name, values in equal.items()),
            tuple((name, low, high) for name, (low, high) in between.items()),
        )

    @property
    def empty(self) -> bool:
        return not self.equal and not self.between

    def impossible(self) -> bool:
        """Whether no item can pass (an ``equal`` with no values)."""
        return any(not values for _, values in self.equal)


_FIELD = re.compile(r"[a-z_]{1,32}")


@functools.lru_cache(maxsize=256)
def _built(prefix: str, sessions_table: str | None, messages_table: str | None) -> Tables:
    return Tables._check(prefix, sessions_table, messages_table)


class Statement:
    """A Core statement compiled once for an engine's dialect: its SQL text and the names of
    its positional parameters, in order."""

    __slots__ = ("_fixed", "_names", "sql")

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        if not isinstance(compiled, SQLCompiler) or not compiled.positional:
            raise ValueError(f"the {dialect.name} dialect must use a positional paramstyle")
        self.sql = str(compiled)
        self._names = tuple(compiled.positiontup or ())
        # parameters the compiler added with a value (SQLite's ``OFFSET 0`` after a LIMIT)
        self._fixed = {k: v for k, v in compiled.params.items() if v is not None}

    def args(self, **values: Any) -> list[Any]:
        """The positional parameters, from ``values`` by name."""
        if self._fixed:
            values = {**self._fixed, **values}
        return [values[name] for name in self._names]


_SESSION_COLUMNS = ("session_id", "last_seq", "updated_at")


def _native(dialect: Dialect) -> Dialect:
    """``dialect``, compiling to its driver's own positional paramstyle (``$1``, ``%s``,
    ``?``) whatever paramstyle the engine was given: the SQL bypasses SQLAlchemy's
    conversion."""
    if not isinstance(dialect, DefaultDialect) or dialect.paramstyle == dialect.default_paramstyle:
        return dialect
    native = copy.copy(dialect)
    native.paramstyle = dialect.default_paramstyle
    native.positional = True  # the default of each supported driver is positional
    return native


def _core(t: Tables) -> tuple[TableClause, TableClause]:
    """The sessions and messages tables as Core tables (names never quoted, as in the DDL)."""
    return (
        table(quoted_name(t.sessions, False), *map(column, _SESSION_COLUMNS)),
        table(quoted_name(t.messages, False), *map(column, ("session_id", "seq", "message_data"))),
    )


def _range(
    s: TableClause,
    m: TableClause,
    order: tuple[str, ...],
    count: bool,
    after: bool,
    before: bool,
    limit: bool,
) -> ClauseElement:
    """A session's rows (or their count) with after < seq < before; with ``limit`` the newest
    ``limit``, newest first, else oldest first. ``order``: the columns ordering them by seq."""
    where = [m.c.session_id == bindparam("sid")]
    if after:
        where.append(m.c.seq > bindparam("after"))
    if before:
        where.append(m.c.seq < bindparam("before"))
    if count:
        return select(func.count()).select_from(m).where(*where)
    query = select(m.c.seq, m.c.message_data).where(*where)
    if limit:
        return query.order_by(*(m.c[c].desc() for c in order)).limit(bindparam("limit"))
    return query.order_by(*(m.c[c] for c in order))


def _delete(s: TableClause, m: TableClause, op: Callable[[Any, Any], Any] | None) -> ClauseElement:
    """Delete a session's rows (with ``op``: those whose ``op(seq, :seq)`` holds)."""
    where = [m.c.session_id == bindparam("sid")]
    if op is not None:
        where.append(op(m.c.seq, bindparam("seq")))
    return delete(m).where(*where)


def _version(s: TableClause, m: TableClause, schema: str) -> ClauseElement:
    versions = table(quoted_name(schema, False), column("table_name"), column("version"))
    return select(versions.c.version).where(versions.c.table_name == bindparam("name"))


def _probe(s: TableClause, m: TableClause) -> ClauseElement:
    """Reads no row, but fails unless both tables and the columns read and written exist."""
    columns = (s.c.session_id, s.c.last_seq, m.c.session_id, m.c.seq, m.c.message_data)
    return select(*columns).where(false())


def _held(s: TableClause, m: TableClause) -> ClauseElement:
    """The session's counter row, locked (no lock in SQLite, where writes are serialized)."""
    return select(s.c.session_id).where(s.c.session_id == bindparam("sid")).with_for_update()


def _nth(s: TableClause, m: TableClause) -> ClauseElement:
    """The number of the session's item ``:skip + 1`` after ``:after``."""
    where = (m.c.session_id == bindparam("sid"), m.c.seq > bindparam("after"))
    return select(m.c.seq).where(*where).order_by(m.c.seq).limit(1).offset(bindparam("skip"))


def _ready(s: TableClause, m: TableClause, registry: str) -> ClauseElement:
    r = table(quoted_name(registry, False), column("session_id"), column("ready"))
    return update(r).where(r.c.session_id == bindparam("sid")).values(ready=true())


def _rewrite(s: TableClause, m: TableClause) -> ClauseElement:
    where = (m.c.session_id == bindparam("sid"), m.c.seq == bindparam("seq"))
    return update(m).where(*where).values(message_data=bindparam("data"))


def _touch(s: TableClause, m: TableClause, now: str) -> ClauseElement:
    where = s.c.session_id == bindparam("sid")
    return update(s).where(where).values(updated_at=literal_column(now))


class Rollback(Exception):
    """Raised by the ``run`` of :meth:`SqlDialect.write`: roll back, then return ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value


class SqlDialect(ABC):
    """The SQL of one database family, run on a driver connection ``conn``.

    The operations whose SQL is the same everywhere are written here, on the primitives
    ``fetch``, ``read``, ``execute``, ``begin`` (or ``write``) and ``write_one`` of each
    dialect.
    """

    #: the SQLAlchemy pool's check-in must run inside SQLAlchemy's greenlet (driver I/O).
    checkin_needs_greenlet = True
    #: operations on one engine must not overlap (SQLite's shared static connection).
    exclusive = False
    #: a connection an operation failed on is dropped (False: it stays usable and is kept).
    discard_on_error = True
    #: the driver has no cheap statement timeout of its own: the session enforces one.
    watchdog = False
    #: SQL of the current time for ``updated_at``; None: ``clear`` need not lock the counter.
    now: str | None = None
    #: the columns that order a session's rows by seq along its index.
    key_order: tuple[str, ...] = ("seq",)

    def __init__(self, tables: Tables, dialect: Dialect) -> None:
        self.t = tables
        self.engine_dialect = _native(dialect)
        self._core = _core(tables)
        self._compiled: dict[Hashable, Statement] = {}

    def sql(self, build: Callable[..., ClauseElement], *shape: Hashable) -> Statement:
        """``build(sessions, messages, *shape)`` compiled for this engine, once."""
        key = (build, *shape)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = Statement(build(*self._core, *shape), self.engine_dialect)
        return found

    @abstractmethod
    async def fetch(self, conn: Any, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        """The rows of ``sql``, in the caller's transaction if one is open."""

    async def read(self, conn: Any, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        """The rows of ``sql``, a read of its own (no transaction of the caller's)."""
        return await self.fetch(conn, sql, args)

    @abstractmethod
    async def execute(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        """Run ``sql`` in the caller's transaction; how many rows it changed."""

    async def execute_many(self, conn: Any, sql: str, rows: list[list[Any]]) -> int:
        """``execute`` once per parameter list of ``rows``; how many rows they changed."""
        changed = 0
        for args in rows:
            changed += await self.execute(conn, sql, args)
        return changed

    async def begin(self, conn: Any) -> None:
        """Open the transaction of ``write``."""
        raise NotImplementedError

    async def write(self, conn: Any, run: Callable[[], Awaitable[T]]) -> T:
        """``run()`` in a write transaction, committed when it returns and rolled back when
        it raises (on :class:`Rollback`, its value is returned)."""
        await self.begin(conn)
        try:
            result = await run()
        except Rollback as rollback:
            await conn.rollback()
            return rollback.value  # type: ignore[no-any-return]
        except BaseException:
            await conn.rollback()
            raise
        await conn.commit()
        return result

    async def write_one(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        """A statement atomic by itself; how many rows it changed."""
        return await self.write(conn, lambda: self.execute(conn, sql, args))

    async def touch(self, conn: Any, session_id: str) -> None:
        """In the caller's transaction: set the session's ``updated_at``, which locks its
        counter row (appends wait); nothing where ``now`` is None."""
        if self.now is not None:
            stmt = self.sql(_touch, self.now)
            await self.execute(conn, stmt.sql, stmt.args(sid=session_id))

    async def lock_counter(self, conn: Any, session_id: str) -> None:
        """In the caller's transaction: lock the session's counter row, so appends wait."""
        await self.touch(conn, session_id)

    async def prepare(self, conn: Any, create: bool) -> None:
        """Create the tables when ``create`` (idempotent, safe across processes), then check
        that they exist and carry a schema version this code reads."""
        version = await self._version(conn, create)
        if version is None and create:
            await self.create_tables(conn)
            version = await self._version(conn, False)
        check_version(self.t, version)
        probe = self.sql(_probe)
        await self.read(conn, probe.sql, [])

    async def _version(self, conn: Any, missing_ok: bool) -> Any:
        query = self.sql(_version, self.t.schema)
        try:
            rows = await self.read(conn, query.sql, query.args(name=self.t.messages))
        except Exception as exc:
            if missing_ok and self.missing_table(exc):
                return None
            raise
        return rows[0][0] if rows else None

    @abstractmethod
    async def create_tables(self, conn: Any) -> None:
        """Run ``create_statements`` in one transaction, under a lock held across processes."""

    @abstractmethod
    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        """Store ``payloads`` as one transaction; return the last sequence number assigned."""

    async def append_unnumbered(self, conn: Any, session_id: str, payloads: list[str]) -> None:
        """``append`` for a caller that does not need the numbers."""
        await self.append(conn, session_id, payloads)

    @abstractmethod
    async def add(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        """``append`` in the caller's transaction."""

    async def load(
        self, conn: Any, session_id: str, limit: int | None, after: int | None, before: int | None
    ) -> list[Row]:
        """Return the latest ``limit`` rows (all when None) with after < seq < before, oldest
        first."""
        shape = (after is not None, before is not None, limit is not None)
        query = self.sql(_range, ("seq",), False, *shape)
        args = query.args(sid=session_id, after=after, before=before, limit=limit)
        rows = [(r[0], r[1]) for r in await self.read(conn, query.sql, args)]
        return rows if limit is None else rows[::-1]

    async def count(self, conn: Any, session_id: str, after: int | None, before: int | None) -> int:
        """Count the session's rows with after < seq < before."""
        query = self.sql(_range, ("seq",), True, after is not None, before is not None, False)
        args = query.args(sid=session_id, after=after, before=before)
        return int((await self.read(conn, query.sql, args))[0][0])

    @abstractmethod
    async def pop(self, conn: Any, session_id: str) -> str | None:
        """Delete the newest row and return its payload; None when there is none."""

    async def pop_in(self, conn: Any, session_id: str) -> Any:
        """``pop`` in the caller's transaction: the payload, or None."""
        raise NotImplementedError

    async def pop_checked(self, conn: Any, session_id: str, check: Callable[[str], Any]) -> Any:
        """Delete the newest row and return ``check(payload)`` in one transaction (None when
        there is none); when ``check`` raises an Exception, roll back and return it as
        :class:`Refused` (the connection stays usable)."""

        async def run() -> Any:
            # The pop's row lock is held across the check: a concurrent pop waits for it.
            value = await self.pop_in(conn, session_id)
            outcome = None if value is None else run_check(check, str(value))
            if isinstance(outcome, Refused):
                raise Rollback(outcome)
            return outcome

        return await self.write(conn, run)

    async def clear(self, conn: Any, session_id: str) -> None:
        """Delete the session's rows, keeping its counter so no sequence number is reused
        (a purge that read number N before the clear must not hit items written after it)."""
        everything = self.sql(_delete, None)

        async def run() -> None:
            await self.touch(conn, session_id)  # first: waits for a writer in progress
            await self.execute(conn, everything.sql, everything.args(sid=session_id))

        await self.write(conn, run)

    async def delete_before(self, conn: Any, session_id: str, before: int) -> int:
        """Delete the session's rows with seq < ``before`` in one statement; return how many."""
        older = self.sql(_delete, operator.lt)
        return await self.write_one(conn, older.sql, older.args(sid=session_id, seq=before))

    async def replace_rows(
        self,
        conn: Any,
        session_id: str,
        expected: list[Row] | None,
        payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        """The SDK compaction hook's swap in one transaction (see ``core.sdk_compaction``):
        False, changing nothing, unless the newest ``len(expected)`` rows are ``expected``;
        else delete them (every row when ``expected`` is None) and the oldest rows ``prune``
        accepts, then append ``payloads``."""

        async def run() -> bool:
            await self.lock_counter(conn, session_id)
            if not await self._delete_for_swap(conn, session_id, expected, prune):
                raise Rollback(False)
            if payloads:
                await self.add(conn, session_id, payloads)
            return True

        return await self.write(conn, run)

    async def _delete_for_swap(
        self,
        conn: Any,
        session_id: str,
        expected: list[Row] | None,
        prune: Callable[[str], bool] | None,
    ) -> bool:
        if expected is None:
            everything = self.sql(_delete, None)
            await self.execute(conn, everything.sql, everything.args(sid=session_id))
            return True
        newest = self.sql(_range, self.key_order, False, False, False, True)
        found = await self.fetch(conn, newest.sql, newest.args(sid=session_id, limit=len(expected)))
        if [(r[0], r[1]) for r in found][::-1] != list(expected):
            return False
        first = expected[0][0]
        if prune is not None:
            older = self.sql(_range, self.key_order, False, False, True, False)
            rows = await self.fetch(conn, older.sql, older.args(sid=session_id, before=first))
            # the oldest rows up to the first that ``prune`` refuses
            pruned = list(itertools.takewhile(lambda row: prune(row[1]), rows))
            if pruned:
                upto = self.sql(_delete, operator.le)
                await self.execute(conn, upto.sql, upto.args(sid=session_id, seq=pruned[-1][0]))
        swapped = self.sql(_delete, operator.ge)
        await self.execute(conn, swapped.sql, swapped.args(sid=session_id, seq=first))
        return True

    async def rewrite(self, conn: Any, session_id: str, rows: list[Row]) -> int:
        """Replace the payload of each existing row ``(seq, payload)`` in one transaction;
        return how many rows were replaced."""
        stmt = self.sql(_rewrite)
        args = [stmt.args(sid=session_id, seq=seq, data=payload) for seq, payload in rows]
        return await self.write(conn, lambda: self.execute_many(conn, stmt.sql, args))

    async def write_at(
        self, conn: Any, session_id: str, rows: list[Row], created: float, updated: float
    ) -> int:
        """In one transaction, unless the session holds rows: store ``rows`` at their numbers,
        raise the counter to the last (never lower it) and set the session's times (epoch
        seconds). Return how many rows the session held (0: written; else nothing was)."""
        count = self.sql(_range, ("seq",), True, False, False, False)

        async def run() -> int:
            # first: locks the counter row, so appends wait for this write
            await self.set_counter(conn, session_id, rows[-1][0], created, updated)
            held = int((await self.fetch(conn, count.sql, count.args(sid=session_id)))[0][0])
            if held:
                raise Rollback(held)
            await self.insert_rows(conn, session_id, rows)
            return 0

        return await self.write(conn, run)

    @abstractmethod
    async def set_counter(
        self, conn: Any, session_id: str, last: int, created: float, updated: float
    ) -> None:
        """In the caller's transaction: raise the counter to ``last`` (never lower it) and set
        the session's times (epoch seconds), creating its row if missing."""

    @abstractmethod
    async def insert_rows(self, conn: Any, session_id: str, rows: list[Row]) -> None:
        """In the caller's transaction: insert ``rows`` ``(seq, payload)``."""

    async def append_if_newest(
        self, conn: Any, session_id: str, payloads: list[str], guard: str, seq: int | None
    ) -> int | None:
        """``append``, in one transaction, only if session ``guard``'s newest number is ``seq``
        (None: no items): the new last number, or None when nothing was written."""
        raise NotImplementedError

    async def pop_if_newest(
        self, conn: Any, session_id: str, guard: str, seq: int | None, newest: int | None
    ) -> tuple[bool, str | None]:
        """``pop``, in one transaction, only if ``guard``'s newest number is ``seq`` and (when
        not None) this session's is ``newest``: ``(True, payload or None)``, else
        ``(False, None)`` and nothing was popped."""
        raise NotImplementedError

    async def prepare_text(self, conn: Any, create: bool) -> None:
        """Make sure the full-text index of these tables exists (its tables and the triggers
        that keep it in step with every write to the messages table), creating it when
        ``create`` (idempotent, safe across processes); else raise BackendDataError."""
        raise NotImplementedError

    async def index_session(self, conn: Any, session_id: str, after: int | None) -> int | None:
        """One short transaction of a session's first indexing. ``after`` None: register the
        session (from then on triggers index its writes) and return 0, or None when it holds
        no items. Else index up to ``BACKFILL_ROWS`` of its items numbered after ``after``
        and return the last number read, or None once none is left: the session is then
        ready and ``search_text`` answers."""
        register, backfill, step = self.text_writes(TextTables.of(self.t))
        if after is None:
            held = self.sql(_held)

            async def enrol() -> int | None:
                # Locks the counter row: an append in flight commits first (the backfill
                # reads it); any later one finds the session registered (its trigger indexes).
                if not await self.fetch(conn, held.sql, held.args(sid=session_id)):
                    return None  # no items: the first search after the first write registers it
                await self.execute(conn, register, [session_id])
                return 0

            return await self.write(conn, enrol)
        nth, ready = self.sql(_nth), self.sql(_ready, TextTables.of(self.t).registry)
        args = nth.args(sid=session_id, after=after, skip=step - 1)

        async def fill() -> int | None:
            found = await self.fetch(conn, nth.sql, args)
            last = int(found[0][0]) if found else None
            await self.execute(conn, backfill, [session_id, after, last])
            if last is None:
                await self.execute(conn, ready.sql, ready.args(sid=session_id))
            return last

        last = await self.write(conn, fill)
        if last is None:
            await self.backfilled(conn, after)
        return last

    def text_writes(self, x: TextTables) -> tuple[str, str, int]:
        """``index_session``'s SQL: register session 1; index session 1's items numbered
        after 2 up to 3 (NULL: all); and the items a step indexes (``BACKFILL_ROWS``)."""
        raise NotImplementedError

    async def backfilled(self, conn: Any, after: int) -> None:
        """After the last step of a session's indexing, the one that began after ``after``."""
        return None

    async def search_text(
        self, conn: Any, session_id: str, words: list[str], limit: int, filters: TextFilters
    ) -> list[tuple[int, str, float]] | None:
        """The session's ``limit`` best ``(seq, payload, score)`` for ``words``, best first;
        None when the session is not indexed yet (``index_session`` first)."""
        raise NotImplementedError

    async def drop_text(self, conn: Any) -> None:
        """Remove the full-text index of these tables (triggers first), in one transaction
        where the database's DDL is transactional."""
        raise NotImplementedError

    def is_closed(self, conn: Any) -> bool:
        """Whether the driver already knows ``conn`` is closed (no I/O)."""
        return False

    def abort(self, conn: Any) -> None:
        """Break ``conn`` so an operation waiting on it fails now (the command timeout)."""
        raise NotImplementedError

    @abstractmethod
    def unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the server cannot be reached (or the connection broke)."""

    @abstractmethod
    def retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` rolled the whole transaction back and a retry may succeed
        (deadlock, serialization failure)."""

    @abstractmethod
    def missing_table(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table or column does not exist."""


@dataclass(frozen=True)
class Refused:
    """A pop's check raised ``error``; its transaction was rolled back."""

    error: Exception


def run_check(check: Callable[[str], Any], payload: str) -> Any:
    """``check(payload)``, or :class:`Refused` carrying the Exception it raised."""
    try:
        return check(payload)
    except Exception as exc:
        return Refused(exc)


def filter_clause(
    filters: TextFilters,
    templates: tuple[str, str, str],
    mark: Callable[[int], str],
    *,
    array: bool = False,
    number: Callable[[float], Any] = lambda bound: bound,
) -> tuple[str, list[Any]]:
    """SQL (`` AND ..``) and parameters of ``search_text``'s filters. ``templates``: a field
    ``{f}`` is a string among ``{values}``, is a number, is ``{op}`` a bound ``{mark}``;
    ``mark(i)`` renders parameter i (0-based among these); ``array``: an ``equal``'s values
    are one parameter (a list); ``number`` converts a bound for the driver."""
    is_string, is_number, compare = templates
    where, args = "", list[Any]()

    def put(value: Any) -> str:
        args.append(value)
        return mark(len(args) - 1)

    for f, values in filters.equal:
        marks = put(list(values)) if array else ", ".join(put(v) for v in values)
        where += " AND " + is_string.format(f=f, values=marks)
    for f, low, high in filters.between:
        where += " AND " + is_number.format(f=f)
        for bound, op in ((low, ">="), (high, "<=")):
            if bound is not None:
                where += " AND " + compare.format(f=f, op=op, mark=put(number(bound)))
    return where, args


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (SQLAlchemy's ``orig``, ``__cause__``), outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return seen


def check_version(t: Tables, version: Any) -> None:
    """Raise BackendDataError unless ``version`` is the schema version this code reads."""
    if version is None:
        raise BackendDataError(
            f"table {t.schema} has no schema version for {t.messages}; create the tables with "
            "create_tables=True (or the statements in docs/sqlalchemy.md)"
        )
    if int(version) > SCHEMA_VERSION:
        raise BackendDataError(
            f"tables {t.sessions}/{t.messages} have schema version {version}, newer than "
            f"version {SCHEMA_VERSION} that this agent_sessions reads; upgrade agent_sessions"
        )
    if int(version) < SCHEMA_VERSION:  # pragma: no cover - no older version exists yet
        raise BackendDataError(
            f"tables {t.sessions}/{t.messages} have schema version {version}; migrate them as "
            "described in docs/sqlalchemy.md"
        )
