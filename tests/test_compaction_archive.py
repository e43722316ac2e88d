"""CompactionSession's view, archive retrieval and search, reopening, foreign sessions, records
of another kind, and pruning the archive."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession

from agent_sessions import (
    AdvancedSession,
    Capability,
    InMemorySession,
    InMemoryStore,
    SQLiteSession,
    TTLSession,
)
from agent_sessions.errors import BackendDataError, SessionClosedError
from agent_sessions.testing import item_text
from agent_sessions.wrappers.compaction import CompactionSession
from agent_sessions.wrappers.encrypted import EncryptedSession
from tests._compaction_fixtures import GatedSummarizer, is_summary, msg, new_session, originals, sid
from tests.wrapper_stacks import IdentitySummarizer, YieldingSession

# -- view semantics, archive and search -------------------------------------------------------


@pytest.mark.asyncio
async def test_archive_retrieval_and_search() -> None:
    session = new_session(keep_last=2)
    history = [
        msg("I live in Lyon"),
        msg("Noted.", "assistant"),
        {"type": "function_call", "call_id": "c", "name": "lookup", "arguments": '{"q":"LYON"}'},
        {"type": "function_call_output", "call_id": "c", "output": "Lyon: 500k people"},
        msg("Anything else?", "assistant"),
        msg("no"),
        msg("ok", "assistant"),
    ]
    await session.add_items(history)
    result = await session.compact()
    assert result is not None and result.compacted_items == 5 and result.kept_items == 2
    assert await session.get_archived_items() == history[:5]
    assert await session.get_archived_items(limit=2) == history[3:5]
    assert await session.search_archive("lyon") == [history[0], history[2], history[3]]
    assert await session.search_archive("LYON", limit=1) == [history[3]]
    assert await session.search_archive("nowhere") == []
    with pytest.raises(ValueError):
        await session.search_archive("")


@pytest.mark.asyncio
async def test_search_pages_through_a_large_archive() -> None:
    session = new_session(keep_last=1)
    await session.add_items(
        [msg(f"item {i}" + (" needle" if i % 300 == 0 else "")) for i in range(1300)]
    )
    await session.compact()
    found = await session.search_archive("NEEDLE")
    assert [item_text(f) for f in found] == [f"item {i} needle" for i in range(0, 1300, 300)]


@pytest.mark.asyncio
async def test_search_pages_past_a_page_shortened_by_a_skipped_item() -> None:
    # A non-strict inner leaves an undecodable item out of a read: the page comes back
    # shorter than asked, but older archived items are still there to search.
    store = InMemoryStore()
    inner = InMemorySession(sid(), store=store)
    session = CompactionSession(inner, keep_last=1)
    await session.add_items([msg(f"item {i}" + (" needle" if i < 3 else "")) for i in range(700)])
    await session.compact()
    store.sessions[inner.session_id].payloads[-10] = "{damaged"  # in the newest page
    found = await session.search_archive("needle")
    assert [item_text(f) for f in found] == [f"item {i} needle" for i in range(3)]


@pytest.mark.asyncio
async def test_limits_pop_and_repeated_compaction_over_the_view() -> None:
    session = new_session(keep_last=2)
    await session.add_items([msg(f"m{i}") for i in range(6)])
    await session.compact()
    assert originals(await session.get_items(limit=2)) == ["m4", "m5"]
    assert len(await session.get_items(limit=2)) == 2
    assert is_summary((await session.get_items(limit=3))[0])
    await session.add_items([msg(f"m{i}") for i in range(6, 10)])
    second = await session.compact()
    assert second is not None
    view = await session.get_items()
    assert "m0" in item_text(view[0]) and "m7" in item_text(view[0])  # extends the summary
    assert originals(view) == ["m8", "m9"]
    assert len(await session.get_archived_items()) == 8
    # pop the two originals, then the summary itself; archived originals are never popped
    assert item_text(await session.pop_item()) == "m9"
    assert item_text(await session.pop_item()) == "m8"
    assert is_summary(await session.pop_item())
    assert await session.pop_item() is None
    assert await session.get_items() == []
    assert len(await session.get_archived_items()) == 8
    await session.add_items([msg("after")])
    assert await session.get_items() == [msg("after")]
    reasons = [r.reason for r in await session.get_compaction_records()]
    assert reasons == ["compaction", "compaction", "pop"]
    await session.clear_session()
    assert await session.get_items() == [] and await session.get_archived_items() == []
    assert await session.get_compaction_records() == []


@pytest.mark.asyncio
async def test_view_survives_reopening_on_sqlite(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    session_id = sid()
    first = CompactionSession(SQLiteSession(session_id, path), keep_last=2)
    await first.add_items([msg(f"m{i}") for i in range(6)])
    await first.compact()
    expected = await first.get_items()
    await first.close()
    second = CompactionSession(SQLiteSession(session_id, path), keep_last=2)
    assert await second.get_items() == expected
    assert len(await second.get_archived_items()) == 4
    await second.close()
    with pytest.raises(SessionClosedError):
        await second.get_items()


@pytest.mark.asyncio
async def test_foreign_sdk_session_is_numbered_by_foreign_session(tmp_path: Path) -> None:
    path = str(tmp_path / "sdk.db")
    inner = SDKSQLiteSession("user-1", path)
    with pytest.raises(TypeError, match="sibling_factory"):
        CompactionSession(inner)
    session = CompactionSession(
        inner, keep_last=2, sibling_factory=lambda record_id: SDKSQLiteSession(record_id, path)
    )
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    assert (await session.compact()) is not None
    assert originals(await session.get_items()) == ["m4", "m5"]
    assert await session.get_archived_items() == items[:4]
    assert await session.search_archive("m1") == [items[1]]
    await session.add_items([msg("m6")])
    assert originals(await session.get_items(limit=2)) == ["m5", "m6"]
    assert item_text(await session.pop_item()) == "m6"
    assert await inner.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []


@pytest.mark.asyncio
async def test_records_of_another_kind_or_foreign_data_are_refused() -> None:
    store = InMemoryStore()
    inner = InMemorySession(sid(), store=store)
    session = CompactionSession(inner)
    await session._sibling.add_items([msg("not a record")])
    with pytest.raises(BackendDataError, match="not a compaction record"):
        await session.get_items()


# -- pruning the archive ----------------------------------------------------------------------

KEY = "a long random passphrase for the compaction tests"


class SequencedOnly:
    """A sequenced store without range deletion (as the Redis and SQL backends are today)."""

    def __init__(self, real: InMemorySession) -> None:
        self.real = real
        self.session_id = real.session_id
        self.session_settings = real.session_settings

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.real.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        await self.real.add_items(items)

    async def pop_item(self) -> Any:
        return await self.real.pop_item()

    async def clear_session(self) -> None:
        await self.real.clear_session()

    async def add_sequenced_items(self, items: list[Any]) -> list[int]:
        return await self.real.add_sequenced_items(items)

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, Any]]:
        return await self.real.get_sequenced_items(limit, after=after, before=before)

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        return await self.real.count_items(after=after, before=before)

    capabilities = frozenset({Capability.SEQUENCED, Capability.FAMILY})

    def side_store(self, purpose: str) -> SequencedOnly:
        return SequencedOnly(self.real.side_store(purpose))


def pruning_inner(kind: str, tmp_path: Path) -> Session:
    if kind == "memory":
        return InMemorySession(sid(), store=InMemoryStore())
    if kind == "yielding-memory":
        return YieldingSession(sid(), store=InMemoryStore())
    if kind == "sqlite":
        return SQLiteSession(sid(), str(tmp_path / "prune.db"))
    assert kind == "encrypted-sqlite"
    return EncryptedSession(SQLiteSession(sid(), str(tmp_path / "prune.db")), encryption_key=KEY)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["memory", "sqlite", "encrypted-sqlite"])
async def test_prune_archive_deletes_only_archived_originals(kind: str, tmp_path: Path) -> None:
    session = CompactionSession(pruning_inner(kind, tmp_path), keep_last=2)
    items = [msg(f"m{i}") for i in range(14)]
    await session.add_items(items[:6])
    assert (await session.compact()) is not None  # archives m0-m3
    await session.add_items(items[6:10])
    assert (await session.compact()) is not None  # archives m4-m7
    view = await session.get_items()
    assert originals(view) == ["m8", "m9"]
    records = await session.get_compaction_records()
    assert [r.archived for r in records] == [4, 8]

    assert await session.prune_archive(keep_compactions=2) == 0
    assert await session.get_archived_items() == items[:8]
    assert await session.prune_archive(keep_compactions=1) == 4  # what the first one archived
    assert await session.get_items() == view
    assert await session.get_archived_items() == items[4:8]
    assert await session.search_archive("m1") == []
    assert await session.search_archive("m5") == [items[5]]
    assert await session.get_compaction_records() == records
    assert await session.inner.get_items() == items[4:10]

    assert await session.prune_archive() == 4
    assert await session.get_items() == view
    assert await session.get_archived_items() == []
    assert await session.inner.get_items() == items[8:10]
    assert await session.prune_archive() == 0
    assert await session.get_compaction_records() == records

    # a later compaction extends the kept summary and archives only what it covers
    await session.add_items(items[10:14])
    result = await session.compact()
    assert result is not None and result.compacted_items == 4
    view = await session.get_items()
    assert originals(view) == ["m12", "m13"]
    assert "m0" in item_text(view[0]) and "m11" in item_text(view[0])
    assert await session.get_archived_items() == items[8:12]
    assert [r.archived for r in await session.get_compaction_records()] == [4, 8, 12]
    assert await session.prune_archive() == 4
    assert await session.get_items() == view
    assert await session.inner.get_items() == items[12:14]
    await session.close()


@pytest.mark.asyncio
async def test_prune_counts_compactions_not_pop_records() -> None:
    session = new_session(keep_last=2)
    items = [msg(f"m{i}") for i in range(6)]
    await session.add_items(items)
    await session.compact()
    assert [item_text(await session.pop_item()) for _ in range(2)] == ["m5", "m4"]
    assert is_summary(await session.pop_item())  # commits a "pop" record, same boundary
    assert [r.reason for r in await session.get_compaction_records()] == ["compaction", "pop"]
    assert await session.prune_archive(keep_compactions=1) == 0
    assert await session.get_archived_items() == items[:4]
    assert await session.prune_archive() == 4
    assert await session.get_items() == []
    assert await session.inner.get_items() == []
    await session.add_items([msg("after")])
    assert await session.get_items() == [msg("after")]


@pytest.mark.asyncio
async def test_prune_without_compaction_is_a_noop() -> None:
    session = new_session()
    items = [msg(f"m{i}") for i in range(3)]
    await session.add_items(items)
    assert await session.prune_archive() == 0
    assert await session.prune_archive(keep_compactions=3) == 0
    assert await session.get_items() == items
    assert await session.inner.get_items() == items
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError, match="keep_compactions"):
            await session.prune_archive(keep_compactions=bad)  # type: ignore[arg-type]


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", ["sequenced-only"])
async def test_prune_over_a_stack_without_range_delete_refuses_and_keeps_all(stack: str) -> None:
    inner: Session = SequencedOnly(InMemorySession(sid(), store=InMemoryStore()))
    session = CompactionSession(inner, keep_last=2)
    items = [msg(f"m{i}") for i in range(6)]
    with pytest.raises(NotImplementedError, match="range deletion"):
        await session.prune_archive()
    await session.add_items(items)
    assert (await session.compact()) is not None
    view = await session.get_items()
    with pytest.raises(NotImplementedError, match="clear_session"):
        await session.prune_archive()
    assert await session.get_items() == view
    assert originals(view) == ["m4", "m5"]
    assert await session.get_archived_items() == items[:4]
    assert await session.inner.get_items() == items


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["yielding-memory", "sqlite"])
async def test_concurrent_writes_during_prune_lose_nothing(kind: str, tmp_path: Path) -> None:
    session = CompactionSession(pruning_inner(kind, tmp_path), keep_last=2)
    items = [msg(f"m{i}") for i in range(20)]
    await session.add_items(items)
    await session.compact()
    summary = (await session.get_items())[0]
    assert is_summary(summary)

    async def writer(w: int) -> None:
        for k in range(5):
            await session.add_items([msg(f"w{w}-{k}"), msg(f"w{w}-{k}b", "assistant")])
            await asyncio.sleep(0)

    pruned, *_ = await asyncio.gather(session.prune_archive(), *(writer(w) for w in range(8)))
    assert pruned == 18
    stored = await session.inner.get_items()
    assert stored[:2] == items[18:]
    written = [item_text(i) for i in stored[2:]]
    assert sorted(written) == sorted(
        f"w{w}-{k}{b}" for w in range(8) for k in range(5) for b in ("", "b")
    )
    for w in range(8):  # each writer's items in its order
        mine = [t for t in written if t.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{k}{b}" for k in range(5) for b in ("", "b")]
    assert await session.get_items() == [summary, *stored]
    assert await session.get_archived_items() == []
    await session.close()


@pytest.mark.asyncio
async def test_prune_during_a_compaction_keeps_its_commit() -> None:
    session = new_session(keep_last=2)
    items = [msg(f"m{i}") for i in range(10)]
    await session.add_items(items[:6])
    await session.compact()  # archives m0-m3
    await session.add_items(items[6:])
    gate = GatedSummarizer()
    session.summarizer = gate
    task = asyncio.ensure_future(session.compact())
    await asyncio.wait_for(gate.started.wait(), 5)
    assert await session.prune_archive() == 4  # while m4-m7 are being summarised
    gate.release.set()
    result = await task
    assert result is not None and result.compacted_items == 4
    assert originals(await session.get_items()) == ["m8", "m9"]
    assert await session.get_archived_items() == items[4:8]
    assert await session.inner.get_items() == items[4:]


@pytest.mark.asyncio
async def test_expiry_below_a_boundary_keeps_the_unsummarised_items() -> None:
    from tests.wrapper_stacks import FakeClock

    clock = FakeClock()
    inner = EncryptedSession(
        TTLSession(InMemorySession(sid()), item_ttl=100, clock=clock), encryption_key=KEY
    )
    session = CompactionSession(inner, keep_last=2)
    for i in range(6):
        await session.add_items([msg(f"m{i}", "user" if i % 2 == 0 else "assistant")])
        clock.advance(10)
    assert (await session.compact()) is not None
    assert originals(await session.get_items()) == ["m4", "m5"]
    clock.advance(55)  # m0 and m1 expire; m4 and m5 are alive for another 50 s
    assert originals(await session.get_items()) == ["m4", "m5"]


async def _dispose(first: Any, second: Any, backend: str) -> None:
    """Clear the session two objects shared, close both, drop the run's Redis keys."""
    from tests.matrix import REDIS_PREFIX
    from tests.servers import REDIS_URL, drop_redis_keys

    await first.clear_session()
    await first.close()
    await second.close()
    if backend == "redis":
        await drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*")


