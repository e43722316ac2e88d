"""Undo a turn and ask again: pop the assistant reply and the user message, then re-run.

Runs offline with a scripted model: ``python examples/undo_and_reask.py``.
"""

import asyncio
import os
import tempfile

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message

from agent_sessions import SQLiteSession


async def main() -> None:
    set_tracing_disabled(True)
    model = ScriptedModel([[assistant_message("2 + 2 = 5")], [assistant_message("2 + 3 = 5")]])
    agent = Agent(name="math", instructions="Answer briefly.", model=model)
    with tempfile.TemporaryDirectory() as tmp:  # the database file goes away at the end
        db = os.path.join(tmp, "example.db")
        async with SQLiteSession("undo-example", db) as session:
            await Runner.run(agent, "What is 2 + 2?", session=session)
            await session.pop_item()  # the wrong answer
            await session.pop_item()  # the question that led to it
            result = await Runner.run(agent, "What is 2 + 3?", session=session)
            print(result.final_output)
            print([item.get("role") for item in await session.get_items()])


if __name__ == "__main__":
    asyncio.run(main())
