"""BranchingSession and AdvancedSession: conformance, the branching API, copy-on-write,
restart/resume, two objects, SDK parity."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession

from agent_sessions import AdvancedSQLiteSession as OurAdvancedSQLiteSession
from agent_sessions import InMemorySession, InMemoryStore, SQLiteSession
from agent_sessions.errors import BranchError, BranchNotFoundError
from agent_sessions.testing import SessionConformanceSuite
from agent_sessions.testing.helpers import (
    cancel_after,
    model_input_texts,
    scripted_agent,
    texts,
)
from agent_sessions.wrappers.advanced import AdvancedSession
from agent_sessions.wrappers.branching import BranchingSession

from ._branch_fixtures import assistant, sdk_factory, turns, user

STORE = InMemoryStore()

# -- conformance ---------------------------------------------------------------------------------


class TestAdvancedOverSDKSQLite(SessionConformanceSuite):
    """A foreign inner session: no siblings, no sequence numbers; side data via a factory."""

    concurrent_tasks = 50

    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sdk.db")

    async def create_session(self, session_id: str) -> Session:
        inner = SDKSQLiteSession(session_id, self.path)
        return AdvancedSession(inner, sibling_factory=sdk_factory(self.path))


class TestAdvancedOnABranch(SessionConformanceSuite):
    """The contract also holds on a branch whose history is partly its parent's."""

    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sessions.db")

    async def create_session(self, session_id: str) -> Session:
        session = AdvancedSession(SQLiteSession(session_id, self.path))
        if len(await session.list_branches()) == 1:  # first object on this id
            await session.add_items([user("q1")])
            await session.create_branch_from_turn(1, "b")
        return session


# -- helpers -----------------------------------------------------------------------------------


def contents(items: list[Any]) -> list[str]:
    return [i["content"] for i in items]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "branches.db")


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, db: str) -> Any:
    """Builds AdvancedSessions on one store; the same id gives the same conversation."""
    store = InMemoryStore()
    sid = f"s-{uuid.uuid4().hex[:8]}"

    def factory(session_id: str = sid) -> AdvancedSession:
        if request.param == "memory":
            inner: Session = InMemorySession(session_id, store=store)
        else:
            inner = SQLiteSession(session_id, db)
        return AdvancedSession(inner)

    return factory


async def close_all(*sessions: AdvancedSession) -> None:
    for s in sessions:
        await s.close()


# -- the API -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_branch_holds_everything_before_the_turn_and_becomes_current(make: Any) -> None:
    s = make()
    await s.add_items(turns(3))
    name = await s.create_branch_from_turn(2, "alt")
    assert name == "alt"
    assert contents(await s.get_items()) == ["q1", "r1"]
    await s.add_items([user("q2-alt"), assistant("r2-alt")])
    assert contents(await s.get_items()) == ["q1", "r1", "q2-alt", "r2-alt"]
    assert contents(await s.get_items(limit=3)) == ["r1", "q2-alt", "r2-alt"]
    assert contents(await s.get_items(branch_id="main")) == contents(turns(3))
    await s.switch_to_branch("main")
    assert contents(await s.get_items()) == contents(turns(3))
    assert await s.get_items(branch_id="nope") == []
    await s.close()


@pytest.mark.asyncio
async def test_turns_are_numbered_per_branch(make: Any) -> None:
    s = make()
    await s.add_items(turns(3))
    await s.create_branch_from_turn(3, "b")
    await s.add_items([user("other question"), assistant("other answer"), user("q4")])
    got = await s.get_conversation_turns()
    assert [(t["turn"], t["full_content"]) for t in got] == [
        (1, "q1"),
        (2, "q2"),
        (3, "other question"),
        (4, "q4"),
    ]
    assert all(t["can_branch"] for t in got)
    main_turns = await s.get_conversation_turns("main")
    assert [t["full_content"] for t in main_turns] == ["q1", "q2", "q3"]
    by_turns = await s.get_conversation_by_turns()
    assert by_turns == {
        1: [{"type": "user", "tool_name": None}, {"type": "assistant", "tool_name": None}],
        2: [{"type": "user", "tool_name": None}, {"type": "assistant", "tool_name": None}],
        3: [{"type": "user", "tool_name": None}, {"type": "assistant", "tool_name": None}],
        4: [{"type": "user", "tool_name": None}],
    }
    assert await s.get_conversation_turns("unknown") == []
    await s.close()


@pytest.mark.asyncio
async def test_long_content_is_cut_in_turn_listings_only(make: Any) -> None:
    s = make()
    long = "x" * 150
    await s.add_items([user(long)])
    [turn] = await s.get_conversation_turns()
    assert turn["content"] == "x" * 100 + "..." and turn["full_content"] == long
    [found] = await s.find_turns_by_content("XXX")
    assert found["content"] == long
    await s.close()


