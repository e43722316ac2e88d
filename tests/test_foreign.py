"""The SDK's own SQLiteSession passes the core tier; ForeignSession over it passes every tier and
keeps its numbering exact through crashes, other objects and changes behind its back."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession

from agent_sessions import BranchingSession, InMemorySession, TTLSession
from agent_sessions.core.ids import derive_sibling_id
from agent_sessions.testing import CoreConformance, SessionConformanceSuite
from agent_sessions.testing.helpers import item_text, texts
from agent_sessions.wrappers.foreign import ForeignSession, Numbering, sequenced

_DIR = tempfile.mkdtemp(prefix="agent-sessions-foreign-")
_DB = os.path.join(_DIR, "sdk.db")


def msg(text: str) -> Any:
    return {"role": "user", "content": text}


class TestSDKSQLiteSessionPassesTheCoreTier(CoreConformance):
    async def create_session(self, session_id: str) -> Session:
        return SDKSQLiteSession(session_id, _DB)


class TestForeignSessionOverTheSDKPassesEveryTier(SessionConformanceSuite):
    concurrent_tasks = 50  # the SDK's SQLiteSession writes from a thread, one at a time

    async def create_session(self, session_id: str) -> Session:
        return ForeignSession(
            SDKSQLiteSession(session_id, _DB),
            sibling_factory=lambda sid: SDKSQLiteSession(sid, _DB),
        )


def _foreign(path: Path, sid: str | None = None) -> ForeignSession:
    db = str(path / "f.db")
    return ForeignSession(
        SDKSQLiteSession(sid or f"f-{uuid.uuid4().hex[:8]}", db),
        sibling_factory=lambda i: SDKSQLiteSession(i, db),
    )


def _pairs(rows: list[tuple[int, Any]]) -> list[tuple[int, str]]:
    return [(seq, item_text(item)) for seq, item in rows]


def test_numbering_runs_map_positions_and_bounds() -> None:
    n = Numbering()
    assert n.added(3) == [1, 2, 3]
    n = n.truncated(2)  # popped 3
    assert n.added(2) == [4, 5]
    assert [n.seq_at(p) for p in range(1, 5)] == [1, 2, 4, 5]
    assert [n.below(b) for b in (1, 2, 3, 4, 5, 6)] == [0, 1, 2, 2, 3, 4]
    assert Numbering.from_json(n.to_json()) == n
    assert n.renumbered(4).runs == [(1, 6)]


@pytest.mark.asyncio
async def test_an_existing_sdk_history_is_adopted_in_order(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    raw = SDKSQLiteSession("old", db)
    await raw.add_items([msg("a"), msg("b")])
    s = _foreign(tmp_path, "old")
    assert _pairs(await s.get_sequenced_items()) == [(1, "a"), (2, "b")]
    assert await s.add_sequenced_items([msg("c")]) == [3]
    assert texts(await raw.get_items()) == ["a", "b", "c"], "the SDK's rows stay plain items"
    raw.close()
    await s.close()


@pytest.mark.asyncio
async def test_a_write_that_never_reached_the_store_is_not_numbered(tmp_path: Path) -> None:
    s = _foreign(tmp_path)
    await s.add_items([msg("a")])

    async def crash(items: Any) -> None:  # the process died after the numbering record
        raise ConnectionError("gone")

    inner: Any = s.inner
    add = inner.add_items
    inner.add_items = crash
    with pytest.raises(ConnectionError):
        await s.add_items([msg("lost")])
    inner.add_items = add
    assert _pairs(await _foreign(tmp_path, s.session_id).get_sequenced_items()) == [(1, "a")]
    assert await s.add_sequenced_items([msg("b")]) == [3], "numbers are not reused"
    await s.close()


@pytest.mark.asyncio
async def test_a_crash_between_equal_items_is_resolved_by_counting(tmp_path: Path) -> None:
    s = _foreign(tmp_path)
    await s.add_items([msg("same")])
    inner: Any = s.inner
    add = inner.add_items

    async def crash(items: Any) -> None:
        raise ConnectionError("gone")

    inner.add_items = crash
    with pytest.raises(ConnectionError):
        await s.add_items([msg("same")])  # newest digest equal before and after
    inner.add_items = add
    fresh = _foreign(tmp_path, s.session_id)
    assert _pairs(await fresh.get_sequenced_items()) == [(1, "same")]
    await s.add_items([msg("same")])
    assert _pairs(await fresh.get_sequenced_items()) == [(1, "same"), (3, "same")]
    await s.close()
    await fresh.close()


@pytest.mark.asyncio
async def test_changes_behind_its_back_are_noticed(tmp_path: Path) -> None:
    s = _foreign(tmp_path)
    await s.add_items([msg("a"), msg("b")])
    raw = SDKSQLiteSession(s.session_id, str(tmp_path / "f.db"))
    await raw.add_items([msg("c")])  # an append: numbered on
    assert _pairs(await s.get_sequenced_items()) == [(1, "a"), (2, "b"), (3, "c")]
    await raw.pop_item()
    await raw.pop_item()  # a pop: the whole history gets fresh numbers
    rows = await s.get_sequenced_items()
    assert [item_text(i) for _, i in rows] == ["a"] and rows[0][0] > 3
    assert (await s.add_sequenced_items([msg("d")]))[0] > rows[0][0]
    raw.close()
    await s.close()


@pytest.mark.asyncio
async def test_items_another_writer_puts_around_a_batch_are_numbered_in_commit_order(
    tmp_path: Path,
) -> None:
    s = _foreign(tmp_path)
    raw = SDKSQLiteSession(s.session_id, str(tmp_path / "f.db"))
    await s.add_items([msg("a")])
    inner: Any = s.inner
    add = inner.add_items

    async def between(items: Any) -> None:  # another writer before and after the batch
        await raw.add_items([msg("x")])
        await add(items)
        await raw.add_items([msg("y")])

    inner.add_items = between
    assert await s.add_sequenced_items([msg("b"), msg("c")]) == [3, 4]
    assert _pairs(await s.get_sequenced_items()) == [
        (1, "a"),
        (2, "x"),
        (3, "b"),
        (4, "c"),
        (5, "y"),
    ]

    async def undone(items: Any) -> None:  # another writer pops the batch at once
        await add(items)
        await raw.pop_item()

    inner.add_items = undone
    assert await s.add_sequenced_items([msg("d")]) == [6], "a number nothing holds"
    inner.add_items = add
    assert await s.add_sequenced_items([msg("e")]) == [7]
    assert _pairs(await s.get_sequenced_items())[-2:] == [(5, "y"), (7, "e")]
    raw.close()
    await s.close()


@pytest.mark.asyncio
async def test_clear_empties_the_numbering_log_down_to_its_high_water_mark(
    tmp_path: Path,
) -> None:
    s = _foreign(tmp_path)
    await s.add_items([msg("a"), msg("b")])
    await s.add_items([msg("c")])
    log = SDKSQLiteSession(derive_sibling_id(s.session_id, "seq"), str(tmp_path / "f.db"))
    assert len(await log.get_items()) == 2
    for _ in range(3):
        await s.clear_session()
        assert len(await log.get_items()) == 1, "one record, however often cleared"
        assert await s.get_sequenced_items() == []
    assert await s.add_sequenced_items([msg("d")]) == [4]  # above every number given out
    log.close()
    await s.close()


@pytest.mark.asyncio
async def test_layers_see_what_is_written_after_an_expiry_and_a_clear(tmp_path: Path) -> None:
    # Found by `make props` (compaction over encryption over TTL over this adapter): numbers
    # restarting after a clear made the TTL layer's boundary, which held number 1 as dead,
    # hide the new item 1 from the numbered reads of the layers above it.
    from tests.matrix import CLOCK, DAY, STACKS

    s: Any = STACKS["compaction-ttl"](_foreign(tmp_path))
    try:
        await s.add_items([msg("old")])
        CLOCK.offset += DAY + 60
        assert await s.get_items() == []
        await s.clear_session()
        await s.add_items([msg("new")])
        assert texts(await s.get_items()) == ["new"]
        assert texts(await s.get_items(limit=2)) == ["new"]
    finally:
        CLOCK.offset = 0.0
        await s.close()


def test_expiring_or_unopenable_foreign_sessions_are_refused(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    sdk = SDKSQLiteSession("x", db)
    with pytest.raises(TypeError, match="side_store_factory"):
        ForeignSession(sdk)
    with pytest.raises(ValueError, match="TTLSession in it removes old items"):
        ForeignSession(TTLSession(sdk, ttl=60), sibling_factory=lambda i: SDKSQLiteSession(i, db))
    ours = InMemorySession("y")
    assert sequenced(ours) is ours, "a session with numbers of its own is used as it is"
    sdk.close()


@pytest.mark.asyncio
async def test_locks_of_sessions_no_longer_in_use_are_not_kept(tmp_path: Path) -> None:
    import asyncio
    import gc

    from agent_sessions.wrappers import foreign

    kept = _foreign(tmp_path)
    twin = _foreign(tmp_path, kept.session_id)
    await kept.add_items([msg("a")])
    for i in range(50):  # a server seeing many conversations, one object each
        s = _foreign(tmp_path, f"many-{i}")
        await s.add_items([msg(str(i))])
        await s.close()
    del s
    gc.collect()
    locks = foreign._LOCKS[asyncio.get_running_loop()]
    assert set(locks) == {kept._key}, "only the live object's lock is kept"
    assert twin._lock() is kept._lock(), "objects of one session share its lock"
    await twin.close()
    await kept.close()


class _Item(dict[str, Any]):
    """An item as the OpenAI SDK returns it (a model with model_dump)."""

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self)


class _FakeConversations:
    """The OpenAI client's conversations API, in memory: ``create`` starts a conversation,
    ``items`` lists (asc/desc), creates (each item gets an id, as the API adds) and deletes."""

    def __init__(self) -> None:
        self.store: dict[str, list[_Item]] = {}
        self.calls: list[str] = []
        self.items = self

    async def create(self, items: list[Any] | None = None, **kw: Any) -> Any:
        self.calls.append("conversations.create")
        if "conversation_id" in kw:  # items.create
            for item in items or []:
                self.store[kw["conversation_id"]].append(_Item(item, id=uuid.uuid4().hex))
            return None
        cid = f"conv_{uuid.uuid4().hex[:12]}"
        self.store[cid] = []
        return type("Conversation", (), {"id": cid})()

    async def list(self, conversation_id: str, order: str = "asc", **_: Any) -> Any:
        for item in self.store[conversation_id][:: 1 if order == "asc" else -1]:
            yield item

    async def delete(self, conversation_id: str, item_id: str | None = None) -> None:
        if item_id is None:
            del self.store[conversation_id]
        else:
            self.store[conversation_id] = [
                i for i in self.store[conversation_id] if i["id"] != item_id
            ]


class _FakeOpenAI:
    def __init__(self) -> None:
        self.conversations = _FakeConversations()

    def with_options(self, **_: Any) -> _FakeOpenAI:
        return self


@pytest.mark.asyncio
async def test_a_conversation_created_on_first_use_is_numbered() -> None:
    """The SDK's OpenAIConversationsSession() creates its conversation (and id) on first use:
    ForeignSession accepts it at construction, numbers the items the API returns with ids
    added, and keeps its side stores in this package's own sessions."""
    from agents.memory import OpenAIConversationsSession

    from agent_sessions.backends.memory import InMemoryStore

    client, store = _FakeOpenAI(), InMemoryStore()

    def conversation(cid: str | None = None) -> ForeignSession:
        inner = OpenAIConversationsSession(conversation_id=cid, openai_client=client)  # type: ignore[arg-type]
        return ForeignSession(
            inner, side_store_factory=lambda sid: InMemorySession(sid, store=store)
        )

    s = conversation()
    assert client.conversations.calls == [], "construction calls nothing"
    with pytest.raises(ValueError, match="no id until its first operation"):
        s.session_id  # noqa: B018
    assert await s.add_sequenced_items([msg("a"), msg("b")]) == [1, 2]
    cid = s.session_id
    assert list(client.conversations.store) == [cid]
    popped = await s.pop_item()
    assert popped is not None and item_text(popped) == "b"
    assert await s.add_sequenced_items([msg("c")]) == [3]
    assert _pairs(await s.get_sequenced_items()) == [(1, "a"), (3, "c")]
    again = conversation(cid)  # another object on the same conversation: the same numbers
    assert _pairs(await again.get_sequenced_items()) == [(1, "a"), (3, "c")]
    assert await again.add_sequenced_items([msg("d")]) == [4]
    assert any(sid.endswith(cid) for sid in store.session_ids()), "the log is in our store"
    await s.clear_session()  # the SDK's class drops the conversation; the numbers keep rising
    assert await s.add_sequenced_items([msg("e")]) == [5]
    assert s.session_id == cid, "the family stays under the first id"
    named = ForeignSession(  # an id of the caller's: layers above need one at construction
        OpenAIConversationsSession(openai_client=client),  # type: ignore[arg-type]
        session_id="ticket-1",
        side_store_factory=lambda sid: InMemorySession(sid, store=store),
    )
    view = BranchingSession(named)
    await view.add_items([msg("x")])
    assert texts(await view.get_items()) == ["x"] and view.session_id == "ticket-1"


def test_side_store_factories_accept_this_packages_sessions_and_one_spelling(
    tmp_path: Path,
) -> None:
    """A derived id (it starts with \\x1e, refused as a user's id) is accepted when a
    side-store factory passes it on; side_store_factory= and sibling_factory= are one option."""
    from agent_sessions import SQLiteSession

    sid = derive_sibling_id("u1", "seq")
    assert InMemorySession(sid).session_id == sid
    assert type(SQLiteSession(sid, str(tmp_path / "s.db")).session_id) is str
    with pytest.raises(ValueError, match="reserved for derived ids"):
        InMemorySession(str(sid))  # the same text typed in stays refused
    inner = SDKSQLiteSession("u1", str(tmp_path / "f.db"))
    with pytest.raises(TypeError, match="not both"):
        ForeignSession(inner, side_store_factory=InMemorySession, sibling_factory=InMemorySession)
    with pytest.raises(TypeError, match="side_store_factory="):
        ForeignSession(inner)
