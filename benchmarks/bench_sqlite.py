"""SQLite: ours vs raw aiosqlite (same SQL, same pragmas) vs the SDK's SQLiteSession and
AsyncSQLiteSession, in one run.  ``python benchmarks/bench_sqlite.py [--quick]``"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from typing import Any

import aiosqlite
from agents.extensions.memory.async_sqlite_session import AsyncSQLiteSession
from agents.memory import SQLiteSession as SDKSQLiteSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from benchmarks.harness import Contender, default_scenarios, paired, run_suite

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS agent_sessions (session_id TEXT PRIMARY KEY, "
    "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT "
    "CURRENT_TIMESTAMP)",
    "CREATE TABLE IF NOT EXISTS agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "session_id TEXT NOT NULL, message_data TEXT NOT NULL, created_at TIMESTAMP DEFAULT "
    "CURRENT_TIMESTAMP)",
    "CREATE INDEX IF NOT EXISTS idx_agent_messages_session_id ON agent_messages (session_id, id)",
]


class RawAiosqlite:
    """The same SQL as SQLiteSession, written directly against one aiosqlite connection."""

    def __init__(self, db: aiosqlite.Connection, session_id: str) -> None:
        self.db, self.sid = db, session_id

    @classmethod
    async def connect(cls, path: str) -> aiosqlite.Connection:
        db = await aiosqlite.connect(path, isolation_level=None)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA busy_timeout=5000")
        for statement in SCHEMA:
            await db.execute(statement)
        return db

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        await self.db.execute("BEGIN IMMEDIATE")
        await self.db.execute(
            "INSERT INTO agent_sessions (session_id) VALUES (?) ON CONFLICT(session_id) "
            "DO UPDATE SET updated_at = CURRENT_TIMESTAMP",
            (self.sid,),
        )
        await self.db.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [(self.sid, json.dumps(i)) for i in items],
        )
        await self.db.execute("COMMIT")

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            cur = await self.db.execute(
                "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id",
                (self.sid,),
            )
            return [json.loads(r[0]) for r in await cur.fetchall()]
        cur = await self.db.execute(
            "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id DESC "
            "LIMIT ?",
            (self.sid, limit),
        )
        return [json.loads(r[0]) for r in reversed(list(await cur.fetchall()))]

    async def pop_item(self) -> Any:
        await self.db.execute("BEGIN IMMEDIATE")
        cur = await self.db.execute(
            "DELETE FROM agent_messages WHERE id = (SELECT id FROM agent_messages WHERE "
            "session_id = ? ORDER BY id DESC LIMIT 1) RETURNING message_data",
            (self.sid,),
        )
        rows = list(await cur.fetchall())
        await self.db.execute("COMMIT")
        return json.loads(rows[0][0]) if rows else None

    async def clear_session(self) -> None:
        await self.db.execute("DELETE FROM agent_messages WHERE session_id = ?", (self.sid,))


async def main(quick: bool) -> None:
    tmp = tempfile.mkdtemp(prefix="bench-sqlite-")
    raw_db = await RawAiosqlite.connect(os.path.join(tmp, "raw.db"))

    # Holds the file's shared connection open across rounds, as an application would (the
    # harness closes each session; the last close would otherwise close the connection).
    keep = SQLiteSession("keep", os.path.join(tmp, "ours.db"))
    await keep.get_items(limit=1)

    async def ours(sid: str) -> Any:
        return SQLiteSession(sid, os.path.join(tmp, "ours.db"))

    async def raw(sid: str) -> Any:
        return RawAiosqlite(raw_db, sid)

    async def sdk(sid: str) -> Any:
        return SDKSQLiteSession(sid, os.path.join(tmp, "sdk.db"))

    async def sdk_async(sid: str) -> Any:
        return AsyncSQLiteSession(sid, os.path.join(tmp, "sdk_async.db"))

    big = 10_000 if quick else 100_000
    contenders = [
        Contender("ours", ours),
        Contender("raw aiosqlite", raw),
        Contender("SDK SQLiteSession", sdk),
        Contender("SDK AsyncSQLite", sdk_async),
    ]
    await run_suite(
        "SQLite (file, WAL)", contenders, default_scenarios(quick, big=big),
        rounds=2 if quick else 3,
    )
    await paired(contenders, 300 if quick else 1500)
    await keep.close()
    await raw_db.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer ops, 10k-item big session")
    asyncio.run(main(parser.parse_args().quick))
