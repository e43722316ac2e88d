"""ResilientSession against a primary whose outages, lost replies and crashes the test controls:
a stateful property test against a plain list, and each behaviour on its own."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
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
from tests.flaky import Crash, Faults, FlakyPrimary, FlakySequencedPrimary

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


class SharedSpoolMachine(RuleBasedStateMachine):
    """Several writers (objects that could be processes: each has its own breaker, mirror and
    cache) of one session through one spool file, with outages, lost replies (some followed by
    an outage, so the batch is stored and spooled), crashes during replay and reopens,
    compared with one plain list: every acknowledged batch exactly once, popped items gone."""

    WRITERS = 3

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.mkdtemp(prefix="resilient-shared-")
        self.spool_path = os.path.join(self.dir, "spool.db")
        self.store = InMemorySession(f"rsw-{uuid.uuid4().hex[:8]}")
        self.faults = Faults()
        self.writers = [self._open(k) for k in range(self.WRITERS)]
        self.model: list[Any] = []
        self.counter = 0

    def _open(self, k: int) -> ResilientSession:
        kind = FlakySequencedPrimary if k % 2 else FlakyPrimary
        return _open(kind(self.store, self.faults), self.spool_path)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.faults.down, self.faults.lost_replies = False, 0
        self.run(self.writers[0].replay())
        assert self.run(_stored(self.store)) == self.model, "exactly once, in write order"
        for writer in self.writers:
            assert self.run(writer.current_status()).spooled_batches == 0
            self.run(writer.close())
        self.loop.close()

    @rule(k=st.integers(0, WRITERS - 1), size=st.integers(1, 2))
    def add(self, k: int, size: int) -> None:
        batch = []
        for _ in range(size):
            self.counter += 1
            batch.append(_msg(f"w{k}-{self.counter}"))
        self.run(self.writers[k].add_items(batch))
        self.model += batch

    @rule(k=st.integers(0, WRITERS - 1))
    def pop(self, k: int) -> None:
        try:
            item = self.run(self.writers[k].pop_item())
        except BackendUnavailableError:
            assert self.faults.down
            return
        assert item == (self.model.pop() if self.model else None)

    @rule(k=st.integers(0, WRITERS - 1), limit=st.one_of(st.none(), st.integers(1, 4)))
    def read(self, k: int, limit: int | None) -> None:
        items = self.run(self.writers[k].get_items(limit))
        expected = self.model if limit is None else self.model[-limit:]
        if not self.faults.down:
            assert items == expected
            return
        # Down: this writer's last view, then the spooled batches, each once.
        spooled = Spool(self.spool_path).counts(self.store.session_id)[1]
        tail = min(spooled, len(items))
        assert items[len(items) - tail :] == self.model[len(self.model) - tail :]

    @rule(down=st.booleans())
    def outage(self, down: bool) -> None:
        self.faults.down = down

    @rule(then_down=st.booleans())
    def lost_reply(self, then_down: bool) -> None:
        self.faults.lost_replies = 1
        self.faults.down_after_lost_reply = then_down

    @rule(
        k=st.integers(0, WRITERS - 1),
        other=st.integers(1, WRITERS - 1),
        size=st.integers(1, 2),
        then_down=st.booleans(),
    )
    def pop_during_a_lost_reply(self, k: int, other: int, size: int, then_down: bool) -> None:
        """Writer ``k`` adds a batch whose reply is lost; meanwhile another writer pops."""
        popper = self.writers[(k + other) % self.WRITERS]
        batch = []
        for _ in range(size):
            self.counter += 1
            batch.append(_msg(f"w{k}-{self.counter}"))
        before = list(self.model)
        task: asyncio.Task[Any] | None = None

        async def pop_meanwhile() -> None:
            nonlocal task
            task = asyncio.ensure_future(popper.pop_item())
            for _ in range(50):  # let the pop run as far as it can without the writer
                await asyncio.sleep(0)

        async def scenario() -> Any:
            await popper.current_status()  # its view of the spool is current: no thread hop
            self.faults.lost_replies, self.faults.down_after_lost_reply = 1, then_down
            self.faults.during_lost_reply = pop_meanwhile
            try:
                await self.writers[k].add_items(batch)
            finally:
                self.faults.lost_replies, self.faults.during_lost_reply = 0, None
            assert task is not None or self.faults.down  # down: the write never reached it
            return None if task is None else await asyncio.gather(task, return_exceptions=True)

        if self.faults.down:
            return
        popped = self.run(scenario())
        self.model += batch
        if popped is None:
            return
        (item,) = popped
        if isinstance(item, BackendUnavailableError):
            assert self.faults.down
            return
        # The pop ran before the write (took the item before it) or after it (took its last).
        if item == batch[-1]:
            self.model.pop()
        else:
            assert before and item == before[-1], f"popped {item!r}"
            self.model.remove(item)

    @precondition(lambda self: not self.faults.down)
    @rule(k=st.integers(0, WRITERS - 1), after=st.integers(1, 2))
    def crash_during_replay(self, k: int, after: int) -> None:
        primary = self.writers[k].inner
        assert isinstance(primary, FlakyPrimary)
        primary.crash_after_writes = after
        try:
            self.run(self.writers[k].replay())
        except Crash:
            pass
        primary.crash_after_writes = None
        self.writers[k] = self._open(k)  # the process died: a new one takes over

    @rule(k=st.integers(0, WRITERS - 1))
    def reopen(self, k: int) -> None:
        self.writers[k] = self._open(k)


TestSharedSpoolMachine = SharedSpoolMachine.TestCase
TestSharedSpoolMachine.settings = settings(
    # 3x: 25 examples rarely reach the two-writer losses of the old design; 75 always did
    max_examples=3 * int(os.environ.get("RESILIENT_EXAMPLES", "25")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- behaviour ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_two_writers_of_one_spool_lose_and_duplicate_nothing(tmp_path: Any) -> None:
    """Issue 23.1-2: writer 1 spools B; writer 2, which saw an empty spool before, writes W,
    whose reply is lost before an outage (W is stored and spooled)."""
    store, faults = InMemorySession("two"), Faults()
    spool = str(tmp_path / "spool.db")
    w1 = _open(FlakyPrimary(store, faults), spool)
    w2 = _open(FlakySequencedPrimary(store, faults), spool)
    await w2.add_items([_msg("A")])
    faults.down = True
    await w1.add_items([_msg("B")])
    faults.down = False
    faults.lost_replies, faults.down_after_lost_reply = 1, True
    await w2.add_items([_msg("W")])
    faults.down = False
    await w1.add_items([_msg("Z")])
    assert await _stored(store) == [_msg("A"), _msg("B"), _msg("W"), _msg("Z")]
    assert (await w2.current_status()).spooled_batches == 0


@pytest.mark.asyncio
async def test_a_batch_stored_and_still_spooled_is_read_once(tmp_path: Any) -> None:
    """Issue 23.3: the reply of X was lost before an outage, so X is in the primary and in the
    spool; while another process holds the replay lock, reads show X once."""
    store, faults = InMemorySession("twice"), Faults()
    session = _open(FlakyPrimary(store, faults), str(tmp_path / "spool.db"))
    await session.add_items([_msg("A")])
    faults.lost_replies, faults.down_after_lost_reply = 1, True
    await session.add_items([_msg("X1"), _msg("X2")])
    faults.down = False
    assert (await session.current_status()).spooled_batches == 1
    with Spool(str(tmp_path / "spool.db")).replay_lock() as held:
        assert held  # the replay is someone else's: this object cannot run it
        assert await session.get_items() == [_msg("A"), _msg("X1"), _msg("X2")]
        assert await session.get_items(2) == [_msg("X1"), _msg("X2")]
        assert await session.get_items(3) == [_msg("A"), _msg("X1"), _msg("X2")]
    assert await session.replay() == 0  # found in the primary: nothing written
    assert await _stored(store) == [_msg("A"), _msg("X1"), _msg("X2")]


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
        "degraded",
        2,
        3,
        "open",
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
    # the applied but unconfirmed batch is still there
    assert (await reopened.current_status()).spooled_batches == 3
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


@pytest.mark.asyncio
async def test_a_cancelled_spooled_write_is_settled_when_cancelled_error_arrives(
    spool_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23.4: the spool write waits for the file's lock when the caller is cancelled; the
    caller gets CancelledError only once the write is whole, never before it applies."""
    primary = FlakyPrimary(InMemorySession("cancel"))
    session = _open(primary, spool_path, reset=3600)
    primary.down = True
    await session.add_items([_msg("A")])
    blocker = sqlite3.connect(spool_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process writing the spool
    entered = threading.Event()
    append = session.spool.append

    def entering(*args: Any, **kwargs: Any) -> None:
        entered.set()
        append(*args, **kwargs)

    monkeypatch.setattr(session.spool, "append", entering)
    task = asyncio.create_task(session.add_items([_msg("B")]))
    await asyncio.to_thread(entered.wait, 30)
    task.cancel()
    asyncio.get_running_loop().call_later(0.3, blocker.rollback)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert Spool(spool_path).counts("cancel") == (2, 2), "applied before CancelledError"
    primary.down = False
    assert await session.get_items() == [_msg("A"), _msg("B")]
    blocker.close()


@pytest.mark.asyncio
async def test_spool_contention_never_blocks_the_event_loop(spool_path: str) -> None:
    """Issue 23.5: another thread holds the spool while it waits for the file's lock (held by
    another process): ``status`` answers at once and the loop keeps running while a write
    waits for the spool."""
    primary = FlakyPrimary(InMemorySession("lag"))
    session = _open(primary, spool_path, reset=3600)
    primary.down = True
    await session.add_items([_msg("A")])
    blocker = sqlite3.connect(spool_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    other = threading.Thread(
        target=session.spool.append,
        args=("lag-other", "other-batch", ['{"role":"user","content":"x"}']),
        kwargs={"attempted": False},
    )
    other.start()
    await asyncio.to_thread(_until, session.spool._lock.locked)  # the other thread holds it
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    status = session.status
    assert other.is_alive(), "status returned while the spool was still held"
    assert (status.state, status.spooled_batches) == ("degraded", 1)
    write = asyncio.create_task(session.add_items([_msg("B")]))
    seen = ticks
    await asyncio.sleep(0.2)
    assert ticks > seen and not write.done()  # the loop ran; the write waits in a thread
    blocker.rollback()
    await write
    other.join()
    ticking.cancel()
    assert (await session.current_status()).spooled_batches == 2
    blocker.close()


def _until(condition: Any) -> None:
    while not condition():
        time.sleep(0.005)


def _move_aside(directory: Path) -> None:
    for leftover in directory.glob("spool.db*"):
        leftover.rename(directory / ("aside-" + leftover.name))


def _truncated_spool(path: Path) -> None:
    spool = Spool(path)
    for i in range(200):
        spool.append(
            str(path), f"b{i}", ['{"role":"user","content":"%s"}' % ("x" * 500)], attempted=False
        )
    spool.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 3)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
@pytest.mark.asyncio
async def test_a_corrupt_spool_file_still_serves_a_healthy_primary(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23.9: the primary is served; a write that needs the spool names the file and what
    to do; a spool moved aside is replaced by a new one."""
    path = tmp_path / "spool.db"
    if damage == "garbage":
        path.write_bytes(b"this is not an SQLite file " * 200)
    else:
        _truncated_spool(path)
    primary = FlakyPrimary(InMemorySession(f"corrupt-{uuid.uuid4().hex[:8]}"))
    session = _open(primary, str(path))
    await session.add_items([_msg("A"), _msg("B")])
    assert await session.pop_item() == _msg("B")
    assert await session.get_items() == [_msg("A")]
    assert str(path) in caplog.text and "Move it aside" in caplog.text
    primary.down = True
    with pytest.raises(BackendUnavailableError, match="Move it aside") as info:
        await session.add_items([_msg("C")])
    assert str(path) in str(info.value)
    _move_aside(tmp_path)
    await session.add_items([_msg("C")])  # a new spool
    primary.down = False
    assert await session.get_items() == [_msg("A"), _msg("C")]
    assert await _stored(primary.inner) == [_msg("A"), _msg("C")]


@pytest.mark.asyncio
async def test_a_spool_of_the_previous_format_is_upgraded_and_replayed_once(
    tmp_path: Path,
) -> None:
    """The previous format kept one anchor per session: it bounds the look-up of each
    attempted batch after the upgrade."""
    store = InMemorySession(f"upgrade-{uuid.uuid4().hex[:8]}")
    stored: list[Any] = [{**_msg("A"), BATCH_KEY: "a"}, {**_msg("X"), BATCH_KEY: "x"}]
    await store.add_items(stored)
    path = str(tmp_path / "spool.db")
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE spool_batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT "
            "NOT NULL, batch_id TEXT NOT NULL UNIQUE, items TEXT NOT NULL, attempted INTEGER "
            "NOT NULL DEFAULT 0);"
            "CREATE TABLE spool_anchors (session_id TEXT PRIMARY KEY, batch_id TEXT);"
        )
        conn.execute("INSERT INTO spool_anchors VALUES (?, 'a')", (store.session_id,))
        for bid, text, attempted in [("x", "X", 1), ("y", "Y", 0)]:
            items = f'[{{"role":"user","content":"{text}","{BATCH_KEY}":"{bid}"}}]'
            conn.execute(
                "INSERT INTO spool_batches (session_id, batch_id, items, attempted) "
                "VALUES (?, ?, ?, ?)",
                (store.session_id, bid, items, attempted),
            )
    session = _open(FlakyPrimary(store), path)
    assert await session.replay() == 1  # x was found (stored, its reply lost); y written
    assert await _stored(store) == [_msg("A"), _msg("X"), _msg("Y")]
    assert Spool(path).batches(store.session_id) == []


_HOLD_SESSION_LOCK = """
import asyncio, sys
from agent_sessions.wrappers.resilient import Spool

async def main() -> None:
    async with Spool(sys.argv[1]).session_lock(sys.argv[2]):
        print("held", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""

_WAIT_FOR_SESSION_LOCK = """
import asyncio, sys
from agent_sessions.wrappers.resilient import Spool

async def main() -> None:
    sys.stdin.readline()  # started with the holder (imports overlap); goes once it holds
    spool = Spool(sys.argv[1])
    lock = spool.session_lock(sys.argv[2])
    print("free" if lock.try_acquire() else "taken", flush=True)
    other = spool.session_lock(sys.argv[2] + "-other")
    print("other free" if other.try_acquire() else "other taken", flush=True)
    other.release()
    async with lock:
        print("acquired", flush=True)

asyncio.run(main())
"""


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parent.parent),
    )


def test_a_session_is_serialised_across_processes_and_a_killed_holder_frees_it(
    spool_path: str,
) -> None:
    """Two processes sharing a spool file: while one holds a session's lock the other cannot
    take it (another session's lock is free); killing the holder (-9) frees it."""
    holder = _child(_HOLD_SESSION_LOCK, spool_path, "procs")
    waiter = _child(_WAIT_FOR_SESSION_LOCK, spool_path, "procs")
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert waiter.stdin is not None and waiter.stdout is not None
        waiter.stdin.write("go\n")
        waiter.stdin.flush()
        assert waiter.stdout.readline() == "taken\n"
        assert waiter.stdout.readline() == "other free\n"
        os.kill(holder.pid, signal.SIGKILL)
        assert waiter.stdout.readline() == "acquired\n"
        assert waiter.wait(timeout=60) == 0
    finally:
        for child in (holder, waiter):
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.asyncio
async def test_a_cancelled_wait_for_the_session_lock_leaves_it_free(spool_path: str) -> None:
    """A call waiting for a session another writer holds runs its wait in a worker thread (the
    loop keeps running); cancelled, it neither leaves the lock held nor takes it later."""
    store, faults = InMemorySession("cancel-wait"), Faults()
    holder = _open(FlakyPrimary(store, faults), spool_path)
    waiter = _open(FlakyPrimary(store, faults), spool_path)
    lock = holder.spool.session_lock("cancel-wait")
    assert lock is waiter.spool.session_lock("cancel-wait")  # one lock per file and session
    released = asyncio.Event()

    async def hold() -> None:
        async with lock:
            await released.wait()

    holding = asyncio.create_task(hold())
    await asyncio.sleep(0)
    assert not lock.try_acquire()
    pop = asyncio.create_task(waiter.pop_item())
    for _ in range(20):
        await asyncio.sleep(0.005)  # the loop runs while the pop waits
    assert not pop.done()
    pop.cancel()
    released.set()
    await holding
    with pytest.raises(asyncio.CancelledError):
        await pop
    await asyncio.to_thread(_until, lock.try_acquire)  # free again (the waiter gave up)
    lock.release()
    await holder.add_items([_msg("A")])
    assert await waiter.pop_item() == _msg("A")
    await holder.close()
    await waiter.close()


def _module_child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.resilient_race_child", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parent.parent),
    )


