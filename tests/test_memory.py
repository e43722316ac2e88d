"""Long-term memory (agent_sessions.memory) on every backend: blocks through the Runner,
limits, concurrent editors, recall after compaction, archival search, scopes, upkeep."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import struct
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from agents import Agent, Runner, Usage
from agents.memory import Session
from agents.testing import ScriptedModel, UnexpectedModelCall, assistant_message, function_call

from agent_sessions.core.family import side_store
from agent_sessions.memory import (
    HashingEmbedder,
    Memory,
    MemoryEditError,
    Upkeep,
    render_blocks,
    scope_id,
)
from agent_sessions.memory.search import unit
from agent_sessions.ops.catalog import SessionCatalog
from agent_sessions.wrappers.compaction import CompactionSession, item_count_trigger
from tests.matrix import BACKENDS, SQL_URLS, Backend, reset_standins
from tests.servers import REDIS_URL, RUN, drop_redis_keys, drop_sql_tables

SQL_PREFIX = f"memory{RUN}_"
REDIS_PREFIX = f"memory{RUN}"


def _own_tables(backend: Backend) -> Backend:
    """``backend`` with tables and keys of this module's own (dropped at its end)."""
    if backend.name == "redis":

        async def open_redis(session_id: str) -> Session:
            from agent_sessions import RedisSession

            return RedisSession.from_url(session_id, url=REDIS_URL, key_prefix=REDIS_PREFIX)

        return dataclasses.replace(backend, open=open_redis)
    url = {**SQL_URLS, "sqlalchemy-sqlite": "sqlite+aiosqlite:///" + SQLALCHEMY_SQLITE}.get(
        backend.name
    )
    if url is None:
        return backend

    async def open_sql(session_id: str) -> Session:
        from agent_sessions import SQLAlchemySession

        return SQLAlchemySession.from_url(session_id, url=url, table_prefix=SQL_PREFIX)

    return dataclasses.replace(backend, open=open_sql)


SQLALCHEMY_SQLITE = os.path.join(tempfile.mkdtemp(prefix="agent-sessions-memory-"), "sa.db")
MEMORY_BACKENDS = [_own_tables(b) for b in BACKENDS]

Opener = Callable[[str], Awaitable[Session]]


