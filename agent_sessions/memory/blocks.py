"""Core memory blocks: labelled values the agent always sees and edits, kept as a log.

Every write is a record carrying the version it was based on. Folding the log in commit order,
a record whose base is not the block's current version lost a race and is ignored; a writer
re-reads after appending and retries (or reports) when its record lost. So no update is lost,
no lock or private guard is needed, and every version stays in the history (undo).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.memory import Session

from ..errors import BlockConflictError, MemoryEditError
from ._log import ERASED, RecordLog

LABEL = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
DEFAULT_LIMIT = 2000
MAX_RETRIES = 16
NEAR_LIMIT = 0.9
"""A writable block this full (share of its limit) is near its limit: rendered with a
warning to shorten it, and logged by ``Memory.tidy``."""


@dataclass(frozen=True)
class Block:
    """One version of a block."""

    label: str
    value: str
    limit: int
    description: str
    read_only: bool
    version: int
    at: float


def check_label(label: object) -> str:
    """Return ``label`` if it is a valid block label, else raise MemoryEditError."""
    if not isinstance(label, str) or not LABEL.match(label):
        raise MemoryEditError(
            f"invalid block label {label!r}: use 1-64 characters a-z, 0-9 and _, "
            "starting with a letter (e.g. 'human')"
        )
    return label


def check_size(label: str, value: str, limit: int, fix: str) -> None:
    """Raise MemoryEditError when ``value`` is longer than ``limit`` characters."""
    if len(value) > limit:
        raise MemoryEditError(
            f"block '{label}' would be {len(value):,} of {limit:,} characters: {fix}"
        )


_CLOSING = re.compile(r"<([\\/])")
_SHOWN_CLOSING = re.compile(r"<\\([\\/])")


def shown(text: str) -> str:
    """``text`` as the prompt shows it: as stored, but a backslash after each ``<`` that
    starts ``</`` or ``<\\``, so no value can close its section, and ``unshown`` gives back
    exactly what is stored (test_the_model_can_quote_a_block_back_and_rethink_is_idempotent)."""
    return _CLOSING.sub(r"<\\\1", text)


def unshown(text: str) -> str:
    """Text the model copied from the prompt, as stored (``shown`` undone)."""
    return _SHOWN_CLOSING.sub(r"<\1", text)


def is_near_limit(block: Block) -> bool:
    """Whether ``block`` is writable and at least ``NEAR_LIMIT`` of its limit full."""
    return not block.read_only and len(block.value) >= NEAR_LIMIT * block.limit


class Blocks:
    """The blocks of one memory scope, in its side store ``store``."""

    def __init__(self, store: Session, clock: Callable[[], float] = time.time) -> None:
        self._log = RecordLog(store)
        self._clock = clock
        self._current: dict[str, Block] = {}
        self._history: dict[str, list[Block]] = {}
        self._accepted: set[str] = set()

    async def _refresh(self) -> None:
        reloaded, records = await self._log.refresh()
        if reloaded:
            self._current, self._history, self._accepted = {}, {}, set()
        for record in records:
            if record.get("kind") != "block":
                continue
            label = record["label"]
            current = self._current.get(label)
            if record["base"] != (current.version if current else 0):
                continue  # based on a version that was already replaced: lost the race
            block = Block(
                label,
                record["value"],
                record["limit"],
                record["description"],
                record["read_only"],
                record["base"] + 1,
                record["at"],
            )
            self._current[label] = block
            self._history.setdefault(label, []).append(block)
            self._accepted.add(record["id"])

    async def all(self) -> list[Block]:
        """The current version of every block, in the order they were defined."""
        await self._refresh()
        return list(self._current.values())

    async def near_limit(self) -> list[Block]:
        """The writable blocks at least ``NEAR_LIMIT`` of their limit full."""
        return [b for b in await self.all() if is_near_limit(b)]

    async def get(self, label: str) -> Block:
        """The current version of block ``label``."""
        await self._refresh()
        return self._get(label)

    def _get(self, label: str) -> Block:
        block = self._current.get(check_label(label))
        if block is None:
            known = ", ".join(self._current) or "none yet"
            raise MemoryEditError(f"there is no block '{label}' (blocks: {known})")
        return block

    async def history(self, label: str) -> list[Block]:
        """Every version of block ``label``, oldest first."""
        await self._refresh()
        self._get(label)
        return list(self._history[label])

    async def delete(self, label: str) -> None:
        """Erase block ``label`` for good, every version of it (not an edit: its history goes
        too), in one store call; every reader drops it at its next read and ``define`` can
        create it anew. Erasing again removes what a racing writer stored for it after.
        Raises MemoryEditError when no record names ``label`` or the store cannot rewrite in
        place."""
        check_label(label)

        def change(record: dict[str, Any]) -> dict[str, Any] | None:
            mine = record.get("kind") == "block" and record.get("label") == label
            return dict(ERASED) if mine else None

        erased = await self._log.erase(change)
        await self._refresh()
        if not erased:
            self._get(label)  # raises: there is no such block

    async def _write(self, base: Block | None, block: Block) -> bool:
        record_id = uuid.uuid4().hex
        record: dict[str, Any] = {
            "kind": "block",
            "id": record_id,
            "base": base.version if base else 0,
            "label": block.label,
            "value": block.value,
            "limit": block.limit,
            "description": block.description,
            "read_only": block.read_only,
            "at": self._clock(),
        }
        await self._log.append(record)
        await self._refresh()
        return record_id in self._accepted

    async def define(
        self,
        label: str,
        value: str = "",
        *,
        limit: int = DEFAULT_LIMIT,
        description: str = "",
        read_only: bool = False,
    ) -> Block:
        """Create block ``label`` unless it exists; return its current version either way
        (so defining blocks at every start is safe)."""
        check_label(label)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise MemoryEditError(f"limit must be a positive int of characters, got {limit!r}")
        if not isinstance(value, str) or not isinstance(description, str):
            raise MemoryEditError("value and description must be str")
        check_size(label, value, limit, "pass a shorter value or a larger limit")
        await self._refresh()
        if label not in self._current:
            block = Block(label, value, limit, description, bool(read_only), 1, 0.0)
            await self._write(None, block)
        return self._get(label)

    async def edit(
        self,
        label: str,
        change: Callable[[Block], str],
        *,
        fix: str = "shorten it with memory_rethink",
        agent: bool = True,
        expected_version: int | None = None,
    ) -> Block:
        """Set block ``label`` to ``change(current)``, compare-and-set on its version.

        ``change`` runs again on the new current version when another writer won the race
        (so two inserts both land). ``agent`` edits refuse read-only blocks; every edit
        refuses a value above the limit. With ``expected_version``, a block that moved on
        raises BlockConflictError instead of re-applying.
        """
        for _attempt in range(MAX_RETRIES):
            current = await self.get(label)
            if agent and current.read_only:
                raise MemoryEditError(
                    f"block '{label}' is read-only: you cannot change it; keep the "
                    "information elsewhere (another block or archival_memory_insert)"
                )
            if expected_version is not None and current.version != expected_version:
                raise BlockConflictError(
                    f"block '{label}' is at version {current.version}, not "
                    f"{expected_version}: read it again and redo the edit"
                )
            value = change(current)
            if not isinstance(value, str):
                raise MemoryEditError(f"a block value must be str, got {type(value).__name__}")
            check_size(label, value, current.limit, fix)
            proposed = Block(
                label,
                value,
                current.limit,
                current.description,
                current.read_only,
                current.version + 1,
                0.0,
            )
            if await self._write(current, proposed):
                return self._get(label)
        raise BlockConflictError(
            f"block '{label}' kept changing under {MAX_RETRIES} attempts; try the edit again"
        )

    async def insert(self, label: str, new_str: str, insert_line: int = -1) -> Block:
        """Insert ``new_str`` after line ``insert_line`` (0: at the top; -1: at the end)."""

        def change(block: Block) -> str:
            lines = block.value.split("\n") if block.value else []
            if insert_line == -1:
                at = len(lines)
            elif 0 <= insert_line <= len(lines):
                at = insert_line
            else:
                raise MemoryEditError(
                    f"insert_line {insert_line} is outside block '{label}' "
                    f"(it has {len(lines)} lines): use -1 for the end or 0..{len(lines)}"
                )
            return "\n".join([*lines[:at], new_str, *lines[at:]])

        return await self.edit(
            label,
            change,
            fix="insert less, or shorten it first with memory_replace or memory_rethink",
        )

    async def replace(self, label: str, old_str: str, new_str: str) -> Block:
        """Replace the one occurrence of ``old_str`` by ``new_str``."""

        def change(block: Block) -> str:
            if not old_str:
                raise MemoryEditError("old_str must not be empty; to add text use memory_insert")
            found = block.value.count(old_str)
            if found != 1:
                how = (
                    "copy it exactly from the block"
                    if not found
                    else f"it occurs {found} times: include more surrounding text"
                )
                raise MemoryEditError(f"old_str must occur exactly once in block '{label}'; {how}")
            return block.value.replace(old_str, new_str)

        return await self.edit(
            label, change, fix="use a shorter new_str, or shorten the block with memory_rethink"
        )

    async def rethink(self, label: str, new_memory: str, *, agent: bool = True) -> Block:
        """Replace the whole value of block ``label`` (the old one stays in the history)."""
        return await self.edit(
            label, lambda _b: new_memory, fix="write a shorter version", agent=agent
        )

    async def restore(self, label: str, version: int) -> Block:
        """Make the value of ``version`` current again (undo; a new version is written)."""
        old = [b for b in await self.history(label) if b.version == version]
        if not old:
            raise MemoryEditError(f"block '{label}' has no version {version}")
        return await self.edit(
            label,
            lambda _b: old[0].value,
            agent=False,
            fix="the old value no longer fits the block's limit",
        )
