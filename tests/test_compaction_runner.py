"""CompactionSession driven by the Runner (run, run_sync, run_streamed, background) and the
boundary, which never separates a tool call or a handoff from its output."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_sessions import SQLiteSession
from agent_sessions.testing import item_text, model_input_texts, scripted_agent
from agent_sessions.testing import texts as message_texts
from agent_sessions.wrappers.compaction import CompactionSession
from agent_sessions.wrappers.compaction.boundary import choose_cut, safe_cuts
from tests._compaction_fixtures import (
    GatedSummarizer,
    every,
    is_summary,
    msg,
    new_session,
    originals,
    sid,
)

# -- Runner-driven compaction ----------------------------------------------------------------


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
