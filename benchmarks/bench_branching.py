"""Branching: ours (AdvancedSession over SQLiteSession, or over any backend given by
``--url``) vs the SDK's AdvancedSQLiteSession and the bare backend, in one run.
``python benchmarks/bench_branching.py [--quick] [--url redis://127.0.0.1:6379/0]``

- create_branch_from_turn at 10 and 5000 turns. "warm": the object has read the session
  before (the usual case for a long-lived session object); "cold": a new object's first call,
  which scans the history once to learn where the user turns are.
- get_items(limit=20) on a branch of a 5000-turn history vs the bare SQLiteSession.

Contenders are timed interleaved (round by round) so load drift on a shared machine hits all
of them alike; the tables show the median (create) or the best round (get).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession, open_session
from agent_sessions.wrappers.advanced import AdvancedSession

MakeInner = Callable[[str], Awaitable[Any]]


def history(turns: int, tag: str = "") -> list[Any]:
    out: list[Any] = []
    for i in range(1, turns + 1):
        out.append({"role": "user", "content": f"question {tag}{i} " + "x" * 80})
        out.append({"role": "assistant", "content": f"answer {tag}{i} " + "y" * 160})
    return out


async def fill(session: Any, turns: int) -> None:
    items = history(turns)
    for start in range(0, len(items), 1000):
        await session.add_items(items[start : start + 1000])


async def timed_ms(op: Awaitable[Any]) -> float:
    """Run the (not yet started) coroutine ``op``; return how long it took."""
    start = time.perf_counter()
    await op
    return (time.perf_counter() - start) * 1000


async def bench_create(make: MakeInner, tmp: str, rounds: int, sdk_rounds: int) -> None:
    sdk_path = os.path.join(tmp, "create-sdk.db")
    sizes = (10, 5000)
    ours: dict[int, AdvancedSession] = {}
    sdk: dict[int, AdvancedSQLiteSession] = {}
    sids = {n: f"c{n}-{uuid.uuid4().hex[:6]}" for n in sizes}
    for n in sizes:
        ours[n] = AdvancedSession(await make(sids[n]))
        await fill(ours[n], n)
        await ours[n].get_conversation_turns()  # warm
        sdk[n] = AdvancedSQLiteSession(session_id=sids[n], db_path=sdk_path, create_tables=True)
        await fill(sdk[n], n)

    times: dict[str, list[float]] = {}
    for r in range(rounds):
        for n in sizes:
            s = ours[n]
            times.setdefault(f"warm{n}", []).append(
                await timed_ms(s.create_branch_from_turn(n // 2))
            )
            await s.switch_to_branch("main")
            if r < sdk_rounds:
                q = sdk[n]
                times.setdefault(f"sdk{n}", []).append(
                    await timed_ms(q.create_branch_from_turn(n // 2))
                )
                await q.switch_to_branch("main")
            if r < 5:
                fresh = AdvancedSession(await make(sids[n]))
                times.setdefault(f"cold{n}", []).append(
                    await timed_ms(fresh.create_branch_from_turn(n // 2))
                )
                await fresh.switch_to_branch("main")
                await fresh.close()
    for n in sizes:
        await ours[n].clear_session()
        await ours[n].close()
        sdk[n].close()

    med = {k: statistics.median(v) for k, v in times.items()}
    print("\n## create_branch_from_turn (median ms per call)\n")
    print("| turns | ours warm | ours cold (first call) | SDK AdvancedSQLiteSession "
          "| SDK / ours warm |")
    print("|---:|---:|---:|---:|---:|")
    for n in sizes:
        print(f"| {n} | {med[f'warm{n}']:.3f} | {med[f'cold{n}']:.2f} | {med[f'sdk{n}']:.2f} | "
              f"{med[f'sdk{n}'] / med[f'warm{n}']:.0f}x |")
    print(f"\nours warm, 5000 turns / 10 turns: {med['warm5000'] / med['warm10']:.2f}x; "
          f"SDK: {med['sdk5000'] / med['sdk10']:.0f}x")


async def bench_get(make: MakeInner, tmp: str, rounds: int, calls: int) -> None:
    sid = uuid.uuid4().hex[:6]
    bare = await make(f"bare-{sid}")
    await fill(bare, 5000)
    contenders: dict[str, Any] = {"bare backend (10000 items)": bare}
    for own in (5, 20):
        s = AdvancedSession(await make(f"ours{own}-{sid}"))
        await fill(s, 5000)
        await s.create_branch_from_turn(2500, "b")
        await s.add_items(history(own, "b"))
        label = "2 segments" if own * 2 < 20 else "1 segment"
        contenders[f"ours on a branch, {own * 2} own items ({label})"] = s
    sdk = AdvancedSQLiteSession(
        session_id=sid, db_path=os.path.join(tmp, "get-sdk.db"), create_tables=True
    )
    await fill(sdk, 5000)
    await sdk.create_branch_from_turn(2500, "b")
    await sdk.add_items(history(5, "b"))
    contenders["SDK AdvancedSQLiteSession on a branch"] = sdk

    best = {name: float("inf") for name in contenders}
    for s in contenders.values():
        for _ in range(30):
            await s.get_items(limit=20)
    for _ in range(rounds):
        for name, s in contenders.items():
            n = calls if "SDK" not in name else max(5, calls // 50)
            start = time.perf_counter()
            for _ in range(n):
                await s.get_items(limit=20)
            best[name] = min(best[name], (time.perf_counter() - start) / n * 1e6)
    base = best["bare backend (10000 items)"]
    print("\n## get_items(limit=20), 5000-turn history (best round, microseconds per call)\n")
    print("| session | us / call | vs bare |")
    print("|---|---:|---:|")
    for name, us in best.items():
        print(f"| {name} | {us:.1f} | {us / base:.2f}x |")
    for s in contenders.values():
        if isinstance(s, AdvancedSQLiteSession):
            s.close()
        else:
            await s.clear_session()
            await s.close()


async def main(quick: bool, url: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ours.db")

        async def make(session_id: str) -> Any:
            if url is not None:
                return await open_session(url, f"bench-{session_id}")
            return SQLiteSession(session_id, path)

        print(f"ours over: {url or 'SQLiteSession (file)'}; the SDK: AdvancedSQLiteSession (file)")
        await bench_create(make, tmp, rounds=20 if quick else 60, sdk_rounds=5 if quick else 10)
        await bench_get(make, tmp, rounds=10 if quick else 30, calls=100)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", help="run ours over this backend (open_session URL)")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.url))
