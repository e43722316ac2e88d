"""The conformance kit over the two core backends."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents.memory import Session

from agent_sessions import InMemorySession, SQLiteSession
from agent_sessions.testing import SessionConformanceSuite


class TestInMemoryConformance(SessionConformanceSuite):
    async def create_session(self, session_id: str) -> Session:
        return InMemorySession(session_id)


class TestSQLiteFileConformance(SessionConformanceSuite):
    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sessions.db")

    async def create_session(self, session_id: str) -> Session:
        return SQLiteSession(session_id, self.path)


class TestSQLiteMemoryConformance(SessionConformanceSuite):
    """``:memory:`` databases are private per session object, so share one via a sibling."""

    _root: SQLiteSession | None = None

    async def create_session(self, session_id: str) -> Session:
        if self._root is None or self._root.closed:
            self._root = SQLiteSession("root")
        return self._root.sibling(session_id)
