"""Long-term memory for a plain SDK Agent: blocks it always sees and edits, a search over
everything said (also after compaction), archived facts, and upkeep every few turns.

Everything lives in one SQLite file next to the conversations; the model is scripted, so
this runs offline: ``python examples/memory_agent.py``.
"""

import asyncio
import json
import os
import tempfile
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_sessions import SQLiteSession
from agent_sessions.memory import HashingEmbedder, Memory, Upkeep, upkeep_agent


def call(name: str, n: int, **arguments: Any) -> list[Any]:
    return [function_call(name, arguments, call_id=f"call-{n}")]


async def main() -> None:
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{os.path.join(folder, 'app.db')}"
        memory = await Memory.open(
            url, agent_id="helper", user_id="ada", embedder=HashingEmbedder()
        )
        await memory.blocks.define("human", "Name: unknown", limit=200)
        await memory.blocks.define("persona", "I am a concise helper.", read_only=True)

        model = ScriptedModel(
            [
                call("memory_replace", 1, label="human", old_str="unknown", new_str="Ada"),
                call(
                    "archival_memory_insert", 2, content="Ada's cat is called Pixel", tags=["pets"]
                ),
                [assistant_message("Nice to meet you, Ada.")],
                call("memory_rethink", 3, label="persona", new_memory="I am chatty."),
                call("memory_insert", 4, label="human", new_str="x" * 300),
                [assistant_message("Noted.")],
                call("conversation_search", 5, query="Pixel", roles=["user"]),
                call("archival_memory_search", 6, query="cat", tags=["pets"]),
                [assistant_message("Your cat is Pixel.")],
            ]
        )
        agent = Agent(
            name="helper",
            instructions=memory.instructions("You help Ada."),
            tools=memory.tools(),
            model=model,
        )
        upkeep = Upkeep(
            memory,
            upkeep_agent(
                memory,
                ScriptedModel(
                    [
                        call("memory_insert", 7, label="human", new_str="Has a cat, Pixel"),
                        [assistant_message("Memory updated.")],
                    ]
                ),
            ),
            every=3,
        )
        chat = memory.session(SQLiteSession("chat-1", os.path.join(folder, "app.db")))
        for text in ["Hi, I'm Ada. My cat is called Pixel.", "Be chatty!", "What's my cat's name?"]:
            result = await Runner.run(agent, text, session=chat, hooks=upkeep)
            print(f"> {text}\n  {result.final_output}")

        def output(call_id: str) -> str:
            items = model.calls[-1].input
            return str(
                next(i["output"] for i in items if i.get("call_id") == call_id and "output" in i)
            )

        print(
            "model saw after its first edit:",
            "Name: Ada" in str(model.calls[1].system_instructions),
        )
        print(
            "read-only refused:", output("call-3").startswith("Error: block 'persona' is read-only")
        )
        print("limit refused:", output("call-4").split(":", 2)[1].strip())
        print("recall hit:", json.loads(output("call-5"))[0]["text"])
        print("upkeep runs:", upkeep.runs)
        human = await memory.blocks.get("human")
        print(f"human block v{human.version}: {human.value!r}")
        await chat.close()
        await memory.close()


if __name__ == "__main__":
    asyncio.run(main())
