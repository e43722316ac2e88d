"""What the SQLAlchemy backend's per-dialect SQL modules share: table names and their interface.

Each dialect module runs its SQL directly on the driver connection that SQLAlchemy's pool hands
out, so a statement costs one driver call, not a trip through SQLAlchemy's execution layer.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.base import Row
from ...core.sqltext import check_identifier
from ...errors import BackendDataError

SCHEMA_VERSION = 1
"""The layout these modules read and write; stored per messages table in the schema table."""
BACKFILL_ROWS = 5000
"""Items a session's first search indexes per transaction (a writer waits for one at most)."""


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
    Lower-cased, first occurrence kept, at most 64."""
    pieces = (p.lower() for w in words for p in _PIECE.findall(w))
    return list(dict.fromkeys(pieces))[:64]


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


class SqlDialect(ABC):
    """The SQL of one database family, run on a driver connection ``conn``."""

    #: the SQLAlchemy pool's check-in must run inside SQLAlchemy's greenlet (driver I/O).
    checkin_needs_greenlet = True
    #: operations on one engine must not overlap (SQLite's shared static connection).
    exclusive = False
    #: a connection an operation failed on is dropped (False: it stays usable and is kept).
    discard_on_error = True
    #: the driver has no cheap statement timeout of its own: the session enforces one.
    watchdog = False

    def __init__(self, tables: Tables) -> None:
        self.t = tables

    @abstractmethod
    async def prepare(self, conn: Any, create: bool) -> None:
        """Create the tables when ``create`` (idempotent, safe across processes), then check
        that they exist and carry a schema version this code reads."""

    @abstractmethod
    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        """Store ``payloads`` as one transaction; return the last sequence number assigned."""

    async def append_unnumbered(self, conn: Any, session_id: str, payloads: list[str]) -> None:
        """``append`` for a caller that does not need the numbers."""
        await self.append(conn, session_id, payloads)

    @abstractmethod
    async def load(
        self, conn: Any, session_id: str, limit: int | None, after: int | None, before: int | None
    ) -> list[Row]:
        """Return the latest ``limit`` rows (all when None) with after < seq < before, oldest
        first."""

    @abstractmethod
    async def pop(self, conn: Any, session_id: str) -> str | None:
        """Delete the newest row and return its payload; None when there is none."""

    @abstractmethod
    async def pop_checked(self, conn: Any, session_id: str, check: Callable[[str], Any]) -> Any:
        """Delete the newest row and return ``check(payload)`` in one transaction (None when
        there is none); when ``check`` raises an Exception, roll back and return it as
        :class:`Refused` (the connection stays usable)."""

    @abstractmethod
    async def clear(self, conn: Any, session_id: str) -> None:
        """Delete the session's rows, keeping its counter so no sequence number is reused
        (a purge that read number N before the clear must not hit items written after it)."""

    @abstractmethod
    async def delete_before(self, conn: Any, session_id: str, before: int) -> int:
        """Delete the session's rows with seq < ``before`` in one statement; return how many."""

    async def replace_rows(
        self, conn: Any, session_id: str, expected: list[Row] | None, payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        """The SDK compaction hook's swap in one transaction (see ``core.sdk_compaction``)."""
        raise NotImplementedError

    @abstractmethod
    async def rewrite(self, conn: Any, session_id: str, rows: list[Row]) -> int:
        """Replace the payload of each existing row ``(seq, payload)`` in one transaction;
        return how many rows were replaced."""

    @abstractmethod
    async def write_at(
        self, conn: Any, session_id: str, rows: list[Row], created: float, updated: float
    ) -> int:
        """In one transaction, unless the session holds rows: store ``rows`` at their numbers,
        raise the counter to the last (never lower it) and set the session's times (epoch
        seconds). Return how many rows the session held (0: written; else nothing was)."""

    @abstractmethod
    async def count(self, conn: Any, session_id: str, after: int | None, before: int | None) -> int:
        """Count the session's rows with after < seq < before."""

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
        raise NotImplementedError

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


@functools.lru_cache(maxsize=64)
def _range_sql(table: str, mark: str, count: bool, after: bool, before: bool, limit: bool) -> str:
    marks = iter([f"${i}" for i in range(1, 5)] if mark == "$" else [mark] * 4)
    sql = f"SELECT {'count(*)' if count else 'seq, message_data'} FROM {table} "
    sql += f"WHERE session_id = {next(marks)}"
    sql += f" AND seq > {next(marks)}" if after else ""
    sql += f" AND seq < {next(marks)}" if before else ""
    if count:
        return sql
    return sql + (f" ORDER BY seq DESC LIMIT {next(marks)}" if limit else " ORDER BY seq")


def range_query(
    table: str, mark: str, session_id: str, after: int | None, before: int | None,
    limit: int | None = None, *, count: bool = False,
) -> tuple[str, list[Any]]:
    """The SELECT of a session's rows (or with ``count``, of their count) in a range, with a
    limit the newest ``limit`` newest first, and its parameters; ``mark`` is the
    placeholder (``$``: numbered ``$1``..)."""
    args: list[Any] = [session_id, *(b for b in (after, before, limit) if b is not None)]
    key = (count, after is not None, before is not None, limit is not None)
    return _range_sql(table, mark, *key), args


def filter_clause(
    filters: TextFilters, templates: tuple[str, str, str], mark: Callable[[int], str], *,
    array: bool = False, number: Callable[[float], Any] = lambda bound: bound,
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


async def delete_for_swap(
    fetch: Callable[[str, tuple[Any, ...]], Awaitable[list[Row]]],
    execute: Callable[[str, tuple[Any, ...]], Awaitable[object]],
    messages: str, marks: tuple[str, str], session_id: str, expected: list[Row] | None,
    prune: Callable[[str], bool] | None, *, order: tuple[str, ...] = ("seq",),
) -> bool:
    """The deleting half of ``replace_rows``, inside the caller's transaction: return False,
    deleting nothing, unless the newest ``len(expected)`` rows are ``expected``; else delete
    them (every row when ``expected`` is None) and the oldest rows ``prune`` accepts.

    ``marks`` are the dialect's first two placeholders; ``order`` the columns that order a
    session's rows by seq along its index.
    """
    a, b = marks
    where = f"FROM {messages} WHERE session_id = {a}"
    if expected is None:
        await execute(f"DELETE {where}", (session_id,))
        return True
    newest = ", ".join(f"{column} DESC" for column in order)
    rows = await fetch(
        f"SELECT seq, message_data {where} ORDER BY {newest} LIMIT {b}",
        (session_id, len(expected)),
    )
    if rows[::-1] != list(expected):
        return False
    first = expected[0][0]
    if prune is not None:
        older = await fetch(
            f"SELECT seq, message_data {where} AND seq < {b} ORDER BY {', '.join(order)}",
            (session_id, first),
        )
        # the oldest rows up to the first that ``prune`` refuses
        pruned = list(itertools.takewhile(lambda row: prune(row[1]), older))
        if pruned:
            await execute(f"DELETE {where} AND seq <= {b}", (session_id, pruned[-1][0]))
    await execute(f"DELETE {where} AND seq >= {b}", (session_id, first))
    return True
