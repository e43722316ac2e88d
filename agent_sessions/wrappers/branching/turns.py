"""A persistent index of one storage's user messages, so turn ``N`` is found without a scan.

Kept in the side store ``turns.<storage key>`` as sealed blocks of ``BLOCK`` user-message
sequence numbers plus a head (``through``, the blocks, a tail). It is written only when a turn is
asked for, checked against the storage before use and caught up in O(new items); a missing block
makes it restart. Design and guarantees: docs/branching.md, "Turn positions".
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from agents.memory import Session

from ...core.capabilities import Capability, supports
from ..foreign import ForeignSession, layers
from .items import is_user_message
from .store import first_visible, newest_first, read_rows

BLOCK = 256
"""User messages per sealed block."""
COMPACT_EVERY = 64
"""Heads written since the last rewrite after which the index store is rewritten compactly
(each catch-up appends one head; old heads are garbage)."""


def indexable(storage: Session) -> bool:
    """Whether ``storage``'s numbers are never reused (no ``ForeignSession`` in its stack)."""
    return not any(isinstance(layer, ForeignSession) for layer in layers(storage))


class IndexBroken(Exception):
    """A block the head names is gone: the index must be rebuilt."""


class TurnIndex:
    """The user messages of one storage, by sequence number, kept in ``store``."""

    def __init__(self, storage: Session, store: Session, expires: bool) -> None:
        self.storage = storage
        self.store = store
        self.expires = expires
        self._loaded = False
        self.through = 0
        self.blocks: list[tuple[int, int, int]] = []
        """(record seq, first user seq, last user seq) of each sealed block, oldest first."""
        self.tail: list[int] = []
        self.skip = 0
        """How many of the oldest indexed user messages expired (0 without expiry)."""
        self._heads = 0
        self._cache: dict[int, list[int]] = {}

    async def sync(self) -> None:
        """Bring the index in step with the storage (reading only what changed), persist it
        when it changed, and find the expired prefix."""
        for _ in range(2):
            try:
                await self._sync()
                return
            except IndexBroken:
                self.invalidate()
        raise IndexBroken("turn index kept breaking")  # pragma: no cover - two concurrent rebuilds

    async def _sync(self) -> None:
        if not self._loaded:
            await self._load()
        changed = False
        if self.through:
            rows = await read_rows(self.storage, after=self.through - 1)
            if rows and rows[0][0] == self.through:
                rows = rows[1:]
            else:  # item `through` is gone: popped down to somewhere below, or cleared
                below = await read_rows(self.storage, 1, before=self.through)
                if below:
                    await self._cut(below[0][0])
                else:
                    self._reset()
                changed = True
        else:
            rows = await read_rows(self.storage)
        if rows:
            self.tail.extend(seq for seq, item in rows if is_user_message(item))
            self.through = rows[-1][0]
            changed = True
        if changed:
            await self._persist()
        self.skip = await self._expired() if self.expires else 0

    def invalidate(self) -> None:
        """Forget the index: the next ``sync`` rebuilds it from the storage."""
        self._reset()
        self._loaded = True

    def _reset(self) -> None:
        self.through, self.blocks, self.tail, self.skip, self._heads = 0, [], [], 0, 0

    async def _load(self) -> None:
        """Take the newest head of the store (none: an empty index)."""
        self._loaded = True
        async for _, record in newest_first(self.store, 4, 256):
            if isinstance(record, dict) and isinstance(record.get("through"), int):
                self._adopt(record)
                return

    def _adopt(self, head: dict[str, Any]) -> None:
        blocks, tail = head.get("blocks"), head.get("tail")
        if not (
            isinstance(blocks, list)
            and isinstance(tail, list)
            and all(isinstance(b, list) and len(b) == 3 for b in blocks)
        ):
            return  # not ours: an empty index is always safe
        try:  # all or nothing: a half-adopted head would give wrong turns
            adopted = (
                [(int(s), int(f), int(la)) for s, f, la in blocks],
                [int(s) for s in tail],
                int(head.get("heads", 0)),
            )
        except (TypeError, ValueError):
            return
        self.through = head["through"]
        self.blocks, self.tail, self._heads = adopted

    async def _cut(self, newest: int) -> None:
        """Drop the indexed user messages above item ``newest`` (they were popped)."""
        self.through = newest
        del self.tail[bisect_left(self.tail, newest + 1) :]
        while not self.tail and self.blocks and self.blocks[-1][2] > newest:
            block = await self._block(self.blocks.pop()[0])
            self.tail = block[: bisect_left(block, newest + 1)]

    async def _block(self, record: int) -> list[int]:
        found = self._cache.get(record)
        if found is None:
            rows = await read_rows(self.store, 1, before=record + 1)
            if not rows or rows[0][0] != record or not isinstance(rows[0][1], dict):
                raise IndexBroken(f"turn index block {record} is gone")
            block = rows[0][1].get("block")
            if not isinstance(block, list) or len(block) != BLOCK:
                raise IndexBroken(f"turn index record {record} is not a block")
            found = self._cache[record] = [int(s) for s in block]
        return found

    async def _persist(self) -> None:
        """Seal full blocks and append a head; rewrite the store now and then (old heads)."""
        compact = self._heads + 1 >= COMPACT_EVERY and supports(self.store, Capability.RANGE_DELETE)
        first_new: int | None = None
        if compact:
            contents = [await self._block(record) for record, _, _ in self.blocks]
            self.tail = [s for block in contents for s in block] + self.tail
            self.blocks = []
        sealed: list[list[int]] = []
        while len(self.tail) >= BLOCK:
            sealed.append(self.tail[:BLOCK])
            self.tail = self.tail[BLOCK:]
        if sealed:
            seqs = await self.store.add_sequenced_items(  # type: ignore[attr-defined]
                [{"block": block} for block in sealed]
            )
            first_new = seqs[0]
            for record, block in zip(seqs, sealed, strict=True):
                self._cache[record] = block
                self.blocks.append((record, block[0], block[-1]))
        self._heads = 0 if compact else self._heads + 1
        head = {
            "through": self.through,
            "blocks": [list(b) for b in self.blocks],
            "tail": self.tail,
            "heads": self._heads,
        }
        seqs = await self.store.add_sequenced_items([head])  # type: ignore[attr-defined]
        if compact:
            await self.store.delete_items(  # type: ignore[attr-defined]
                before=first_new if first_new is not None else seqs[0]
            )

    async def seq_at(self, k: int) -> int:
        """The sequence number of the ``k``-th indexed user message (from 0, expired ones
        included: the ``k``-th visible one is ``seq_at(k + skip)``)."""
        b, i = divmod(k, BLOCK)
        if b < len(self.blocks):
            return (await self._block(self.blocks[b][0]))[i]
        return self.tail[k - len(self.blocks) * BLOCK]

    async def users_below(self, before: int | None) -> int:
        """How many visible user messages have a sequence number below ``before``."""
        if before is None:
            return len(self.blocks) * BLOCK + len(self.tail) - self.skip
        full = bisect_left([last for _, _, last in self.blocks], before)
        count = full * BLOCK
        if full < len(self.blocks):
            count += bisect_left(await self._block(self.blocks[full][0]), before)
        else:
            count += bisect_left(self.tail, before)
        return max(0, count - self.skip)

    async def _expired(self) -> int:
        """How many of the oldest indexed user messages are no longer visible (expiry hides a
        prefix); one read when none are."""
        n = len(self.blocks) * BLOCK + len(self.tail)
        return await first_visible(self.storage, self.seq_at, n)


__all__ = ["BLOCK", "IndexBroken", "TurnIndex", "indexable"]
