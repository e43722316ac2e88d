"""Where a history may be cut so the kept part is still valid model input.

A cut at ``c`` summarises ``items[:c]`` and keeps ``items[c:]``. It is safe when no call and its
output (by ``call_id``: every tool-call kind, and handoffs), nor an MCP approval request and its
response, lie on different sides; no call before it still awaits its output; and the item just
before it is not a reasoning item (reasoning belongs to the item that follows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CALL_OUTPUT_TYPES: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "local_shell_call": "local_shell_call_output",
    "tool_search_call": "tool_search_output",
    "program": "program_output",
}
"""Call item type → its output item type (mirrors the SDK's own call-to-output map)."""

_OUTPUT_TYPES = frozenset(CALL_OUTPUT_TYPES.values())


def _pair_key(item: Any) -> tuple[str, bool] | None:
    """Return (pairing key, is the opening half) for items that belong to a call/output pair."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind in CALL_OUTPUT_TYPES or kind in _OUTPUT_TYPES:
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id:
            return f"call:{call_id}", kind in CALL_OUTPUT_TYPES
        return None
    if kind == "mcp_approval_request" and isinstance(item.get("id"), str):
        return f"mcp:{item['id']}", True
    if kind == "mcp_approval_response" and isinstance(item.get("approval_request_id"), str):
        return f"mcp:{item['approval_request_id']}", False
    return None


def _is_user_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type") in (None, "message")
    )


def after_reasoning(items: Sequence[Any], c: int) -> bool:
    """Whether the item before position ``c`` is a reasoning item."""
    return c > 0 and isinstance(items[c - 1], dict) and items[c - 1].get("type") == "reasoning"


def safe_cuts(items: Sequence[Any]) -> list[bool]:
    """Return ``ok`` with ``ok[c]`` (0 <= c <= len(items)) True when cutting at ``c`` is safe."""
    n = len(items)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    answered: set[str] = set()
    for index, item in enumerate(items):
        pair = _pair_key(item)
        if pair is None:
            continue
        key, opening = pair
        first.setdefault(key, index)
        last[key] = index
        if not opening:
            answered.add(key)
    # blocked[c] for cuts inside a pair's span: first < c <= last (an open call spans to the end)
    delta = [0] * (n + 2)
    for key, start in first.items():
        end = last[key] if key in answered else n
        if end > start:
            delta[start + 1] += 1
            delta[end + 1] -= 1
    ok = []
    depth = 0
    for c in range(n + 1):
        depth += delta[c]
        ok.append(depth == 0 and not after_reasoning(items, c))
    return ok


def choose_cut(items: Sequence[Any], *, lowest: int, highest: int) -> int | None:
    """Return the safe cut in ``[lowest, highest]`` to compact at, or None when there is none.

    Prefers the latest cut that starts a user turn (a user message follows it), so whole turns
    are summarised together, unless that would summarise less than half of what the latest safe
    cut does (a long tool loop inside one turn).
    """
    highest = min(highest, len(items))
    if lowest > highest:
        return None
    ok = safe_cuts(items)
    latest = next((c for c in range(highest, lowest - 1, -1) if ok[c]), None)
    if latest is None:
        return None
    turn_start = next(
        (
            c
            for c in range(latest, lowest - 1, -1)
            if ok[c] and c < len(items) and _is_user_message(items[c])
        ),
        None,
    )
    if turn_start is not None and (turn_start - lowest) * 2 >= latest - lowest:
        return turn_start
    return latest
