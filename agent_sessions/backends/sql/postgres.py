"""PostgreSQL SQL for the SQLAlchemy backend, run on asyncpg connections.

Every operation but ``clear`` is one statement in autocommit mode, hence one round trip and
atomic by itself:

- append: a data-modifying CTE bumps the session's counter (``INSERT .. ON CONFLICT DO UPDATE``
  locks the session row, so concurrent writers of one session queue up and get contiguous
  numbers in commit order) and inserts the whole batch from one ``unnest`` of a text array.
- pop: ``DELETE .. WHERE seq = (SELECT .. ORDER BY seq DESC LIMIT 1 FOR UPDATE) RETURNING``.
  A concurrent pop that deleted the locked row makes the sub-select move on to the next one,
  so two pops never return the same row.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg.exceptions as pg  # type: ignore[import-untyped]
from sqlalchemy.engine import Dialect

from ...core.base import Row
from ...core.sqltext import TSVECTOR_CHARS, tsvector_sql
from ...core.textsearch import TEXT_MARK, postgres_search_text
from ...errors import BackendDataError
from .common import (
    BACKFILL_ROWS,
    SCHEMA_VERSION,
    Rollback,
    SqlDialect,
    Tables,
    TextFilters,
    TextTables,
    causes,
    filter_clause,
    text_missing,
)

T = TypeVar("T")

_UNAVAILABLE = (
    OSError,
    asyncio.TimeoutError,
    pg.ConnectionDoesNotExistError,
    pg.PostgresConnectionError,
    pg.CannotConnectNowError,
    pg.AdminShutdownError,
    pg.CrashShutdownError,
    pg.TooManyConnectionsError,
)


def _unsent(exc: BaseException) -> bool:
    """Whether asyncpg refused to start the operation because its connection had already
    broken: the server's termination notice (pg_terminate_backend, a restart) arrived on the
    pooled connection before its socket closed. Nothing was sent, so the connection is
    dropped and the operation runs again on another."""
    return isinstance(exc, pg.InternalClientError) and (
        str(exc).startswith("cannot switch to state") or str(exc) == "not connected"
    )


def create_statements(t: Tables) -> list[str]:
    """The DDL of schema version 1 (``COLLATE "C"``: ids compare byte by byte)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {t.schema} (table_name VARCHAR(64) PRIMARY KEY, "
        "version INTEGER NOT NULL)",
        f'CREATE TABLE IF NOT EXISTS {t.sessions} (session_id VARCHAR(512) COLLATE "C" '
        "PRIMARY KEY, last_seq BIGINT NOT NULL, "
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
        "updated_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        # TEXT, not JSONB: items may hold "\u0000" escapes, which jsonb rejects.
        f'CREATE TABLE IF NOT EXISTS {t.messages} (session_id VARCHAR(512) COLLATE "C" '
        "NOT NULL, seq BIGINT NOT NULL, message_data TEXT NOT NULL, "
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (session_id, seq))",
        f"INSERT INTO {t.schema} (table_name, version) VALUES ('{t.messages}', {SCHEMA_VERSION}) "
        "ON CONFLICT (table_name) DO NOTHING",
    ]


_JSON = "replace({col}, '\\u0000', '\\u0020')::json"
"""An item as ``json`` (TEXT, not JSONB: see the DDL). A ``\\u0000`` escape cannot become
text (``->>`` refuses it), so it is read as a space: the index and filters see a space there,
and a write never fails because of what the index makes of it."""
_TSV = tsvector_sql(postgres_search_text(f"left(j.d ->> 'text', {TSVECTOR_CHARS})"))
"""What the index holds for an item ``j.d``: its text and its CJK terms (``core.textsearch``),
of its first ``TSVECTOR_CHARS`` characters (cut before the terms are made, and the whole
again, as a tsvector holds at most 1 MB)."""
_FILTERS = (
    "json_typeof(j.d -> '{f}') = 'string' AND j.d ->> '{f}' = ANY({values}::text[])",
    "json_typeof(j.d -> '{f}') = 'number'",
    "(j.d ->> '{f}')::float8 {op} {mark}::float8",
)
"""``search_text``'s filter templates (``filter_clause``) on ``j.d``, the item's JSON."""


