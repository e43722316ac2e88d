"""The store knows families (issue 39 step a, issue 41 item 3): a family is listed, erased,
copied and exported whatever state its root is in (cleared, never written, a memory scope),
and an erase leaves no text of it in the store's raw data (file bytes, keys, tables)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_sessions import BranchingSession, CompactionSession, open_session
from agent_sessions.cli import main
from agent_sessions.errors import InvalidSessionIdError
from agent_sessions.memory import Memory, scope_id
from agent_sessions.ops.catalog import SessionCatalog
from agent_sessions.wrappers.compaction import item_count_trigger
from tests.servers import POSTGRES_URL, REDIS_URL, RUN, drop_redis_keys, require_server

WORD = "zebraquartz"
"""The marker every test writes into a family and looks for in the raw store after erase."""


class Place:
    """A store for the CLI and its raw contents: URL, the -o options that isolate it."""

    def __init__(self, kind: str, url: str, options: dict[str, Any], path: Path | None) -> None:
        self.kind, self.url, self.options, self.path = kind, url, options, path

    @property
    def args(self) -> list[str]:
        return [arg for key, value in self.options.items() for arg in ("-o", f"{key}={value}")]

    async def open(self, session_id: str) -> Any:
        return await open_session(self.url, session_id, **self.options)

    async def memory(self, user: str) -> Memory:
        return await Memory.open(self.url, agent_id="helper", user_id=user, **self.options)

    def raw(self) -> str:
        """Everything the store holds, as text: the file's bytes (with its WAL), every key's
        value, every row of the store's tables."""
        return asyncio.run(self._raw())

    async def _raw(self) -> str:
        if self.path is not None:
            parts = [self.path, self.path.with_name(self.path.name + "-wal")]
            return b"".join(p.read_bytes() for p in parts if p.exists()).decode("latin-1")
        if self.kind == "redis":
            from redis.asyncio import Redis

            client = Redis.from_url(REDIS_URL)
            out = []
            try:
                async for key in client.scan_iter(match=f"{self.options['key_prefix']}*"):
                    kind = (await client.type(key)).decode()  # type: ignore[union-attr]
                    read = {
                        "string": client.get,
                        "hash": client.hgetall,
                        "zset": lambda k: client.zrange(k, 0, -1),
                        "list": lambda k: client.lrange(k, 0, -1),
                        "set": client.smembers,
                    }[kind]
                    out.append(f"{key!r} {await read(key)!r}")
            finally:
                await client.aclose()
            return "\n".join(out)
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(POSTGRES_URL)
        try:
            async with engine.connect() as conn:
                names = await conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"),
                    {"p": self.options["table_prefix"] + "%"},
                )
                rows: list[Any] = []
                for (name,) in names.fetchall():
                    rows += (await conn.execute(text(f'SELECT * FROM "{name}"'))).fetchall()
                return "\n".join(map(str, rows))
        finally:
            await engine.dispose()


