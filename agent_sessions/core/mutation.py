"""Finishing a started write even when the awaiting task is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class _Unstoppable(asyncio.Task):  # type: ignore[type-arg]
    """A task that refuses ``cancel()``: a task awaiting it that is cancelled meanwhile gets
    its CancelledError once this one is done (asyncio delivers it at the ``await``)."""

    def cancel(self, msg: object = None) -> bool:
        return False


async def _wait_for(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def finish(awaitable: Awaitable[T]) -> tuple[T, asyncio.CancelledError | None]:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile; return its
    result and that cancellation (or None) for the caller to raise. Its error is raised as is,
    or after a cancellation, the cancellation from it."""
    # Awaited directly (not through asyncio.wait or shield): one loop turn and a waiter fewer.
    coro = awaitable if asyncio.iscoroutine(awaitable) else _wait_for(awaitable)
    task: asyncio.Task[T] = _Unstoppable(coro)
    try:
        return await task, None
    except asyncio.CancelledError as exc:
        if not task.done() or task.cancelled():  # the awaitable itself was cancelled
            raise
        cancelled = exc
    error = task.exception()
    if error is not None:
        raise cancelled from error
    return task.result(), cancelled


async def run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end, then re-raise a cancellation that arrived meanwhile:
    a cancelled caller never leaves a batch half-sent."""
    result, cancelled = await finish(awaitable)
    if cancelled is not None:
        raise cancelled
    return result