GUARDED_BACKENDS = ["memory", "sqlite", "redis", "postgres", "mariadb", "sqlalchemy-sqlite"]
"""The backends whose stores guard a pop (GUARDED_WRITE) in one atomic step."""


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", GUARDED_BACKENDS)
async def test_a_pop_after_another_objects_compaction_pops_the_summary(backend: str) -> None:
    """A pop decided on 'no records' (a fresh object, or one that last saw none) must not
    remove an original that another object's compaction archived meanwhile."""
    from tests.matrix import BACKENDS

    found = next(b for b in BACKENDS if b.name == backend)
    if found.needs is not None:
        found.needs()
    session_id = sid()
    first = CompactionSession(await found.open(session_id), keep_last=0)
    second = CompactionSession(await found.open(session_id), keep_last=0)
    try:
        items = [msg("a"), msg("b", "assistant"), msg("c", "assistant"), msg("d", "assistant")]
        await first.add_items(items)
        assert await first.pop_item() == items[-1]
        result = await second.compact()
        assert result is not None and result.kept_items == 0
        summary = await second.get_items()
        assert [is_summary(i) for i in summary] == [True] * len(summary)
        assert await first.pop_item() == summary[-1]
        assert await first.get_items() == summary[:-1]
        assert await first.get_archived_items() == items[:3]
        assert await first.inner.get_items() == items[:3]
    finally:
        await _dispose(first, second, backend)


