"""``UsageTrackingSession``: the SDK's usage methods over a single history (branch ``main``).

A record is tied to its turn's user message by sequence number, so expiring old turns renumbers
the records instead of mixing them up. Use ``AdvancedSession`` for usage per branch.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .base import SessionWrapper
from .branching.log import MAIN_LINEAGE
from .branching.store import MAIN, Storages, read_rows
from .branching.usage_log import UsageQueries
from .branching.view import Lineage, View
from .foreign import SiblingFactory, sequenced

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session


class UsageTrackingSession(UsageQueries, SessionWrapper):
    """Records the usage of each run per user turn, next to the conversation.

    Args:
        inner: the session that stores the conversation (any Session; one without sequence
            numbers is numbered through ``ForeignSession``).
        sibling_factory: opens a session of the same store for a derived id; needed only when
            ``inner`` cannot open siblings itself (e.g. the SDK's own session classes).
        logger: where failures of ``store_run_usage`` are logged (it never raises, as the SDK's).
    """

    numbering = staticmethod(sequenced)
    keeps = "usage records per session id"

    def __init__(
        self,
        inner: Session,
        *,
        sibling_factory: SiblingFactory | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(inner, sibling_factory=sibling_factory)
        self._view = View(Storages(self.inner, self.side_store))
        self._lock = asyncio.Lock()
        self._logger = logger if logger is not None else logging.getLogger("agent_sessions")

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items (``session_settings.limit`` when None), oldest
        first."""
        limit = self.resolve_limit(limit)
        if limit is None:
            return [item for _, item in await read_rows(self.inner)]
        if limit <= 0:
            return []
        return await self.inner.get_items(limit)

    async def clear_session(self) -> None:
        """Delete the conversation and its usage records."""
        await self.inner.clear_session()
        await self.side_store("usage").clear_session()

    async def _branches(self) -> tuple[str, dict[str, Lineage]]:
        return MAIN, {MAIN: MAIN_LINEAGE}


__all__ = ["UsageTrackingSession"]
