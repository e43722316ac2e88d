"""The window as an SDK ``session_input_callback`` (``RunConfig(session_input_callback=...)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..compaction.tokens import TokenEstimator
from .micro import MicroCompaction
from .plan import WindowBudget, plan_start
from .tokens import ItemTokens

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agents.items import TResponseInputItem

    WindowCallback = Callable[
        [list[TResponseInputItem], list[TResponseInputItem]], Awaitable[list[TResponseInputItem]]
    ]


def window_input_callback(
    *,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    micro_compaction: MicroCompaction | None = None,
    token_estimator: TokenEstimator | None = None,
) -> WindowCallback:
    """Return a ``session_input_callback`` that shows the model the same window as
    :class:`WindowSession` with these arguments, followed by the new input.

    The new input is always kept whole; its tokens are reserved under ``max_tokens`` (so history
    plus new input fit). The SDK reads the whole history before calling a callback, so for long
    histories prefer ``WindowSession``, which reads only what it shows.
    """
    budget = WindowBudget(max_turns=max_turns, max_tokens=max_tokens)
    tokens = ItemTokens(token_estimator)

    async def combine(
        history: list[TResponseInputItem], new_items: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        shown = list(history) if micro_compaction is None else micro_compaction.shorten_all(history)
        if not budget.bounded:
            return shown + list(new_items)
        reserved = sum(await tokens.counts(new_items)) if budget.max_tokens is not None else 0
        counts = await tokens.counts(shown)
        start = plan_start(shown, counts, budget, complete=True, reserved_tokens=reserved)
        assert start is not None  # a complete history always decides
        return shown[start:] + list(new_items)

    return combine
