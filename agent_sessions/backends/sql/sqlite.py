"""SQLite SQL for the SQLAlchemy backend (``sqlite+aiosqlite``), run on aiosqlite connections.

Writes take the write lock up front (``BEGIN IMMEDIATE``); operations on one engine are also
serialized in-process, since SQLAlchemy may hand one shared connection to several tasks (an
in-memory database uses a single static connection). The connection is kept between operations
and after errors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Sequence
from typing import Any

from sqlalchemy.engine import Dialect

from ...core.base import Row
from ...core.sqltext import sqlite_indexable, sqlite_time
from ...core.textsearch import TEXT_MARK, sqlite_search_text
from ...errors import BackendDataError
from .common import (
    BACKFILL_ROWS,
    SCHEMA_VERSION,
    SqlDialect,
    Tables,
    TextFilters,
    TextTables,
    causes,
    filter_clause,
    text_missing,
)


def create_statements(t: Tables) -> list[str]:
    """The DDL of schema version 1 (TEXT compares byte by byte in SQLite)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {t.schema} (table_name TEXT PRIMARY KEY, "
        "version INTEGER NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {t.sessions} (session_id TEXT PRIMARY KEY, "
        "last_seq INTEGER NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
        "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
        f"CREATE TABLE IF NOT EXISTS {t.messages} (session_id TEXT NOT NULL, "
        "seq INTEGER NOT NULL, message_data TEXT NOT NULL, "
        "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (session_id, seq))",
        f"INSERT OR IGNORE INTO {t.schema} (table_name, version) "
        f"VALUES ('{t.messages}', {SCHEMA_VERSION})",
    ]


_BODY = sqlite_search_text("json_extract({row}.message_data, '$.text')")
"""What the index holds for an item: its text and its CJK terms (``core.textsearch``)."""


