"""Wrapper cost: the bare backend vs EncryptedSession (``encryption_key=``, and a shared
``Keyring``), TTLSession, EncryptedSession over TTLSession, AdvancedSession (branching +
usage) and CompactionSession (a trigger that never fires), on SQLite and Redis, warm and on
a fresh object per call.

    python benchmarks/bench_wrappers.py [--quick]

Each stack gets its own session of 1 KB items, prefilled through the stack; the stacks then
alternate call by call in shuffled order (see harness.py). Ratios are stack time / bare time.
Target (issue 25): every stack <= 1.3x bare, warm and fresh.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

from cryptography.fernet import Fernet

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import Keyring, SQLiteSession
from agent_sessions.wrappers.advanced import AdvancedSession
from agent_sessions.wrappers.compaction import CompactionSession
from agent_sessions.wrappers.encrypted import EncryptedSession
from agent_sessions.wrappers.ttl import TTLSession
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

PREFIX = run_prefix("wrappers")
REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")

KEY = Fernet.generate_key().decode()
RING = Keyring(KEY)  # one per process, as a web server would hold it
ITEM_BYTES = 1024
BareFactory = Callable[[str], Awaitable[Any]]


def never(_context: Any) -> bool:
    return False


STACKS: dict[str, Callable[[Any], Any]] = {
    "bare": lambda s: s,
    "Encrypted": lambda s: EncryptedSession(s, encryption_key=KEY),
    "Encrypted (Keyring)": lambda s: EncryptedSession(s, keyring=RING),
    "TTL": lambda s: TTLSession(s, ttl=3600),
    "Encrypted+TTL": lambda s: EncryptedSession(TTLSession(s, ttl=3600), encryption_key=KEY),
    "AdvancedSession": lambda s: AdvancedSession(s),
    "Compaction": lambda s: CompactionSession(s, should_trigger_compaction=never),
}


async def backends(tmp: str) -> tuple[dict[str, BareFactory], list[Callable[[], Awaitable[Any]]]]:
    path = os.path.join(tmp, "wrappers.db")
    keep = SQLiteSession("keep-open", path)
    await keep.get_items(limit=1)

    async def sqlite(session_id: str) -> Any:
        return SQLiteSession(session_id, path)

    found: dict[str, BareFactory] = {"SQLite": sqlite}
    cleanup: list[Callable[[], Awaitable[Any]]] = [keep.close]
    try:
        from redis.asyncio import Redis

        from agent_sessions.backends.redis import RedisSession

        client = Redis.from_url(REDIS_URL)
        await client.ping()
    except Exception as exc:
        print(f"Redis skipped: {exc}")
    else:

        async def redis(session_id: str) -> Any:
            return RedisSession(session_id, client=client, key_prefix=PREFIX)

        found["Redis"] = redis
        cleanup.append(client.aclose)
    return found, cleanup


async def _stack(stack: str, make_bare: BareFactory, session_id: str) -> Any:
    return STACKS[stack](await make_bare(session_id))


async def measure(name: str, make_bare: BareFactory, sizes: list[int], calls: int) -> list[Result]:
    one = [item(0, ITEM_BYTES)]
    section = f"Wrappers over {name} (1 KB items)"
    results: list[Result] = []

    async def add_one(s: Any) -> Any:
        return await s.add_items(one)

    async def get20(s: Any) -> Any:
        return await s.get_items(limit=20)

    async def pop(s: Any) -> Any:
        return await s.pop_item()

    for size in sizes:
        ids = {stack: new_id(f"w{size}") for stack in STACKS}
        warm = {stack: wrap(await make_bare(ids[stack])) for stack, wrap in STACKS.items()}

        fresh = {stack: later(_stack, stack, make_bare, ids[stack]) for stack in STACKS}
        try:
            for session in warm.values():
                await prefill(session, size, ITEM_BYTES)
            for mode in ("warm", "fresh"):
                f = fresh if mode == "fresh" else None
                for label, op, restore in (
                    ("get(limit=20)", get20, None),
                    ("add 1", add_one, pop),
                    ("pop", pop, add_one),
                ):
                    samples = await alternate(warm, op, calls, fresh=f, restore=restore)
                    results.append(Result(section, label, size, mode, samples, kind="overhead"))
                    print(f"  {section}: {label} @{size} {mode} done", flush=True)
        finally:
            for session in warm.values():
                await session.clear_session()
                await close(session)
    return results


async def collect(quick: bool) -> list[Result]:
    sizes = [100] if quick else [100, 10_000]
    calls = 100 if quick else 300
    found, cleanup = await backends(tempfile.mkdtemp(prefix="bench-wrappers-"))
    results: list[Result] = []
    try:
        for name, make_bare in found.items():
            results += await measure(name, make_bare, sizes, calls)
    finally:
        for step in cleanup:
            await step()
        if "Redis" in found:
            await purge(PREFIX, redis_url=REDIS_URL)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 items only, fewer calls")
    args = parser.parse_args()
    found = asyncio.run(collect(args.quick))
    from benchmarks.report import print_results

    print_results(found)
