"""``AdvancedSession``: branching plus usage per branch over any Session.

The drop-in replacement for the Agents SDK's ``AdvancedSQLiteSession``: the same methods,
arguments, return shapes and errors; only the constructor differs
(``AdvancedSession(inner)`` instead of ``AdvancedSQLiteSession(session_id=..., db_path=...)``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..core.options import explicit_options
from ._branch_items import is_user_message
from ._branch_store import SiblingFactory, is_sequenced
from ._branch_usage import (
    Position,
    UsageKey,
    UsageLog,
    locate_turn,
    numbered,
    positioned_branches,
    session_usage,
    tool_usage,
    turn_numbers,
    turn_usage,
)
from ._branch_view import Lineage
from .branching import BranchingSession

if TYPE_CHECKING:
    from agents.memory import Session
    from agents.result import RunResult, RunResultBase


class AdvancedSession(BranchingSession):
    """Conversation branching and usage analytics (per branch) over any Session.

    Args:
        inner: the session that stores ``main`` (any Session).
        sibling_factory: opens a session of the same store for a derived id; needed only when
            ``inner`` cannot open siblings itself (e.g. the SDK's own session classes).
        logger: where branch operations and usage-store failures are logged.
    """

    @explicit_options
    def __init__(
        self,
        inner: Session,
        *,
        sibling_factory: SiblingFactory | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(inner, sibling_factory=sibling_factory, logger=logger)
        self._usage = UsageLog(self._storages.side("usage"))

    async def _after_pop(
        self, branch: str, lineage: Lineage, item: Any, position: Position
    ) -> None:
        if is_user_message(item):  # the turn it opened is gone, and so is its usage
            turn = await self._view.turn_count(lineage) + 1  # for records filed by number
            sequenced = is_sequenced(self._storages.storage(position[0]))
            await self._usage.drop_turn(branch, turn, position if sequenced else None)

    async def _after_delete(self, branch: str) -> None:
        await self._usage.drop_branch(branch)

    async def _after_clear(self) -> None:
        await self._usage.clear()

    async def store_run_usage(self, result: RunResult | RunResultBase) -> None:
        """Store the usage of ``result`` for the current turn of the current branch.

        Call after ``Runner.run``. A later call for the same turn replaces the earlier one.
        Failures are logged, never raised (as the SDK's).
        """
        try:
            usage = result.context_wrapper.usage
            if usage is None:
                return
            async with self._lock:
                _, branch, lineage = await self._current()
                turn, position = await locate_turn(self._view, lineage)
                if turn == 0 and position is None:
                    self._logger.debug("Skipping usage store: no turn on branch %r", branch)
                    return
                await self._usage.store(branch, usage, turn=turn or None, position=position)
        except Exception as exc:  # the SDK's contract: usage never breaks a conversation
            self._logger.error("Failed to store session usage: %s", exc, exc_info=True)

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, int] | None:
        """Return ``{"requests", "input_tokens", "output_tokens", "total_tokens",
        "total_turns"}`` over the turns ``get_turn_usage`` lists for every branch (or for
        ``branch_id``), or None when there are none (usage of turns whose user message
        expired is not counted)."""
        return session_usage(await self._numbered(branch_id or None), branch_id)

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """Return one turn's usage with token details (``{}`` when none), or every turn's of
        the branch (current when None), ordered by turn."""
        if branch_id is None:
            async with self._lock:
                branch_id = (await self._log.sync()).current
        return turn_usage(await self._numbered(branch_id), branch_id, user_turn_number)

    async def _numbered(self, branch_id: str | None) -> dict[UsageKey, dict[str, Any]]:
        """The current records (of ``branch_id``'s, when given), by (branch, turn number):
        each branch's records are numbered by that branch's own view."""
        records = await self._usage.records()
        numbers = {}
        wanted = positioned_branches(records, branch_id)
        if wanted:
            async with self._lock:
                state = await self._log.sync()
                for name in sorted(wanted):
                    branch = state.branches.get(name)
                    if branch is not None:
                        numbers[name] = await turn_numbers(self._view, branch.lineage)
        return numbered(records, numbers)

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """Return ``(tool_name, usage_count, turn_number)`` for the tools called in a branch
        (current when None), by turn."""
        return tool_usage(await self._structure(branch_id))


__all__ = ["AdvancedSession"]
