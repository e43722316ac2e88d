"""The persistent turn index of branching (``wrappers/branching/turns.py``): it may lag the
history or be left behind by writes it never saw, and must still never give a wrong turn.

Blocks are made tiny (4 user messages) so sealing, cutting into a sealed block and compaction
happen at small sizes. Each check compares every turn number with a plain count of the user
messages the storage holds.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_sessions import InMemorySession, SQLiteSession
from agent_sessions.testing.helpers import texts
from agent_sessions.wrappers.advanced import AdvancedSession
from agent_sessions.wrappers.branching import BranchingSession
from agent_sessions.wrappers.branching import turns as turn_index
from agent_sessions.wrappers.branching.log import MAIN_LINEAGE

from ._branch_fixtures import assistant, turns, user

REBUILDS: list[int] = []


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_index, "BLOCK", 4)
    monkeypatch.setattr(turn_index, "COMPACT_EVERY", 3)
    REBUILDS.clear()
    original = turn_index.TurnIndex.invalidate

    def counted(self: turn_index.TurnIndex) -> None:
        REBUILDS.append(1)  # the read-back check or a missing block caught a wrong index
        original(self)

    monkeypatch.setattr(turn_index.TurnIndex, "invalidate", counted)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "index.db")


async def expected_turns(inner: Any) -> list[int]:
    """The sequence numbers of the user messages ``inner`` holds, oldest first."""
    return [seq for seq, item in await inner.get_sequenced_items() if item.get("role") == "user"]


async def check(session: BranchingSession, inner: Any) -> None:
    """Every turn number (and one past the end) gives the user message a count gives."""
    want = await expected_turns(inner)
    view = session._view
    for n in range(1, len(want) + 2):
        turn = await view.turn(MAIN_LINEAGE, n)
        assert (turn.seq if turn is not None else None) == (
            want[n - 1] if n <= len(want) else None
        ), n
    assert view._index("main") is not None  # the index answered, not the scan


async def index_records(inner: Any) -> list[Any]:
    return [item for _, item in await inner.side_store("turns.main").get_sequenced_items()]


@pytest.mark.asyncio
async def test_a_new_object_reads_the_index_instead_of_the_history(db: str) -> None:
    inner = SQLiteSession("idx-new", db)
    s = AdvancedSession(inner)
    await s.add_items(turns(10))
    await check(s, inner)
    records = await index_records(inner)
    assert [len(r["block"]) for r in records if "block" in r] == [4, 4]
    assert records[-1]["tail"] == [17, 19] and records[-1]["through"] == 20
    fresh = AdvancedSession(SQLiteSession("idx-new", db))
    loads: list[Any] = []
    original = fresh.inner._load  # type: ignore[attr-defined]

    async def counting(limit: Any, after: Any = None, before: Any = None) -> Any:
        loads.append((limit, after, before))
        return await original(limit, after, before)

    fresh.inner._load = counting  # type: ignore[attr-defined]
    name = await fresh.create_branch_from_turn(6)
    # The history is read only at item `through` (to validate the index), at turn 6 (with the
    # item below it) and, once the branch is recorded, below turn 6 again: still there, so no
    # other object popped the turn meanwhile.
    assert loads == [(None, 19, None), (2, None, 12), (1, None, 11)]
    assert texts(await fresh.get_items())[-2:] == ["q5", "r5"]
    assert name in {b["branch_id"] for b in await fresh.list_branches()}
    assert REBUILDS == []  # every answer came from the index as kept
    await fresh.close()
    await s.close()


@pytest.mark.asyncio
async def test_a_lagging_index_catches_up_with_plain_writes(db: str) -> None:
    inner = SQLiteSession("idx-lag", db)
    s = BranchingSession(inner)
    await s.add_items(turns(5))
    await check(s, inner)
    plain = SQLiteSession("idx-lag", db)  # no branching layer: the index never sees these
    await plain.add_items(turns(6, prefix="p"))
    fresh = BranchingSession(SQLiteSession("idx-lag", db))
    await check(fresh, inner)
    await check(s, inner)  # the object whose index is in memory too
    await plain.add_items([user("late"), assistant("x")])
    await check(s, inner)
    assert REBUILDS == []  # every answer came from the index as kept
    await fresh.close()
    await plain.close()
    await s.close()


@pytest.mark.asyncio
async def test_pops_below_the_index_cut_it_even_into_a_sealed_block(db: str) -> None:
    inner = SQLiteSession("idx-pop", db)
    s = BranchingSession(inner)
    await s.add_items(turns(9))
    await check(s, inner)  # blocks [q1..q4], [q5..q8], tail [q9]
    plain = SQLiteSession("idx-pop", db)
    for _ in range(6):  # r9 q9 r8 q8 r7 q7: into the second block
        await plain.pop_item()
    await plain.add_items([user("new"), assistant("x")])
    await check(BranchingSession(SQLiteSession("idx-pop", db)), inner)
    await check(s, inner)
    for _ in range(4):  # a user message popped through the branching layer
        await s.pop_item()
    await check(s, inner)
    await check(BranchingSession(SQLiteSession("idx-pop", db)), inner)
    assert REBUILDS == []  # every answer came from the index as kept
    await plain.close()
    await s.close()


@pytest.mark.asyncio
async def test_a_clear_behind_the_index_restarts_it(db: str) -> None:
    inner = SQLiteSession("idx-clear", db)
    s = BranchingSession(inner)
    await s.add_items(turns(6))
    await check(s, inner)
    plain = SQLiteSession("idx-clear", db)
    await plain.clear_session()
    await plain.add_items(turns(2, prefix="c"))
    await check(s, inner)
    await check(BranchingSession(SQLiteSession("idx-clear", db)), inner)
    await s.clear_session()  # through the layer: the index store goes too
    assert await index_records(inner) == []
    await s.add_items(turns(3))
    await check(s, inner)
    assert REBUILDS == []  # every answer came from the index as kept
    await plain.close()
    await s.close()


@pytest.mark.asyncio
async def test_two_objects_share_and_repair_one_index(db: str) -> None:
    inner = SQLiteSession("idx-two", db)
    a = BranchingSession(inner)
    b = BranchingSession(SQLiteSession("idx-two", db))
    await a.add_items(turns(7))
    await check(a, inner)
    await b.add_items(turns(7, prefix="b"))
    await check(b, inner)  # appends a head on top of a's
    await a.pop_item()
    await a.pop_item()
    await check(b, inner)
    await check(a, inner)
    for _ in range(4):  # enough heads to trigger a compaction of the store
        await b.add_items([user("more"), assistant("x")])
        await check(b, inner)
    await check(a, inner)  # a's cached blocks may be gone: it rebuilds
    assert len(await index_records(inner)) < 8
    assert REBUILDS == []  # every answer came from the index as kept
    await a.close()
    await b.close()


@pytest.mark.asyncio
async def test_a_broken_index_is_rebuilt_not_trusted(db: str) -> None:
    inner = SQLiteSession("idx-broken", db)
    s = BranchingSession(inner)
    await s.add_items(turns(9))
    await check(s, inner)
    store: Any = inner.side_store("turns.main")
    head: Any = (await store.get_sequenced_items(1))[0][1]
    await store.add_items([{**head, "blocks": [[10**9, 1, 7], *head["blocks"][1:]]}])
    await check(BranchingSession(SQLiteSession("idx-broken", db)), inner)
    assert REBUILDS
    REBUILDS.clear()
    await store.add_items([{**head, "tail": [head["through"]]}])  # r9: not a user message
    await check(BranchingSession(SQLiteSession("idx-broken", db)), inner)
    assert REBUILDS
    for malformed in ({"tail": ["x"]}, {"blocks": [[None, 1, 7]]}, {"heads": "many"}):
        await store.add_items([{**head, **malformed}])  # not ours: an empty index, rebuilt
        await check(BranchingSession(SQLiteSession("idx-broken", db)), inner)
    await s.close()


@pytest.mark.asyncio
async def test_expired_turns_are_not_counted() -> None:
    from agent_sessions.wrappers.ttl import TTLSession
    from tests.wrapper_stacks import FakeClock

    clock = FakeClock()
    sid = f"idx-ttl-{uuid.uuid4().hex[:8]}"
    inner = TTLSession(InMemorySession(sid), item_ttl=100, clock=clock)
    s = BranchingSession(inner)
    for i in range(10):
        await s.add_items([user(f"q{i}"), assistant(f"a{i}")])
        clock.advance(10)
    await check(s, inner)
    clock.advance(55)  # q0..q5 expired
    await check(s, inner)
    name = await s.create_branch_from_turn(1)
    assert name.startswith("branch_from_turn_1")
    assert await s.get_items() == []
    await s.switch_to_branch("main")
    await s.create_branch_from_turn(2, "b")
    assert texts(await s.get_items()) == ["q6", "a6"]
    assert REBUILDS == []  # every answer came from the index as kept
    await s.close()
