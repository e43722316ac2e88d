"""The benchmark harness and report still run (on in-memory sessions, a few calls; nothing here
looks at a time)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_sessions import InMemorySession
from benchmarks.harness import Result, alternate, item, later, prefill
from benchmarks.report import markdown, scaling_table, section_table


@pytest.mark.asyncio
async def test_alternate_times_every_contender_warm_and_fresh_and_keeps_the_size() -> None:
    ids = {name: f"h-{name}-{uuid.uuid4().hex[:6]}" for name in ("ours", "other")}
    warm = {name: InMemorySession(sid) for name, sid in ids.items()}
    for session in warm.values():
        await prefill(session, 30)

    async def pop(s: Any) -> Any:
        return await s.pop_item()

    async def add(s: Any) -> Any:
        return await s.add_items([item(0)])

    samples = await alternate(warm, pop, 7, restore=add, warmup=2)
    assert {n: len(v) for n, v in samples.items()} == {"ours": 7, "other": 7}
    assert [len(await s.get_items()) for s in warm.values()] == [30, 30]

    fresh = {name: later(InMemorySession, sid) for name, sid in ids.items()}
    made: list[Any] = []

    async def read(s: Any) -> Any:
        made.append(s)
        return await s.get_items(limit=5)

    await alternate(warm, read, 3, fresh=fresh, warmup=0)
    assert len(made) == 6 and not any(s in warm.values() for s in made)


def test_report_renders_tables_with_ratios(tmp_path: Path) -> None:
    rows = [
        Result("Backend X", "pop", size, "warm", {"ours": [1e-4, 2e-4, 3e-4],
                                                  "raw": [2e-4, 4e-4, 6e-4]})
        for size in (100, 10_000)
    ]  # fmt: skip
    table = section_table(rows)
    assert table[0].startswith("| operation | items | object | ours (median) | raw (median)")
    assert "| pop | 10k | warm | 200 µs | 400 µs | 2.00 |" in table[2 + 1]
    assert scaling_table(rows)[-1].endswith("| 1.00 |")
    info = {
        "date": "d", "machine": "m", "python": "p", "commit": "c", "packages": {"x": "1"},
        "sqlite": "s", "load_before": "0", "load_after": "0",
    }  # fmt: skip
    text = markdown(rows, info, ["a note"], None)
    assert "## Backend X" in text and "- a note" in text


def test_the_chart_is_a_grid_readable_at_page_width(tmp_path: Path) -> None:
    """Drawn from the saved results: at most two panels a row, at most 1,000 px wide (it was a
    2,772 px strip of six panels)."""
    import json
    import struct

    from benchmarks.report import chart  # matplotlib: in the dev extra, so never skipped

    root = Path(__file__).resolve().parent.parent
    rows = json.loads((root / "docs" / "benchmarks.json").read_text())["results"]
    chart(rows, str(tmp_path / "chart.png"))
    width, height = struct.unpack(">II", (tmp_path / "chart.png").read_bytes()[16:24])
    assert width <= 1000 < height


@pytest.mark.asyncio
async def test_the_memory_part_runs_inside_the_runs_event_loop() -> None:
    """``benchmarks/run.py`` awaits each part in one event loop; the memory part once started
    its own (``asyncio.run``) and failed there, so ``make bench`` failed."""
    from benchmarks import bench_memory
    from tests.servers import require_server

    require_server("Redis", "127.0.0.1", 6379)
    rows = await bench_memory.collect()
    assert [r["contender"] for r in rows if "kib" in r] == [
        "ours SQLiteSession",
        "SDK SQLiteSession",
        "ours RedisSession",
        "SDK RedisSession",
    ], rows
