"""MariaDB / MySQL SQL for the SQLAlchemy backend, run on asyncmy or aiomysql connections.

- append: one round trip of ``START TRANSACTION; INSERT .. ON DUPLICATE KEY UPDATE last_seq =
  LAST_INSERT_ID(last_seq + n); INSERT .. VALUES (.., LAST_INSERT_ID() - k, ..), ..; COMMIT``.
  The first INSERT locks the session row (writers of one session queue up, so numbers are
  contiguous and follow commit order) and reports the new counter in its OK packet; the items'
  numbers are derived from it by the server. A batch above the server's ``max_allowed_packet``
  is sent as several INSERTs in one transaction instead. When the caller needs no numbers
  (``add_items``), MariaDB gets the same transaction as one compound statement
  (``BEGIN NOT ATOMIC .. END``), answered by a single OK packet after the commit.
- pop: on MariaDB one ``DELETE .. ORDER BY session_id DESC, seq DESC LIMIT 1 RETURNING``: the
  row lock makes a concurrent pop skip to the next row. On MySQL, which lacks
  ``DELETE .. RETURNING``, ``SELECT .. FOR UPDATE`` then ``DELETE`` in one transaction.

Session ids use a binary NO PAD collation, so ``'a'``, ``'A'`` and ``'a '`` are three ids.
Works whether or not the connection is in autocommit mode; sessions opened from a URL use
autocommit and READ COMMITTED, which saves a round trip per read and avoids gap-lock deadlocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.engine import Dialect

from ...core.base import Row
from ...core.textsearch import (
    TEXT_MARK,
    mariadb_search_text,
    mariadb_terms_function,
    mariadb_words,
)
from ...errors import BackendDataError, ItemTooLargeError
from .common import (
    BACKFILL_ROWS,
    SCHEMA_VERSION,
    Refused,
    SqlDialect,
    Tables,
    TextFilters,
    TextTables,
    causes,
    filter_clause,
    run_check,
    text_missing,
)

_GONE = {1040, 1053, 1927, 2002, 2003, 2005, 2006, 2013, 2026, 2055}
"""Client/server error codes meaning the server is unreachable or the connection broke."""
_DRIVERS = ("asyncmy", "aiomysql", "pymysql")
_PACKET_CAP = 16 * 1024 * 1024  # the drivers' own default client-side limit
_ROW_OVERHEAD = 64
_BLOCK = "BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;"
"""Opens a MariaDB compound statement that rolls back and re-raises on any error."""


def _sid(mariadb: bool) -> str:
    """The session id column (NO PAD binary collation: compared byte by byte, trailing spaces
    included)."""
    collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
    return f"VARCHAR(512) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"


def create_statements(t: Tables, mariadb: bool = True) -> list[str]:
    """The DDL of schema version 1."""
    sid = _sid(mariadb)
    return [
        f"CREATE TABLE IF NOT EXISTS {t.schema} (table_name VARCHAR(64) CHARACTER SET ascii "
        "COLLATE ascii_bin NOT NULL PRIMARY KEY, version INT NOT NULL) ENGINE=InnoDB",
        f"CREATE TABLE IF NOT EXISTS {t.sessions} (session_id {sid} PRIMARY KEY, "
        "last_seq BIGINT NOT NULL, "
        "created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
        # LONGTEXT: a TEXT column holds only 64 KiB.
        f"CREATE TABLE IF NOT EXISTS {t.messages} (session_id {sid}, seq BIGINT NOT NULL, "
        "message_data LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, "
        "created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "PRIMARY KEY (session_id, seq)) ENGINE=InnoDB",
        f"INSERT IGNORE INTO {t.schema} (table_name, version) "
        f"VALUES ('{t.messages}', {SCHEMA_VERSION})",
    ]


_TEXT = "JSON_EXTRACT({row}.message_data, '$.text')"
_BODY = f"CONVERT(JSON_UNQUOTE({_TEXT}) USING utf8mb4)"
"""An item's text in the default collation: under ``utf8mb4_bin`` (``message_data``'s) the
server's regular expressions match bytes, not characters."""
_INDEXABLE = f"JSON_TYPE({_TEXT}) = 'STRING' AND JSON_UNQUOTE({_TEXT}) <> ''"
_NUMBER_TYPES = "'INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL'"
_FIELD = "JSON_EXTRACT(m.message_data, '$.{f}')"
_FILTERS = (
    f"JSON_TYPE({_FIELD}) = 'STRING' "
    f"AND JSON_UNQUOTE({_FIELD}) COLLATE utf8mb4_bin IN ({{values}})",
    f"JSON_TYPE({_FIELD}) IN ({_NUMBER_TYPES})",
    f"{_FIELD} + 0 {{op}} {{mark}}",
)
"""``search_text``'s filter templates (``filter_clause``)."""
_DENIED = {1044, 1142, 1227, 1419}
"""Access denied to the database or a command; SUPER needed (triggers with binary logging)."""


