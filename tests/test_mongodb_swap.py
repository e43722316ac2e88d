"""MongoDB's atomic history replacement (the SDK compaction hooks) without transactions.

A swap commits with one document write and is applied after; these tests stop it between the
two (as a crash or a cancellation would) and check that every read and write path sees the
whole replacement, never part of it, and finishes it. A stateful property test runs random
adds, pops, replacements and interrupted replacements against a plain list. On the stand-in,
and on a real server when AGENT_SESSIONS_MONGODB_URL is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from mongomock_motor import AsyncMongoMockClient

from agent_sessions.backends.mongodb import MongoDBSession
from agent_sessions.backends.mongodb import swap as swaps
from agent_sessions.testing.helpers import cancel_after, texts
from tests.test_mongodb import Factory, _docs, _msg, make  # noqa: F401  (the fixture)


def _text(payload: str) -> str:
    return str(json.loads(payload)["content"])


async def _commit_only(
    s: MongoDBSession,
    expected: list[tuple[int, str]] | None,
    new: list[str],
    prune: Callable[[str], bool] | None = None,
) -> bool:
    """Commit a replacement and stop before applying it (a crash between the two writes)."""
    spec = {"below": True} if expected is None else await swaps.plan(s, expected, prune)
    if spec is None:
        return False
    await s._append([json.dumps(_msg(t)) for t in new], spec)
    return True


async def _batches(s: MongoDBSession) -> None:
    await s.add_items([_msg("a"), _msg("b"), _msg("c")])
    await s.add_items([_msg("d"), _msg("e")])
    await s.add_items([_msg("f")])


async def _suffix_swap(s: MongoDBSession) -> None:
    """Replace the newest two rows (e, f) by S and prune a: b c d S remain."""
    await _batches(s)
    newest = await s._load(2)
    assert [_text(p) for _, p in newest] == ["e", "f"]
    assert await _commit_only(s, newest, ["S"], lambda p: _text(p) == "a")


READS: dict[str, Callable[[MongoDBSession], Awaitable[Any]]] = {
    "get all": lambda s: s.get_items(),
    "get latest 3": lambda s: s.get_items(3),
    "sequenced before": lambda s: s.get_sequenced_items(before=10**9),
    "sequenced after": lambda s: s.get_sequenced_items(after=0),
    "count": lambda s: s.count_items(),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("read", sorted(READS))
async def test_every_read_sees_a_committed_swap_whole(make: Factory, read: str) -> None:  # noqa: F811
    s = make()
    await _suffix_swap(s)
    got = await READS[read](s)
    full = ["b", "c", "d", "S"]
    if read == "count":
        assert got == 4
    elif read == "get latest 3":
        assert texts(got) == full[-3:]
    elif read.startswith("sequenced"):
        assert texts(item for _, item in got) == full
    else:
        assert texts(got) == full
    # Whoever met the pending swap finished it: the documents now hold just what is visible.
    docs = await _docs(s)
    assert all(swaps.SWAP not in d for d in docs)
    assert [_text(p) for d in docs for p in d["items"]] == full


@pytest.mark.asyncio
async def test_pops_never_return_replaced_rows(make: Factory) -> None:  # noqa: F811
    s = make()
    await _suffix_swap(s)
    popped: list[Any] = [await s.pop_item() for _ in range(5)]
    assert [item and item["content"] for item in popped] == ["S", "d", "c", "b", None]


@pytest.mark.asyncio
async def test_a_pop_through_an_empty_swap_document_finds_the_new_history(make: Factory) -> None:  # noqa: F811
    s = make()
    await _batches(s)
    assert await _commit_only(s, None, [])  # replaced everything by nothing; not applied
    assert await s.pop_item() is None
    assert await s.get_items() == []
    assert await _docs(s) == []
    await s.add_items([_msg("g")])
    assert texts(await s.get_items()) == ["g"]


@pytest.mark.asyncio
async def test_range_delete_and_rewrite_finish_a_pending_swap_first(make: Factory) -> None:  # noqa: F811
    s = make()
    await _suffix_swap(s)
    pairs = await s.get_sequenced_items()
    s2 = make(s.session_id)
    await _commit_only(s2, None, ["T", "U"])  # another object replaces everything meanwhile
    assert await s.delete_items(before=10**9) == 2  # T and U: the old rows are gone already
    await _commit_only(s2, None, ["V"])
    assert await s.rewrite_items([(pairs[0][0], _msg("x"))]) == 0
    assert texts(await s.get_items()) == ["V"]


@pytest.mark.asyncio
async def test_a_stale_suffix_is_refused_and_changes_nothing(make: Factory) -> None:  # noqa: F811
    s = make()
    await _batches(s)
    newest = await s._load(2)
    await s.pop_item()
    before = await _docs(s)
    assert not await s._replace_rows(newest, [json.dumps(_msg("S"))], None)
    assert await _docs(s) == before


@pytest.mark.asyncio
async def test_a_replacement_plans_over_the_history_a_pending_swap_left(make: Factory) -> None:  # noqa: F811
    """The property test's minimal case: an interrupted swap still stores the rows it replaced;
    the next replacement must prune by the history they left, not by them."""
    s = make()
    await s.add_items([_msg("i0"), _msg("i1"), _msg("i2")])
    assert await _commit_only(s, await s._load(1), [], lambda p: _text(p) in {"i0", "i1"})
    await s.add_items([_msg("i3"), _msg("i4")])
    assert await _commit_only(s, await s._load(1), [], lambda p: _text(p) == "i3")
    assert await s.get_items() == []


@pytest.mark.asyncio
async def test_a_cancelled_replacement_is_all_or_nothing(make: Factory) -> None:  # noqa: F811
    """Cancel the SDK hook after each await in turn: the history is the old or the new one."""
    s = make()
    for turns in range(12):
        await s.clear_session()
        await _batches(s)
        await cancel_after(s._atomic_replace_items([_msg("S")]), turns)
        assert texts(await s.get_items()) in (["a", "b", "c", "d", "e", "f"], ["S"])


# -- stateful: random operations against a plain list -----------------------------------------


class SwapMachine(RuleBasedStateMachine):
    """Adds, pops, suffix and whole replacements (some interrupted after their commit), and
    reads through a second object, checked against a list."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        sid = f"swap-{uuid.uuid4().hex[:10]}"
        client: Any = AsyncMongoMockClient()  # an example shares no state with the one before
        self.s = MongoDBSession(sid, client=client, database="as_swap_props")
        self.other = MongoDBSession(sid, client=client, database="as_swap_props")
        self.model: list[str] = []
        self.n = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            assert texts(self.run(self.other.get_items())) == self.model
            self.run(self.s.clear_session())
        finally:
            self.loop.close()

    def _new(self, k: int) -> list[str]:
        self.n += k
        return [f"i{self.n - k + j}" for j in range(k)]

    @rule(k=st.integers(1, 4))
    def add(self, k: int) -> None:
        new = self._new(k)
        self.run(self.s.add_items([_msg(t) for t in new]))
        self.model += new

    @rule()
    def pop(self) -> None:
        got = self.run(self.s.pop_item())
        assert (got or {}).get("content") == (self.model.pop() if self.model else None)

    @rule(
        k=st.integers(1, 3),
        new=st.integers(0, 2),
        prune=st.integers(0, 3),
        interrupted=st.booleans(),
    )
    def replace_suffix(self, k: int, new: int, prune: int, interrupted: bool) -> None:
        newest = self.run(self.s._load(k))
        if not newest:
            return
        cut = len(self.model) - len(newest)
        doomed = set(self.model[: min(prune, cut)])
        items = self._new(new)
        payloads = [json.dumps(_msg(t)) for t in items]
        prune_fn = lambda p: _text(p) in doomed  # noqa: E731
        if interrupted:
            assert self.run(_commit_only(self.s, newest, items, prune_fn))
        else:
            assert self.run(self.s._replace_rows(newest, payloads, prune_fn))
        self.model = self.model[len(doomed) : cut] + items

    @rule(new=st.integers(0, 2), interrupted=st.booleans())
    def replace_all(self, new: int, interrupted: bool) -> None:
        items = self._new(new)
        if interrupted:
            self.run(_commit_only(self.s, None, items))
        else:
            self.run(self.s._replace_rows(None, [json.dumps(_msg(t)) for t in items], None))
        self.model = items

    @rule(limit=st.integers(1, 5))
    def read_latest(self, limit: int) -> None:
        assert texts(self.run(self.other.get_items(limit))) == self.model[-limit:]

    @rule()
    def count(self) -> None:
        assert self.run(self.other.count_items()) == len(self.model)

    @rule()
    def read_all(self) -> None:
        assert texts(self.run(self.other.get_items())) == self.model


def test_swaps_against_a_list() -> None:
    long = os.environ.get("AGENT_SESSIONS_PROPS") == "long"
    run_state_machine_as_test(
        SwapMachine,
        settings=settings(
            max_examples=200 if long else 25,
            stateful_step_count=40 if long else 15,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