@pytest.fixture(scope="module", autouse=True)
def _drop_leftovers_at_end() -> Iterator[None]:
    yield
    for url in SQL_URLS.values():
        with contextlib.suppress(Exception):  # a server that was down has nothing to drop
            asyncio.run(drop_sql_tables(url, SQL_PREFIX))
    with contextlib.suppress(Exception):
        asyncio.run(drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*"))


@pytest_asyncio.fixture(params=MEMORY_BACKENDS, ids=[b.name for b in MEMORY_BACKENDS])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    """Opens sessions of one backend; erases (through the catalog) and closes them after."""
    backend: Backend = request.param
    if backend.needs is not None:
        backend.needs()
    reset_standins()
    opened: list[Session] = []

    async def open_(session_id: str) -> Session:
        session = await backend.open(session_id)
        opened.append(session)
        return session

    yield open_
    if opened:
        ids = [s.session_id for s in opened]
        await SessionCatalog(opened[0]).delete_sessions(list(dict.fromkeys(ids)))  # type: ignore[arg-type]
    for session in reversed(opened):
        with contextlib.suppress(Exception):
            await session.close()  # type: ignore[attr-defined]


def _scope() -> str:
    return scope_id(agent_id="agent", user_id=f"u{uuid.uuid4().hex[:10]}")


async def _memory(open_: Opener, scope: str | None = None, **options: Any) -> Memory:
    return Memory(await open_(scope or _scope()), **options)


def _call(name: str, n: int, **arguments: Any) -> list[Any]:
    return [function_call(name, arguments, call_id=f"c{n}")]


@pytest.mark.asyncio
async def test_each_tool_through_the_runner_shows_in_the_next_instructions(store: Opener) -> None:
    memory = await _memory(store, embedder=HashingEmbedder())
    await memory.blocks.define("human", "Name: unknown", limit=200, description="the user")
    await memory.blocks.define("persona", "I am terse.", read_only=True)
    model = ScriptedModel(
        [
            _call("memory_replace", 1, label="human", old_str="unknown", new_str="Ada"),
            _call("memory_insert", 2, label="human", new_str="Likes tea"),
            _call("memory_rethink", 3, label="human", new_memory="Ada; likes green tea"),
            _call("archival_memory_insert", 4, content="Ada's cat is Pixel", tags=["pets"]),
            _call("archival_memory_search", 5, query="cat", tags=["pets"]),
            _call("conversation_search", 6, query="kettle"),
            _call("memory_finish_edits", 7),
            [assistant_message("done")],
        ]
    )
    agent = Agent(
        name="a", instructions=memory.instructions("Be kind."), tools=memory.tools(), model=model
    )
    session = memory.session(await store(f"chat{uuid.uuid4().hex[:8]}"))
    await Runner.run(agent, "I put the kettle on. Remember me.", session=session)

    shown = [call.system_instructions or "" for call in model.calls]
    assert all(s.startswith("Be kind.\n\n<memory_blocks>") for s in shown)
    assert "Name: unknown" in shown[0]
    assert "Name: Ada" in shown[1] and "Likes tea" not in shown[1]
    assert "Name: Ada\nLikes tea" in shown[2]
    assert "Ada; likes green tea" in shown[3] and 'chars="20" limit="200"' in shown[3]
    assert '<persona chars="11" limit="2000" read_only="true">' in shown[0]
    outputs = {
        item["call_id"]: item["output"]
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert outputs["c1"].startswith("Block 'human' is now version 2")
    assert "Pixel" in json.loads(outputs["c5"])[0]["content"]
    hits = json.loads(outputs["c6"])
    assert hits[0]["role"] == "user" and "kettle" in hits[0]["text"]
    assert hits[0]["session"] == session.session_id and isinstance(hits[0]["seq"], int)
    assert outputs["c7"] == "Memory edits finished."
    assert [b.version for b in await memory.blocks.history("human")] == [1, 2, 3, 4]


@pytest.mark.asyncio
async def test_limit_and_read_only_are_refused_with_the_fix(store: Opener) -> None:
    memory = await _memory(store)
    await memory.blocks.define("human", "x" * 1990, limit=2000)
    await memory.blocks.define("persona", "fixed", read_only=True)
    model = ScriptedModel(
        [
            _call("memory_insert", 1, label="human", new_str="y" * 149),
            _call("memory_rethink", 2, label="persona", new_memory="new"),
            _call("memory_replace", 3, label="human", old_str="x", new_str="z"),
            _call("memory_insert", 4, label="nope", new_str="z"),
            [assistant_message("ok")],
        ]
    )
    agent = Agent(name="a", instructions=memory.instructions(), tools=memory.tools(), model=model)
    await Runner.run(agent, "hi")
    outputs = [
        item["output"]
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert outputs[0] == (
        "Error: block 'human' would be 2,140 of 2,000 characters: insert less, or shorten it "
        "first with memory_replace or memory_rethink"
    )
    assert outputs[1].startswith("Error: block 'persona' is read-only")
    assert "occurs 1990 times: include more surrounding text" in outputs[2]
    assert outputs[3] == "Error: there is no block 'nope' (blocks: human, persona)"
    assert [len(b.value) for b in await memory.blocks.history("human")] == [1990]
    assert len(await memory.blocks.history("persona")) == 1
    with pytest.raises(MemoryEditError, match="would be 2,001 of 2,000"):
        await memory.blocks.define("big", "b" * 2001, limit=2000)  # the app's path too
    with pytest.raises(MemoryEditError, match="would be"):
        await memory.blocks.rethink("persona", "p" * 2001, agent=False)


@pytest.mark.asyncio
async def test_two_concurrent_editors_of_one_block_lose_nothing(store: Opener) -> None:
    scope = _scope()
    first, second = await _memory(store, scope), await _memory(store, scope)
    await first.blocks.define("notes", limit=5000)

    async def editor(memory: Memory, name: str) -> None:
        for n in range(6):
            await memory.blocks.insert("notes", f"{name}{n}")

    await asyncio.gather(editor(first, "a"), editor(second, "b"))
    lines = (await first.blocks.get("notes")).value.split("\n")
    assert sorted(lines) == sorted([f"a{n}" for n in range(6)] + [f"b{n}" for n in range(6)])
    assert (await second.blocks.get("notes")).version == 13
    history = await second.blocks.history("notes")
    assert [b.version for b in history] == list(range(1, 14))
    restored = await first.blocks.restore("notes", 2)  # undo: an old value becomes current
    assert restored.version == 14 and restored.value == history[1].value


@pytest.mark.asyncio
async def test_recall_finds_items_compaction_folded_away_and_earlier_history(
    store: Opener,
) -> None:
    memory = await _memory(store)
    chat = f"chat{uuid.uuid4().hex[:8]}"
    raw = await store(chat)
    await raw.add_items([{"role": "user", "content": "before memory: my locker code is 4417"}])

    class OneLine:
        async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
            return [{"role": "assistant", "content": "(earlier talk, summarised)"}]

    compacting = CompactionSession(
        raw,
        summarizer=OneLine(),
        should_trigger_compaction=item_count_trigger(4),
        keep_last=1,
        compact_on_write=True,
    )
    session = memory.session(compacting)
    await session.add_items([{"role": "user", "content": "the boat is called Marguerite"}])
    for n in range(6):
        await session.add_items([{"role": "assistant", "content": f"filler {n}"}])
    view = json.dumps(await session.get_items())
    assert "Marguerite" not in view and "4417" not in view  # folded away
    [hit] = await memory.recall.search("boat name Marguerite", limit=1)
    assert hit.session_id == chat and hit.role == "user"
    stored = await compacting.inner.get_sequenced_items()  # type: ignore[attr-defined]
    numbers = {json.dumps(item): seq for seq, item in stored}
    assert hit.seq == numbers[json.dumps({"role": "user", "content": hit.text})]
    [early] = await memory.recall.search("locker code", limit=1)
    assert "4417" in early.text and early.seq == stored[0][0]
    _upto, entries, _compacted = await memory.recall.since(0)
    seqs = [e["seq"] for e in entries if e["session"] == chat]
    assert seqs == [seq for seq, _ in stored]  # each original once, with its own number
    assert await memory.recall.search("filler", roles=["user"]) == []
    assert await memory.recall.search("filler", end=hit.at - 1) == []


@pytest.mark.asyncio
async def test_the_runner_compacts_through_the_recall_layer(store: Opener) -> None:
    memory = await _memory(store)

    class OneLine:
        async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
            return [{"role": "assistant", "content": "(summary)"}]

    compacting = CompactionSession(
        await store(f"chat{uuid.uuid4().hex[:8]}"),
        summarizer=OneLine(),
        should_trigger_compaction=item_count_trigger(4),
        keep_last=2,
    )  # no compact_on_write: only the Runner's run_compaction hook compacts
    session = memory.session(compacting)
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("ok")] for _ in range(3)]))
    for said in ["my bike is red", "second", "third"]:
        await Runner.run(agent, said, session=session)
    view = json.dumps(await session.get_items())
    assert "(summary)" in view and "bike" not in view
    assert (await memory.recall.search("bike"))[0].text == "my bike is red"