@pytest.mark.asyncio
@pytest.mark.parametrize("guard", ["store's guard", "no guard"])
@pytest.mark.parametrize("backend", [*GUARDED_BACKENDS, "mongodb-standin"])
async def test_a_pop_whose_item_another_object_popped_meanwhile_pops_the_summary(
    backend: str, guard: str
) -> None:
    """Between a pop's read (a new item after the boundary) and its write, another object pops
    that item: the pop must then take the summary's last item, never an archived original
    (a guarded pop, or, where the store declines to guard, a checked pop of the item read)."""
    from tests.matrix import BACKENDS

    found = next(b for b in BACKENDS if b.name == backend)
    if found.needs is not None:
        found.needs()
    session_id = sid()
    first = CompactionSession(await found.open(session_id), keep_last=0)
    second = CompactionSession(await found.open(session_id), keep_last=0)
    try:
        items = [msg("a"), msg("b", "assistant"), msg("c", "assistant")]
        await first.add_items(items)
        assert (await first.compact()) is not None
        summary = await first.get_items()
        await first.add_items([msg("x")])
        inner: Any = first.inner
        guarded_pop, checked_pop = inner.pop_if_newest, inner.pop_checked
        raced: list[Any] = []

        async def rival() -> None:
            if not raced:
                raced.append(await second.pop_item())

        async def guarded_after_a_rival(on: Any, seq: int | None, **kwargs: Any) -> Any:
            if guard == "no guard":
                return False, None
            if seq is not None:  # chosen after reading the records and x
                await rival()
            return await guarded_pop(on, seq, **kwargs)

        async def checked_after_a_rival(check: Any) -> Any:
            await rival()
            return await checked_pop(check)

        inner.pop_if_newest, inner.pop_checked = guarded_after_a_rival, checked_after_a_rival
        popped = await first.pop_item()
        assert raced == [msg("x")]
        assert popped == summary[-1], "an archived original or a popped item came back"
        assert await first.inner.get_items() == items, "an archived original was popped"
        assert await first.get_archived_items() == items
    finally:
        await _dispose(first, second, backend)