def _send(child: subprocess.Popen[str], line: str) -> None:
    assert child.stdin is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()


@pytest.mark.asyncio
async def test_a_pop_in_another_process_waits_for_an_unsettled_write(tmp_path: Path) -> None:
    """Issue 23: process 1 stored X and its reply is in flight; process 2 (same spool file)
    pops meanwhile. It pops X after process 1's retry found X: X is popped once and gone (it
    used to be popped and then written again by the retry)."""
    db, spool = str(tmp_path / "primary.db"), str(tmp_path / "spool.db")
    setup = SQLiteSession("race", db)
    await setup.add_items([_msg("A")])
    await setup.close()
    writer = _module_child("add", db, spool, "race")
    popper = _module_child("pop", db, spool, "race")
    try:
        assert writer.stdout is not None and popper.stdout is not None
        assert writer.stdout.readline() == "STORED\n"
        _send(popper, "go")
        assert popper.stdout.readline() == "POPPING\n"
        # Give the pop a chance to run now (it did before the fix); it cannot end before the
        # write settles, so the outcome below never depends on how long this wait is.
        await asyncio.sleep(0.5)
        _send(writer, "go")
        assert writer.stdout.readline() == "ADDED\n"
        assert popper.stdout.readline() == "POPPED X\n"
        assert writer.wait(timeout=60) == 0 and popper.wait(timeout=60) == 0
    finally:
        for child in (writer, popper):
            if child.poll() is None:
                child.kill()
                child.wait()
    check = SQLiteSession("race", db)
    assert await check.get_items() == [_msg("A")], "X was popped once and stays gone"
    await check.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_waits_for_its_parent_then_takes_the_session(spool_path: str) -> None:
    """A child forked while its parent holds a session's lock finds it held (by the parent's
    process) and takes it once the parent releases it (it does not inherit a held lock)."""
    lock = Spool(spool_path).session_lock("forked")
    assert lock.try_acquire()
    checked_r, checked_w = os.pipe()
    released_r, released_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        held_by_parent = not lock.try_acquire()
        os.write(checked_w, b"x")
        os.read(released_r, 1)
        os._exit(0 if held_by_parent and lock.try_acquire() else 1)
    os.read(checked_r, 1)
    lock.release()
    os.write(released_w, b"x")
    _, status = os.waitpid(pid, 0)
    for fd in (checked_r, checked_w, released_r, released_w):
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
