"""``WindowSession``: the model sees a bounded, valid suffix of the history; the store keeps all."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ...core.capabilities import Capability, supports
from ...core.options import check_int
from ..base import ContextForwardingWrapper
from ..compaction.boundary import _is_user_message as is_user_message
from ..compaction.tokens import TokenEstimator
from .micro import MicroCompaction
from .pages import HistoryChanged, PositionalPages, SequencedPages
from .plan import WindowBudget, plan_start
from .tokens import ItemTokens

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session

_FIRST_PAGE = 64
"""Items read first when no earlier read of this object taught a better size."""
_RETRIES = 5


class WindowSession(ContextForwardingWrapper):
    """A view of ``inner`` cut to the newest ``max_turns`` user turns and/or ``max_tokens``
    estimated tokens, optionally with older long texts shortened (micro-compaction).

    The cut never separates a tool call from its output, a reasoning item from the item after
    it, or an MCP approval request from its response (it moves forward to the next place where
    it does not). Writes, ``pop_item`` and ``clear_session`` go to ``inner`` unchanged; nothing
    stored is ever rewritten (``get_full_items`` reads the originals).

    The history is read newest first and only until the window is decided, so a window costs
    about what it shows. Over a ``CompactionSession`` the summary is kept in front of the window
    and counts against ``max_tokens`` (when it alone exceeds it, it is left out).

    Args:
        inner: any Session.
        max_turns: at most this many user turns of history (a turn starts at a user message).
        max_tokens: at most this many tokens of history (estimated as compaction does:
            tiktoken when installed, else an offline estimate).
        micro_compaction: shorten long texts of older turns on read (see
            :class:`MicroCompaction`); None shows items whole.
        token_estimator: how tokens are estimated.
        reserve_tokens: tokens kept free under ``max_tokens`` for the new input and
            instructions, which this layer does not see.

    ``get_items(limit)`` returns the latest ``limit`` items of the view (SDK semantics).
    ``run_compaction`` (the Runner's hook) exists exactly when ``inner`` has it, and calls it.
    """

    sdk_compaction_passthrough = True  # items are stored unchanged

    def __init__(
        self,
        inner: Session,
        *,
        max_turns: int | None = None,
        max_tokens: int | None = None,
        micro_compaction: MicroCompaction | None = None,
        token_estimator: TokenEstimator | None = None,
        reserve_tokens: int = 0,
    ) -> None:
        super().__init__(inner)
        self.budget = WindowBudget(max_turns=max_turns, max_tokens=max_tokens)
        if micro_compaction is not None and not isinstance(micro_compaction, MicroCompaction):
            raise TypeError(f"micro_compaction must be a MicroCompaction, got {micro_compaction!r}")
        check_int("reserve_tokens", reserve_tokens)
        self.micro_compaction = micro_compaction
        self.reserve_tokens = reserve_tokens
        self.tokens = ItemTokens(token_estimator)
        self._sequenced = supports(inner, Capability.SEQUENCED)
        run_compaction = getattr(inner, "run_compaction", None)
        if callable(run_compaction):
            # The Runner's compaction hook must reach a CompactionSession below this layer;
            # offered only then, so the SDK's detection of the hook stays truthful.
            self.run_compaction = run_compaction
        self._page = _FIRST_PAGE

    async def get_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items of the view (all of it when None)."""
        limit = self.resolve_limit(limit)
        if limit is not None and limit <= 0:
            return []
        if not self.budget.bounded:
            return self._shown(await self.in_scope(wrapper).get_items(limit), 0)
        view = await self.get_window(wrapper=wrapper)
        return view if limit is None else view[-limit:]

    async def get_full_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` stored items as stored: no window, nothing shortened."""
        return await self.in_scope(wrapper).get_items(limit)  # type: ignore[no-any-return]

    async def get_window(self, *, wrapper: Any = None) -> list[TResponseInputItem]:
        """Return the whole view (pinned summary, then the window)."""
        inner = self.in_scope(wrapper)
        for _ in range(_RETRIES - 1):
            with contextlib.suppress(HistoryChanged):
                return await self._window(inner)
        return await self._window(inner)

    def _shown(self, items: list[TResponseInputItem], later_users: int) -> list[TResponseInputItem]:
        micro = self.micro_compaction
        return list(items) if micro is None else micro.shorten_all(items, later_users)

    async def _window(self, inner: Any) -> list[TResponseInputItem]:
        pages = (SequencedPages if self._sequenced else PositionalPages)(inner, self._page)
        shown: list[TResponseInputItem] = []
        counts: list[int] = []
        users = 0
        while True:
            page, complete = await pages.older()
            page_shown = self._shown(page, users)
            users += sum(1 for item in page if is_user_message(item))
            shown = page_shown + shown
            if self.budget.max_tokens is not None:
                counts = await self.tokens.counts(page_shown) + counts
            else:  # only turns bound the window: no tokens to count
                counts = [0] * len(page_shown) + counts
            reserved = self.reserve_tokens
            summary = pages.summary
            if summary and self.budget.max_tokens is not None:
                summary_tokens = sum(await self.tokens.counts(summary))
                if reserved + summary_tokens <= self.budget.max_tokens:
                    reserved += summary_tokens
                else:
                    summary = []
            start = plan_start(
                shown, counts, self.budget, complete=complete, reserved_tokens=reserved
            )
            if start is not None:
                view = shown[start:]
                # The next read likely needs about as much (plus the item before it): one
                # page then; a longer next turn costs a second, doubled page.
                self._page = len(view) + len(view) // 8 + 2
                return list(summary) + view
