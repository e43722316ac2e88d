"""How branching and usage read items (message type, tool name, user turns, content search), by
the rules of the SDK's ``AdvancedSQLiteSession``, so turn numbers and tool names agree with it."""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_CALL_TYPES = frozenset(
    "tool_call function_call computer_call file_search_call web_search_call"
    " code_interpreter_call tool_search_call custom_tool_call mcp_call mcp_approval_request"
    " shell_call apply_patch_call".split()
)
"""Message types counted by ``get_tool_usage``."""

_TYPE_NAMED_TOOLS = frozenset(
    "computer_call file_search_call web_search_call code_interpreter_call shell_call"
    " apply_patch_call tool_search_call tool_search_output".split()
)


def is_user_message(item: Any) -> bool:
    """Return whether ``item`` is a user message (it starts a turn)."""
    return isinstance(item, dict) and item.get("role") == "user"


def classify_message_type(item: Any) -> str:
    """Return ``user``, ``assistant``, the item's ``type``, or ``other``."""
    if isinstance(item, dict):
        if item.get("role") in ("user", "assistant"):
            return str(item["role"])
        if item.get("type"):
            return str(item.get("type"))
    return "other"


def extract_tool_name(item: Any) -> str | None:
    """Return the tool name of a tool call or output item, else None."""
    if not isinstance(item, dict):
        return None
    item_type = item.get("type")
    if item_type in {"mcp_call", "mcp_approval_request"} and "server_label" in item:
        parts = (item.get("server_label"), item.get("name"))
        return ".".join(str(part) for part in parts if part) or None
    if item_type in _TYPE_NAMED_TOOLS:
        return "tool_search" if item_type.startswith("tool_search_") else str(item_type)
    if "name" in item:
        name, namespace = item.get("name"), item.get("namespace")
        if name is None:
            return None
        name_str = str(name)
        if namespace is not None and str(namespace) and str(namespace) != name_str and name_str:
            return f"{namespace}.{name_str}"
        return name_str
    return None


def content_preview(content: Any, max_length: int | None = None) -> str:
    """Return user-message ``content`` as a string, cut to ``max_length`` plus ``...``."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if max_length is not None and len(text) > max_length:
        return text[:max_length] + "..."
    return text


def content_matches(content: Any, search_term: str) -> bool:
    """Return whether ``search_term`` occurs in the content's text (ASCII case-insensitive)."""
    pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
    else:
        return False
    return any(isinstance(p, str) and pattern.search(p) for p in parts)
