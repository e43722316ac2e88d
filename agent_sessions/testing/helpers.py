"""Small helpers for tests that drive agents through ``agents.testing.ScriptedModel``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any

from agents import Agent
from agents.testing import ScriptedModel, assistant_message


def scripted_agent(*replies: str, name: str = "assistant") -> tuple[Agent[Any], ScriptedModel]:
    """Return an agent whose model answers each call with the next of ``replies``."""
    model = ScriptedModel(
        [[assistant_message(text, item_id=f"msg-{i}")] for i, text in enumerate(replies)]
    )
    return Agent(name=name, instructions="Be brief.", model=model), model


def item_text(item: Any) -> str:
    """Return the text of a user or assistant message item ('' for other items)."""
    if not isinstance(item, dict):
        return ""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def texts(items: Iterable[Any]) -> list[str]:
    """Return ``item_text`` of each message item, skipping non-message items."""
    return [item_text(i) for i in items if isinstance(i, dict) and "role" in i]


def model_input_texts(model: ScriptedModel, call: int = -1) -> list[str]:
    """Return the message texts the model saw on call number ``call``."""
    seen = model.calls[call].input
    return [seen] if isinstance(seen, str) else texts(seen)


async def cancel_after(awaitable: Awaitable[Any], steps: int) -> None:
    """Run ``awaitable`` as a task for ``steps`` event-loop turns, then cancel it and wait until
    it settles (finished or cancelled); any other error propagates."""
    task = asyncio.ensure_future(awaitable)
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
