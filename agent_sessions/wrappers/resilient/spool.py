"""The durable local fallback: an on-disk SQLite file holding, per session and in write order,
the batches written while the primary was down.

Every change is one transaction with ``synchronous=FULL``, so an acknowledged batch survives a
kill or power loss. A batch records whether it was ever sent to the primary (``attempted``:
only those can already be there) and then its *anchor*, a batch known to be in the primary
before that attempt, where a search for it stops. Every method does file I/O (call it off the
event loop) except :meth:`Spool.version`, a shared-memory token that changes with every commit
by any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import mmap
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from ...errors import BackendUnavailableError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: replays are not locked across processes
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool_batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    batch_id TEXT NOT NULL UNIQUE,
    items TEXT NOT NULL,
    attempted INTEGER NOT NULL DEFAULT 0,
    anchor TEXT
);
CREATE INDEX IF NOT EXISTS spool_batches_by_session ON spool_batches (session_id, seq)
"""
_CORRUPT = ("SQLITE_NOTADB", "SQLITE_CORRUPT")
_KNOWN_SESSIONS = 10_000


class SessionLock:
    """Exclusive use of one session of one spool file by one caller at a time, across the
    threads of a process (a lock shared by every :class:`Spool` of the file) and across
    processes (an ``fcntl`` byte-range lock on ``<spool>.lock`` at an offset derived from the
    session id, which the OS releases when the process dies; in-process only without fcntl).

    Two sessions whose ids map to the same offset share a lock: they are serialised, which
    costs throughput, never correctness. Get one with :meth:`Spool.session_lock`.
    """

    def __init__(self, fd: int | None, offset: int) -> None:
        self._fd, self._offset = fd, offset
        self._thread_lock = threading.Lock()

    def forget_threads(self) -> None:
        """In a forked child: drop the in-process lock, which a thread of the parent may hold."""
        self._thread_lock = threading.Lock()

    def _try_os_lock(self) -> bool:
        if self._fd is None:
            return True
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self._offset)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    def try_acquire(self) -> bool:
        """Take the lock if it is free at once (never waits)."""
        return self._thread_lock.acquire(blocking=False) and self._os_lock_or_release(None)

    def _acquire_waiting(self, abandoned: threading.Event) -> bool:
        """Take the lock, waiting (in a worker thread) until it is free or ``abandoned``."""
        while not self._thread_lock.acquire(timeout=0.05):
            if abandoned.is_set():
                return False
        return self._os_lock_or_release(abandoned)

    def _os_lock_or_release(self, abandoned: threading.Event | None) -> bool:
        """Holding the thread lock, take the OS lock, polling until ``abandoned`` (None: no
        wait); release the thread lock unless both are held."""
        delay = 0.001
        try:  # another process holds it: fcntl cannot wait with a timeout, so poll
            while not self._try_os_lock():
                if abandoned is None or abandoned.is_set():
                    self._thread_lock.release()
                    return False
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
        except BaseException:
            self._thread_lock.release()
            raise
        return True

    def release(self) -> None:
        try:
            if self._fd is not None:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, self._offset)
        finally:
            self._thread_lock.release()

    async def acquire(self) -> None:
        """Take the lock; a wait runs in a worker thread (the event loop never blocks), and a
        caller cancelled while waiting leaves it free."""
        if self.try_acquire():
            return
        abandoned = threading.Event()
        waiting = asyncio.ensure_future(asyncio.to_thread(self._acquire_waiting, abandoned))
        try:
            await asyncio.shield(waiting)
        except BaseException:
            abandoned.set()
            waiting.add_done_callback(self._release_if_taken)
            raise

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    def _release_if_taken(self, waiting: asyncio.Future[bool]) -> None:
        if not waiting.cancelled() and waiting.exception() is None and waiting.result():
            self.release()