@pytest.mark.asyncio
async def test_find_and_branch_from_content(make: Any) -> None:
    s = make()
    await s.add_items(
        [
            user("hello"),
            assistant("hi"),
            user("Weather in Paris?"),
            assistant("Sunny"),
            user("weather in Rome?"),
        ]
    )
    found = await s.find_turns_by_content("WEATHER")
    assert [t["turn"] for t in found] == [2, 3]
    assert await s.find_turns_by_content("absent") == []
    multimodal = {"role": "user", "content": [{"type": "input_text", "text": "a picture"}]}
    await s.add_items([multimodal])
    [pic] = await s.find_turns_by_content("picture")
    assert pic["turn"] == 4 and pic["full_content"] == multimodal["content"]
    name = await s.create_branch_from_content("weather")
    assert name.startswith("branch_from_turn_2_")
    assert contents(await s.get_items()) == ["hello", "hi"]
    with pytest.raises(BranchError, match="No user turns found containing 'absent'"):
        await s.create_branch_from_content("absent")
    await s.close()


@pytest.mark.asyncio
async def test_errors_match_the_sdk(make: Any) -> None:
    s = make()
    await s.add_items(turns(2))
    for bad_turn in (0, 3, -1):
        with pytest.raises(
            ValueError, match=f"Turn {bad_turn} does not contain a user message in branch 'main'"
        ):
            await s.create_branch_from_turn(bad_turn)
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="Branch name cannot be empty"):
            await s.create_branch_from_turn(1, blank)
    with pytest.raises(BranchError, match="branch_name must be a str"):
        await s.create_branch_from_turn(1, 7)
    with pytest.raises(BranchError, match=r"Turn 1\.0 does not contain a user message"):
        await s.create_branch_from_turn(1.0)
    await s.create_branch_from_turn(2, "b1")
    with pytest.raises(BranchError, match="Branch ID 'b1' has already been used"):
        await s.create_branch_from_turn(1, "b1")
    with pytest.raises(BranchError, match="Branch ID 'main' has already been used"):
        await s.create_branch_from_turn(1, "main")
    with pytest.raises(BranchError, match="Cannot delete the 'main' branch"):
        await s.delete_branch("main")
    with pytest.raises(BranchError, match="Cannot delete current branch 'b1'"):
        await s.delete_branch("b1")
    with pytest.raises(BranchError, match="Branch ID cannot be empty"):
        await s.delete_branch(" ")
    with pytest.raises(BranchNotFoundError, match="Branch 'ghost' does not exist"):
        await s.delete_branch("ghost")
    with pytest.raises(BranchNotFoundError, match="Branch 'ghost' does not exist"):
        await s.switch_to_branch("ghost")
    assert issubclass(BranchNotFoundError, ValueError)
    # refused operations changed nothing
    assert [b["branch_id"] for b in await s.list_branches()] == ["main", "b1"]
    assert contents(await s.get_items()) == ["q1", "r1"]
    await s.delete_branch("b1", force=True)
    assert [b["branch_id"] for b in await s.list_branches()] == ["main"]
    assert contents(await s.get_items()) == contents(turns(2))
    with pytest.raises(BranchError, match="already been used"):
        await s.create_branch_from_turn(1, "b1")  # deleted names stay reserved, as in the SDK
    await s.close()


@pytest.mark.asyncio
async def test_a_failed_forced_delete_raises_and_writes_nothing(make: Any) -> None:
    a, b = make(), make()
    await a.add_items(turns(2))
    await a.create_branch_from_turn(2, "alt")
    await a.add_items([user("on alt")])
    log = await a._log.session.get_items()
    with pytest.raises(BranchNotFoundError, match="Branch 'ghost' does not exist"):
        await a.delete_branch("ghost", force=True)
    assert await a._log.session.get_items() == log
    assert a._current_branch_id == "alt"
    # Two objects force-deleting one branch at once: one deletes it, the other raises.
    results = await asyncio.gather(
        a.delete_branch("alt", force=True),
        b.delete_branch("alt", force=True),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["BranchNotFoundError", "NoneType"]
    assert [x["branch_id"] for x in await b.list_branches()] == ["main"]
    assert contents(await a.get_items()) == contents(turns(2))
    await close_all(a, b)


@pytest.mark.asyncio
async def test_sdk_constructor_takes_quoted_table_names_and_refuses_hostile_ones(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "quoted.db")
    s = OurAdvancedSQLiteSession(
        session_id="q",
        db_path=db,
        create_tables=True,
        sessions_table='"quoted_sessions"',
        messages_table="[quoted_messages]",
    )
    await s.add_items(turns(1))
    await s.create_branch_from_turn(1, "b")
    assert (s.sessions_table, s.messages_table) == ("quoted_sessions", "quoted_messages")
    # The SDK's class reads the same tables (it can quote only the sessions table: it builds
    # an index name from the messages table's).
    sdk = SDKSQLiteSession(
        "q", db, sessions_table='"quoted_sessions"', messages_table="quoted_messages"
    )
    assert await sdk.get_items() == turns(1)
    sdk.close()
    await s.close()
    for hostile in ('"x; DROP TABLE quoted_messages; --"', 'x"; DROP', '"a b"', '"', "[a]]"):
        with pytest.raises(ValueError, match="messages_table"):
            OurAdvancedSQLiteSession(session_id="q", db_path=db, messages_table=hostile)
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"quoted_sessions", "quoted_messages"} <= names
    assert not any(";" in n or " " in n for n in names)


