"""The demo: a conversation through ``Runner.run`` on a SQLite file, then an undo-and-re-ask."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from typing import Any

from agents import Agent, Runner

from ..backends.sqlite import SQLiteSession
from ..wrappers.compaction.text import item_text

QUESTIONS = ["Hi! My name is Ada.", "What is the capital of France?", "What is 17 * 3?"]
SCRIPTED_REPLIES = [
    "Hello Ada, nice to meet you.",
    "The capital of France is Paris.",
    "17 * 3 = 41.",  # deliberately wrong, so the demo can undo it
    "17 * 4 = 68.",
]
CORRECTED_QUESTION = "Sorry, I meant: what is 17 * 4?"


def _agent(live: bool, model: Any) -> Agent[Any]:
    if not live:
        from agents import set_tracing_disabled
        from agents.testing import ScriptedModel, assistant_message

        set_tracing_disabled(True)  # offline: there is nowhere to export traces to
        replies = enumerate(SCRIPTED_REPLIES)
        model = ScriptedModel([[assistant_message(t, item_id=f"msg-{i}")] for i, t in replies])
    return Agent(name="demo", instructions="Answer in one short sentence.", model=model)


def _show(items: list[Any], out: Any) -> None:
    for n, item in enumerate(items, 1):
        role = item.get("role", item.get("type", "?"))
        print(f"    {n:2}. {role:9} {item_text(item)}", file=out)


async def run_demo(db: str | None, live: bool, model: str, out: Any, keep: bool = False) -> int:
    """Run the demo; returns a process exit code. Without ``db`` it writes a file in a new
    temporary folder, removed at the end unless ``keep``."""
    if live and not os.environ.get("OPENAI_API_KEY"):
        print(
            "agent-sessions: error: --live needs OPENAI_API_KEY in the environment", file=sys.stderr
        )
        return 2
    if db is not None:
        return await _demo(db, live, model, out)
    folder = tempfile.mkdtemp(prefix="agent-sessions-demo-")
    try:
        return await _demo(os.path.join(folder, "demo.db"), live, model, out)
    finally:
        if keep:
            print(f"\nKept the SQLite file in {folder} (remove it when done).", file=out)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            print("\nRemoved the temporary SQLite file (pass --keep or --db to keep it).", file=out)


async def _demo(path: str, live: bool, model: str, out: Any) -> int:
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    agent = _agent(live, model)
    mode = f"live model {model}" if live else "offline (agents.testing.ScriptedModel)"
    print(
        f"agent_sessions demo, {mode}\nSQLite file: {path}   session id: {session_id}\n", file=out
    )

    async with SQLiteSession(session_id, path) as session:
        for question in QUESTIONS:
            result = await Runner.run(agent, question, session=session)
            print(f"  user      > {question}\n  assistant > {result.final_output}", file=out)

        items = await session.get_items()
        print(f"\nStored history ({len(items)} items, read back from the file):", file=out)
        _show(items, out)

        print("\nUndo the last exchange: pop_item() twice", file=out)
        for _ in range(2):
            popped = await session.pop_item()
            print(
                f"  popped {popped.get('role') if popped else None}: {item_text(popped)!r}",
                file=out,
            )

        result = await Runner.run(agent, CORRECTED_QUESTION, session=session)
        print(
            f"\n  user      > {CORRECTED_QUESTION}\n  assistant > {result.final_output}", file=out
        )

    async with SQLiteSession(session_id, path) as reopened:
        items = await reopened.get_items()
        print(
            f"\nHistory after the correction, from a new session object ({len(items)} items):",
            file=out,
        )
        _show(items, out)
        wrong_gone = all("17 * 3" not in item_text(i) for i in items)
        print(f"\nThe wrong exchange is gone from history: {wrong_gone}", file=out)
    return 0 if wrong_gone else 1
