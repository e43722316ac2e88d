"""CompactionSession under the conformance kit, three ways over the in-memory and SQLite
backends (see docs/compaction.md, Tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import Runner
from agents.memory import Session

from agent_sessions import InMemorySession, SQLiteSession
from agent_sessions.testing import SessionConformanceSuite, scripted_agent
from agent_sessions.testing import texts as message_texts
from agent_sessions.wrappers.compaction import (
    CompactionSession,
    CompactionTriggerContext,
    ExtractiveSummarizer,
)
from tests._compaction_fixtures import every, msg, sid
from tests.wrapper_stacks import IdentitySummarizer

# The kit asserts exact histories, so its sessions compact only from the Runner hook, with a
# trigger firing every 4 items and keep_last=8: every Runner test of the kit runs the full
# compaction path (snapshot, trigger, boundary search) but its histories (at most 6 items) are
# too short to cut, so the kit's exact assertions still hold. Compaction that does cut is checked
# with exact views in the other tests/test_compaction_*.py files.


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
