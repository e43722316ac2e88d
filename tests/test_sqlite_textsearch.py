"""SQLite's text search (FTS5) beyond the conformance tier: created only when searched, kept
by every writer of the file (the SDK's SQLiteSession, a catalog erase, raw SQL), and leaving
nothing behind an erased session."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest
from agents.memory import SQLiteSession as SDKSQLiteSession

from agent_sessions import SQLiteSession
from agent_sessions.ops.catalog import SessionCatalog

pytestmark = pytest.mark.asyncio


def note(text: Any) -> Any:
    return {"type": "note", "text": text}


def _tables(path: str) -> set[str]:
    with sqlite3.connect(path) as raw:
        return {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}


def _check(path: str, index: str = "agent_messages_text") -> tuple[int, list[str]]:
    """FTS5's own integrity check (raises when the index disagrees with its content), the
    number of indexed rows and the listed sessions."""
    with sqlite3.connect(path) as raw:
        raw.execute(f"INSERT INTO {index} ({index}) VALUES ('integrity-check')")
        (count,) = raw.execute(f"SELECT count(*) FROM {index}_docsize").fetchone()
        listed = [r[0] for r in raw.execute(f"SELECT session_id FROM {index}_sessions")]
    return count, listed


async def _found(session: Any, query: str) -> list[str]:
    hits: list[Any] = await session.search_text(query, limit=100)
    return [item["text"] for _, item, _ in hits]


async def test_a_file_never_searched_has_no_index(tmp_path: Path) -> None:
    path = str(tmp_path / "plain.db")
    async with SQLiteSession("a", path) as s:
        await s.add_items([note("hello there")])
        assert not any("_text" in name for name in _tables(path))
        assert await s.search_text("hello") != []
        assert {"agent_messages_text", "agent_messages_text_sessions"} <= _tables(path)


async def test_the_sdk_writes_through_the_index_and_opens_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "sdk.db")
    ours = SQLiteSession("conv", path)
    sdk = SDKSQLiteSession("conv", path)
    try:
        await ours.add_items([note("otter from us")])
        assert await _found(ours, "otter") == ["otter from us"]
        await sdk.add_items([note("otter from the sdk"), note("unrelated")])  # type: ignore[list-item]
        assert sorted(await _found(ours, "otter")) == ["otter from the sdk", "otter from us"]
        await sdk.pop_item()
        await sdk.pop_item()
        assert await _found(ours, "otter") == ["otter from us"]
        assert len(await sdk.get_items()) == 1
        await sdk.clear_session()  # messages, then the session row: the session is unlisted
        assert _check(path) == (0, [])
        assert await _found(ours, "otter") == []
        await sdk.add_items([note("otter again")])  # type: ignore[list-item]
        assert await _found(ours, "otter") == ["otter again"]  # listed again, indexed
        assert _check(path) == (1, ["conv"])
    finally:
        sdk.close()
        await ours.close()


async def test_an_erase_leaves_nothing_behind(tmp_path: Path) -> None:
    path = str(tmp_path / "erase.db")
    async with SQLiteSession("kept", path) as kept, SQLiteSession("gone", path) as gone:
        await kept.add_items([note("walrus kept")])
        await gone.add_items([note("walrus gone"), note("walrus twice")])
        side: Any = gone.side_store("notes")
        await side.add_items([note("walrus side")])
        for s in (kept, gone, side):
            assert await s.search_text("walrus")
        assert _check(path)[0] == 4
        async with SessionCatalog(cast("Any", gone)) as catalog:
            await catalog.delete_sessions(["gone"])  # the family: "gone" and its side store
        count, listed = _check(path)
        assert (count, listed) == (1, ["kept"])
        assert await _found(kept, "walrus") == ["walrus kept"]
        assert await _found(gone, "walrus") == []


async def test_rows_that_are_not_json_never_break_a_write(tmp_path: Path) -> None:
    path = str(tmp_path / "bad.db")
    async with SQLiteSession("x", path) as s:
        await s.add_items([note("heron one"), note("heron two")])
        assert len(await s.search_text("heron")) == 2
        with sqlite3.connect(path) as raw:
            raw.execute("UPDATE agent_messages SET message_data = '{not json' WHERE id = 1")
            raw.execute(
                "INSERT INTO agent_messages (session_id, message_data) VALUES ('x', 'oops')"
            )
            raw.execute(
                "UPDATE agent_messages SET message_data = ? WHERE id = 3",
                ('{"text": "heron three"}',),
            )
        assert sorted(await _found(s, "heron")) == ["heron three", "heron two"]
        with sqlite3.connect(path) as raw:
            raw.execute("DELETE FROM agent_messages WHERE message_data = '{not json'")
        await s.clear_session()
        assert _check(path) == (0, [])


async def test_quoted_table_names_and_sessions_of_other_tables(tmp_path: Path) -> None:
    path = str(tmp_path / "tables.db")
    options: dict[str, Any] = {"sessions_table": '"my_sessions"', "messages_table": "[my_msgs]"}
    async with SQLiteSession("a", path, **options) as a, SQLiteSession("a", path) as plain:
        await a.add_items([note("badger custom")])
        await plain.add_items([note("badger default")])
        assert await _found(a, "badger") == ["badger custom"]
        assert await _found(plain, "badger") == ["badger default"]
        assert _check(path, "my_msgs_text") == (1, ["a"])


async def test_the_index_can_be_dropped_and_comes_back(tmp_path: Path) -> None:
    path = str(tmp_path / "drop.db")
    s, other = SQLiteSession("a", path), SQLiteSession("b", path)
    async with s, other:
        await s.add_items([note("lynx one")])
        await other.add_items([note("lynx two")])
        assert await _found(s, "lynx") == ["lynx one"]
        assert await _found(other, "lynx") == ["lynx two"]
        await s.drop_text_index()
        assert not any("_text" in name for name in _tables(path))
        await s.add_items([note("lynx three")])  # writes work without the index
        await other.pop_item()
        assert sorted(await _found(s, "lynx")) == ["lynx one", "lynx three"]
        assert await _found(other, "lynx") == []
        assert _check(path) == (2, ["a"])


async def test_an_index_dropped_by_another_connection_is_created_again(tmp_path: Path) -> None:
    path = str(tmp_path / "elsewhere.db")
    s = SQLiteSession("a", path)
    async with s:
        await s.add_items([note("marten one")])
        assert await _found(s, "marten") == ["marten one"]
        other = SQLiteSession("a", path, busy_timeout=1.0)  # another connection
        async with other:
            assert other.store is not s.store
            await other.drop_text_index()
        assert await _found(s, "marten") == ["marten one"]


async def test_limits_and_bounds_beyond_64_bits(tmp_path: Path) -> None:
    async with SQLiteSession("big", str(tmp_path / "big.db")) as s:
        item: Any = {"type": "note", "text": "stoat", "at": 5}
        await s.add_items([item])
        hits: list[Any] = await s.search_text(
            "stoat", limit=10**30, between={"at": (-(10**30), 10**30)}
        )
        assert [item["at"] for _, item, _ in hits] == [5]
        assert await s.search_text("stoat", between={"at": (10**30, None)}) == []
