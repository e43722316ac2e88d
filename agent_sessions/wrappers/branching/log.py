"""Branch metadata as an append-only log of operations in a side store.

Every change (create, switch, move a fork point, delete, reset) is one appended record; the state
is the fold of the log in commit order, so concurrent writers never lose each other's changes and
a conflict is decided by log order. Every :data:`CHECKPOINT_EVERY` records a writer appends a
checkpoint, so a new object folds from the newest :data:`PAGE` records (docs/branching.md).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from agents.memory import Session

from ...core.capabilities import Read
from ...core.commit import Append, commit
from ...errors import CommitConflictError
from .store import MAIN, read_family, read_rows
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
        if not (
            isinstance(segment, list)
            and len(segment) == 2
            and isinstance(segment[0], str)
            and (segment[0] == MAIN or (segment[0].isalnum() and len(segment[0]) <= 40))
            and (segment[1] is None or isinstance(segment[1], int))
        ):
            return None
        out.append((segment[0], segment[1]))
    if out[-1][1] is not None:
        return None
    return tuple(out)


MAIN_LINEAGE: Lineage = ((MAIN, None),)

CHECKPOINT_EVERY = 64
"""Records between checkpoints of the folded state."""
PAGE = 2 * CHECKPOINT_EVERY
"""Records a new object reads first; a checkpoint is nearly always among them."""


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

    def to_record(self, upto: int) -> dict[str, Any]:
        """A checkpoint record: this state, the fold of the records numbered up to ``upto``."""
        return {
            "op": "checkpoint",
            "upto": upto,
            "used": sorted(self.used),
            "current": self.current,
            "keys": sorted(self.keys),
            "deleted_by": self.deleted_by,
            "branches": [
                [b.name, encode_lineage(b.lineage), b.created_at, b.op_id, b.moved_by]
                for b in self.branches.values()
            ],
        }

    @classmethod
    def from_record(cls, record: Any) -> BranchState | None:
        """The state a checkpoint record holds; None when it is malformed."""
        try:
            state = cls()
            state.used = {str(name) for name in record["used"]}
            state.keys = {str(key) for key in record["keys"]}
            state.deleted_by = dict(record["deleted_by"])
            state.branches = {}
            for name, lineage, created_at, op_id, moved_by in record["branches"]:
                decoded = _decode_lineage(lineage)
                if not isinstance(name, str) or decoded is None:
                    return None
                state.branches[name] = Branch(name, decoded, created_at, op_id, moved_by)
            state.current = record["current"]
            if MAIN not in state.branches or state.current not in state.branches:
                return None
        except (KeyError, TypeError, ValueError):
            return None
        return state

    def apply(self, record: Any) -> None:
        """Apply one log record; records that do not fit are ignored (and logged)."""
        op = record.get("op") if isinstance(record, dict) else None
        name = record.get("name") if isinstance(record, dict) else None
        if op == "checkpoint":
            return  # a summary of records already applied
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
                if record.get("switch", True):  # False: a "switch" record follows
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
                lineage is not None
                and branch is not None
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

    def shares(self, key: str, seq: int | None = None, *, besides: str | None = None) -> bool:
        """Whether a branch other than ``besides`` reads storage ``key`` (sees its item
        ``seq``, when given)."""
        return any(
            k == key and (seq is None or before is None or seq < before)
            for name, b in self.branches.items()
            if name != besides
            for k, before in b.lineage
        )


_WRITTEN: dict[Any, None] = {}
"""Store keys of branch logs this process has seen holding records (bounded, oldest dropped)."""
_WRITTEN_MAX = 4096


class BranchLog:
    """Keeps a :class:`BranchState` in step with the log session."""

    def __init__(self, session: Session, on_reset: Callable[[], None] | None = None) -> None:
        self.session = session
        self.state = BranchState()
        self.applied = 0
        """The number of the newest record applied (0: none)."""
        self._uncovered = 0
        """Records applied since the newest checkpoint seen (all of them when none)."""
        self._on_reset = on_reset

    async def sync(self) -> BranchState:
        """Apply the records appended since the last sync (by anyone); return the state. When
        the last applied record is gone (expired, erased), fold afresh as a new object would."""
        if not self.applied:
            return await self._fold_fresh(await read_rows(self.session, PAGE))
        return await self._apply(await read_rows(self.session, after=self.applied - 1))

    async def sync_with(self, reads: list[Read]) -> tuple[BranchState, list[list[Any]]]:
        """``sync`` and the rows of ``reads`` (see :func:`read_family`), read together: one
        round trip when the store serves family reads at once."""
        fresh = not self.applied
        log_read: Read = (
            (self.session, PAGE, None, None)
            if fresh
            else (self.session, None, self.applied - 1, None)
        )
        log_rows, *rows = await read_family([log_read, *reads])
        state = await (self._fold_fresh(log_rows) if fresh else self._apply(log_rows))
        return state, rows

    def may_be_empty(self) -> bool:
        """Whether a log this object has not read yet may hold no record (False once this
        process saw it hold one: then guarding on an empty log is a wasted round trip)."""
        key = self._key()
        return key is None or key not in _WRITTEN

    def _key(self) -> Any:
        located = getattr(self.session, "store_key", None)
        where = located() if callable(located) else None
        return None if where is None else (*where, self.session.session_id)

    def _note_written(self) -> None:
        key = self._key()
        if key is not None and key not in _WRITTEN:
            if len(_WRITTEN) >= _WRITTEN_MAX:
                del _WRITTEN[next(iter(_WRITTEN))]
            _WRITTEN[key] = None

    async def _apply(self, rows: list[tuple[int, Any]]) -> BranchState:
        if self.applied:
            if rows and rows[0][0] == self.applied:
                rows = rows[1:]
            else:
                self.state = BranchState()
                self.applied = self._uncovered = 0
                if self._on_reset is not None:
                    self._on_reset()
                return await self._fold_fresh(await read_rows(self.session, PAGE))
        self._fold(rows)
        return self.state

    async def _fold_fresh(self, page: list[tuple[int, Any]]) -> BranchState:
        """Fold the state from the newest ``PAGE`` records: from the newest checkpoint among
        them, else (a log without one near its end) from all records."""
        rows = page
        found = _newest_checkpoint(rows)
        if found is None and len(rows) >= PAGE:
            rows = await read_rows(self.session)
            found = _newest_checkpoint(rows)
        if found is not None:
            state, upto = found
            if len(rows) >= PAGE and rows[0][0] > upto + 1:  # records after it fell off the page
                rows = await read_rows(self.session, after=upto)
            self.state, self.applied, self._uncovered = state, upto, 0
            rows = [row for row in rows if row[0] > upto]
        self._fold(rows)
        return self.state

    def _fold(self, rows: list[tuple[int, Any]]) -> None:
        if rows and not self.applied:
            self._note_written()
        for seq, record in rows:
            self.state.apply(record)
            self.applied = max(self.applied, seq)
            op = record.get("op") if isinstance(record, dict) else None
            self._uncovered = 0 if op == "checkpoint" else self._uncovered + 1
            if op == "reset" and self._on_reset is not None:
                self._on_reset()  # storages were cleared: cached scans are void

    async def append(self, record: dict[str, Any]) -> BranchState:
        """Append ``record`` and return the state including it (and anything before it);
        every ``CHECKPOINT_EVERY`` records, append a checkpoint too."""
        await self.session.add_items([record])  # type: ignore[list-item]
        return await self._appended()

    async def _appended(self) -> BranchState:
        state = await self.sync()
        if self._uncovered >= CHECKPOINT_EVERY:
            await self.session.add_items([state.to_record(self.applied)])  # type: ignore[list-item]
            self._uncovered = 0
        return state

    async def append_op(self, record: dict[str, Any]) -> tuple[BranchState, str]:
        """``append`` ``record`` with a new ``id``; return the state and the id."""
        op_id = uuid.uuid4().hex
        return await self.append({**record, "id": op_id}), op_id

    async def append_op_if_newest(
        self, record: dict[str, Any], storage: Session, seq: int
    ) -> tuple[BranchState, str] | None:
        """``append_op`` only while ``storage``'s newest number is ``seq``, in one commit
        (``core.commit``); None: nothing appended (it changed: read again)."""
        op_id = uuid.uuid4().hex
        try:
            await commit([Append(self.session, [{**record, "id": op_id}])], [(storage, seq)])
        except CommitConflictError:
            return None
        return await self._appended(), op_id


def _newest_checkpoint(rows: list[tuple[int, Any]]) -> tuple[BranchState, int] | None:
    """The state and record number of the newest valid checkpoint among ``rows``."""
    for _, record in reversed(rows):
        if isinstance(record, dict) and record.get("op") == "checkpoint":
            upto = record.get("upto")
            state = BranchState.from_record(record) if isinstance(upto, int) else None
            if state is not None and isinstance(upto, int):
                return state, upto
            logger.warning("branch log: malformed checkpoint ignored")
    return None
