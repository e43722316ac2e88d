"""Window layer cost: ``WindowSession.get_items()`` (limit=None) on a 10k-item history vs the
bare backend's ``get_items(limit=N)`` returning the same number of items, in one run.

    python benchmarks/bench_window.py [--quick] [--redis-url redis://127.0.0.1:6379/0]

A turn here is 5 items (user message, reasoning, function call, a 2 KB tool output, assistant
message). Each window configuration is its own row, against the bare read of exactly as many
items as that window shows. Measured warm (one object) and fresh (a new object per call: the
page size learned from the previous read is lost). Target (issue 17): within 1.2x.
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
from agent_sessions.wrappers.compaction import TokenEstimator
from agent_sessions.wrappers.window import MicroCompaction, WindowSession
from benchmarks.harness import Result, alternate, close, later, new_id, purge, run_prefix

PREFIX = run_prefix("window")

HISTORY = 10_000
BARE = "bare get_items(limit=N)"
WINDOW = "WindowSession get_items()"
Open = Callable[[str], Awaitable[Any]]


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {i} " + "q" * 150},
        {"type": "reasoning", "id": f"rs{i}", "summary": [{"type": "summary_text", "text": "t"}]},
        {"type": "function_call", "call_id": f"c{i}", "name": "lookup", "arguments": '{"q": 1}'},
        {"type": "function_call_output", "call_id": f"c{i}", "output": "r" * 2000},
        {"role": "assistant", "content": f"answer {i} " + "a" * 300},
    ]


CONFIGS: dict[str, dict[str, Any]] = {
    "max_turns=8": {"max_turns": 8},
    "max_tokens=8000": {"max_tokens": 8000},
    "max_turns=8 + micro": {
        "max_turns": 8,
        "micro_compaction": MicroCompaction(keep_turns=2, max_chars=500, head=200, tail=100),
    },
}


async def bench_backend(backend: str, open_bare: Open, calls: int) -> list[Result]:
    session_id = new_id("window")
    bare = await open_bare(session_id)
    results: list[Result] = []
    try:
        for start in range(0, HISTORY // 5, 200):
            await bare.add_items([x for i in range(start, start + 200) for x in turn(i)])
        estimator = TokenEstimator()  # tiktoken when its encoding is available, else chars/4
        for label, options in CONFIGS.items():

            async def make(sid: str = session_id, opts: dict[str, Any] = options) -> Any:
                return WindowSession(await open_bare(sid), token_estimator=estimator, **opts)

            window = await make()
            shown = len(await window.get_items())

            async def read(s: Any, n: int = shown) -> Any:
                """The window reads with limit=None; the bare backend as many items."""
                if isinstance(s, WindowSession):
                    return await s.get_items()
                return await s.get_items(n)

            for mode in ("warm", "fresh"):
                contenders = {BARE: bare, WINDOW: window}
                fresh = None
                if mode == "fresh":
                    fresh = {BARE: later(open_bare, session_id), WINDOW: later(make)}
                samples = await alternate(contenders, read, calls, fresh=fresh)
                results.append(
                    Result(f"Window on {backend} ({HISTORY:,} items, {estimator.method})",
                           f"{label} (N={shown})", HISTORY, mode, samples, kind="overhead")
                )  # fmt: skip
            await close(window)
            print(f"  {backend} {label} done", flush=True)
    finally:
        await bare.clear_session()
        await close(bare)
    return results


async def collect(quick: bool, redis_url: str | None) -> list[Result]:
    calls = 60 if quick else 300
    path = os.path.join(tempfile.mkdtemp(prefix="bench-window-"), "w.db")

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
            results += await bench_backend(name, opener, calls)
    finally:
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