# One descriptor per lock file per process: closing any descriptor of a file drops every fcntl
# lock the process holds on it, so it stays open; and one SessionLock per (file, offset).
_LOCK_FILES: dict[str, int] = {}
_SESSION_LOCKS: weakref.WeakValueDictionary[tuple[str, int], SessionLock] = (
    weakref.WeakValueDictionary()
)
_REGISTRY_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child holds no fcntl lock, nor any lock a thread of its parent held."""
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for lock in list(_SESSION_LOCKS.values()):
        lock.forget_threads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class SpoolUnreadableError(BackendUnavailableError):
    """The spool file is corrupt or not a spool; the message names it and what to do."""


@dataclass(frozen=True)
class SpooledBatch:
    """One batch waiting for the primary, oldest first by ``seq``."""

    seq: int
    batch_id: str
    items: list[Any]
    attempted: bool
    anchor: str | None = None


class Spool:
    """The SQLite spool at ``path`` (opened on first use, in the calling thread). One object may
    serve many sessions and is safe to share between threads; several processes may share
    the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:":
            raise ValueError("the spool must be a file path: an in-memory spool is not durable")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._version: mmap.mmap | None = None
        # counts per session with the version they were read at (valid while it is current)
        self._known: dict[str, tuple[bytes, tuple[int, int]]] = {}
        self._lock_path = os.path.abspath(self.path + ".lock")
        self._session_locks: weakref.WeakValueDictionary[str, SessionLock] = (
            weakref.WeakValueDictionary()
        )

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout=10000")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA.split(";"):
                    conn.execute(statement)
                columns = {row[1] for row in conn.execute("PRAGMA table_info(spool_batches)")}
                if "anchor" not in columns:  # written by an older version: its one anchor
                    # per session is a valid bound for each attempted batch of the session
                    conn.execute("ALTER TABLE spool_batches ADD COLUMN anchor TEXT")
                    conn.execute(
                        "UPDATE spool_batches SET anchor = (SELECT a.batch_id FROM "
                        "spool_anchors a WHERE a.session_id = spool_batches.session_id)"
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._open_version()
        return self._conn

    def _open_version(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # no version file: callers re-read
            fd = os.open(self.path + ".version", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size < 8:
                    os.ftruncate(fd, 8)
                self._version = mmap.mmap(fd, 8)
            finally:
                os.close(fd)

    def _run(self, body: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run ``body`` on the connection (in a transaction when ``write``); a corrupt file
        raises :class:`SpoolUnreadableError` and is reopened at the next call."""
        with self._lock:
            try:
                conn = self._connect()
                if not write:
                    return body(conn)  # WAL: a read never waits for a writer
                conn.execute("BEGIN IMMEDIATE")
                with conn:  # COMMIT, or ROLLBACK when ``body`` raises
                    result = body(conn)
            except sqlite3.DatabaseError as exc:
                if getattr(exc, "sqlite_errorname", None) not in _CORRUPT:
                    raise
                self._close()
                raise SpoolUnreadableError(
                    f"the spool file {self.path!r} is unreadable ({exc}): writes cannot be "
                    "spooled while the primary is down. Move it aside (it may hold writes not "
                    f"yet replayed: `sqlite3 {self.path} .recover` salvages them); a new spool "
                    "is created at the next use"
                ) from exc
            if self._version is not None:  # after the commit: a reader that saw the old
                self._version[:8] = os.urandom(8)  # token may have read the old state
            return result

    def version(self) -> bytes | None:
        """A token that changes whenever a change to the file is committed (by any process),
        or None when unknown. Reads shared memory only: safe on the event loop."""
        version = self._version
        try:
            return None if version is None else version[:8]
        except ValueError:  # closed meanwhile by another thread
            return None

    def _write(self, statement: str, parameters: tuple[Any, ...]) -> None:
        self._run(lambda conn: conn.execute(statement, parameters), write=True)

    def append(
        self,
        session_id: str,
        batch_id: str,
        encoded: list[str],
        *,
        attempted: bool,
        anchor: str | None = None,
    ) -> None:
        """Append one batch (its items already encoded as JSON); ``anchor`` is a batch known
        to be in the primary before an ``attempted`` batch was sent."""
        self._write(
            "INSERT INTO spool_batches (session_id, batch_id, items, attempted, anchor) "
            "VALUES (?, ?, ?, ?, ?)",
            (session_id, batch_id, "[" + ",".join(encoded) + "]", int(attempted), anchor),
        )

    def claim(self, seq: int, anchor: str | None) -> list[Any] | None:
        """Mark batch ``seq`` as sent, with ``anchor``, and return its items as they are now
        (a pop may have shortened it), or None when it is gone."""

        def body(conn: sqlite3.Connection) -> list[Any] | None:
            row = conn.execute(
                "UPDATE spool_batches SET attempted = 1, anchor = ? WHERE seq = ? RETURNING items",
                (anchor, seq),
            ).fetchone()
            return None if row is None else json.loads(row[0])  # type: ignore[no-any-return]

        return self._run(body, write=True)

    def confirm(self, seq: int) -> None:
        """Batch ``seq`` is in the primary: drop it."""
        self._write("DELETE FROM spool_batches WHERE seq = ?", (seq,))

    def pop_newest(self, session_id: str) -> tuple[Any, bool] | None:
        """Remove and return the newest spooled item of the session, with whether it was
        removable: None when nothing is spooled; ``(None, False)`` when the newest batch was
        already sent to the primary (it may be there: only the primary can pop it)."""

        def body(conn: sqlite3.Connection) -> tuple[Any, bool] | None:
            row = conn.execute(
                "SELECT seq, items, attempted FROM spool_batches WHERE "
                "session_id = ? ORDER BY seq DESC LIMIT 1",
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
                conn.execute(
                    "UPDATE spool_batches SET items = ? WHERE seq = ?",
                    (json.dumps(items, separators=(",", ":")), seq),
                )
            else:
                conn.execute("DELETE FROM spool_batches WHERE seq = ?", (seq,))
            return item, True

        return self._run(body, write=True)

    def clear(self, session_id: str) -> None:
        """Drop every spooled batch of the session."""
        self._write("DELETE FROM spool_batches WHERE session_id = ?", (session_id,))

    def _read(self, statement: str, parameters: tuple[Any, ...]) -> list[Any]:
        return self._run(lambda conn: conn.execute(statement, parameters).fetchall(), write=False)

    def batches(self, session_id: str) -> list[SpooledBatch]:
        """The session's spooled batches, oldest first."""
        rows = self._read(
            "SELECT seq, batch_id, items, attempted, anchor FROM spool_batches "
            "WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        return [
            SpooledBatch(seq, bid, json.loads(items), bool(a), anchor)
            for seq, bid, items, a, anchor in rows
        ]

    def known_counts(self, session_id: str) -> tuple[int, int] | None:
        """:meth:`counts` as last read by this object, if no change was committed since (by
        any process), else None. No I/O: safe on the event loop."""
        known = self._known.get(session_id)
        return None if known is None or known[0] != self.version() else known[1]

    def counts(self, session_id: str) -> tuple[int, int]:
        """(batches, items) spooled for the session."""
        version = self.version()  # before the read: a change committed after it replaces it
        (row,) = self._read(
            "SELECT COUNT(*), COALESCE(SUM(json_array_length(items)), 0) "
            "FROM spool_batches WHERE session_id = ?",
            (session_id,),
        )
        counts = int(row[0]), int(row[1])
        if version is not None:
            if len(self._known) >= _KNOWN_SESSIONS:
                self._known.clear()
            self._known[session_id] = version, counts
        return counts

    def session_lock(self, session_id: str) -> SessionLock:
        """The lock that serialises the calls of ``session_id`` through this file (the same
        object for every :class:`Spool` of the file's path in this process). The first call
        for a file opens ``<spool>.lock``, once per process."""
        lock = self._session_locks.get(session_id)
        if lock is not None:
            return lock
        path = self._lock_path
        digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=8)
        offset = int.from_bytes(digest.digest(), "big") >> 2  # a valid positive off_t
        with _REGISTRY_LOCK:
            lock = _SESSION_LOCKS.get((path, offset))
            if lock is None:
                fd = _LOCK_FILES.get(path)
                if fd is None and fcntl is not None:
                    fd = _LOCK_FILES[path] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                lock = _SESSION_LOCKS[(path, offset)] = SessionLock(fd, offset)
        self._session_locks[session_id] = lock
        return lock

    def acquire_replay_lock(self) -> IO[bytes] | None:
        """The spool's replay lock if it is free (close the returned file to release it), else
        None at once (never waits). An OS file lock per open file: objects of one process
        exclude each other too, and a killed process releases it."""
        handle = open(self.path + ".replay-lock", "a+b")
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return None
        return handle

    @contextlib.contextmanager
    def replay_lock(self) -> Iterator[bool]:
        """:meth:`acquire_replay_lock` as a context: yields whether it is held."""
        handle = self.acquire_replay_lock()
        with handle or contextlib.nullcontext():
            yield handle is not None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._version is not None:
            self._version.close()
            self._version = None

    def close(self) -> None:
        with self._lock:
            self._close()
