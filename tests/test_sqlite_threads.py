"""Issue 13 items 2, 4, 5 (SQLite part) and 6: SQLiteSession from many threads and event loops,
settings that differ per session, a failed COMMIT, and no private names of other libraries."""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_sessions import SQLiteSession
from agent_sessions.backends.sqlite import session as sqlite_backend
from agent_sessions.testing import texts
from tests.sqlite_workers import in_threads

REPO = Path(__file__).resolve().parent.parent


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def test_ten_threads_each_with_its_own_loop_and_session_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "threads.db")

    async def worker(n: int) -> None:
        session = SQLiteSession("shared", path)
        for i in range(20):
            await session.add_items([_msg(f"{n}:{i}")])
        await session.close()

    assert in_threads(10, worker) == []

    async def check() -> list[str]:
        async with SQLiteSession("shared", path) as s:
            return texts(await s.get_items())

    got = asyncio.run(check())
    assert sorted(got) == sorted(f"{n}:{i}" for n in range(10) for i in range(20))
    for n in range(10):  # each thread's items keep that thread's order
        assert [g for g in got if g.startswith(f"{n}:")] == [f"{n}:{i}" for i in range(20)]


@pytest.mark.asyncio
async def test_one_session_object_used_from_several_threads_and_loops(tmp_path: Path) -> None:
    """The SDK's own test_sqlite_session_concurrent_access, plus the main loop writing too."""
    session = SQLiteSession("concurrent_test", tmp_path / "concurrent.db")
    await session.add_items([_msg("first")])  # the connection is opened by this loop

    def add_item(item: Any) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(session.add_items([item]))
        finally:
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
        futures = [executor.submit(add_item, _msg(f"Message {i}")) for i in range(30)]
        for i in range(10):
            await session.add_items([_msg(f"main {i}")])
        for f in futures:
            f.result(timeout=60)
    got = texts(await session.get_items())
    assert sorted(got) == sorted(
        ["first"] + [f"Message {i}" for i in range(30)] + [f"main {i}" for i in range(10)]
    )
    await session.close()


def test_a_session_closed_by_another_loop_frees_the_worker(tmp_path: Path) -> None:
    path = str(tmp_path / "close.db")
    session = SQLiteSession("s", path)
    asyncio.run(session.add_items([_msg("a")]))
    worker = session.store._thread
    assert worker is not None and worker.is_alive()
    asyncio.run(session.close())
    worker.join(10)
    assert not worker.is_alive()


async def _pragma(session: SQLiteSession, name: str) -> Any:
    def read(raw: sqlite3.Connection) -> Any:
        return raw.execute(f"PRAGMA {name}").fetchone()[0]

    return await session._run(read)


@pytest.mark.asyncio
async def test_a_second_session_with_other_settings_gets_them(tmp_path: Path) -> None:
    path = str(tmp_path / "settings.db")
    default = SQLiteSession("a", path)
    durable = SQLiteSession("b", path, synchronous="FULL", busy_timeout=30)
    again = SQLiteSession("c", path, synchronous="full", busy_timeout=30.0)
    await default.add_items([_msg("x")])
    await durable.add_items([_msg("y")])
    assert await _pragma(default, "synchronous") == 1  # NORMAL
    assert await _pragma(default, "busy_timeout") == 5000
    assert await _pragma(durable, "synchronous") == 2  # FULL
    assert await _pragma(durable, "busy_timeout") == 30000
    assert durable.store is again.store and durable.store is not default.store
    assert texts(await again.get_items()) == []
    assert texts(await SQLiteSession("a", path, synchronous="FULL").get_items()) == ["x"]
    for s in (default, durable, again):
        await s.close()


def test_a_failed_commit_rolls_back_and_leaves_no_transaction(tmp_path: Path) -> None:
    raw = sqlite3.connect(str(tmp_path / "commit.db"), isolation_level=None)
    raw.execute("PRAGMA foreign_keys = ON")
    raw.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    raw.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent(id) "
        "DEFERRABLE INITIALLY DEFERRED)"
    )

    def orphan(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO child (parent_id) VALUES (42)")  # fails only at COMMIT

    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        sqlite_backend._write(raw, orphan)
    assert not raw.in_transaction
    assert raw.execute("SELECT count(*) FROM child").fetchone()[0] == 0
    sqlite_backend._write(raw, lambda c: c.execute("INSERT INTO parent (id) VALUES (1)"))
    assert raw.execute("SELECT count(*) FROM parent").fetchone()[0] == 1
    raw.close()


@pytest.mark.parametrize(
    ("module", "foreign"),
    [
        ("agent_sessions/backends/sqlite/session.py", ("aiosqlite",)),
        ("agent_sessions/backends/sqlalchemy.py", ("pool", "engine", "sync_engine", "fairy")),
        ("agent_sessions/backends/sql/postgres.py", ("conn",)),
        ("agent_sessions/backends/sql/mysql.py", ("conn",)),
    ],
)
def test_backends_use_no_private_names_of_their_drivers(
    module: str, foreign: tuple[str, ...]
) -> None:
    tree = ast.parse((REPO / module).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "aiosqlite" not in imported or module.endswith("sqlalchemy.py")
    private = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if name in foreign:
                private.append(f"{name}.{node.attr} (line {node.lineno})")
    assert private == [], f"{module} reaches into another library's private names: {private}"


def test_closing_from_one_thread_while_others_write_never_hangs_them(tmp_path: Path) -> None:
    """Every operation racing a close either runs or raises SessionClosedError; none waits
    forever behind the stopped worker."""
    from agent_sessions.errors import SessionClosedError

    for attempt in range(20):
        session = SQLiteSession("race", str(tmp_path / f"race{attempt}.db"))
        asyncio.run(session.add_items([_msg("first")]))
        outcomes: list[str] = []

        def writer(n: int, s: SQLiteSession = session, outcomes: list[str] = outcomes) -> None:
            async def run() -> None:
                try:
                    await asyncio.wait_for(s.add_items([_msg(str(n))]), 20)
                    outcomes.append("ran")
                except SessionClosedError:
                    outcomes.append("refused")

            asyncio.run(run())

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        asyncio.run(session.store.release())  # the shared connection's last user goes away
        for t in threads:
            t.join(60)
        assert set(outcomes) <= {"ran", "refused"} and len(outcomes) == 4, outcomes