@pytest.mark.asyncio
async def test_archival_search_filters_tags_dates_and_keeps_superseded_facts(
    store: Opener,
) -> None:
    now = [1_000_000.0]
    memory = await _memory(store, embedder=HashingEmbedder(), clock=lambda: now[0])
    archive = memory.archive
    old = await archive.insert("Ada lives in Paris", ["home"])
    now[0] += 100
    await archive.insert("Ada's favourite tea is sencha", ["food", "prefs"])
    assert (await archive.insert("Ada lives in Paris ", ["home"])).id == old.id  # no duplicate
    now[0] += 100
    new = await archive.insert("Ada moved to Lyon", ["home"], supersedes=old.id)
    found = await archive.search("where does Ada live", tags=["home"])  # Paris is superseded
    assert [p.content for p in found] == ["Ada moved to Lyon"]
    kept = await archive.search("Paris", include_inactive=True)
    assert kept[0].id == old.id and kept[0].superseded_by == new.id
    assert [p.content for p in await archive.search("tea", tags=["food", "home"], top_k=1)] == [
        "Ada's favourite tea is sencha"
    ]
    assert await archive.search("tea", tags=["food", "home"], tag_match_mode="all") == []
    assert [p.content for p in await archive.search("Ada", end=1_000_150.0)] == [
        "Ada's favourite tea is sencha"
    ]
    assert [p.content for p in await archive.search("Ada", start=1_000_150.0)] == [
        "Ada moved to Lyon"
    ]
    again = Memory(memory.root, embedder=HashingEmbedder())  # another reader of the store
    assert [p.id for p in await again.archive.search("Lyon", top_k=1)] == [new.id]
    changed = Memory(memory.root, embedder=HashingEmbedder(64))  # a new embedder
    assert await changed.archive.reembed(batch=2) == 3
    assert {p.embedder for p in changed.archive.passages} == {"hashing-64"}
    assert await changed.archive.reembed() == 0
    [top] = await changed.archive.search("sencha", top_k=1)
    assert top.content == "Ada's favourite tea is sencha" and top.vector is not None
    assert len(top.vector) == 64


