"""Resilient layer cost with a healthy primary: ``ResilientSession`` over a backend vs the bare
backend, on the operations a Runner turn makes, in one run.

    python benchmarks/bench_resilient.py [--quick] [--redis-url redis://127.0.0.1:6379/0]

Operations: ``add_items`` of 2 items (a turn's write; an untimed pop pair keeps the size), and
``get_items(limit=20)`` / ``get_items()`` of a 100-item history. Warm (one object) and fresh (a
new object per call, as a web handler makes). Target (issue 17): <= 1.1x bare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from agent_sessions.wrappers.resilient import ResilientSession, Spool
from benchmarks.harness import (
    Result,
    alternate,
    close,
    item,
    later,
    new_id,
    prefill,
    purge,
    run_prefix,
)

PREFIX = run_prefix("resilient")

Open = Callable[[str], Awaitable[Any]]
BARE = "bare"
RESILIENT = "ResilientSession"
TURN = [item(0, 400), item(1, 400)]


async def add_turn(s: Any) -> Any:
    return await s.add_items(TURN)


async def drop_turn(s: Any) -> None:
    await s.pop_item()
    await s.pop_item()


async def get20(s: Any) -> Any:
    return await s.get_items(limit=20)


async def get_all(s: Any) -> Any:
    return await s.get_items()


async def bench_backend(name: str, open_bare: Open, spool: Spool, calls: int) -> list[Result]:
    results: list[Result] = []
    session_id = new_id("resilient")

    async def open_resilient(sid: str = session_id) -> Any:
        return ResilientSession(await open_bare(sid), spool)

    warm = {BARE: await open_bare(session_id), RESILIENT: await open_resilient()}
    await prefill(warm[BARE], 100, 400)
    try:
        ops: list[tuple[str, Any, Any]] = [
            ("add_items(2 items)", add_turn, drop_turn),
            ("get_items(limit=20)", get20, None),
            ("get_items()", get_all, None),
        ]
        for label, op, restore in ops:
            for mode in ("warm", "fresh"):
                fresh = None
                if mode == "fresh":
                    fresh = {BARE: later(open_bare, session_id), RESILIENT: later(open_resilient)}
                samples = await alternate(warm, op, calls, fresh=fresh, restore=restore)
                results.append(
                    Result(f"Resilient layer on {name} (healthy primary, 100 items)", label, 100,
                           mode, samples, kind="overhead")
                )  # fmt: skip
            print(f"  {name} {label} done", flush=True)
    finally:
        await warm[BARE].clear_session()
        for s in warm.values():
            await close(s)
    return results


async def collect(quick: bool, redis_url: str | None) -> list[Result]:
    calls = 100 if quick else 400
    tmp = tempfile.mkdtemp(prefix="bench-resilient-")
    spool = Spool(os.path.join(tmp, "spool.db"))
    path = os.path.join(tmp, "primary.db")

    async def sqlite(session_id: str) -> Any:
        return SQLiteSession(session_id, path)

    backends: dict[str, Open] = {"SQLite": sqlite}
    if redis_url:
        from agent_sessions import RedisSession

        async def redis(session_id: str) -> Any:
            return RedisSession.from_url(session_id, url=redis_url, key_prefix=PREFIX)

        backends["Redis"] = redis
    results: list[Result] = []
    try:
        for name, opener in backends.items():
            results += await bench_backend(name, opener, spool, calls)
    finally:
        spool.close()
        if redis_url:
            await purge(PREFIX, redis_url=redis_url)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument("--redis-url", default=None, help="also measure over this Redis")
    args = parser.parse_args()
    found = asyncio.run(collect(args.quick, args.redis_url))
    from benchmarks.report import print_results

    print_results(found)
