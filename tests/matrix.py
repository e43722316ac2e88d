"""Every backend and every wrapper stack, for tests that must hold for all of them.

``BACKENDS`` maps a name to a factory of sessions of that store; ``STACKS`` maps a name to a
function that wraps an inner session. ``tests/test_matrix.py`` runs the conformance kit on each
pair.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agents.memory import Session

from agent_sessions import InMemorySession, SQLiteSession


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[str], Awaitable[Session]]  # session id -> session
    needs: Callable[[], None] | None = None  # skips / fails (CI) when its server is missing


_SQLITE_DIR = tempfile.mkdtemp(prefix="agent-sessions-matrix-")


async def _memory(session_id: str) -> Session:
    return InMemorySession(session_id)


async def _sqlite(session_id: str) -> Session:
    return SQLiteSession(session_id, os.path.join(_SQLITE_DIR, "matrix.db"))


BACKENDS: list[Backend] = [
    Backend("memory", _memory),
    Backend("sqlite", _sqlite),
]

Stack = Callable[[Session], Session]


def _bare(inner: Session) -> Session:
    return inner


STACKS: dict[str, Stack] = {"bare": _bare}
