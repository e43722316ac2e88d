"""The base class of every conformance tier: session creation and disposal, and small helpers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from agents.memory import Session

from ..core.capabilities import Capability, supports
from ..core.family import close_quietly

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


def msg(text: str, role: str = "user") -> Any:
    """A message item with ``text`` as its content."""
    return {"role": role, "content": text}


class ConformanceBase:
    """Holds ``create_session`` (override it) and what every tier's tests share."""

    pytestmark = pytest.mark.asyncio

    async def create_session(self, session_id: str) -> Session:
        """Return a new session object for ``session_id``."""
        raise NotImplementedError("subclass a conformance tier and implement create_session")

    async def dispose_session(self, session: Session) -> None:
        """Remove what a test stored and release the session (default: clear, then close)."""
        try:
            await session.clear_session()
        finally:
            await close_quietly(session)

    async def new_session(self, *needs: Capability, suffix: str | None = None) -> Any:
        """A session with a fresh id (``suffix`` ends it), disposed of after the test; the test
        is skipped unless it declares every capability in ``needs``."""
        sid = f"conf-{self._token}-{suffix if suffix is not None else len(self._created)}"
        session = await self.create_session(sid)
        self._created.append(session)
        missing = [c.name for c in needs if not supports(session, c)]
        if missing:
            pytest.skip(f"the session does not declare {', '.join(missing)}")
        return session

    @pytest_asyncio.fixture(autouse=True)
    async def _dispose_created(self) -> AsyncIterator[None]:
        self._token = uuid.uuid4().hex[:12]
        self._created: list[Session] = []
        yield
        for session in self._created:
            await self.dispose_session(session)
