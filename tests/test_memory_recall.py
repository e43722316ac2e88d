"""Recall search on both paths, on every backend: the store's own full-text index
(``Capability.TEXT_SEARCH``; a stand-in that declares it where the backend does not yet) and
the in-process BM25 index with its snapshots. Filters before ranking, compaction, forget,
racing writers, cold objects and torn snapshots."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

import pytest
import pytest_asyncio
from agents.memory import Session

from agent_sessions.core.capabilities import Capability, capabilities_of, supports
from agent_sessions.core.family import side_store
from agent_sessions.memory import Memory
from agent_sessions.memory import _snapshot as snapshot_module
from agent_sessions.memory._snapshot import write_snapshot
from agent_sessions.memory.recall import RecallIndex, RecallSession
from agent_sessions.memory.search import BM25Index
from tests.test_memory import (  # noqa: F401 (fixtures)
    Opener,
    _compacting,
    _drop_leftovers_at_end,
    _scope,
    store,
)

PATHS = ["native", "in-process"]


class TextSearching:
    """A side store with a brute-force ``search_text`` (the TEXT_SEARCH contract: filters
    before ranking, BM25 over the top-level "text"), for backends without a native index."""

    def __init__(self, inner: Session) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.capabilities = capabilities_of(inner) | {Capability.TEXT_SEARCH}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def search_text(
        self,
        query: str,
        *,
        limit: int = 10,
        equal: Mapping[str, Collection[str]] | None = None,
        between: Mapping[str, tuple[float | None, float | None]] | None = None,
    ) -> list[tuple[int, Any, float]]:
        index, items = BM25Index(), {}
        for seq, item in await self.inner.get_sequenced_items():  # type: ignore[attr-defined]
            text = item.get("text")
            if not isinstance(text, str) or not text:
                continue
            if any(item.get(f) not in values for f, values in (equal or {}).items()):
                continue
            if any(
                (low is not None and item[f] < low) or (high is not None and item[f] > high)
                for f, (low, high) in (between or {}).items()
            ):
                continue
            index.add(seq, text)
            items[seq] = item
        return [(seq, items[seq], score) for seq, score in index.search(query, top_k=limit)]


class NoRewrite:
    """A side store that declares no REWRITE (a forget cannot blank its text)."""

    def __init__(self, inner: Session) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.capabilities = capabilities_of(inner) - {Capability.REWRITE}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def recall_of(
    root: Session,
    path: str,
    clock: Callable[[], float] | None = None,
    *,
    rewrite: bool = True,
) -> RecallIndex:
    """A recall index of ``root``'s scope searching on ``path`` (each call: a cold object)."""
    log = side_store(root, "memory.recall")
    if not rewrite:
        log = NoRewrite(log)  # type: ignore[assignment]
    if path == "native" and not supports(log, Capability.TEXT_SEARCH):
        log = TextSearching(log)  # type: ignore[assignment]
    return RecallIndex(
        log,
        *([clock] if clock else []),
        marks=side_store(root, "memory.recall.marks"),
        snapshots=side_store(root, "memory.recall.snapshots"),
        native=path == "native",
        snapshot_every=3,
    )


async def _memory(open_: Opener, path: str) -> Memory:
    clock = Clock()
    memory = Memory(await open_(_scope()), clock=clock)
    memory.recall = recall_of(memory.root, path, clock)
    assert memory.recall.native == (path == "native")
    return memory


@pytest_asyncio.fixture(params=PATHS)
async def memory(request: pytest.FixtureRequest, store: Opener) -> AsyncIterator[Memory]:  # noqa: F811
    yield await _memory(store, request.param)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _texts(hits: list[Any]) -> list[str]:
    return [hit.text for hit in hits]


def _path(memory: Memory) -> str:
    return "native" if memory.recall.native else "in-process"


