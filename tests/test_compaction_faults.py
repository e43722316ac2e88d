"""CompactionSession under crashes (in the summarizer, while committing), cancellation, and
writes, pops and clears made while a compaction runs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from agents import Runner

from agent_sessions import InMemorySession, InMemoryStore
from agent_sessions.testing import scripted_agent
from agent_sessions.testing import texts as message_texts
from agent_sessions.wrappers.compaction import CompactionSession
from tests._compaction_fixtures import (
    FailingSummarizer,
    FailingWrites,
    GatedSummarizer,
    is_summary,
    msg,
    new_session,
    originals,
    sid,
)

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
