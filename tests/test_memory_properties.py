"""Block edits under any interleaving of concurrent writers (hypothesis): the compare-and-set
log loses no update, and every version in the history is one edit on the one before."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.memory import Session
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sessions import InMemorySession, InMemoryStore
from agent_sessions.memory import Blocks
from agent_sessions.wrappers.base import SessionWrapper


class Yielding(SessionWrapper):
    """Gives other tasks a turn before each read and write, as often as ``pauses`` says."""

    def __init__(self, inner: Session, pauses: list[int]) -> None:
        super().__init__(inner)
        self.pauses = pauses

    async def _pause(self) -> None:
        for _ in range(self.pauses.pop() if self.pauses else 0):
            await asyncio.sleep(0)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        await self._pause()
        return await super().get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        await self._pause()
        await super().add_items(items)


@settings(max_examples=40, deadline=None)
@given(
    edits=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=9),
    pauses=st.lists(st.integers(0, 3), max_size=200),
)
def test_concurrent_edits_lose_nothing_in_any_interleaving(
    edits: list[tuple[int, bool]], pauses: list[int]
) -> None:
    async def run() -> None:
        store = InMemoryStore()
        writers = [
            Blocks(Yielding(InMemorySession("log", store=store), list(pauses))) for _ in range(3)
        ]
        await writers[0].define("notes", "seed", limit=10_000)

        async def edit(n: int, writer: int, replace: bool) -> None:
            if replace:  # rewrite the seed line, keeping it unique: old_str matches once
                await writers[writer].edit(
                    "notes", lambda b: b.value.replace("seed", f"seed[{n}]", 1)
                )
            else:
                await writers[writer].insert("notes", f"line{n}")

        await asyncio.gather(*(edit(n, w, r) for n, (w, r) in enumerate(edits)))
        final = await writers[0].get("notes")
        lines = final.value.split("\n")
        for n, (_w, replace) in enumerate(edits):
            if replace:
                assert f"[{n}]" in lines[0]
            else:
                assert lines.count(f"line{n}") == 1
        history = await writers[1].history("notes")
        assert [b.version for b in history] == list(range(1, len(edits) + 2))
        assert final.version == len(edits) + 1

    asyncio.run(run())
