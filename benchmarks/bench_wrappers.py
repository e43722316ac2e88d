"""Wrapper overhead: a bare backend vs EncryptedSession vs EncryptedSession over TTLSession,
in one run, with 1 KB items, on ``add 1 item`` and ``get(limit=20)`` of a 100-item session.

    python benchmarks/bench_wrappers.py [--quick] [--redis-url redis://...]

Goal (issue 6): Encrypted+TTL within 1.3x of the bare backend's time. Each backend is one
entry of ``BACKENDS`` (name -> async factory of a bare session for an id); add Redis or any
other backend by adding one factory there, the three stacks are built from it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from cryptography.fernet import Fernet

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from agent_sessions.wrappers.encrypted import EncryptedSession
from agent_sessions.wrappers.ttl import TTLSession
from benchmarks.harness import Contender, Scenario, item, run_suite

BareFactory = Callable[[str], Awaitable[Any]]
KEY = Fernet.generate_key().decode()
ITEM_BYTES = 1024


def stacks(make_bare: BareFactory, prefill: int = 0) -> list[Contender]:
    """The three contenders over one backend; each new session gets ``prefill`` 1 KB items."""

    def contender(name: str, wrap: Callable[[Any], Any]) -> Contender:
        async def make(session_id: str) -> Any:
            session = wrap(await make_bare(session_id))
            if prefill:
                await session.add_items([item(i, ITEM_BYTES) for i in range(prefill)])
            return session

        return Contender(name, make)

    return [
        contender("bare", lambda s: s),
        contender("Encrypted", lambda s: EncryptedSession(s, encryption_key=KEY)),
        contender(
            "Encrypted+TTL",
            lambda s: EncryptedSession(TTLSession(s, ttl=3600), encryption_key=KEY),
        ),
    ]


def backends(tmp: str, redis_url: str | None) -> dict[str, BareFactory]:
    async def sqlite(session_id: str) -> Any:
        return SQLiteSession(session_id, os.path.join(tmp, "wrappers.db"))

    found: dict[str, BareFactory] = {"SQLite (file, WAL)": sqlite}
    if redis_url:
        from agent_sessions.backends.redis import RedisSession

        async def redis(session_id: str) -> Any:
            return RedisSession.from_url(session_id, url=redis_url)

        found["Redis (loopback)"] = redis
    return found


async def cpu_per_op(
    contenders: list[Contender], scenario: Scenario, rounds: int
) -> dict[str, float]:
    """CPU microseconds per operation (all threads of this process), best of ``rounds``, with
    the contenders interleaved within each round. On a shared, loaded machine this is far
    steadier than wall time, which also counts time spent waiting for a CPU."""
    best = {c.name: float("inf") for c in contenders}
    sessions = {c.name: await c.make(f"bench-{uuid.uuid4().hex[:10]}") for c in contenders}
    try:
        for _ in range(rounds):
            for name, session in sessions.items():
                start = time.process_time()
                for _ in range(scenario.ops):
                    await scenario.op(session, [])
                best[name] = min(best[name], (time.process_time() - start) / scenario.ops)
    finally:
        for session in sessions.values():
            await session.clear_session()
            await session.close()
    return {name: seconds * 1e6 for name, seconds in best.items()}


async def main(quick: bool, redis_url: str | None) -> None:
    tmp = tempfile.mkdtemp(prefix="bench-wrappers-")
    ops = 300 if quick else 2000
    one_kb = [item(0, ITEM_BYTES)]
    add = Scenario("add 1 item (1 KB)", 0, lambda s, _: s.add_items(one_kb), ops)
    get = Scenario("get(limit=20) @100", 0, lambda s, _: s.get_items(limit=20), ops)
    rounds = 2 if quick else 5
    for name, make_bare in backends(tmp, redis_url).items():
        # Warm-up: the file, its WAL and the first contender's caches otherwise skew row one.
        await run_suite(f"{name}: warm-up (ignore)", stacks(make_bare), [add], rounds=1)
        added = await run_suite(f"{name}: add", stacks(make_bare), [add], rounds=rounds)
        got = await run_suite(
            f"{name}: get", stacks(make_bare, prefill=100), [get], rounds=rounds
        )
        print(f"\n{name}: wall time relative to bare (goal <= 1.30x)")
        for sc in (*added, *got):
            bare = sc.results["bare"]
            for contender in ("Encrypted", "Encrypted+TTL"):
                print(f"  {sc.name:22} {contender:14} {bare / sc.results[contender]:.2f}x")
        print(f"\n{name}: CPU us per operation, contenders interleaved (ratio to bare)")
        for sc, prefill in ((add, 0), (get, 100)):
            cpu = await cpu_per_op(stacks(make_bare, prefill), sc, rounds)
            print(f"  {sc.name:22} " + "  ".join(
                f"{n} {us:7.1f} ({us / cpu['bare']:.2f}x)" for n, us in cpu.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations and rounds")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="Redis to measure too ('' to skip)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.redis_url or None))