@pytest.mark.asyncio
async def test_list_branches(make: Any) -> None:
    s = make()
    await s.add_items(turns(3))
    await s.create_branch_from_turn(2, "b")
    await s.add_items([user("x")])
    listed = await s.list_branches()
    assert [
        (b["branch_id"], b["message_count"], b["user_turns"], b["is_current"]) for b in listed
    ] == [("main", 6, 3, False), ("b", 3, 2, True)]
    assert listed[0]["created_at"] is None and isinstance(listed[1]["created_at"], str)
    await s.close()


@pytest.mark.asyncio
async def test_auto_names_never_collide(make: Any) -> None:
    s = make()
    await s.add_items(turns(1))
    first = await s.create_branch_from_turn(1)
    await s.switch_to_branch("main")
    second = await s.create_branch_from_turn(1)
    assert first != second and second.startswith(first)
    await s.close()


@pytest.mark.asyncio
async def test_two_objects_auto_naming_from_one_turn_at_once_never_collide(make: Any) -> None:
    writer = make()
    await writer.add_items(turns(2))
    await writer.close()
    a, b = make(), make()
    outcomes = await asyncio.gather(
        a.create_branch_from_turn(2), b.create_branch_from_turn(2), return_exceptions=True
    )
    # The current branch is the session's: the later caller may find it moved (no turn 2
    # there), but never an auto name it did not choose "already used".
    names = [o for o in outcomes if isinstance(o, str)]
    for o in outcomes:
        assert isinstance(o, str) or "does not contain a user message" in str(o), o
    assert names and len(set(names)) == len(names)
    listed = {branch["branch_id"] for branch in await make().list_branches()}
    assert set(names) <= listed
    await close_all(a, b)


# -- copy-on-write: writes, pops and deletes never reach other branches ---------------------


@pytest.mark.asyncio
async def test_writing_to_a_branch_never_changes_its_parent(make: Any) -> None:
    s = make()
    await s.add_items(turns(2))
    await s.create_branch_from_turn(2, "b")
    await s.add_items([user("b only")])
    assert contents(await s.get_items(branch_id="main")) == contents(turns(2))
    await s.switch_to_branch("main")
    await s.add_items([user("main only")])
    assert contents(await s.get_items(branch_id="b")) == ["q1", "r1", "b only"]
    await s.close()


@pytest.mark.asyncio
async def test_pop_past_the_fork_point_keeps_the_parent(make: Any) -> None:
    s = make()
    await s.add_items(turns(3))
    await s.create_branch_from_turn(3, "b")
    await s.add_items([user("b1")])
    popped = [(await s.pop_item())["content"] for _ in range(3)]
    assert popped == ["b1", "r2", "q2"]
    assert contents(await s.get_items()) == ["q1", "r1"]
    assert contents(await s.get_items(branch_id="main")) == contents(turns(3))
    await s.add_items([user("again")])
    assert contents(await s.get_items()) == ["q1", "r1", "again"]
    assert [t["full_content"] for t in await s.get_conversation_turns()] == ["q1", "again"]
    for _ in range(3):
        await s.pop_item()
    assert await s.pop_item() is None
    assert await s.get_items() == []
    assert contents(await s.get_items(branch_id="main")) == contents(turns(3))
    await s.close()


@pytest.mark.asyncio
async def test_popping_a_parent_never_takes_items_from_its_children(make: Any) -> None:
    s = make()
    await s.add_items(turns(3))
    await s.create_branch_from_turn(3, "child")  # sees q1 r1 q2 r2
    await s.switch_to_branch("main")
    popped = [(await s.pop_item())["content"] for _ in range(5)]
    assert popped == ["r3", "q3", "r2", "q2", "r1"]
    assert contents(await s.get_items()) == ["q1"]
    assert contents(await s.get_items(branch_id="child")) == ["q1", "r1", "q2", "r2"]
    await s.add_items([user("new main")])
    assert contents(await s.get_items()) == ["q1", "new main"]
    assert contents(await s.get_items(branch_id="child")) == ["q1", "r1", "q2", "r2"]
    # a branch of the re-rooted main still works
    await s.create_branch_from_turn(2, "from-new-main")
    assert contents(await s.get_items()) == ["q1"]
    await s.close()


@pytest.mark.asyncio
async def test_a_parent_forking_twice_at_its_tip_keeps_both_children(make: Any) -> None:
    s = make()
    await s.add_items(turns(2))
    await s.create_branch_from_turn(2, "a")
    await s.add_items([user("a2")])
    await s.create_branch_from_turn(2, "a-child")  # forks a at its own item a2
    await s.switch_to_branch("a")
    assert (await s.pop_item())["content"] == "a2"
    assert contents(await s.get_items(branch_id="a")) == ["q1", "r1"]
    await s.switch_to_branch("a-child")
    assert contents(await s.get_items()) == ["q1", "r1"]
    await s.close()


