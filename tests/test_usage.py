"""UsageTrackingSession and AdvancedSession usage: conformance, usage from real RunResults of
ScriptedModel runs, tool usage, per-branch usage, SDK parity."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from agent_sessions import InMemorySession, InMemoryStore, SQLiteSession
from agent_sessions.core.capabilities import Capability, supports
from agent_sessions.core.ids import derive_sibling_id
from agent_sessions.testing import SessionConformanceSuite
from agent_sessions.wrappers.advanced import AdvancedSession
from agent_sessions.wrappers.branching import BranchingSession
from agent_sessions.wrappers.ttl import TTLSession
from agent_sessions.wrappers.usage import UsageTrackingSession

from ._branch_fixtures import assistant, sdk_factory, usage_agent, user
from .wrapper_stacks import FakeClock

STORE = InMemoryStore()


class TestUsageOverSDKSQLite(SessionConformanceSuite):
    concurrent_tasks = 50

    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sdk.db")

    async def create_session(self, session_id: str) -> Session:
        inner = SDKSQLiteSession(session_id, self.path)
        return UsageTrackingSession(inner, sibling_factory=sdk_factory(self.path))


class TestUsageOverBranchingStack(SessionConformanceSuite):
    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "stack.db")

    async def create_session(self, session_id: str) -> Session:
        return UsageTrackingSession(BranchingSession(SQLiteSession(session_id, self.path)))


class TestBranchingOverUsageStack(SessionConformanceSuite):
    async def create_session(self, session_id: str) -> Session:
        return BranchingSession(UsageTrackingSession(InMemorySession(session_id, store=STORE)))


def usage(requests: int, inp: int, out: int, cached: int = 0, reasoning: int = 0) -> Usage:
    return Usage(
        requests=requests,
        input_tokens=inp,
        output_tokens=out,
        total_tokens=inp + out,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
    )


@pytest.fixture(params=["usage-memory", "usage-sqlite", "advanced-sqlite", "usage-sdk"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    sid = f"u-{uuid.uuid4().hex[:8]}"
    path = str(tmp_path / "u.db")

    def factory() -> Any:
        kind = request.param
        if kind == "usage-memory":
            return UsageTrackingSession(InMemorySession(sid, store=STORE))
        if kind == "usage-sqlite":
            return UsageTrackingSession(SQLiteSession(sid, path))
        if kind == "usage-sdk":
            return UsageTrackingSession(
                SDKSQLiteSession(sid, path), sibling_factory=sdk_factory(path)
            )
        return AdvancedSession(SQLiteSession(sid, path))

    return factory


@pytest.mark.asyncio
async def test_usage_from_real_run_results(make: Any) -> None:
    s = make()
    assert await s.get_session_usage() is None
    agent, _ = usage_agent(
        ("One.", usage(1, 10, 5, cached=2, reasoning=1)), ("Two.", usage(1, 30, 7))
    )
    r1 = await Runner.run(agent, "first", session=s)
    await s.store_run_usage(r1)
    r2 = await Runner.run(agent, "second", session=s)
    await s.store_run_usage(r2)

    assert await s.get_session_usage() == {
        "requests": 2,
        "input_tokens": 40,
        "output_tokens": 12,
        "total_tokens": 52,
        "total_turns": 2,
    }
    assert await s.get_session_usage("main") == await s.get_session_usage()
    one = await s.get_turn_usage(1)
    assert one["requests"] == 1 and one["input_tokens"] == 10 and one["output_tokens"] == 5
    assert one["total_tokens"] == 15
    assert one["input_tokens_details"]["cached_tokens"] == 2
    assert one["output_tokens_details"] == {"reasoning_tokens": 1}
    listed = await s.get_turn_usage()
    assert [t["user_turn_number"] for t in listed] == [1, 2]
    assert listed[1]["input_tokens"] == 30
    assert await s.get_turn_usage(3) == {}
    await s.close()

    again = make()  # a new object on the same id reads the same records
    assert (await again.get_session_usage())["total_turns"] == 2
    await again.clear_session()
    assert await again.get_session_usage() is None
    await again.close()


@pytest.mark.asyncio
async def test_storing_twice_for_one_turn_replaces(make: Any) -> None:
    s = make()
    agent, _ = usage_agent(("a", usage(1, 10, 1)), ("b", usage(1, 99, 1)))
    await s.store_run_usage(await Runner.run(agent, "q", session=s))
    await s.add_items([user("unanswered follow-up")])
    await s.pop_item()  # popping a user message drops its turn's usage (there is none)
    result = await Runner.run(agent, "q", session=s)
    await s.pop_item()
    await s.pop_item()  # turn 2 popped
    await s.store_run_usage(result)  # lands on turn 1 again
    assert await s.get_session_usage() == {
        "requests": 1,
        "input_tokens": 99,
        "output_tokens": 1,
        "total_tokens": 100,
        "total_turns": 1,
    }
    await s.clear_session()
    await s.close()


@pytest.mark.asyncio
async def test_popping_a_turn_drops_its_usage(make: Any) -> None:
    s = make()
    agent, _ = usage_agent(("a", usage(1, 10, 1)), ("b", usage(2, 20, 2)))
    await s.store_run_usage(await Runner.run(agent, "q1", session=s))
    await s.store_run_usage(await Runner.run(agent, "q2", session=s))
    assert (await s.get_session_usage())["total_turns"] == 2
    await s.pop_item()
    assert (await s.get_session_usage())["total_turns"] == 2  # turn 2 still has its question
    await s.pop_item()
    assert await s.get_session_usage() == {
        "requests": 1,
        "input_tokens": 10,
        "output_tokens": 1,
        "total_tokens": 11,
        "total_turns": 1,
    }
    await s.clear_session()
    await s.close()


@pytest.mark.asyncio
async def test_store_run_usage_without_a_turn_or_usage_stores_nothing(make: Any) -> None:
    s = make()

    class NoUsage:
        class context_wrapper:
            usage = None

    await s.store_run_usage(NoUsage())  # type: ignore[arg-type]
    agent, _ = usage_agent(("a", usage(1, 1, 1)))
    result = await Runner.run(agent, "q", session=s)
    await s.clear_session()
    await s.store_run_usage(result)  # no user turn any more: skipped, like the SDK
    assert await s.get_session_usage() is None
    await s.store_run_usage(object())  # type: ignore[arg-type]  # logged, never raised
    await s.close()


@function_tool
def lookup(city: str) -> str:
    """Return the weather of ``city``."""
    return f"sunny in {city}"


def tool_agent() -> Agent[Any]:
    model = ScriptedModel(
        [
            ModelStep(
                output=[
                    function_call("lookup", {"city": "Paris"}, call_id="c1"),
                    function_call("lookup", {"city": "Rome"}, call_id="c2"),
                ],
                usage=usage(1, 10, 2),
            ),
            ModelStep(output=[assistant_message("Both sunny.")], usage=usage(1, 20, 3)),
            ModelStep(
                output=[function_call("lookup", {"city": "Oslo"}, call_id="c3")],
                usage=usage(1, 5, 1),
            ),
            ModelStep(output=[assistant_message("Cold.")], usage=usage(1, 6, 1)),
        ]
    )
    return Agent(name="a", instructions="x", model=model, tools=[lookup])


@pytest.mark.asyncio
async def test_tool_usage_by_turn(make: Any) -> None:
    s = make()
    agent = tool_agent()
    r1 = await Runner.run(agent, "Weather in Paris and Rome?", session=s)
    await s.store_run_usage(r1)
    r2 = await Runner.run(agent, "And Oslo?", session=s)
    await s.store_run_usage(r2)
    assert await s.get_tool_usage() == [("lookup", 2, 1), ("lookup", 1, 2)]
    assert (await s.get_turn_usage(1))["requests"] == 2  # both model calls of the turn
    assert (await s.get_session_usage())["input_tokens"] == 41
    await s.clear_session()
    await s.close()


@pytest.mark.asyncio
async def test_usage_per_branch(tmp_path: Path) -> None:
    s: Any = AdvancedSession(SQLiteSession("per-branch", str(tmp_path / "b.db")))
    agent, _ = usage_agent(*[(f"r{i}", usage(1, 10 * i, i)) for i in range(1, 6)])
    for q in ("q1", "q2", "q3"):
        await s.store_run_usage(await Runner.run(agent, q, session=s))
    await s.create_branch_from_turn(2, "alt")
    assert await s.get_turn_usage() == []  # usage is not inherited, as in the SDK
    await s.store_run_usage(await Runner.run(agent, "q2-alt", session=s))
    alt_turns = await s.get_turn_usage()
    assert [(t["user_turn_number"], t["input_tokens"]) for t in alt_turns] == [(2, 40)]
    assert (await s.get_session_usage("alt"))["total_turns"] == 1
    assert (await s.get_session_usage("main"))["input_tokens"] == 60
    assert (await s.get_session_usage())["input_tokens"] == 100
    assert [t["user_turn_number"] for t in await s.get_turn_usage(branch_id="main")] == [1, 2, 3]
    await s.switch_to_branch("main")
    await s.delete_branch("alt")
    assert await s.get_session_usage("alt") is None
    assert (await s.get_session_usage())["total_turns"] == 3
    await s.close()


@pytest.mark.asyncio
async def test_deleting_a_branch_keeps_other_branches_usage(tmp_path: Path) -> None:
    # A branch named like another branch's storage key: its delete drops only its own usage.
    s: Any = AdvancedSession(SQLiteSession("drop-branch", str(tmp_path / "d.db")))
    agent, _ = usage_agent(*[(f"r{i}", usage(1, 10 * i, i)) for i in range(1, 5)])
    for q in ("q1", "q2"):
        await s.store_run_usage(await Runner.run(agent, q, session=s))
    await s.create_branch_from_turn(2, "alt")
    await s.store_run_usage(await Runner.run(agent, "q2-alt", session=s))
    key = s._log.state.branches["alt"].lineage[-1][0]
    await s.create_branch_from_turn(1, key)
    await s.delete_branch(key, force=True)
    assert [t["input_tokens"] for t in await s.get_turn_usage(branch_id="alt")] == [30]
    assert (await s.get_session_usage())["total_turns"] == 3
    await s.close()


async def _usage_script(s: Any) -> list[Any]:
    agent = tool_agent()
    r1 = await Runner.run(agent, "Weather in Paris and Rome?", session=s)
    await s.store_run_usage(r1)
    r2 = await Runner.run(agent, "And Oslo?", session=s)
    await s.store_run_usage(r2)
    out: list[Any] = [
        await s.get_session_usage(),
        await s.get_turn_usage(),
        await s.get_turn_usage(2),
        await s.get_tool_usage(),
    ]
    await s.create_branch_from_turn(2, "b")
    out += [await s.get_tool_usage(), await s.get_turn_usage(), await s.get_session_usage("b")]
    await s.pop_item()
    await s.switch_to_branch("main")
    await s.pop_item()
    await s.pop_item()
    out += [await s.get_turn_usage(), await s.get_session_usage()]
    return out


@pytest.mark.asyncio
async def test_same_usage_results_as_the_sdk(tmp_path: Path) -> None:
    sdk = AdvancedSQLiteSession(
        session_id="p", db_path=str(tmp_path / "sdk.db"), create_tables=True
    )
    ours = AdvancedSession(SQLiteSession("p", str(tmp_path / "ours.db")))
    try:
        expected = json.loads(json.dumps(await _usage_script(sdk)))
        got = json.loads(json.dumps(await _usage_script(ours)))
    finally:
        sdk.close()
        await ours.close()
    assert got == expected


def test_a_foreign_session_needs_a_sibling_factory(tmp_path: Path) -> None:
    inner = SDKSQLiteSession("x", str(tmp_path / "f.db"))
    with pytest.raises(TypeError, match="sibling_factory"):
        UsageTrackingSession(inner)
    inner.close()


@pytest.mark.asyncio
async def test_stacked_usage_over_branching_keeps_side_data_in_the_same_store(
    tmp_path: Path,
) -> None:
    branching = BranchingSession(SQLiteSession("stack", str(tmp_path / "s.db")))
    assert supports(branching, Capability.FAMILY)
    stacked = UsageTrackingSession(branching)  # no factory needed: the layer has a family
    agent, _ = usage_agent(("a", usage(1, 3, 4)))
    await stacked.store_run_usage(await Runner.run(agent, "q", session=stacked))
    assert await stacked.get_session_usage() == {
        "requests": 1,
        "input_tokens": 3,
        "output_tokens": 4,
        "total_tokens": 7,
        "total_turns": 1,
    }
    await stacked.clear_session()
    await stacked.close()


@pytest.mark.asyncio
async def test_a_new_object_per_turn_counts_turns_without_rescanning(make: Any) -> None:
    agent, _ = usage_agent(*[(f"r{i}", usage(1, i, 1)) for i in range(1, 7)])
    for i in range(1, 4):
        s = make()
        await s.store_run_usage(await Runner.run(agent, f"q{i}", session=s))
        if i > 1 and not isinstance(s.inner, SDKSQLiteSession):
            assert s._view._scans == {}, "reading back to the newest question should suffice"
        await s.close()
    s = make()
    await s.pop_item()
    await s.pop_item()  # turn 3 gone, and its usage
    await s.close()
    s = make()
    await s.store_run_usage(await Runner.run(agent, "q3-again", session=s))
    await s.store_run_usage(await Runner.run(agent, "q4", session=s))
    got = [(t["user_turn_number"], t["input_tokens"]) for t in await s.get_turn_usage()]
    assert got == [(1, 1), (2, 2), (3, 4), (4, 5)]
    await s.clear_session()
    await s.close()


@pytest.mark.asyncio
async def test_turns_after_branch_switches_on_new_objects(tmp_path: Path) -> None:
    path = str(tmp_path / "anchor.db")
    agent, _ = usage_agent(*[(f"r{i}", usage(1, i, 1)) for i in range(1, 8)])

    def fresh() -> Any:
        return AdvancedSession(SQLiteSession("anchored", path))

    for q in ("q1", "q2", "q3"):
        s = fresh()
        await s.store_run_usage(await Runner.run(agent, q, session=s))
        await s.close()
    s = fresh()
    await s.create_branch_from_turn(2, "alt")
    await s.close()
    for q in ("alt2", "alt3"):
        s = fresh()
        await s.store_run_usage(await Runner.run(agent, q, session=s))
        await s.close()
    s = fresh()
    await s.switch_to_branch("main")
    await s.store_run_usage(await Runner.run(agent, "q4", session=s))
    main_turns = [t["user_turn_number"] for t in await s.get_turn_usage()]
    alt_turns = [t["user_turn_number"] for t in await s.get_turn_usage(branch_id="alt")]
    assert (main_turns, alt_turns) == ([1, 2, 3, 4], [2, 3])
    await s.close()


@pytest.mark.asyncio
async def test_popping_a_turn_over_expiring_items_drops_that_turns_usage() -> None:
    """Over a TTLSession, old turns expire while usage is tracked: popping the newest turn
    must drop the newest turn's usage record, not an older turn's."""
    from types import SimpleNamespace

    clock = FakeClock()
    s = UsageTrackingSession(
        TTLSession(InMemorySession(f"u-{uuid.uuid4().hex[:8]}"), item_ttl=100, clock=clock)
    )

    async def turn(n: int) -> None:
        await s.add_items([user(f"q{n}"), {"role": "assistant", "content": f"a{n}"}])
        await s.store_run_usage(
            SimpleNamespace(  # type: ignore[arg-type]
                context_wrapper=SimpleNamespace(usage=usage(1, n * 10, n))
            )
        )

    await turn(1)
    clock.advance(50)
    await turn(2)
    clock.advance(60)  # turn 1 (and its usage record) expired
    await turn(3)
    before = await s.get_turn_usage()
    assert isinstance(before, list) and [t["input_tokens"] for t in before] == [20, 30]
    await s.pop_item()
    await s.pop_item()  # turn 3 is gone: its usage goes, turn 2's stays
    after = await s.get_turn_usage()
    assert isinstance(after, list) and [t["input_tokens"] for t in after] == [20]


def ran(u: Usage) -> Any:
    """A stand-in for a RunResult reporting ``u``."""
    from types import SimpleNamespace

    return SimpleNamespace(context_wrapper=SimpleNamespace(usage=u))


async def listed(s: Any, branch_id: str | None = None) -> list[tuple[int, int]]:
    got = await s.get_turn_usage(branch_id=branch_id)
    assert isinstance(got, list)
    return [(t["user_turn_number"], t["input_tokens"]) for t in got]


@pytest.fixture(params=["usage-memory", "usage-sqlite", "advanced-memory", "advanced-sqlite"])
def expiring(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Any, FakeClock]:
    """A factory of fresh wrapper objects over a TTLSession (item_ttl=100) on one id, and the
    clock they share."""
    sid = f"x-{uuid.uuid4().hex[:8]}"
    path = str(tmp_path / "x.db")
    store = InMemoryStore()
    clock = FakeClock()

    def factory() -> Any:
        kind, backend = request.param.split("-")
        inner: Session = (
            InMemorySession(sid, store=store) if backend == "memory" else SQLiteSession(sid, path)
        )
        ttl = TTLSession(inner, item_ttl=100, clock=clock)
        return UsageTrackingSession(ttl) if kind == "usage" else AdvancedSession(ttl)

    return factory, clock


async def _turn(s: Any, n: int, inp: int | None = None) -> None:
    await s.add_items([user(f"q{n}"), assistant(f"a{n}")])
    await s.store_run_usage(ran(usage(1, inp if inp is not None else n * 10, n)))


@pytest.mark.asyncio
async def test_pops_and_stores_while_turns_expire(expiring: tuple[Any, FakeClock]) -> None:
    make, clock = expiring
    s = make()
    await _turn(s, 1)
    clock.advance(50)
    await _turn(s, 2)
    clock.advance(60)  # turn 1 and its record expired: turn 2 is turn 1 now
    await _turn(s, 3)
    assert await listed(s) == [(1, 20), (2, 30)]
    assert (await s.get_turn_usage(1))["input_tokens"] == 20
    assert await s.get_turn_usage(3) == {}
    assert await s.get_session_usage() == {
        "requests": 2,
        "input_tokens": 50,
        "output_tokens": 5,
        "total_tokens": 55,
        "total_turns": 2,
    }
    await s.close()

    s = make()  # a fresh object numbers the same way
    assert await listed(s) == [(1, 20), (2, 30)]
    await s.pop_item()
    await s.pop_item()  # q3 popped: exactly its record goes
    assert await listed(s) == [(1, 20)]
    await s.close()

    clock.advance(30)
    s = make()  # a fresh object stores for a new turn without rescanning
    await _turn(s, 4)
    assert s._view._scans == {}
    assert await listed(s) == [(1, 20), (2, 40)]
    await s.store_run_usage(ran(usage(1, 99, 9)))  # the same turn again: replaces
    assert await listed(s) == [(1, 20), (2, 99)]
    clock.advance(70)  # q2 expired as well: q4 is turn 1
    assert await listed(s) == [(1, 99)]
    assert await s.get_session_usage() == {
        "requests": 1,
        "input_tokens": 99,
        "output_tokens": 9,
        "total_tokens": 108,
        "total_turns": 1,
    }
    await s.pop_item()
    await s.pop_item()
    assert await listed(s) == []
    assert await s.get_session_usage() is None
    await s.clear_session()
    await s.close()


@pytest.mark.asyncio
async def test_usage_of_an_expired_turn_is_not_counted(expiring: tuple[Any, FakeClock]) -> None:
    """A record outlives its user message a little (it is written later): from then on it is
    neither listed nor summed, so both queries agree."""
    make, clock = expiring
    s = make()
    await s.add_items([user("q1"), assistant("a1")])
    clock.advance(30)
    await s.store_run_usage(ran(usage(1, 10, 1)))
    clock.advance(80)  # q1 expired (110 s old), its record (80 s old) not yet
    assert await s.get_turn_usage() == []
    assert await s.get_turn_usage(1) == {}
    assert await s.get_session_usage() is None
    assert await s.get_session_usage("main") is None
    await _turn(s, 2)
    assert await listed(s) == [(1, 20)]
    assert (await s.get_session_usage())["total_turns"] == 1
    await s.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.asyncio
async def test_branch_usage_while_parent_turns_expire(backend: str, tmp_path: Path) -> None:
    clock = FakeClock()
    inner: Session = (
        InMemorySession(f"b-{uuid.uuid4().hex[:8]}")
        if backend == "memory"
        else SQLiteSession("b", str(tmp_path / "b.db"))
    )
    s: Any = AdvancedSession(TTLSession(inner, item_ttl=100, clock=clock))
    await _turn(s, 1)
    clock.advance(50)
    await _turn(s, 2)
    await _turn(s, 3)
    await s.create_branch_from_turn(3, "alt")  # alt: q1, q2 (in main's storage)
    await s.store_run_usage(ran(usage(1, 7, 1)))  # alt's newest turn is inherited q2
    assert await listed(s) == [(2, 7)]
    clock.advance(10)
    await s.add_items([user("alt3"), assistant("b3")])
    await s.store_run_usage(ran(usage(1, 33, 1)))
    assert await listed(s) == [(2, 7), (3, 33)]
    assert await listed(s, "main") == [(1, 10), (2, 20), (3, 30)]
    clock.advance(50)  # q1 expired, in both branches
    assert await listed(s) == [(1, 7), (2, 33)]
    assert await listed(s, "main") == [(1, 20), (2, 30)]
    assert (await s.get_session_usage())["input_tokens"] == 90
    assert (await s.get_session_usage("alt"))["total_turns"] == 2
    for _ in range(4):  # alt3 (deleted), then q2 (inherited: hidden from alt only)
        await s.pop_item()
    assert await listed(s) == []
    assert await s.get_session_usage("alt") is None
    assert await listed(s, "main") == [(1, 20), (2, 30)]
    assert (await s.get_session_usage())["input_tokens"] == 50
    await s.close()


@pytest.mark.parametrize("kind", ["usage", "advanced"])
@pytest.mark.asyncio
async def test_a_foreign_inner_files_usage_by_sequence_number(kind: str, tmp_path: Path) -> None:
    path = str(tmp_path / "f.db")
    sid = f"f-{uuid.uuid4().hex[:8]}"
    inner = SDKSQLiteSession(sid, path)
    wrapper = UsageTrackingSession if kind == "usage" else AdvancedSession
    s: Any = wrapper(inner, sibling_factory=sdk_factory(path))
    for n in (1, 2, 3):
        await _turn(s, n)
    await s.pop_item()
    await s.pop_item()
    assert await listed(s) == [(1, 10), (2, 20)]
    log = SDKSQLiteSession(derive_sibling_id(sid, "usage"), path)
    raw: list[Any] = await log.get_items()
    # ForeignSession numbers the SDK session's items: q1=1, a1=2, q2=3, a2=4, q3=5, a3=6.
    # The pop of q3 wrote nothing: its record is left out as q3 (number 5) is gone for good.
    assert [(r["p"], "t" in r, bool(r.get("drop"))) for r in raw] == [
        (["main", 1], False, False),
        (["main", 3], False, False),
        (["main", 5], False, False),
    ]
    log.close()
    await s.close()


@pytest.mark.parametrize("kind", ["usage", "advanced"])
@pytest.mark.asyncio
async def test_a_long_turn_is_found_by_reading_back_in_pages(kind: str, tmp_path: Path) -> None:
    inner = SQLiteSession("long", str(tmp_path / "l.db"))
    s: Any = UsageTrackingSession(inner) if kind == "usage" else AdvancedSession(inner)
    await s.add_items([user("q1"), assistant("a1"), user("q2")])
    await s.add_items([assistant(f"step {i}") for i in range(300)])
    await s.store_run_usage(ran(usage(1, 5, 1)))
    assert s._view._scans == {}
    assert await listed(s) == [(2, 5)]
    await s.close()


class RowCountingSession(InMemorySession):
    """Counts the rows its sequenced reads return (the conversation's own, not a sibling's)."""

    rows_read = 0

    async def get_sequenced_items(self, limit: int | None = None, **bounds: Any) -> Any:
        rows = await super().get_sequenced_items(limit, **bounds)
        type(self).rows_read += len(rows)
        return rows


@pytest.mark.parametrize("kind", ["usage", "advanced"])
@pytest.mark.asyncio
async def test_undoing_a_turn_on_a_warm_object_does_not_rescan_the_history(kind: str) -> None:
    inner = RowCountingSession(f"w-{uuid.uuid4().hex[:8]}", store=InMemoryStore())
    s: Any = UsageTrackingSession(inner) if kind == "usage" else AdvancedSession(inner)
    for n in range(1, 301):
        await _turn(s, n)
    assert len(await listed(s)) == 300  # the object is warm: it has scanned the history
    for n in (301, 302):
        await _turn(s, n, inp=n)
        RowCountingSession.rows_read = 0
        await s.pop_item()
        await s.pop_item()  # the undo: the turn's answer, then its question
        assert RowCountingSession.rows_read < 50, "popping a question must not rescan the history"
        await _turn(s, n, inp=n + 1000)  # re-asked
    assert (await listed(s))[-2:] == [(301, 1301), (302, 1302)]
    await s.close()
