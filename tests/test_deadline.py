"""``core.deadline.within``: asyncio.timeout's behaviour with one timer per event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent_sessions.core.deadline import _watches, within


@pytest.mark.asyncio
async def test_an_overrun_raises_timeout_error_near_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        with within(0.05):
            await asyncio.sleep(10)
    assert time.monotonic() - started < 5
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # our cancellation was taken back
    await asyncio.sleep(0)  # and nothing is left pending on the task


@pytest.mark.asyncio
async def test_a_call_within_its_deadline_returns_and_none_means_no_limit() -> None:
    with within(5):
        await asyncio.sleep(0.01)
    with within(None):
        await asyncio.sleep(0.01)
    assert not _watches[asyncio.get_running_loop()].calls


@pytest.mark.asyncio
async def test_concurrent_calls_with_different_deadlines_each_get_their_own() -> None:
    async def call(limit: float, takes: float) -> str:
        try:
            with within(limit):
                await asyncio.sleep(takes)
            return "done"
        except TimeoutError:
            return "timeout"

    # A long deadline armed first must not delay a shorter one entered later.
    got = await asyncio.gather(call(30, 0.3), call(0.05, 10), call(0.1, 0.01), call(0.2, 10))
    assert list(got) == ["done", "timeout", "done", "timeout"]
    assert not _watches[asyncio.get_running_loop()].calls


@pytest.mark.asyncio
async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def call() -> None:
        with within(30):
            await asyncio.sleep(10)

    task = asyncio.ensure_future(call())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.asyncio
async def test_nested_blocks_keep_the_outer_limit() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        with within(0.05):
            with within(30):
                await asyncio.sleep(10)
    assert time.monotonic() - started < 5
    with within(30):
        with within(0.01):
            await asyncio.sleep(0)
        await asyncio.sleep(0.03)  # the outer block is still registered and not expired
    assert not _watches[asyncio.get_running_loop()].calls
