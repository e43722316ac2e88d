"""Side-by-side timing of session implementations on the same operations, in one run.

Each contender is anything with the four Session coroutines (``add_items``, ``get_items``,
``pop_item``, ``clear_session``) and optionally ``close``; raw-driver baselines implement the same
four with the driver's equivalent commands. ``run_suite`` prints ops/s and ratios to the first
contender ("ours").
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Factory = Callable[[str], Awaitable[Any]]


@dataclass
class Contender:
    name: str
    make: Factory  # session id -> session-like object


@dataclass
class Scenario:
    name: str
    prefill: int  # items stored before timing
    op: Callable[[Any, list[dict[str, Any]]], Awaitable[Any]]
    ops: int  # how many timed operations
    fresh_per_op: bool = False  # pops consume the prefill
    results: dict[str, float] = field(default_factory=dict)


def item(i: int, size: int = 200) -> dict[str, Any]:
    text = f"message {i} " + "x" * max(0, size - 60)
    return {"role": "user" if i % 2 == 0 else "assistant", "content": text}


def default_scenarios(quick: bool = False, big: int = 100_000) -> list[Scenario]:
    n = 200 if quick else 1000
    batch20 = [item(i) for i in range(20)]
    return [
        Scenario("add 1 item", 0, lambda s, one: s.add_items(one), n),
        Scenario("add batch of 20", 0, lambda s, _: s.add_items(batch20), n // 4),
        Scenario("get(limit=20) @100", 100, lambda s, _: s.get_items(limit=20), n),
        Scenario(f"get(limit=20) @{big // 1000}k", big, lambda s, _: s.get_items(limit=20), n),
        Scenario("get() of 200", 200, lambda s, _: s.get_items(), n // 4),
        Scenario("pop", n, lambda s, _: s.pop_item(), n),
    ]


async def _close(session: Any) -> None:
    close = getattr(session, "close", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


async def _prefill(session: Any, count: int) -> None:
    for start in range(0, count, 1000):
        await session.add_items([item(i) for i in range(start, min(count, start + 1000))])


async def _time_one(contender: Contender, scenario: Scenario, rounds: int) -> float:
    best = float("inf")
    one = [item(0)]
    for _ in range(rounds):
        session = await contender.make(f"bench-{uuid.uuid4().hex[:10]}")
        try:
            await _prefill(session, scenario.prefill)
            for _ in range(min(20, scenario.ops)):  # warm-up
                if scenario.fresh_per_op:
                    break
                await scenario.op(session, one)
            start = time.perf_counter()
            for _ in range(scenario.ops):
                await scenario.op(session, one)
            best = min(best, time.perf_counter() - start)
        finally:
            await session.clear_session()
            await _close(session)
    return scenario.ops / best


async def run_suite(
    title: str,
    contenders: list[Contender],
    scenarios: list[Scenario] | None = None,
    rounds: int = 3,
) -> list[Scenario]:
    """Time every scenario for every contender (best of ``rounds``) and print a table."""
    scenarios = scenarios if scenarios is not None else default_scenarios()
    for sc in scenarios:
        if sc.name == "pop":
            sc.fresh_per_op = True
        for c in contenders:
            sc.results[c.name] = await _time_one(c, sc, rounds)
    print_table(title, contenders, scenarios)
    return scenarios


def print_table(title: str, contenders: list[Contender], scenarios: list[Scenario]) -> None:
    ours = contenders[0].name
    names = [c.name for c in contenders]
    width = max(12, *(len(n) for n in names))
    print(f"\n## {title}  (ops/s, best of rounds; ratio = {ours} / other)\n")
    header = f"{'operation':24}" + "".join(f"{n:>{width + 2}}" for n in names)
    header += "".join(f"{'ours/' + n[:10]:>18}" for n in names[1:])
    print(header)
    for sc in scenarios:
        row = f"{sc.name:24}" + "".join(f"{sc.results[n]:>{width + 2},.0f}" for n in names)
        row += "".join(f"{sc.results[ours] / sc.results[n]:>18.2f}" for n in names[1:])
        print(row)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def paired(contenders: list[Contender], calls: int) -> None:
    """Alternate the contenders call by call and print median latencies: on a busy machine
    this cancels the load swings that whole-pass timings suffer from."""
    one = [item(0)]
    sessions = [await c.make(f"bench-paired-{uuid.uuid4().hex[:8]}") for c in contenders]
    names = [c.name for c in contenders]
    print(f"\n## paired: median us per call, {calls} alternating calls (ratio = ours / other)\n")
    print(f"{'operation':24}" + "".join(f"{n:>18}" for n in names)
          + "".join(f"{'ours/' + n[:10]:>18}" for n in names[1:]))
    try:
        for s in sessions:
            await s.add_items([item(i) for i in range(calls + 100)])
        ops: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "add 1 item": lambda s: s.add_items(one),
            "get(limit=20)": lambda s: s.get_items(limit=20),
            "pop": lambda s: s.pop_item(),
        }
        for label, op in ops.items():
            samples: list[list[float]] = [[] for _ in sessions]
            for _ in range(calls):
                for k, s in enumerate(sessions):
                    started = time.perf_counter()
                    await op(s)
                    samples[k].append(time.perf_counter() - started)
            med = [statistics.median(x) * 1e6 for x in samples]
            print(f"{label:24}" + "".join(f"{m:>18.0f}" for m in med)
                  + "".join(f"{m / med[0]:>18.2f}" for m in med[1:]))
    finally:
        for s in sessions:
            await s.clear_session()
