"""An append-only log of JSON records kept in one side store, read incrementally."""

from __future__ import annotations

from typing import Any

from agents.memory import Session

from ..core.capabilities import Capability, supports


class RecordLog:
    """The records of ``store`` in commit order, cached in this object.

    A store with sequence numbers is read incrementally (only records after the last one
    seen, plus a count to notice an erase); any other store is read whole on every refresh.
    """

    def __init__(self, store: Session) -> None:
        self.store = store
        self.records: list[dict[str, Any]] = []
        self._last: int | None = None

    async def append(self, *records: dict[str, Any]) -> None:
        """Append ``records`` as one all-or-nothing batch."""
        await self.store.add_items(list(records))  # type: ignore[arg-type]

    async def refresh(self) -> tuple[bool, list[dict[str, Any]]]:
        """Read what was appended since the last refresh (by any writer). Return ``(reloaded,
        new)``: ``reloaded`` when the log was read from the start (``new`` is then all of it)."""
        if not supports(self.store, Capability.SEQUENCED):
            items: list[Any] = await self.store.get_items()
            self.records = [r for r in items if isinstance(r, dict)]
            return True, self.records
        store: Any = self.store
        new = await store.get_sequenced_items(after=self._last)
        reloaded = len(self.records) + len(new) != await store.count_items()
        if reloaded:  # erased or cut meanwhile (or grown during the count): start over
            new = await store.get_sequenced_items()
            self.records, self._last = [], None
        if new:
            self._last = new[-1][0]
        fresh = [item for _seq, item in new if isinstance(item, dict)]
        self.records.extend(fresh)
        return reloaded, fresh
