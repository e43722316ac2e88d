"""Usage records kept as JSON items in a sibling session, and the SDK-shaped queries over them.

Each ``store_run_usage`` appends one record for (branch, turn); the latest record of a
(branch, turn) wins, like the SDK's ``INSERT OR REPLACE``. Drop records remove a turn's or a
branch's usage when that turn is popped or that branch deleted.
"""

from __future__ import annotations

from typing import Any

from agents.memory import Session
from agents.usage import Usage

from ._branch_items import TOOL_CALL_TYPES
from ._branch_log import encode_lineage
from ._branch_store import read_rows
from ._branch_view import Lineage, View

UsageKey = tuple[str, int]


def _details(value: Any) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        data = dict(vars(value))
    except TypeError:
        return None
    return {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}


def usage_record(branch: str, turn: int, usage: Usage) -> dict[str, Any]:
    """Return the record stored for ``usage`` of (branch, turn)."""
    return {
        "b": branch,
        "t": turn,
        "requests": usage.requests or 0,
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        "total_tokens": usage.total_tokens or 0,
        "input_tokens_details": _details(getattr(usage, "input_tokens_details", None)),
        "output_tokens_details": _details(getattr(usage, "output_tokens_details", None)),
    }


class UsageLog:
    """Reads and writes usage records in ``session``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def store(
        self, branch: str, turn: int, usage: Usage, anchor: dict[str, Any] | None = None
    ) -> None:
        record = usage_record(branch, turn, usage)
        if anchor is not None:
            record["v"] = anchor
        await self.session.add_items([record])  # type: ignore[list-item]

    async def latest(self) -> Any:
        """Return the newest record, or None."""
        rows = await read_rows(self.session, 1)
        return rows[0][1] if rows else None

    async def drop_turn(self, branch: str, turn: int) -> None:
        await self.session.add_items([{"b": branch, "t": turn, "drop": True}])  # type: ignore[list-item]

    async def drop_branch(self, branch: str) -> None:
        await self.session.add_items([{"b": branch, "drop_branch": True}])  # type: ignore[list-item]

    async def clear(self) -> None:
        await self.session.clear_session()

    async def turns(self) -> dict[UsageKey, dict[str, Any]]:
        """Return the current record of every (branch, turn), in storing order."""
        out: dict[UsageKey, dict[str, Any]] = {}
        for _, record in await read_rows(self.session):
            if not isinstance(record, dict) or not isinstance(record.get("b"), str):
                continue
            branch = record["b"]
            if record.get("drop_branch"):
                for key in [k for k in out if k[0] == branch]:
                    del out[key]
                continue
            turn = record.get("t")
            if not isinstance(turn, int):
                continue
            out.pop((branch, turn), None)
            if not record.get("drop"):
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
        "requests": sum(r.get("requests", 0) for r in rows),
        "input_tokens": sum(r.get("input_tokens", 0) for r in rows),
        "output_tokens": sum(r.get("output_tokens", 0) for r in rows),
        "total_tokens": sum(r.get("total_tokens", 0) for r in rows),
        "total_turns": len(rows),
    }


def _turn_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "requests": record.get("requests", 0),
        "input_tokens": record.get("input_tokens", 0),
        "output_tokens": record.get("output_tokens", 0),
        "total_tokens": record.get("total_tokens", 0),
        "input_tokens_details": record.get("input_tokens_details"),
        "output_tokens_details": record.get("output_tokens_details"),
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


async def current_turn(
    view: View, lineage: Lineage, branch: str, log: UsageLog
) -> tuple[int, dict[str, Any] | None]:
    """Return the number of user turns of ``branch`` (viewed as ``lineage``) and the anchor to
    store with a usage record for it.

    The anchor records where the view ended and how many turns it held. When the newest usage
    record is this branch's and its anchor still holds, only the items after it are read, so a
    new session object per request does not rescan the history on every ``store_run_usage``.
    """
    encoded = encode_lineage(lineage)
    latest = await log.latest()
    anchor = latest.get("v") if isinstance(latest, dict) and latest.get("b") == branch else None
    if isinstance(anchor, dict) and anchor.get("lineage") == encoded:
        found = await view.turns_since(lineage, anchor.get("seg"), anchor.get("seq"),
                                       anchor.get("turns"))
        if found is not None:
            turns, position = found
            return turns, {"lineage": encoded, "seg": position[0], "seq": position[1],
                           "turns": turns}
    turns = await view.turn_count(lineage)
    newest = await view.newest(lineage)
    if newest is None:
        return turns, None
    return turns, {"lineage": encoded, "seg": newest[0], "seq": newest[1], "turns": turns}
