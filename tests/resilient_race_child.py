"""Run in a child process by tests/test_resilient.py: one of two writers of one session
sharing a spool file, over a shared SQLite primary.

    python -m tests.resilient_race_child add|pop DB_PATH SPOOL_PATH SESSION_ID

``add`` writes one item whose reply is lost: after the commit it prints "STORED" and waits
for a line on stdin before reporting the failure (its retry then finds the item). ``pop``
waits for a line on stdin, prints "POPPING", pops and prints the popped item's content.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from agent_sessions import SQLiteSession
from agent_sessions.errors import BackendUnavailableError
from agent_sessions.wrappers.resilient import ResilientSession, RetryPolicy


class LoseReplyOnce:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = None
        self.lost = False

    async def get_items(self, limit: int | None = None) -> Any:
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items(items)
        if not self.lost:
            self.lost = True
            print("STORED", flush=True)
            sys.stdin.readline()  # blocks the loop on purpose: the reply is "in flight"
            raise BackendUnavailableError("the test lost the reply after the commit")

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


async def main(role: str, db: str, spool: str, session_id: str) -> None:
    primary = SQLiteSession(session_id, db)
    retry = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0, total_timeout=30.0)
    if role == "add":
        session = ResilientSession(LoseReplyOnce(primary), spool, retry=retry)  # type: ignore[arg-type]
        await session.add_items([{"role": "user", "content": "X"}])
        print("ADDED", flush=True)
    else:
        session = ResilientSession(primary, spool, retry=retry)
        sys.stdin.readline()
        print("POPPING", flush=True)
        item: Any = await session.pop_item()
        print("POPPED", None if item is None else item["content"], flush=True)
    await session.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
