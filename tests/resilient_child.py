"""Run in a child process by tests/test_resilient_faults.py: replay a spool into a Redis
primary, announcing "APPLIED" and then hanging right after the ``pause_after``-th batch reached
Redis (before the spool could record it), so the parent can kill -9 it exactly there.

    python -m tests.resilient_child REDIS_URL KEY_PREFIX SESSION_ID SPOOL_PATH PAUSE_AFTER
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from agent_sessions import RedisSession
from agent_sessions.wrappers.resilient import ResilientSession


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


async def main(url: str, prefix: str, session_id: str, spool: str, pause_after: int) -> None:
    primary = RedisSession.from_url(session_id, url=url, key_prefix=prefix, timeout=2.0)
    session = ResilientSession(PauseAfter(primary, pause_after), spool)  # type: ignore[arg-type]
    print("REPLAYED", await session.replay(), flush=True)


if __name__ == "__main__":
    url, prefix, session_id, spool, pause = sys.argv[1:6]
    asyncio.run(main(url, prefix, session_id, spool, int(pause)))