@pytest.mark.asyncio
async def test_scopes_are_isolated_and_erased_with_their_root(store: Opener) -> None:
    alice, bob = await _memory(store), await _memory(store)
    await alice.blocks.define("human", "Alice")
    await alice.archive.insert("alice secret")
    await alice.session(await store(f"c{uuid.uuid4().hex[:8]}")).add_items(
        [{"role": "user", "content": "alice said this"}]
    )
    assert await bob.blocks.all() == []
    assert await bob.archive.search("secret") == []
    assert await bob.recall.search("alice") == []
    catalog = SessionCatalog(alice.root)  # type: ignore[arg-type]
    family = await catalog.family(alice.root.session_id)
    assert len(family) >= 3
    await catalog.delete_sessions([alice.root.session_id])
    assert await alice.blocks.all() == []  # a reader with a cache notices the erase
    await alice.blocks.define("human", "Alice again")
    assert (await alice.blocks.get("human")).version == 1
    await catalog.delete_sessions([alice.root.session_id])
    fresh = await _memory(store, alice.root.session_id)
    assert await fresh.blocks.all() == []
    assert await fresh.archive.search("secret") == []
    assert await fresh.recall.search("alice") == []


@pytest.mark.asyncio
async def test_upkeep_fires_every_n_turns_and_never_twice_at_once(store: Opener) -> None:
    scope = _scope()
    memory = await _memory(store, scope)
    await memory.blocks.define("human", "")
    upkeep_model = ScriptedModel(
        [
            _call("memory_insert", 1, label="human", new_str="likes sailing"),
            [assistant_message("updated")],
        ]
    )
    upkeep_agent = Agent(
        name="upkeep",
        instructions=memory.instructions(),
        tools=memory.tools(),
        model=upkeep_model,
    )
    hooks = [
        Upkeep(memory, upkeep_agent, every=3),
        Upkeep(await _memory(store, scope), upkeep_agent, every=3),
    ]
    chat_model = ScriptedModel([[assistant_message(f"reply {n}")] for n in range(3)])
    agent = Agent(name="chat", model=chat_model)
    session = memory.session(await store(f"chat{uuid.uuid4().hex[:8]}"))
    for n in range(2):
        await Runner.run(agent, f"turn {n}: I went sailing", session=session, hooks=hooks[0])
    assert hooks[0].runs == 0  # two user turns: not due yet
    await Runner.run(agent, "turn 2: sailing again", session=session)
    ran = await asyncio.gather(hooks[0].run_if_due(), hooks[1].run_if_due())
    assert sorted(ran) == [False, True]
    assert len(upkeep_model.calls) == 2  # one upkeep run (two model calls), not two
    assert '{"role": "user", "text": "turn 0: I went sailing"}' in str(upkeep_model.calls[0].input)
    assert (await memory.blocks.get("human")).value == "likes sailing"
    assert not await hooks[0].run_if_due()  # the cursor moved past those turns


def test_rendered_values_cannot_close_their_tag() -> None:
    from agent_sessions.memory import Block

    text = render_blocks([Block("human", "</value></human><x>", 50, "a & b", False, 1, 0.0)])
    assert "<\\/value><\\/human><x>" in text
    assert text.count("</human>") == 1 and "<description>a & b</description>" in text
    assert "warning" not in text
    full = render_blocks([Block("human", "x" * 45, 50, "", False, 1, 0.0)])
    assert '<human chars="45" limit="50" read_only="false" warning="near its limit' in full


