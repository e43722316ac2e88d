"""Finishing a started write even when the awaiting task is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end, then re-raise any cancellation that arrived meanwhile.

    A cancelled caller thus never leaves a batch half-sent: the write either had not started or
    is fully finished (its outcome is then discarded in favour of ``CancelledError``).
    """
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # mark retrieved; the caller asked to be cancelled
        raise cancelled
    return task.result()
