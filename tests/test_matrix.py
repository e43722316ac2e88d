"""The conformance kit on every backend x wrapper stack (see tests/matrix.py)."""

from __future__ import annotations

from typing import Any

from agents.memory import Session

from agent_sessions.testing import SessionConformanceSuite
from tests.matrix import BACKENDS, STACKS, Backend, Stack


class _MatrixSuite(SessionConformanceSuite):
    backend: Backend
    stack: Stack

    async def create_session(self, session_id: str) -> Session:
        if self.backend.needs is not None:
            self.backend.needs()
        return self.stack(await self.backend.open(session_id))


def _suite_name(backend: str, stack: str) -> str:
    return "Test_" + "_".join(part.replace("-", "_") for part in (backend, stack))


for _backend in BACKENDS:
    for _stack_name, _stack in STACKS.items():
        _attrs: dict[str, Any] = {"backend": _backend, "stack": staticmethod(_stack)}
        _name = _suite_name(_backend.name, _stack_name)
        globals()[_name] = type(_name, (_MatrixSuite,), _attrs)
