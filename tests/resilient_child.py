"""Run in a child process by tests/test_resilient_faults.py: replay a spool into a primary,
announcing "APPLIED" and then hanging right after the ``pause_after``-th batch reached the
primary (before the spool could record it), so the parent can kill -9 it exactly there.

    python -m tests.resilient_child KIND TARGET PREFIX SESSION_ID SPOOL_PATH PAUSE_AFTER

``KIND TARGET PREFIX`` as in ``tests.fault_writer.open_store`` (redis, sql).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from agent_sessions.wrappers.resilient import ResilientSession
from tests.fault_writer import open_store


class PauseAfter:
    def __init__(self, inner: Any, pause_after: int) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = None
        self.pause_after = pause_after

    async def get_items(self, limit: int | None = None) -> Any:
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items(items)
        self.pause_after -= 1
        if self.pause_after == 0:
            print("APPLIED", flush=True)
            time.sleep(3600)  # noqa: ASYNC251 - blocks the loop on purpose: nothing runs until the kill

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


async def main(
    kind: str, target: str, prefix: str, session_id: str, spool: str, pause_after: int
) -> None:
    primary = open_store(kind, target, prefix, session_id)
    session = ResilientSession(PauseAfter(primary, pause_after), spool)  # type: ignore[arg-type]
    print("REPLAYED", await session.replay(), flush=True)


if __name__ == "__main__":
    kind, target, prefix, session_id, spool, pause = sys.argv[1:7]
    asyncio.run(main(kind, target, prefix, session_id, spool, int(pause)))