@pytest.mark.asyncio
async def test_memory_over_an_encrypted_root_is_encrypted_at_rest() -> None:
    from cryptography.fernet import Fernet

    from agent_sessions import EncryptedSession, InMemorySession, InMemoryStore

    store = InMemoryStore()
    key = Fernet.generate_key().decode()
    root = EncryptedSession(InMemorySession(_scope(), store=store), keys={"k": key}, active="k")
    memory = Memory(root, embedder=HashingEmbedder())
    await memory.blocks.define("human", "Ada's PIN is 7312")
    await memory.archive.insert("the safe code is 7312")
    await memory.session(InMemorySession("chat", store=store)).add_items(
        [{"role": "user", "content": "7312 again"}]
    )
    assert (await memory.blocks.get("human")).value == "Ada's PIN is 7312"
    assert (await memory.archive.search("safe code"))[0].content == "the safe code is 7312"
    stored = [
        await InMemorySession(sid, store=store, _internal_id=True).get_items()
        for sid in store.session_ids()
        if sid != "chat"
    ]
    assert stored and "7312" not in json.dumps(stored)


@pytest.mark.parametrize(
    ("agent_id", "user_id"), [(None, None), ("a:b", None), ("", ""), (None, "x" * 101)]
)
def test_scope_ids_are_validated(agent_id: str | None, user_id: str | None) -> None:
    with pytest.raises(MemoryEditError):
        scope_id(agent_id, user_id)
    assert scope_id("a", None) != scope_id(None, "a")


@pytest.mark.asyncio
async def test_a_failing_upkeep_does_not_fail_the_users_run(store: Opener) -> None:
    memory = await _memory(store)
    broken = Agent(name="upkeep", model=ScriptedModel([]))  # no step: the upkeep run fails
    hooks = Upkeep(memory, broken, every=1)
    agent = Agent(name="chat", model=ScriptedModel([[assistant_message("hi")]]))
    session = memory.session(await store(f"chat{uuid.uuid4().hex[:8]}"))
    result = await Runner.run(agent, "hello", session=session, hooks=hooks)
    assert result.final_output == "hi" and hooks.runs == 0
    with pytest.raises(UnexpectedModelCall):  # still due: the next call retries
        await hooks.run_if_due()


@pytest.mark.asyncio
async def test_archival_rejects_bad_input_and_writes_nothing(store: Opener) -> None:
    memory = await _memory(store)
    bad_inputs: list[dict[str, Any]] = [
        {"content": "  "},
        {"content": "x", "tags": "pets"},
        {"content": "x", "metadata": ["m"]},
        {"content": "x", "valid_to": "tomorrow"},
        {"content": "x", "supersedes": "nope"},
    ]
    for bad in bad_inputs:
        with pytest.raises(MemoryEditError):
            await memory.archive.insert(**bad)
    assert await memory.archive.search("", include_inactive=True) == []


@pytest.mark.asyncio
async def test_a_crashed_upkeep_holds_the_lease_only_until_it_expires(store: Opener) -> None:
    now = [1_000.0]
    scope = _scope()
    memory = await _memory(store, scope, clock=lambda: now[0])
    await memory.blocks.define("human", "")
    model = ScriptedModel(
        [_call("memory_insert", 1, label="human", new_str="x"), [assistant_message("ok")]]
    )
    upkeep = Agent(name="upkeep", instructions="", tools=memory.tools(), model=model)
    crashed = Upkeep(memory, upkeep, every=1, lease_seconds=300)
    assert await crashed._acquire() is not None  # a lease taken, then the process died
    other = Upkeep(await _memory(store, scope, clock=lambda: now[0]), upkeep, every=1)
    await memory.session(await store(f"chat{uuid.uuid4().hex[:8]}")).add_items(
        [{"role": "user", "content": "I sail"}]
    )
    assert not await other.run_if_due()
    now[0] += 301
    assert await other.run_if_due()
    assert (await memory.blocks.get("human")).value == "x"


