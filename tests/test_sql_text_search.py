"""The SQL backend's full-text index (Capability.TEXT_SEARCH) against every write path.

The conformance tier checks what a search returns; these tests check the index tables
themselves: triggers keep them in step with writes that never call ``search_text`` (appends,
pops, rewrites, range deletes, clears, copies at given numbers, the catalog's erase),
sessions that were never searched cost no index rows, registration races with writers lose
nothing, and the test clean-up leaves no trigger or function behind.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from agent_sessions import SQLAlchemySession
from agent_sessions.backends.sql.common import Tables, TextTables, derived_name
from agent_sessions.errors import BackendDataError
from agent_sessions.ops.catalog import SessionCatalog
from tests.servers import MARIADB_URL, POSTGRES_URL, drop_sql_tables, require_server

SERVERS = {
    "postgres": (POSTGRES_URL, ("PostgreSQL", "127.0.0.1", 5432)),
    "mariadb": (MARIADB_URL, ("MariaDB", "127.0.0.1", 3306)),
    "sqlalchemy-sqlite": ("", None),
}


@pytest.fixture(params=list(SERVERS))
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    address, server = SERVERS[request.param]
    if server is None:
        return f"sqlite+aiosqlite:///{os.path.join(tmp_path, 'fts.db')}"
    require_server(*server)
    return address


def _msg(text: Any, role: str = "user") -> Any:
    return {"role": role, "type": "message", "text": text}


def _bare() -> Any:
    return {"role": "user", "type": "message"}  # no "text"


async def _rows(session: SQLAlchemySession, table: str, session_id: str | None = None) -> int:
    from sqlalchemy import text

    where = "" if session_id is None else " WHERE session_id = :s"
    async with session.engine.connect() as conn:
        result = await conn.execute(text(f"SELECT COUNT(*) FROM {table}{where}"), {"s": session_id})
        return int(result.scalar_one())


def _open(url: str, sid: str, prefix: str, **options: Any) -> SQLAlchemySession:
    return SQLAlchemySession.from_url(sid, url=url, table_prefix=prefix, **options)


async def _seqs(session: SQLAlchemySession, query: str) -> list[int]:
    return [seq for seq, _, _ in await session.search_text(query, limit=100)]


@pytest.mark.asyncio
async def test_every_write_path_keeps_the_index(url: str, sql_prefix: str) -> None:
    s = _open(url, "kept", sql_prefix)
    quiet = _open(url, "quiet", sql_prefix)
    x = TextTables.of(Tables.build(sql_prefix, None, None))
    try:
        await s.add_items([_msg("alpha bravo"), _msg("bravo"), _bare(), _msg(7)])
        await quiet.add_items([_msg("alpha never searched")])
        assert await _seqs(s, "alpha bravo") == [1, 2]  # registers, indexes 1 and 2
        assert await _rows(s, x.index, "kept") == 2
        await s.add_items([_msg("charlie bravo"), _msg("")])
        assert await _rows(s, x.index, "kept") == 3
        assert await s.pop_item() == _msg("")
        assert await s.pop_item() == _msg("charlie bravo")
        assert await _seqs(s, "charlie") == []
        await s.rewrite_items([(2, _msg("delta")), (3, _msg("delta too"))])
        assert await _seqs(s, "bravo") == [1]
        assert sorted(await _seqs(s, "delta")) == [2, 3]
        await s.rewrite_items([(3, _bare())])  # no text any more: unindexed
        assert await _seqs(s, "delta") == [2]
        assert await s.delete_items(before=2) == 1
        assert await _seqs(s, "alpha") == []
        await s.clear_session()
        assert await _rows(s, x.index, "kept") == 0
        await s.write_sequenced_items([(10, _msg("echo")), (11, _msg("echo foxtrot"))])
        assert sorted(await _seqs(s, "echo")) == [10, 11]
        # A session never searched has no index rows, whatever it writes.
        await quiet.add_items([_msg("alpha again")])
        await quiet.pop_item()
        assert await _rows(s, x.index, "quiet") == 0
        assert await _rows(s, x.registry, "quiet") == 0

        await SessionCatalog(s).erase(["kept"])  # type: ignore[arg-type]
        assert await _rows(s, x.index, "kept") == 0
        assert await _rows(s, x.registry, "kept") == 0
        assert await s.search_text("echo") == []
        await s.add_items([_msg("golf after erase")])
        assert await _seqs(s, "golf") == [1]  # registered again, from scratch
    finally:
        await s.close()
        await quiet.close()
        if "sqlite" not in url:
            await drop_sql_tables(url, sql_prefix)


@pytest.mark.asyncio
async def test_drop_text_index_removes_it_and_the_next_search_makes_it_again(
    url: str, sql_prefix: str
) -> None:
    from sqlalchemy.exc import DBAPIError

    s = _open(url, "dropped", sql_prefix)
    other = _open(url, "dropped", sql_prefix)
    x = TextTables.of(Tables.build(sql_prefix, None, None))
    try:
        await s.add_items([_msg("oscar papa")])
        assert await _seqs(s, "oscar") == [1]
        await s.drop_text_index()
        await s.drop_text_index()  # nothing left to drop
        with pytest.raises(DBAPIError):
            await _rows(s, x.index)
        await s.add_items([_msg("oscar quebec")])  # no trigger names a dropped table
        assert await _seqs(other, "oscar") == [1, 2]
        assert await _rows(s, x.index, "dropped") == 2
    finally:
        await s.close()
        await other.close()


@pytest.mark.asyncio
async def test_registration_racing_writers_loses_nothing(url: str, sql_prefix: str) -> None:
    sessions = [_open(url, "race", sql_prefix) for _ in range(6)]
    other = _open(url, "other", sql_prefix)
    s = sessions[0]
    x = TextTables.of(Tables.build(sql_prefix, None, None))
    try:
        await s.add_items([_msg("hotel 0")])
        await _seqs(other, "hotel")  # index made, race not registered

        async def write(w: SQLAlchemySession, n: int) -> None:
            for i in range(8):
                await w.add_items([_msg(f"hotel {n} {i}"), _msg(f"india {n} {i}")])
                if i % 3 == 2:
                    await w.pop_item()

        await asyncio.gather(*(write(w, n) for n, w in enumerate(sessions[1:])), _seqs(s, "x"))
        items = await s.get_sequenced_items()
        assert await _rows(s, x.index, "race") == len(items)
        hits = sorted(seq for seq, _, _ in await s.search_text("hotel india", limit=1000))
        assert hits == [seq for seq, _ in items]
    finally:
        for w in [*sessions, other]:
            await w.close()
        if "sqlite" not in url:
            await drop_sql_tables(url, sql_prefix)


@pytest.mark.asyncio
async def test_a_first_search_indexes_in_short_steps_and_writes_between_them_count(
    url: str, sql_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_sessions.backends.sql import mysql, postgres, sqlite

    for module in (mysql, postgres, sqlite):
        monkeypatch.setattr(module, "BACKFILL_ROWS", 3)
    monkeypatch.setattr(postgres, "_ANALYZE_AFTER", 1)  # its ANALYZE and pending-list merge
    x = TextTables.of(Tables.build(sql_prefix, None, None))
    s = _open(url, "steps", sql_prefix)
    w = _open(url, "steps", sql_prefix)
    step = s._index_step
    afters: list[int | None] = []

    async def interleaved(after: int | None) -> int | None:
        afters.append(after)
        found = await step(after)
        if len(afters) == 3:  # between two steps, from another object
            # Registered, not ready: a search elsewhere would index too, not answer half.
            assert await _rows(s, f"{x.registry} WHERE NOT ready AND session_id = 'steps'") == 1
            await w.add_items([_msg("kilo new")])
            assert await w.pop_item() == _msg("kilo new")
            await w.add_items([_msg("kilo newer")])
            await w.rewrite_items([(2, _msg("kilo rewritten")), (9, _msg("lima"))])
        return found

    monkeypatch.setattr(s, "_index_step", interleaved)
    try:
        await s.add_items([_msg(f"kilo {i}") for i in range(10)])
        hits = await s.search_text("kilo", limit=100)
        assert afters == [None, 0, 3, 6, 9], "registered, then 3 items a step"
        items: dict[int, Any] = dict(await s.get_sequenced_items())
        expected = {seq for seq, item in items.items() if "kilo" in item["text"]}
        assert {seq for seq, _, _ in hits} == expected
        assert {seq: item for seq, item, _ in hits} == {seq: items[seq] for seq in expected}
        assert 9 not in expected and 12 in expected and items[2] == _msg("kilo rewritten")
    finally:
        await s.close()
        await w.close()
        if "sqlite" not in url:
            await drop_sql_tables(url, sql_prefix)


@pytest.mark.asyncio
async def test_without_create_tables_a_missing_index_says_how_to_make_it(
    url: str, sql_prefix: str
) -> None:
    s = _open(url, "plain", sql_prefix)
    try:
        await s.add_items([_msg("juliet")])
    finally:
        await s.close()
    fixed = _open(url, "plain", sql_prefix, create_tables=False)
    try:
        with pytest.raises(BackendDataError, match="text_statements"):
            await fixed.search_text("juliet")
    finally:
        await fixed.close()
        if "sqlite" not in url:
            await drop_sql_tables(url, sql_prefix)


@pytest.mark.asyncio
async def test_copy_between_stores_is_indexed_on_the_destination(sql_prefix: str) -> None:
    from agent_sessions.ops.migrate import copy_store

    require_server("PostgreSQL", "127.0.0.1", 5432)
    require_server("MariaDB", "127.0.0.1", 3306)
    src = _open(POSTGRES_URL, "copied", sql_prefix)
    dst = _open(MARIADB_URL, "copied", sql_prefix)
    try:
        await src.add_items([_msg("kilo lima"), _msg("mike")])
        assert await _seqs(src, "kilo") == [1]
        await dst.add_items([_msg("placeholder")])
        assert await _seqs(dst, "placeholder") == [1]  # the destination's index exists
        await dst.clear_session()
        options = {"table_prefix": sql_prefix}
        report = await copy_store(
            POSTGRES_URL,
            MARIADB_URL,
            session_ids=["copied"],
            src_options=options,
            dst_options=options,
            replace=True,
        )
        assert report.sessions == 1
        assert sorted(await _seqs(dst, "kilo mike")) == [1, 2]
    finally:
        await src.close()
        await dst.close()
        await drop_sql_tables(POSTGRES_URL, sql_prefix)
        await drop_sql_tables(MARIADB_URL, sql_prefix)


@pytest.mark.asyncio
async def test_dropping_the_tables_leaves_no_trigger_or_function(sql_prefix: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    require_server("PostgreSQL", "127.0.0.1", 5432)
    require_server("MariaDB", "127.0.0.1", 3306)
    for address in (POSTGRES_URL, MARIADB_URL):
        s = _open(address, "dropped", sql_prefix)
        try:
            await s.add_items([_msg("november")])
            assert await _seqs(s, "november") == [1]
        finally:
            await s.close()
        await drop_sql_tables(address, sql_prefix)
    checks = {
        POSTGRES_URL: "SELECT (SELECT COUNT(*) FROM pg_proc WHERE proname LIKE :p) + "
        "(SELECT COUNT(*) FROM pg_trigger WHERE tgname LIKE :p) + "
        "(SELECT COUNT(*) FROM pg_class WHERE relname LIKE :p)",
        MARIADB_URL: "SELECT (SELECT COUNT(*) FROM information_schema.triggers WHERE "
        "trigger_name LIKE :p) + (SELECT COUNT(*) FROM information_schema.tables WHERE "
        "table_name LIKE :p)",
    }
    for address, sql in checks.items():
        engine = create_async_engine(address)
        try:
            async with engine.connect() as conn:
                left = await conn.execute(text(sql), {"p": f"{sql_prefix}%"})
                assert left.scalar_one() == 0, address
        finally:
            await engine.dispose()


def test_derived_names_stay_identifiers() -> None:
    long = "m" * 60
    name = derived_name(long, "_text_sessions")
    assert len(name) == 63 and name.endswith("_text_sessions")
    assert name != derived_name("m" * 59 + "n", "_text_sessions")
    assert derived_name("agent_sessions_messages", "_text") == "agent_sessions_messages_text"
