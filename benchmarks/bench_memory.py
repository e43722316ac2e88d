"""Resident memory of 1,000 open sessions (each has read its 10 items), ours vs the SDK's class.

    python benchmarks/bench_memory.py

Each contender runs in its own fresh interpreter; the figure is the growth of VmRSS from
after imports and set-up to after opening the 1,000 sessions.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.harness import purge, run_prefix

SESSIONS = 1000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def child(contender: str, workdir: str, run: str) -> dict[str, Any]:
    """Open SESSIONS sessions of ``contender``; return the RSS growth in KiB."""
    path = os.path.join(workdir, f"{contender}.db")
    prefix = f"{run}-{os.getpid()}"
    if contender == "ours SQLiteSession":
        from agent_sessions import SQLiteSession

        def make(i: int) -> Any:
            return SQLiteSession(f"s{i}", path)
    elif contender == "SDK SQLiteSession":
        from agents.memory import SQLiteSession as SDKSQLiteSession

        def make(i: int) -> Any:
            return SDKSQLiteSession(f"s{i}", path)
    else:
        from redis.asyncio import Redis

        client = Redis.from_url(REDIS_URL)
        await client.ping()
        if contender == "ours RedisSession":
            from agent_sessions.backends.redis import RedisSession

            def make(i: int) -> Any:
                return RedisSession(f"s{i}", client=client, key_prefix=prefix)
        else:
            from agents.extensions.memory import RedisSession as SDKRedisSession

            def make(i: int) -> Any:
                return SDKRedisSession(f"s{i}", redis_client=client, key_prefix=prefix)

    first = make(-1)
    await first.add_items([{"role": "user", "content": "warm-up"}])
    await first.get_items()
    before = rss_kib()
    sessions = [make(i) for i in range(SESSIONS)]
    for s in sessions:
        await s.add_items([{"role": "user", "content": f"message {k}"} for k in range(10)])
        await s.get_items()
    after = rss_kib()
    for s in [first, *sessions]:
        await s.clear_session()
    return {"contender": contender, "kib": after - before}


async def collect() -> list[dict[str, Any]]:
    workdir = tempfile.mkdtemp(prefix="bench-memory-")
    run = run_prefix("memory")
    found: list[dict[str, Any]] = []
    try:
        for contender in (
            "ours SQLiteSession",
            "SDK SQLiteSession",
            "ours RedisSession",
            "SDK RedisSession",
        ):
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, __file__, "--child", contender, workdir, run],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if done.returncode != 0:
                error = done.stderr.strip().splitlines()[-1]
                found.append({"contender": contender, "error": error})
            else:
                found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        try:
            await purge(run, redis_url=REDIS_URL)
        except OSError as exc:  # no Redis here: the children wrote nothing to it
            print(f"Redis clean-up skipped: {exc}", file=sys.stderr)
    return found


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"| contender | RSS growth for {SESSIONS:,} open sessions |", "|---|---:|"]
    for r in rows:
        value = f"{r['kib'] / 1024:.1f} MiB" if "kib" in r else f"failed: {r['error']}"
        lines.append(f"| {r['contender']} | {value} |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(asyncio.run(child(sys.argv[2], sys.argv[3], sys.argv[4]))))
    else:
        print("\n".join(table(asyncio.run(collect()))))