def text_statements(t: Tables, mariadb: bool = True) -> list[str]:
    """The DDL of the full-text index (Capability.TEXT_SEARCH), made on the first
    ``search_text``: an InnoDB table with a FULLTEXT index on the items' text (made with
    ``innodb_ft_enable_stopword`` off, so no word is dropped as a stop word), a table of the
    registered sessions, and two row triggers on the messages table (insert; update of
    ``message_data``) that look the session up in the registry before reading the item.
    Deletes cascade through foreign keys: InnoDB's cascades do not fire triggers, and a
    foreign key also covers a user's own cascade into the messages table."""
    x, sid = TextTables.of(t), _sid(mariadb)
    ins, upd, terms = x.name("ins"), x.name("upd"), x.name("terms")
    add = (
        f"INSERT INTO {x.index} (session_id, seq, body) VALUES (NEW.session_id, NEW.seq, "
        f"{mariadb_search_text(_BODY.format(row='NEW'), terms, mariadb)}) "
        "ON DUPLICATE KEY UPDATE body = VALUES(body);"
    )
    registered = f"EXISTS (SELECT 1 FROM {x.registry} WHERE session_id = NEW.session_id)"
    return [
        f"CREATE TABLE IF NOT EXISTS {x.registry} (session_id {sid} PRIMARY KEY, "
        "ready BOOLEAN NOT NULL DEFAULT FALSE, "
        f"FOREIGN KEY (session_id) REFERENCES {t.sessions} (session_id) ON DELETE CASCADE) "
        "ENGINE=InnoDB",
        # The words of the text compare without case (the character set's default collation).
        f"CREATE TABLE IF NOT EXISTS {x.index} (session_id {sid}, seq BIGINT NOT NULL, "
        "body LONGTEXT CHARACTER SET utf8mb4 NOT NULL, PRIMARY KEY (session_id, seq), "
        f"FULLTEXT KEY {x.name('ft')} (body), FOREIGN KEY (session_id, seq) REFERENCES "
        f"{t.messages} (session_id, seq) ON DELETE CASCADE) ENGINE=InnoDB",
        f"DROP FUNCTION IF EXISTS {terms}",
        # The text and its CJK terms (core.textsearch: one tokenization policy everywhere).
        mariadb_terms_function(terms, mariadb),
        f"DROP TRIGGER IF EXISTS {ins}",
        f"CREATE TRIGGER {ins} AFTER INSERT ON {t.messages} FOR EACH ROW BEGIN "
        f"IF {registered} AND {_INDEXABLE.format(row='NEW')} THEN {add} END IF; END",
        f"DROP TRIGGER IF EXISTS {upd}",
        f"CREATE TRIGGER {upd} AFTER UPDATE ON {t.messages} FOR EACH ROW BEGIN "
        f"IF NOT (NEW.message_data <=> OLD.message_data) AND {registered} THEN "
        f"DELETE FROM {x.index} WHERE session_id = OLD.session_id AND seq = OLD.seq; "
        f"IF {_INDEXABLE.format(row='NEW')} THEN {add} END IF; END IF; END",
    ]


