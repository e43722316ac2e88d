"""Issue 23 item 6: SQLite sessions collected without close() give back their worker thread
and file descriptors; sessions of one file share one worker."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from agent_sessions import BranchingSession, SQLiteSession
from agent_sessions.core.family import SharedMembers
from tests.sqlite_workers import in_threads


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def _workers(path: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"agent_sessions-sqlite:{path}"]


def _open_files(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since the listing
        if target.startswith(str(directory)):
            found.append(target)
    return found


def _collect_and_join(threads: list[threading.Thread]) -> None:
    gc.collect()
    deadline = time.monotonic() + 20  # a bound for a hang, not a timing assertion
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


def test_a_thousand_unclosed_sessions_of_one_file_share_one_worker(tmp_path: Path) -> None:
    path = str(tmp_path / "one.db")
    kept: list[SQLiteSession] = []

    async def use() -> None:
        for i in range(1000):
            session = SQLiteSession(f"s{i}", path)
            await session.add_items([_msg(str(i))])
            kept.append(session)

    asyncio.run(use())
    workers = _workers(os.path.realpath(path))
    assert len(workers) == 1
    kept.clear()
    _collect_and_join(workers)
    assert not any(t.is_alive() for t in workers)
    assert _open_files(tmp_path) == []


def test_unclosed_sessions_on_many_files_give_threads_and_files_back(tmp_path: Path) -> None:
    kept: list[SQLiteSession] = []

    async def use() -> None:
        for i in range(40):
            session = SQLiteSession("s", str(tmp_path / f"f{i}.db"))
            await session.add_items([_msg(str(i))])
            kept.append(session)

    asyncio.run(use())
    workers = [t for i in range(40) for t in _workers(os.path.realpath(tmp_path / f"f{i}.db"))]
    assert len(workers) == 40 and _open_files(tmp_path) != []
    kept.clear()
    _collect_and_join(workers)
    assert not any(t.is_alive() for t in workers)
    assert _open_files(tmp_path) == []


def test_unclosed_in_memory_sessions_and_their_side_stores_stop_their_workers() -> None:
    before = set(threading.enumerate())

    async def use() -> None:
        for i in range(50):
            session = BranchingSession(SQLiteSession(f"m{i}"))
            await session.add_items([_msg(str(i))])
            await session.create_branch_from_turn(1, "b")

    asyncio.run(use())
    started = [
        t
        for t in threading.enumerate()
        if t not in before and t.name.startswith("agent_sessions-sqlite:")
    ]
    _collect_and_join(started)
    assert [t for t in started if t.is_alive()] == []


def test_a_closed_then_collected_session_does_not_give_its_hold_back_twice(tmp_path: Path) -> None:
    path = str(tmp_path / "twice.db")

    async def run() -> list[Any]:
        a, b = SQLiteSession("a", path), SQLiteSession("b", path)
        await a.add_items([_msg("1")])
        await a.close()
        del a
        gc.collect()
        await asyncio.sleep(0)
        await b.add_items([_msg("2")])  # the file is still open for b
        items = await b.get_items()
        await b.close()
        return items

    assert [i["content"] for i in asyncio.run(run())] == ["2"]


def test_a_session_collected_before_its_first_use_leaves_the_file_usable(tmp_path: Path) -> None:
    path = str(tmp_path / "unused.db")
    SQLiteSession("never-used", path)  # collected at once: its hold waits for a worker
    gc.collect()

    async def run() -> list[Any]:
        async with SQLiteSession("s", path) as s:
            await s.add_items([_msg("x")])
            return await s.get_items()

    assert len(asyncio.run(run())) == 1
    _collect_and_join(_workers(os.path.realpath(path)))
    assert _open_files(tmp_path) == []


def test_one_file_by_any_path_shares_one_worker_also_after_a_close(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    (tmp_path / "link.db").symlink_to(real)

    async def use() -> None:
        for round_ in range(2):  # the second round reopens the file the first one closed
            by_real = SQLiteSession("s", str(real))
            by_link = SQLiteSession("s", str(tmp_path / "link.db"))
            again = SQLiteSession("s", str(real))
            assert by_real.store is by_link.store is again.store
            await by_link.add_items([_msg(str(round_))])
            assert len(await again.get_items()) == round_ + 1
            for session in (by_real, by_link, again):
                await session.close()
            assert by_real.store.closed

    asyncio.run(use())
    workers = _workers(os.path.realpath(real))
    _collect_and_join(workers)
    assert not any(t.is_alive() for t in workers)


def test_side_stores_are_shared_by_a_files_sessions_and_keep_no_hold(tmp_path: Path) -> None:
    """Issue 25 item 1: the store keeps its families' side stores, so a fresh object per
    request opens none; they keep the file open no longer than its sessions."""
    path = str(tmp_path / "shared.db")

    async def use() -> Any:
        first, second = SQLiteSession("s", path), SQLiteSession("s", path)
        side = first.side_store("records")
        assert second.side_store("records") is side
        await side.add_items([_msg("x")])
        side.close()  # a shared side store stays open for the others
        assert not side.closed and len(await second.side_store("records").get_items()) == 1
        await first.close()
        assert len(await second.side_store("records").get_items()) == 1
        await second.close()
        assert first.store.closed, "side stores must not keep the file open"
        return first.store

    store = asyncio.run(use())
    _collect_and_join(_workers(store.path))
    assert _open_files(tmp_path) == []


def test_the_stores_side_stores_are_bounded_and_thread_safe(tmp_path: Path) -> None:
    """The store keeps at most its limit of side stores, least recently used out, while
    threads (each with its own loop) open and use side stores of many families at once."""
    path = str(tmp_path / "bounded.db")
    keep = SQLiteSession("keep", path)
    keep.store.members = SharedMembers(limit=4)

    async def use(n: int) -> None:
        for family in range(n, 40, 4):
            session = SQLiteSession(f"f{family}", path)
            await session.side_store("records").add_items([_msg(str(family))])
            await session.close()

    assert in_threads(4, use) == []
    assert len(keep.store.members) == 4  # all shared through the one store, bounded

    async def check() -> list[Any]:
        found = [
            await SQLiteSession(f"f{f}", path).side_store("records").get_items() for f in range(40)
        ]
        await keep.close()
        return found

    assert asyncio.run(check()) == [[_msg(str(f))] for f in range(40)]


def test_a_fresh_layered_session_used_once_is_freed_without_the_collector(tmp_path: Path) -> None:
    """A web handler builds a stack per request: once closed and dropped it must go at once
    (no reference cycle through its side stores), not wait for the cycle collector."""
    from agent_sessions import AdvancedSession, CompactionSession

    path = str(tmp_path / "fresh.db")
    stacks = {
        "advanced": AdvancedSession,
        "compaction": lambda inner: CompactionSession(
            inner, should_trigger_compaction=lambda _context: False
        ),
    }

    async def use(wrap: Any, session_id: str) -> weakref.ref[Any]:
        session = wrap(SQLiteSession(session_id, path))
        await session.add_items([_msg("a"), _msg("b")])
        await session.get_items(limit=1)
        await session.pop_item()
        await session.close()
        return weakref.ref(session)

    async def main() -> None:
        keep = SQLiteSession("keep", path)
        await keep.get_items()
        gc.disable()
        try:
            for name, wrap in stacks.items():
                await use(wrap, name)  # the first object of a store fills its caches
                freed = await use(wrap, name)
                assert freed() is None, name
        finally:
            gc.enable()
            await keep.close()

    asyncio.run(main())
