"""``BranchingSession``: copy-on-write conversation branches over any Session.

A branch is a list of segments (storage, fork point): its parent's items up to the fork point,
then its own items, stored in a sibling of the inner session. Creating a branch appends one
metadata record and copies no item, so it costs the same at 10 turns as at 5000. ``main``'s
items are the inner session's own items, so wrapping an existing session keeps its history.
See docs/branching.md for the design and its guarantees.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agents import _debug

from ...core.base import pop_if_newest_is
from ...core.capabilities import Capability, supports
from ...core.commit import append_if_newest_of, pop_if_newest_of
from ...errors import BranchError, BranchNotFoundError
from ..base import SessionWrapper
from ..foreign import SiblingFactory, sequenced
from .items import content_matches, content_preview
from .log import BranchLog, BranchState, encode_lineage, now_text
from .log import logger as default_logger
from .store import MAIN, Storages
from .view import Lineage, View

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session

T = TypeVar("T")

_FOLLOWS = 8
"""Times an add follows a branch that concurrent pops keep moving before it gives up."""


class BranchingSession(SessionWrapper):
    """A session whose history can branch at any user turn; the SDK's branching API.

    ``get_items``/``add_items``/``pop_item``/``clear_session`` act on the current branch, which
    is stored with the conversation: other objects on the same id, and a restarted process,
    see the same current branch.

    Args:
        inner: the session that stores ``main`` (any Session; one without sequence numbers
            is numbered through ``ForeignSession``).
        sibling_factory: opens a session of the same store for a derived id; needed only when
            ``inner`` cannot open siblings itself (e.g. the SDK's own session classes).
        logger: where branch operations are logged.
    """

    numbering = staticmethod(sequenced)
    keeps = "a branch log and branch items per session id"

    def __init__(
        self,
        inner: Session,
        *,
        sibling_factory: SiblingFactory | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(inner, sibling_factory=sibling_factory)
        self._storages = Storages(self.inner, self.side_store)
        self._view = View(self._storages)
        self._log = BranchLog(self.side_store("branches"), on_reset=self._view.forget)
        self._lock = asyncio.Lock()
        self._logger = logger if logger is not None else default_logger

    @staticmethod
    def _lineage(state: BranchState, branch_id: str | None) -> Lineage | None:
        branch = state.branches.get(state.current if branch_id is None else branch_id)
        return branch.lineage if branch is not None else None

    async def _current(self) -> tuple[BranchState, str, Lineage]:
        state = await self._log.sync()
        return state, state.current, state.branches[state.current].lineage

    async def get_items(
        self, limit: int | None = None, branch_id: str | None = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items of the current branch (or of ``branch_id``;
        ``[]`` for an unknown branch), oldest first."""
        limit = self.resolve_limit(limit)
        if limit is not None and limit <= 0:
            return []
        async with self._lock:
            guess = self._lineage(self._log.state, branch_id)
            if guess is None:
                lineage = self._lineage(await self._log.sync(), branch_id)
                return await self._view.read(lineage, limit) if lineage is not None else []
            # Read the open segment's newest items with the log check, in one round trip where
            # the store serves both at once; when the branch did not move (the common case)
            # they stand, and older segments come from the view's cache of frozen rows.
            storage = self._storages.storage(guess[-1][0])
            state, (tail,) = await self._log.sync_with([(storage, limit, None, None)])
            lineage = self._lineage(state, branch_id)
            if lineage is None:
                return []
            return await self._view.read(lineage, limit, tail if lineage == guess else None)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the current branch as one all-or-nothing batch."""
        async with self._lock:
            if items and await self._add_if_log_unchanged(items):
                return
            _, name, lineage = await self._current()
            key = lineage[-1][0]
            storage = self._storages.storage(key)
            if not items:
                await storage.add_items(items)
                return
            if await self._add_if_log_unchanged(items):  # guarded on the log just read
                return
            # Unguarded: another object may meanwhile fork a child off this storage and pop the
            # branch below the fork point, which moves the branch to a fresh storage; then this
            # batch must follow it there.
            seqs = await storage.add_sequenced_items(items)  # type: ignore[attr-defined]
            await self._follow_moved_tail(name, key, seqs, items)

    async def _follow_moved_tail(
        self, name: str, key: str, seqs: list[int], items: list[TResponseInputItem]
    ) -> None:
        """Re-append ``items`` (stored as ``seqs`` in ``key``) to ``name``'s current storage if
        a concurrent pop put the branch's fork point on ``key`` below all of them (before any
        was seen), removing the copy left behind: a visible add leaves one copy, a failed one
        (BranchError) none."""
        for attempt in range(_FOLLOWS + 1):
            state = await self._log.sync()
            branch = state.branches.get(name)
            if branch is None:  # deleted meanwhile: its rows go with it (the delete came last)
                await self._drop_unseen(state, key, seqs)
                return
            bound = next((b for k, b in branch.lineage if k == key), None)
            # A pop moves the fork point onto the item it returns, so a bound at the batch's
            # first row means pops returned the whole batch: re-appending would resurrect it.
            if bound is None or bound >= min(seqs):
                return  # still the open tail, or the batch is (partly) seen or popped
            await self._drop_unseen(state, key, seqs)
            if attempt == _FOLLOWS:
                break
            key = branch.lineage[-1][0]
            storage = self._storages.storage(key)
            seqs = await storage.add_sequenced_items(items)  # type: ignore[attr-defined]
        raise BranchError(
            f"branch '{name}' kept moving while adding items (other objects popping it); "
            "nothing was added: try again"
        )

    async def _drop_unseen(self, state: BranchState, key: str, seqs: list[int]) -> None:
        """Pop ``seqs`` (this add's rows) off storage ``key``, newest first, while the newest
        row there is one of them and no branch sees it. A row another writer put above them
        stops this (they stay, seen by no branch)."""
        storage = self._storages.storage(key)
        ours = set(seqs)
        while ours:
            newest = await storage.get_sequenced_items(1)  # type: ignore[attr-defined]
            if not newest or newest[-1][0] not in ours or state.shares(key, newest[-1][0]):
                return
            ours.discard(newest[-1][0])
            await storage.pop_item()

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item of the current branch, or None.

        An item that another branch still sees (an ancestor's item below a fork point, or this
        branch's item that a child forked after) is hidden from this branch by moving its fork
        point down; it is never deleted. Other items are deleted.
        """
        async with self._lock:
            _, popped = await self._pop_if_log_unchanged()
            if popped is not None:
                return popped  # type: ignore[no-any-return]
            while True:  # each round that fails lost to another object's pop or write
                state, name, lineage = await self._current()
                key = lineage[-1][0]
                if not state.shares(key, besides=name):
                    # No other branch reads this storage, so its newest item is nobody else's:
                    # pop it without reading it first (empty: the newest is in a parent).
                    done, popped = await self._pop_own(key, None)
                    if not done:
                        continue  # a branch forked onto it meanwhile
                    if popped is not None:
                        return popped  # type: ignore[no-any-return]
                found = await self._view.newest(lineage)
                if found is None:
                    return None
                index, seq, item = found
                key = lineage[index][0]
                if index == len(lineage) - 1 and not state.shares(key, seq, besides=name):
                    done, popped = await self._pop_own(key, (seq, item))
                    if not done:
                        continue  # another object popped it or forked onto it meanwhile
                    self._view.popped(key, seq)
                    return popped  # type: ignore[no-any-return]
                own = index == len(lineage) - 1
                tail = (uuid.uuid4().hex, None) if own else lineage[-1]
                moved = (*lineage[:index], (key, seq), tail)
                record = {
                    "op": "lineage",
                    "name": name,
                    "from": encode_lineage(lineage),
                    "lineage": encode_lineage(moved),
                }
                if own:
                    # Only while the item is still its storage's newest: an add that landed
                    # above it meanwhile (and checked the log before this move) would be
                    # hidden by the move; read again then, never move unguarded
                    # (test_a_pop_moving_a_fork_point_never_hides_an_acknowledged_add).
                    storage = self._storages.storage(key)
                    moving = await self._log.append_op_if_newest(record, storage, seq)
                    if moving is None:
                        continue
                    state, op_id = moving
                else:
                    state, op_id = await self._log.append_op(record)
                branch = state.branches.get(name)
                if branch is not None and branch.moved_by == op_id:
                    return item  # type: ignore[no-any-return]
                # another object moved this branch first: pop its new newest

    async def _pop_own(self, key: str, found: tuple[int, Any] | None) -> tuple[bool, Any]:
        """Pop the newest item of storage ``key`` (the branch's own, seen by no other branch):
        only ``found`` ``(seq, item)`` when given, and only while the branch log holds nothing
        this object has not applied (no branch forked onto it since), in one commit where the
        store commits (COMMIT). ``(True, item or None)``; ``(False, None)``:
        something changed: read again. Elsewhere a pop of ``found`` is checked (it never
        removes an item below, which a child may see); without ``found``, a plain pop."""
        storage = self._storages.storage(key)
        if _guards(storage):
            return await pop_if_newest_of(
                storage,
                self._log.session,
                self._log.applied or None,
                newest=None if found is None else found[0],
            )
        if found is None:
            return True, await storage.pop_item()
        done, popped = await pop_if_newest_is(storage, found[1])
        return done and popped is not None, popped

    def _guarded_tail(self, *, popping: bool) -> Session | None:
        """The current branch's open storage when a write to it can be guarded, in the same
        round trip, by the branch log holding nothing this object has not applied (and, for
        a pop, no other branch reading the storage); None: take the general path."""
        state = self._log.state
        key = state.branches[state.current].lineage[-1][0]
        storage = self._storages.storage(key)
        if (
            not _guards(storage)
            or (popping and state.shares(key, besides=state.current))
            or not (self._log.applied or self._log.may_be_empty())
        ):
            return None
        return storage

    async def _add_if_log_unchanged(self, items: list[TResponseInputItem]) -> bool:
        """``add_items``' common case in one round trip; False: nothing was written."""
        guarded = self._guarded_tail(popping=False)
        return guarded is not None and (
            await append_if_newest_of(guarded, self._log.session, self._log.applied or None, items)
            is not None
        )

    async def _pop_if_log_unchanged(self) -> tuple[bool, Any]:
        """The common pop in one round trip, as ``pop_if_newest``: ``(False, None)``: nothing
        was popped (take the general path)."""
        guarded = self._guarded_tail(popping=True)
        if guarded is None:
            return False, None
        return await pop_if_newest_of(guarded, self._log.session, self._log.applied or None)

    async def clear_session(self) -> None:
        """Delete every branch and all their items, and make ``main`` current again.

        Branch names used before stay reserved (as in the SDK).
        """
        async with self._lock:
            state = await self._log.sync()
            for key in sorted(state.keys):
                await self._storages.storage(key).clear_session()
            await self._view.clear_indexes(state.keys)
            await self._after_clear()
            await self._log.append({"op": "reset"})
            self._view.forget()

    # -- hooks for AdvancedSession (called with the lock held) ---------------------------------

    async def _after_delete(self, branch: str) -> None:
        """Called after ``branch`` was deleted."""

    async def _after_clear(self) -> None:
        """Called when the session is being cleared, before the branches are reset."""

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Create a branch holding everything before user turn ``turn_number`` of the current
        branch, make it current and return its id.

        Raises:
            BranchError (a ValueError): the turn is not a user message of the current branch, or
                ``branch_name`` is blank or was used before in this session.
        """
        if branch_name is not None and not isinstance(branch_name, str):
            raise BranchError(f"branch_name must be a str or None, got {branch_name!r}")
        if branch_name is not None and not branch_name.strip():
            raise BranchError("Branch name cannot be empty")
        async with self._lock:
            state, source, lineage = await self._current()
            turn = None
            if isinstance(turn_number, int) and not isinstance(turn_number, bool):
                turn = await self._view.turn(lineage, turn_number)
            if turn is None:
                raise BranchError(
                    f"Turn {turn_number} does not contain a user message in branch '{source}'"
                )
            if branch_name is not None and branch_name in state.used:
                raise _used(branch_name)
            for attempt in range(8):  # an auto name another object took is picked again
                name = branch_name if branch_name is not None else _auto_name(state, turn_number)
                forked = (
                    *lineage[: turn.segment],
                    (lineage[turn.segment][0], turn.seq),
                    (uuid.uuid4().hex, None),
                )
                # Until this record no branch shares the items below the turn, so another
                # object's pops may delete them after the read: with items below, the branch
                # becomes current only once they are checked (else an add by another object
                # could land on a branch then withdrawn).
                checked = turn.below is not None
                state, op_id = await self._log.append_op(
                    {
                        "op": "create",
                        "name": name,
                        "parent": source,
                        "turn": turn_number,
                        "lineage": encode_lineage(forked),
                        "at": now_text(),
                        **({"switch": False} if checked else {}),
                    }
                )
                created = state.branches.get(name)
                if created is not None and created.op_id == op_id:
                    break
                if branch_name is not None or attempt == 7:
                    raise _used(name)
            if checked:
                if not await self._view.intact_below(lineage, turn):
                    await self._log.append_op({"op": "delete", "name": name})
                    raise BranchError(
                        f"Turn {turn_number} of branch '{source}' was popped by another object "
                        f"while branch '{name}' was being created; nothing was created"
                    )
                await self._log.append({"op": "switch", "name": name})
        # DONT_LOG_MODEL_DATA: the SDK's switch for logging conversation content
        shown = "" if _debug.DONT_LOG_MODEL_DATA else f" ('{content_preview(turn.content, 50)}')"
        self._logger.debug(
            "Created branch '%s' from turn %s%s in '%s'", name, turn_number, shown, source
        )
        return name

    async def create_branch_from_content(
        self, search_term: str, branch_name: str | None = None
    ) -> str:
        """Create a branch from the first user turn containing ``search_term``.

        Raises:
            BranchError (a ValueError): no user turn matches, or as ``create_branch_from_turn``.
        """
        matching = await self.find_turns_by_content(search_term)
        if not matching:
            raise BranchError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(matching[0]["turn"], branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make ``branch_id`` the current branch.

        Raises:
            BranchNotFoundError (a ValueError): no such branch.
        """
        async with self._lock:
            state = await self._log.sync()
            if branch_id not in state.branches:
                raise BranchNotFoundError(f"Branch '{branch_id}' does not exist")
            old = state.current
            if old != branch_id:
                await self._log.append({"op": "switch", "name": branch_id})
        self._logger.info("Switched from branch '%s' to '%s'", old, branch_id)

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Delete ``branch_id``; its id stays reserved. Items that other branches still see
        (through fork points) are kept; the rest are deleted.

        Raises:
            BranchError (a ValueError): blank id, ``main``, or the current branch without
                ``force`` (with ``force``, ``main`` becomes current first).
            BranchNotFoundError (a ValueError): no such branch, or another object deleted it
                (or cleared the session) first. A delete that raises changed nothing.
        """
        if not isinstance(branch_id, str) or not branch_id.strip():
            raise BranchError("Branch ID cannot be empty")
        if branch_id == MAIN:
            raise BranchError("Cannot delete the 'main' branch")
        async with self._lock:
            state = await self._log.sync()
            if branch_id == state.current and not force:
                raise BranchError(
                    f"Cannot delete current branch '{branch_id}'. Use force=True "
                    "or switch branches first"
                )
            branch = state.branches.get(branch_id)
            if branch is None:
                raise BranchNotFoundError(f"Branch '{branch_id}' does not exist")
            state, op_id = await self._log.append_op({"op": "delete", "name": branch_id})
            if state.deleted_by.get(branch_id) != op_id:  # another object deleted it first
                raise BranchNotFoundError(f"Branch '{branch_id}' does not exist")
            await self._after_delete(branch_id)
            gone = {k for k, _ in branch.lineage if k != MAIN and not state.shares(k)}
            for key in sorted(gone):
                await self._storages.storage(key).clear_session()
            await self._view.clear_indexes(gone)
        self._logger.info("Deleted branch '%s'", branch_id)

    async def list_branches(self) -> list[dict[str, Any]]:
        """Return ``{"branch_id", "message_count", "user_turns", "is_current", "created_at"}``
        for every branch, ``main`` first, then in creation order."""
        async with self._lock:
            state = await self._log.sync()
            out = []
            for name, branch in state.branches.items():
                scans = await self._view.scans(branch.lineage)
                pairs = list(zip(branch.lineage, scans, strict=False))
                out.append(
                    {
                        "branch_id": name,
                        "message_count": sum(s.items_below(b) for (_, b), s in pairs),
                        "user_turns": sum(s.users_below(b) for (_, b), s in pairs),
                        "is_current": name == state.current,
                        "created_at": branch.created_at,
                    }
                )
            return out

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """Return the user turns of a branch (current when None; ``[]`` when unknown):
        ``{"turn", "content"`` (cut to 100 characters), ``"full_content", "timestamp"``
        (None: items carry no time), ``"can_branch"}``."""
        return await self._turn_dicts(branch_id, 100)

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the user turns whose text contains ``search_term`` (ASCII case-insensitive),
        shaped as ``get_conversation_turns`` with the content uncut."""
        return [
            turn
            for turn in await self._turn_dicts(branch_id)
            if content_matches(turn["full_content"], search_term)
        ]

    async def get_conversation_by_turns(
        self, branch_id: str | None = None
    ) -> dict[int, list[dict[str, str | None]]]:
        """Return ``{turn: [{"type", "tool_name"}, ...]}`` for every item of a branch (items
        before the first user message are turn 0)."""
        turns: dict[int, list[dict[str, str | None]]] = {}
        for turn, kind, tool in await self._on_branch(branch_id, self._view.structure):
            turns.setdefault(turn, []).append({"type": kind, "tool_name": tool})
        return turns

    async def _turn_dicts(
        self, branch_id: str | None, cut: int | None = None
    ) -> list[dict[str, Any]]:
        return [
            {
                "turn": t.number,
                "content": content_preview(t.content, cut),
                "full_content": t.content,
                "timestamp": None,
                "can_branch": True,
            }
            for t in await self._on_branch(branch_id, self._view.turns)
        ]

    async def _on_branch(
        self, branch_id: str | None, read: Callable[[Lineage], Awaitable[list[T]]]
    ) -> list[T]:
        """``read`` of a branch's lineage (current when None; ``[]`` for an unknown branch)."""
        async with self._lock:
            lineage = self._lineage(await self._log.sync(), branch_id)
            return await read(lineage) if lineage is not None else []

    async def _branches(self) -> tuple[str, dict[str, Lineage]]:
        """The current branch and every branch's lineage (called with ``_lock`` held)."""
        state = await self._log.sync()
        return state.current, {name: b.lineage for name, b in state.branches.items()}


def _guards(storage: Session) -> bool:
    """Whether a write to ``storage`` can be guarded by the branch log in one commit, whose
    refusal always means "it moved" (COMMIT; a GUARDED_WRITE alone may also decline)."""
    return supports(storage, Capability.COMMIT)


def _used(name: str) -> BranchError:
    return BranchError(f"Branch ID '{name}' has already been used. Choose a new branch ID.")


def _auto_name(state: BranchState, turn_number: int) -> str:
    base = f"branch_from_turn_{turn_number}_{int(time.time())}"
    name, suffix = base, 1
    while name in state.used:
        suffix += 1
        name = f"{base}_{suffix}"
    return name