UNGUARDED_STACKS: dict[str, Callable[[Session], Session]] = {
    "encrypted ttl": lambda s: EncryptedSession(TTLSession(s, ttl=86_400.0), encryption_key=KEY),
    "advanced": lambda s: AdvancedSession(s),  # a view: numbered through ForeignSession
}
"""Inner stacks that guard no pop in one step (no GUARDED_WRITE): compaction pops the item it
read through the inner's checked pop."""


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", sorted(UNGUARDED_STACKS))
async def test_a_pop_racing_another_objects_pop_over_an_unguarded_inner_keeps_the_archive(
    stack: str,
) -> None:
    """Two objects pop the last item after the boundary at once: the one whose item the other
    took must pop the summary's last item. Over an inner without GUARDED_WRITE it used to pop
    the inner's newest item unchecked, an archived original, and return it while the summary
    still showed it (so it was popped and visible). Found by tests/test_interleavings.py."""
    store, session_id = InMemoryStore(), sid()
    wrap = UNGUARDED_STACKS[stack]
    first, second = (
        CompactionSession(wrap(InMemorySession(session_id, store=store)), keep_last=0)
        for _ in range(2)
    )
    items = [msg("a"), msg("b", "assistant"), msg("c", "assistant")]
    await first.add_items(items)
    assert (await first.compact()) is not None
    summary = await first.get_items()
    await first.add_items([msg("x")])
    second._pop_lock = asyncio.Lock  # type: ignore[method-assign]  # as if in another process
    pop_read = first._pop_read
    raced: list[Any] = []

    async def after_a_rival(item: Any) -> Any:  # between first's read of x and its pop
        if not raced:
            raced.append(await second.pop_item())
        return await pop_read(item)

    first._pop_read = after_a_rival  # type: ignore[method-assign]
    popped = await first.pop_item()
    assert raced == [msg("x")]
    assert popped == summary[-1], "an archived original was popped"
    assert await second.get_items() == summary[:-1]
    assert await first.get_archived_items() == items


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", GUARDED_BACKENDS)
async def test_objects_popping_the_summary_at_once_get_each_item_once(backend: str) -> None:
    """Two objects pop when only summary items are left: each commits a record without the
    summary's last item. Both used to commit one from the same record in force and return
    the same item (one item popped twice, another gone unreturned). The records' newest number
    now guards that commit; the loser reads again and pops the next item. Found by
    tests/test_interleavings.py (compaction)."""
    from tests.matrix import BACKENDS

    found = next(b for b in BACKENDS if b.name == backend)
    if found.needs is not None:
        found.needs()
    session_id = sid()
    summarizer = IdentitySummarizer()
    first, second = [
        CompactionSession(await found.open(session_id), summarizer=summarizer, keep_last=0)
        for _ in range(2)
    ]
    try:
        items = [msg("a"), msg("b", "assistant"), msg("c", "assistant")]
        await first.add_items(items)
        assert (await first.compact()) is not None
        assert await first.inner.get_items(1) == items[-1:] and await first.get_items() == items
        sibling: Any = first._sibling
        add, guarded = sibling.add_items, sibling.append_if_newest
        raced: list[Any] = []
        started: list[bool] = []  # (SQLite and Redis share one records object per process)

        async def rival() -> None:  # between first's read of the record and its commit
            if not started:
                started.append(True)
                raced.append(await second.pop_item())

        async def add_after_a_rival(records: list[Any]) -> None:
            await rival()
            await add(records)

        async def guarded_after_a_rival(guard: Any, seq: int | None, records: list[Any]) -> Any:
            await rival()
            return await guarded(guard, seq, records)

        sibling.add_items, sibling.append_if_newest = add_after_a_rival, guarded_after_a_rival
        popped = await first.pop_item()
        assert raced == [items[-1]]
        assert popped == items[-2], "the item another object popped was popped again"
        assert await second.get_items() == items[:1]
        assert await first.get_archived_items() == items
    finally:
        await _dispose(first, second, backend)


