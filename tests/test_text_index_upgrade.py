"""A database text index built under an older tokenization policy (no ``TEXT_MARK``, no CJK
bigrams in it) is dropped and built again on the first search after the upgrade, so the
items it held become searchable by today's terms, not silently missed (issue 40)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agent_sessions import SQLAlchemySession, SQLiteSession
from agent_sessions.backends.sql.common import Tables, TextTables
from agent_sessions.core.textsearch import TEXT_MARK
from tests.test_sql_text_search import url  # noqa: F401 (fixture)

pytestmark = pytest.mark.asyncio
LINE = "그럼 부산은요?"


def note(value: str) -> Any:
    return {"type": "note", "text": value}


async def _found(session: Any, query: str) -> list[str]:
    return [item["text"] for _, item, _ in await session.search_text(query, limit=10)]


def _unmark(raw: Any, trigger: str) -> None:
    """Recreate ``trigger`` (SQLite) without the mark, as an older version made it."""
    (sql,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = ?", (trigger,)).fetchone()
    raw.execute(f"DROP TRIGGER {trigger}")
    raw.execute(sql.replace(f"/* {TEXT_MARK} */", ""))


async def test_sqlite_rebuilds_an_index_of_an_older_policy(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    session = SQLiteSession("chat", path)
    await session.add_items([note(LINE), note("plain ascii")])
    assert await _found(session, "부산") == [LINE]
    await session.close()
    with sqlite3.connect(path) as raw:  # an index without bigrams, made before the mark
        raw.execute("INSERT INTO agent_messages_text (agent_messages_text) VALUES ('delete-all')")
        _unmark(raw, "agent_messages_text_insert")
    session = SQLiteSession("chat", path)
    assert await _found(session, "부산") == [LINE]
    assert await _found(session, "plain") == ["plain ascii"]
    await session.close()


async def test_sql_rebuilds_an_index_of_an_older_policy(url: str, sql_prefix: str) -> None:  # noqa: F811
    session = SQLAlchemySession.from_url("chat", url=url, table_prefix=sql_prefix)
    await session.add_items([note(LINE), note("plain ascii")])
    assert await _found(session, "부산") == [LINE]
    x = TextTables.of(Tables.build(sql_prefix, None, None))
    async with session.engine.begin() as conn:  # an index without bigrams, made before the mark
        await conn.execute(text(f"DELETE FROM {x.index}"))
        dialect = conn.dialect.name
        if dialect == "postgresql":
            found = await conn.execute(
                text("SELECT pg_get_functiondef(to_regproc(:f))"), {"f": x.name("sync")}
            )
            await conn.execute(text(found.scalar_one().replace(TEXT_MARK, "older")))
        elif dialect in ("mysql", "mariadb"):
            await conn.execute(text(f"ALTER FUNCTION {x.name('terms')} COMMENT 'older'"))
        else:
            raw: Any = (await conn.get_raw_connection()).driver_connection
            _unmark(raw._conn, x.name("ins"))  # aiosqlite's sqlite3 connection
    await session.close()
    session = SQLAlchemySession.from_url("chat", url=url, table_prefix=sql_prefix)
    assert await _found(session, "부산") == [LINE]
    assert await _found(session, "plain") == ["plain ascii"]
    await session.close()
