"""The catalog of a SQLite file written by ``SQLiteSession``."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...core.catalog import CatalogQuery, SessionInfo, group_families
from ...core.sqltext import family_sql, page_sql, rows_to_infos, side_stores_sql, sqlite_time


class SQLiteFileCatalog:
    """The catalog of a :class:`~agent_sessions.backends.sqlite.SQLiteSession`'s database,
    run on the session's own connection (so it sees a private ``:memory:`` database too)."""

    def __init__(self, session: Any) -> None:  # a SQLiteSession (session.py imports this)
        self.session = session
        self.sessions = session.sessions_table
        self.messages = session.messages_table

    async def exists(self) -> bool:
        path = self.session.path
        if path == ":memory:":
            return True
        names = (self.sessions, self.messages)

        def probe() -> bool:
            if not os.path.isfile(path):
                return False
            uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True)
            try:
                found = conn.execute(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                    names,
                ).fetchone()[0]
            except sqlite3.DatabaseError:
                return False
            finally:
                conn.close()
            return bool(found == 2)

        return await asyncio.to_thread(probe)

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        return rows_to_infos(
            await self._rows(*page_sql(self.sessions, self.messages, query, sqlite_time))
        )

    async def family_ids(self, session_id: str) -> list[str]:
        return [str(r[0]) for r in await self._rows(*family_sql(self.sessions, session_id))]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        rows = await self._rows(*side_stores_sql(self.sessions))
        return group_families((str(r[0]) for r in rows), session_ids)

    async def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return await self.session._run(lambda raw: raw.execute(sql, params).fetchall())  # type: ignore[no-any-return]

    async def delete(self, session_ids: Sequence[str]) -> int:
        ids = list(session_ids)
        marks = ", ".join("?" for _ in ids)
        statements = (
            f"DELETE FROM {self.messages} WHERE session_id IN ({marks})",
            f"DELETE FROM {self.sessions} WHERE session_id IN ({marks})",
        )

        text = self.session.schema.text

        def run(raw: sqlite3.Connection) -> int:
            raw.execute("BEGIN IMMEDIATE")
            try:
                text.erasing(raw, ids, lambda: raw.execute(statements[0], ids))
                existed = raw.execute(statements[1], ids).rowcount
                raw.execute("COMMIT")
            except BaseException:
                if raw.in_transaction:  # a failed COMMIT too: never leave the connection in one
                    raw.execute("ROLLBACK")
                raise
            # The WAL still holds the erased pages as they were: copy it back and empty it
            # (waits for readers of older snapshots, up to the busy timeout).
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return int(existed)

        return await self.session._run(run) if ids else 0