@pytest.mark.asyncio
async def test_forgetting_one_conversation_keeps_the_others(store: Opener) -> None:
    memory = await _memory(store)
    chats = [f"chat{uuid.uuid4().hex[:8]}" for _ in range(3)]
    sessions = [memory.session(await store(chat)) for chat in chats]
    for session, word in zip(sessions, ["alpha", "bravo", "charlie"], strict=True):
        await session.add_items([{"role": "user", "content": f"the code word is {word}"}])
    reader = Memory(memory.root)  # another reader, with the entries cached
    assert len(await reader.recall.search("code word")) == 3
    await sessions[0].clear_session()  # erase one conversation through the recall layer
    await memory.recall.forget(chats[2])  # or one erased elsewhere (e.g. the catalog)
    for index in (memory.recall, reader.recall, Memory(memory.root).recall):
        assert [h.session_id for h in await index.search("code word")] == [chats[1]]
        assert await index.search("alpha") == await index.search("charlie") == []
    stored = json.dumps(await side_store(memory.root, "memory.recall").get_items())
    assert "alpha" not in stored and "charlie" not in stored and "bravo" in stored
    await sessions[0].add_items([{"role": "user", "content": "a new start: delta"}])
    assert [h.session_id for h in await reader.recall.search("delta")] == [chats[0]]


def _compacting(inner: Session) -> CompactionSession:
    class OneLine:
        async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
            return [{"role": "assistant", "content": "(summary)"}]

    return CompactionSession(
        inner,
        summarizer=OneLine(),
        should_trigger_compaction=item_count_trigger(4),
        keep_last=1,
        compact_on_write=True,
    )


@pytest.mark.asyncio
async def test_upkeep_runs_after_a_compaction_and_stops_at_its_token_bound(
    store: Opener,
) -> None:
    memory = await _memory(store)
    await memory.blocks.define("human", "")
    steps = [_call("memory_insert", n, label="human", new_str=f"fact {n}") for n in range(3)]
    upkeep_model = ScriptedModel(
        [*steps, [assistant_message("done")]], default_usage=Usage(total_tokens=30)
    )
    upkeep_agent = Agent(name="upkeep", tools=memory.tools(), model=upkeep_model)
    hooks = Upkeep(memory, upkeep_agent, every=100, max_tokens=50)
    compacting = _compacting(await store(f"chat{uuid.uuid4().hex[:8]}"))
    session = memory.session(compacting)
    agent = Agent(name="chat", model=ScriptedModel([[assistant_message("ok")] for _ in range(3)]))
    await Runner.run(agent, "my cat is called Tom", session=session)
    assert compacting.compactions == 0 and not await hooks.run_if_due()
    await Runner.run(agent, "second", session=session)
    await Runner.run(agent, "third", session=session)
    assert compacting.compactions >= 1
    assert await hooks.run_if_due()
    assert hooks.runs == 1 and hooks.tokens == 60  # stopped at the second model call
    assert upkeep_model.remaining_steps == 2
    assert (await memory.blocks.get("human")).value == "fact 0"
    assert '{"role": "user", "text": "my cat is called Tom"}' in str(upkeep_model.calls[0].input)
    assert not await hooks.run_if_due()  # the cursor moved past the compaction
    with pytest.raises(ValueError, match="max_tokens"):
        Upkeep(memory, upkeep_agent, max_tokens=0)


