"""Usage records in the side store ``usage``, and the SDK's usage queries over them.

A record names its turn by the sequence number of the turn's user message; the turn number is
worked out on read from the branch's current view, so expiry never moves a record to another
turn. The latest record of a turn wins (the SDK's ``INSERT OR REPLACE``); a popped user message
takes its turn's usage with it; a drop record removes a deleted branch's usage.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agents.memory import Session

from .items import TOOL_CALL_TYPES
from .store import read_rows
from .view import Lineage, View

if TYPE_CHECKING:
    from agents.result import RunResult, RunResultBase

UsageKey = tuple[str, int]
Position = tuple[str, int]
"""Where a turn's user message is: (storage key, sequence number)."""
_TOTALS = ("requests", "input_tokens", "output_tokens", "total_tokens")
_DETAILS = ("input_tokens_details", "output_tokens_details")


def _details(value: Any) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        data = dict(vars(value))
    except TypeError:
        return None
    return {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}


def _position(record: dict[str, Any]) -> Position | None:
    found = record.get("p")
    if (
        isinstance(found, list)
        and len(found) == 2
        and isinstance(found[0], str)
        and isinstance(found[1], int)
        and not isinstance(found[1], bool)
    ):
        return found[0], found[1]
    return None


def _turn_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {
        **{name: record.get(name, 0) for name in _TOTALS},
        **{name: record.get(name) for name in _DETAILS},
    }


async def _records(log: Session) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Return each turn's current record in usage side store ``log`` by (branch, *position)."""
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for _, record in await read_rows(log):
        if not isinstance(record, dict) or not isinstance(record.get("b"), str):
            continue
        branch = record["b"]
        if record.get("drop_branch"):
            for gone in [k for k in out if k[0] == branch]:
                del out[gone]
            continue
        position = _position(record)
        if position is None:
            continue
        key = (branch, *position)
        out.pop(key, None)
        if not record.get("drop"):
            out[key] = record
    return out


class UsageQueries:
    """The SDK's usage methods (``AdvancedSQLiteSession``'s names, arguments and return
    shapes), for a layer with a view of its branches; records live in side store ``usage``
    (opened on first use: most requests of a web handler's new object never touch usage)."""

    _view: View
    _lock: asyncio.Lock
    _logger: logging.Logger
    side_store: Callable[[str], Session]
    _branches: Callable[[], Awaitable[tuple[str, dict[str, Lineage]]]]

    async def store_run_usage(self, result: RunResult | RunResultBase) -> None:
        """Store the usage of ``result`` for the latest user turn of the current branch.

        Call after ``Runner.run``. A later call for the same turn replaces the earlier one.
        Failures are logged, never raised (as the SDK's).
        """
        try:
            usage = result.context_wrapper.usage
            if usage is None:
                return
            async with self._lock:
                branch, lineages = await self._branches()
                position = await self._view.newest_user(lineages[branch])
                if position is None:
                    self._logger.debug("Skipping usage store: no user turn on %r yet", branch)
                    return
                await self.side_store("usage").add_items(
                    [
                        {  # type: ignore[list-item]
                            "b": branch,
                            "p": list(position),
                            **{name: getattr(usage, name) or 0 for name in _TOTALS},
                            **{name: _details(getattr(usage, name, None)) for name in _DETAILS},
                        }
                    ]
                )  # type: ignore[list-item]
        except Exception as exc:  # the SDK's contract: usage never breaks a conversation
            self._logger.error("Failed to store session usage: %s", exc, exc_info=True)

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, int] | None:
        """Return ``{"requests", "input_tokens", "output_tokens", "total_tokens",
        "total_turns"}`` over the turns ``get_turn_usage`` lists for every branch (or for
        ``branch_id``), or None when there are none (usage of turns whose user message
        expired is not counted)."""
        rows = list((await self._numbered(branch_id or None)).values())
        if not rows:
            return None
        return {
            **{name: sum(r.get(name, 0) for r in rows) for name in _TOTALS},
            "total_turns": len(rows),
        }

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """Return one turn's usage with token details (``{}`` when none), or every turn's of
        the branch (current when None, each with ``user_turn_number``), ordered by turn."""
        if branch_id is None:
            async with self._lock:
                branch_id = (await self._branches())[0]
        records = await self._numbered(branch_id)
        if user_turn_number is not None:
            record = records.get((branch_id, user_turn_number))
            return _turn_fields(record) if record is not None else {}
        return [{"user_turn_number": t, **_turn_fields(r)} for (_, t), r in sorted(records.items())]

    async def _numbered(self, branch_id: str | None) -> dict[UsageKey, dict[str, Any]]:
        """The current records (``branch_id``'s, when given) by (branch, turn number), in
        storing order; a record whose user message is not visible in its branch is left out."""
        records = await _records(self.side_store("usage"))
        wanted = {b for b, _, _ in records if branch_id is None or b == branch_id}
        numbers: dict[str, dict[Position, int]] = {}
        if wanted:
            async with self._lock:
                lineages = (await self._branches())[1]
                for name in sorted(wanted & lineages.keys()):
                    lineage = lineages[name]
                    numbers[name] = {
                        (lineage[t.segment][0], t.seq): t.number
                        for t in await self._view.turns(lineage)
                    }
        out: dict[UsageKey, dict[str, Any]] = {}
        for (branch, key, seq), record in records.items():
            turn = numbers.get(branch, {}).get((key, seq))
            if turn is not None:
                out[(branch, turn)] = record
        return out

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """Return ``(tool_name, usage_count, turn_number)`` for the tools called in a branch
        (current when None), ordered by turn, then tool name."""
        async with self._lock:
            current, lineages = await self._branches()
            lineage = lineages.get(current if branch_id is None else branch_id)
            structure = await self._view.structure(lineage) if lineage is not None else []
        search_calls = {(t, tool) for t, kind, tool in structure if kind == "tool_search_call"}
        counts: dict[tuple[Any, int], int] = {}
        for turn, kind, tool in structure:
            # (A shell or apply_patch call's tool name is its type: see extract_tool_name.)
            if kind in TOOL_CALL_TYPES or (
                kind == "tool_search_output" and (turn, tool) not in search_calls
            ):
                counts[(tool, turn)] = counts.get((tool, turn), 0) + 1
        # The SDK's GROUP BY orders by turn, then tool name (NULL first).
        ordered = sorted(
            counts.items(), key=lambda kv: (kv[0][1], kv[0][0] is not None, str(kv[0][0] or ""))
        )
        return [(name, count, turn) for (name, turn), count in ordered]


__all__ = ["UsageQueries"]
