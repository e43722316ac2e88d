"""SQLite backend specifics: several processes on one file, process kill, SDK file compatibility,
locking, closing, corrupt rows."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import cast

import pytest
from agents.items import TResponseInputItem
from agents.memory import SQLiteSession as SDKSQLiteSession

from agent_sessions import SQLiteSession
from agent_sessions.errors import (
    BackendUnavailableError,
    CorruptItemError,
    SessionClosedError,
)
from agent_sessions.testing import texts
from tests import sqlite_workers

SPAWN = multiprocessing.get_context("spawn")


PER_PROCESS = 150  # 4 x 150 commits keep the processes' writes interleaved at a third the cost


def test_four_processes_adding_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "mp.db")
    with ProcessPoolExecutor(4, mp_context=SPAWN) as pool:
        futures = [
            pool.submit(sqlite_workers.add_worker, path, "mp", w, PER_PROCESS) for w in range(4)
        ]
        for f in futures:
            f.result(timeout=120)

    async def check() -> list[str]:
        async with SQLiteSession("mp", path) as s:
            return texts(await s.get_items())

    got = asyncio.run(check())
    assert len(got) == 4 * PER_PROCESS
    assert len(set(got)) == 4 * PER_PROCESS
    for w in range(4):  # each process's own writes stay in its order
        mine = [int(t.split(":")[1]) for t in got if t.startswith(f"{w}:")]
        assert mine == list(range(PER_PROCESS))


def test_four_processes_popping_get_each_item_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "pop.db")

    async def fill() -> None:
        async with SQLiteSession("pop", path) as s:
            await s.add_items([{"role": "user", "content": str(i)} for i in range(4 * PER_PROCESS)])

    asyncio.run(fill())
    with ProcessPoolExecutor(4, mp_context=SPAWN) as pool:
        futures = [pool.submit(sqlite_workers.pop_worker, path, "pop") for _ in range(4)]
        popped = [c for f in futures for c in f.result(timeout=120)]
    counts = Counter(popped)
    assert sorted(counts, key=int) == [str(i) for i in range(4 * PER_PROCESS)]
    assert set(counts.values()) == {1}


def test_killed_writer_leaves_only_whole_batches(tmp_path: Path) -> None:
    path = str(tmp_path / "kill.db")
    batch = 40
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.sqlite_workers", path, "kill", str(batch)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None
    committed = -1
    deadline = time.monotonic() + 60
    while committed < 30 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert committed >= 30, "the writer did not get going"

    async def check() -> list[str]:
        async with SQLiteSession("kill", path) as s:
            return texts(await s.get_items())

    got = asyncio.run(check())
    assert len(got) % batch == 0
    numbers = [int(t.split(":")[0]) for t in got[::batch]]
    assert numbers == list(range(len(numbers)))
    assert len(numbers) >= committed + 1  # everything acknowledged survived the kill
    for start in range(0, len(got), batch):
        n = got[start].split(":")[0]
        assert got[start : start + batch] == [f"{n}:{k}" for k in range(batch)]


@pytest.mark.asyncio
async def test_reads_a_database_written_by_the_sdk_and_back(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    sdk = SDKSQLiteSession("conv", path)
    await sdk.add_items([{"role": "user", "content": "written by the SDK"}])
    ours = SQLiteSession("conv", path)
    assert texts(await ours.get_items()) == ["written by the SDK"]
    await ours.add_items([{"role": "assistant", "content": "written by us"}])
    assert texts(await sdk.get_items()) == ["written by the SDK", "written by us"]
    assert (await sdk.pop_item()) == {"role": "assistant", "content": "written by us"}
    assert texts(await ours.get_items()) == ["written by the SDK"]
    sdk.close()
    await ours.close()


@pytest.mark.asyncio
async def test_sessions_of_one_file_share_one_connection(tmp_path: Path) -> None:
    path = str(tmp_path / "one.db")
    a, b = SQLiteSession("a", path), SQLiteSession("b", Path(path))
    await a.add_items([{"role": "user", "content": "x"}])
    await b.add_items([{"role": "user", "content": "y"}])
    assert a.store is b.store and a.store.conn is not None
    await a.close()
    assert texts(await b.get_items()) == ["y"]  # closing one session keeps the shared connection
    await b.close()
    assert b.store.conn is None


@pytest.mark.asyncio
async def test_close_is_idempotent_and_use_after_close_is_a_clear_error(tmp_path: Path) -> None:
    s = SQLiteSession("c", str(tmp_path / "c.db"))
    await s.add_items([{"role": "user", "content": "x"}])
    await s.close()
    await s.close()
    items = [cast("TResponseInputItem", {"role": "user"})]
    for call in (s.get_items(), s.add_items(items), s.pop_item(), s.clear_session()):
        with pytest.raises(SessionClosedError, match="closed"):
            await call
    async with SQLiteSession("c", str(tmp_path / "c.db")) as again:
        assert texts(await again.get_items()) == ["x"]
    assert again.closed


@pytest.mark.asyncio
async def test_held_write_lock_gives_unavailable_error_within_busy_timeout(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "locked.db")
    s = SQLiteSession("l", path, busy_timeout=0.3)
    await s.add_items([{"role": "user", "content": "before"}])
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="busy_timeout"):
            await s.add_items([{"role": "user", "content": "blocked"}])
        assert time.monotonic() - started < 5
        assert texts(await s.get_items()) == ["before"]  # WAL readers are not blocked
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await s.add_items([{"role": "user", "content": "after"}])
    assert texts(await s.get_items()) == ["before", "after"]
    await s.close()


@pytest.mark.asyncio
async def test_corrupt_row_is_skipped_with_a_warning_or_raised_in_strict_mode(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "corrupt.db")
    s = SQLiteSession("x", path)
    await s.add_items([{"role": "user", "content": str(i)} for i in range(3)])
    raw = sqlite3.connect(path)
    raw.execute("UPDATE agent_messages SET message_data = '{not json' WHERE id = 2")
    raw.commit()
    raw.close()
    with caplog.at_level(logging.WARNING, logger="agent_sessions"):
        assert texts(await s.get_items()) == ["0", "2"]
    assert "does not decode" in caplog.text
    strict = SQLiteSession("x", path, strict=True)
    with pytest.raises(CorruptItemError):
        await strict.get_items()
    assert (await s.pop_item()) == {"role": "user", "content": "2"}
    assert (await s.pop_item()) == {"role": "user", "content": "0"}  # skips the corrupt row
    assert await s.pop_item() is None
    await s.close()
    await strict.close()


@pytest.mark.asyncio
async def test_a_row_holding_two_objects_is_corrupt_not_two_items(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Reads decode a page in one call; the row must still count as one corrupt row.
    path = str(tmp_path / "two.db")
    s = SQLiteSession("x", path)
    await s.add_items([{"role": "user", "content": str(i)} for i in range(3)])
    raw = sqlite3.connect(path)
    raw.execute("""UPDATE agent_messages SET message_data = '{"a":1},{"b":2}' WHERE id = 2""")
    raw.commit()
    raw.close()
    with caplog.at_level(logging.WARNING, logger="agent_sessions"):
        assert texts(await s.get_items()) == ["0", "2"]
        assert [seq for seq, _ in await s.get_sequenced_items()] == [1, 3]
    assert "does not decode" in caplog.text
    strict = SQLiteSession("x", path, strict=True)
    with pytest.raises(CorruptItemError):
        await strict.get_items()
    await s.close()
    await strict.close()


@pytest.mark.parametrize("name", ["bad-name", "x; DROP TABLE y", "1abc", "", "a" * 64])
def test_table_names_must_be_identifiers(name: str) -> None:
    with pytest.raises(ValueError, match="identifier"):
        SQLiteSession("s", ":memory:", messages_table=name)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteSession("s", synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLiteSession("s", busy_timeout=-1)


@pytest.mark.asyncio
async def test_unopenable_path_is_a_clear_error(tmp_path: Path) -> None:
    s = SQLiteSession("s", str(tmp_path / "missing-dir" / "x.db"))
    with pytest.raises(BackendUnavailableError, match="cannot open"):
        await s.get_items()


def _use_after_fork(path: str) -> None:
    session = _FORK_STATE["session"]

    async def run() -> None:
        await session.add_items([{"role": "user", "content": "from the child"}])

    asyncio.run(asyncio.wait_for(run(), 20))


_FORK_STATE: dict[str, SQLiteSession] = {}


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_forked_child_opens_its_own_connection_instead_of_hanging(tmp_path: Path) -> None:
    path = str(tmp_path / "fork.db")
    session = SQLiteSession("fork", path)
    _FORK_STATE["session"] = session

    async def parent_write() -> None:
        await session.add_items([{"role": "user", "content": "from the parent"}])

    asyncio.run(parent_write())
    child = multiprocessing.get_context("fork").Process(target=_use_after_fork, args=(path,))
    child.start()
    child.join(60)
    assert child.exitcode == 0

    async def check() -> list[str]:
        async with SQLiteSession("fork", path) as s:
            return texts(await s.get_items())

    assert asyncio.run(check()) == ["from the parent", "from the child"]
    asyncio.run(session.close())


@pytest.mark.asyncio
async def test_a_catalog_delete_whose_commit_fails_leaves_no_transaction_open(
    tmp_path: Path,
) -> None:
    """A failed COMMIT (here a user's deferred foreign key) rolls the delete back and the
    shared connection carries on; it used to stay inside the transaction, so every later
    write failed with "cannot start a transaction within a transaction"."""
    from agent_sessions.ops.catalog import SessionCatalog

    s = SQLiteSession("x", str(tmp_path / "fk.db"))
    await s.add_items([{"role": "user", "content": "kept"}])

    def user_table(raw: sqlite3.Connection) -> None:
        raw.execute("PRAGMA foreign_keys = ON")
        raw.execute(
            "CREATE TABLE notes (sid TEXT REFERENCES agent_sessions(session_id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
        raw.execute("INSERT INTO notes VALUES ('x')")

    await s._run(user_table)
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await SessionCatalog(s).delete_sessions(["x"])
    await s.add_items([{"role": "user", "content": "after"}])
    assert texts(await s.get_items()) == ["kept", "after"]
    await s._run(lambda raw: raw.execute("PRAGMA foreign_keys = OFF"))
    await s.close()
