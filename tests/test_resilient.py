"""ResilientSession against a primary whose outages, lost replies and crashes the test controls:
a stateful property test against a plain list, and each behaviour on its own."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent_sessions import InMemorySession, SQLiteSession
from agent_sessions.errors import BackendUnavailableError, InvalidItemError
from agent_sessions.wrappers.resilient import (
    BATCH_KEY,
    CircuitBreaker,
    ResilientSession,
    RetryPolicy,
    Spool,
)
from tests.flaky import Crash, FlakyPrimary, FlakySequencedPrimary

FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0, total_timeout=5.0)


def _open(primary: Any, spool: str | Spool, reset: float = 0.0) -> ResilientSession:
    return ResilientSession(
        primary, spool, retry=FAST, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=reset)
    )


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


async def _stored(store: Any) -> list[Any]:
    items: list[Any] = await store.get_items()
    assert all(BATCH_KEY in item for item in items), "every stored item carries its batch id"
    return [{k: v for k, v in item.items() if k != BATCH_KEY} for item in items]


# -- the stateful property test ---------------------------------------------------------------


class ResilientMachine(RuleBasedStateMachine):
    """Random writes, pops, reads, outages, lost replies, crashes during replay and reopens,
    compared with a plain list of what was acknowledged."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.mkdtemp(prefix="resilient-")
        self.spool_path = os.path.join(self.dir, "spool.db")
        self.store = InMemorySession(f"rs-{uuid.uuid4().hex[:8]}")
        self.sequenced = False
        self.primary: FlakyPrimary = FlakyPrimary(self.store)
        self.session = _open(self.primary, self.spool_path)
        self.model: list[Any] = []
        self.counter = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.primary.down = False
        self.run(self.session.replay())
        assert self.run(_stored(self.store)) == self.model, "exactly once, in write order"
        assert self.session.status.spooled_batches == 0
        self.run(self.session.close())
        self.loop.close()

    @rule(size=st.integers(1, 3))
    def add(self, size: int) -> None:
        batch = []
        for _ in range(size):
            self.counter += 1
            batch.append(_msg(f"m{self.counter}"))
        self.run(self.session.add_items(batch))  # never fails: the spool takes it
        self.model += batch

    @rule()
    def pop(self) -> None:
        try:
            item = self.run(self.session.pop_item())
        except BackendUnavailableError:
            assert self.primary.down
            return
        assert item == (self.model.pop() if self.model else None)

    @rule(limit=st.one_of(st.none(), st.integers(1, 5)))
    def read(self, limit: int | None) -> None:
        items = self.run(self.session.get_items(limit))
        expected = self.model if limit is None else self.model[-limit:]
        if not self.primary.down:
            assert items == expected
        else:  # the newest items seen before the outage, then the spooled ones
            assert items == expected[len(expected) - len(items) :]

    @rule()
    def outage(self) -> None:
        self.primary.down = True

    @rule()
    def recovery(self) -> None:
        self.primary.down = False

    @rule()
    def lost_reply(self) -> None:
        self.primary.lost_replies = 1

    @precondition(lambda self: not self.primary.down)
    @rule(after=st.integers(1, 3))
    def crash_during_replay(self, after: int) -> None:
        self.primary.crash_after_writes = after
        try:
            self.run(self.session.replay())
        except Crash:
            pass
        self.primary.crash_after_writes = None
        self.reopen()

    @rule()
    def reopen(self) -> None:
        """A new process: the spool file and the store stay, everything in memory is gone."""
        self.sequenced = not self.sequenced  # alternate the two ways of finding batches
        kind = FlakySequencedPrimary if self.sequenced else FlakyPrimary
        primary = kind(self.store)
        primary.down = self.primary.down
        self.primary = primary
        self.session = _open(primary, self.spool_path)

    @invariant()
    def status_counts_the_spool(self) -> None:
        status = self.run(self.session.current_status())
        assert status.spooled_batches == Spool(self.spool_path).counts(self.store.session_id)[0]


