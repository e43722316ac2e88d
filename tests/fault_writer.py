"""A writer process for the kill -9 fault tests: ``python -m tests.fault_writer BATCH KIND TARGET
PREFIX SESSION [KIND TARGET PREFIX SESSION ...]``. Writes numbered batches to every store at
once until killed, printing ``<store index> <batch number>`` for each committed batch."""

from __future__ import annotations

import asyncio
import sys
from typing import Any


def open_store(kind: str, target: str, prefix: str, session_id: str) -> Any:
    """The session a fault test uses for ``kind`` (sqlite, redis, sql)."""
    if kind == "sqlite":
        from agent_sessions import SQLiteSession

        return SQLiteSession(session_id, target, busy_timeout=30)
    if kind == "redis":
        from agent_sessions import RedisSession

        return RedisSession.from_url(session_id, url=target, key_prefix=prefix)
    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    return SQLAlchemySession.from_url(session_id, url=target, table_prefix=prefix)


async def write_forever(
    index: int, kind: str, target: str, prefix: str, session_id: str, batch: int
) -> None:
    session = open_store(kind, target, prefix, session_id)
    n = 0
    while True:
        await session.add_items([{"role": "user", "content": f"{n}:{k}"} for k in range(batch)])
        print(index, n, flush=True)
        n += 1


async def main(argv: list[str]) -> None:
    batch, specs = int(argv[0]), argv[1:]
    await asyncio.gather(
        *(
            write_forever(i // 4, specs[i], specs[i + 1], specs[i + 2], specs[i + 3], batch)
            for i in range(0, len(specs), 4)
        )
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