@pytest.mark.asyncio
async def test_recall_finds_what_compaction_folded_away(memory: Memory, store: Opener) -> None:  # noqa: F811
    chat = f"chat{uuid.uuid4().hex[:8]}"
    raw = await store(chat)
    await raw.add_items([{"role": "user", "content": "before memory: my locker code is 4417"}])
    compacting = _compacting(raw)
    session = memory.session(compacting)
    await session.add_items([{"role": "user", "content": "the boat is called Marguerite"}])
    for n in range(6):
        await session.add_items([{"role": "assistant", "content": f"filler {n}"}])
    assert compacting.compactions >= 1
    assert "Marguerite" not in json.dumps(await session.get_items())
    stored = await compacting.inner.get_sequenced_items()  # type: ignore[attr-defined]
    for index in (memory.recall, recall_of(memory.root, _path(memory))):
        [hit] = await index.search("boat Marguerite", limit=1)
        assert (hit.session_id, hit.role, hit.seq) == (chat, "user", stored[1][0])
        [early] = await index.search("locker code", limit=1)
        assert "4417" in early.text and early.seq == stored[0][0]
    _upto, pending, compacted = await memory.recall.since(0)
    assert compacted and [e["seq"] for e in pending] == [seq for seq, _ in stored]


class DiesOnAppend:
    """A recall log whose appends fail once ``dead`` is set: the process died after the
    conversation's write and before the index entry's."""

    def __init__(self, inner: Session) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.capabilities = capabilities_of(inner)
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def add_sequenced_items(self, items: list[Any]) -> list[int]:
        if self.dead:
            raise RuntimeError("the process died before indexing")
        return await self.inner.add_sequenced_items(items)  # type: ignore[attr-defined,no-any-return]

    async def add_items(self, items: list[Any]) -> None:
        await self.add_sequenced_items(items)


@pytest.mark.asyncio
@pytest.mark.parametrize("compacted", [False, True])
async def test_an_item_stored_but_never_indexed_is_found_after_the_next_write(
    memory: Memory,
    store: Opener,  # noqa: F811
    compacted: bool,
) -> None:
    chat = f"chat{uuid.uuid4().hex[:8]}"

    async def conversation() -> Session:
        raw = await store(chat)
        return _compacting(raw) if compacted else raw

    dying = DiesOnAppend(side_store(memory.root, "memory.recall"))
    doomed = RecallSession(
        await conversation(),
        RecallIndex(dying, marks=side_store(memory.root, "memory.recall.marks"), native=False),
    )
    await doomed.add_items([{"role": "user", "content": "my first pet was a hamster"}])
    dying.dead = True
    with pytest.raises(RuntimeError, match="died"):
        await doomed.add_items([{"role": "user", "content": "the spare key is under the gnome"}])
    fresh = memory.session(await conversation())  # a new process: a fresh object
    await fresh.add_items([{"role": "assistant", "content": "noted"}])
    for index in (memory.recall, recall_of(memory.root, _path(memory))):
        [hit] = await index.search("spare key gnome", limit=1)
        assert "gnome" in hit.text and hit.session_id == chat
        [pet] = await index.search("hamster", limit=5)  # indexed once, not again
        assert pet.seq is not None


@pytest.mark.asyncio
async def test_roles_and_time_filter_before_ranking(memory: Memory) -> None:
    clock: Any = memory.clock
    strong = [(n, {"role": "assistant", "content": "kiwi kiwi kiwi"}) for n in range(1, 30)]
    await memory.recall.index("chat", strong)
    clock.now = 2_000.0
    await memory.recall.index("chat", [(30, {"role": "user", "content": "a kiwi and a pear"})])
    await memory.recall.index("chat", [(31, {"role": "assistant", "content": "kiwi, once"})])
    [user] = await memory.recall.search("kiwi", roles=["user"], limit=1)
    assert user.seq == 30 and user.at == 2_000.0
    late = await memory.recall.search("kiwi", start=1_500.0, limit=2)
    assert sorted(hit.seq or 0 for hit in late) == [30, 31]
    early = await memory.recall.search("kiwi", end=1_500.0, limit=50)
    assert sorted(hit.seq or 0 for hit in early) == list(range(1, 30))
    assert await memory.recall.search("kiwi", roles=["tool"]) == []
    assert await memory.recall.search("kiwi", limit=0) == []
    assert await memory.recall.search("   ") == []


@pytest.mark.asyncio
async def test_racing_writers_count_once(memory: Memory) -> None:
    pairs = [(n, {"role": "user", "content": f"mango number {n}"}) for n in range(1, 11)]
    for _ in range(3):  # three writers indexed the same items
        await memory.recall.index("chat", pairs)
    for index in (memory.recall, recall_of(memory.root, _path(memory))):
        hits = await index.search("mango", limit=7)
        assert len(hits) == 7 and len({hit.seq for hit in hits}) == 7
        assert len(await index.search("mango", limit=50)) == 10


