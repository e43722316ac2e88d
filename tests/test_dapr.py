"""The SDK's DaprSession on the SDK's own fake Dapr client (etags, first-write concurrency): bare
it passes the core tier; numbered by ForeignSession it passes every tier, under every wrapper
stack of tests/matrix.py, and a write its etag retry puts behind another writer's loses nothing.

CI runs the bare sessions; ``make test-dapr-long`` (``AGENT_SESSIONS_DAPR_STACKS=all``) runs
every stack (about 40 s: the layers above the adapter are the matrix's, so CI leaves them to it).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from agents.extensions.memory import DaprSession
from agents.memory import Session

from agent_sessions import BranchingSession
from agent_sessions.testing import CoreConformance, SessionConformanceSuite
from agent_sessions.testing.helpers import item_text, texts
from agent_sessions.wrappers.foreign import ForeignSession
from tests.matrix import STACKS, Stack
from tests.sdk_compat.doubles import DAPR_TESTS, sdk_classes
from tests.sdk_compat.fetch import FetchError
from tests.servers import IN_CI

ALL_STACKS = os.environ.get("AGENT_SESSIONS_DAPR_STACKS", "").lower() == "all"
_CLIENT: list[Any] = []
"""This test's fake Dapr client: one store for every session a test opens."""


def _fake(name: str) -> Any:
    """A new instance of the SDK's fake client class ``name``; skips (fails under CI=true)
    without the SDK's sdist."""
    try:
        return sdk_classes(DAPR_TESTS, name)[name]()
    except FetchError as exc:
        if IN_CI:
            pytest.fail(f"the SDK's sdist is needed under CI=true: {exc}", pytrace=False)
        pytest.skip(f"the SDK's Dapr test double could not be fetched (no network?): {exc}")


@pytest.fixture(autouse=True)
def _fake_dapr_client() -> None:
    _CLIENT[:] = [_fake("FakeDaprClient")]


def dapr(session_id: str) -> DaprSession:
    """A DaprSession on this test's fake client."""
    return DaprSession(session_id, state_store_name="statestore", dapr_client=_CLIENT[0])


def foreign_dapr(session_id: str) -> ForeignSession:
    """A DaprSession numbered by ForeignSession, its side stores on the same fake client."""
    return ForeignSession(dapr(session_id), sibling_factory=dapr)


class TestDaprSessionPassesTheCoreTier(CoreConformance):
    async def create_session(self, session_id: str) -> Session:
        return dapr(session_id)


class _DaprStack(SessionConformanceSuite):
    stack: Stack
    # ForeignSession serialises one process's writes per session: 40 tasks contend as much as 200.
    concurrent_tasks = 40

    async def create_session(self, session_id: str) -> Session:
        return self.stack(foreign_dapr(session_id))


for _name, _stack in STACKS.items():
    if ALL_STACKS or _name == "bare":
        _cls = f"TestDapr_{_name.replace('-', '_')}"
        globals()[_cls] = type(_cls, (_DaprStack,), {"stack": staticmethod(_stack)})


def msg(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.mark.asyncio
async def test_a_write_retried_behind_another_writer_numbers_every_item() -> None:
    """The SDK's conflict double lets another writer append between DaprSession's read and its
    etag-guarded save; DaprSession retries and lands the batch behind that item."""
    _CLIENT[:] = [_fake("ConflictFakeDaprClient")]
    s = foreign_dapr("conflict")
    assert await s.add_sequenced_items([msg("a")]) == [1]
    assert await s.add_sequenced_items([msg("b")]) == [3], "the other writer's item took 2"
    rows = [(seq, item_text(item)) for seq, item in await s.get_sequenced_items()]
    assert rows == [(1, "a"), (2, "from-concurrent-writer"), (3, "b")]
    assert await foreign_dapr("conflict").count_items() == 3, "another object sees the same"
    view = BranchingSession(foreign_dapr("conflict"))
    assert texts(await view.get_items()) == ["a", "from-concurrent-writer", "b"]


@pytest.mark.asyncio
async def test_a_pop_retried_behind_another_writer_keeps_the_numbering() -> None:
    _CLIENT[:] = [_fake("ConflictFakeDaprClient")]
    s = foreign_dapr("conflict-pop")
    await s.add_items([msg("a")])
    popped = await s.pop_item()  # the retry pops the newest: the other writer's item
    assert popped is not None and item_text(popped) == "from-concurrent-writer"
    assert await s.add_sequenced_items([msg("b")]) == [2]
    rows = [(seq, item_text(item)) for seq, item in await s.get_sequenced_items()]
    assert rows == [(1, "a"), (2, "b")]


@pytest.mark.asyncio
async def test_state_store_calls_per_operation() -> None:
    """The calls docs/dapr.md gives, counted on the SDK's fake client: DaprSession keeps a
    session in one key (a read or write moves its whole value) plus a metadata key; through
    ForeignSession each write also appends a record to the numbering log (another session)."""
    from collections import Counter

    calls: Counter[str] = Counter()
    fake = _CLIENT[0]
    for name in ("get_state", "save_state", "delete_state"):
        method = getattr(fake, name)

        async def counted(*a: Any, _name: str = name, _method: Any = method, **k: Any) -> Any:
            calls[_name] += 1
            return await _method(*a, **k)

        setattr(fake, name, counted)

    async def count(op: Any) -> dict[str, int]:
        calls.clear()
        await op
        return dict(calls)

    get, save, delete = "get_state", "save_state", "delete_state"
    bare = {
        "add": {get: 2, save: 2},  # messages, then metadata: each read, then saved
        "get": {get: 1},
        "pop": {get: 1, save: 1},
        "clear": {delete: 2},
    }
    numbered = {
        "add": {get: 7, save: 4},  # + log newest, newest, the log record's add, a read-back
        "get": {get: 1},
        "pop": {get: 6, save: 3},  # + log newest, newest, the 2 newest, the log record's add
        "clear": {get: 6, save: 4, delete: 4},  # + the log's clear and its restart record
    }
    for session, expected in ((dapr("bare"), bare), (foreign_dapr("numbered"), numbered)):
        await session.add_items([msg(f"old {i}") for i in range(10)])
        assert {
            "add": await count(session.add_items([msg("a"), msg("b"), msg("c")])),
            "get": await count(session.get_items(2)),
            "pop": await count(session.pop_item()),
            "clear": await count(session.clear_session()),
        } == expected