async def _two_unguarded_objects(stack: str) -> tuple[Any, Any, list[Any]]:
    """Two CompactionSessions over one in-memory session wrapped as ``stack``, holding a, b
    and c (identity summariser, keep_last=0)."""
    store, session_id = InMemoryStore(), sid()
    wrap, summarizer = UNGUARDED_STACKS[stack], IdentitySummarizer()
    first, second = (
        CompactionSession(
            wrap(InMemorySession(session_id, store=store)), summarizer=summarizer, keep_last=0
        )
        for _ in range(2)
    )
    items = [msg("a"), msg("b", "assistant"), msg("c", "assistant")]
    await first.add_items(items)
    return first, second, items


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", sorted(UNGUARDED_STACKS))
async def test_objects_popping_the_summary_over_an_unguarded_inner_get_each_item_once(
    stack: str,
) -> None:
    """As above over layers that guard no write: two objects of one process popping the
    summary at once used to commit records from the same one and return the same item. Their
    pops are now serialised per session id within the process."""
    first, second, items = await _two_unguarded_objects(stack)
    assert (await first.compact()) is not None
    assert await first.inner.get_items(1) == items[-1:] and await first.get_items() == items
    for session in (first, second):
        sibling: Any = session._sibling
        add = sibling.add_items

        async def slow_add(records: list[Any], add: Any = add) -> None:  # a slow round trip
            for _ in range(5):
                await asyncio.sleep(0)
            await add(records)

        sibling.add_items = slow_add
    popped = await asyncio.gather(first.pop_item(), second.pop_item())
    assert sorted(item_text(i) for i in popped) == ["b", "c"], "an item was popped twice"
    assert await first.get_items() == items[:1]
    assert await first.get_archived_items() == items


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", sorted(UNGUARDED_STACKS))
async def test_a_pop_between_another_objects_compaction_check_and_commit_waits(
    stack: str,
) -> None:
    """Over layers that guard no write, another object's pop used to land between a
    compaction's check of the items and its commit: the committed summary still held the
    popped item (popped and visible). The commit now holds the process's pop lock for the
    session id, so the pop comes after it and pops the summary's last item."""
    first, second, items = await _two_unguarded_objects(stack)
    verify, checked = first._verify_unchanged, asyncio.Event()

    async def verify_then_yield(*args: Any) -> None:
        await verify(*args)
        checked.set()
        for _ in range(10):  # the commit's round trip: another task may run
            await asyncio.sleep(0)

    first._verify_unchanged = verify_then_yield  # type: ignore[method-assign,assignment]

    async def pop_after_the_check() -> Any:
        await checked.wait()
        return await second.pop_item()

    result, popped = await asyncio.gather(first.compact(), pop_after_the_check())
    assert result is not None and result.compacted_items == 3
    assert popped == items[-1]
    assert await first.get_items() == items[:-1], "the popped item is still visible"