def text_statements(t: Tables) -> list[str]:
    """The DDL of the full-text index (Capability.TEXT_SEARCH), made on the first
    ``search_text``: an index table of ``tsvector`` ('simple' configuration: lower-cased words,
    no stemming, no stop words) with a GIN index, a table of the registered sessions, and a
    function run by two triggers on the messages table. A batch insert costs one statement
    (a transition table) that returns at once when no session of the batch is registered;
    a rewrite re-indexes its row; deletes cascade through the foreign key (also on erase,
    clear, pops and the catalog's deletes), and erasing a session's row unregisters it."""
    x = TextTables.of(t)
    fn, ins, upd = x.name("sync"), x.name("ins"), x.name("upd")
    new = _JSON.format(col="n.message_data")
    row = _JSON.format(col="NEW.message_data")
    return [
        f'CREATE TABLE IF NOT EXISTS {x.index} (session_id VARCHAR(512) COLLATE "C" NOT NULL, '
        "seq BIGINT NOT NULL, tsv tsvector NOT NULL, PRIMARY KEY (session_id, seq), "
        f"FOREIGN KEY (session_id, seq) REFERENCES {t.messages} (session_id, seq) "
        "ON DELETE CASCADE ON UPDATE CASCADE)",
        # A pending list of 1 MB, not the default 4 MB that every search scans (a backfill of
        # 10k items: 3.5 ms a search instead of 0.5), nor none (a backfill of 100k items took
        # 7.6 s instead of 5.0 with each row merged into the index at once).
        f"CREATE INDEX IF NOT EXISTS {x.name('gin')} ON {x.index} USING gin (tsv) "
        "WITH (fastupdate = on, gin_pending_list_limit = 1024)",
        f'CREATE TABLE IF NOT EXISTS {x.registry} (session_id VARCHAR(512) COLLATE "C" '
        f"PRIMARY KEY REFERENCES {t.sessions} (session_id) ON DELETE CASCADE ON UPDATE CASCADE, "
        "ready BOOLEAN NOT NULL DEFAULT false)",
        f"""CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE ids text[];
BEGIN
  -- {TEXT_MARK}
  IF TG_OP = 'INSERT' THEN
    ids := ARRAY(SELECT r.session_id FROM {x.registry} r
                 WHERE r.session_id = ANY (ARRAY(SELECT DISTINCT session_id FROM new_rows)));
    IF cardinality(ids) > 0 THEN
      INSERT INTO {x.index} (session_id, seq, tsv)
      SELECT n.session_id, n.seq, {_TSV}
      FROM new_rows n CROSS JOIN LATERAL (SELECT {new} AS d) j
      WHERE n.session_id = ANY (ids) AND json_typeof(j.d -> 'text') = 'string'
        AND j.d ->> 'text' <> ''
      ON CONFLICT (session_id, seq) DO UPDATE SET tsv = EXCLUDED.tsv;
    END IF;
  ELSE
    DELETE FROM {x.index} WHERE session_id = OLD.session_id AND seq = OLD.seq;
    IF EXISTS (SELECT 1 FROM {x.registry} WHERE session_id = NEW.session_id) THEN
      INSERT INTO {x.index} (session_id, seq, tsv)
      SELECT NEW.session_id, NEW.seq, {_TSV}
      FROM (SELECT {row} AS d) j
      WHERE json_typeof(j.d -> 'text') = 'string' AND j.d ->> 'text' <> ''
      ON CONFLICT (session_id, seq) DO UPDATE SET tsv = EXCLUDED.tsv;
    END IF;
  END IF;
  RETURN NULL;
END
$f$""",
        f"DROP TRIGGER IF EXISTS {ins} ON {t.messages}",
        f"CREATE TRIGGER {ins} AFTER INSERT ON {t.messages} REFERENCING NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
        f"DROP TRIGGER IF EXISTS {upd} ON {t.messages}",
        f"CREATE TRIGGER {upd} AFTER UPDATE OF message_data ON {t.messages} FOR EACH ROW "
        f"WHEN (OLD.message_data IS DISTINCT FROM NEW.message_data) EXECUTE FUNCTION {fn}()",
    ]


def drop_text_statements(t: Tables) -> list[str]:
    """Undo ``text_statements`` (triggers first: a trigger naming a dropped table would fail
    every write to the messages table)."""
    x = TextTables.of(t)
    return [
        f"DROP TRIGGER IF EXISTS {x.name('ins')} ON {t.messages}",
        f"DROP TRIGGER IF EXISTS {x.name('upd')} ON {t.messages}",
        f"DROP FUNCTION IF EXISTS {x.name('sync')}()",
        f"DROP TABLE IF EXISTS {x.index}, {x.registry}",
    ]


