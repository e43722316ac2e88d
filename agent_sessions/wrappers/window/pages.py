"""Reading a history backwards, newest first, in pages that grow: a bounded window costs about
what it shows, not the whole history. ``older()`` returns the next older page (oldest first) and
whether the history's start is reached; ``summary`` holds items pinned before the history (a
compaction summary), read with the first page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.base import short_page_is_start

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session

MAX_PAGE = 4096


class HistoryChanged(Exception):
    """The history moved under a positional read; start again."""


class SequencedPages:
    """Pages by sequence number (``get_sequenced_items(before=)``): writes meanwhile do not
    shift them."""

    def __init__(self, session: Any, size: int) -> None:
        self.session = session
        self.size = size
        self.summary: list[TResponseInputItem] = []
        self._before: int | None = None
        self._short_means_start = short_page_is_start(session)

    async def older(self) -> tuple[list[TResponseInputItem], bool]:
        pairs = await self.session.get_sequenced_items(self.size, before=self._before)
        if not pairs:
            return [], True
        self._before = pairs[0][0]
        complete = self._short_means_start and len(pairs) < self.size
        self.size = min(self.size * 2, MAX_PAGE)
        return [item for _, item in pairs], complete


class PositionalPages:
    """Pages by re-reading the latest ``k`` items with a growing ``k`` (any Session). Sessions
    with a ``get_summary_and_tail(limit)`` method (``CompactionSession``) hand their summary over
    separately, so it can be pinned."""

    def __init__(self, session: Session, size: int) -> None:
        self.session = session
        self.size = size
        self.summary: list[TResponseInputItem] = []
        self._split = callable(getattr(session, "get_summary_and_tail", None))
        self._seen: list[TResponseInputItem] | None = None

    async def older(self) -> tuple[list[TResponseInputItem], bool]:
        if self._split:
            summary, got = await self.session.get_summary_and_tail(self.size)  # type: ignore[attr-defined]
            if self._seen is not None and summary != self.summary:
                raise HistoryChanged("the summary changed")
            self.summary = list(summary)
        else:
            got = await self.session.get_items(self.size)
        seen = self._seen or []
        older = got[: len(got) - len(seen)]
        if seen and got[len(got) - len(seen) :] != seen:
            raise HistoryChanged("items were added or removed meanwhile")
        self._seen = got
        complete = len(got) < self.size
        self.size *= 2  # every page re-reads the newer ones, so it must keep growing
        return older, complete
