"""An append-only log of JSON records kept in one side store, read incrementally."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.memory import Session

from ..core.capabilities import Capability, supports
from ..errors import MemoryEditError

ERASED: dict[str, Any] = {"kind": "erased"}
"""What an erased record is replaced by."""
ERASE_MARK: dict[str, Any] = {"kind": "erase"}
"""Appended after an erase: a reader that reads it re-reads the log from the start."""


def _is_erase_mark(item: Any) -> bool:
    return isinstance(item, dict) and item.get("kind") == "erase"


class RecordLog:
    """The records of ``store`` in commit order, cached in this object.

    A store with sequence numbers is read incrementally: the records after the last one seen,
    starting with that one again, so a log that was erased or rewritten meanwhile (the last
    record gone or different) is noticed and read from the start. Any other store is read
    whole on every refresh. ``key`` says which part of a record must stay the same (all of
    it by default; a log whose records are rewritten in place names the part that is not).
    """

    def __init__(
        self, store: Session, key: Callable[[Any], Any] | None = None, *, keep: bool = True
    ) -> None:
        self.store = store
        self.keep = keep
        """Keep the records read in ``records`` (False: a reader that folds them as they come,
        like the archive, so they are freed once applied)."""
        self.records: list[dict[str, Any]] = []
        self._key: Callable[[Any], Any] = key or (lambda item: item)
        self._last: tuple[int, Any] | None = None

    @property
    def position(self) -> tuple[int, Any] | None:
        """``(seq, key)`` of the last record read (None before any, or without numbers)."""
        return self._last

    def seek(self, seq: int, key: Any) -> None:
        """Continue after record ``seq`` (whose ``key`` is ``key``), as if the records up to it
        had been read: the next refresh reads only those after it (or, when that record is
        gone or different, the whole log)."""
        self.records, self._last = [], (seq, key)

    async def append(self, *records: dict[str, Any]) -> list[int] | None:
        """Append ``records`` as one all-or-nothing batch; return their sequence numbers
        (None for a store without them)."""
        if supports(self.store, Capability.SEQUENCED):
            store: Any = self.store
            return list(await store.add_sequenced_items(list(records)))
        await self.store.add_items(list(records))  # type: ignore[arg-type]
        return None

    async def refresh(self) -> tuple[bool, list[dict[str, Any]]]:
        """Read what was appended since the last refresh (by any writer). Return ``(reloaded,
        new)``: ``reloaded`` when the log was read from the start (``new`` is then all of it)."""
        if not supports(self.store, Capability.SEQUENCED):
            items: list[Any] = await self.store.get_items()
            records = [r for r in items if isinstance(r, dict)]
            self.records = records if self.keep else []
            return True, records
        store: Any = self.store
        reloaded = self._last is None
        if self._last is None:
            new = await store.get_sequenced_items()
        else:
            new = await store.get_sequenced_items(after=self._last[0] - 1)
            if new and new[0][0] == self._last[0] and self._key(new[0][1]) == self._last[1]:
                new = new[1:]
            else:  # the last record seen is gone or changed: erased meanwhile
                reloaded = True
                new = await store.get_sequenced_items()
        if not reloaded and any(_is_erase_mark(item) for _seq, item in new):
            # records before the cursor were erased in place: read the log again (test_memory_
            # features.py::test_erasing_a_passage_leaves_no_trace_and_warm_readers_drop_it)
            reloaded = True
            new = await store.get_sequenced_items()
        if reloaded:
            self.records, self._last = [], None
        if new:
            self._last = (new[-1][0], self._key(new[-1][1]))
        fresh = [item for _seq, item in new if isinstance(item, dict)]
        if self.keep:
            self.records.extend(fresh)
        return reloaded, fresh

    async def erase(self, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> int:
        """Replace for good, in one store call, each record for which ``change`` returns a new
        one (``ERASED`` leaves nothing of it), then append an erase mark that makes every
        reader read the log again; return how many were replaced. Raises MemoryEditError on
        a store that cannot rewrite in place (nothing is written)."""
        if not (
            supports(self.store, Capability.SEQUENCED) and supports(self.store, Capability.REWRITE)
        ):
            raise MemoryEditError(
                "this store cannot erase records in place (it declares no Capability.REWRITE)"
            )
        erased = await self.rewrite(change)
        if erased:  # after the rewrite: a crash in between leaves stale caches, no text
            await self.append(ERASE_MARK)
            # once more for records a concurrent writer appended while the first pass ran
            erased += await self.rewrite(change)
        return erased

    async def rewrite(self, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> int:
        """Replace in the store, in one step, each record (passed in commit order) for which
        ``change`` returns a new one; return how many were replaced. A store that cannot
        rewrite in place (no ``Capability.REWRITE``) is left as it is (0)."""
        if not (
            supports(self.store, Capability.SEQUENCED) and supports(self.store, Capability.REWRITE)
        ):
            return 0
        store: Any = self.store
        pairs = [
            (seq, new)
            for seq, item in await store.get_sequenced_items()
            if isinstance(item, dict)
            for new in [change(item)]
            if new is not None
        ]
        return int(await store.rewrite_items(pairs)) if pairs else 0