def text_statements(t: Tables) -> list[str]:
    """The DDL of the full-text index (Capability.TEXT_SEARCH), made on the first
    ``search_text``: a table of the registered sessions' texts keyed by ``(session_id, seq)``,
    an FTS5 table over it (external content, ``unicode61`` tokenizer, ranked by ``bm25``),
    a table of the registered sessions, and triggers: on the messages table (insert, update of
    ``message_data``, delete), on the sessions table (delete: unregister), and on the texts
    table (keeping the FTS5 table in step)."""
    x = TextTables.of(t)
    fts = x.name("fts")
    add = (
        f"INSERT OR REPLACE INTO {x.index} (session_id, seq, body) SELECT NEW.session_id, "
        f"NEW.seq, {_BODY.format(row='NEW')} WHERE EXISTS (SELECT 1 FROM "
        f"{x.registry} WHERE session_id = NEW.session_id) AND {sqlite_indexable('NEW')};"
    )
    return [
        f"CREATE TABLE IF NOT EXISTS {x.registry} (session_id TEXT PRIMARY KEY, "
        "ready INTEGER NOT NULL DEFAULT 0)",
        f"CREATE TABLE IF NOT EXISTS {x.index} (id INTEGER PRIMARY KEY, session_id TEXT NOT "
        "NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, UNIQUE (session_id, seq))",
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(body, content='{x.index}', "
        "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
        f"CREATE TRIGGER IF NOT EXISTS {x.name('fts_ins')} AFTER INSERT ON {x.index} BEGIN "
        f"INSERT INTO {fts} (rowid, body) VALUES (NEW.id, NEW.body); END",
        f"CREATE TRIGGER IF NOT EXISTS {x.name('fts_del')} AFTER DELETE ON {x.index} BEGIN "
        f"INSERT INTO {fts} ({fts}, rowid, body) VALUES ('delete', OLD.id, OLD.body); END",
        f"CREATE TRIGGER IF NOT EXISTS {x.name('ins')} AFTER INSERT ON {t.messages} "
        f"BEGIN /* {TEXT_MARK} */ {add} END",
        f"CREATE TRIGGER IF NOT EXISTS {x.name('upd')} AFTER UPDATE OF message_data ON "
        f"{t.messages} WHEN OLD.message_data IS NOT NEW.message_data BEGIN "
        f"DELETE FROM {x.index} WHERE session_id = OLD.session_id AND seq = OLD.seq; {add} END",
        f"CREATE TRIGGER IF NOT EXISTS {x.name('del')} AFTER DELETE ON {t.messages} BEGIN "
        f"DELETE FROM {x.index} WHERE session_id = OLD.session_id AND seq = OLD.seq; END",
        f"CREATE TRIGGER IF NOT EXISTS {x.name('off')} AFTER DELETE ON {t.sessions} BEGIN "
        f"DELETE FROM {x.registry} WHERE session_id = OLD.session_id; END",
    ]


def _text_names(t: Tables) -> list[str]:
    x = TextTables.of(t)
    return [x.registry, x.index] + [
        x.name(suffix) for suffix in ("fts", "fts_ins", "fts_del", "ins", "upd", "del", "off")
    ]


def _drop_statements(t: Tables) -> list[str]:
    names = _text_names(t)
    # triggers first: a trigger naming a dropped table fails writes
    drops = [f"DROP TRIGGER IF EXISTS {name}" for name in names[3:]]
    return drops + [f"DROP TABLE IF EXISTS {name}" for name in names[2::-1]]


async def _one(conn: Any, sql: str, args: Any) -> Any:
    """The first row of ``sql`` (None when there is none), its cursor closed."""
    cur = await conn.execute(sql, args)
    row = await cur.fetchone()
    await cur.close()
    return row


async def _changed(statement: Awaitable[Any]) -> int:
    """How many rows ``statement`` changed (summed over an ``executemany``), its cursor closed."""
    cur = await statement
    changed = int(cur.rowcount)
    await cur.close()
    return changed


async def _execute_all(conn: Any, statements: list[str]) -> None:
    for statement in statements:
        await conn.execute(statement)


_FIELD = "m.message_data, '$.{f}'"
_FILTERS = (
    f"json_type({_FIELD}) = 'text' AND json_extract({_FIELD}) IN ({{values}})",
    f"json_type({_FIELD}) IN ('integer', 'real')",
    f"json_extract({_FIELD}) {{op}} {{mark}}",
)
"""``search_text``'s filter templates (``filter_clause``)."""


class SqliteDialect(SqlDialect):
    """SQL for SQLite 3.35+ (``RETURNING``)."""

    exclusive = True
    # Dropping the connection of an in-memory database would drop the database; aiosqlite
    # finishes a statement even when its caller is cancelled, and writes roll back on error.
    discard_on_error = False

    def __init__(self, tables: Tables, dialect: Dialect) -> None:
        super().__init__(tables, dialect)
        s, m = tables.sessions, tables.messages
        self._bump = (
            f"INSERT INTO {s} (session_id, last_seq) VALUES (?, ?) ON CONFLICT(session_id) "
            "DO UPDATE SET last_seq = last_seq + excluded.last_seq, "
            "updated_at = CURRENT_TIMESTAMP RETURNING last_seq"
        )
        self._insert = f"INSERT INTO {m} (session_id, seq, message_data) VALUES (?, ?, ?)"
        self._pop = (
            f"DELETE FROM {m} WHERE session_id = ? AND seq = (SELECT seq FROM {m} "
            "WHERE session_id = ? ORDER BY seq DESC LIMIT 1) RETURNING message_data"
        )

    async def begin(self, conn: Any) -> None:
        await conn.execute("BEGIN IMMEDIATE")

    async def fetch(self, conn: Any, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        cur = await conn.execute(sql, args)
        return await cur.fetchall()  # type: ignore[no-any-return]

    async def execute(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        return await _changed(conn.execute(sql, args))

    async def execute_many(self, conn: Any, sql: str, rows: list[list[Any]]) -> int:
        return await _changed(conn.executemany(sql, rows))

    async def create_tables(self, conn: Any) -> None:
        await self.write(conn, lambda: _execute_all(conn, create_statements(self.t)))

    async def prepare_text(self, conn: Any, create: bool) -> None:
        t = self.t
        names = _text_names(t)
        marks = ", ".join("?" * len(names))
        sql = f"SELECT COUNT(*) FROM sqlite_master WHERE name IN ({marks})"
        sql += " UNION ALL SELECT instr(sql, ?) > 0 FROM sqlite_master WHERE name = ?"
        cur = await conn.execute(sql, [*names, TEXT_MARK, names[5]])
        rows = await cur.fetchall()
        await cur.close()
        if int(rows[0][0]) == len(names) and len(rows) == 2 and rows[1][0]:
            return
        if not create:
            raise text_missing(t, "sqlite")
        # Absent, or built under another tokenization policy (TEXT_MARK): dropped and made
        # again in one transaction; each session's next search indexes it with today's terms.
        drops = _drop_statements(t)
        try:
            await self.write(conn, lambda: _execute_all(conn, drops + text_statements(t)))
        except sqlite3.OperationalError as exc:
            if "fts5" in str(exc):
                raise BackendDataError(
                    f"this SQLite has no FTS5 ({exc}); search_text needs an SQLite built "
                    "with FTS5 (Python's own usually is)"
                ) from exc
            raise

    async def drop_text(self, conn: Any) -> None:
        drops = _drop_statements(self.t)
        await self.write(conn, lambda: _execute_all(conn, drops))

    def text_writes(self, x: TextTables) -> tuple[str, str, int]:
        return (
            f"INSERT OR IGNORE INTO {x.registry} (session_id) VALUES (?)",
            f"INSERT OR IGNORE INTO {x.index} (session_id, seq, body) SELECT m.session_id, "
            f"m.seq, {_BODY.format(row='m')} FROM {self.t.messages} m "
            "WHERE m.session_id = ? AND m.seq > ? AND m.seq <= coalesce(?, m.seq) "
            f"AND {sqlite_indexable('m')} ORDER BY m.seq",
            BACKFILL_ROWS,
        )

    async def search_text(
        self, conn: Any, session_id: str, words: list[str], limit: int, filters: TextFilters
    ) -> list[tuple[int, str, float]] | None:
        t, x = self.t, TextTables.of(self.t)
        fts = x.name("fts")
        sql = f"SELECT 1 FROM {x.registry} WHERE session_id = ? AND ready"
        if await _one(conn, sql, (session_id,)) is None:
            return None
        # an int beyond 64 bits binds as a float (same order)
        where, args = filter_clause(
            filters, _FILTERS, lambda i: "?", number=lambda b: b if abs(b) < 2**63 else float(b)
        )
        match = " OR ".join(f'"{w}"' for w in words)
        # bm25() is lower for better matches: the score is its negation.
        cur = await conn.execute(
            f"SELECT m.seq, m.message_data, -bm25({fts}) AS score FROM {fts} "
            f"JOIN {x.index} i ON i.id = {fts}.rowid "
            f"JOIN {t.messages} m ON m.session_id = i.session_id AND m.seq = i.seq "
            f"WHERE {fts} MATCH ? AND i.session_id = ?{where} "
            "ORDER BY score DESC, m.seq LIMIT ?",
            (match, session_id, *args, limit),
        )
        rows = await cur.fetchall()
        await cur.close()
        return [(int(r[0]), str(r[1]), float(r[2])) for r in rows]

    async def add(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        """In the caller's transaction: advance the counter and insert ``payloads`` numbered
        from it; the last number."""
        n = len(payloads)
        last = int((await _one(conn, self._bump, (session_id, n)))[0])
        rows = [(session_id, last - n + 1 + i, p) for i, p in enumerate(payloads)]
        await conn.executemany(self._insert, rows)
        return last

    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        return int(await self.write(conn, lambda: self.add(conn, session_id, payloads)))

    async def _newest(self, conn: Any, session_id: str) -> int | None:
        sql = f"SELECT max(seq) FROM {self.t.messages} WHERE session_id = ?"
        row = await _one(conn, sql, (session_id,))
        return None if row[0] is None else int(row[0])

    async def append_if_newest(
        self, conn: Any, session_id: str, payloads: list[str], guard: str, seq: int | None
    ) -> int | None:
        async def run() -> int | None:  # BEGIN IMMEDIATE: no other writer until COMMIT
            if await self._newest(conn, guard) != seq:
                return None
            return await self.add(conn, session_id, payloads)

        return await self.write(conn, run)

    async def pop_if_newest(
        self, conn: Any, session_id: str, guard: str, seq: int | None, newest: int | None
    ) -> tuple[bool, str | None]:
        async def run() -> tuple[bool, str | None]:
            if await self._newest(conn, guard) != seq or (
                newest is not None and await self._newest(conn, session_id) != newest
            ):
                return False, None
            value = await self.pop_in(conn, session_id)
            return True, None if value is None else str(value)

        return await self.write(conn, run)

    async def pop_in(self, conn: Any, session_id: str) -> Any:
        """Delete the newest row and return its payload (None: no row), RETURNING drained so
        a COMMIT or a check may follow."""
        cur = await conn.execute(self._pop, (session_id, session_id))
        rows = await cur.fetchall()
        return rows[0][0] if rows else None

    async def pop(self, conn: Any, session_id: str) -> str | None:
        value = await self.write(conn, lambda: self.pop_in(conn, session_id))
        return None if value is None else str(value)

    async def set_counter(
        self, conn: Any, session_id: str, last: int, created: float, updated: float
    ) -> None:
        await conn.execute(
            f"INSERT INTO {self.t.sessions} (session_id, last_seq, created_at, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
            "last_seq = MAX(last_seq, excluded.last_seq), "
            "created_at = excluded.created_at, updated_at = excluded.updated_at",
            (session_id, last, sqlite_time(created), sqlite_time(updated)),
        )

    async def insert_rows(self, conn: Any, session_id: str, rows: list[Row]) -> None:
        await conn.executemany(self._insert, [(session_id, seq, p) for seq, p in rows])

    def unavailable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, sqlite3.OperationalError) and "unable to open" in str(e)
            for e in causes(exc)
        )

    def retryable(self, exc: BaseException) -> bool:
        return False  # BEGIN IMMEDIATE already waits busy_timeout for the write lock

    def missing_table(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, sqlite3.OperationalError)
            and ("no such table" in str(e) or "no such column" in str(e))
            for e in causes(exc)
        )
