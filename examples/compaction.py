"""Compact a long conversation into a summary without losing anything.

Shows ``CompactionSession`` with the deterministic ``ExtractiveSummarizer`` (no model): four
turns through the Runner, then a forced compaction with ``run_compaction({"force": True})``.
The view the model gets next is the summary plus the newest ``keep_last`` items; the
summarised originals stay stored and come back with ``get_archived_items()``.

Runs offline with a scripted model: ``python examples/compaction.py``.
"""

import asyncio
from collections.abc import Mapping
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message

from agent_sessions import SQLiteSession
from agent_sessions.wrappers.compaction import (
    CompactionSession,
    ExtractiveSummarizer,
    TokenEstimator,
)

TURNS = [
    ("I'm planning a trip to Lisbon in May.", "Great choice: May is warm and dry."),
    ("I like seafood.", "Try the grilled sardines in Alfama."),
    ("Where should I stay?", "Baixa is central and walkable."),
    ("How do I get there from the airport?", "Take the red metro line, about 20 minutes."),
]


def text(item: Mapping[str, Any]) -> str:
    """The text of a message item, whether its content is a string or a list of parts."""
    content = item.get("content")
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content)
    return str(content)


async def main() -> None:
    set_tracing_disabled(True)
    model = ScriptedModel([[assistant_message(answer)] for _, answer in TURNS])
    agent = Agent(name="travel", instructions="Answer briefly.", model=model)
    session = CompactionSession(
        SQLiteSession("trip"),  # ":memory:"; any session works underneath
        summarizer=ExtractiveSummarizer(max_chars_per_item=60),
        should_trigger_compaction=lambda context: False,  # only when forced, below
        keep_last=2,  # the newest question and answer are never summarised
        token_estimator=TokenEstimator(encoding=None),  # characters / 4: no tiktoken download
    )
    try:
        for question, _ in TURNS:
            await Runner.run(agent, question, session=session)
        print("items before compaction:", len(await session.get_items()))

        await session.run_compaction({"force": True})

        view = await session.get_items()
        print(f"compacted view ({len(view)} items):")
        for item in view:
            print(f"--- {item.get('role')}:\n{text(item)}")
        archived = await session.get_archived_items()
        print(f"archived originals ({len(archived)} items, still stored):")
        for item in archived:
            print(f"  {item.get('role')}: {text(item)}")
        found = await session.search_archive("sardines")
        print("archive search 'sardines':", [text(item) for item in found])
    finally:
        await session.close()


if __name__ == "__main__":
    asyncio.run(main())
