"""Branch metadata as an append-only log of operations in a sibling session.

Every change (create, switch, move a fork point, delete, reset) is one appended JSON item; the
state is the fold of the log in commit order. Appends are atomic and ordered by the backend, so
concurrent writers (other objects, other processes) never lose each other's changes, and a
conflict (two creates of one name) is decided by log order: the first wins. A session object
keeps the folded state and reads only the records after the last one it applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from agents.memory import Session

from .store import MAIN, Read, read_family, read_rows
from .view import Lineage

logger = logging.getLogger("agent_sessions")


def now_text() -> str:
    """Return the current UTC time as SQLite's CURRENT_TIMESTAMP writes it."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def encode_lineage(lineage: Lineage) -> list[list[Any]]:
    return [[key, before] for key, before in lineage]


def _decode_lineage(value: Any) -> Lineage | None:
    if not isinstance(value, list) or not value:
        return None
    out = []
    for segment in value:
        if (
            not isinstance(segment, list)
            or len(segment) != 2
            or not isinstance(segment[0], str)
            or not (segment[0] == MAIN or (segment[0].isalnum() and len(segment[0]) <= 40))
            or not (segment[1] is None or isinstance(segment[1], int))
        ):
            return None
        out.append((segment[0], segment[1]))
    if out[-1][1] is not None:
        return None
    return tuple(out)


MAIN_LINEAGE: Lineage = ((MAIN, None),)


@dataclass
class Branch:
    """A live branch: its segments and where it came from."""

    name: str
    lineage: Lineage
    created_at: str | None = None
    op_id: str | None = None
    moved_by: str | None = None
    """The id of the lineage move now in force."""


class BranchState:
    """The fold of a branch log."""

    def __init__(self) -> None:
        self.used: set[str] = {MAIN}
        self.reset()

    def reset(self) -> None:
        self.branches: dict[str, Branch] = {MAIN: Branch(MAIN, MAIN_LINEAGE)}
        self.current = MAIN
        self.keys: set[str] = {MAIN}
        self.deleted_by: dict[str, Any] = {}
        """The id of the delete record that removed each branch (since the last reset)."""

    def apply(self, record: Any) -> None:
        """Apply one log record; records that do not fit are ignored (and logged)."""
        op = record.get("op") if isinstance(record, dict) else None
        name = record.get("name") if isinstance(record, dict) else None
        if op == "reset":
            self.reset()
        elif op == "create" and isinstance(name, str):
            lineage = _decode_lineage(record.get("lineage"))
            if lineage is None:
                logger.warning("branch log: malformed create record ignored: %r", record)
            elif name not in self.used:  # a name is taken once, even after delete or clear
                self.used.add(name)
                self.branches[name] = Branch(name, lineage, record.get("at"), record.get("id"))
                self.keys.update(key for key, _ in lineage)
                self.current = name
        elif op == "switch" and isinstance(name, str):
            if name in self.branches:
                self.current = name
        elif op == "lineage" and isinstance(name, str):
            lineage = _decode_lineage(record.get("lineage"))
            branch = self.branches.get(name)
            # A move applies only to the lineage it was computed from: of two objects moving
            # one branch at once, the first in log order wins and the other sees it lost.
            if (
                lineage is not None and branch is not None
                and _decode_lineage(record.get("from")) == branch.lineage
            ):
                branch.lineage = lineage
                branch.moved_by = record.get("id")
                self.keys.update(key for key, _ in lineage)
        elif op == "delete" and isinstance(name, str):
            if name != MAIN and self.branches.pop(name, None) is not None:
                self.deleted_by[name] = record.get("id")
                if self.current == name:
                    self.current = MAIN
        else:
            logger.warning("branch log: unknown record ignored: %r", record)

    def depended_on(self, key: str, seq: int, *, besides: str) -> bool:
        """Whether a branch other than ``besides`` sees item ``seq`` of storage ``key``."""
        for name, branch in self.branches.items():
            if name == besides:
                continue
            for seg_key, before in branch.lineage:
                if seg_key == key and (before is None or seq < before):
                    return True
        return False

    def shares(self, key: str, *, besides: str) -> bool:
        """Whether a branch other than ``besides`` reads storage ``key``."""
        return any(
            key == k for name, b in self.branches.items() if name != besides for k, _ in b.lineage
        )

    def referenced(self, key: str) -> bool:
        return any(key == k for b in self.branches.values() for k, _ in b.lineage)


class BranchLog:
    """Keeps a :class:`BranchState` in step with the log session."""

    def __init__(self, session: Session, on_reset: Callable[[], None] | None = None) -> None:
        self.session = session
        self.state = BranchState()
        self._applied = 0
        self._on_reset = on_reset

    async def sync(self) -> BranchState:
        """Apply the records appended since the last sync (by anyone); return the state.

        The last applied record is read again: when it is gone (the log expired or was
        erased with its family), the state is folded afresh from what the log still holds,
        so this object shows what a new one would."""
        return await self._apply(await read_rows(self.session, after=self._after()))

    async def sync_with(self, reads: list[Read]) -> tuple[BranchState, list[list[Any]]]:
        """``sync`` and the rows of ``reads`` (see :func:`read_family`), read together: one
        round trip when the store serves family reads at once."""
        log_rows, *rows = await read_family([(self.session, None, self._after(), None), *reads])
        return await self._apply(log_rows), rows

    @property
    def applied(self) -> int:
        """The number of the newest record applied (0: none)."""
        return self._applied

    def _after(self) -> int | None:
        return self._applied - 1 if self._applied else None

    async def _apply(self, rows: list[tuple[int, Any]]) -> BranchState:
        if self._applied:
            if rows and rows[0][0] == self._applied:
                rows = rows[1:]
            else:
                self.state = BranchState()
                self._applied = 0
                if self._on_reset is not None:
                    self._on_reset()
                rows = await read_rows(self.session)
        for seq, record in rows:
            self.state.apply(record)
            self._applied = max(self._applied, seq)
            if self._on_reset is not None and isinstance(record, dict):
                if record.get("op") == "reset":
                    self._on_reset()  # storages were cleared: cached scans are void
        return self.state

    async def append(self, record: dict[str, Any]) -> BranchState:
        """Append ``record`` and return the state including it (and anything before it)."""
        await self.session.add_items([record])  # type: ignore[list-item]
        return await self.sync()
