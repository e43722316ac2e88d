"""The databases' side of the tokenization policy (issue 40): each derives in SQL the CJK
terms ``core.textsearch`` derives in Python, and an index built under an older policy (no
``TEXT_MARK``, no CJK bigrams in it) is dropped and built again on the first search after
the upgrade, so the items it held are searchable by today's terms, not silently missed."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agent_sessions import SQLAlchemySession, SQLiteSession
from agent_sessions.backends.sql.common import Tables, TextTables
from agent_sessions.core.textsearch import (
    TEXT_MARK,
    cjk_terms,
    mariadb_search_text,
    mariadb_terms_function,
    postgres_search_text,
    sqlite_search_text,
)
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


SAMPLES = [
    "그럼 부산은요?",
    "날씨가 어때요?",
    "我下周要去北京出差。",
    "東京の天気はどうですか",
    "A북 b",
    "x北y京z",
    "Berlin İzmir",
    "한\n국\t어 'quote'",
    "ｱｲｳ",
    "",
    *["".join(random.Random(n).choices("가나다北京の ab,.\n", k=12)) for n in range(40)],
]
"""Texts whose CJK terms each database's SQL must derive as core.textsearch does."""


async def test_each_database_derives_the_terms_python_does(url: str, sql_prefix: str) -> None:  # noqa: F811
    # Closing the session gives back its share of the engine shared by every session of this
    # URL; disposing the engine alone left the share held, and that engine's pool open to
    # interpreter exit for every later test on the URL (issue 41).
    probe = SQLAlchemySession.from_url("probe", url=url, table_prefix=sql_prefix)
    function = f"{sql_prefix}terms_probe"
    async with probe, probe.engine.begin() as conn:
        dialect = conn.dialect.name
        if dialect in ("mysql", "mariadb"):
            await conn.execute(text(mariadb_terms_function(function)))
        try:
            for sample in [*SAMPLES, "가나다라" * 700]:  # the last: MariaDB's function path
                if dialect == "postgresql":
                    sql = f"SELECT {postgres_search_text('CAST(:t AS text)')}"
                elif dialect == "sqlite":
                    sql = f"SELECT {sqlite_search_text(':t')}"
                else:
                    sql = f"SELECT {mariadb_search_text('CONVERT(:t USING utf8mb4)', function)}"
                got = (await conn.execute(text(sql), {"t": sample})).scalar_one()
                assert got[: len(sample)] == sample
                terms = sorted(got[len(sample) :].split())
                if dialect in ("mysql", "mariadb"):  # bigrams written with "_", no unigrams
                    want = sorted(f"{t}_" for t in cjk_terms(sample) if len(t) == 2)
                    terms = [t for t in terms if t != "_"]
                else:
                    want = sorted(cjk_terms(sample))
                assert terms == want, sample
        finally:
            if dialect in ("mysql", "mariadb"):
                await conn.execute(text(f"DROP FUNCTION IF EXISTS {function}"))
