"""Shared builders for the branching and usage tests."""

from __future__ import annotations

from typing import Any

from agents import Agent
from agents.memory import SQLiteSession as SDKSQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.usage import Usage


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    return {"role": "assistant", "content": text}


def turns(n: int, prefix: str = "q") -> list[Any]:
    """``n`` user/assistant pairs: q1, r1, q2, r2, ..."""
    out: list[Any] = []
    for i in range(1, n + 1):
        out += [user(f"{prefix}{i}"), assistant(f"r{i}")]
    return out


def sdk_factory(path: str) -> Any:
    """A sibling factory for the SDK's SQLiteSession on one file."""
    return lambda sid: SDKSQLiteSession(sid, path)


def usage_agent(*replies: tuple[str, Usage]) -> tuple[Agent[Any], ScriptedModel]:
    """An agent answering each call with the next reply and reporting its usage."""
    model = ScriptedModel(
        [
            ModelStep(output=[assistant_message(text, item_id=f"m{i}")], usage=usage)
            for i, (text, usage) in enumerate(replies)
        ]
    )
    return Agent(name="assistant", instructions="Be brief.", model=model), model