@pytest.mark.asyncio
@pytest.mark.parametrize("records", ["none yet", "another object's"])
async def test_a_pop_between_another_objects_compaction_check_and_commit_drops_it(
    records: str,
) -> None:
    """On a store that guards writes, another object's pop of a summarised item between a
    compaction's check and its commit used to leave that item in the committed summary
    (popped and visible). The commit is now guarded by the session's newest number: it is
    refused, checked again, and dropped (the summarised items changed). Also by an object
    that had read the records only whole (its records store not yet listed in the family,
    which its guarded writes refused: the commit took the plain append)."""
    store, session_id = InMemoryStore(), sid()
    first, second, writer = (
        CompactionSession(
            InMemorySession(session_id, store=store), summarizer=IdentitySummarizer(), keep_last=0
        )
        for _ in range(3)
    )
    items = [msg("a"), msg("b", "assistant"), msg("c", "assistant")]
    if records == "another object's":
        await writer.add_items([msg("z"), msg("y", "assistant")])
        assert await writer.compact() is not None
        assert await first.get_items() == [msg("z"), msg("y", "assistant")]
        items = [msg("z"), msg("y", "assistant"), *items]
        first._sibling.listed()  # type: ignore[attr-defined]  # as after a sequenced read
    await first.add_items(items[-3:])
    verify = first._verify_unchanged
    raced: list[Any] = []

    async def verify_then_a_rival(*args: Any) -> None:
        await verify(*args)
        if not raced:
            raced.append(await second.pop_item())

    first._verify_unchanged = verify_then_a_rival  # type: ignore[method-assign,assignment]
    assert await first.compact() is None, "the compaction must be dropped"
    assert raced == [items[-1]]
    assert await first.get_items() == items[:-1], "the popped item is still visible"
