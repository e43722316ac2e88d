"""Finishing a started write even when the awaiting task is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def finish(awaitable: Awaitable[T]) -> tuple[T, asyncio.CancelledError | None]:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile.

    Returns its result and the cancellation that arrived meanwhile (None if none), for the
    caller to raise once it has dealt with the result. An error of ``awaitable`` is raised as is,
    or, when a cancellation arrived, the cancellation is raised from it.
    """
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if task.cancelled():  # pragma: no cover - nobody else holds the task
        raise cancelled or asyncio.CancelledError()
    error = task.exception()
    if error is not None:
        if cancelled is not None:
            raise cancelled from error
        raise error
    return task.result(), cancelled


async def run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end, then re-raise any cancellation that arrived meanwhile.

    A cancelled caller thus never leaves a batch half-sent: the write either had not started or
    is fully finished (its outcome is then discarded in favour of ``CancelledError``).
    """
    result, cancelled = await finish(awaitable)
    if cancelled is not None:
        raise cancelled
    return result
