"""A branch's view: a lineage of segments ``(storage key, before)``, each the items of that
storage below sequence number ``before`` (all when None; only the last is open), read newest
first, with a cached scan of their structure."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ...core.codec import dumps, loads
from ..foreign import expiring_layer
from .items import classify_message_type, extract_tool_name, is_user_message
from .store import Storages, first_visible, newest_first, read_rows
from .turns import IndexBroken, TurnIndex, indexable

Segment = tuple[str, "int | None"]
FROZEN_TAIL = 64
"""How many of the newest items below a fork point a view keeps in memory per segment."""
Lineage = tuple[Segment, ...]
_SEQ = itemgetter(0)


@dataclass
class Scan:
    """The structure of one storage's items up to sequence number ``through``: ``items`` holds
    ``(seq, message type, tool name)`` of each, ``users`` ``(seq, content)`` of each user
    message."""

    through: int = 0
    items: list[tuple[int, str, str | None]] = field(default_factory=list)
    users: list[tuple[int, Any]] = field(default_factory=list)

    def add(self, rows: list[tuple[int, Any]]) -> None:
        for seq, item in rows:
            self.items.append((seq, classify_message_type(item), extract_tool_name(item)))
            if is_user_message(item):
                self.users.append((seq, item.get("content", "")))
            self.through = max(self.through, seq)

    def _keep_below(self, bound: int) -> None:
        del self.items[self.items_below(bound) :], self.users[self.users_below(bound) :]

    def drop_last(self, seq: int) -> bool:
        """Forget the newest item if it is ``seq`` (it was popped); return whether it was."""
        if not self.items or self.items[-1][0] != seq:
            return False
        self._keep_below(seq)
        return True

    def cut(self, newest: int | None) -> bool:
        """Forget the items after ``newest`` (they were popped: pops take the newest first, so
        the items up to a surviving one are intact); False when ``newest`` is not known here."""
        k = self.items_below(newest) if newest is not None else 0
        if newest is None or k == len(self.items) or self.items[k][0] != newest:
            return False
        self._keep_below(newest + 1)
        self.through = newest
        return True

    def drop_first(self, n: int) -> None:
        """Forget the oldest ``n`` items (they expired)."""
        if n <= 0:
            return
        oldest_kept = self.items[n][0] if n < len(self.items) else self.through + 1
        del self.items[:n], self.users[: self.users_below(oldest_kept)]

    def items_below(self, before: int | None) -> int:
        return len(self.items) if before is None else bisect_left(self.items, before, key=_SEQ)

    def users_below(self, before: int | None) -> int:
        return len(self.users) if before is None else bisect_left(self.users, before, key=_SEQ)


@dataclass
class Turn:
    """One user turn of a view (``below``: the number of the item just below its user
    message in the same storage, None when there is none or it was not read)."""

    number: int
    segment: int
    seq: int
    content: Any
    below: int | None = None


class View:
    """Reads views over :class:`Storages`; per-storage scans are cached, checked with one
    single-row read before use and extended with the items after them (O(new items))."""

    def __init__(self, storages: Storages) -> None:
        self.storages = storages
        self._scans: dict[str, Scan] = {}
        self._frozen: dict[Segment, tuple[bool, list[tuple[int, str]]]] = {}
        self._expiring: dict[str, bool] = {}
        self._indexes: dict[str, TurnIndex | None] = {}

    def _expires(self, key: str) -> bool:
        """Whether storage ``key``'s oldest items vanish from reads on their own (a
        TTLSession in its stack): then rows cached below a fork point or in a scan expire too."""
        if key not in self._expiring:
            self._expiring[key] = expiring_layer(self.storages.storage(key)) is not None
        return self._expiring[key]

    def forget(self) -> None:
        """Drop every cache (the storages were cleared)."""
        self._scans.clear()
        self._frozen.clear()
        self._indexes.clear()

    def popped(self, key: str, seq: int) -> None:
        """Note that item ``seq`` of storage ``key`` was popped, so its scan stays usable."""
        scan = self._scans.get(key)
        # An item newer than the scan (appended since it was last extended) was never in it:
        # the scan stays valid as it is.
        if scan is not None and seq <= scan.through and not scan.drop_last(seq):
            del self._scans[key]

    async def read(
        self, lineage: Lineage, limit: int | None, tail: list[tuple[int, Any]] | None = None
    ) -> list[Any]:
        """Return the latest ``limit`` items of the view (all when None), oldest first;
        ``tail`` is the last (open) segment's rows when already read with that ``limit``."""
        out: list[Any] = []
        remaining = limit
        for key, before in reversed(lineage):
            if tail is not None:
                rows, tail = tail, None
            elif (
                before is not None
                and remaining is not None
                and remaining <= FROZEN_TAIL
                and not self._expires(key)
            ):
                rows = await self._frozen_rows(key, before, remaining)
            else:
                rows = await read_rows(self.storages.storage(key), remaining, before=before)
            out[:0] = [item for _, item in rows]
            if remaining is not None:
                remaining -= len(rows)
                if remaining <= 0:
                    break
        return out

    async def _frozen_rows(self, key: str, before: int, want: int) -> list[tuple[int, Any]]:
        """The latest ``want`` (<= FROZEN_TAIL) rows of storage ``key`` below ``before``,
        cached: items below a fork point never change (pops hide them; a clear resets caches)."""
        cached = self._frozen.get((key, before))
        if cached is None or (len(cached[1]) < want and not cached[0]):
            rows = await read_rows(self.storages.storage(key), FROZEN_TAIL, before=before)
            if len(self._frozen) >= 512:
                self._frozen.clear()
            cached = (len(rows) < FROZEN_TAIL, [(seq, dumps(item)) for seq, item in rows])
            self._frozen[(key, before)] = cached
        # Fresh objects per call, as a read from the store would give.
        return [(seq, loads(text)) for seq, text in cached[1][-want:]] if want else []

    async def newest(self, lineage: Lineage) -> tuple[int, int, Any] | None:
        """Return ``(segment index, seq, item)`` of the view's newest item, or None."""
        for index in range(len(lineage) - 1, -1, -1):
            key, before = lineage[index]
            rows = await read_rows(self.storages.storage(key), 1, before=before)
            if rows:
                return index, rows[0][0], rows[0][1]
        return None

    async def scan(self, key: str, before: int | None) -> Scan:
        """Return a scan of storage ``key`` complete at least below ``before``."""
        session = self.storages.storage(key)
        cached = self._scans.get(key)
        if cached is not None:
            # Pops take the newest item first, so the cached items below `upto` are all still
            # there exactly when the newest of them is: one indexed row read, not a count; a
            # surviving older one means pops reached down to it, and the scan is cut there.
            covered = before is not None and cached.through >= before - 1
            upto = before if covered else cached.through + 1
            known = cached.items_below(upto)
            newest = await read_rows(session, 1, before=upto)
            top = newest[0][0] if newest else None
            if top != (cached.items[known - 1][0] if known else None) and not cached.cut(top):
                cached = None  # cleared (or expired) below what the scan knows: rebuild
            else:  # (after a cut, nothing lies between `top` and `upto`: still covered)
                if self._expires(key):
                    await _drop_expired(session, cached)
                if not covered:
                    cached.add(await read_rows(session, after=cached.through))
        if cached is None:
            cached = Scan()
            cached.add(await read_rows(session))
            self._scans[key] = cached
        return cached

    async def scans(self, lineage: Lineage) -> list[Scan]:
        return [await self.scan(key, before) for key, before in lineage]

    def _index(self, key: str) -> TurnIndex | None:
        """The turn index of storage ``key`` (None: its numbers may be reused; scan it)."""
        if key not in self._indexes:
            storage = self.storages.storage(key)
            self._indexes[key] = (
                TurnIndex(storage, self.storages.side(f"turns.{key}"), self._expires(key))
                if indexable(storage)
                else None
            )
        return self._indexes[key]

    async def clear_indexes(self, keys: set[str]) -> None:
        """Delete the turn indexes of storages ``keys`` (their items were deleted)."""
        for key in sorted(keys):
            if self._index(key) is not None:
                await self.storages.side(f"turns.{key}").clear_session()
            self._indexes.pop(key, None)

    async def turn(self, lineage: Lineage, number: int) -> Turn | None:
        """Return user turn ``number`` (from 1) of the view, or None (from the storages' turn
        indexes; a scan for storages that cannot have one)."""
        if number < 1:
            return None
        for _ in range(2):
            indexes = [self._index(key) for key, _ in lineage]
            if any(index is None for index in indexes):
                break
            try:
                return await self._indexed_turn(lineage, number, indexes)  # type: ignore[arg-type]
            except IndexBroken:
                for index in indexes:
                    index.invalidate()  # type: ignore[union-attr]
        return await self._scanned_turn(lineage, number)

    async def _indexed_turn(
        self, lineage: Lineage, number: int, indexes: list[TurnIndex]
    ) -> Turn | None:
        seen = 0
        for segment, ((key, before), index) in enumerate(zip(lineage, indexes, strict=True)):
            await index.sync()
            users = await index.users_below(before)
            if number <= seen + users:
                seq = await index.seq_at(number - seen - 1 + index.skip)
                # The item itself (and the one below it), read back: the index can only
                # point at a user message.
                rows = await read_rows(index.storage, 2, before=seq + 1)
                if not rows or rows[-1][0] != seq or not is_user_message(rows[-1][1]):
                    raise IndexBroken(f"turn index of {key!r} points at a non-user item {seq}")
                below = rows[0][0] if len(rows) == 2 else None
                return Turn(number, segment, seq, rows[-1][1].get("content", ""), below)
            seen += users
        return None

    async def _scanned_turn(self, lineage: Lineage, number: int) -> Turn | None:
        seen = 0
        for index, (key, before) in enumerate(lineage):
            scan = await self.scan(key, before)
            users = scan.users_below(before)
            if number <= seen + users:
                seq, content = scan.users[number - seen - 1]
                k = scan.items_below(seq)
                return Turn(number, index, seq, content, scan.items[k - 1][0] if k else None)
            seen += users
        return None

    async def intact_below(self, lineage: Lineage, turn: Turn) -> bool:
        """Whether the items below ``turn`` in its storage are still all there: the newest of
        them is still ``turn.below`` (pops delete the newest first; on an expiring storage,
        none left also passes: the oldest vanish first)."""
        if turn.below is None:
            return True
        key = lineage[turn.segment][0]
        rows = await read_rows(self.storages.storage(key), 1, before=turn.seq)
        if not rows:
            return self._expires(key)
        return rows[-1][0] == turn.below  # type: ignore[no-any-return]

    async def turns(self, lineage: Lineage) -> list[Turn]:
        """Return every user turn of the view in order."""
        out: list[Turn] = []
        scans = await self.scans(lineage)
        for index, ((_, before), scan) in enumerate(zip(lineage, scans, strict=True)):
            for seq, content in scan.users[: scan.users_below(before)]:
                out.append(Turn(len(out) + 1, index, seq, content))
        return out

    async def newest_user(self, lineage: Lineage) -> tuple[str, int] | None:
        """Return ``(storage key, seq)`` of the view's newest user message, or None; reads
        backwards in growing pages (O(items of the newest turn))."""
        for key, before in reversed(lineage):
            async for seq, item in newest_first(self.storages.storage(key), 8, 512, before):
                if is_user_message(item):
                    return key, seq
        return None

    async def structure(self, lineage: Lineage) -> list[tuple[int, str, str | None]]:
        """Return ``(turn number, message type, tool name)`` of every item of the view."""
        out: list[tuple[int, str, str | None]] = []
        turn = 0
        for (_, before), scan in zip(lineage, await self.scans(lineage), strict=False):
            for _, kind, tool in scan.items[: scan.items_below(before)]:
                turn += kind == "user"
                out.append((turn, kind, tool))
        return out


async def _drop_expired(session: Any, scan: Scan) -> None:
    """Forget the scan's oldest items that expired since it was made (see ``first_visible``)."""

    async def seq_at(i: int) -> int:
        return scan.items[i][0]

    scan.drop_first(await first_visible(session, seq_at, len(scan.items)))
