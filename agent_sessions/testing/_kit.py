"""What every tier of the conformance kit shares: the session factory fixture and small helpers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
from agents.memory import Session

from ..core.capabilities import Capability, supports
from ..core.family import close_quietly

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


def msg(text: str, role: str = "user") -> Any:
    """A message item with ``text`` as its content."""
    return {"role": role, "content": text}


def offers_sequencing(session: Session) -> bool:
    """Whether ``session`` declares sequence numbers."""
    return supports(session, Capability.SEQUENCED)


def offers_range_delete(session: Session) -> bool:
    """Whether ``session`` declares range deletion (with sequence numbers)."""
    return supports(session, Capability.RANGE_DELETE) and offers_sequencing(session)


class ConformanceBase:
    """Holds ``create_session`` (override it) and the ``new_session`` fixture of every tier."""

    async def create_session(self, session_id: str) -> Session:
        """Return a new session object for ``session_id``."""
        raise NotImplementedError("subclass a conformance tier and implement create_session")

    async def dispose_session(self, session: Session) -> None:
        """Remove what a test stored and release the session (default: clear, then close)."""
        try:
            await session.clear_session()
        finally:
            await close_quietly(session)

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
