"""CompactionSession: the conformance kit, Runner-driven compaction, tool-call boundaries,
crash injection, background mode, archive, and the three summarizers."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.items import TResponseInputItem
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession
from agents.memory.openai_responses_compaction_session import default_should_trigger_compaction
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from agent_sessions import Capability, InMemorySession, InMemoryStore, SQLiteSession
from agent_sessions.errors import BackendDataError, SessionClosedError
from agent_sessions.testing import (
    SessionConformanceSuite,
    item_text,
    model_input_texts,
    scripted_agent,
)
from agent_sessions.testing import texts as message_texts
from agent_sessions.wrappers.compaction import (
    AgentSummarizer,
    CompactionSession,
    CompactionTriggerContext,
    ExtractiveSummarizer,
    ResponsesCompactionSummarizer,
    TokenEstimator,
    item_count_trigger,
    token_threshold_trigger,
)
from agent_sessions.wrappers.compaction.boundary import choose_cut, safe_cuts
from agent_sessions.wrappers.compaction.summarizers import SUMMARY_HEADER
from agent_sessions.wrappers.encrypted import EncryptedSession
from tests.wrapper_stacks import IdentitySummarizer, YieldingSession


def msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


def sid() -> str:
    return f"cmp-{uuid.uuid4().hex[:12]}"


def is_summary(item: Any) -> bool:
    return isinstance(item, dict) and str(item.get("content", "")).startswith(SUMMARY_HEADER)


def originals(view: list[Any]) -> list[str]:
    return [item_text(i) for i in view if not is_summary(i)]


class GatedSummarizer:
    """Extractive summaries, but each call waits until ``release`` is set; counts overlap."""

    name = "gated"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.calls: list[list[Any]] = []
        self.running = 0
        self.max_running = 0
        self._inner = ExtractiveSummarizer()

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        self.calls.append(list(items))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.started.set()
        try:
            await self.release.wait()
            return await self._inner.summarize(items, previous_summary=previous_summary)
        finally:
            self.running -= 1


class FailingSummarizer:
    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        self.calls += 1
        raise RuntimeError("summarizer crashed")


class FailingWrites:
    """A record store whose writes fail: before storing, or after storing (lost ack)."""

    def __init__(self, real: InMemorySession, *, after_write: bool) -> None:
        self.real = real
        self.session_id = real.session_id
        self.session_settings = real.session_settings
        self.after_write = after_write
        self.armed = True

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.real.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        if self.armed and not self.after_write:
            raise ConnectionError("store went away before the write")
        await self.real.add_items(items)
        if self.armed:
            raise ConnectionError("store went away after the write")

    async def pop_item(self) -> Any:
        return await self.real.pop_item()

    async def clear_session(self) -> None:
        await self.real.clear_session()


def every(n: int) -> Any:
    return item_count_trigger(n)


# -- the conformance kit --------------------------------------------------------------------
#
# The kit asserts exact histories, so its sessions compact only from the Runner hook, with a
# trigger firing every 4 items and keep_last=8: every Runner test of the kit runs the full
# compaction path (snapshot, trigger, boundary search) but its histories (at most 6 items) are
# too short to cut, so the kit's exact assertions still hold. Compaction that does cut is checked
# with exact views in the tests further down.


class _KitBase(SessionConformanceSuite):
    background = False
    trigger_calls = 0

    @pytest.mark.asyncio
    async def test_runner_turns_reach_the_compaction_trigger(self) -> None:
        session = await self.create_session(sid())
        before = type(self).trigger_calls
        agent, _ = scripted_agent("a1", "a2")
        await Runner.run(agent, "q1", session=session)
        await Runner.run(agent, "q2", session=session)
        assert isinstance(session, CompactionSession)
        await session.wait_for_compaction()
        assert type(self).trigger_calls == before + 2
        assert message_texts(await session.get_items()) == ["q1", "a1", "q2", "a2"]
        await self.dispose_session(session)

    def make_inner(self, session_id: str) -> Session:
        raise NotImplementedError

    async def create_session(self, session_id: str) -> Session:
        def counting(context: CompactionTriggerContext) -> bool:
            type(self).trigger_calls += 1
            return context["items_since_last_compaction"] >= 4

        return CompactionSession(
            self.make_inner(session_id),
            summarizer=ExtractiveSummarizer(),
            should_trigger_compaction=counting,
            keep_last=8,
            background=self.background,
        )


class TestCompactionOverMemoryConformance(_KitBase):
    def make_inner(self, session_id: str) -> Session:
        return InMemorySession(session_id)


class TestCompactionOverSQLiteConformance(_KitBase):
    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sessions.db")

    def make_inner(self, session_id: str) -> Session:
        return SQLiteSession(session_id, self.path)


class TestBackgroundCompactionOverSQLiteConformance(TestCompactionOverSQLiteConformance):
    background = True


class _CompactingKitBase(SessionConformanceSuite):
    """The kit with compaction really happening every 4 items (after writes and in the Runner
    hook), keep_last=2, through the identity summarizer: cuts, records, pops through summary
    items, limits across the seam and concurrency with compaction all face exact assertions."""

    background = False

    def make_inner(self, session_id: str) -> Session:
        raise NotImplementedError

    async def create_session(self, session_id: str) -> Session:
        return CompactionSession(
            self.make_inner(session_id),
            summarizer=IdentitySummarizer(),
            should_trigger_compaction=every(4),
            keep_last=2,
            background=self.background,
            compact_on_write=True,
        )

    @pytest.mark.asyncio
    async def test_writes_really_compact(self) -> None:
        session = await self.create_session(sid())
        assert isinstance(session, CompactionSession)
        await session.add_items([msg(f"m{i}") for i in range(10)])
        await session.wait_for_compaction()
        assert len(await session.get_archived_items()) == 8
        assert await session.get_items() == [msg(f"m{i}") for i in range(10)]
        await self.dispose_session(session)


class TestCompactingKitOverSQLite(_CompactingKitBase):
    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sessions.db")

    def make_inner(self, session_id: str) -> Session:
        return SQLiteSession(session_id, self.path)


class TestBackgroundCompactingKitOverSQLite(TestCompactingKitOverSQLite):
    background = True


# -- Runner-driven compaction ----------------------------------------------------------------


def new_session(**options: Any) -> CompactionSession:
    options.setdefault("should_trigger_compaction", every(4))
    options.setdefault("keep_last", 2)
    return CompactionSession(InMemorySession(sid()), **options)


@pytest.mark.asyncio
async def test_runner_run_compacts_after_a_turn_and_the_model_sees_the_summary() -> None:
    session = new_session()
    agent, model = scripted_agent("Paris.", "About 2.1 million.", "Yes, the Seine.")
    await Runner.run(agent, "Capital of France?", session=session)
    assert await session.get_compaction_records() == []  # 2 items: trigger declines
    await Runner.run(agent, "Its population?", session=session)
    view = await session.get_items()
    assert is_summary(view[0]) and "Capital of France?" in item_text(view[0])
    assert originals(view) == ["Its population?", "About 2.1 million."]
    await Runner.run(agent, "A river?", session=session)
    seen = model.calls[-1].input
    assert isinstance(seen, list) and is_summary(seen[0])
    assert model_input_texts(model)[1:] == ["Its population?", "About 2.1 million.", "A river?"]
    # 4 more items since the last compaction: compacted again, extending the summary
    view = await session.get_items()
    assert "Capital of France?" in item_text(view[0]) and "Its population?" in item_text(view[0])
    assert originals(view) == ["A river?", "Yes, the Seine."]
    assert message_texts(await session.get_archived_items()) == [
        "Capital of France?",
        "Paris.",
        "Its population?",
        "About 2.1 million.",
    ]


@pytest.mark.asyncio
async def test_runner_streamed_compacts_through_the_hook() -> None:
    session = new_session()
    agent, model = scripted_agent("Hello!", "Fine.", "Bye.")
    for question in ("Hi", "How are you?", "Goodbye"):
        result = Runner.run_streamed(agent, question, session=session)
        async for _ in result.stream_events():
            pass
    assert result.final_output == "Bye."
    assert is_summary(model.calls[-1].input[0])
    assert model_input_texts(model)[1:] == ["How are you?", "Fine.", "Goodbye"]
    assert message_texts(await session.get_archived_items()) == [
        "Hi",
        "Hello!",
        "How are you?",
        "Fine.",
    ]
    assert originals(await session.get_items()) == ["Goodbye", "Bye."]


def test_runner_run_sync_compacts_through_the_hook() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        session = loop.run_until_complete(_make_async(new_session))
        agent, model = scripted_agent("One.", "Two.", "Three.")
        for question in ("first", "second", "third"):
            Runner.run_sync(agent, question, session=session)
        assert is_summary(model.calls[-1].input[0])
        view = loop.run_until_complete(session.get_items())
        assert originals(view) == ["third", "Three."]
        assert model_input_texts(model)[1:] == ["second", "Two.", "third"]
        loop.run_until_complete(session.close())
    finally:
        loop.close()
        asyncio.set_event_loop(None)


async def _make_async(factory: Any) -> Any:
    return factory()


@pytest.mark.asyncio
async def test_background_hook_returns_before_the_summary_and_reads_serve_the_old_view() -> None:
    gate = GatedSummarizer()
    session = new_session(summarizer=gate, background=True)
    agent, _ = scripted_agent("a1", "a2", "a3")
    await Runner.run(agent, "q1", session=session)
    result = Runner.run_streamed(agent, "q2", session=session)
    async for _ in result.stream_events():
        pass
    assert result.final_output == "a2"  # the streamed run finished while the summary waits
    await asyncio.wait_for(gate.started.wait(), 5)
    assert session.compaction_pending
    assert message_texts(await session.get_items()) == ["q1", "a1", "q2", "a2"]
    await Runner.run(agent, "q3", session=session)  # a turn meanwhile is not held up either
    gate.release.set()
    await session.wait_for_compaction()
    assert not session.compaction_pending
    view = await session.get_items()
    assert is_summary(view[0])
    # the hook call of turn 3 was coalesced into one more run after the first one
    assert originals(view) == ["q3", "a3"]
    assert [message_texts(call) for call in gate.calls] == [["q1", "a1"], ["q2", "a2"]]
    assert gate.max_running == 1
    await session.close()


@pytest.mark.asyncio
async def test_force_compacts_now_even_when_the_trigger_declines() -> None:
    session = new_session(should_trigger_compaction=lambda ctx: False)
    await session.add_items([msg(f"m{i}") for i in range(5)])
    await session.run_compaction({"response_id": "r", "force": False})
    assert await session.get_compaction_records() == []
    await session.run_compaction({"force": True})
    assert originals(await session.get_items()) == ["m3", "m4"]


# -- tool calls across the boundary ---------------------------------------------------------


@function_tool
def get_weather(city: str) -> str:
    """Return the weather of a city."""
    return f"sunny in {city}"


def assert_pairs_intact(items: list[Any]) -> None:
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    assert calls == outputs, f"unpaired calls/outputs: {calls ^ outputs}"


@pytest.mark.asyncio
async def test_runner_tool_calls_are_never_split_by_the_boundary() -> None:
    steps: list[Any] = []
    for turn in range(4):
        steps.append([function_call("get_weather", {"city": f"c{turn}"}, call_id=f"call-{turn}")])
        steps.append([assistant_message(f"weather {turn}", item_id=f"m{turn}")])
    model = ScriptedModel(steps)
    agent = Agent(name="w", instructions="Be brief.", model=model, tools=[get_weather])
    # Every turn stores 4 items: user, call, output, answer. keep_last=2 asks for a cut between
    # the call and its output; the boundary moves back to the start of the turn instead.
    session = new_session(keep_last=2)
    for turn in range(4):
        await Runner.run(agent, f"weather in c{turn}?", session=session)
        view = await session.get_items()
        assert_pairs_intact(view)
        assert_pairs_intact(model.calls[-1].input)
    view = await session.get_items()
    assert is_summary(view[0])
    assert [i.get("type", "message") for i in view[1:]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    archived = await session.get_archived_items()
    assert len(archived) == 12
    assert_pairs_intact(archived)


@pytest.mark.asyncio
async def test_runner_handoffs_are_never_split_by_the_boundary(tmp_path: Path) -> None:
    specialist_model = ScriptedModel([[assistant_message(f"b says {t}")] for t in range(3)])
    specialist = Agent(name="b", instructions="Answer.", model=specialist_model)
    triage_model = ScriptedModel(
        [[function_call("transfer_to_b", "{}", call_id=f"h{t}")] for t in range(3)]
    )
    triage = Agent(name="a", instructions="Route.", model=triage_model, handoffs=[specialist])
    session = CompactionSession(
        SQLiteSession(sid(), str(tmp_path / "h.db")),
        should_trigger_compaction=every(4),
        keep_last=2,
        background=True,
    )
    for turn in range(3):
        result = Runner.run_streamed(triage, f"question {turn}", session=session)
        async for _ in result.stream_events():
            pass
        await session.wait_for_compaction()
        assert_pairs_intact(await session.get_items())
        assert_pairs_intact(specialist_model.calls[-1].input)
    view = await session.get_items()
    assert is_summary(view[0])
    assert [i.get("type", "message") for i in view[1:]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert_pairs_intact(await session.get_archived_items())
    await session.close()


def test_cuts_respect_call_pairs_reasoning_and_pending_calls() -> None:
    items: list[Any] = [
        msg("q"),  # 0
        {"type": "reasoning", "id": "rs1", "summary": []},  # 1
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},  # 2
        {"type": "computer_call", "call_id": "b", "action": {}},  # 3
        {"type": "function_call_output", "call_id": "a", "output": "x"},  # 4
        {"type": "computer_call_output", "call_id": "b", "output": {}},  # 5
        {"type": "mcp_approval_request", "id": "r1", "name": "t", "arguments": "{}"},  # 6
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},  # 7
        {"type": "function_call", "call_id": "h", "name": "transfer_to_b", "arguments": "{}"},  # 8
        {"type": "function_call_output", "call_id": "h", "output": "{}"},  # 9 (handoff result)
        msg("answer", "assistant"),  # 10
        {"type": "custom_tool_call", "call_id": "p", "name": "c", "input": ""},  # 11 (pending)
        msg("later"),  # 12
    ]
    ok = safe_cuts(items)
    assert [c for c, good in enumerate(ok) if good] == [0, 1, 6, 8, 10, 11]
    assert choose_cut(items, lowest=1, highest=12) == 11
    assert choose_cut(items, lowest=1, highest=5) == 1
    assert choose_cut(items, lowest=2, highest=5) is None


def test_cut_prefers_the_start_of_a_user_turn() -> None:
    items = [msg("q1"), msg("a1", "assistant"), msg("q2"), msg("a2", "assistant")]
    items.append(msg("x", "assistant"))
    assert choose_cut(items, lowest=1, highest=3) == 2
    assert choose_cut(items, lowest=1, highest=4) == 4  # a turn start at 2 would halve it
    long_turn = [msg("q1"), *[msg(f"a{i}", "assistant") for i in range(10)]]
    assert choose_cut(long_turn, lowest=1, highest=9) == 9


# -- crash injection -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_summarizer_crash_leaves_the_history_intact() -> None:
    session = new_session(summarizer=FailingSummarizer())
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    with pytest.raises(RuntimeError, match="summarizer crashed"):
        await session.run_compaction({"force": True})
    assert await session.get_items() == items
    assert await session.get_archived_items() == []
    assert await session.get_compaction_records() == []


@pytest.mark.asyncio
async def test_background_summarizer_crash_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = FailingSummarizer()
    session = new_session(summarizer=failing, background=True)
    agent, _ = scripted_agent("a1", "a2")
    await Runner.run(agent, "q1", session=session)
    with caplog.at_level(logging.WARNING, logger="agent_sessions.compaction"):
        result = await Runner.run(agent, "q2", session=session)  # hook fires; turn succeeds
        await session.wait_for_compaction()
    assert result.final_output == "a2"
    assert failing.calls == 1
    assert isinstance(session.last_error, RuntimeError)
    assert "failed" in caplog.text
    assert message_texts(await session.get_items()) == ["q1", "a1", "q2", "a2"]


@pytest.mark.asyncio
@pytest.mark.parametrize("after_write", [False, True], ids=["before-write", "lost-ack"])
async def test_crash_while_committing_never_half_replaces(after_write: bool) -> None:
    store = InMemoryStore()
    records: list[FailingWrites] = []

    def factory(record_id: str) -> Any:
        records.append(
            FailingWrites(
                InMemorySession(record_id, store=store, _internal_id=True), after_write=after_write
            )
        )
        return records[-1]

    inner = InMemorySession(sid(), store=store)
    session = CompactionSession(inner, keep_last=2, sibling_factory=factory)
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    with pytest.raises(ConnectionError):
        await session.compact()
    view = await session.get_items()
    if after_write:  # the record was stored whole: the new view, and nothing is lost
        assert is_summary(view[0]) and originals(view) == ["m4", "m5"]
        assert await session.get_archived_items() + view[1:] == items
    else:  # nothing stored: the old view
        assert view == items
    assert await inner.get_items() == items  # the originals were never touched
    records[0].armed = False
    await session.add_items([msg("m6"), msg("m7")])
    assert (await session.compact()) is not None
    assert originals(await session.get_items()) == ["m6", "m7"]
    assert await session.get_archived_items() == items


@pytest.mark.asyncio
async def test_cancelled_compaction_leaves_the_history_intact() -> None:
    gate = GatedSummarizer()
    session = new_session(summarizer=gate, background=True)
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    await session.run_compaction({"force": True})
    await asyncio.wait_for(gate.started.wait(), 5)
    await session.close(cancel_pending=True)
    reopened = CompactionSession(InMemorySession(session.session_id))  # the default store
    assert await reopened.get_items() == items


# -- concurrency -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_background_compaction_with_concurrent_writes_loses_nothing() -> None:
    gate = GatedSummarizer()
    session = new_session(summarizer=gate, background=True)
    first = [msg(f"m{i}") for i in range(10)]
    await session.add_items(first)
    await session.run_compaction({"force": True})
    await asyncio.wait_for(gate.started.wait(), 5)

    async def writer(w: int) -> None:
        for k in range(5):
            await session.add_items([msg(f"w{w}-{k}"), msg(f"w{w}-{k}b", "assistant")])
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(w) for w in range(8)))
    for _ in range(3):  # coalesced into one more run
        await session.run_compaction({"response_id": "r"})
    assert await session.get_items() == (await session.inner.get_items())  # old view meanwhile
    gate.release.set()
    await session.wait_for_compaction()
    assert gate.max_running == 1
    assert len(gate.calls) == 2
    everything = await session.inner.get_items()
    assert len(everything) == 10 + 80
    view = await session.get_items()
    archived = await session.get_archived_items()
    assert is_summary(view[0]) and not any(is_summary(i) for i in view[1:])
    assert archived + view[1:] == everything
    assert len(view) == 3  # summary + keep_last


@pytest.mark.asyncio
async def test_pops_into_the_summarised_part_drop_the_compaction() -> None:
    gate = GatedSummarizer()
    session = new_session(summarizer=gate, keep_last=1)
    items = [msg(f"m{i}") for i in range(4)]
    await session.add_items(items)
    task = asyncio.ensure_future(session.compact())
    await asyncio.wait_for(gate.started.wait(), 5)
    assert await session.pop_item() == items[3]
    assert await session.pop_item() == items[2]  # m2 was being summarised
    await session.add_items([msg("new")])
    gate.release.set()
    assert await task is None
    assert await session.get_items() == [items[0], items[1], msg("new")]


@pytest.mark.asyncio
async def test_clear_during_compaction_drops_it() -> None:
    gate = GatedSummarizer()
    session = new_session(summarizer=gate)
    await session.add_items([msg(f"m{i}") for i in range(5)])
    task = asyncio.ensure_future(session.compact())
    await asyncio.wait_for(gate.started.wait(), 5)
    await session.clear_session()
    await session.add_items([msg(f"n{i}") for i in range(5)])
    gate.release.set()
    assert await task is None
    assert originals(await session.get_items()) == [f"n{i}" for i in range(5)]


# -- view semantics, archive and search -------------------------------------------------------


@pytest.mark.asyncio
async def test_archive_retrieval_and_search() -> None:
    session = new_session(keep_last=2)
    history = [
        msg("I live in Lyon"),
        msg("Noted.", "assistant"),
        {"type": "function_call", "call_id": "c", "name": "lookup", "arguments": '{"q":"LYON"}'},
        {"type": "function_call_output", "call_id": "c", "output": "Lyon: 500k people"},
        msg("Anything else?", "assistant"),
        msg("no"),
        msg("ok", "assistant"),
    ]
    await session.add_items(history)
    result = await session.compact()
    assert result is not None and result.compacted_items == 5 and result.kept_items == 2
    assert await session.get_archived_items() == history[:5]
    assert await session.get_archived_items(limit=2) == history[3:5]
    assert await session.search_archive("lyon") == [history[0], history[2], history[3]]
    assert await session.search_archive("LYON", limit=1) == [history[3]]
    assert await session.search_archive("nowhere") == []
    with pytest.raises(ValueError):
        await session.search_archive("")


@pytest.mark.asyncio
async def test_search_pages_through_a_large_archive() -> None:
    session = new_session(keep_last=1)
    await session.add_items(
        [msg(f"item {i}" + (" needle" if i % 300 == 0 else "")) for i in range(1300)]
    )
    await session.compact()
    found = await session.search_archive("NEEDLE")
    assert [item_text(f) for f in found] == [f"item {i} needle" for i in range(0, 1300, 300)]


@pytest.mark.asyncio
async def test_search_pages_past_a_page_shortened_by_a_skipped_item() -> None:
    # A non-strict inner leaves an undecodable item out of a read: the page comes back
    # shorter than asked, but older archived items are still there to search.
    store = InMemoryStore()
    inner = InMemorySession(sid(), store=store)
    session = CompactionSession(inner, keep_last=1)
    await session.add_items([msg(f"item {i}" + (" needle" if i < 3 else "")) for i in range(700)])
    await session.compact()
    store._sessions[inner.session_id].payloads[-10] = "{damaged"  # in the newest page
    found = await session.search_archive("needle")
    assert [item_text(f) for f in found] == [f"item {i} needle" for i in range(3)]


@pytest.mark.asyncio
async def test_limits_pop_and_repeated_compaction_over_the_view() -> None:
    session = new_session(keep_last=2)
    await session.add_items([msg(f"m{i}") for i in range(6)])
    await session.compact()
    assert originals(await session.get_items(limit=2)) == ["m4", "m5"]
    assert len(await session.get_items(limit=2)) == 2
    assert is_summary((await session.get_items(limit=3))[0])
    await session.add_items([msg(f"m{i}") for i in range(6, 10)])
    second = await session.compact()
    assert second is not None
    view = await session.get_items()
    assert "m0" in item_text(view[0]) and "m7" in item_text(view[0])  # extends the summary
    assert originals(view) == ["m8", "m9"]
    assert len(await session.get_archived_items()) == 8
    # pop the two originals, then the summary itself; archived originals are never popped
    assert item_text(await session.pop_item()) == "m9"
    assert item_text(await session.pop_item()) == "m8"
    assert is_summary(await session.pop_item())
    assert await session.pop_item() is None
    assert await session.get_items() == []
    assert len(await session.get_archived_items()) == 8
    await session.add_items([msg("after")])
    assert await session.get_items() == [msg("after")]
    reasons = [r.reason for r in await session.get_compaction_records()]
    assert reasons == ["compaction", "compaction", "pop"]
    await session.clear_session()
    assert await session.get_items() == [] and await session.get_archived_items() == []
    assert await session.get_compaction_records() == []


@pytest.mark.asyncio
async def test_view_survives_reopening_on_sqlite(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    session_id = sid()
    first = CompactionSession(SQLiteSession(session_id, path), keep_last=2)
    await first.add_items([msg(f"m{i}") for i in range(6)])
    await first.compact()
    expected = await first.get_items()
    await first.close()
    second = CompactionSession(SQLiteSession(session_id, path), keep_last=2)
    assert await second.get_items() == expected
    assert len(await second.get_archived_items()) == 4
    await second.close()
    with pytest.raises(SessionClosedError):
        await second.get_items()


@pytest.mark.asyncio
async def test_foreign_sdk_session_is_numbered_by_foreign_session(tmp_path: Path) -> None:
    path = str(tmp_path / "sdk.db")
    inner = SDKSQLiteSession("user-1", path)
    with pytest.raises(TypeError, match="sibling_factory"):
        CompactionSession(inner)
    session = CompactionSession(
        inner, keep_last=2, sibling_factory=lambda record_id: SDKSQLiteSession(record_id, path)
    )
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    assert (await session.compact()) is not None
    assert originals(await session.get_items()) == ["m4", "m5"]
    assert await session.get_archived_items() == items[:4]
    assert await session.search_archive("m1") == [items[1]]
    await session.add_items([msg("m6")])
    assert originals(await session.get_items(limit=2)) == ["m5", "m6"]
    assert item_text(await session.pop_item()) == "m6"
    assert await inner.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []


@pytest.mark.asyncio
async def test_records_of_another_kind_or_foreign_data_are_refused() -> None:
    store = InMemoryStore()
    inner = InMemorySession(sid(), store=store)
    session = CompactionSession(inner)
    await session._sibling.add_items([msg("not a record")])
    with pytest.raises(BackendDataError, match="not a compaction record"):
        await session.get_items()


# -- triggers and token estimate --------------------------------------------------------------


@pytest.mark.asyncio
async def test_trigger_context_and_sdk_style_callbacks() -> None:
    seen: list[CompactionTriggerContext] = []

    async def trigger(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return default_should_trigger_compaction(dict(context))  # the SDK's own default works

    session = new_session(should_trigger_compaction=trigger, keep_last=2)
    await session.add_items([msg(f"q{i}") for i in range(5)])
    await session.run_compaction({"response_id": "resp-1"})
    assert await session.get_compaction_records() == []  # only user messages: 0 candidates
    await session.add_items([msg(f"a{i}", "assistant") for i in range(10)])
    await session.run_compaction({"response_id": "resp-2"})
    assert len(await session.get_compaction_records()) == 1
    first, second = seen
    assert first["response_id"] == "resp-1" and first["item_count"] == 5
    assert first["items_since_last_compaction"] == 5 and first["archived_item_count"] == 0
    assert (first["estimated_tokens"] > 0 and first["token_estimate_method"] == "chars/4") or (
        first["token_estimate_method"].startswith("tiktoken:")
    )
    assert len(second["compaction_candidate_items"]) == 10


class _CountingReads(InMemorySession):
    """Records how many items each sequenced read returned."""

    read_sizes: list[int]

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        pairs = await super().get_sequenced_items(limit, after=after, before=before)
        self.read_sizes.append(len(pairs))
        return pairs


@pytest.mark.asyncio
async def test_an_idle_trigger_check_reads_only_the_items_written_since_the_last() -> None:
    inner = _CountingReads(sid())
    inner.read_sizes = []
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    session = CompactionSession(
        inner, should_trigger_compaction=never, token_estimator=TokenEstimator(encoding=None)
    )
    await session.add_items([msg(f"q{i}") for i in range(300)])
    await session.run_compaction()
    # Written past the wrapper (as another object would): the check must read them.
    await inner.add_items([msg("new question"), msg("new answer", "assistant")])
    inner.read_sizes.clear()
    await session.run_compaction()
    assert inner.read_sizes == [3]  # the newest known item and the two new ones
    assert seen[-1]["session_items"] == await inner.get_items()
    assert seen[-1]["estimated_tokens"] == sum(
        await TokenEstimator(encoding=None).count_items(await inner.get_items())
    )
    assert seen[-1]["compaction_candidate_items"] == [msg("new answer", "assistant")]


@pytest.mark.asyncio
async def test_the_trigger_sees_pops_clears_and_writes_made_by_another_object() -> None:
    store = InMemoryStore()
    session_id = sid()
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    estimator = TokenEstimator(encoding=None)
    watcher = CompactionSession(
        InMemorySession(session_id, store=store),
        should_trigger_compaction=never,
        token_estimator=estimator,
    )
    other = CompactionSession(
        InMemorySession(session_id, store=store), should_trigger_compaction=never, keep_last=1
    )
    steps: list[tuple[str, int]] = [
        ("add", 5), ("pop", 1), ("add", 2), ("pop", 3), ("add", 1), ("clear", 0), ("add", 4),
        ("pop", 4), ("add", 3), ("compact", 0), ("add", 2), ("pop", 1), ("add", 1),
    ]  # fmt: skip
    counter = 0
    for op, n in steps:
        if op == "add":
            await other.add_items([msg(f"m{counter + k}", "assistant") for k in range(n)])
            counter += n
        elif op == "pop":
            for _ in range(n):
                await other.pop_item()
        elif op == "clear":
            await other.clear_session()
        else:
            assert await other.compact() is not None
        await watcher.run_compaction()
        expected = await other.get_items()
        assert seen[-1]["session_items"] == expected, (op, n)
        assert seen[-1]["item_count"] == len(expected)
        assert seen[-1]["estimated_tokens"] == sum(await estimator.count_items(expected))


async def _runner_turn(session: CompactionSession, n: int, between: Any = None) -> None:
    """What the Runner does in a turn: read the view, write input and output, call the hook;
    ``between(step)`` runs at each point where another writer could come in."""

    async def at(step: str) -> None:
        if between is not None:
            await between(step)

    await session.get_items(limit=20)
    await at("after read")
    await session.add_items([msg(f"q{n}")])
    await at("between writes")
    await session.add_items([msg(f"a{n}", "assistant")])
    await session.run_compaction()
    await at("after hook")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.asyncio
async def test_a_turn_whose_writes_were_all_this_objects_checks_without_reading(
    kind: str, tmp_path: Path
) -> None:
    inner: Any = (
        _CountingReads(sid()) if kind == "memory" else SQLiteSession(sid(), tmp_path / "c.db")
    )
    reads: list[Any] = []
    real = inner.get_sequenced_items

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append((args, kwargs))
        return await real(*args, **kwargs)

    inner.get_sequenced_items = counted
    inner.read_sizes = []
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    estimator = TokenEstimator(encoding=None)
    session = CompactionSession(inner, should_trigger_compaction=never, token_estimator=estimator)
    await session.add_items([msg(f"m{i}") for i in range(50)])
    await _runner_turn(session, 0)  # the first check reads the view
    for n in range(1, 4):
        reads.clear()
        await _runner_turn(session, n)
        assert reads == []  # the view read is one family read; the check reads nothing
        expected = await inner.get_items()
        assert seen[-1]["session_items"] == expected
        assert seen[-1]["estimated_tokens"] == sum(await estimator.count_items(expected))
        assert seen[-1]["compaction_candidate_items"][-1] == msg(f"a{n}", "assistant")
    reads.clear()
    await session.add_items([msg("solo", "assistant")])
    await session.run_compaction()  # without the turn's get_items: the record alone is read
    assert reads == []
    assert seen[-1]["session_items"] == await inner.get_items()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("step", ["after read", "between writes", "after hook"])
@pytest.mark.parametrize("change", ["add", "pop"])
@pytest.mark.asyncio
async def test_another_writer_during_a_turn_is_seen_and_compaction_still_comes_when_due(
    kind: str, step: str, change: str, tmp_path: Path
) -> None:
    session_id, path, store = sid(), tmp_path / "c.db", InMemoryStore()

    def open_inner() -> Any:
        if kind == "memory":
            return InMemorySession(session_id, store=store)
        return SQLiteSession(session_id, path)

    seen: list[CompactionTriggerContext] = []

    def watching(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return context["items_since_last_compaction"] >= 30

    estimator = TokenEstimator(encoding=None)
    watcher = CompactionSession(
        open_inner(), should_trigger_compaction=watching, token_estimator=estimator, keep_last=2
    )
    other = open_inner()
    await watcher.add_items([msg(f"m{i}") for i in range(10)])
    await _runner_turn(watcher, 0)
    counter = 0

    async def interfere(at: str) -> None:
        nonlocal counter
        if at != step:
            return
        if change == "add":
            await other.add_items([msg(f"other{counter + k}", "assistant") for k in range(3)])
            counter += 3
        else:
            await other.pop_item()

    for n in range(1, 6):
        await _runner_turn(watcher, n, interfere)
        await _runner_turn(watcher, 100 + n)  # the next check sees a change made after a hook
        if not watcher.compactions:
            expected = await watcher.get_items()
            assert seen[-1]["session_items"] == expected, (n, step, change)
            assert seen[-1]["estimated_tokens"] == sum(await estimator.count_items(expected))
        else:
            break
    if change == "add":
        # 10 + 4 per turn pair + 3 per interference crosses 30 in the 3rd pair.
        assert watcher.compactions == 1
        record = (await watcher.get_compaction_records())[-1]
        assert record.archived > 0
    await watcher.close()
    await other.close()


@pytest.mark.asyncio
async def test_a_trigger_that_modifies_its_lists_does_not_corrupt_later_checks() -> None:
    seen: list[list[Any]] = []

    def meddling(context: CompactionTriggerContext) -> bool:
        seen.append(list(context["session_items"]))
        context["session_items"].append(msg("injected"))
        context["compaction_candidate_items"].clear()
        return False

    session = CompactionSession(InMemorySession(sid()), should_trigger_compaction=meddling)
    await session.add_items([msg("a"), msg("b", "assistant")])
    await session.run_compaction()
    await session.add_items([msg("c")])
    await session.run_compaction()
    assert seen[-1] == [msg("a"), msg("b", "assistant"), msg("c")]


@pytest.mark.asyncio
async def test_default_trigger_uses_the_token_estimate() -> None:
    estimator = TokenEstimator(encoding=None)
    session = CompactionSession(
        InMemorySession(sid()),
        should_trigger_compaction=token_threshold_trigger(1000),
        keep_last=1,
        token_estimator=estimator,
    )
    await session.add_items([msg("x" * 400) for _ in range(5)])  # 5 * (100 + 4) = 520 tokens
    await session.run_compaction({"response_id": "r"})
    assert await session.get_compaction_records() == []
    await session.add_items([msg("x" * 400) for _ in range(5)])  # 1040 tokens
    await session.run_compaction({"response_id": "r"})
    assert len(await session.get_compaction_records()) == 1


@pytest.mark.asyncio
async def test_token_estimator_methods() -> None:
    plain = TokenEstimator(encoding=None)
    assert await plain.count_items([msg("abcdefgh"), msg("")]) == [2 + 4, 0 + 4]
    assert plain.method == "chars/4"
    unknown = TokenEstimator(encoding="no-such-encoding", load_timeout=5)
    assert await unknown.count_items([msg("abcd")]) == [5]  # falls back, never raises
    assert unknown.method == "chars/4"

    class FakeEncoding:
        def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
            return [0] * len(text.split())

    fake = TokenEstimator()
    fake._encoding = FakeEncoding()
    assert await fake.count_items([msg("one two three")]) == [3 + 4]
    assert fake.method == "tiktoken:o200k_base"
    big = [msg("word " * 50_000)]
    assert await fake.count_items(big) == [50_000 + 4]  # tokenized in a worker thread


# -- summarizers -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_agent_summarizer_with_a_scripted_model() -> None:
    summary_model = ScriptedModel(
        [[assistant_message("- user lives in Lyon")], [assistant_message("- Lyon; likes tea")]]
    )
    summarizer = AgentSummarizer(model=summary_model, instructions="Summarise tersely.")
    session = new_session(summarizer=summarizer, keep_last=1)
    await session.add_items([msg("I live in Lyon"), msg("Noted.", "assistant"), msg("ok")])
    await session.compact()
    view = await session.get_items()
    assert view[0] == {"role": "developer", "content": f"{SUMMARY_HEADER}\n- user lives in Lyon"}
    call = summary_model.calls[0]
    assert call.system_instructions == "Summarise tersely."
    assert "user: I live in Lyon" in str(call.input) and "assistant: Noted." in str(call.input)
    await session.add_items([msg("I like tea"), msg("sure", "assistant")])
    await session.compact()
    second_input = str(summary_model.calls[1].input)
    assert "Summary so far" in second_input and "user lives in Lyon" in second_input
    assert item_text((await session.get_items())[0]).endswith("- Lyon; likes tea")


@pytest.mark.asyncio
async def test_agent_summarizer_drives_runner_compaction_end_to_end() -> None:
    summary_model = ScriptedModel(
        [[assistant_message("They talked about Paris.")], [assistant_message("Paris, 2.1M.")]]
    )
    agent, model = scripted_agent("Paris.", "2.1M.", "Yes.")
    session = new_session(summarizer=AgentSummarizer(model=summary_model, role="user"))
    for q in ("Capital?", "Population?", "Big?"):
        await Runner.run(agent, q, session=session)
    assert model.calls[-1].input[0] == {
        "role": "user",
        "content": f"{SUMMARY_HEADER}\nThey talked about Paris.",
    }


@pytest.mark.asyncio
async def test_agent_summarizer_empty_output_aborts() -> None:
    empty = ScriptedModel([[assistant_message("")]])
    session = new_session(summarizer=AgentSummarizer(model=empty))
    items = [msg(f"m{i}") for i in range(4)]
    await session.add_items(items)
    with pytest.raises(ValueError, match="empty summary"):
        await session.compact()
    assert await session.get_items() == items


class FakeResponses:
    def __init__(self, output: list[Any]) -> None:
        self.output = output
        self.requests: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        return type("Compacted", (), {"output": self.output, "usage": None})()


class FakeClient:
    def __init__(self, output: list[Any]) -> None:
        self.responses = FakeResponses(output)


@pytest.mark.asyncio
async def test_responses_compaction_summarizer_with_a_fake_client() -> None:
    output = [
        ResponseOutputMessage.model_construct(
            id="msg_1",
            type="message",
            role="user",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="q0", annotations=[])],
        ),
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "id": "msg_2", "content": "kept"},
    ]
    client = FakeClient(output)
    fake: Any = client
    summarizer = ResponsesCompactionSummarizer(fake, model="gpt-4.1", instructions="be short")
    session = new_session(summarizer=summarizer, keep_last=2)
    items = [msg("q0"), msg("a0", "assistant"), msg("q1"), msg("a1", "assistant")]
    await session.add_items(items)
    await session.compact()
    request = client.responses.requests[0]
    assert request == {"model": "gpt-4.1", "input": items[:2], "instructions": "be short"}
    view: list[Any] = await session.get_items()
    assert view[1] == {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"}
    assert view[0]["role"] == "user" and item_text(view[0]) == "q0"
    assert "id" not in view[2]  # orphaned assistant id dropped
    assert view[3:] == items[2:]
    await session.add_items([msg("q2"), msg("a2", "assistant")])
    await session.compact()
    second = client.responses.requests[1]["input"]
    assert second[: len(view) - 2] == view[:-2]  # the previous compacted output is sent back


@pytest.mark.asyncio
async def test_bad_summaries_are_refused_and_the_view_is_kept() -> None:
    class Bad:
        def __init__(self, result: Any) -> None:
            self.result = result

        async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> Any:
            return self.result

    items = [msg(f"m{i}") for i in range(4)]
    for result in ([], "text", [{"no": "role"}], [{"role": "user", "content": {1, 2}}]):
        session = new_session(summarizer=Bad(result))
        await session.add_items(items)
        with pytest.raises((TypeError, ValueError)):
            await session.compact()
        assert await session.get_items() == items


def test_extractive_summary_is_bounded_and_deterministic() -> None:
    summarizer = ExtractiveSummarizer(max_chars=300, max_chars_per_item=30)
    items = [msg(f"message number {i} " + "y" * 100) for i in range(50)]
    first = asyncio.run(summarizer.summarize(items, previous_summary=[]))
    again = asyncio.run(summarizer.summarize(items, previous_summary=[]))
    assert first == again
    text = item_text(first[0])
    assert len(text) <= 300 + len(SUMMARY_HEADER) + 1
    assert "older lines omitted" in text and "message number 49" in text
    assert json.dumps(first)  # a plain JSON input item


def test_constructor_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="keep_last"):
        CompactionSession(InMemorySession(sid()), keep_last=-1)
    with pytest.raises(TypeError, match="summarize"):
        CompactionSession(InMemorySession(sid()), summarizer=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        item_count_trigger(0)
    with pytest.raises(ValueError):
        token_threshold_trigger(0)


@pytest.mark.asyncio
async def test_close_waits_for_a_pending_compaction() -> None:
    gate = GatedSummarizer()
    session = new_session(summarizer=gate, background=True)
    await session.add_items([msg(f"m{i}") for i in range(5)])
    await session.run_compaction({"force": True})
    await asyncio.wait_for(gate.started.wait(), 5)
    closing = asyncio.ensure_future(session.close())
    await asyncio.sleep(0.01)
    assert not closing.done()
    gate.release.set()
    await closing
    reopened = CompactionSession(InMemorySession(session.session_id))
    assert originals(await reopened.get_items()) == ["m3", "m4"]


# -- pruning the archive ----------------------------------------------------------------------

KEY = "a long random passphrase for the compaction tests"


class SequencedOnly:
    """A sequenced store without range deletion (as the Redis and SQL backends are today)."""

    def __init__(self, real: InMemorySession) -> None:
        self.real = real
        self.session_id = real.session_id
        self.session_settings = real.session_settings

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.real.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        await self.real.add_items(items)

    async def pop_item(self) -> Any:
        return await self.real.pop_item()

    async def clear_session(self) -> None:
        await self.real.clear_session()

    async def add_sequenced_items(self, items: list[Any]) -> list[int]:
        return await self.real.add_sequenced_items(items)

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, Any]]:
        return await self.real.get_sequenced_items(limit, after=after, before=before)

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        return await self.real.count_items(after=after, before=before)

    capabilities = frozenset({Capability.SEQUENCED, Capability.FAMILY})

    def side_store(self, purpose: str) -> SequencedOnly:
        return SequencedOnly(self.real.side_store(purpose))


def pruning_inner(kind: str, tmp_path: Path) -> Session:
    if kind == "memory":
        return InMemorySession(sid(), store=InMemoryStore())
    if kind == "yielding-memory":
        return YieldingSession(sid(), store=InMemoryStore())
    if kind == "sqlite":
        return SQLiteSession(sid(), str(tmp_path / "prune.db"))
    assert kind == "encrypted-sqlite"
    return EncryptedSession(SQLiteSession(sid(), str(tmp_path / "prune.db")), encryption_key=KEY)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["memory", "sqlite", "encrypted-sqlite"])
async def test_prune_archive_deletes_only_archived_originals(kind: str, tmp_path: Path) -> None:
    session = CompactionSession(pruning_inner(kind, tmp_path), keep_last=2)
    items = [msg(f"m{i}") for i in range(14)]
    await session.add_items(items[:6])
    assert (await session.compact()) is not None  # archives m0-m3
    await session.add_items(items[6:10])
    assert (await session.compact()) is not None  # archives m4-m7
    view = await session.get_items()
    assert originals(view) == ["m8", "m9"]
    records = await session.get_compaction_records()
    assert [r.archived for r in records] == [4, 8]

    assert await session.prune_archive(keep_compactions=2) == 0
    assert await session.get_archived_items() == items[:8]
    assert await session.prune_archive(keep_compactions=1) == 4  # what the first one archived
    assert await session.get_items() == view
    assert await session.get_archived_items() == items[4:8]
    assert await session.search_archive("m1") == []
    assert await session.search_archive("m5") == [items[5]]
    assert await session.get_compaction_records() == records
    assert await session.inner.get_items() == items[4:10]

    assert await session.prune_archive() == 4
    assert await session.get_items() == view
    assert await session.get_archived_items() == []
    assert await session.inner.get_items() == items[8:10]
    assert await session.prune_archive() == 0
    assert await session.get_compaction_records() == records

    # a later compaction extends the kept summary and archives only what it covers
    await session.add_items(items[10:14])
    result = await session.compact()
    assert result is not None and result.compacted_items == 4
    view = await session.get_items()
    assert originals(view) == ["m12", "m13"]
    assert "m0" in item_text(view[0]) and "m11" in item_text(view[0])
    assert await session.get_archived_items() == items[8:12]
    assert [r.archived for r in await session.get_compaction_records()] == [4, 8, 12]
    assert await session.prune_archive() == 4
    assert await session.get_items() == view
    assert await session.inner.get_items() == items[12:14]
    await session.close()


@pytest.mark.asyncio
async def test_prune_counts_compactions_not_pop_records() -> None:
    session = new_session(keep_last=2)
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    await session.compact()
    assert [item_text(await session.pop_item()) for _ in range(2)] == ["m5", "m4"]
    assert is_summary(await session.pop_item())  # commits a "pop" record, same boundary
    assert [r.reason for r in await session.get_compaction_records()] == ["compaction", "pop"]
    assert await session.prune_archive(keep_compactions=1) == 0
    assert await session.get_archived_items() == items[:4]
    assert await session.prune_archive() == 4
    assert await session.get_items() == []
    assert await session.inner.get_items() == []
    await session.add_items([msg("after")])
    assert await session.get_items() == [msg("after")]


@pytest.mark.asyncio
async def test_prune_without_compaction_is_a_noop() -> None:
    session = new_session()
    items = [msg(f"m{i}") for i in range(3)]
    await session.add_items(items)
    assert await session.prune_archive() == 0
    assert await session.prune_archive(keep_compactions=3) == 0
    assert await session.get_items() == items
    assert await session.inner.get_items() == items
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError, match="keep_compactions"):
            await session.prune_archive(keep_compactions=bad)  # type: ignore[arg-type]


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", ["sequenced-only"])
async def test_prune_over_a_stack_without_range_delete_refuses_and_keeps_all(stack: str) -> None:
    inner: Session = SequencedOnly(InMemorySession(sid(), store=InMemoryStore()))
    session = CompactionSession(inner, keep_last=2)
    items = [msg(f"m{i}") for i in range(6)]
    with pytest.raises(NotImplementedError, match="range deletion"):
        await session.prune_archive()
    await session.add_items(items)
    assert (await session.compact()) is not None
    view = await session.get_items()
    with pytest.raises(NotImplementedError, match="clear_session"):
        await session.prune_archive()
    assert await session.get_items() == view
    assert originals(view) == ["m4", "m5"]
    assert await session.get_archived_items() == items[:4]
    assert await session.inner.get_items() == items


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["yielding-memory", "sqlite"])
async def test_concurrent_writes_during_prune_lose_nothing(kind: str, tmp_path: Path) -> None:
    session = CompactionSession(pruning_inner(kind, tmp_path), keep_last=2)
    items = [msg(f"m{i}") for i in range(20)]
    await session.add_items(items)
    await session.compact()
    summary = (await session.get_items())[0]
    assert is_summary(summary)

    async def writer(w: int) -> None:
        for k in range(5):
            await session.add_items([msg(f"w{w}-{k}"), msg(f"w{w}-{k}b", "assistant")])
            await asyncio.sleep(0)

    pruned, *_ = await asyncio.gather(session.prune_archive(), *(writer(w) for w in range(8)))
    assert pruned == 18
    stored = await session.inner.get_items()
    assert stored[:2] == items[18:]
    written = [item_text(i) for i in stored[2:]]
    assert sorted(written) == sorted(
        f"w{w}-{k}{b}" for w in range(8) for k in range(5) for b in ("", "b")
    )
    for w in range(8):  # each writer's items in its order
        mine = [t for t in written if t.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{k}{b}" for k in range(5) for b in ("", "b")]
    assert await session.get_items() == [summary, *stored]
    assert await session.get_archived_items() == []
    await session.close()


@pytest.mark.asyncio
async def test_prune_during_a_compaction_keeps_its_commit() -> None:
    session = new_session(keep_last=2)
    items = [msg(f"m{i}") for i in range(10)]
    await session.add_items(items[:6])
    await session.compact()  # archives m0-m3
    await session.add_items(items[6:])
    gate = GatedSummarizer()
    session.summarizer = gate
    task = asyncio.ensure_future(session.compact())
    await asyncio.wait_for(gate.started.wait(), 5)
    assert await session.prune_archive() == 4  # while m4-m7 are being summarised
    gate.release.set()
    result = await task
    assert result is not None and result.compacted_items == 4
    assert originals(await session.get_items()) == ["m8", "m9"]
    assert await session.get_archived_items() == items[4:8]
    assert await session.inner.get_items() == items[4:]


@pytest.mark.asyncio
async def test_expiry_below_a_boundary_keeps_the_unsummarised_items() -> None:
    from agent_sessions.wrappers.ttl import TTLSession
    from tests.wrapper_stacks import FakeClock

    clock = FakeClock()
    inner = EncryptedSession(
        TTLSession(InMemorySession(sid()), item_ttl=100, clock=clock), encryption_key=KEY
    )
    session = CompactionSession(inner, keep_last=2)
    for i in range(6):
        await session.add_items([msg(f"m{i}", "user" if i % 2 == 0 else "assistant")])
        clock.advance(10)
    assert (await session.compact()) is not None
    assert originals(await session.get_items()) == ["m4", "m5"]
    clock.advance(55)  # m0 and m1 expire; m4 and m5 are alive for another 50 s
    assert originals(await session.get_items()) == ["m4", "m5"]
