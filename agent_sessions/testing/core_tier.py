"""Core tier: the Agents SDK's Session semantics. The SDK's own ``SQLiteSession`` passes it.

Reads (latest ``limit`` in chronological order, ``session_settings.limit`` as the default),
appends, newest-first pops, clear, two objects on one id, id isolation, content that must round
trip, and the Runner driving a session (``run``, ``run_sync``, ``run_streamed``, the correction
flow).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agents import RunConfig, Runner
from agents.memory import SessionSettings

from ..core.family import close_quietly
from .base import HOSTILE_ID_SUFFIXES, ConformanceBase, msg
from .helpers import item_text, model_input_texts, scripted_agent, texts


class CoreConformance(ConformanceBase):
    """The SDK's semantics. Override ``create_session``."""

    async def test_new_session_is_empty(self) -> None:
        s = await self.new_session()
        assert await s.get_items() == []
        assert await s.get_items(limit=3) == []
        assert await s.pop_item() is None

    async def test_items_round_trip_in_order(self) -> None:
        s = await self.new_session()
        batches = [[msg("one")], [msg("two", "assistant"), msg("three")], [msg("four")]]
        nested: Any = {
            "type": "function_call_output",
            "call_id": "c1",
            "output": {"list": [1, 2.5, True, None, "x"], "deep": {"k": [{"a": []}]}},
        }
        for batch in batches:
            await s.add_items(batch)
        await s.add_items([nested])
        expected = [item for batch in batches for item in batch] + [nested]
        assert await s.get_items() == expected

    async def test_limit_returns_latest_in_chronological_order(self) -> None:
        s = await self.new_session()
        await s.add_items([msg(str(i)) for i in range(10)])
        assert texts(await s.get_items(limit=3)) == ["7", "8", "9"]
        assert texts(await s.get_items(limit=1)) == ["9"]
        for limit in (10, 50, None):
            got = texts(await s.get_items(limit=limit))
            assert got == [str(i) for i in range(10)], f"limit={limit}"
        assert await s.get_items(limit=0) == []

    async def test_session_settings_limit_is_the_default(self) -> None:
        s = await self.new_session()
        await s.add_items([msg(str(i)) for i in range(5)])
        s.session_settings = SessionSettings(limit=2)
        assert texts(await s.get_items()) == ["3", "4"]
        assert texts(await s.get_items(limit=4)) == ["1", "2", "3", "4"]
        s.session_settings = SessionSettings()
        assert len(await s.get_items()) == 5

    async def test_add_empty_batch_is_a_no_op(self) -> None:
        s = await self.new_session()
        await s.add_items([])
        assert await s.get_items() == []
        await s.add_items([msg("x")])
        await s.add_items([])
        assert texts(await s.get_items()) == ["x"]

    async def test_pop_returns_newest_first_then_none(self) -> None:
        s = await self.new_session()
        await s.add_items([msg("a"), msg("b")])
        await s.add_items([msg("c")])
        assert item_text(await s.pop_item()) == "c"
        assert item_text(await s.pop_item()) == "b"
        assert texts(await s.get_items()) == ["a"]
        assert item_text(await s.pop_item()) == "a"
        assert await s.pop_item() is None
        assert await s.get_items() == []

    async def test_add_after_pop_keeps_order(self) -> None:
        s = await self.new_session()
        await s.add_items([msg("a"), msg("b"), msg("c")])
        await s.pop_item()
        await s.add_items([msg("d")])
        assert texts(await s.get_items()) == ["a", "b", "d"]
        assert texts(await s.get_items(limit=2)) == ["b", "d"]

    async def test_clear_removes_everything_and_session_stays_usable(self) -> None:
        s = await self.new_session()
        await s.add_items([msg("a"), msg("b")])
        await s.clear_session()
        assert await s.get_items() == []
        assert await s.pop_item() is None
        await s.clear_session()  # clearing an empty session is fine
        await s.add_items([msg("c")])
        assert texts(await s.get_items()) == ["c"]

    async def test_a_second_object_on_the_same_id_sees_the_same_items(self) -> None:
        first = await self.new_session(suffix="shared")
        await first.add_items([msg("from first")])
        second = await self.create_session(first.session_id)
        try:
            assert texts(await second.get_items()) == ["from first"]
            await second.add_items([msg("from second")])
            assert texts(await first.get_items()) == ["from first", "from second"]
        finally:
            await close_quietly(second)

    async def test_sessions_with_hostile_ids_are_isolated(self) -> None:
        sessions = [await self.new_session(suffix=suffix) for suffix in HOSTILE_ID_SUFFIXES]
        for i, s in enumerate(sessions):
            await s.add_items([msg(f"item of {i}")])
        for i, s in enumerate(sessions):
            assert texts(await s.get_items()) == [f"item of {i}"], s.session_id
        await sessions[0].clear_session()
        assert texts(await sessions[3].get_items()) == ["item of 3"]
        assert item_text(await sessions[1].pop_item()) == "item of 1"
        assert texts(await sessions[2].get_items()) == ["item of 2"]

    async def test_unicode_and_control_characters_round_trip(self) -> None:
        s = await self.new_session()
        text = "héllo 🙂👍🏽 日本語 עברית e\u0301 \u0000 \t\n\r \\ \" ' \u2028 \U0010fffd"
        items = [msg(text), {"role": "user", "content": [{"type": "input_text", "text": text}]}]
        await s.add_items(items)
        assert await s.get_items() == items
        assert await s.pop_item() == items[1]

    async def test_one_mebibyte_item_round_trips(self) -> None:
        s = await self.new_session()
        big = msg("x" * (1024 * 1024) + "🙂")
        await s.add_items([msg("before"), big])
        assert await s.get_items(limit=1) == [big]
        assert await s.pop_item() == big
        assert texts(await s.get_items()) == ["before"]

    async def test_runner_run_carries_history(self) -> None:
        s = await self.new_session()
        agent, model = scripted_agent("Paris.", "About 2.1 million.")
        first = await Runner.run(agent, "Capital of France?", session=s)
        assert first.final_output == "Paris."
        second = await Runner.run(agent, "Its population?", session=s)
        assert second.final_output == "About 2.1 million."
        assert model_input_texts(model) == ["Capital of France?", "Paris.", "Its population?"]
        assert texts(await s.get_items()) == [
            "Capital of France?",
            "Paris.",
            "Its population?",
            "About 2.1 million.",
        ]

    async def test_runner_streamed_carries_history(self) -> None:
        s = await self.new_session()
        agent, model = scripted_agent("Hello!", "You said hi before.")
        for question in ("Hi", "What did I say?"):
            result = Runner.run_streamed(agent, question, session=s)
            async for _ in result.stream_events():
                pass
        assert result.final_output == "You said hi before."
        assert model_input_texts(model) == ["Hi", "Hello!", "What did I say?"]
        assert texts(await s.get_items()) == [
            "Hi",
            "Hello!",
            "What did I say?",
            "You said hi before.",
        ]

    async def test_run_config_session_limit_bounds_model_input(self) -> None:
        s = await self.new_session()
        agent, model = scripted_agent("r1", "r2", "r3")
        await Runner.run(agent, "q1", session=s)
        await Runner.run(agent, "q2", session=s)
        config = RunConfig(session_settings=SessionSettings(limit=2))
        await Runner.run(agent, "q3", session=s, run_config=config)
        assert model_input_texts(model) == ["q2", "r2", "q3"]
        assert len(await s.get_items()) == 6

    async def test_correction_flow_pop_twice_and_ask_again(self) -> None:
        s = await self.new_session()
        agent, model = scripted_agent("Berlin.", "4.", "5.")
        await Runner.run(agent, "Capital of Germany?", session=s)
        await Runner.run(agent, "What is 2 + 2?", session=s)
        assert item_text(await s.pop_item()) == "4."
        assert item_text(await s.pop_item()) == "What is 2 + 2?"
        result = await Runner.run(agent, "What is 2 + 3?", session=s)
        assert result.final_output == "5."
        assert "What is 2 + 2?" not in model_input_texts(model)
        expected = ["Capital of Germany?", "Berlin.", "What is 2 + 3?", "5."]
        assert texts(await s.get_items()) == expected

    async def test_runner_run_sync_carries_history(self) -> None:
        await asyncio.to_thread(self._run_sync_in_a_fresh_loop)

    def _run_sync_in_a_fresh_loop(self) -> None:
        """``Runner.run_sync`` as its users call it: no running loop, the session made in a new
        one (a worker thread, so the test's own loop is untouched)."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        session = None
        try:
            sid = f"conf-sync-{uuid.uuid4().hex[:12]}"
            session = loop.run_until_complete(self.create_session(sid))
            agent, model = scripted_agent("One.", "Two.")
            assert Runner.run_sync(agent, "first", session=session).final_output == "One."
            assert Runner.run_sync(agent, "second", session=session).final_output == "Two."
            assert model_input_texts(model) == ["first", "One.", "second"]
            stored = loop.run_until_complete(session.get_items())
            assert texts(stored) == ["first", "One.", "second", "Two."]
        finally:
            if session is not None:
                loop.run_until_complete(self.dispose_session(session))
            loop.close()
            asyncio.set_event_loop(None)
