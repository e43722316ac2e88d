"""The behavioural contract every session of this package passes; third-party backends can too.

Subclass :class:`SessionConformanceSuite` in a test module and implement ``create_session``::

    from agent_sessions.testing import SessionConformanceSuite

    class TestMyBackend(SessionConformanceSuite):
        async def create_session(self, session_id):
            return MyBackendSession(session_id, url=...)

Needs pytest and pytest-asyncio (the ``[dev]`` extra). Each test gets fresh, random session ids
and clears and closes what it created.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from agents import RunConfig, Runner
from agents.memory import Session, SessionSettings

from ..core.capabilities import Capability, supports
from .helpers import item_text, model_input_texts, scripted_agent, texts

SessionFactory = Callable[..., Awaitable[Session]]

HOSTILE_ID_SUFFIXES = [
    "a",
    "a ",
    "A",
    "ab",
    "a:b",
    "a{b}",
    "{a}",
    "}{",
    "a%",
    "a_",
    "a'\"",
    "a\\b",
    "a.b",
    "$a",
    "a\nb",
    "a*",
    "[a]",
    "ünïcødé",
    "日本語",
    "🙂",
    "a/../b",
    "-- DROP TABLE x; --",
]


def _msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


class SessionConformanceSuite:
    """The conformance tests. Override ``create_session``; tune the class attributes."""

    max_item_bytes: int | None = 16 * 1024 * 1024
    """The cap the session under test enforces, or None to skip the oversize test."""

    concurrent_tasks: int = 200
    """How many tasks add at once in the concurrency test."""

    async def create_session(self, session_id: str) -> Session:
        """Return a new session object for ``session_id``."""
        raise NotImplementedError("subclass SessionConformanceSuite and implement create_session")

    async def dispose_session(self, session: Session) -> None:
        """Remove what a test stored and release the session (default: clear, then close)."""
        try:
            await session.clear_session()
        finally:
            close = getattr(session, "close", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result

    @pytest_asyncio.fixture
    async def new_session(self) -> AsyncIterator[SessionFactory]:
        """A factory of sessions: ``await new_session()`` or ``await new_session(suffix)``."""
        created: list[Session] = []
        token = uuid.uuid4().hex[:12]

        async def factory(suffix: str | None = None) -> Session:
            sid = f"conf-{token}-{suffix if suffix is not None else len(created)}"
            session = await self.create_session(sid)
            created.append(session)
            return session

        yield factory
        for session in created:
            await self.dispose_session(session)

    # -- basic semantics ---------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_new_session_is_empty(self, new_session: SessionFactory) -> None:
        s = await new_session()
        assert await s.get_items() == []
        assert await s.get_items(limit=3) == []
        assert await s.pop_item() is None

    @pytest.mark.asyncio
    async def test_items_round_trip_in_order(self, new_session: SessionFactory) -> None:
        s = await new_session()
        batches = [[_msg("one")], [_msg("two", "assistant"), _msg("three")], [_msg("four")]]
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

    @pytest.mark.asyncio
    async def test_limit_returns_latest_in_chronological_order(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        await s.add_items([_msg(str(i)) for i in range(10)])
        assert texts(await s.get_items(limit=3)) == ["7", "8", "9"]
        assert texts(await s.get_items(limit=1)) == ["9"]
        assert texts(await s.get_items(limit=10)) == [str(i) for i in range(10)]
        assert texts(await s.get_items(limit=50)) == [str(i) for i in range(10)]
        assert texts(await s.get_items(limit=None)) == [str(i) for i in range(10)]
        assert await s.get_items(limit=0) == []
        assert await s.get_items(limit=-1) == []

    @pytest.mark.asyncio
    async def test_session_settings_limit_is_the_default(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        await s.add_items([_msg(str(i)) for i in range(5)])
        s.session_settings = SessionSettings(limit=2)
        assert texts(await s.get_items()) == ["3", "4"]
        assert texts(await s.get_items(limit=4)) == ["1", "2", "3", "4"]
        s.session_settings = SessionSettings()
        assert len(await s.get_items()) == 5

    @pytest.mark.asyncio
    async def test_add_empty_batch_is_a_no_op(self, new_session: SessionFactory) -> None:
        s = await new_session()
        await s.add_items([])
        assert await s.get_items() == []
        await s.add_items([_msg("x")])
        await s.add_items([])
        assert texts(await s.get_items()) == ["x"]

    @pytest.mark.asyncio
    async def test_pop_returns_newest_first_then_none(self, new_session: SessionFactory) -> None:
        s = await new_session()
        await s.add_items([_msg("a"), _msg("b")])
        await s.add_items([_msg("c")])
        assert item_text(await s.pop_item()) == "c"
        assert item_text(await s.pop_item()) == "b"
        assert texts(await s.get_items()) == ["a"]
        assert item_text(await s.pop_item()) == "a"
        assert await s.pop_item() is None
        assert await s.get_items() == []

    @pytest.mark.asyncio
    async def test_add_after_pop_keeps_order(self, new_session: SessionFactory) -> None:
        s = await new_session()
        await s.add_items([_msg("a"), _msg("b"), _msg("c")])
        await s.pop_item()
        await s.add_items([_msg("d")])
        assert texts(await s.get_items()) == ["a", "b", "d"]
        assert texts(await s.get_items(limit=2)) == ["b", "d"]

    @pytest.mark.asyncio
    async def test_clear_removes_everything_and_session_stays_usable(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        await s.add_items([_msg("a"), _msg("b")])
        await s.clear_session()
        assert await s.get_items() == []
        assert await s.pop_item() is None
        await s.clear_session()  # clearing an empty session is fine
        await s.add_items([_msg("c")])
        assert texts(await s.get_items()) == ["c"]

    @pytest.mark.asyncio
    async def test_a_second_object_on_the_same_id_sees_the_same_items(
        self, new_session: SessionFactory
    ) -> None:
        first = await new_session("shared")
        await first.add_items([_msg("from first")])
        second = await self.create_session(first.session_id)
        try:
            assert texts(await second.get_items()) == ["from first"]
            await second.add_items([_msg("from second")])
            assert texts(await first.get_items()) == ["from first", "from second"]
        finally:
            close = getattr(second, "close", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result

    # -- isolation and content -----------------------------------------------------------

    @pytest.mark.asyncio
    async def test_sessions_with_hostile_ids_are_isolated(
        self, new_session: SessionFactory
    ) -> None:
        sessions = [await new_session(suffix) for suffix in HOSTILE_ID_SUFFIXES]
        for i, s in enumerate(sessions):
            await s.add_items([_msg(f"item of {i}")])
        for i, s in enumerate(sessions):
            assert texts(await s.get_items()) == [f"item of {i}"], s.session_id
        await sessions[0].clear_session()
        assert texts(await sessions[3].get_items()) == ["item of 3"]
        assert item_text(await sessions[1].pop_item()) == "item of 1"
        assert texts(await sessions[2].get_items()) == ["item of 2"]

    @pytest.mark.asyncio
    async def test_unicode_and_control_characters_round_trip(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        text = "héllo 🙂👍🏽 日本語 עברית e\u0301 \u0000 \t\n\r \\ \" ' \u2028 \U0010fffd"
        items = [_msg(text), {"role": "user", "content": [{"type": "input_text", "text": text}]}]
        await s.add_items(items)
        assert await s.get_items() == items
        assert await s.pop_item() == items[1]

    @pytest.mark.asyncio
    async def test_one_mebibyte_item_round_trips(self, new_session: SessionFactory) -> None:
        s = await new_session()
        big = _msg("x" * (1024 * 1024) + "🙂")
        await s.add_items([_msg("before"), big])
        assert await s.get_items(limit=1) == [big]
        assert await s.pop_item() == big
        assert texts(await s.get_items()) == ["before"]

    # -- bad input -------------------------------------------------------------------------------

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param({"role": "user", "content": {1, 2}}, id="set"),
            pytest.param({"role": "user", "content": b"bytes"}, id="bytes"),
            pytest.param({"role": "user", "content": math.nan}, id="nan"),
            pytest.param({"role": "user", "content": [math.inf]}, id="infinity"),
            pytest.param({"role": "user", 1: "non-string key"}, id="int-key"),
            pytest.param({"role": "user", "content": object()}, id="object"),
            pytest.param("just a string", id="not-a-mapping"),
            pytest.param({"role": "user", "content": "\ud800"}, id="lone-surrogate"),
        ],
    )
    async def test_bad_item_raises_and_writes_nothing(
        self, new_session: SessionFactory, bad: Any
    ) -> None:
        s = await new_session()
        await s.add_items([_msg("kept")])
        with pytest.raises((TypeError, ValueError)) as info:
            await s.add_items([_msg("good"), bad, _msg("also good")])
        assert "1" in str(info.value), f"the error should name the batch index: {info.value}"
        assert texts(await s.get_items()) == ["kept"]

    @pytest.mark.asyncio
    async def test_oversized_item_raises_and_writes_nothing(
        self, new_session: SessionFactory
    ) -> None:
        if self.max_item_bytes is None:
            pytest.skip("this session enforces no item size cap")
        s = await new_session()
        with pytest.raises(ValueError) as info:
            await s.add_items([_msg("small"), _msg("x" * (self.max_item_bytes + 1))])
        assert "1" in str(info.value)
        assert await s.get_items() == []

    # -- concurrency and cancellation --------------------------------------------------------

    @pytest.mark.asyncio
    async def test_concurrent_adds_lose_nothing_and_keep_batches_contiguous(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        n = self.concurrent_tasks

        async def writer(task: int) -> None:
            await s.add_items([_msg(f"{task}:{k}") for k in range(3)])

        await asyncio.gather(*(writer(t) for t in range(n)))
        got = texts(await s.get_items())
        assert len(got) == 3 * n
        assert len(set(got)) == 3 * n
        for start in range(0, len(got), 3):
            task = got[start].split(":")[0]
            assert got[start : start + 3] == [f"{task}:{k}" for k in range(3)]

    @pytest.mark.asyncio
    async def test_concurrent_pops_never_return_the_same_item(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        await s.add_items([_msg(str(i)) for i in range(100)])
        popped = await asyncio.gather(*(s.pop_item() for _ in range(130)))
        got = [item_text(p) for p in popped if p is not None]
        assert sorted(got, key=int) == [str(i) for i in range(100)]
        assert await s.get_items() == []

    @pytest.mark.asyncio
    async def test_cancelled_batches_are_all_or_nothing(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        size = 25
        for attempt in range(12):
            task = asyncio.ensure_future(
                s.add_items([_msg(f"{attempt}:{k}") for k in range(size)])
            )
            for _ in range(attempt):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        got = texts(await s.get_items())
        assert len(got) % size == 0
        for start in range(0, len(got), size):
            tag = got[start].split(":")[0]
            assert got[start : start + size] == [f"{tag}:{k}" for k in range(size)]

    # -- sequenced items capability --------------------------------------------------------

    @pytest.mark.asyncio
    async def test_sequence_numbers_when_offered(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not supports(s, Capability.SEQUENCED):
            pytest.skip("the session does not offer sequenced items")
        first = await s.add_sequenced_items([_msg("a"), _msg("b")])
        second = await s.add_sequenced_items([_msg("c")])
        assert len(first) == 2 and len(second) == 1
        assert first[0] < first[1] < second[0]
        popped = await s.pop_item()
        assert item_text(popped) == "c"
        third = await s.add_sequenced_items([_msg("d")])
        assert third[0] > second[0], "a popped sequence number must not be reused"
        pairs = await s.get_sequenced_items()
        assert [seq for seq, _ in pairs] == [first[0], first[1], third[0]]
        assert texts(i for _, i in await s.get_sequenced_items(after=first[0])) == ["b", "d"]
        assert texts(i for _, i in await s.get_sequenced_items(before=third[0])) == ["a", "b"]
        assert texts(i for _, i in await s.get_sequenced_items(1, before=third[0])) == ["b"]
        assert await s.count_items() == 3
        assert await s.count_items(after=first[0]) == 2
        assert await s.count_items(after=first[0], before=third[0]) == 1
        assert await s.add_sequenced_items([]) == []

    @pytest.mark.asyncio
    async def test_range_delete_when_offered(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not (supports(s, Capability.RANGE_DELETE) and supports(s, Capability.SEQUENCED)):
            pytest.skip("the session does not offer range deletion")
        seqs = await s.add_sequenced_items([_msg(str(i)) for i in range(6)])
        assert await s.delete_items(before=seqs[0]) == 0
        assert await s.delete_items(before=seqs[3]) == 3
        assert texts(await s.get_items()) == ["3", "4", "5"]
        assert await s.delete_items(before=seqs[3]) == 0
        other = await new_session()
        await other.add_items([_msg("untouched")])
        await s.clear_session()
        after_clear = await s.add_sequenced_items([_msg("new")])
        assert after_clear[0] > seqs[-1], "numbers must not restart after clear_session"
        assert await s.delete_items(before=seqs[-1] + 1) == 0  # a stale purge spares new items
        assert texts(await s.get_items()) == ["new"]
        assert texts(await other.get_items()) == ["untouched"]

    @pytest.mark.asyncio
    async def test_range_delete_rejects_a_bound_that_is_not_an_int(
        self, new_session: SessionFactory
    ) -> None:
        s: Any = await new_session()
        if not (supports(s, Capability.RANGE_DELETE) and supports(s, Capability.SEQUENCED)):
            pytest.skip("the session does not offer range deletion")
        seqs = await s.add_sequenced_items([_msg(str(i)) for i in range(3)])
        for bad in (None, "zzz", str(seqs[-1] + 1), float(seqs[1]) + 0.5, True):
            with pytest.raises(TypeError, match="before"):
                await s.delete_items(before=bad)
        assert texts(await s.get_items()) == ["0", "1", "2"], "a bad bound must delete nothing"

    # -- Runner integration ----------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_runner_run_carries_history(self, new_session: SessionFactory) -> None:
        s = await new_session()
        agent, model = scripted_agent("Paris.", "About 2.1 million.")
        first = await Runner.run(agent, "Capital of France?", session=s)
        assert first.final_output == "Paris."
        second = await Runner.run(agent, "Its population?", session=s)
        assert second.final_output == "About 2.1 million."
        assert model_input_texts(model) == [
            "Capital of France?",
            "Paris.",
            "Its population?",
        ]
        assert texts(await s.get_items()) == [
            "Capital of France?",
            "Paris.",
            "Its population?",
            "About 2.1 million.",
        ]

    @pytest.mark.asyncio
    async def test_runner_streamed_carries_history(self, new_session: SessionFactory) -> None:
        s = await new_session()
        agent, model = scripted_agent("Hello!", "You said hi before.")
        for question in ("Hi", "What did I say?"):
            result = Runner.run_streamed(agent, question, session=s)
            async for _ in result.stream_events():
                pass
        assert result.final_output == "You said hi before."
        assert model_input_texts(model) == ["Hi", "Hello!", "What did I say?"]
        assert texts(await s.get_items()) == ["Hi", "Hello!", "What did I say?",
                                              "You said hi before."]

    @pytest.mark.asyncio
    async def test_run_config_session_limit_bounds_model_input(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        agent, model = scripted_agent("r1", "r2", "r3")
        await Runner.run(agent, "q1", session=s)
        await Runner.run(agent, "q2", session=s)
        config = RunConfig(session_settings=SessionSettings(limit=2))
        await Runner.run(agent, "q3", session=s, run_config=config)
        assert model_input_texts(model) == ["q2", "r2", "q3"]
        assert len(await s.get_items()) == 6

    @pytest.mark.asyncio
    async def test_correction_flow_pop_twice_and_ask_again(
        self, new_session: SessionFactory
    ) -> None:
        s = await new_session()
        agent, model = scripted_agent("Berlin.", "4.", "5.")
        await Runner.run(agent, "Capital of Germany?", session=s)
        await Runner.run(agent, "What is 2 + 2?", session=s)
        assert item_text(await s.pop_item()) == "4."
        assert item_text(await s.pop_item()) == "What is 2 + 2?"
        result = await Runner.run(agent, "What is 2 + 3?", session=s)
        assert result.final_output == "5."
        assert "What is 2 + 2?" not in model_input_texts(model)
        assert texts(await s.get_items()) == [
            "Capital of Germany?",
            "Berlin.",
            "What is 2 + 3?",
            "5.",
        ]

    def test_runner_run_sync_carries_history(self) -> None:
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
