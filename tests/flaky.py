"""A primary whose outages and lost replies a test controls (for the resilient layer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents.memory import SessionABC

from agent_sessions.core.capabilities import Capability
from agent_sessions.errors import BackendUnavailableError


class Crash(BaseException):
    """Stands for the process dying at that point (nothing after it runs)."""


class Faults:
    """The faults of one primary, shared by the :class:`FlakyPrimary` objects of its writers:
    ``down``; ``lost_replies`` writes applied and then reported as failed (a reply lost after
    the commit), after which the primary is down if ``down_after_lost_reply``;
    ``during_lost_reply`` runs (once) after such a commit, before the failure is reported."""

    def __init__(self) -> None:
        self.down = False
        self.lost_replies = 0
        self.down_after_lost_reply = False
        self.during_lost_reply: Callable[[], Awaitable[None]] | None = None


class FlakyPrimary(SessionABC):
    """Forwards to ``inner`` unless ``faults.down`` (see :class:`Faults`; ``down`` and
    ``lost_replies`` are shortcuts to it); ``crash_after_writes`` raises :class:`Crash` right
    after that many more writes were applied."""

    def __init__(self, inner: Any, faults: Faults | None = None) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = None
        self.faults = faults if faults is not None else Faults()
        self.crash_after_writes: int | None = None
        self.writes = 0

    @property
    def down(self) -> bool:
        return self.faults.down

    @down.setter
    def down(self, value: bool) -> None:
        self.faults.down = value

    @property
    def lost_replies(self) -> int:
        return self.faults.lost_replies

    @lost_replies.setter
    def lost_replies(self, value: int) -> None:
        self.faults.lost_replies = value

    def _check(self) -> None:
        if self.down:
            raise BackendUnavailableError("the test took the primary down")

    async def get_items(self, limit: int | None = None) -> list[Any]:
        self._check()
        items: list[Any] = await self.inner.get_items(limit)
        return items

    async def add_items(self, items: list[Any]) -> None:
        self._check()
        await self.inner.add_items(items)
        self.writes += 1
        if self.crash_after_writes is not None:
            self.crash_after_writes -= 1
            if self.crash_after_writes <= 0:
                self.crash_after_writes = None
                raise Crash
        if self.faults.lost_replies:
            self.faults.lost_replies -= 1
            during, self.faults.during_lost_reply = self.faults.during_lost_reply, None
            if during is not None:
                await during()
            self.faults.down = self.faults.down_after_lost_reply
            raise BackendUnavailableError("the test lost the reply after the commit")

    async def pop_item(self) -> Any:
        self._check()
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        self._check()
        await self.inner.clear_session()


class FlakySequencedPrimary(FlakyPrimary):
    """The same, also forwarding the inner session's sequence numbers."""

    capabilities = frozenset({Capability.SEQUENCED})

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, Any]]:
        self._check()
        pairs: list[tuple[int, Any]] = await self.inner.get_sequenced_items(
            limit, after=after, before=before
        )
        return pairs

    async def add_sequenced_items(self, items: list[Any]) -> list[int]:
        raise NotImplementedError("not used by the resilient layer")

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        self._check()
        count: int = await self.inner.count_items(after=after, before=before)
        return count
