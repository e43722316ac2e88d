"""Full-text search over a SQLite file's items (:attr:`Capability.TEXT_SEARCH`) with FTS5.

Created on the first search in a file, so a file never searched pays nothing. Beside the
messages table ``<m>``:

- ``<m>_text_sessions``: the sessions whose items are indexed. The first search of a session
  lists it and indexes its items in one transaction; a session with no items is not listed.
- ``<m>_text``: an FTS5 index (``unicode61 remove_diacritics 2``) whose row ids are message
  ids. Its content is the view ``<m>_text_src`` (the texts of listed sessions' items), so the
  text is not stored twice, and ``INSERT INTO <m>_text(<m>_text) VALUES('rebuild')`` rebuilds
  it from the messages.
- Triggers on the messages table keep the index current for listed sessions in the writing
  transaction, whoever writes (this package, the SDK's ``SQLiteSession``, a catalog erase,
  a copy); for other sessions they cost one primary-key probe. A trigger on the sessions table
  unlists a session whose row is deleted once it holds no items (``clear_session``, erase),
  so no trace of an erased session stays behind; its next search lists it again.

``SQLiteSession.drop_text_index()`` removes all of it (triggers first: a trigger naming a
dropped table would fail every write to the messages table); the next search creates it again.

FTS5 keeps a deleted or rewritten row's words in its index segments until they are merged, so
an erase, a ``clear_session`` or a rewrite (a recall ``forget``) of a listed session runs
through :meth:`TextIndexSchema.erasing`: with SQLite 3.42 or later the index was created with
FTS5's ``secure-delete`` option, which removes them at once; before that the index is merged
(``optimize``, a pass over the whole index) in the same transaction.

An item is indexed when its top-level ``"text"`` is a non-empty string (malformed JSON is
skipped, never an error). A query's words are each quoted as an FTS5 string and joined with
OR, so no query syntax ever reaches FTS5; ranking is FTS5's ``bm25()`` (negated: higher is
better) over the whole file's index.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...core.sqltext import sqlite_indexable
from ...core.textsearch import TEXT_MARK, Between, Equal, sqlite_search_text

T = TypeVar("T")
SECURE_DELETE = sqlite3.sqlite_version_info >= (3, 42, 0)
"""Whether FTS5 has the ``secure-delete`` option (a delete takes its words at once)."""
_BODY = sqlite_search_text("json_extract({row}.message_data, '$.text')")
"""What the index holds for an item: its text and its CJK terms (``core.textsearch``)."""
_INT64_MAX = 2**63 - 1


def _bindable(bound: float) -> float:
    """``bound`` as SQLite binds it: an int beyond 64 bits as a float (same order)."""
    return bound if -_INT64_MAX <= bound <= _INT64_MAX else float(bound)


class TextIndexSchema:
    """The SQL of one messages table's text index (names derived from checked identifiers)."""

    def __init__(self, sessions: str, messages: str) -> None:
        m, s = messages, sessions
        self.index, listed, src = f"{m}_text", f"{m}_text_sessions", f"{m}_text_src"
        f = self.index
        is_listed = "EXISTS (SELECT 1 FROM {listed} WHERE session_id = {row}.session_id)"
        old_listed = is_listed.format(listed=listed, row="old")
        new_listed = is_listed.format(listed=listed, row="new")
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {listed} (session_id TEXT PRIMARY KEY) WITHOUT ROWID",
            f"CREATE VIEW IF NOT EXISTS {src} AS SELECT m.id AS id, "
            f"{_BODY.format(row='m')} AS body FROM {m} AS m "
            f"WHERE m.session_id IN (SELECT session_id FROM {listed}) AND {sqlite_indexable('m')}",
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {f} USING fts5(body, content='{src}', "
            "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
            f"CREATE TRIGGER IF NOT EXISTS {m}_text_insert AFTER INSERT ON {m} "
            f"WHEN {new_listed} AND {sqlite_indexable('new')} BEGIN /* {TEXT_MARK} */ "
            f"INSERT INTO {f} (rowid, body) VALUES (new.id, {_BODY.format(row='new')}); END",
            f"CREATE TRIGGER IF NOT EXISTS {m}_text_delete AFTER DELETE ON {m} "
            f"WHEN {old_listed} AND {sqlite_indexable('old')} BEGIN "
            f"INSERT INTO {f} ({f}, rowid, body) "
            f"VALUES ('delete', old.id, {_BODY.format(row='old')}); END",
            f"CREATE TRIGGER IF NOT EXISTS {m}_text_update AFTER UPDATE ON {m} "
            f"WHEN {old_listed} OR {new_listed} BEGIN "
            f"INSERT INTO {f} ({f}, rowid, body) "
            f"SELECT 'delete', old.id, {_BODY.format(row='old')} "
            f"WHERE {old_listed} AND {sqlite_indexable('old')}; "
            f"INSERT INTO {f} (rowid, body) "
            f"SELECT new.id, {_BODY.format(row='new')} "
            f"WHERE {new_listed} AND {sqlite_indexable('new')}; END",
            f"CREATE TRIGGER IF NOT EXISTS {m}_text_unlist AFTER DELETE ON {s} BEGIN "
            f"DELETE FROM {listed} WHERE session_id = old.session_id "
            f"AND NOT EXISTS (SELECT 1 FROM {m} WHERE session_id = old.session_id); END",
        ]
        self.drop = [  # triggers first: a trigger naming a missing table fails every write
            *(
                f"DROP TRIGGER IF EXISTS {m}_text_{what}"
                for what in ("insert", "delete", "update", "unlist")
            ),
            f"DROP TABLE IF EXISTS {f}",
            f"DROP VIEW IF EXISTS {src}",
            f"DROP TABLE IF EXISTS {listed}",
        ]
        if SECURE_DELETE:
            self.create.append(f"INSERT INTO {f} ({f}, rank) VALUES ('secure-delete', 1)")
        self.optimize = f"INSERT INTO {f} ({f}) VALUES ('optimize')"
        self.any_listed = (
            f"SELECT 1 FROM {listed} WHERE session_id IN (SELECT value FROM json_each(?))"
        )
        self.insert_trigger = f"{m}_text_insert"
        self.current = "SELECT instr(sql, ?) > 0 FROM sqlite_master WHERE name = ?"
        self.is_listed = f"SELECT 1 FROM {listed} WHERE session_id = ?"
        self.holds_items = f"SELECT 1 FROM {m} WHERE session_id = ? LIMIT 1"
        self.list = f"INSERT INTO {listed} (session_id) VALUES (?)"
        self.backfill = (
            f"INSERT INTO {f} (rowid, body) SELECT m.id, {_BODY.format(row='m')} "
            f"FROM {m} AS m WHERE m.session_id = ? AND {sqlite_indexable('m')}"
        )
        # The best ``?`` hits among the session's row ids, ranked with no join per hit, each
        # joined to its row and marked whether it is the session's and passes the filters
        # (appended to the mark); the payload only where it does.
        self.search_top = (
            f"WITH hits AS (SELECT rowid AS id, bm25({f}) AS score FROM {f} WHERE {f} MATCH ? "
            f"AND rowid >= (SELECT min(id) FROM {m} WHERE session_id = ?) "
            f"AND rowid <= (SELECT max(id) FROM {m} WHERE session_id = ?) "
            f"ORDER BY score, id LIMIT ?), marked AS (SELECT hits.id, hits.score, m.message_data, "
            f"(m.session_id = ?{{}}) AS ok FROM hits JOIN {m} AS m ON m.id = hits.id) "
            "SELECT id, CASE WHEN ok THEN message_data END, -score, ok FROM marked "
            "ORDER BY score, id"
        )
        # Every hit joined to its row, filtered, ranked and cut: when the top hits above hold
        # too few that pass. The bounds skip other sessions' hits outside the session's row
        # ids (a 20-item session beside a 100k-item one: 43 ms without them for a word in 10%
        # of items); the payloads are read for the returned rows only.
        self.search = (
            f"WITH hits AS (SELECT {f}.rowid AS id, bm25({f}) AS score FROM {f} JOIN {m} AS m "
            f"ON m.id = {f}.rowid WHERE {f} MATCH ? AND m.session_id = ?{{}} "
            f"AND {f}.rowid >= (SELECT min(id) FROM {m} WHERE session_id = ?) "
            f"AND {f}.rowid <= (SELECT max(id) FROM {m} WHERE session_id = ?) "
            f"ORDER BY score, id LIMIT ?) SELECT m.id, m.message_data, -hits.score "
            f"FROM hits JOIN {m} AS m ON m.id = hits.id ORDER BY hits.score, hits.id"
        )

    @staticmethod
    def filters(equal: Equal, between: Between) -> tuple[str, list[Any]]:
        """The filters as SQL terms on the message row ``m`` (each starting with AND) and
        their parameters."""
        sql = ""
        params: list[Any] = []
        for name, values in equal.items():
            path = f"$.{name}"
            marks = ", ".join("?" for _ in values)
            sql += (
                f" AND (CASE WHEN json_type(m.message_data, ?) = 'text' "
                f"THEN json_extract(m.message_data, ?) END) IN ({marks})"
            )
            params += [path, path, *values]
        for name, (low, high) in between.items():
            path = f"$.{name}"
            sql += " AND json_type(m.message_data, ?) IN ('integer', 'real')"
            params.append(path)
            for bound, op in ((low, ">="), (high, "<=")):
                if bound is not None:
                    sql += f" AND json_extract(m.message_data, ?) {op} ?"
                    params += [path, _bindable(bound)]
        return sql, params

    def run_search(
        self,
        raw: sqlite3.Connection,
        sid: str,
        words: list[str],
        limit: int,
        equal: Equal,
        between: Between,
    ) -> list[Any]:
        """``(seq, payload, score)`` of the session's best ``limit`` hits, best first: among
        the best few hits of its row ids when enough of them pass (they are then the best of
        all), else among all hits. Each word an FTS5 string (``\\w+`` holds no quote), joined
        with OR."""
        match = " OR ".join(f'"{word}"' for word in words)
        where, params = self.filters(equal, between)
        limit = min(limit, _INT64_MAX)
        fetch = min(4 * limit if where else limit, _INT64_MAX)
        rows = raw.execute(
            self.search_top.format(where), [match, sid, sid, fetch, sid, *params]
        ).fetchall()
        found = [row[:3] for row in rows if row[3]]
        if len(found) >= limit or len(rows) < fetch:
            return found[:limit]
        # Too few passed: other sessions' rows interleave, or the filters reject many.
        sql = self.search.format(where)
        return raw.execute(sql, [match, sid, *params, sid, sid, limit]).fetchall()

    def create_all(self, raw: sqlite3.Connection) -> None:
        """Create the index, its view, table and triggers if missing (in a write transaction);
        an index built under another tokenization policy (no :data:`TEXT_MARK` in its insert
        trigger) is dropped first, so each session's next search indexes it again."""
        row = raw.execute(self.current, (TEXT_MARK, self.insert_trigger)).fetchone()
        if row is not None and not row[0]:
            self.drop_all(raw)
        for statement in self.create:
            raw.execute(statement)

    def drop_all(self, raw: sqlite3.Connection) -> None:
        """Drop the triggers, index, view and table (in a write transaction)."""
        for statement in self.drop:
            raw.execute(statement)

    def erasing(self, raw: sqlite3.Connection, sids: Sequence[str], erase: Callable[[], T]) -> T:
        """``erase()`` (deletes or rewrites rows of ``sids``, in a write transaction), then,
        when one of ``sids`` is indexed, the index merged so no old word stays in it (where
        FTS5 has no ``secure-delete``)."""
        try:
            listed = (
                not SECURE_DELETE and raw.execute(self.any_listed, (json.dumps(sids),)).fetchone()
            )
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            listed = None  # never searched: nothing indexed
        result = erase()
        if listed:
            raw.execute(self.optimize)
        return result

    def list_session(self, raw: sqlite3.Connection, sid: str) -> bool:
        """List ``sid`` and index its items (in a write transaction); False, doing nothing,
        when it holds no items."""
        if raw.execute(self.is_listed, (sid,)).fetchone():
            return True
        if not raw.execute(self.holds_items, (sid,)).fetchone():
            return False
        raw.execute(self.list, (sid,))
        raw.execute(self.backfill, (sid,))
        return True
