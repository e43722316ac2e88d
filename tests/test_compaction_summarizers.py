"""The three summarizers (agent, Responses endpoint, extractive), bad summaries, constructor
checks and closing with a compaction pending."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Runner
from agents.testing import ScriptedModel, assistant_message
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from agent_sessions import InMemorySession
from agent_sessions.testing import item_text, scripted_agent
from agent_sessions.wrappers.compaction import (
    AgentSummarizer,
    CompactionSession,
    ExtractiveSummarizer,
    ResponsesCompactionSummarizer,
    item_count_trigger,
    token_threshold_trigger,
)
from agent_sessions.wrappers.compaction.summarizers import SUMMARY_HEADER
from tests._compaction_fixtures import GatedSummarizer, msg, new_session, originals, sid


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
