"""Branch a conversation at an earlier turn, try another question there, and compare branches.

Shows ``AdvancedSession`` (branches plus token usage per branch) over this package's
``SQLiteSession``: three turns on ``main``, a branch ``alt`` created from turn 2 (it keeps turn 1
only), a different second question on ``alt``, then both branches' turns and the usage stored
with ``store_run_usage``.

Runs offline with a scripted model: ``python examples/branching_experiment.py``.
"""

import asyncio
import os
import tempfile

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.usage import Usage

from agent_sessions import SQLiteSession
from agent_sessions.wrappers.advanced import AdvancedSession


def reply(text: str, input_tokens: int, output_tokens: int) -> ModelStep:
    """One scripted model answer that reports the given token usage."""
    usage = Usage(
        requests=1,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )
    return ModelStep(output=[assistant_message(text)], usage=usage)


async def main() -> None:
    set_tracing_disabled(True)
    model = ScriptedModel(
        [
            reply("Paris.", 20, 3),
            reply("About 2.1 million people.", 40, 8),
            reply("The Louvre.", 60, 4),
            reply("The Seine.", 40, 4),  # the answer on the alternative branch
        ]
    )
    agent = Agent(name="guide", instructions="Answer briefly.", model=model)
    with tempfile.TemporaryDirectory() as tmp:
        session = AdvancedSession(SQLiteSession("trip", os.path.join(tmp, "chat.db")))
        try:
            for question in (
                "What is the capital of France?",
                "How many people live there?",
                "Which museum should I visit?",
            ):
                result = await Runner.run(agent, question, session=session)
                await session.store_run_usage(result)

            # "alt" holds what came before turn 2 of main: turn 1 only.
            branch = await session.create_branch_from_turn(2, "alt")
            result = await Runner.run(agent, "Which river flows through it?", session=session)
            await session.store_run_usage(result)
            print(f"answer on {branch}: {result.final_output}")
            call = model.last_call
            asked = [i["content"] for i in call.input if i.get("role") == "user"] if call else []
            print(f"questions the model saw on {branch}: {asked}")

            await session.switch_to_branch("main")
            for name in ("main", "alt"):
                print(f"{name} turns:")
                for turn in await session.get_conversation_turns(name):
                    print(f"  {turn['turn']}. {turn['content']}")
            print("branches:", [b["branch_id"] for b in await session.list_branches()])
            print("usage main:", await session.get_session_usage("main"))
            print("usage alt:", await session.get_session_usage("alt"))
            print("usage all:", await session.get_session_usage())
        finally:
            await session.close()


if __name__ == "__main__":
    asyncio.run(main())