@pytest.mark.asyncio
async def test_forget_before_and_after_a_snapshot_and_cold_objects(
    memory: Memory,
    store: Opener,  # noqa: F811
) -> None:
    chats = [f"chat{uuid.uuid4().hex[:8]}" for _ in range(3)]
    sessions = [memory.session(await store(chat)) for chat in chats]
    for session, word in zip(sessions, ["alpha", "bravo", "charlie"], strict=True):
        await session.add_items([{"role": "user", "content": f"the code word is {word}"}])
    path = _path(memory)
    warm = recall_of(memory.root, path)
    assert len(await warm.search("code word")) == 3
    assert await warm.save_snapshot() == (path == "in-process")
    await sessions[0].clear_session()  # forget through the recall layer
    await memory.recall.forget(chats[2])  # or directly (e.g. erased through the catalog)
    for index in (memory.recall, warm, recall_of(memory.root, path)):
        assert [h.session_id for h in await index.search("code word")] == [chats[1]]
        assert await index.search("alpha") == await index.search("charlie") == []
    for purpose in ("memory.recall", "memory.recall.snapshots"):
        stored = json.dumps(await side_store(memory.root, purpose).get_items())
        assert "alpha" not in stored and "charlie" not in stored
    await sessions[0].add_items([{"role": "user", "content": "a new start: delta"}])
    cold = recall_of(memory.root, path)
    found = [h.session_id for h in await cold.search("delta code")]
    assert sorted(found) == sorted(chats[:2])  # one word each: the order is the store's ranking
    _upto, pending, _compacted = await memory.recall.since(0)
    assert sorted(e["text"] for e in pending) == [
        "a new start: delta",
        "the code word is bravo",
    ]


@pytest.mark.asyncio
async def test_a_cold_object_loads_the_snapshot_and_reads_only_after_it(
    store: Opener,  # noqa: F811
) -> None:
    memory = await _memory(store, "in-process")
    await memory.recall.index("a", [(n, {"role": "user", "content": f"x{n} y"}) for n in range(5)])
    assert len(await memory.recall.search("y", limit=10)) == 5  # 5 new records: saved
    snapshots = side_store(memory.root, "memory.recall.snapshots")
    saved: list[Any] = await snapshots.get_items()
    assert any(item["kind"] == "snapshot" for item in saved)
    await memory.recall.index("b", [(1, {"role": "user", "content": "late y"})])
    await memory.recall.forget("a")
    cold = recall_of(memory.root, "in-process")
    assert _texts(await cold.search("y", limit=10)) == ["late y"]
    assert cold.from_snapshot is None  # forget deleted the snapshot (it held a's text)
    await memory.recall.index("a", [(9, {"role": "user", "content": "again y"})])
    assert len(await cold.search("y")) == 2  # saved again: the log changed since the load
    again = recall_of(memory.root, "in-process")
    assert sorted(_texts(await again.search("y"))) == ["again y", "late y"]
    assert again.from_snapshot is not None


class _CrashBefore:
    """A snapshots store that fails on the batch holding ``kind`` (a crash mid-snapshot)."""

    def __init__(self, inner: Session, kind: str) -> None:
        self.inner, self.kind = inner, kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def add_sequenced_items(self, items: list[Any]) -> list[int]:
        if any(item["kind"] == self.kind for item in items):
            raise ConnectionError("crashed")
        return await self.inner.add_sequenced_items(items)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.asyncio