class _GatedEmbedder(HashingEmbedder):
    """A HashingEmbedder whose calls after the first set ``waiting`` and wait for ``gate``."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.calls = 0
        self.gate, self.waiting = asyncio.Event(), asyncio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls > 1:
            self.waiting.set()
            await self.gate.wait()
        return await super().embed(texts)


@pytest.mark.asyncio
async def test_model_free_jobs_dedupe_expire_warn_and_reembed_in_the_background(
    store: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1_000_000.0]
    memory = await _memory(store, embedder=HashingEmbedder(), clock=lambda: now[0])
    archive = memory.archive
    old = await archive.insert("Ada likes tea.", ["prefs"])
    now[0] += 10
    new = await archive.insert("ada likes TEA", ["prefs"])
    brief = await archive.insert("the office is closed today", valid_to=now[0] + 50)
    other = await archive.insert("Ada lives in Lyon")
    await memory.blocks.define("human", "x" * 95, limit=100)
    await memory.blocks.define("persona", "y" * 95, limit=100, read_only=True)
    now[0] += 100
    with caplog.at_level("WARNING", logger="agent_sessions.memory.core"):
        tidied = await memory.tidy()
    assert tidied.deduped == [old.id] and tidied.expired == [brief.id]
    assert [b.label for b in tidied.near_limit] == ["human"] and "'human'" in caplog.text
    assert tidied.reembedding is None  # every vector is of the current embedder
    assert (await archive.get(old.id)).superseded_by == new.id  # type: ignore[union-attr]
    assert (await archive.get(brief.id)).expired_at == now[0]  # type: ignore[union-attr]
    found = await archive.search("office", include_inactive=True, top_k=1)
    assert [p.id for p in found] == [brief.id] and await archive.search("office closed") != found
    again = await memory.tidy()
    assert again.deduped == again.expired == []

    gated = _GatedEmbedder(64)
    changed = Memory(memory.root, embedder=gated, clock=lambda: now[0])
    task = changed.archive.reembed_in_background(batch=1)
    assert changed.archive.reembed_in_background(batch=1) is task  # one at a time
    await gated.waiting.wait()  # the first batch is stored, the second waits
    assert [p.id for p in await archive.search("Lyon", top_k=1)] == [other.id]  # not blocked
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await changed.archive.refresh()
    assert sum(p.embedder == "hashing-64" for p in changed.archive.passages) == 1
    gated.gate.set()
    resumed = (await changed.tidy()).reembedding
    assert resumed is not None and await resumed == 3  # the rest, not all four
    assert {p.embedder for p in changed.archive.passages} == {"hashing-64"}


def _float32(values: list[float]) -> tuple[float, ...]:
    return struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values))


@pytest.mark.asyncio
async def test_archived_vectors_are_stored_packed_and_old_float_lists_still_load(
    store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = HashingEmbedder(8)
    memory = await _memory(store, embedder=embedder)
    packed = await memory.archive.insert("Ada's cat is Pixel")
    side = side_store(memory.root, "memory.archive")
    items: list[Any] = await side.get_items()
    [record] = items
    stored = record["vector"]
    assert set(stored) == {"dim", "f32"} and stored["dim"] == 8  # unit float32, base64
    want = _float32(list(unit((await embedder.embed(["Ada's cat is Pixel"]))[0])))
    assert packed.vector == want and len(base64.b64decode(stored["f32"])) == 32
    # records written before the packed form: JSON float lists, not unit length
    old: dict[str, Any] = {
        "kind": "passage",
        "id": "old1",
        "content": "Ada's dog is Rex",
        "tags": ["pets"],
    }
    old |= {"metadata": {}, "at": 1.0, "valid_to": None, "embedder": embedder.name}
    await side.add_items([old | {"vector": [3.0, 4.0, 0, 0, 0, 0, 0, 0]}])  # type: ignore[list-item]
    fish: dict[str, Any] = {
        "kind": "passage",
        "id": "old2",
        "content": "Ada's fish is Bubbles",
        "tags": [],
    }
    fish |= {"metadata": {}, "at": 2.0, "embedder": "gone", "vector": [0.0, 2.0]}
    await side.add_items([fish])  # type: ignore[list-item]
    reader = Memory(memory.root, embedder=embedder)
    loaded = await reader.archive.get("old1")
    assert loaded is not None and loaded.vector == _float32([0.6, 0.8, 0, 0, 0, 0, 0, 0])
    assert (await reader.archive.get(packed.id)) == packed  # round trip, same values
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "numpy", None)  # a reader without numpy: pure Python
        pure = Memory(memory.root, embedder=embedder)
    assert (reader.archive.vector_ranking, pure.archive.vector_ranking) == ("numpy", "python")
    for query in ("Ada's dog", "cat Pixel", "fish"):
        found = [p.id for p in await reader.archive.search(query, top_k=3)]
        assert found == [p.id for p in await pure.archive.search(query, top_k=3)]
    # re-embedding the passages of a gone embedder writes the packed form
    assert await reader.archive.reembed() == 1
    items = [*await side.get_items()]
    assert items[-1]["kind"] == "vector" and items[-1]["vector"]["dim"] == 8
    fresh = Memory(memory.root, embedder=embedder)
    [top] = await fresh.archive.search("fish Bubbles", top_k=1)
    assert top.id == "old2" and top.embedder == embedder.name and top.vector is not None