@pytest.fixture(params=["sqlite", "sqlalchemy-sqlite", "redis", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    path = tmp_path / "families.db"
    if request.param == "sqlite":
        yield Place("sqlite", f"sqlite:///{path}", {}, path)
    elif request.param == "sqlalchemy-sqlite":
        yield Place("sqlalchemy-sqlite", f"sqlite+aiosqlite:///{path}", {}, path)
    elif request.param == "redis":
        require_server("Redis", "127.0.0.1", 6379)
        prefix = f"fam{RUN}{uuid.uuid4().hex[:6]}"
        yield Place("redis", REDIS_URL, {"key_prefix": prefix}, None)
        asyncio.run(drop_redis_keys(REDIS_URL, f"{prefix}*"))
    else:
        require_server("PostgreSQL", "127.0.0.1", 5432)
        prefix = request.getfixturevalue("sql_prefix")
        yield Place("postgres", POSTGRES_URL, {"table_prefix": prefix}, None)


class Summarizer:
    name = "scripted"

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        return [{"role": "assistant", "content": f"summary {WORD}-summary"}]


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


async def _family(place: Place, sid: str) -> None:
    """A conversation with a branch (its own messages) and a compaction summary."""
    async with await place.open(sid) as raw:
        branching = BranchingSession(raw)
        await branching.add_items([_msg(f"q{i} {WORD}-root") for i in range(3)])
        await branching.create_branch_from_turn(1)
        await branching.add_items([_msg(f"{WORD}-branch")])
    async with await place.open(sid + "-c") as raw:
        compacted = CompactionSession(
            raw,
            summarizer=Summarizer(),
            should_trigger_compaction=item_count_trigger(4),
            keep_last=1,
            compact_on_write=True,
        )
        await compacted.add_items([_msg(f"c{i}") for i in range(6)])
        await compacted.run_compaction({"force": True})  # type: ignore[typeddict-unknown-key]


async def _scope(place: Place, user: str) -> None:
    memory = await place.memory(user)
    try:
        await memory.blocks.define("human", f"Name: {user} {WORD}-block")
        await memory.archive.insert(f"{user} likes {WORD}-archive")
    finally:
        await memory.close()


def _listed(place: Place, capsys: pytest.CaptureFixture[str]) -> list[tuple[str, str]]:
    assert main(["list", place.url, "--json", *place.args]) == 0
    rows = map(json.loads, capsys.readouterr().out.splitlines())
    return [(r["session_id"], r["kind"]) for r in rows]


def test_erase_after_clear_leaves_no_text_of_the_family(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_family(place, "conv"))
    for sid in ("conv", "conv-c"):
        assert main(["clear", place.url, sid, "--yes", *place.args]) == 0
    capsys.readouterr()
    assert _listed(place, capsys) == [("conv", "session"), ("conv-c", "session")]
    assert main(["delete", place.url, "conv", "conv-c", "--yes", "--json", *place.args]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 2}
    assert main(["stats", place.url, "--json", *place.args]) == 0
    totals = json.loads(capsys.readouterr().out)
    assert (totals["sessions"], totals["side_stores"]) == (0, 0)
    assert WORD not in place.raw()


def test_delete_all_leaves_no_text_of_any_family(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_family(place, "conv"))
    asyncio.run(_scope(place, "ada"))
    assert main(["clear", place.url, "conv", "--yes", *place.args]) == 0
    capsys.readouterr()
    assert WORD in place.raw()
    assert main(["delete", place.url, "--all", "--yes", "--json", *place.args]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 3}
    assert main(["stats", place.url, "--json", *place.args]) == 0
    totals = json.loads(capsys.readouterr().out)
    assert (totals["sessions"], totals["side_stores"]) == (0, 0)
    assert WORD not in place.raw()


def test_memory_scopes_are_listed_shown_and_erased_by_the_cli(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_scope(place, "ada"))
    asyncio.run(_scope(place, "bob"))
    asyncio.run(_family(place, "conv"))
    listed = _listed(place, capsys)
    assert ("memory:helper:ada", "memory scope") in listed
    assert ("memory:helper:bob", "memory scope") in listed
    assert ("conv", "session") in listed
    assert main(["list", place.url, *place.args]) == 0  # piped: the kind is the last column
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert ["memory:helper:ada", "memory scope"] == [rows[0][0], rows[0][-1]]

    assert main(["show", place.url, "memory:helper:ada", *place.args]) == 0
    assert f"Name: ada {WORD}-block" in capsys.readouterr().out

    assert main(["delete", place.url, "memory:helper:ada", "--yes", "--json", *place.args]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 1}
    assert ("memory:helper:ada", "memory scope") not in _listed(place, capsys)
    raw = place.raw()
    assert f"ada {WORD}" not in raw and f"ada likes {WORD}" not in raw
    assert f"bob {WORD}-block" in raw

    assert main(["delete", place.url, "--prefix", "memory:", "--yes", "--json", *place.args]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 1}
    assert _listed(place, capsys) == [("conv", "session"), ("conv-c", "session")]

    async def empty() -> list[Any]:
        memory = await place.memory("bob")
        try:
            return await memory.blocks.all()
        finally:
            await memory.close()

    assert asyncio.run(empty()) == []


def test_memory_scopes_are_copied_exported_and_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = Place("sqlite", f"sqlite:///{tmp_path / 'src.db'}", {}, tmp_path / "src.db")
    asyncio.run(_scope(src, "ada"))
    dst = Place("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'dst.db'}", {}, None)
    assert main(["copy", src.url, dst.url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["side_stores"] >= 2
    export = tmp_path / "export.jsonl"
    assert main(["export", src.url, "-O", str(export)]) == 0
    capsys.readouterr()
    again = Place("sqlite", f"sqlite:///{tmp_path / 'again.db'}", {}, None)
    assert main(["import", again.url, str(export), "--json"]) == 0
    capsys.readouterr()

    async def blocks(where: Place) -> list[str]:
        memory = await where.memory("ada")
        try:
            return [b.value for b in await memory.blocks.all()]
        finally:
            await memory.close()

    for where in (dst, again):
        assert asyncio.run(blocks(where)) == [f"Name: ada {WORD}-block"]
        assert ("memory:helper:ada", "memory scope") in _listed(where, capsys)


@pytest.mark.asyncio
async def test_a_user_session_id_cannot_alias_a_memory_scope(tmp_path: Path) -> None:
    place = Place("sqlite", f"sqlite:///{tmp_path / 'alias.db'}", {}, tmp_path / "alias.db")
    await _scope(place, "bob")
    async with await place.open("memory:helper:bob") as conversation:  # a user's own name
        await conversation.add_items([_msg("hello")])
        assert conversation.session_id != scope_id("helper", "bob")
        async with SessionCatalog(conversation) as catalog:
            assert await catalog.delete_sessions(["memory:helper:bob"]) == 1
    memory = await place.memory("bob")
    try:
        assert [b.value for b in await memory.blocks.all()] == [f"Name: bob {WORD}-block"]
    finally:
        await memory.close()
    for taken in ("\x1dbob", "\x1dmemory:helper:bob:x", "\x1ememory:helper:bob"):
        with pytest.raises(InvalidSessionIdError):
            await place.open(taken)


@pytest.mark.asyncio
async def test_a_scope_written_by_v0_3_is_still_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    async with await open_session(url, "memory:helper:ada") as old_root:  # v0.3's scope id
        old = Memory(old_root)
        await old.blocks.define("human", "Name: Ada")
    memory = await Memory.open(url, agent_id="helper", user_id="ada")
    try:
        assert [b.value for b in await memory.blocks.all()] == ["Name: Ada"]
    finally:
        await memory.close()


def _file_text(path: Path) -> bytes:
    parts = [path, path.with_name(path.name + "-wal")]
    return b"".join(p.read_bytes() for p in parts if p.exists())


@pytest.mark.asyncio
async def test_no_erased_word_stays_in_the_sqlite_file(tmp_path: Path) -> None:
    """FTS5 keeps a deleted row's words in its segments; a forget and an erase take them."""
    path = tmp_path / "fts.db"
    url = f"sqlite:///{path}"
    memory = await Memory.open(url, agent_id="helper", user_id="ada")
    try:
        chat = memory.session(await open_session(url, "chat"))
        await chat.add_items([_msg(f"my locker code is {WORD}forget")])
        await chat.add_items([_msg("an unrelated note")])
        assert (await memory.recall.search(f"{WORD}forget"))[0].text.endswith(f"{WORD}forget")
        await memory.recall.forget("chat")
        with contextlib.closing(sqlite3.connect(path)) as raw:  # what the issue read with SQL
            blocks = raw.execute("SELECT block FROM agent_messages_text_data").fetchall()
        assert not any(f"{WORD}forget".encode() in bytes(b or b"") for (b,) in blocks)
        async with SessionCatalog(chat.inner) as catalog:  # type: ignore[arg-type]
            await catalog.delete_sessions(["chat"])
        assert f"{WORD}forget".encode() not in _file_text(path)

        await memory.archive.insert(f"passage {WORD}erase")
        assert await memory.archive.search(f"{WORD}erase")
    finally:
        await memory.close()
    async with await open_session(url, "probe") as probe:
        async with SessionCatalog(probe) as catalog:  # type: ignore[arg-type]
            await catalog.delete_sessions([scope_id("helper", "ada")])
    assert f"{WORD}erase".encode() not in _file_text(path)


@pytest.mark.parametrize("kind", ["memory", "mongodb", "mariadb"])
@pytest.mark.asyncio
async def test_every_store_lists_and_erases_a_family_without_a_root_row(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stores the CLI tests above do not reach: a memory scope and a cleared session with
    a branch are listed (no row of their own) and erased whole through the catalog."""
    from tests.servers import MARIADB_URL, drop_sql_tables

    tag = f"fam{RUN}{uuid.uuid4().hex[:6]}"
    options: dict[str, Any] = {}
    if kind == "memory":
        from agent_sessions.backends.memory import InMemoryStore

        url, options = "memory://", {"store": InMemoryStore()}
    elif kind == "mongodb":
        from mongomock_motor import AsyncMongoMockClient

        client: Any = AsyncMongoMockClient()
        monkeypatch.setattr(
            "agent_sessions.backends.mongodb.session.make_client", lambda uri, **kw: client
        )
        url, options = "mongodb://standin", {"database": tag}
    else:
        require_server("MariaDB", "127.0.0.1", 3306)
        url, options = MARIADB_URL, {"table_prefix": f"{tag}_"}
    place = Place(kind, url, options, None)
    try:
        await _family(place, "conv")
        await _scope(place, "ada")
        async with await place.open("conv") as root:
            await root.clear_session()
            async with SessionCatalog(root) as catalog:
                listed = [i.session_id async for i in catalog.iter_sessions(page_size=1)]
                assert listed == [scope_id("helper", "ada"), "conv", "conv-c"]
                assert (await catalog.require(scope_id("helper", "ada"))).item_count == 0
                assert await catalog.delete_sessions(["conv", scope_id("helper", "ada")]) == 2
                assert [i.session_id async for i in catalog.iter_sessions()] == ["conv-c"]
                left = [i.session_id for i in (await catalog.store.list_page(_everything()))]
                assert all(sid.endswith("conv-c") for sid in left), left
    finally:
        if kind == "mariadb":
            await drop_sql_tables(url, f"{tag}_")


def _everything() -> Any:
    from agent_sessions.core.catalog import CatalogQuery

    return CatalogQuery(1000, internal=True)


def test_the_cli_refuses_a_name_both_a_session_and_a_scope_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    place = Place("sqlite", f"sqlite:///{tmp_path / 'both.db'}", {}, tmp_path / "both.db")
    asyncio.run(_scope(place, "bob"))

    async def conversation() -> None:
        async with await place.open("memory:helper:bob") as session:
            await session.add_items([_msg("hello")])

    asyncio.run(conversation())
    assert main(["list", place.url, "--json"]) == 0
    kinds = [
        (r["session_id"], r["kind"]) for r in map(json.loads, capsys.readouterr().out.splitlines())
    ]
    assert kinds == [("memory:helper:bob", "memory scope"), ("memory:helper:bob", "session")]
    assert main(["delete", place.url, "memory:helper:bob", "--yes"]) == 1
    assert "both a memory scope and a session are named" in capsys.readouterr().err
    assert main(["list", place.url, "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # nothing was erased