async def test_a_torn_snapshot_is_ignored(store: Opener) -> None:  # noqa: F811
    memory = await _memory(store, "in-process")
    snapshots = side_store(memory.root, "memory.recall.snapshots")
    await memory.recall.index(
        "a", [(n, {"role": "user", "content": f"old{n} z"}) for n in range(4)]
    )
    await memory.recall.refresh()
    assert await memory.recall.save_snapshot()
    good = recall_of(memory.root, "in-process")
    await good.refresh()
    assert good.from_snapshot is not None
    await memory.recall.index("b", [(1, {"role": "user", "content": "new z"})])
    await memory.recall.refresh()
    # chunks written, marker not: the newest complete snapshot is the older one
    with pytest.raises(ConnectionError):
        await write_snapshot(
            _CrashBefore(snapshots, "snapshot"),  # type: ignore[arg-type]
            memory.recall._index,
            memory.recall._entries,
            10**9,  # a torn snapshot that claimed to cover everything
            ["recall", "b", 1, 0],
            0.0,
        )
    cold = recall_of(memory.root, "in-process")
    assert sorted(_texts(await cold.search("z", limit=10))) == sorted(
        [f"old{n} z" for n in range(4)] + ["new z"]
    )
    assert cold.from_snapshot == good.from_snapshot
    # a marker whose chunks are gone (another writer deleted them): ignored too
    rows = await snapshots.get_sequenced_items()  # type: ignore[attr-defined]
    marker = next(item for _, item in reversed(rows) if item["kind"] == "snapshot")
    await snapshots.add_items([{**marker, "id": "gone", "upto": 10**9}])  # type: ignore[list-item]
    cold = recall_of(memory.root, "in-process")
    assert len(await cold.search("z", limit=10)) == 5
    assert cold.from_snapshot == good.from_snapshot


@pytest.mark.asyncio
async def test_upkeep_sees_each_entry_once_after_its_cursor(memory: Memory) -> None:
    await memory.recall.index("a", [(1, {"role": "user", "content": "one"})])
    upto, pending, compacted = await memory.recall.since(0)
    assert [e["text"] for e in pending] == ["one"] and not compacted
    await memory.recall.index("a", [(2, {"role": "user", "content": "two"})], compacted=True)
    await memory.recall.index("a", [(2, {"role": "user", "content": "two"})])
    later, pending, compacted = await memory.recall.since(upto)
    assert [e["text"] for e in pending] == ["two"] and compacted and later > upto
    assert await memory.recall.since(later) == (later, [], False)


@pytest.mark.asyncio
async def test_a_store_that_cannot_blank_still_hides_forgotten_entries(
    memory: Memory,
) -> None:
    path = _path(memory)
    index = recall_of(memory.root, path, rewrite=False)
    await index.index("a", [(1, {"role": "user", "content": "secret plan"})])
    await index.index("b", [(1, {"role": "user", "content": "public plan"})])
    await index.forget("a")
    await index.index("a", [(1, {"role": "user", "content": "new plan"})])  # a number reused
    stored = json.dumps(await side_store(memory.root, "memory.recall").get_items())
    assert "secret" in stored  # not blanked
    for reader in (index, recall_of(memory.root, path, rewrite=False)):
        assert sorted(_texts(await reader.search("plan"))) == ["new plan", "public plan"]
        assert await reader.search("secret") == []


@pytest.mark.asyncio
async def test_a_snapshot_in_many_small_chunks_ranks_as_the_index_it_saved(
    store: Opener,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshot_module, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(snapshot_module, "CHUNKS_PER_WRITE", 3)
    memory = await _memory(store, "in-process")
    words = [f"w{n}" for n in range(40)]
    pairs = [
        (
            n,
            {
                "role": "user" if n % 3 else "assistant",
                "content": " ".join(words[n % 7 :: 1 + n % 5]),
            },
        )
        for n in range(1, 201)
    ]
    await memory.recall.index("s", pairs)
    await memory.recall.forget("nobody")  # a blank-free forget: applied, nothing removed
    await memory.recall.index("t", [(1, {"role": "user", "content": "w3 w3 w3 unique"})])
    await memory.recall.forget("t")
    await memory.recall.refresh()
    assert await memory.recall.save_snapshot()
    chunks = await side_store(memory.root, "memory.recall.snapshots").get_items()
    assert len(chunks) > 2 * 3 + 1  # several batches of chunks, then the marker
    assert all(len(json.dumps(chunk)) < 4 * 2048 for chunk in chunks)
    cold = recall_of(memory.root, "in-process")
    for query in ("w3", "w0 w12", "w39", "unique", "w5 w6 w7"):
        for roles in (None, ["assistant"]):
            warm_hits = await memory.recall.search(query, roles=roles, limit=20)
            assert await cold.search(query, roles=roles, limit=20) == warm_hits
    assert cold.from_snapshot is not None
    assert cold.entries == memory.recall.entries
