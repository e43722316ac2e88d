"""Strict tier: what this package promises beyond the SDK.

Bad input gets an error naming the batch index (its ``index`` attribute) and writes nothing;
oversized items are refused; concurrent writers lose nothing and keep batches contiguous; two
pops never return the same item; a cancelled batch is whole or absent.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import math
import uuid as _uuid
from typing import Any

import pytest

from .base import ConformanceBase, msg
from .helpers import cancel_after, item_text, texts


class StrictConformance(ConformanceBase):
    """Validation, size caps, concurrency and cancellation. Override ``create_session``."""

    async def test_a_negative_limit_returns_nothing(self) -> None:
        # The SDK's SQLiteSession passes -1 to SQLite's LIMIT, which then means "no limit".
        s = await self.new_session()
        await s.add_items([msg("a"), msg("b")])
        assert await s.get_items(limit=-1) == []
        assert await s.get_items(limit=-5) == []
        assert texts(await s.get_items(limit=1)) == ["b"]

    max_item_bytes: int | None = 16 * 1024 * 1024
    """The cap the session under test enforces, or None to skip the oversize test."""

    concurrent_tasks: int = 200
    """How many tasks add at once in the concurrency test."""

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param({"role": "user", "content": {1, 2}}, id="set"),
            pytest.param({"role": "user", "content": b"bytes"}, id="bytes"),
            pytest.param({"role": "user", "content": math.nan}, id="nan"),
            pytest.param({"role": "user", "content": [math.inf]}, id="infinity"),
            pytest.param({"role": "user", 1: "non-string key"}, id="int-key"),
            pytest.param({"role": "user", "content": object()}, id="object"),
            pytest.param("just a string", id="not-a-mapping"),
            pytest.param({"role": "user", "content": "\ud800"}, id="lone-surrogate"),
            pytest.param({"role": "user", "content": [_dt.date(2026, 1, 2)]}, id="date"),
            pytest.param({"role": "user", "content": _uuid.UUID(int=1)}, id="uuid"),
        ],
    )
    async def test_bad_item_raises_and_writes_nothing(self, bad: Any) -> None:
        s = await self.new_session()
        await s.add_items([msg("kept")])
        with pytest.raises((TypeError, ValueError)) as info:
            await s.add_items([msg("good"), bad, msg("also good")])
        assert getattr(info.value, "index", None) == 1, f"index should be 1: {info.value!r}"
        assert texts(await s.get_items()) == ["kept"]

    async def test_oversized_item_raises_and_writes_nothing(self) -> None:
        if self.max_item_bytes is None:
            pytest.skip("this session enforces no item size cap")
        s = await self.new_session()
        with pytest.raises(ValueError) as info:
            await s.add_items([msg("small"), msg("x" * (self.max_item_bytes + 1))])
        assert getattr(info.value, "index", None) == 1, f"index should be 1: {info.value!r}"
        assert await s.get_items() == []

    async def test_concurrent_adds_lose_nothing_and_keep_batches_contiguous(self) -> None:
        s = await self.new_session()
        n = self.concurrent_tasks

        async def writer(task: int) -> None:
            await s.add_items([msg(f"{task}:{k}") for k in range(3)])

        await asyncio.gather(*(writer(t) for t in range(n)))
        got = texts(await s.get_items())
        assert len(got) == 3 * n
        assert len(set(got)) == 3 * n
        for start in range(0, len(got), 3):
            task = got[start].split(":")[0]
            assert got[start : start + 3] == [f"{task}:{k}" for k in range(3)]

    async def test_concurrent_pops_never_return_the_same_item(self) -> None:
        s = await self.new_session()
        await s.add_items([msg(str(i)) for i in range(100)])
        popped = await asyncio.gather(*(s.pop_item() for _ in range(130)))
        got = [item_text(p) for p in popped if p is not None]
        assert sorted(got, key=int) == [str(i) for i in range(100)]
        assert await s.get_items() == []

    async def test_cancelled_batches_are_all_or_nothing(self) -> None:
        s = await self.new_session()
        size = 25
        for attempt in range(12):
            await cancel_after(s.add_items([msg(f"{attempt}:{k}") for k in range(size)]), attempt)
        got = texts(await s.get_items())
        assert len(got) % size == 0
        for start in range(0, len(got), size):
            tag = got[start].split(":")[0]
            assert got[start : start + size] == [f"{tag}:{k}" for k in range(size)]
