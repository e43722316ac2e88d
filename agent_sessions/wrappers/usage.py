"""``UsageTrackingSession``: token usage per turn and per session, and tool usage, over any
Session.

Usage records live in a sibling of the inner session (same backend); turn numbers count the
user messages of the inner session from 1, as it is now (a record is tied to its turn's user
message by sequence number, so expiring old turns renumbers the records instead of mixing them
up; a foreign inner session is numbered through ``ForeignSession``). The methods
have the names, arguments and return shapes of the Agents SDK's ``AdvancedSQLiteSession``;
over a single history the branch is always ``"main"`` (use ``AdvancedSession`` for usage per
branch).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .base import SessionWrapper
from .branching.log import MAIN_LINEAGE
from .branching.store import MAIN, Storages, read_rows
from .branching.usage_log import (
    UsageKey,
    UsageLog,
    numbered,
    record_branches,
    session_usage,
    tool_usage,
    turn_numbers,
    turn_usage,
)
from .branching.view import View
from .foreign import SiblingFactory, sequenced

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from agents.result import RunResult, RunResultBase


class UsageTrackingSession(SessionWrapper):
    """Records the usage of each run per user turn, next to the conversation.

    Args:
        inner: the session that stores the conversation (any Session; one without sequence
            numbers is numbered through ``ForeignSession``).
        sibling_factory: opens a session of the same store for a derived id; needed only when
            ``inner`` cannot open siblings itself (e.g. the SDK's own session classes).
        logger: where failures of ``store_run_usage`` are logged (it never raises, as the SDK's).
    """

    numbering = staticmethod(sequenced)

    def __init__(
        self,
        inner: Session,
        *,
        sibling_factory: SiblingFactory | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(inner, sibling_factory=sibling_factory)
        self._view = View(Storages(self.inner, self.side_store))
        self._usage = UsageLog(lambda: self.side_store("usage"))
        self._scan_lock = asyncio.Lock()
        self._logger = logger if logger is not None else logging.getLogger("agent_sessions")

    # -- the Session API, delegated ----------------------------------------------------------

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
        await self._usage.clear()

    # -- usage ---------------------------------------------------------------------------------

    async def store_run_usage(self, result: RunResult | RunResultBase) -> None:
        """Store the usage of ``result`` for the current (latest) user turn.

        Call after ``Runner.run``. A later call for the same turn replaces the earlier one.
        Failures are logged, never raised (as the SDK's).
        """
        try:
            usage = result.context_wrapper.usage
            if usage is None:
                return
            position = await self._view.newest_user(MAIN_LINEAGE)
            if position is None:
                self._logger.debug("Skipping usage store: no user turn yet")
                return
            await self._usage.store(MAIN, usage, position)
        except Exception as exc:  # the SDK's contract: usage never breaks a conversation
            self._logger.error("Failed to store session usage: %s", exc, exc_info=True)

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, int] | None:
        """Return ``{"requests", "input_tokens", "output_tokens", "total_tokens",
        "total_turns"}`` summed over the turns ``get_turn_usage`` lists, or None when there
        are none (usage of turns whose user message expired is not counted)."""
        return session_usage(await self._numbered(branch_id or None), branch_id)

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """Return one turn's usage with token details (``{}`` when none), or a list of every
        turn's usage (each with ``user_turn_number``) ordered by turn."""
        branch = branch_id if branch_id is not None else MAIN
        return turn_usage(await self._numbered(branch), branch, user_turn_number)

    async def _numbered(self, branch_id: str | None) -> dict[UsageKey, dict[str, Any]]:
        """The current records (of ``branch_id``'s, when given), by (branch, turn number)."""
        records = await self._usage.records()
        numbers = {}
        if MAIN in record_branches(records, branch_id):
            async with self._scan_lock:
                numbers[MAIN] = await turn_numbers(self._view, MAIN_LINEAGE)
        return numbered(records, numbers)

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """Return ``(tool_name, usage_count, turn_number)`` for the tools called, by turn."""
        if branch_id not in (None, MAIN):
            return []
        async with self._scan_lock:
            structure = await self._view.structure(MAIN_LINEAGE)
        return tool_usage(structure)


__all__ = ["UsageTrackingSession"]