@pytest.mark.asyncio
async def test_deep_chain_branch_of_branch_of_branch(make: Any) -> None:
    s = make()
    await s.add_items(turns(4))  # main: q1..q4
    await s.create_branch_from_turn(4, "b1")  # q1..r3
    await s.add_items([user("b1-q4"), assistant("b1-r4"), user("b1-q5")])
    await s.create_branch_from_turn(5, "b2")  # q1..r3 b1-q4 b1-r4
    await s.add_items([user("b2-q5"), assistant("b2-r5")])
    await s.create_branch_from_turn(2, "b3")  # q1 r1 (inside main's part)
    await s.add_items([user("b3-q2")])
    await s.switch_to_branch("b2")
    await s.create_branch_from_turn(5, "b4")  # q1..b1-r4 (inside b1's part)
    await s.add_items([user("b4-q5")])
    expected = {
        "main": contents(turns(4)),
        "b1": ["q1", "r1", "q2", "r2", "q3", "r3", "b1-q4", "b1-r4", "b1-q5"],
        "b2": ["q1", "r1", "q2", "r2", "q3", "r3", "b1-q4", "b1-r4", "b2-q5", "b2-r5"],
        "b3": ["q1", "r1", "b3-q2"],
        "b4": ["q1", "r1", "q2", "r2", "q3", "r3", "b1-q4", "b1-r4", "b4-q5"],
    }
    for name, want in expected.items():
        assert contents(await s.get_items(branch_id=name)) == want, name
        for limit in (1, 3, 8):
            assert contents(await s.get_items(limit, branch_id=name)) == want[-limit:]
    # deleting a middle branch keeps what its descendants see
    await s.delete_branch("b1")
    await s.delete_branch("b2")
    assert contents(await s.get_items(branch_id="b4")) == expected["b4"]
    turns_b4 = await s.get_conversation_turns("b4")
    assert [t["full_content"] for t in turns_b4] == ["q1", "q2", "q3", "b1-q4", "b4-q5"]
    # popping b4 through all its segments
    got = [(await s.pop_item())["content"] for _ in range(len(expected["b4"]))]
    assert got == list(reversed(expected["b4"]))
    assert await s.pop_item() is None
    assert contents(await s.get_items(branch_id="main")) == expected["main"]
    assert contents(await s.get_items(branch_id="b3")) == expected["b3"]
    await s.close()


@pytest.mark.asyncio
async def test_clear_session_clears_every_branch_and_resets_to_main(make: Any) -> None:
    s = make()
    await s.add_items(turns(2))
    await s.create_branch_from_turn(2, "b")
    await s.add_items([user("b")])
    await s.clear_session()
    assert await s.get_items() == []
    assert [(b["branch_id"], b["is_current"]) for b in await s.list_branches()] == [("main", True)]
    assert await s.get_items(branch_id="b") == []
    await s.add_items([user("fresh")])
    assert contents(await s.get_items()) == ["fresh"]
    with pytest.raises(BranchError, match="already been used"):
        await s.create_branch_from_turn(1, "b")
    await s.close()


# -- shared state: other objects, restarts ---------------------------------------------------


@pytest.mark.asyncio
async def test_two_objects_agree_on_the_current_branch(make: Any) -> None:
    a, b = make(), make()
    await a.add_items(turns(2))
    await a.create_branch_from_turn(2, "alt")
    assert contents(await b.get_items()) == ["q1", "r1"]
    await b.add_items([user("from b")])
    assert contents(await a.get_items()) == ["q1", "r1", "from b"]
    await b.switch_to_branch("main")
    assert contents(await a.get_items()) == contents(turns(2))
    assert [x["is_current"] for x in await a.list_branches()] == [True, False]
    await a.delete_branch("alt")
    with pytest.raises(BranchNotFoundError):
        await b.switch_to_branch("alt")
    await close_all(a, b)


@pytest.mark.asyncio
async def test_two_objects_pop_and_append_on_one_branch(make: Any) -> None:
    a, b = make(), make()
    await a.add_items(turns(3))
    assert [t["turn"] for t in await a.get_conversation_turns()] == [1, 2, 3]
    await b.pop_item()
    await b.pop_item()
    await b.add_items([user("q3-new")])
    turns_a = await a.get_conversation_turns()
    assert [t["full_content"] for t in turns_a] == ["q1", "q2", "q3-new"]
    await a.create_branch_from_turn(3, "x")
    assert contents(await b.get_items()) == ["q1", "r1", "q2", "r2"]
    await close_all(a, b)


