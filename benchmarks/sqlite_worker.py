"""SQLiteSession's worker thread against aiosqlite doing the same job, in one alternating run.

    python benchmarks/sqlite_worker.py [--calls 300]

Not part of ``make bench``: it answers one question (issue 25): would aiosqlite be simpler or
faster than the backend's own worker thread for the same promises? Both contenders write the
SDK's schema in one file each, with the same statements: an add is BEGIN IMMEDIATE, the sessions
row upsert, one multi-row INSERT, COMMIT. ``ours`` hands the whole transaction to its worker in
one hop; ``aiosqlite`` awaits each statement (one hop each), holds an ``asyncio.Lock`` so two
tasks' transactions cannot interleave on the shared connection, and runs the transaction in a
shielded task so a cancelled caller leaves it whole or absent, as ``ours`` promises.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from agent_sessions.core.codec import decode_item, encode_batch
from benchmarks.harness import alternate, item, prefill

TOUCH = (
    "INSERT INTO agent_sessions (session_id) VALUES (?) ON CONFLICT(session_id) "
    "DO UPDATE SET updated_at = CURRENT_TIMESTAMP"
)
INSERT = "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)"


class AiosqliteSession:
    """What SQLiteSession's writes and reads would be on aiosqlite."""

    def __init__(self, db: Any, session_id: str) -> None:
        self.db, self.sid, self.lock = db, session_id, asyncio.Lock()

    async def _transaction(self, statements: list[tuple[str, list[Any]]]) -> Any:
        async with self.lock:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements[:-1]:
                    await self.db.execute(sql, params)
                rows = await self.db.execute_fetchall(*statements[-1])
                await self.db.execute("COMMIT")
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
            return rows

    async def _whole(self, statements: list[tuple[str, list[Any]]]) -> Any:
        return await asyncio.shield(asyncio.ensure_future(self._transaction(statements)))

    async def add_items(self, items: list[Any]) -> None:
        payloads = encode_batch(items)
        sql = INSERT + ", (?, ?)" * (len(payloads) - 1)
        params = [x for p in payloads for x in (self.sid, p)]
        await self._whole([(TOUCH, [self.sid]), (sql, params)])

    async def get_items(self, limit: int | None = None) -> list[Any]:
        rows = await self.db.execute_fetchall(
            "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id DESC LIMIT ?",
            (self.sid, -1 if limit is None else limit),
        )
        return [decode_item(r[0]) for r in reversed(list(rows))]

    async def pop_item(self) -> Any:
        rows = await self._whole(
            [
                (
                    "DELETE FROM agent_messages WHERE id = (SELECT id FROM agent_messages "
                    "WHERE session_id = ? ORDER BY id DESC LIMIT 1) RETURNING message_data",
                    [self.sid],
                )
            ]
        )
        return decode_item(rows[0][0]) if rows else None


async def main(calls: int) -> None:
    import aiosqlite

    tmp = tempfile.mkdtemp(prefix="bench-sqlite-worker-")
    ours = SQLiteSession("ours", os.path.join(tmp, "ours.db"))
    path = os.path.join(tmp, "aiosqlite.db")
    async with SQLiteSession("schema", path) as schema:  # the same tables, WAL
        await schema.get_items(limit=1)
    db = await aiosqlite.connect(path, isolation_level=None)
    await db.execute("PRAGMA synchronous = NORMAL")  # ours' default
    warm = {"ours": ours, "aiosqlite": AiosqliteSession(db, "theirs")}
    for session in warm.values():
        await prefill(session, 100)
    one, batch = [item(0)], [item(i) for i in range(20)]

    async def add_one(s: Any) -> None:
        await s.add_items(one)

    async def add_batch(s: Any) -> None:
        await s.add_items(batch)

    async def get20(s: Any) -> None:
        await s.get_items(limit=20)

    async def pop(s: Any) -> None:
        await s.pop_item()

    try:
        print("operation        ours   aiosqlite  aiosqlite / ours (time)")
        for name, op, n, restore in (
            ("add 1", add_one, calls, pop),
            ("add 20", add_batch, calls // 3, None),
            ("get(limit=20)", get20, calls, None),
            ("pop", pop, calls, add_one),
        ):
            samples = await alternate(warm, op, n, restore=restore)
            ours_us, theirs_us = (sorted(samples[k])[len(samples[k]) // 2] * 1e6 for k in warm)
            print(f"{name:14} {ours_us:6.0f} µs {theirs_us:6.0f} µs  {theirs_us / ours_us:5.2f}")
    finally:
        await ours.close()
        await db.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
