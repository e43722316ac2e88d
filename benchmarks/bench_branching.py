"""Branching: ``create_branch_from_turn`` with ours (AdvancedSession over SQLite and over Redis)
vs the SDK's AdvancedSQLiteSession, at 10 and 5,000 turns, warm and on a fresh object.

    python benchmarks/bench_branching.py [--quick]

"fresh" is a new session object per call (the web-server pattern): its first call has no
cached state. After each timed call the new branch is deleted and "main" made current again
(untimed), so every call sees the same history. Target: fresh, 5,000 turns, <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from agent_sessions.wrappers.advanced import AdvancedSession
from benchmarks.harness import Result, alternate, close, later, new_id, purge, run_prefix

PREFIX = run_prefix("branching")
REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")

SECTION = "Branching: create_branch_from_turn(turns // 2)"


def history(turns: int) -> list[Any]:
    out: list[Any] = []
    for i in range(1, turns + 1):
        out.append({"role": "user", "content": f"question {i} " + "x" * 80})
        out.append({"role": "assistant", "content": f"answer {i} " + "y" * 160})
    return out


async def fill(session: Any, turns: int) -> None:
    items = history(turns)
    for start in range(0, len(items), 1000):
        await session.add_items(items[start : start + 1000])


async def contenders(tmp: str) -> tuple[dict[str, Callable[[str], Any]], list[Any]]:
    path = os.path.join(tmp, "ours.db")
    keep = SQLiteSession("keep-open", path)
    await keep.get_items(limit=1)
    sdk_path = os.path.join(tmp, "sdk.db")
    found: dict[str, Callable[[str], Any]] = {
        "ours (SQLite)": lambda sid: AdvancedSession(SQLiteSession(sid, path)),
        "SDK AdvancedSQLiteSession": lambda sid: AdvancedSQLiteSession(
            session_id=sid, db_path=sdk_path, create_tables=True
        ),
    }
    cleanup: list[Any] = [keep.close]
    try:
        from redis.asyncio import Redis

        from agent_sessions.backends.redis import RedisSession

        client = Redis.from_url(REDIS_URL)
        await client.ping()
    except Exception as exc:
        print(f"Redis skipped: {exc}")
    else:
        found["ours (Redis)"] = lambda sid: AdvancedSession(
            RedisSession(sid, client=client, key_prefix=PREFIX)
        )
        cleanup.append(client.aclose)
    return found, cleanup


async def collect(quick: bool) -> list[Result]:
    calls = 30 if quick else 100
    made, cleanup = await contenders(tempfile.mkdtemp(prefix="bench-branching-"))
    results: list[Result] = []
    created: dict[int, str] = {}

    async def create(session: Any, turn: int) -> None:
        created[id(session)] = await session.create_branch_from_turn(turn)

    async def settle(session: Any) -> None:
        await session.switch_to_branch("main")
        await session.delete_branch(created.pop(id(session)), force=True)

    try:
        for turns in (10, 5000):
            ids = {name: new_id(f"br{turns}") for name in made}
            warm = {name: make(ids[name]) for name, make in made.items()}
            for session in warm.values():
                await fill(session, turns)

            async def op(session: Any, turn: int = turns // 2) -> None:
                await create(session, turn)

            try:
                for mode in ("warm", "fresh"):
                    fresh = {n: later(made[n], ids[n]) for n in made} if mode == "fresh" else None
                    samples = await alternate(warm, op, calls, fresh=fresh, settle=settle)
                    results.append(
                        Result(SECTION, "create_branch_from_turn", 2 * turns, mode, samples)
                    )
                    print(f"  branching {turns} turns {mode} done", flush=True)
            finally:
                for session in warm.values():
                    await session.clear_session()
                    await close(session)
    finally:
        for step in cleanup:
            await step()
        if "ours (Redis)" in made:
            await purge(PREFIX, redis_url=REDIS_URL)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    args = parser.parse_args()
    found = asyncio.run(collect(args.quick))
    from benchmarks.report import print_results

    print_results(found)