@pytest.mark.asyncio
async def test_a_pop_and_an_add_follow_the_branch_another_object_chose(make: Any) -> None:
    a, b = make(), make()
    await a.add_items(turns(2))
    assert await a.get_items()  # a now holds the log's state: main, read by no other branch
    await b.create_branch_from_turn(2, "alt")
    assert contents([await a.pop_item()]) == ["r1"], "a pops alt's newest, hiding it"
    await b.switch_to_branch("main")
    assert contents(await a.get_items()) == contents(turns(2)), "main keeps every item"
    await b.switch_to_branch("alt")
    await a.add_items([user("on alt")])
    assert contents(await b.get_items()) == ["q1", "on alt"], "a appends to alt, not main"
    await b.switch_to_branch("main")  # a still holds alt, whose storage nobody else reads
    await a.add_items([user("on main")])
    assert contents(await b.get_items()) == [*contents(turns(2)), "on main"]
    await close_all(a, b)


@pytest.mark.asyncio
async def test_concurrent_creates_of_one_name_let_exactly_one_win(make: Any) -> None:
    a, b = make(), make()
    await a.add_items(turns(2))
    results = await asyncio.gather(
        a.create_branch_from_turn(1, "same"),
        b.create_branch_from_turn(2, "same"),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["BranchError", "str"]
    await close_all(a, b)


@pytest.mark.asyncio
async def test_a_restarted_process_resumes_the_current_branch(db: str) -> None:
    sid = f"restart-{uuid.uuid4().hex[:8]}"
    s = AdvancedSession(SQLiteSession(sid, db))
    await s.add_items(turns(3))
    await s.create_branch_from_turn(2, "alt")
    await s.add_items([user("alt q2")])
    await s.close()

    again = AdvancedSession(SQLiteSession(sid, db))
    assert contents(await again.get_items()) == ["q1", "r1", "alt q2"]
    assert [b["branch_id"] for b in await again.list_branches() if b["is_current"]] == ["alt"]
    await again.switch_to_branch("main")
    await again.close()

    third = AdvancedSession(SQLiteSession(sid, db))
    assert contents(await third.get_items()) == contents(turns(3))
    await third.clear_session()
    await third.close()


@pytest.mark.asyncio
async def test_creating_a_branch_copies_no_items(db: str) -> None:
    s = AdvancedSession(SQLiteSession("cow", db))
    await s.add_items(turns(300))

    def rows(index: bool = False) -> int:
        op = "LIKE" if index else "NOT LIKE"
        with sqlite3.connect(db) as conn:
            sql = f"SELECT COUNT(*) FROM agent_messages WHERE session_id {op} ?"
            return int(conn.execute(sql, ("\x1eturns.%",)).fetchone()[0])

    before = rows()
    await s.create_branch_from_turn(150, "b")
    # Two metadata records (the fork, then the switch to it once the items below the turn
    # are checked; and, on the family's first write to its branch log, one line in the
    # family's registry per side store: the log, the turn index), no copied item.
    assert rows() - before in (2, 3, 4)
    # The turn index: one sealed block of 256 user messages and one head.
    assert rows(index=True) == 2
    assert len(await s.get_items()) == 298
    await s.create_branch_from_turn(100, "c")
    assert rows() - before in (4, 5, 6)
    assert rows(index=True) == 2  # nothing new on main: the index was not written again
    await s.close()


@pytest.mark.asyncio
async def test_side_data_lives_in_the_same_database(db: str) -> None:
    s = AdvancedSession(SQLiteSession("same-db", db))
    await s.add_items(turns(2))
    await s.create_branch_from_turn(2, "b")
    await s.add_items([user("in a sibling")])
    with sqlite3.connect(db) as conn:
        ids = {r[0] for r in conn.execute("SELECT DISTINCT session_id FROM agent_messages")}
    assert "same-db" in ids
    assert any(i.startswith("\x1ebranches\x1e") for i in ids)
    assert any(i.startswith("\x1eseg.") for i in ids)
    await s.close()


def test_a_foreign_session_needs_a_sibling_factory(tmp_path: Path) -> None:
    inner = SDKSQLiteSession("x", str(tmp_path / "f.db"))
    with pytest.raises(TypeError, match="sibling_factory"):
        BranchingSession(inner)
    inner.close()


@pytest.mark.asyncio
async def test_branching_over_the_sdk_session_with_a_factory(tmp_path: Path) -> None:
    path = str(tmp_path / "sdk.db")
    s = AdvancedSession(SDKSQLiteSession("sdk", path), sibling_factory=sdk_factory(path))
    await s.add_items(turns(3))
    await s.create_branch_from_turn(2, "b")
    await s.add_items([user("b2")])
    assert contents(await s.get_items()) == ["q1", "r1", "b2"]
    await s.switch_to_branch("main")
    for _ in range(5):  # the fifth (r1) is b's: hidden from main, not deleted
        await s.pop_item()
    assert contents(await s.get_items()) == ["q1"]
    assert contents(await s.get_items(branch_id="b")) == ["q1", "r1", "b2"]
    await s.close()
    again = AdvancedSession(SDKSQLiteSession("sdk", path), sibling_factory=sdk_factory(path))
    assert contents(await again.get_items()) == ["q1"]
    await again.clear_session()
    await again.close()


# -- a Runner-driven experiment ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_runner_experiment_branch_run_alternative_switch_back(make: Any) -> None:
    s = make()
    agent, model = scripted_agent("Paris.", "2.1 million.", "Seine.", "Lyon.", "Rhone.")
    for question in ("Capital of France?", "Population?", "River?"):
        await Runner.run(agent, question, session=s)
    original = await s.get_items()
    assert len(original) == 6

    branch = await s.create_branch_from_turn(2, "second-city")
    result = await Runner.run(agent, "Second largest city?", session=s)
    assert result.final_output == "Lyon."
    # the model saw only turn 1 and the alternative question
    assert model_input_texts(model) == ["Capital of France?", "Paris.", "Second largest city?"]
    await Runner.run(agent, "Its river?", session=s)
    assert model_input_texts(model) == [
        "Capital of France?",
        "Paris.",
        "Second largest city?",
        "Lyon.",
        "Its river?",
    ]
    alt = await s.get_items()

    await s.switch_to_branch("main")
    assert await s.get_items() == original
    assert texts(alt) == [
        "Capital of France?",
        "Paris.",
        "Second largest city?",
        "Lyon.",
        "Its river?",
        "Rhone.",
    ]
    assert texts(await s.get_items(branch_id=branch)) == texts(alt)
    main_turns = [t["full_content"] for t in await s.get_conversation_turns()]
    alt_turns = [t["full_content"] for t in await s.get_conversation_turns(branch)]
    assert main_turns == ["Capital of France?", "Population?", "River?"]
    assert alt_turns == ["Capital of France?", "Second largest city?", "Its river?"]
    await s.close()


# -- parity with the SDK's AdvancedSQLiteSession ------------------------------------------------


async def _script(s: Any) -> list[Any]:
    """The same calls on ours and the SDK's; returns the observable results."""
    out: list[Any] = []

    async def attempt(coro: Any) -> Any:
        try:
            return await coro
        except ValueError as exc:
            return f"ValueError: {exc}"

    tool_call = {
        "type": "function_call",
        "name": "lookup",
        "call_id": "c1",
        "arguments": "{}",
        "id": "fc1",
    }
    tool_out = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    await s.add_items([user("hello"), assistant("hi")])
    await s.add_items([user("Weather?"), tool_call, tool_out, assistant("Sunny")])
    await s.add_items([user("And tomorrow?"), assistant("Rain")])
    out.append(await s.get_items())
    out.append(await attempt(s.create_branch_from_turn(9, "x")))
    out.append(await attempt(s.create_branch_from_turn(1, "  ")))
    out.append(await s.create_branch_from_turn(3, "alt"))
    out.append(await attempt(s.create_branch_from_turn(1, "alt")))
    await s.add_items([user("Next week?"), assistant("Snow")])
    out.append(await s.get_items())
    out.append(await s.get_items(limit=3))
    for branch in (None, "main"):
        out.append(
            [
                {k: v for k, v in t.items() if k != "timestamp"}
                for t in await s.get_conversation_turns(branch)
            ]
        )
        out.append(
            [
                {k: v for k, v in t.items() if k != "timestamp"}
                for t in await s.find_turns_by_content("WEEK", branch)
            ]
        )
        out.append(await s.get_conversation_by_turns(branch))
        out.append(await s.get_tool_usage(branch))
    branches = [{k: v for k, v in b.items() if k != "created_at"} for b in await s.list_branches()]
    out.append(sorted(branches, key=lambda b: b["branch_id"]))  # the SDK orders ties randomly
    out.append(await attempt(s.delete_branch("main")))
    out.append(await attempt(s.delete_branch("alt")))
    out.append(await attempt(s.delete_branch("ghost")))
    out.append(await attempt(s.switch_to_branch("ghost")))
    out.append(await s.pop_item())
    out.append(await s.get_items())
    await s.switch_to_branch("main")
    out.append(await s.get_items())
    await s.delete_branch("alt")
    out.append(await attempt(s.create_branch_from_turn(1, "alt")))
    out.append(await s.get_session_usage())
    out.append(await s.get_turn_usage())
    out.append(await s.get_turn_usage(1))
    await s.add_items([user("tools"), *TOOL_ITEMS])
    out.append(await s.get_tool_usage())
    out.append(await s.get_conversation_by_turns())
    return out


TOOL_ITEMS: list[Any] = [
    {"type": "function_call", "name": "f", "namespace": "ns", "call_id": "1", "arguments": "{}"},
    {"type": "function_call", "name": "g", "namespace": "g", "call_id": "2", "arguments": "{}"},
    {"type": "mcp_call", "server_label": "srv", "name": "t", "id": "3", "arguments": "{}"},
    {"type": "mcp_approval_request", "server_label": "srv", "id": "4", "arguments": "{}"},
    {"type": "computer_call", "id": "5", "call_id": "5"},
    {"type": "web_search_call", "id": "6"},
    {"type": "tool_search_call", "id": "7"},
    {"type": "tool_search_output", "id": "8"},
    {"type": "tool_search_output", "id": "9"},
    {"type": "shell_call", "id": "10"},
    {"type": "custom_tool_call", "name": "custom", "id": "11"},
    {"type": "function_call_output", "call_id": "1", "output": "x"},
    {"type": "reasoning", "id": "12", "summary": []},
]


@pytest.mark.asyncio
async def test_same_results_as_the_sdk_advanced_sqlite_session(tmp_path: Path) -> None:
    sdk = AdvancedSQLiteSession(
        session_id="p", db_path=str(tmp_path / "sdk.db"), create_tables=True
    )
    ours = AdvancedSession(SQLiteSession("p", str(tmp_path / "ours.db")))
    try:
        expected, got = await _script(sdk), await _script(ours)
    finally:
        sdk.close()
        await ours.close()
    assert got == expected


@pytest.mark.asyncio
async def test_wrapping_an_existing_conversation_keeps_it_as_main(db: str) -> None:
    plain = SQLiteSession("existing", db)
    await plain.add_items(turns(2))
    s = AdvancedSession(plain)
    assert contents(await s.get_items()) == contents(turns(2))
    await s.create_branch_from_turn(2, "b")
    await s.add_items([user("b2")])
    assert contents(await plain.get_items()) == contents(turns(2))  # main is the inner itself
    await s.clear_session()
    await s.close()


@pytest.mark.asyncio
async def test_cancelled_branch_operations_leave_a_consistent_state(make: Any) -> None:
    s = make()
    await s.add_items(turns(3))
    for attempt in range(8):
        await cancel_after(s.create_branch_from_turn(2, f"c{attempt}"), attempt)
        await s.switch_to_branch("main")
        await cancel_after(s.pop_item(), attempt)
        await s.add_items([assistant("refill")])
    # every branch that exists is whole: q1 r1 and nothing else
    for branch in await s.list_branches():
        if branch["branch_id"] != "main":
            assert contents(await s.get_items(branch_id=branch["branch_id"])) == ["q1", "r1"]
    main = contents(await s.get_items(branch_id="main"))
    assert main[:2] == ["q1", "r1"] and len(main) >= 6
    await s.close()


class _PausingSession(InMemorySession):
    """An in-memory session that runs ``before_append`` once, just before its next append
    (guarded or not)."""

    before_append: Any = None

    async def _pause(self) -> None:
        hook, self.before_append = self.before_append, None
        if hook is not None:
            await hook()

    async def add_sequenced_items(self, items: list[Any]) -> list[int]:
        await self._pause()
        return await super().add_sequenced_items(items)

    async def append_if_newest(
        self, guard: Any, seq: int | None, items: list[Any]
    ) -> list[int] | None:
        await self._pause()
        return await super().append_if_newest(guard, seq, items)


@pytest.mark.asyncio
async def test_an_add_racing_a_pop_that_moves_the_branch_is_not_lost() -> None:
    store = InMemoryStore()
    a = AdvancedSession(InMemorySession("race", store=store))
    inner_c = _PausingSession("race", store=store)
    c = AdvancedSession(inner_c)
    await a.add_items(turns(2))
    await a.create_branch_from_turn(2, "child")  # child sees q1 r1 of main's storage
    await a.switch_to_branch("main")
    await c.get_items()  # c has read the state: main writes to its own storage

    async def pop_below_the_child() -> None:
        popped = [await a.pop_item() for _ in range(3)]
        assert contents(popped) == ["r2", "q2", "r1"]

    inner_c.before_append = pop_below_the_child
    await c.add_items([user("late")])
    assert contents(await a.get_items()) == ["q1", "late"]
    assert contents(await c.get_items()) == ["q1", "late"]
    assert contents(await a.get_items(branch_id="child")) == ["q1", "r1"]
    await close_all(a, c)


@pytest.mark.asyncio
async def test_reads_reaching_into_the_parent_stay_exact(make: Any) -> None:
    a, b = make(), make()
    await a.add_items(turns(40))
    await a.create_branch_from_turn(40, "b")
    await a.add_items([user("own")])
    first = await a.get_items(limit=5)
    assert contents(first) == ["q38", "r38", "q39", "r39", "own"]
    first[0]["content"] = "mutated by the caller"
    assert contents(await a.get_items(limit=5)) == ["q38", "r38", "q39", "r39", "own"]
    assert contents(await a.get_items(limit=100)) == [*contents(turns(39)), "own"]
    assert len(await a.get_items(limit=70)) == 70
    await b.pop_item()  # "own"
    await b.pop_item()  # r39 of main: hidden from b, kept for main
    assert contents(await a.get_items(limit=3)) == ["q38", "r38", "q39"]
    assert contents(await a.get_items(limit=2, branch_id="main")) == ["q40", "r40"]
    await b.clear_session()
    assert await a.get_items(limit=3) == []
    assert await a.get_items(branch_id="b") == []
    await close_all(a, b)


async def _branched_over_expiring_items(
    wrapper: type[BranchingSession], clock: Any
) -> BranchingSession:
    """Six turns 10 s apart over TTLSession(item_ttl=100), then a branch "alt" from turn 4."""
    from agent_sessions.wrappers.ttl import TTLSession

    s = wrapper(
        TTLSession(InMemorySession(f"ttl-{uuid.uuid4().hex[:8]}"), item_ttl=100, clock=clock)
    )
    for i in range(6):
        await s.add_items([user(f"q{i}"), assistant(f"a{i}")])
        clock.advance(10)
    await s.create_branch_from_turn(4, "alt")
    return s


@pytest.mark.asyncio
async def test_expiry_below_a_fork_point_does_not_shift_the_branch() -> None:
    from tests.wrapper_stacks import FakeClock

    clock = FakeClock()
    s = await _branched_over_expiring_items(BranchingSession, clock)
    assert texts(await s.get_items()) == ["q0", "a0", "q1", "a1", "q2", "a2"]
    clock.advance(45)  # q0 and a0 expire
    assert texts(await s.get_items()) == ["q1", "a1", "q2", "a2"]


@pytest.mark.asyncio
async def test_cached_reads_and_scans_of_an_expiring_parent_drop_expired_items() -> None:
    """The view caches the newest rows below a fork point and each storage's turn scan; with a
    TTLSession below, those rows expire, so the caches must not keep showing them."""
    from tests.wrapper_stacks import FakeClock

    clock = FakeClock()
    s = await _branched_over_expiring_items(AdvancedSession, clock)
    assert texts(await s.get_items(limit=10)) == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert [t["content"] for t in await s.get_conversation_turns()] == ["q0", "q1", "q2"]
    clock.advance(45)  # q0 and a0 expire
    assert texts(await s.get_items(limit=10)) == ["q1", "a1", "q2", "a2"]
    assert [t["content"] for t in await s.get_conversation_turns()] == ["q1", "q2"]
    assert await s.find_turns_by_content("q0") == []
    assert [t["content"] for t in await s.get_conversation_turns(branch_id="main")] == [
        "q1",
        "q2",
        "q3",
        "q4",
        "q5",
    ]


class _Forwarding:
    """Like the SDK's EncryptedSession: transforms items, forwards unknown attributes."""

    def __init__(self, inner: Any) -> None:
        self.underlying, self.session_id = inner, inner.session_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.underlying, name)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return [row["wrapped"] for row in await self.underlying.get_items(limit)]

    async def add_items(self, items: list[Any]) -> None:
        await self.underlying.add_items([{"wrapped": item} for item in items])

    async def pop_item(self) -> Any:
        row: Any = await self.underlying.pop_item()
        return None if row is None else row["wrapped"]

    async def clear_session(self) -> None:
        await self.underlying.clear_session()


