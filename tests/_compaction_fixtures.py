"""Shared pieces of the compaction tests: items, summarizers that gate or fail, a record
store whose writes fail, and session builders."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from agent_sessions import InMemorySession
from agent_sessions.testing import item_text
from agent_sessions.wrappers.compaction import (
    CompactionSession,
    ExtractiveSummarizer,
    item_count_trigger,
)
from agent_sessions.wrappers.compaction.summarizers import SUMMARY_HEADER


def msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


def sid() -> str:
    return f"cmp-{uuid.uuid4().hex[:12]}"


def is_summary(item: Any) -> bool:
    return isinstance(item, dict) and str(item.get("content", "")).startswith(SUMMARY_HEADER)


def originals(view: list[Any]) -> list[str]:
    return [item_text(i) for i in view if not is_summary(i)]


class GatedSummarizer:
    """Extractive summaries, but each call waits until ``release`` is set; counts overlap."""

    name = "gated"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.calls: list[list[Any]] = []
        self.running = 0
        self.max_running = 0
        self._inner = ExtractiveSummarizer()

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        self.calls.append(list(items))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.started.set()
        try:
            await self.release.wait()
            return await self._inner.summarize(items, previous_summary=previous_summary)
        finally:
            self.running -= 1


class FailingSummarizer:
    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        self.calls += 1
        raise RuntimeError("summarizer crashed")


class FailingWrites:
    """A record store whose writes fail: before storing, or after storing (lost ack)."""

    def __init__(self, real: InMemorySession, *, after_write: bool) -> None:
        self.real = real
        self.session_id = real.session_id
        self.session_settings = real.session_settings
        self.after_write = after_write
        self.armed = True

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.real.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        if self.armed and not self.after_write:
            raise ConnectionError("store went away before the write")
        await self.real.add_items(items)
        if self.armed:
            raise ConnectionError("store went away after the write")

    async def pop_item(self) -> Any:
        return await self.real.pop_item()

    async def clear_session(self) -> None:
        await self.real.clear_session()


def every(n: int) -> Any:
    return item_count_trigger(n)


def new_session(**options: Any) -> CompactionSession:
    options.setdefault("should_trigger_compaction", every(4))
    options.setdefault("keep_last", 2)
    return CompactionSession(InMemorySession(sid()), **options)