_ANALYZE_AFTER = 1000
"""A session's first search that indexes items numbered up to at least this refreshes the
index's statistics (ANALYZE, tens of milliseconds)."""


class PostgresDialect(SqlDialect):
    """SQL for PostgreSQL (asyncpg)."""

    checkin_needs_greenlet = False  # asyncpg runs in autocommit; check-in does no I/O
    now = "now()"

    def __init__(self, tables: Tables, dialect: Dialect) -> None:
        super().__init__(tables, dialect)
        s, m = tables.sessions, tables.messages
        self._append = (
            f"WITH c AS (INSERT INTO {s} AS s (session_id, last_seq) VALUES ($1, $2::bigint) "
            "ON CONFLICT (session_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq, "
            "updated_at = now() RETURNING last_seq), "
            f"i AS (INSERT INTO {m} (session_id, seq, message_data) "
            "SELECT $1, c.last_seq - $2::bigint + u.ord, u.data "
            "FROM c, unnest($3::text[]) WITH ORDINALITY AS u(data, ord)) "
            "SELECT last_seq FROM c"
        )
        self._pop = (
            f"DELETE FROM {m} WHERE session_id = $1 AND seq = (SELECT seq FROM {m} "
            "WHERE session_id = $1 ORDER BY seq DESC LIMIT 1 FOR UPDATE) RETURNING message_data"
        )
        # Guarded writes: the guard's counter row is locked first (its own statement, so the
        # next one's snapshot holds every append to the guard), then its newest row.
        self._lock_counter = (
            f"INSERT INTO {s} AS s (session_id, last_seq) VALUES ($1, 0) "
            "ON CONFLICT (session_id) DO UPDATE SET last_seq = s.last_seq"
        )
        guard_is = (
            f"(SELECT seq FROM {m} WHERE session_id = $4 ORDER BY seq DESC LIMIT 1 FOR UPDATE) "
            "IS NOT DISTINCT FROM $5::bigint"
        )
        self._append_if = self._append.replace(
            "VALUES ($1, $2::bigint) ", f"SELECT $1, $2::bigint WHERE {guard_is} "
        )
        self._pop_if = (
            f"WITH o AS (SELECT seq FROM {m} WHERE session_id = $1 ORDER BY seq DESC LIMIT 1 "
            f"FOR UPDATE), c AS (SELECT {guard_is.replace('$4', '$2').replace('$5', '$3')} "
            "AND ($4::bigint IS NULL OR (SELECT seq FROM o) IS NOT DISTINCT FROM $4) AS ok), "
            f"d AS (DELETE FROM {m} WHERE session_id = $1 AND seq = (SELECT seq FROM o) "
            "AND (SELECT ok FROM c) RETURNING message_data) "
            "SELECT c.ok, d.message_data FROM c LEFT JOIN d ON true"
        )

    async def create_tables(self, conn: Any) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", self.t.lock_key())
            for statement in create_statements(self.t):
                await conn.execute(statement)

    async def prepare_text(self, conn: Any, create: bool) -> None:
        t = self.t
        if await self._text_present(conn):
            # An index made before its text was bounded (TSVECTOR_CHARS) is made again.
            if not create or await self._text_bounded(conn):
                return
        elif not create:
            raise text_missing(t, "postgres")
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", t.lock_key())
                if await self._text_present(conn) and await self._text_bounded(conn):
                    return
                # Absent, or built under another tokenization policy (TEXT_MARK): dropped and
                # made again, so each session's next search indexes it with today's terms.
                for statement in drop_text_statements(t) + text_statements(t):
                    await conn.execute(statement)
        except pg.InsufficientPrivilegeError as exc:
            raise BackendDataError(
                f"cannot create the full-text index of {t.messages} ({exc}): the user needs "
                f"CREATE on the schema and ownership of {t.messages} (for its triggers) once; "
                "run agent_sessions.backends.sql.postgres.text_statements() as such a user"
            ) from exc
        except pg.PostgresSyntaxError as exc:
            raise BackendDataError(
                f"cannot create the full-text index of {t.messages} ({exc}): search_text "
                "needs PostgreSQL 11 or later (EXECUTE FUNCTION, transition tables)"
            ) from exc

    async def drop_text(self, conn: Any) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", self.t.lock_key())
            for statement in drop_text_statements(self.t):
                await conn.execute(statement)

    async def _text_present(self, conn: Any) -> bool:
        x = TextTables.of(self.t)
        found = await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) "
            "AND tgname = ANY($2::text[]) AND to_regclass($3) IS NOT NULL "
            "AND to_regclass($4) IS NOT NULL AND coalesce((SELECT strpos(prosrc, $5) > 0 "
            "FROM pg_proc WHERE oid = to_regproc($6)), false)",
            self.t.messages,
            [x.name("ins"), x.name("upd")],
            x.index,
            x.registry,
            TEXT_MARK,
            x.name("sync"),
        )
        return int(found) == 2

    async def _text_bounded(self, conn: Any) -> bool:
        found = await conn.fetchval(
            "SELECT strpos(prosrc, $2) > 0 FROM pg_proc WHERE oid = to_regproc($1)",
            TextTables.of(self.t).name("sync"),
            _TSV,
        )
        return bool(found)

    def text_writes(self, x: TextTables) -> tuple[str, str, int]:
        doc = _JSON.format(col="m.message_data")
        return (
            f"INSERT INTO {x.registry} (session_id) VALUES ($1) ON CONFLICT DO NOTHING",
            # FOR SHARE: a pop or rewrite in flight is waited for, so its row is indexed as
            # it ends (or not at all), never as it was; a row its trigger indexed is kept.
            f"INSERT INTO {x.index} (session_id, seq, tsv) "
            f"SELECT m.session_id, m.seq, {_TSV} "
            f"FROM {self.t.messages} m CROSS JOIN LATERAL (SELECT {doc} AS d) j "
            "WHERE m.session_id = $1 AND m.seq > $2 AND m.seq <= coalesce($3, m.seq) "
            "AND json_typeof(j.d -> 'text') = 'string' AND j.d ->> 'text' <> '' "
            "FOR SHARE OF m ON CONFLICT DO NOTHING",
            BACKFILL_ROWS,
        )

    async def backfilled(self, conn: Any, after: int) -> None:
        if after + BACKFILL_ROWS < _ANALYZE_AFTER:
            return
        # Fresh statistics, so the planner finds a rare word's hits through the GIN index
        # rather than reading the session's whole index (10k items: 8 ms -> 1 ms); and the
        # backfill's entries moved from the pending list, which every search reads, into
        # the index (100k items: 4.2 ms -> 1.3 ms a search).
        x = TextTables.of(self.t)
        await conn.execute(f"ANALYZE {x.index}")
        with contextlib.suppress(pg.InsufficientPrivilegeError):  # needs ownership
            await conn.execute(f"SELECT gin_clean_pending_list('{x.name('gin')}'::regclass)")

    async def search_text(
        self, conn: Any, session_id: str, words: list[str], limit: int, filters: TextFilters
    ) -> list[tuple[int, str, float]] | None:
        t, x = self.t, TextTables.of(self.t)
        args: list[Any] = [session_id, " | ".join(words), limit]
        where = join = ""
        if not filters.empty:
            join = f" CROSS JOIN LATERAL (SELECT {_JSON.format(col='m.message_data')} AS d) j"
            where, extra = filter_clause(
                filters, _FILTERS, lambda i: f"${i + 4}", array=True, number=float
            )
            args += extra
        # ts_rank, normalised by the log of the text's length (1): how often the words
        # occur, long texts not winning by length alone. The hits are found in the index
        # alone (MATERIALIZED: the planner cannot start from the messages table), ranked and
        # cut there when nothing filters, so only the rows returned carry their payloads;
        # filters read the JSON of the hits only.
        cut = " ORDER BY score DESC, seq LIMIT $3" if filters.empty else ""
        rows = await conn.fetch(
            f"WITH hits AS MATERIALIZED (SELECT i.seq, ts_rank(i.tsv, q.q, 1) AS score "
            f"FROM {x.index} i, to_tsquery('simple', $2) AS q(q) "
            f"WHERE i.session_id = $1 AND i.tsv @@ q.q{cut}), "
            # = ANY(array): probes of the primary key, whatever the messages' statistics say
            "found AS MATERIALIZED (SELECT h.seq, m.message_data, h.score FROM hits h "
            f"JOIN {t.messages} m ON m.seq = h.seq WHERE m.session_id = $1 "
            "AND m.seq = ANY (ARRAY(SELECT seq FROM hits))) "
            "SELECT r.ok, s.seq, s.message_data, s.score FROM "
            f"(SELECT EXISTS (SELECT 1 FROM {x.registry} WHERE session_id = $1 "
            "AND ready) AS ok) r "
            f"LEFT JOIN LATERAL (SELECT m.seq, m.message_data, m.score FROM found m{join} "
            f"WHERE r.ok{where} ORDER BY m.score DESC, m.seq LIMIT $3) s ON true "
            "ORDER BY s.score DESC, s.seq",
            *args,
        )
        if not rows or not rows[0][0]:
            return None
        return [(int(r[1]), str(r[2]), float(r[3])) for r in rows if r[1] is not None]

    async def append(self, conn: Any, session_id: str, payloads: list[str]) -> int:
        return int(await conn.fetchval(self._append, session_id, len(payloads), payloads))

    add = append  # one statement: the same in the caller's transaction

    async def append_if_newest(
        self, conn: Any, session_id: str, payloads: list[str], guard: str, seq: int | None
    ) -> int | None:
        async with conn.transaction(isolation="read_committed"):
            await conn.execute(self._lock_counter, guard)
            last = await conn.fetchval(
                self._append_if, session_id, len(payloads), payloads, guard, seq
            )
        return None if last is None else int(last)

    async def pop_if_newest(
        self, conn: Any, session_id: str, guard: str, seq: int | None, newest: int | None
    ) -> tuple[bool, str | None]:
        async with conn.transaction(isolation="read_committed"):
            await conn.execute(self._lock_counter, guard)
            ok, value = await conn.fetchrow(self._pop_if, session_id, guard, seq, newest)
        return bool(ok), None if value is None else str(value)

    async def pop(self, conn: Any, session_id: str) -> str | None:
        value = await conn.fetchval(self._pop, session_id)
        return None if value is None else str(value)

    async def pop_in(self, conn: Any, session_id: str) -> Any:
        return await conn.fetchval(self._pop, session_id)

    async def fetch(self, conn: Any, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        return await conn.fetch(sql, *args)  # type: ignore[no-any-return]

    async def execute(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        status = await conn.execute(sql, *args)
        return int(str(status).rsplit(" ", 1)[-1])  # "DELETE <n>", "UPDATE <n>"

    async def write_one(self, conn: Any, sql: str, args: Sequence[Any]) -> int:
        return await self.execute(conn, sql, args)  # autocommit

    async def write(self, conn: Any, run: Callable[[], Awaitable[T]]) -> T:
        # READ COMMITTED: a statement sees the rows of a writer an earlier one waited for.
        try:
            async with conn.transaction(isolation="read_committed"):
                return await run()
        except Rollback as rollback:
            return rollback.value  # type: ignore[no-any-return]

    async def rewrite(self, conn: Any, session_id: str, rows: list[Row]) -> int:
        return await self.write_one(
            conn,
            f"UPDATE {self.t.messages} AS m SET message_data = v.data "
            "FROM unnest($2::bigint[], $3::text[]) AS v(seq, data) "
            "WHERE m.session_id = $1 AND m.seq = v.seq",
            (session_id, [seq for seq, _ in rows], [payload for _, payload in rows]),
        )

    async def set_counter(
        self, conn: Any, session_id: str, last: int, created: float, updated: float
    ) -> None:
        await conn.execute(
            f"INSERT INTO {self.t.sessions} AS s (session_id, last_seq, created_at, updated_at) "
            "VALUES ($1, $2::bigint, to_timestamp($3), to_timestamp($4)) "
            "ON CONFLICT (session_id) DO UPDATE SET "
            "last_seq = GREATEST(s.last_seq, EXCLUDED.last_seq), "
            "created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at",
            session_id,
            last,
            created,
            updated,
        )

    async def insert_rows(self, conn: Any, session_id: str, rows: list[Row]) -> None:
        await conn.execute(
            f"INSERT INTO {self.t.messages} (session_id, seq, message_data) "
            "SELECT $1, u.seq, u.data FROM unnest($2::bigint[], $3::text[]) AS u(seq, data)",
            session_id,
            [seq for seq, _ in rows],
            [payload for _, payload in rows],
        )

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.is_closed())

    def unavailable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, _UNAVAILABLE)
            # asyncpg's "connection is closed": the server ended it (pg_terminate_backend,
            # restart) while it sat in the pool; "another operation is in progress": the
            # server's termination notice arrived before the socket closed
            or (isinstance(e, pg.InterfaceError) and "closed" in str(e))
            or isinstance(e, pg.InternalClientError)
            for e in causes(exc)
        )

    def retryable(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, (pg.DeadlockDetectedError, pg.SerializationError)) or _unsent(e)
            for e in causes(exc)
        )

    def missing_table(self, exc: BaseException) -> bool:
        return any(
            isinstance(e, (pg.UndefinedTableError, pg.UndefinedColumnError)) for e in causes(exc)
        )