@pytest.mark.asyncio
async def test_a_forwarding_proxy_does_not_pass_for_a_sequenced_session() -> None:
    """A proxy forwarding unknown attributes (as the SDK's EncryptedSession does) seems to
    offer get_sequenced_items, but that is its inner's, returning the inner's rows."""
    sid = f"p-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TypeError, match="sibling_factory"):
        BranchingSession(_Forwarding(InMemorySession(sid)))  # its family is not its own
    s = BranchingSession(
        _Forwarding(InMemorySession(sid)),
        sibling_factory=lambda side: InMemorySession(side, _internal_id=True),
    )
    await s.add_items([user("q0"), assistant("a0")])
    assert texts(await s.get_items()) == ["q0", "a0"]
    assert texts(await s.get_items(limit=1)) == ["a0"]


@pytest.mark.asyncio
async def test_a_new_object_folds_the_branch_log_from_its_newest_checkpoint(make: Any) -> None:
    """Branch operations leave checkpoints; a new object reads at most a page of the log, not
    every operation ever made, and sees the same branches, current branch and used names."""
    from agent_sessions.wrappers.branching import log as branch_log

    a = make()
    await a.add_items(turns(3))
    for i in range(branch_log.CHECKPOINT_EVERY):  # three log records per round
        name = await a.create_branch_from_turn(2, f"b{i}")
        await a.switch_to_branch("main")
        if i % 2:
            await a.delete_branch(name, force=True)
    await a.create_branch_from_turn(3, "last")
    records = await a._log.session.get_items()
    assert len(records) > branch_log.PAGE
    assert any(r.get("op") == "checkpoint" for r in records)

    expected = [x["branch_id"] for x in await a.list_branches()]
    b = make()
    read: list[int] = []
    # (the store shares side store objects: count only while b reads)
    inner = b._log.session.get_sequenced_items

    async def counted(*args: Any, **kwargs: Any) -> Any:
        rows = await inner(*args, **kwargs)
        read.append(len(rows))
        return rows

    b._log.session.get_sequenced_items = counted
    assert [x["branch_id"] for x in await b.list_branches()] == expected
    assert b._current_branch_id == "last"
    assert sum(read) <= branch_log.PAGE
    with pytest.raises(BranchError, match="already been used"):
        await b.create_branch_from_turn(1, "b1")  # deleted before the checkpoint: still taken
    assert contents(await b.get_items()) == contents(await a.get_items())
