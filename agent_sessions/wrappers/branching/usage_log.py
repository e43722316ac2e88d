"""Usage records kept as JSON items in a sibling session, and the SDK-shaped queries over them.

A record belongs to one turn of one branch and names the turn by the sequence number of its user
message, ``"p": [storage key, seq]``; the turn's number is worked out when usage is read, from
the branch's current view. So expiry (or anything else that changes how many turns precede it)
never moves a record to another turn, and a record whose user message is no longer visible is
left out.

The latest record of a turn wins, like the SDK's ``INSERT OR REPLACE``. A popped user message
takes its turn's usage with it without any write: its number is never visible again (numbers
are never reused, and a pop that hides an item from a branch never shows it again). A drop
record removes a branch's usage when the branch is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.memory import Session
from agents.usage import Usage

from .items import TOOL_CALL_TYPES
from .store import read_rows
from .view import Lineage, View

UsageKey = tuple[str, int]
_TOTALS = ("requests", "input_tokens", "output_tokens", "total_tokens")
_DETAILS = ("input_tokens_details", "output_tokens_details")
Position = tuple[str, int]
"""Where a turn's user message is: (storage key, sequence number)."""


def _details(value: Any) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        data = dict(vars(value))
    except TypeError:
        return None
    return {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}


def position_of(record: dict[str, Any]) -> Position | None:
    """Return the (storage key, seq) a record names its turn by, or None (not a record)."""
    found = record.get("p")
    if (
        isinstance(found, list) and len(found) == 2 and isinstance(found[0], str)
        and isinstance(found[1], int) and not isinstance(found[1], bool)
    ):
        return found[0], found[1]
    return None


def usage_record(branch: str, usage: Usage, position: Position) -> dict[str, Any]:
    """Return the record stored for ``usage`` of the turn of ``branch`` whose user message is
    at ``position``."""
    return {
        "b": branch,
        "p": [position[0], position[1]],
        **{name: getattr(usage, name) or 0 for name in _TOTALS},
        **{name: _details(getattr(usage, name, None)) for name in _DETAILS},
    }


class UsageLog:
    """Reads and writes usage records in the session ``open_session()`` returns, opened on
    first use (most requests of a web handler's new object never touch usage)."""

    def __init__(self, open_session: Callable[[], Session]) -> None:
        self._open = open_session

    @property
    def session(self) -> Session:
        return self._open()

    async def store(self, branch: str, usage: Usage, position: Position) -> None:
        record = usage_record(branch, usage, position)
        await self.session.add_items([record])  # type: ignore[list-item]

    async def drop_branch(self, branch: str) -> None:
        await self.session.add_items([{"b": branch, "drop_branch": True}])  # type: ignore[list-item]

    async def clear(self) -> None:
        await self.session.clear_session()

    async def records(self) -> list[dict[str, Any]]:
        """Return the current record of every turn, in storing order."""
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for _, record in await read_rows(self.session):
            if not isinstance(record, dict) or not isinstance(record.get("b"), str):
                continue
            branch = record["b"]
            if record.get("drop_branch"):
                for gone in [k for k in out if k[1] == branch]:
                    del out[gone]
                continue
            position = position_of(record)
            if position is None:
                continue
            key = (branch, *position)
            out.pop(key, None)
            if record.get("drop"):
                continue
            out[key] = record
        return list(out.values())


def record_branches(records: list[dict[str, Any]], branch_id: str | None) -> set[str]:
    """The branches (``branch_id`` only, when given) with records: the ones whose views must
    be read to number their turns."""
    return {r["b"] for r in records if branch_id is None or r["b"] == branch_id}


async def turn_numbers(view: View, lineage: Lineage) -> dict[Position, int]:
    """Return the current turn number of every user message visible in ``lineage``."""
    return {(lineage[t.segment][0], t.seq): t.number for t in await view.turns(lineage)}


def numbered(
    records: list[dict[str, Any]], numbers: dict[str, dict[Position, int]]
) -> dict[UsageKey, dict[str, Any]]:
    """Return the record of every (branch, turn number), in storing order.

    A record takes the number its user message has now in ``numbers[branch]`` and is left out
    when that message is not visible there (it expired, or the branch is gone).
    """
    out: dict[UsageKey, dict[str, Any]] = {}
    for record in records:
        branch = record["b"]
        position = position_of(record)
        turn = numbers.get(branch, {}).get(position) if position is not None else None
        if turn is None:
            continue
        out.pop((branch, turn), None)
        out[(branch, turn)] = record
    return out


def session_usage(
    records: dict[UsageKey, dict[str, Any]], branch_id: str | None
) -> dict[str, int] | None:
    """Sum usage over every branch, or over ``branch_id`` when given; None without records."""
    rows = [r for (b, _), r in records.items() if not branch_id or b == branch_id]
    if not rows:
        return None
    return {
        **{name: sum(r.get(name, 0) for r in rows) for name in _TOTALS},
        "total_turns": len(rows),
    }


def _turn_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {
        **{name: record.get(name, 0) for name in _TOTALS},
        **{name: record.get(name) for name in _DETAILS},
    }



def turn_usage(
    records: dict[UsageKey, dict[str, Any]], branch: str, user_turn_number: int | None
) -> list[dict[str, Any]] | dict[str, Any]:
    """One turn's usage (``{}`` when none), or every turn of ``branch`` ordered by turn."""
    if user_turn_number is not None:
        record = records.get((branch, user_turn_number))
        return _turn_fields(record) if record is not None else {}
    turns = sorted((t, r) for (b, t), r in records.items() if b == branch)
    return [{"user_turn_number": t, **_turn_fields(r)} for t, r in turns]


def tool_usage(structure: list[tuple[int, str, str | None]]) -> list[tuple[str, int, int]]:
    """Return ``(tool_name, count, turn)`` per tool and turn, ordered by turn and name."""
    search_calls = {
        (turn, tool) for turn, kind, tool in structure if kind == "tool_search_call"
    }
    counts: dict[tuple[Any, int], int] = {}
    for turn, kind, tool in structure:
        if kind in TOOL_CALL_TYPES:
            name = tool if tool is not None else (
                kind if kind in ("shell_call", "apply_patch_call") else None
            )
        elif kind == "tool_search_output" and (turn, tool) not in search_calls:
            name = tool
        else:
            continue
        counts[(name, turn)] = counts.get((name, turn), 0) + 1
    # The SDK's GROUP BY orders by turn, then tool name (NULL first).
    ordered = sorted(
        counts.items(), key=lambda kv: (kv[0][1], kv[0][0] is not None, str(kv[0][0] or ""))
    )
    return [(name, count, turn) for (name, turn), count in ordered]

