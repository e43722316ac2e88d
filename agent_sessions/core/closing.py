"""``Closing``: what ``close()`` returns, so it works both called bare and awaited."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

logger = logging.getLogger("agent_sessions")

_pending: set[asyncio.Future[None]] = set()
"""Releases started without an awaiting caller, kept alive until they finish."""


class Closing(Coroutine[Any, Any, None]):
    """A started release, returned by ``close()``: a task in a running loop (awaiting this
    waits for it and raises its error), else run at once as the SDK's sync ``close()``. A
    ``Coroutine``, so ``asyncio.run(session.close())`` works and an unawaited one warns nothing.
    """

    def __init__(self, release: Coroutine[Any, Any, None] | asyncio.Future[None] | None) -> None:
        self._task: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._iterator: Generator[Any, None, None] | None = None
        if release is None:
            return
        if isinstance(release, asyncio.Future):  # run by its caller (``release_here``)
            self._task = release
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            try:
                asyncio.run(release)
            except Exception as exc:  # reported when awaited; logged for a bare call
                self._error = exc
                logger.warning("closing a session failed: %r", exc)
            return
        task = loop.create_task(release)
        _pending.add(task)
        task.add_done_callback(_settled)
        self._task = task

    def __await__(self) -> Generator[Any, None, None]:
        if self._error is not None:
            raise self._error
        if self._task is not None:
            yield from asyncio.shield(self._task).__await__()

    def send(self, value: Any) -> Any:
        return self._steps().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        return self._steps().throw(typ, val, tb)

    def close(self) -> None:
        if self._iterator is not None:
            self._iterator.close()

    def _steps(self) -> Generator[Any, None, None]:
        if self._iterator is None:
            self._iterator = self.__await__()
        return self._iterator

    @property
    def failed(self) -> bool:
        """Whether the release ended with an error or was cancelled."""
        task = self._task
        return self._error is not None or (
            task is not None and task.done() and (task.cancelled() or task.exception() is not None)
        )

    @property
    def done(self) -> bool:
        """Whether the release has finished."""
        return self._task is None or self._task.done()


def release_here(
    release: Callable[[], Awaitable[None]],
) -> tuple[Closing, Coroutine[Any, Any, None]]:
    """A Closing for ``close()`` to hand out and the coroutine running ``release`` in the
    caller's task (set the first, then await the second); only from an owner's release."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def run() -> None:
        try:
            await release()
        except asyncio.CancelledError:
            done.cancel()
            raise
        except BaseException as exc:
            done.set_exception(exc)
            done.exception()  # retrieved: the caller raises it
            raise
        done.set_result(None)

    return Closing(done), run()


def _settled(task: asyncio.Future[None]) -> None:
    _pending.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("closing a session failed: %r", task.exception())


__all__ = ["Closing", "release_here"]
