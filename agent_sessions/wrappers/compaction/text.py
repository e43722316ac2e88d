"""Plain-text renderings of items, shared by the token estimate, the summarizers and archive
search."""

from __future__ import annotations

from typing import Any

from ...core.codec import dumps


def _part_text(part: Any) -> str | None:
    """A content part's text (else its refusal), or None when it has neither."""
    if isinstance(part, dict):
        part = part.get("text") if isinstance(part.get("text"), str) else part.get("refusal")
    return part if isinstance(part, str) else None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(text for text in map(_part_text, content) if text is not None)


def item_text(item: Any) -> str:
    """Return the human-readable text an item carries (message text, tool arguments and
    outputs, reasoning summaries); compact JSON for item kinds without a text field."""
    if not isinstance(item, dict):
        return ""
    if "content" in item and "role" in item:
        return _content_text(item.get("content"))
    kind = item.get("type")
    if kind == "function_call":
        return f"{item.get('name', '')}({item.get('arguments', '')})"
    if kind == "reasoning":
        return _content_text(item.get("summary"))
    output = item.get("output")
    if isinstance(output, str):
        return output
    if output is not None:
        text = _content_text(output)
        return text if text else dumps(output)
    if kind == "compaction":
        return ""  # encrypted; nothing readable
    return dumps(item)


def item_line(item: Any, max_chars: int | None = None) -> str:
    """Return one transcript line for ``item``, e.g. ``"user: hello"`` or
    ``"tool call get_weather({...})"``; the text is cut to ``max_chars`` with an ellipsis."""
    if not isinstance(item, dict):
        return ""
    text = " ".join(item_text(item).split())
    if max_chars is not None and len(text) > max_chars:
        text = text[: max(0, max_chars - 1)] + "…"
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        return f"{item['role']}: {text}"
    if kind == "function_call":
        return f"tool call {text}"
    if isinstance(kind, str) and kind.endswith("_output"):
        return f"tool result: {text}"
    return f"{kind or 'item'}: {text}"