TestResilientMachine = ResilientMachine.TestCase
TestResilientMachine.settings = settings(
    max_examples=int(os.environ.get("RESILIENT_EXAMPLES", "25")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- behaviour ---------------------------------------------------------------------------------


@pytest.fixture
def spool_path(tmp_path: Any) -> str:
    return str(tmp_path / "spool.db")


@pytest.mark.asyncio
async def test_a_lost_reply_is_not_written_twice(spool_path: str) -> None:
    store = InMemorySession("lost")
    primary = FlakyPrimary(store)
    session = _open(primary, spool_path)
    primary.lost_replies = 1
    await session.add_items([_msg("a"), _msg("b")])
    assert primary.writes == 1  # the retry found the batch in the primary
    assert await _stored(store) == [_msg("a"), _msg("b")]
    assert session.status.state == "healthy"


@pytest.mark.asyncio
async def test_outage_spools_in_order_and_recovery_replays(
    spool_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agent_sessions.resilient")
    store = SQLiteSession("outage", ":memory:")
    primary = FlakySequencedPrimary(store)
    session = _open(primary, spool_path, reset=3600)
    await session.add_items([_msg("1")])
    assert await session.get_items() == [_msg("1")]
    primary.down = True
    await session.add_items([_msg("2")])
    await session.add_items([_msg("3"), _msg("4")])
    status = session.status
    assert (status.state, status.spooled_batches, status.spooled_items, status.breaker) == (
        "degraded", 2, 3, "open"
    )
    assert "the test took the primary down" in (status.last_error or "")
    assert await session.get_items() == [_msg(str(i)) for i in range(1, 5)]
    assert await session.get_items(2) == [_msg("3"), _msg("4")]
    primary.down = False
    await session.add_items([_msg("5")])  # the breaker is still open: spooled, in order
    assert session.status.spooled_batches == 3
    session.breaker.reset_timeout = 0
    assert await session.replay() == 3
    assert await _stored(store) == [_msg(str(i)) for i in range(1, 6)]
    assert session.status.state == "healthy" and session.status.spooled_items == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("healthy -> degraded" in m for m in messages)
    assert any("replaying -> healthy" in m and "replayed 3 batches" in m for m in messages)


@pytest.mark.asyncio
async def test_a_crash_between_apply_and_confirm_replays_exactly_once(spool_path: str) -> None:
    store = InMemorySession("crash")
    primary = FlakyPrimary(store)
    session = _open(primary, spool_path)
    primary.down = True
    for i in range(4):
        await session.add_items([_msg(f"{i}a"), _msg(f"{i}b")])
    primary.down = False
    primary.crash_after_writes = 2  # the second batch is applied, then the process "dies"
    with pytest.raises(Crash):
        await session.replay()
    assert len(await store.get_items()) == 4
    reopened = _open(FlakySequencedPrimary(store), spool_path)
    assert (await reopened.current_status()).spooled_batches == 3  # the applied but unconfirmed batch is still there
    assert await reopened.replay() == 2
    assert await _stored(store) == [_msg(f"{i}{s}") for i in range(4) for s in "ab"]


@pytest.mark.asyncio
async def test_pop_while_degraded(spool_path: str) -> None:
    store = InMemorySession("pop")
    primary = FlakyPrimary(store)
    session = _open(primary, spool_path, reset=3600)
    await session.add_items([_msg("stored")])
    primary.down = True
    await session.add_items([_msg("sent")])  # tried on the primary first: may be there
    await session.add_items([_msg("local")])  # spooled directly
    assert await session.pop_item() == _msg("local")
    with pytest.raises(BackendUnavailableError, match="may be stored there"):
        await session.pop_item()
    assert session.status.spooled_items == 1
    primary.down = False
    session.breaker.reset_timeout = 0
    assert await session.pop_item() == _msg("sent")  # replayed, then popped from the primary
    assert await _stored(store) == [_msg("stored")]


@pytest.mark.asyncio
async def test_pop_and_clear_need_the_primary_when_nothing_is_spooled(spool_path: str) -> None:
    store = InMemorySession("needs")
    primary = FlakyPrimary(store)
    session = _open(primary, spool_path)
    await session.add_items([_msg("x")])
    primary.down = True
    with pytest.raises(BackendUnavailableError, match="never retried"):
        await session.pop_item()
    with pytest.raises(BackendUnavailableError, match="cannot clear"):
        await session.clear_session()
    primary.down = False
    assert await _stored(store) == [_msg("x")]
    await session.clear_session()
    assert await store.get_items() == []


@pytest.mark.asyncio
async def test_bad_items_raise_and_spool_nothing(spool_path: str) -> None:
    primary = FlakyPrimary(InMemorySession("bad"))
    session = _open(primary, spool_path)
    primary.down = True
    with pytest.raises(InvalidItemError) as info:
        bad: Any = {"role": "user", "content": object()}
        await session.add_items([_msg("ok"), bad])
    assert info.value.index == 1
    assert session.status.spooled_batches == 0


@pytest.mark.asyncio
async def test_a_hanging_primary_is_given_up_within_the_total_timeout(spool_path: str) -> None:
    class Hanging(FlakyPrimary):
        async def add_items(self, items: list[Any]) -> None:
            await asyncio.sleep(3600)

    primary = Hanging(InMemorySession("hang"))
    session = ResilientSession(
        primary, spool_path, retry=RetryPolicy(attempts=5, base_delay=0.01, total_timeout=0.2)
    )
    await session.add_items([_msg("spooled")])  # returns: the attempt is cancelled at the bound
    assert session.status.spooled_items == 1
    assert "TimeoutError" in (session.status.last_error or "")


def test_breaker_opens_after_the_threshold_and_probes_after_the_reset() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=10, clock=lambda: now[0])
    seen: list[str] = []
    breaker.record_failure()
    seen.append(breaker.state)
    breaker.record_failure()
    seen.append(breaker.state)
    assert not breaker.allows()
    now[0] = 10.0
    seen.append(breaker.state)
    assert breaker.allows()
    breaker.record_failure()  # the probe failed: open again
    seen.append(breaker.state)
    now[0] = 20.0
    breaker.record_success()
    seen.append(breaker.state)
    assert seen == ["closed", "open", "half-open", "open", "closed"]


def test_backoff_is_exponential_with_full_jitter() -> None:
    import random

    policy = RetryPolicy(attempts=6, base_delay=0.1, max_delay=1.0)
    waits = list(policy.backoffs(random.Random(7)))
    assert len(waits) == 5
    for k, wait in enumerate(waits):
        assert 0.0 <= wait <= min(1.0, 0.1 * 2**k)
    assert len(set(waits)) == 5  # jittered, not a fixed ladder


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"attempts": 0}, "attempts"),
        ({"total_timeout": 0}, "total_timeout"),
        ({"base_delay": -1}, "base_delay"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetryPolicy(**kwargs)


def test_an_in_memory_spool_is_refused() -> None:
    with pytest.raises(ValueError, match="durable"):
        ResilientSession(InMemorySession("mem"), ":memory:")
