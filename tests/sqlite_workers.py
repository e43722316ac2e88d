"""Child-process bodies for the SQLite multi-process tests (importable under spawn)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any, cast

from agent_sessions import SQLiteSession


def add_worker(path: str, session_id: str, worker: int, count: int) -> None:
    async def run() -> None:
        session = SQLiteSession(session_id, path, busy_timeout=30)
        for i in range(count):
            await session.add_items([{"role": "user", "content": f"{worker}:{i}"}])
        await session.close()

    asyncio.run(run())


def pop_worker(path: str, session_id: str) -> list[str]:
    async def run() -> list[str]:
        session = SQLiteSession(session_id, path, busy_timeout=30)
        got: list[str] = []
        while (item := await session.pop_item()) is not None:
            got.append(cast("dict[str, Any]", item)["content"])
        await session.close()
        return got

    return asyncio.run(run())


def batch_writer_forever(path: str, session_id: str, batch: int) -> None:
    """Write numbered batches until killed; prints each committed batch number."""

    async def run() -> None:
        session = SQLiteSession(session_id, path, busy_timeout=30)
        n = 0
        while True:
            await session.add_items(
                [{"role": "user", "content": f"{n}:{k}"} for k in range(batch)]
            )
            print(n, flush=True)
            n += 1

    asyncio.run(run())


if __name__ == "__main__":
    batch_writer_forever(sys.argv[1], sys.argv[2], int(sys.argv[3]))
