"""Several processes on one session in PostgreSQL and MariaDB: nothing lost, nothing doubled.

The processes start together on fresh tables, so they also race to create them.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import uuid
from typing import Any

import pytest

from agent_sessions.testing.helpers import item_text, texts
from tests.servers import MARIADB_URL, POSTGRES_URL, require_server

PROCESSES = 4
ADDS_PER_PROCESS = 150


async def _work(url: str, prefix: str, sid: str, mode: str, worker: int) -> list[str]:
    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    s = SQLAlchemySession.from_url(sid, url=url, table_prefix=prefix)
    try:
        if mode == "add":
            for i in range(ADDS_PER_PROCESS):
                await s.add_items([{"role": "user", "content": f"{worker}:{i}"}])
            return []
        popped = []
        while (item := await s.pop_item()) is not None:
            popped.append(item_text(item))
        return popped
    finally:
        await s.close()


def _worker(url: str, prefix: str, sid: str, mode: str, worker: int, start: Any, out: Any) -> None:
    start.wait(60)
    try:
        out.put((worker, asyncio.run(_work(url, prefix, sid, mode, worker))))
    except BaseException as exc:  # report to the parent instead of dying silently
        out.put((worker, f"error: {type(exc).__name__}: {exc}"))


def _run_processes(url: str, prefix: str, sid: str, mode: str) -> list[list[str]]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, prefix, sid, mode, w, start, out))
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    start.set()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    errors = [r for r in results.values() if isinstance(r, str)]
    assert not errors, errors
    return [results[w] for w in range(PROCESSES)]


async def _items(url: str, prefix: str, sid: str) -> list[str]:
    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    s = SQLAlchemySession.from_url(sid, url=url, table_prefix=prefix)
    try:
        return texts(await s.get_items())
    finally:
        await s.close()


async def _prefill(url: str, prefix: str, sid: str, n: int) -> None:
    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    s = SQLAlchemySession.from_url(sid, url=url, table_prefix=prefix)
    try:
        await s.add_items([{"role": "user", "content": str(i)} for i in range(n)])
    finally:
        await s.close()


@pytest.fixture(params=["postgres", "mariadb"])
def db(request: pytest.FixtureRequest, sql_prefix: str) -> Any:
    if request.param == "postgres":
        require_server("PostgreSQL", "127.0.0.1", 5432)
        url = POSTGRES_URL
    else:
        require_server("MariaDB", "127.0.0.1", 3306)
        url = MARIADB_URL
    return url, sql_prefix


def test_processes_adding_lose_nothing_and_double_nothing(db: tuple[str, str]) -> None:
    url, prefix = db
    sid = f"mp-add-{uuid.uuid4().hex[:8]}"
    _run_processes(url, prefix, sid, "add")
    got = asyncio.run(_items(url, prefix, sid))
    assert len(got) == PROCESSES * ADDS_PER_PROCESS
    assert len(set(got)) == len(got)
    for w in range(PROCESSES):  # each process's items keep its order
        mine = [g for g in got if g.startswith(f"{w}:")]
        assert mine == [f"{w}:{i}" for i in range(ADDS_PER_PROCESS)]


def test_processes_popping_get_every_item_once(db: tuple[str, str]) -> None:
    url, prefix = db
    sid = f"mp-pop-{uuid.uuid4().hex[:8]}"
    total = PROCESSES * ADDS_PER_PROCESS
    asyncio.run(_prefill(url, prefix, sid, total))
    results = _run_processes(url, prefix, sid, "pop")
    popped = [p for r in results for p in r]
    assert sorted(popped, key=int) == [str(i) for i in range(total)]
    for r in results:  # each process saw the items newest first
        assert [int(p) for p in r] == sorted((int(p) for p in r), reverse=True)
    assert asyncio.run(_items(url, prefix, sid)) == []
