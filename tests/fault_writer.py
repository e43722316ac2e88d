"""A writer process for the kill -9 fault tests: ``python -m tests.fault_writer BATCH KIND TARGET
PREFIX SESSION [KIND TARGET PREFIX SESSION ...]``. Writes numbered batches to every store at
once until killed, printing ``<store index> <batch number>`` for each committed batch (with
`` unknown`` after it when the write failed as unavailable: stored whole or not at all)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any


def open_store(kind: str, target: str, prefix: str, session_id: str) -> Any:
    """The session a fault test uses for ``kind`` (sqlite, redis, sql, memory, mongodb)."""
    if kind == "sqlite":
        from agent_sessions import SQLiteSession

        return SQLiteSession(session_id, target, busy_timeout=30)
    if kind == "memory":
        from agent_sessions import InMemorySession

        return InMemorySession(session_id)
    if kind == "mongodb":  # the mongomock-motor stand-in (no server here); ``target`` unused
        from mongomock_motor import AsyncMongoMockClient

        from agent_sessions import MongoDBSession

        return MongoDBSession(session_id, client=AsyncMongoMockClient(), database=prefix)
    if kind == "redis":
        from agent_sessions import RedisSession

        return RedisSession.from_url(session_id, url=target, key_prefix=prefix)
    from agent_sessions.backends.sqlalchemy import SQLAlchemySession

    return SQLAlchemySession.from_url(session_id, url=target, table_prefix=prefix)


async def write_forever(
    index: int, kind: str, target: str, prefix: str, session_id: str, batch: int
) -> None:
    from agent_sessions.errors import BackendUnavailableError

    session = open_store(kind, target, prefix, session_id)
    n = 0
    while True:
        try:
            await session.add_items([{"role": "user", "content": f"{n}:{k}"} for k in range(batch)])
            print(index, n, flush=True)
        except BackendUnavailableError:  # a slow shared server: the batch is whole or absent
            print(index, n, "unknown", flush=True)
            await asyncio.sleep(0.1)
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
