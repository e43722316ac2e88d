"""When to compact: the decision callback, its context, and ready-made triggers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

DEFAULT_TRIGGER_TOKENS = 60_000
"""The default trigger compacts once the view is estimated above this many tokens."""


class CompactionTriggerContext(TypedDict):
    """What a trigger sees. Key names shared with the SDK's compaction session
    (``response_id``, ``session_items``, ``compaction_candidate_items``) mean the same, so an
    SDK-style callback works unchanged."""

    session_id: str
    response_id: str | None
    session_items: list[TResponseInputItem]
    """The current view: summary items, then the items after the last compaction."""
    compaction_candidate_items: list[TResponseInputItem]
    """The view without user messages (the SDK's notion of compactable items)."""
    item_count: int
    """``len(session_items)``."""
    items_since_last_compaction: int
    """Original items added after the last compaction (all items when there was none)."""
    archived_item_count: int
    """Original items already summarised by earlier compactions."""
    estimated_tokens: int
    """Token estimate of ``session_items`` (see ``token_estimate_method``)."""
    token_estimate_method: str
    """``"tiktoken:<encoding>"`` or ``"offline"`` (the estimate without an encoding)."""


CompactionTrigger = Callable[[CompactionTriggerContext], "bool | Awaitable[bool]"]
"""Returns (or resolves to) True to compact now."""


def token_threshold_trigger(max_tokens: int = DEFAULT_TRIGGER_TOKENS) -> CompactionTrigger:
    """Trigger when the view's estimated tokens reach ``max_tokens``."""
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")

    def trigger(context: CompactionTriggerContext) -> bool:
        return context["estimated_tokens"] >= max_tokens

    return trigger


def item_count_trigger(every: int) -> CompactionTrigger:
    """Trigger when ``every`` or more items were added since the last compaction."""
    if every <= 0:
        raise ValueError("every must be positive")

    def trigger(context: CompactionTriggerContext) -> bool:
        return context["items_since_last_compaction"] >= every

    return trigger
