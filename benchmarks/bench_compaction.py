"""Compaction hook cost: ``CompactionSession.run_compaction`` with a trigger that does not fire,
at 100 / 10k / 100k items, and a whole ``Runner.run`` turn (ScriptedModel) at 10k items with
``session_settings.limit=20``, plain SQLite session vs the same under CompactionSession.

    python benchmarks/bench_compaction.py [--quick]

The Runner calls ``run_compaction`` after every turn; each timed hook call follows an untimed
write of two items, as a turn makes. Target: the wrapped turn <= 1.1x the plain turn.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
from typing import Any

from agents import Agent, Runner
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from agent_sessions.wrappers.compaction import CompactionSession
from benchmarks.harness import Result, alternate, close, item, new_id, prefill


def never(_context: Any) -> bool:
    return False


def scripted(turns: int) -> Agent[Any]:
    replies = [
        [assistant_message(f"answer {i} " + "z" * 300, item_id=f"m{i}")] for i in range(turns)
    ]
    return Agent(name="bench", instructions="Be brief.", model=ScriptedModel(replies))


async def hook_scaling(path: str, sizes: list[int], calls: int) -> list[Result]:
    results: list[Result] = []
    turn = [item(0), item(1)]

    async def hook(s: Any) -> Any:
        return await s.run_compaction()

    async def write_turn(s: Any) -> Any:
        return await s.add_items(turn)

    sessions: dict[str, Any] = {}
    for size in sizes:  # all sizes open at once and alternating: drift cannot pose as growth
        inner = SQLiteSession(new_id("cmp"), path)
        sessions[str(size)] = CompactionSession(inner, should_trigger_compaction=never)
        await prefill(sessions[str(size)], size)
    try:
        samples = await alternate(sessions, hook, calls, restore=write_turn)
        for size in sizes:
            results.append(
                Result("Compaction hook (SQLite, idle trigger)", "run_compaction", size, "warm",
                       {"CompactionSession": samples[str(size)]})
            )  # fmt: skip
        print("  compaction hook done", flush=True)
    finally:
        for session in sessions.values():
            await session.clear_session()
            await session.close()
    return results


async def runner_turn(path: str, size: int, calls: int) -> Result:
    limit = SessionSettings(limit=20)
    sessions = {
        "plain SQLiteSession": SQLiteSession(new_id("plain"), path, session_settings=limit),
        "CompactionSession, idle trigger": CompactionSession(
            SQLiteSession(new_id("wrapped"), path, session_settings=limit),
            should_trigger_compaction=never,
        ),
    }
    agents = {name: scripted(calls + 10) for name in sessions}
    counter = itertools.count()

    async def turn(s: Any) -> Any:
        name = next(n for n, v in sessions.items() if v is s)
        return await Runner.run(agents[name], f"question {next(counter)}", session=s)

    try:
        for s in sessions.values():
            await prefill(s, size)
        samples = await alternate(sessions, turn, calls)
    finally:
        for s in sessions.values():
            await s.clear_session()
            await close(s)
    return Result(
        "Runner turn (ScriptedModel, SQLite, session limit 20)",
        "Runner.run turn",
        size,
        "warm",
        samples,
        kind="overhead",
    )


async def collect(quick: bool) -> list[Result]:
    path = os.path.join(tempfile.mkdtemp(prefix="bench-compaction-"), "c.db")
    keep = SQLiteSession("keep-open", path)
    await keep.get_items(limit=1)
    try:
        sizes = [100, 10_000] if quick else [100, 10_000, 100_000]
        results = await hook_scaling(path, sizes, 100 if quick else 300)
        results.append(await runner_turn(path, 10_000, 40 if quick else 150))
    finally:
        await keep.close()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 / 10k items, fewer calls")
    args = parser.parse_args()
    found = asyncio.run(collect(args.quick))
    from benchmarks.report import print_results

    print_results(found)
