"""Run the benchmarks and write the report: ``python benchmarks/run.py [--quick] [--only ...]``.

Writes ``docs/benchmarks.md`` (tables with machine, versions, date and load), ``docs/
benchmarks.png`` (chart; needs matplotlib, the ``bench`` extra) and ``docs/benchmarks.json``
(medians and spreads). Parts: backends, wrappers, branching, compaction, memory, recall.
Benchmarks are scripts, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import (
    bench_backends,
    bench_branching,
    bench_compaction,
    bench_memory,
    bench_recall,
    bench_wrappers,
    report,
)
from benchmarks.harness import Result, load_average, machine_info, save

PARTS = ["backends", "wrappers", "branching", "compaction", "memory", "recall"]


async def _server_versions() -> str:
    found = []
    try:
        from redis.asyncio import Redis

        client = Redis.from_url(bench_backends.REDIS_URL)
        found.append(f"Redis {(await client.info('server'))['redis_version']}")
        await client.aclose()
    except Exception:
        pass
    try:
        import asyncpg  # type: ignore[import-untyped]

        conn = await asyncpg.connect(bench_backends.PG_URL.replace("+asyncpg", ""))
        found.append(f"PostgreSQL {await conn.fetchval('SHOW server_version')}")
        await conn.close()
    except Exception:
        pass
    try:
        import asyncmy

        my = await asyncmy.connect(host="127.0.0.1", port=3306, user="root", database="test")
        async with my.cursor() as cur:
            await cur.execute("SELECT VERSION()")
            found.append(f"MariaDB {(await cur.fetchone())[0]}")
        my.close()
    except Exception:
        pass
    return ", ".join(found) + " (all on loopback)" if found else "-"


async def run(quick: bool, parts: list[str]) -> tuple[list[Result], list[str], list[str]]:
    results: list[Result] = []
    notes: list[str] = []
    extra: list[str] = []
    if "backends" in parts:
        found, skipped = await bench_backends.collect(quick)
        results += found
        notes += skipped
    if "wrappers" in parts:
        results += await bench_wrappers.collect(quick)
    if "branching" in parts:
        results += await bench_branching.collect(quick)
    if "compaction" in parts:
        results += await bench_compaction.collect(quick)
    if "memory" in parts:
        rows = await bench_memory.collect()
        extra.append(
            "Memory: "
            + "; ".join(
                f"{r['contender']} {r['kib'] / 1024:.1f} MiB"
                if "kib" in r
                else f"{r['contender']} failed"
                for r in rows
            )
            + f" (RSS growth for {bench_memory.SESSIONS:,} open sessions, each read once)."
        )
    if "recall" in parts:
        extra += await bench_recall.collect(quick)
    return results, notes, extra


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller histories, fewer calls")
    parser.add_argument("--only", default="", help=f"comma-separated parts of {PARTS}")
    parser.add_argument("--out", default="docs", help="folder for benchmarks.md/.png/.json")
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p] or PARTS
    info: dict[str, Any] = machine_info()
    info["quick"] = args.quick
    info["load_before"] = " ".join(f"{x:.1f}" for x in load_average())
    info["servers"] = asyncio.run(_server_versions())
    started = time.time()
    results, notes, extra = asyncio.run(run(args.quick, parts))
    info["load_after"] = " ".join(f"{x:.1f}" for x in load_average())
    info["extra"] = [*extra, f"Run time {time.time() - started:.0f} s."]
    os.makedirs(args.out, exist_ok=True)
    chart_name: str | None = "benchmarks.png"
    try:
        report.chart([r.summary() for r in results], os.path.join(args.out, "benchmarks.png"))
    except ImportError:
        chart_name = None
        notes.append("No chart: matplotlib is missing (pip install 'agent-sessions-store[bench]').")
    with open(os.path.join(args.out, "benchmarks.md"), "w") as f:
        f.write(report.markdown(results, info, notes, chart_name))
    save(
        os.path.join(args.out, "benchmarks.json"),
        {"info": info, "results": [r.summary() for r in results], "notes": notes},
    )
    report.print_results(results)
    print(f"\nwrote {args.out}/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
