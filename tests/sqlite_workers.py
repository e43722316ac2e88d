"""Child-process bodies for the SQLite multi-process tests (importable under spawn), and
``in_threads`` for the multi-thread ones."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, cast

from agent_sessions import SQLiteSession


def in_threads(
    count: int, body: Callable[[int], Coroutine[Any, Any, None]], timeout: float = 120
) -> list[BaseException]:
    """Run ``body(n)`` for each n < ``count`` at once, each on a thread with its own event loop;
    return what they raised."""
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            asyncio.run(body(n))
        except BaseException as exc:  # returned: the caller's assertion names it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors


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
            await session.add_items([{"role": "user", "content": f"{n}:{k}"} for k in range(batch)])
            print(n, flush=True)
            n += 1

    asyncio.run(run())


if __name__ == "__main__":
    batch_writer_forever(sys.argv[1], sys.argv[2], int(sys.argv[3]))
