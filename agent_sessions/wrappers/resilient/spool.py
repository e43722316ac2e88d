"""The durable local fallback: an on-disk SQLite file holding the batches written while the
primary was down, per session, in write order.

Every change is one SQLite transaction with ``synchronous=FULL``: a batch acknowledged to the
caller survives a process kill or power loss. A batch carries its id and whether it was ever
sent to the primary (``attempted``): only those can already be there, so only those are looked
for before replaying. The *anchor* of a session is the id of the newest batch known to be in
the primary before the spooled ones; a search for spooled batches in the primary stops there.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: replays are not locked across processes
    fcntl = None  # type: ignore[assignment]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool_batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    batch_id TEXT NOT NULL UNIQUE,
    items TEXT NOT NULL,
    attempted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS spool_batches_by_session ON spool_batches (session_id, seq);
CREATE TABLE IF NOT EXISTS spool_anchors (
    session_id TEXT PRIMARY KEY,
    batch_id TEXT
);
"""


@dataclass(frozen=True)
class SpooledBatch:
    """One batch waiting for the primary, oldest first by ``seq``."""

    seq: int
    batch_id: str
    items: list[Any]
    attempted: bool


class Spool:
    """The SQLite spool at ``path`` (created on first use). One object may serve many sessions
    and is safe to share between threads; several processes may share the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:":
            raise ValueError("the spool must be a file path: an in-memory spool is not durable")
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=10000")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                self._conn.execute(statement)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    # -- writes --------------------------------------------------------------------------------

    def append(
        self, session_id: str, batch_id: str, encoded: list[str], *, attempted: bool,
        anchor: str | None = None, set_anchor: bool = False,
    ) -> None:
        """Append one batch (its items already encoded as JSON); with ``set_anchor``, record
        ``anchor`` for the session in the same transaction."""
        with self._transaction() as cur:
            cur.execute(
                "INSERT INTO spool_batches (session_id, batch_id, items, attempted) "
                "VALUES (?, ?, ?, ?)",
                (session_id, batch_id, "[" + ",".join(encoded) + "]", int(attempted)),
            )
            if set_anchor:
                cur.execute(
                    "INSERT OR REPLACE INTO spool_anchors (session_id, batch_id) VALUES (?, ?)",
                    (session_id, anchor),
                )

    def mark_attempted(self, seq: int) -> None:
        with self._transaction() as cur:
            cur.execute("UPDATE spool_batches SET attempted = 1 WHERE seq = ?", (seq,))

    def confirm(self, session_id: str, seqs: list[int], anchor: str) -> None:
        """The batches ``seqs`` are in the primary: drop them and make ``anchor`` (the newest
        of them) the session's anchor, atomically."""
        with self._transaction() as cur:
            cur.executemany("DELETE FROM spool_batches WHERE seq = ?", [(s,) for s in seqs])
            cur.execute(
                "INSERT OR REPLACE INTO spool_anchors (session_id, batch_id) VALUES (?, ?)",
                (session_id, anchor),
            )

    def pop_newest(self, session_id: str) -> tuple[Any, bool] | None:
        """Remove and return the newest spooled item of the session, with whether it was
        removable: None when nothing is spooled; ``(None, False)`` when the newest batch was
        already sent to the primary (it may be there: only the primary can pop it)."""
        with self._transaction() as cur:
            row = cur.execute(
                "SELECT seq, items, attempted FROM spool_batches WHERE session_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            seq, items_json, attempted = row
            if attempted:
                return None, False
            items = json.loads(items_json)
            item = items.pop()
            if items:
                cur.execute(
                    "UPDATE spool_batches SET items = ? WHERE seq = ?",
                    (json.dumps(items, separators=(",", ":")), seq),
                )
            else:
                cur.execute("DELETE FROM spool_batches WHERE seq = ?", (seq,))
            return item, True

    def clear(self, session_id: str) -> None:
        """Drop every spooled batch and the anchor of the session."""
        with self._transaction() as cur:
            cur.execute("DELETE FROM spool_batches WHERE session_id = ?", (session_id,))
            cur.execute("DELETE FROM spool_anchors WHERE session_id = ?", (session_id,))

    # -- reads ---------------------------------------------------------------------------------

    def batches(self, session_id: str) -> list[SpooledBatch]:
        """The session's spooled batches, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, batch_id, items, attempted FROM spool_batches "
                "WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [SpooledBatch(seq, bid, json.loads(items), bool(a)) for seq, bid, items, a in rows]

    def counts(self, session_id: str) -> tuple[int, int]:
        """(batches, items) spooled for the session."""
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(json_array_length(items)), 0) "
                "FROM spool_batches WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return int(row[0]), int(row[1])

    def anchor(self, session_id: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT batch_id FROM spool_anchors WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    # -- replay lock ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def replay_lock(self) -> Iterator[bool]:
        """Hold the spool's replay lock if it is free (yields True), else yield False at once.
        An OS file lock: a killed process releases it, so a reopen can replay at once."""
        if fcntl is None:  # pragma: no cover
            yield True
            return
        handle = open(self.path + ".replay-lock", "a+b")
        try:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        finally:
            handle.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
