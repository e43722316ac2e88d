"""Several objects on one session id, run concurrently under seeded, shrinkable schedules.

The library promises that concurrent writers (several objects or tasks on one session id) lose
nothing and never receive the same popped item twice, through every wrapper stack.
``tests/test_properties.py`` drives one object per session; here 2-3 objects (each its own
stack over its own :class:`YieldingSession` handle of one :class:`InMemoryStore`) run short
operation lists at once with ``asyncio.gather``. Every store primitive first gives the event
loop 0-3 turns drawn from one ``random.Random`` seeded by hypothesis, then runs atomically (one
server round trip): the schedule is a function of the seed, so a failure replays and shrinks.
Side stores (branch log, usage, compaction archive, TTL records) are opened through the inner
session as ``type(inner)(...)`` with ``_member_options``, so they yield too (checked below).

Operations: add a batch of 1-3 uniquely named items, pop, ``get_items(limit)``, and per stack
``compact()`` (identity summariser: the view stays exact) and a fork (``create_branch_from_turn``
then ``switch_to_branch("main")`` by the same object, so other objects' operations may land on
the new branch meanwhile: the current branch is family state). A round runs the objects' lists
at once, or quietly one after another. After each round, read quietly from every branch:

* an add that returned left all its items, one that raised (only ``BranchError`` "kept
  moving" is allowed) none of them;
* visible (summed over branches) + times popped is 1 for an item no branch could inherit, and
  between 1 and 1 + the branches created since it was added otherwise: nothing lost, nothing
  popped twice, nothing back after its pop;
* an item that left a branch since the last check was popped (at least once per branch it
  left), and an item of an earlier round never appears in a branch that did not show it;
* no branch (and no read during a round) shows an item twice, a batch keeps its order, and
  ``get_items(2)`` is the view's tail.

``INTERLEAVING_EXAMPLES`` sets the examples per stack (100 by default) and
``INTERLEAVING_OPS`` the most operations per object and round (3); ``make
test-interleavings-long`` runs 2000 examples of up to 6 operations and 8 rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sessions import BranchingSession, CompactionSession, InMemorySession, InMemoryStore
from agent_sessions.core.base import Row
from agent_sessions.errors import BranchError
from agent_sessions.wrappers.branching import log as branch_log
from tests.matrix import CLOCK, KEY, KEYRING, STACKS

EXAMPLES = int(os.environ.get("INTERLEAVING_EXAMPLES", "100"))
OPS = int(os.environ.get("INTERLEAVING_OPS", "3"))
"""The most operations per object in one round (at most 5 rounds, or 8 with OPS > 3)."""
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class YieldingSession(InMemorySession):
    """An in-memory session whose every primitive first yields to the event loop 0-3 times
    (drawn from ``rng``), then runs the real, atomic primitive: one server round trip."""

    def __init__(
        self,
        session_id: str,
        *,
        rng: random.Random,
        turns: Counter[str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(session_id, **options)
        self.rng = rng
        self.turns: Counter[str] = Counter() if turns is None else turns
        """Yields per session id, shared by the whole family (to check members yield)."""

    def _member_options(self) -> dict[str, Any]:
        return {**super()._member_options(), "rng": self.rng, "turns": self.turns}

    async def _yield(self) -> None:
        for _ in range(self.rng.randint(0, 3)):
            self.turns[self.session_id] += 1
            await asyncio.sleep(0)

    async def _append(self, payloads: list[str]) -> list[int]:
        await self._yield()
        return await super()._append(payloads)

    async def _commit(self, ops: Any, expect: Any) -> list[Any] | None:
        await self._yield()
        return await super()._commit(ops, expect)

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        await self._yield()
        return await super()._load(limit, after, before)

    async def _pop(self) -> str | None:
        await self._yield()
        return await super()._pop()

    async def _clear(self) -> None:
        await self._yield()
        await super()._clear()

    async def _rewrite(self, rows: list[Row]) -> int:
        await self._yield()
        return await super()._rewrite(rows)

    async def _delete_before(self, before: int) -> int:
        await self._yield()
        return await super()._delete_before(before)

    async def _replace_rows(self, expected: Any, payloads: list[str], prune: Any) -> bool:
        await self._yield()
        return await super()._replace_rows(expected, payloads, prune)

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        await self._yield()
        await super()._write_at(rows, created, updated)

    async def _pop_row_checked(self, check: Any) -> Any:
        await self._yield()
        return await super()._pop_row_checked(check)

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        await self._yield()
        return await super()._count(after, before)

    async def _search_text(
        self, words: list[str], limit: int, equal: Any, between: Any
    ) -> list[tuple[int, str, float]]:
        await self._yield()
        return await super()._search_text(words, limit, equal, between)


# -- the operations ----------------------------------------------------------------------------

ROLES = st.sampled_from(["user", "assistant"])
ADD = st.tuples(st.just("add"), st.lists(ROLES, min_size=1, max_size=3))
POP = st.tuples(st.just("pop"))
GET = st.tuples(st.just("get"), st.sampled_from([None, 1, 2, 3]))
FORK = st.tuples(st.just("fork"), st.integers(1, 4))  # create from a turn, then back to main
COMPACT = st.tuples(st.just("compact"))


def _rounds(extra: list[Any]) -> Any:
    op = st.one_of(ADD, POP, GET, *extra)
    per_object = st.lists(op, min_size=0, max_size=OPS)
    # (run quietly one object after another, the objects' operation lists)
    one_round = st.tuples(st.booleans(), st.lists(per_object, min_size=2, max_size=3))
    return st.lists(one_round, min_size=1, max_size=5 if OPS <= 3 else 8)


@dataclass
class Ledger:
    """What the objects did: each add's names and outcome, every popped name, and the round
    each branch was created in."""

    added: dict[str, tuple[int, int]] = field(default_factory=dict)
    """name -> (its add's id, the round it was issued in)"""
    outcome: dict[int, bool] = field(default_factory=dict)
    """add id -> whether it returned (False: it raised)"""
    batches: dict[int, list[str]] = field(default_factory=dict)
    popped: Counter[str] = field(default_factory=Counter)
    created: list[int] = field(default_factory=list)
    """the round each branch besides main was created in"""
    counter: int = 0


class Run:
    def __init__(self, stack: str, seed: int, objects: int) -> None:
        self.stack = stack
        self.rng = random.Random(seed)
        self.store = InMemoryStore()
        self.sid = f"ilv-{uuid.uuid4().hex[:10]}"
        self.turns: Counter[str] = Counter()
        self.objects = [self._open() for _ in range(objects)]
        self.ledger = Ledger()
        self.round = 0
        self.branches: list[str] = ["main"]
        self.views: dict[str, set[str]] = {}
        """Each branch's items at the last check."""
        self.popped_before: Counter[str] = Counter()

    def _open(self) -> Any:
        inner = YieldingSession(self.sid, store=self.store, rng=self.rng, turns=self.turns)
        return STACKS[self.stack](inner)

    @property
    def branching(self) -> bool:
        return isinstance(self.objects[0], BranchingSession)

    async def op(self, session: Any, op: tuple[Any, ...]) -> None:
        ledger = self.ledger
        kind = op[0]
        if kind == "add":
            ledger.counter += 1
            add_id = ledger.counter
            names = [f"i{add_id}.{k}" for k in range(len(op[1]))]
            for name in names:
                ledger.added[name] = (add_id, self.round)
            ledger.batches[add_id] = names
            items = [{"role": r, "content": n} for r, n in zip(op[1], names, strict=True)]
            try:
                await session.add_items(items)
            except BranchError as e:  # the documented give-up of an add on a moving branch
                assert "kept moving" in str(e), e
                ledger.outcome[add_id] = False
            else:
                ledger.outcome[add_id] = True
        elif kind == "pop":
            item = await session.pop_item()
            if item is not None:
                ledger.popped[item["content"]] += 1
        elif kind == "get":
            names = [i["content"] for i in await session.get_items(op[1])]
            assert len(names) == len(set(names)), f"a read shows an item twice: {names}"
            assert set(names) <= set(ledger.added), names
            if op[1] is not None:
                assert len(names) <= op[1]
        elif kind == "fork":
            ledger.counter += 1
            name = f"b{ledger.counter}"
            with contextlib.suppress(BranchError):  # no such turn: nothing created
                await session.create_branch_from_turn(op[1], name)
            await session.switch_to_branch("main")
        elif kind == "compact":
            await session.compact()
        else:  # pragma: no cover
            raise AssertionError(kind)

    async def play(self, quiet: bool, ops: list[list[tuple[Any, ...]]]) -> None:
        async def run(session: Any, mine: list[tuple[Any, ...]]) -> None:
            for op in mine:
                await self.op(session, op)

        pairs = list(zip(self.objects, ops, strict=False))
        if quiet:
            for session, mine in pairs:
                await run(session, mine)
        else:
            await asyncio.gather(*(run(s, mine) for s, mine in pairs))
        await self.check()
        self.round += 1

    async def check(self) -> None:
        """Conservation over every branch, read quietly by the first object."""
        s, ledger = self.objects[0], self.ledger
        views: dict[str, list[str]] = {}
        if self.branching:
            listed = await s.list_branches()
            current = [b["branch_id"] for b in listed if b["is_current"]]
            assert current == ["main"], f"every fork switched back to main, yet {current}"
            names = [b["branch_id"] for b in listed]
            new = [n for n in names if n not in self.branches]
            ledger.created += [self.round] * len(new)
            self.branches += new
            for name in names:
                views[name] = [i["content"] for i in await s.get_items(branch_id=name)]
        else:
            views["main"] = [i["content"] for i in await s.get_items()]
        main = [i["content"] for i in await s.get_items()]
        assert main == views["main"]
        assert [i["content"] for i in await s.get_items(2)] == main[-2:], "limit != the tail"

        popped_now = ledger.popped - self.popped_before
        lost: Counter[str] = Counter()
        for name, before in self.views.items():
            after = set(views[name])
            lost.update(n for n in before if n not in after)
            appeared = [
                n for n in views[name] if n not in before and ledger.added[n][1] != self.round
            ]
            assert not appeared, f"{appeared} came back into branch {name}: {views}"
        for name, count in lost.items():
            assert popped_now[name] >= count, (
                f"{name} left {count} branch(es) but was popped {popped_now[name]}x this round"
            )
        self.views = {name: set(view) for name, view in views.items()}
        self.popped_before = Counter(ledger.popped)

        visible: Counter[str] = Counter()
        for name, view in views.items():
            assert len(view) == len(set(view)), f"branch {name} shows an item twice: {view}"
            visible.update(view)
            for add_id, names in ledger.batches.items():  # a batch keeps its order
                mine = [n for n in view if ledger.added[n][0] == add_id]
                assert mine == [n for n in names if n in mine], (name, view)
        for name, (add_id, issued) in ledger.added.items():
            count = visible[name] + ledger.popped[name]
            if not ledger.outcome.get(add_id, True):
                assert count == 0, (
                    f"{name}: a failed add left it ({visible[name]} visible, "
                    f"popped {ledger.popped[name]}x)"
                )
                continue
            inheritors = sum(1 for r in ledger.created if r >= issued)
            assert count >= 1, f"{name} was lost (added, never popped, not visible)"
            assert count <= 1 + inheritors, (
                f"{name}: visible in {visible[name]} branch(es) and popped "
                f"{ledger.popped[name]}x, but at most {1 + inheritors} branch(es) held it "
                f"(views {views}, popped {dict(ledger.popped)})"
            )

    async def close(self) -> None:
        for s in self.objects:
            result = s.close()
            if asyncio.iscoroutine(result) or hasattr(result, "__await__"):
                await result


@pytest.fixture(scope="module", autouse=True)
def _small_branch_log_pages() -> Iterator[None]:
    """Checkpoint the branch log often, as the stateful property test does."""
    saved = branch_log.CHECKPOINT_EVERY, branch_log.PAGE
    branch_log.CHECKPOINT_EVERY, branch_log.PAGE = 3, 5
    CLOCK.offset = 0.0
    KEYRING.clear()
    KEYRING["k0"] = KEY
    yield
    branch_log.CHECKPOINT_EVERY, branch_log.PAGE = saved


INTERLEAVED_STACKS = list(STACKS)


def _extra_ops(stack: str) -> list[Any]:
    probe = STACKS[stack](InMemorySession("probe"))
    extra: list[Any] = []
    if isinstance(probe, BranchingSession):
        extra.append(FORK)
    if isinstance(probe, CompactionSession):
        extra.append(COMPACT)
    return extra


@pytest.mark.parametrize("stack", INTERLEAVED_STACKS)
def test_concurrent_objects_lose_nothing_and_pop_each_item_once(stack: str) -> None:
    @SETTINGS
    @given(
        seed=st.integers(0, 2**32 - 1), objects=st.integers(2, 3), rounds=_rounds(_extra_ops(stack))
    )
    def check(seed: int, objects: int, rounds: list[Any]) -> None:
        _play(stack, seed, objects, rounds)

    check()


def _play(stack: str, seed: int, objects: int, rounds: list[Any]) -> None:
    async def main() -> None:
        run = Run(stack, seed, objects)
        try:
            for quiet, ops in rounds:
                await run.play(quiet, ops)
        finally:
            await run.close()

    asyncio.run(main())


REPLAYED = [
    # A fork withdrawn because another object popped below its turn meanwhile used to be made
    # current first: an add by another object landed on it and was deleted with it.
    (
        "branching",
        2,
        2,
        [
            (False, [[("add", ["assistant", "user", "user"])], [("get", None), ("get", None)]]),
            (
                False,
                [
                    [("fork", 2), ("pop",), ("pop",), ("add", ["user"])],
                    [("pop",), ("get", None), ("fork", 1)],
                ],
            ),
        ],
    ),
]
"""Schedules the long run found, replayed in every run."""


@pytest.mark.parametrize(("stack", "seed", "objects", "rounds"), REPLAYED)
def test_replayed_schedules_lose_nothing(
    stack: str, seed: int, objects: int, rounds: list[Any]
) -> None:
    _play(stack, seed, objects, rounds)


def test_side_stores_yield_too() -> None:
    """The branch log, usage records and TTL records are members opened as ``type(inner)``:
    their I/O goes through the yielding primitives as well."""

    async def main() -> dict[str, int]:
        run = Run("advanced-ttl", 7, 2)
        await run.play(
            False, [[("add", ["user", "assistant"]), ("pop",)], [("fork", 1), ("get", None)]]
        )
        await run.close()
        return dict(run.turns)

    turns = asyncio.run(main())
    purposes = {sid.split("\x1e")[1] for sid in turns if sid.startswith("\x1e")}
    assert {"branches", "family", "ttl"} <= purposes, turns