@functools.lru_cache(maxsize=64)
def _numbered_values(n: int) -> str:
    """The VALUES rows of ``n`` items numbered up to the counter the bump just set."""
    return ",".join(f"(%s,LAST_INSERT_ID()-{n - 1 - i},%s)" for i in range(n))


def _code(exc: BaseException) -> int | None:
    if not type(exc).__module__.startswith(_DRIVERS):
        return None
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


@contextlib.asynccontextmanager
async def _rolled_back_on_error(conn: Any) -> AsyncIterator[None]:
    try:
        yield
    except BaseException:
        await conn.rollback()
        raise


@contextlib.asynccontextmanager
async def _store_lock(cur: Any, t: Tables) -> AsyncIterator[None]:
    """Hold the server-wide named lock of these tables (DDL, safe across processes)."""
    name = f"agent_sessions:{t.lock_key():x}"
    await cur.execute("SELECT GET_LOCK(%s, 60)", (name,))
    await cur.fetchall()
    try:
        yield
    finally:
        await cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        await cur.fetchall()


class MySQLDialect(SqlDialect):
    """SQL for MariaDB 10.5+ (and MySQL 8, through the locking pop)."""

    watchdog = True
    now = "CURRENT_TIMESTAMP(6)"
    # Ordering by the whole key: with ``ORDER BY seq`` alone MariaDB filesorts the session's
    # rows (O(history)) when the connection collation differs from the id's.
    key_order = ("session_id", "seq")

    def __init__(self, tables: Tables, dialect: Dialect) -> None:
        super().__init__(tables, dialect)
        s, m = tables.sessions, tables.messages
        self.mariadb = bool(getattr(dialect, "is_mariadb", False))
        self.max_packet = _PACKET_CAP
        self._bump = (
            f"INSERT INTO {s} (session_id, last_seq) VALUES (%s, LAST_INSERT_ID(%s)) "
            "ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + %s), "
            "updated_at = CURRENT_TIMESTAMP(6)"
        )
        self._insert = f"INSERT INTO {m} (session_id, seq, message_data) VALUES "
        self._pop = (
            f"DELETE FROM {m} WHERE session_id = %s ORDER BY session_id DESC, seq DESC LIMIT 1 "
            "RETURNING message_data"
        )
        self._lock_newest = (
            f"SELECT seq, message_data FROM {m} WHERE session_id = %s "
            "ORDER BY seq DESC LIMIT 1 FOR UPDATE"
        )
        self._delete_one = f"DELETE FROM {m} WHERE session_id = %s AND seq = %s"
        # Guarded writes: the guard's counter row is locked first (appends to it wait), then
        # its newest row (pops of it wait); READ COMMITTED reads are of the latest commit.
        self._lock_guard = (
            f"START TRANSACTION;INSERT INTO {s} (session_id, last_seq) VALUES (%s, 0) "
            "ON DUPLICATE KEY UPDATE last_seq = last_seq;"
            f"SELECT seq FROM {m} WHERE session_id = %s ORDER BY seq DESC LIMIT 1 FOR UPDATE"
        )

    async def prepare(self, conn: Any, create: bool) -> None:
        # The server's word, not a driver attribute (asyncmy has no ``charset``): the
        # connection's character set as the driver negotiated it.
        sql = "SELECT @@character_set_connection, @@character_set_client"
        charsets = {str(c).lower() for c in (await self.fetch(conn, sql, ()))[0]}
        if charsets != {"utf8mb4"}:
            raise ValueError(
                f"the MySQL connection uses character set {'/'.join(sorted(charsets))}; "
                "items need utf8mb4: add ?charset=utf8mb4 to the URL (or "
                "connect_args={'charset': 'utf8mb4'})"
            )
        await super().prepare(conn, create)
        rows = await self.read(conn, "SELECT @@max_allowed_packet", ())
        self.max_packet = min(int(rows[0][0]), _PACKET_CAP)

    async def create_tables(self, conn: Any) -> None:
        async with conn.cursor() as cur, _store_lock(cur, self.t):
            for statement in create_statements(self.t, self.mariadb):
                await cur.execute(statement)
            await conn.commit()

    async def prepare_text(self, conn: Any, create: bool) -> None:
        t = self.t
        async with conn.cursor() as cur:
            if await self._text_present(cur):
                await _end_read(conn)
                return
            if not create:
                await _end_read(conn)
                raise text_missing(t, "mysql")
            async with _store_lock(cur, t):
                try:
                    if not await self._text_present(cur):
                        # Absent, or built under another tokenization policy (TEXT_MARK):
                        # dropped and made again; each session's next search re-indexes it.
                        await self._drop_all(cur)
                        await cur.execute("SET SESSION innodb_ft_enable_stopword = OFF")
                        try:
                            for statement in text_statements(t, self.mariadb):
                                if statement.startswith("DROP "):
                                    continue  # dropped above, only what exists (no warning)
                                await cur.execute(statement)
                        finally:
                            await cur.execute("SET SESSION innodb_ft_enable_stopword = DEFAULT")
                    await conn.commit()
                except Exception as exc:
                    if any(_code(e) in _DENIED for e in causes(exc)):
                        raise BackendDataError(
                            f"cannot create the full-text index of {t.messages} ({exc}): the "
                            "user needs the CREATE, REFERENCES, INDEX and TRIGGER privileges "
                            "once (and SUPER, or log_bin_trust_function_creators=1, where "
                            "binary logging is on); run "
                            "agent_sessions.backends.sql.mysql.text_statements() as such a user"
                        ) from exc
                    raise

    async def drop_text(self, conn: Any) -> None:
        async with conn.cursor() as cur:
            await self._drop_all(cur)
        await _end_read(conn)

    async def _drop_all(self, cur: Any) -> None:
        x = TextTables.of(self.t)
        await cur.execute(
            "SELECT trigger_name FROM information_schema.triggers "
            "WHERE trigger_schema = DATABASE() AND trigger_name IN (%s, %s)",
            (x.name("ins"), x.name("upd")),
        )
        existing = {str(r[0]) for r in await cur.fetchall()}
        await cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name IN (%s, %s)",
            (x.index, x.registry),
        )
        (tables,) = await cur.fetchone()
        await cur.execute(
            "SELECT COUNT(*) FROM information_schema.routines "
            "WHERE routine_schema = DATABASE() AND routine_name = %s",
            (x.name("terms"),),
        )
        (function,) = await cur.fetchone()
        # Triggers first: one naming a dropped table would fail every write to the
        # messages table. Only what exists: the driver would print the server's warning.
        for name in (x.name("ins"), x.name("upd")):
            if name in existing:
                await cur.execute(f"DROP TRIGGER IF EXISTS {name}")
        if tables:
            await cur.execute(f"DROP TABLE IF EXISTS {x.index}, {x.registry}")
        if function:
            await cur.execute(f"DROP FUNCTION IF EXISTS {x.name('terms')}")

    async def _text_present(self, cur: Any) -> bool:
        x = TextTables.of(self.t)
        await cur.execute(
            "SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
            "DATABASE() AND table_name IN (%s, %s)) + (SELECT COUNT(*) FROM "
            "information_schema.triggers WHERE trigger_schema = DATABASE() AND "
            "trigger_name IN (%s, %s)) + (SELECT COUNT(*) FROM information_schema.routines "
            "WHERE routine_schema = DATABASE() AND routine_name = %s AND routine_comment = %s)",
            (x.index, x.registry, x.name("ins"), x.name("upd"), x.name("terms"), TEXT_MARK),
        )
        (found,) = await cur.fetchone()
        return int(found) == 5

    def text_writes(self, x: TextTables) -> tuple[str, str, int]:
        return (
            f"INSERT IGNORE INTO {x.registry} (session_id) VALUES (%s)",
            # Shared locks: a pop or rewrite in flight is waited for, so its row is indexed as
            # it ends (or not at all), never as it was; a row its trigger indexed is kept.
            f"INSERT INTO {x.index} (session_id, seq, body) "
            "SELECT m.session_id, m.seq, "
            f"{mariadb_search_text(_BODY.format(row='m'), x.name('terms'), self.mariadb)} "
            f"FROM {self.t.messages} m WHERE m.session_id = %s AND m.seq > %s "
            f"AND m.seq <= COALESCE(%s, m.seq) AND {_INDEXABLE.format(row='m')} "
            "LOCK IN SHARE MODE ON DUPLICATE KEY UPDATE body = body",
            BACKFILL_ROWS,
        )

    async def search_text(
        self, conn: Any, session_id: str, words: list[str], limit: int, filters: TextFilters
    ) -> list[tuple[int, str, float]] | None:
        t, x = self.t, TextTables.of(self.t)
        against = "MATCH (i.body) AGAINST (%s IN NATURAL LANGUAGE MODE)"
        text = " ".join(mariadb_words(words))
        where, args = filter_clause(filters, _FILTERS, lambda i: "%s")
        # Ranked and cut before the payloads are read, in the index alone when nothing filters
        # (100k items, 2-word queries: 3.8-7.9 ms joining every hit, 2.7-4.0 ms this way).
        join = f"JOIN {t.messages} m ON m.session_id = i.session_id AND m.seq = i.seq"
        join = join if where else ""
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT r.ok, s.seq, s.message_data, s.score FROM "
                f"(SELECT EXISTS (SELECT 1 FROM {x.registry} WHERE session_id = %s "
                "AND ready) AS ok) r "
                f"LEFT JOIN (SELECT h.seq, m.message_data, h.score FROM (SELECT i.seq, {against} "
                f"AS score FROM {x.index} i {join} WHERE i.session_id = %s AND {against}{where} "
                "ORDER BY score DESC, i.seq LIMIT %s) h "
                f"JOIN {t.messages} m ON m.session_id = %s AND m.seq = h.seq) s ON TRUE "
                "ORDER BY s.score DESC, s.seq",
                (session_id, text, session_id, text, *args, limit, session_id),
            )
            rows = await cur.fetchall()
        await _end_read(conn)
        if not rows or not rows[0][0]:
            return None
        return [(int(r[1]), str(r[2]), float(r[3])) for r in rows if r[1] is not None]

    def _chunks(self, session_id: str, payloads: list[str]) -> list[list[int]]:
        """Split the batch into INSERTs that fit one packet (almost always just one)."""
        budget = self.max_packet - 1024 - len(self._insert)
        per_row = _ROW_OVERHEAD + 8 * len(session_id)
        # A character takes at most 4 bytes escaped (UTF-8, or a backslash and one byte).
        if 4 * sum(map(len, payloads)) + per_row * len(payloads) <= budget:
            return [list(range(len(payloads)))]
        chunks: list[list[int]] = [[]]
        used = 0
        for i, p in enumerate(payloads):
            size = len(p) if p.isascii() else len(p.encode())
            size += p.count('"') + p.count("\\") + p.count("'") + per_row  # escaping
            if size > budget:
                raise ItemTooLargeError(
                    f"item {i} of the batch needs {size} bytes in a statement, above this "
                    f"server's max_allowed_packet ({self.max_packet}); raise max_allowed_packet "
                    "or store smaller items; nothing of the batch was written",
                    index=i,
                )
            if used + size > budget and chunks[-1]:
                chunks.append([])
                used = 0
            chunks[-1].append(i)
            used += size
        return chunks

    async def _bump_and_insert(
        self, cur: Any, session_id: str, payloads: list[str], chunks: list[list[int]]
    ) -> int:
        """In the caller's transaction: advance the counter, insert ``payloads`` numbered
        from it, one INSERT per chunk (``_chunks``); the last number."""
        n = len(payloads)
        await cur.execute(self._bump, (session_id, n, n))
        last = int(cur.lastrowid)
        rows = [(last - n + 1 + i, p) for i, p in enumerate(payloads)]
        await self._insert_rows(cur, session_id, rows, chunks)
        return last

    async def _insert_rows(
        self, cur: Any, session_id: str, rows: list[Row], chunks: list[list[int]]
    ) -> None:
        """Insert ``rows`` ``(seq, payload)``, one INSERT per chunk of their indexes."""
        for chunk in chunks:
            args = [v for i in chunk for v in (session_id, *rows[i])]
            await cur.execute(self._insert + ",".join(["(%s,%s,%s)"] * len(chunk)), args)

    def _one_trip(self, session_id: str, payloads: list[str]) -> tuple[str, list[Any]]:
        """The counter's bump and the batch's INSERT as one ``;``-joined text, and their
        parameters: the server numbers the items from the counter the bump just set."""
        n = len(payloads)
        args: list[Any] = [session_id, n, n]
        for p in payloads:
            args += (session_id, p)
        return f"{self._bump};{self._insert}{_numbered_values(n)}", args

    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        if len(self._chunks(session_id, payloads)) > 1:
            return await self.write(conn, lambda: self.add(conn, session_id, payloads))
        async with conn.cursor() as cur:
            # One round trip: both drivers enable multi-statements.
            sql, args = self._one_trip(session_id, payloads)
            await cur.execute(f"START TRANSACTION;{sql};COMMIT", args)
            await cur.nextset()
            last = int(cur.lastrowid)
            while await cur.nextset():
                pass
        return last

    async def _lock_guard_then(
        self, cur: Any, guard: str, reads: str = "", args: tuple[Any, ...] = ()
    ) -> list[Any]:
        """Start a transaction that locks ``guard``'s counter and newest rows, then runs
        ``reads`` (locking reads, ``;``-led) in the same round trip: the first row of each
        result (the guard's newest first), or None."""
        await cur.execute(self._lock_guard + reads, (guard, guard, *args))
        await cur.nextset()  # past START TRANSACTION, to the counter's lock
        rows = []
        while await cur.nextset():
            rows.append(await cur.fetchone())
        return rows

    async def append_if_newest(
        self, conn: Any, session_id: str, payloads: list[str], guard: str, seq: int | None
    ) -> int | None:
        chunks = self._chunks(session_id, payloads)  # too large: raises before any I/O
        async with conn.cursor() as cur:
            async with _rolled_back_on_error(conn):
                [newest] = await self._lock_guard_then(cur, guard)
                if (newest and newest[0]) != seq:
                    await conn.rollback()
                    return None
                last = await self._bump_and_insert(cur, session_id, payloads, chunks)
            await conn.commit()
        return last

    async def pop_if_newest(
        self, conn: Any, session_id: str, guard: str, seq: int | None, newest: int | None
    ) -> tuple[bool, str | None]:
        async with conn.cursor() as cur, _rolled_back_on_error(conn):
            found, own = await self._lock_guard_then(
                cur, guard, ";" + self._lock_newest, (session_id,)
            )
            if (found and found[0]) != seq or (newest is not None and (own and own[0]) != newest):
                await conn.rollback()
                return False, None
            if own is not None:
                await cur.execute(self._delete_one + ";COMMIT", (session_id, own[0]))
                while await cur.nextset():
                    pass
            else:
                await conn.commit()
        return True, None if own is None else str(own[1])

    async def append_unnumbered(self, conn: Any, session_id: str, payloads: list[str]) -> None:
        if not self.mariadb or len(self._chunks(session_id, payloads)) > 1:
            await self.append(conn, session_id, payloads)
            return
        # MariaDB: the transaction as one compound statement, answered by one OK packet after
        # its COMMIT (the multi-statement form answers before and after the commit: two
        # wake-ups and four results to parse). It reports no number, hence only here.
        sql, args = self._one_trip(session_id, payloads)
        async with conn.cursor() as cur:
            await cur.execute(f"{_BLOCK}START TRANSACTION;{sql};COMMIT;END", args)

    def abort(self, conn: Any) -> None:
        conn.close()  # closes the socket: a read in progress fails at once

    def is_closed(self, conn: Any) -> bool:
        closed = getattr(conn, "closed", None)  # aiomysql
        if closed is None:
            return not getattr(conn, "connected", True)  # asyncmy
        return bool(closed)

    async def pop(self, conn: Any, session_id: str) -> str | None:
        if not self.mariadb:
            value = await self.write(conn, lambda: self.pop_in(conn, session_id))
        else:
            rows = await self.fetch(conn, self._pop, (session_id,))
            if not conn.get_autocommit():
                await conn.commit()
            value = rows[0][0] if rows else None
        return None if value is None else str(value)

    async def pop_in(self, conn: Any, session_id: str) -> Any:
        # MySQL has no DELETE .. RETURNING: the newest row is locked, then deleted.
        rows = await self.fetch(conn, self._lock_newest, (session_id,))
        if rows:
            await self.execute(conn, self._delete_one, (session_id, rows[0][0]))
        return rows[0][1] if rows else None

    async def pop_checked(self, conn: Any, session_id: str, check: Callable[[str], Any]) -> Any:
        if not self.mariadb:
            return await super().pop_checked(conn, session_id, check)
        # The pop's row lock is held across the check: a concurrent pop waits for its outcome.
        async with conn.cursor() as cur:
            async with _rolled_back_on_error(conn):
                # START TRANSACTION and the pop in one round trip (multi-statements).
                await cur.execute(f"START TRANSACTION;{self._pop}", (session_id,))
                await cur.nextset()
                row = await cur.fetchone()
                outcome = None if row is None else run_check(check, str(row[0]))
            await (conn.rollback() if isinstance(outcome, Refused) else conn.commit())
        return outcome

    async def fetch(self, conn: Any, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        async with conn.cursor() as cur:
            await cur.execute(sql, args)
            return await cur.fetchall()  # type: ignore[no-any-return]

    async def read(self, conn: Any, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        rows = await self.fetch(conn, sql, args)
        await _end_read(conn)
        return rows

    async def execute(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        # Affected rows: an UPDATE to the value a row holds already does not count.
        async with conn.cursor() as cur:
            await cur.execute(sql, args)
            return int(cur.rowcount)

    async def write_one(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        changed = await self.execute(conn, sql, args)
        if not conn.get_autocommit():
            await conn.commit()
        return changed

    async def begin(self, conn: Any) -> None:
        if conn.get_autocommit():  # else a transaction is open already
            await conn.begin()

    async def add(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        chunks = self._chunks(session_id, payloads)
        async with conn.cursor() as cur:
            return await self._bump_and_insert(cur, session_id, payloads, chunks)

    async def lock_counter(self, conn: Any, session_id: str) -> None:
        await self.execute(conn, self._bump, (session_id, 0, 0))  # created if missing

    async def set_counter(
        self, conn: Any, session_id: str, last: int, created: float, updated: float
    ) -> None:
        times = [
            datetime.fromtimestamp(t, timezone.utc).replace(tzinfo=None) for t in (created, updated)
        ]
        await self.execute(
            conn,
            f"INSERT INTO {self.t.sessions} (session_id, last_seq, created_at, updated_at) "
            "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
            "last_seq = GREATEST(last_seq, VALUES(last_seq)), "
            "created_at = VALUES(created_at), updated_at = VALUES(updated_at)",
            (session_id, last, *times),
        )

    async def insert_rows(self, conn: Any, session_id: str, rows: list[Row]) -> None:
        chunks = self._chunks(session_id, [payload for _, payload in rows])
        async with conn.cursor() as cur:
            await self._insert_rows(cur, session_id, rows, chunks)

    def unavailable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, (OSError, asyncio.TimeoutError))
            or _code(e) in _GONE
            or (type(e).__name__ == "InterfaceError" and type(e).__module__.startswith(_DRIVERS))
            for e in causes(exc)
        )

    def retryable(self, exc: BaseException) -> bool:
        return any(_code(e) == 1213 for e in causes(exc))  # deadlock: transaction rolled back

    def missing_table(self, exc: BaseException) -> bool:
        return any(_code(e) in (1146, 1054) for e in causes(exc))


async def _end_read(conn: Any) -> None:
    """Without autocommit a read opened a transaction; end it so no snapshot lingers."""
    if not conn.get_autocommit():
        await conn.rollback()
