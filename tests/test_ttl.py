"""TTLSession: the conformance kit over three inners, and expiry with a controllable clock."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession

from agent_sessions import Capability, InMemorySession, InMemoryStore, SQLiteSession, supports
from agent_sessions.core.family import side_store
from agent_sessions.testing import SessionConformanceSuite
from agent_sessions.testing.helpers import item_text, texts
from agent_sessions.wrappers.ttl import TTLSession
from tests.wrapper_stacks import CountingSession, FakeClock, NativeExpiryMemorySession

DAY = 86_400.0


def msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


def sid() -> str:
    return f"ttl-{uuid.uuid4().hex[:12]}"


# -- conformance (a TTL long enough not to interfere) ------------------------------------------


class TestTTLOverSDKSQLiteConformance(SessionConformanceSuite):
    """The SDK's own SQLiteSession as a foreign inner (no item cap, so 16 MiB applies)."""

    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sdk.db")

    async def create_session(self, session_id: str) -> Session:
        return TTLSession(SDKSQLiteSession(session_id, self.path), timedelta(days=1))


# -- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", [0, -1, 0.0, float("nan"), float("inf"), "60", True, timedelta(0), timedelta(seconds=-5)]
)
def test_non_positive_or_non_numeric_ttl_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="ttl"):
        TTLSession(InMemorySession(sid()), bad)
    with pytest.raises(ValueError, match="item_ttl"):
        TTLSession(InMemorySession(sid()), item_ttl=bad)


def test_some_lifetime_is_required() -> None:
    with pytest.raises(ValueError, match="ttl"):
        TTLSession(InMemorySession(sid()))


def test_timedelta_is_seconds() -> None:
    s = TTLSession(InMemorySession(sid()), timedelta(minutes=2), item_ttl=timedelta(seconds=30))
    assert (s.ttl, s.item_ttl) == (120.0, 30.0)


# -- expiry rules -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_sliding_ttl_counts_from_the_last_write_and_never_revives() -> None:
    clock = FakeClock()
    s = TTLSession(InMemorySession(sid(), store=InMemoryStore()), 60, clock=clock)
    await s.add_items([msg("a")])
    clock.advance(50)
    await s.add_items([msg("b")])
    clock.advance(50)  # 100 s after a, 50 s after b: the session is alive
    assert texts(await s.get_items()) == ["a", "b"]
    clock.advance(11)  # 61 s without a write
    assert await s.get_items() == []
    assert await s.get_items(limit=1) == []
    await s.add_items([msg("c")])
    assert texts(await s.get_items()) == ["c"], "a write must not bring back dead items"
    assert item_text(await s.pop_item()) == "c"
    assert await s.pop_item() is None, "pop must never return an expired item"
    assert await s.get_items() == []


@pytest.mark.asyncio
async def test_absolute_ttl_counts_from_the_first_write() -> None:
    clock = FakeClock()
    s = TTLSession(InMemorySession(sid(), store=InMemoryStore()), 60, sliding=False, clock=clock)
    await s.add_items([msg("a")])
    clock.advance(50)
    await s.add_items([msg("b")])
    clock.advance(5)
    assert texts(await s.get_items()) == ["a", "b"]
    clock.advance(6)  # 61 s after the first write: writes in between did not extend it
    assert await s.get_items() == []
    await s.add_items([msg("c")])  # a new lifetime starts
    clock.advance(59)
    await s.add_items([msg("d")])
    assert texts(await s.get_items()) == ["c", "d"]
    clock.advance(2)
    assert await s.get_items() == []
    assert await s.pop_item() is None


@pytest.mark.asyncio
async def test_item_ttl_hides_old_items_and_pop_never_pops_them() -> None:
    clock = FakeClock()
    s = TTLSession(InMemorySession(sid(), store=InMemoryStore()), item_ttl=30, clock=clock)
    await s.add_items([msg("a")])
    clock.advance(20)
    await s.add_items([msg("b"), msg("c")])
    clock.advance(11)  # a is 31 s old, b and c 11 s
    assert texts(await s.get_items()) == ["b", "c"]
    assert texts(await s.get_items(limit=5)) == ["b", "c"]
    assert texts(await s.get_items(limit=1)) == ["c"]
    assert item_text(await s.pop_item()) == "c"
    clock.advance(20)  # b is 31 s old
    assert await s.pop_item() is None
    assert await s.get_items() == []


@pytest.mark.asyncio
async def test_reads_cost_the_limit_not_the_history() -> None:
    clock = FakeClock()
    inner = CountingSession(sid(), store=InMemoryStore())
    s = TTLSession(inner, 60, item_ttl=30, clock=clock)
    for i in range(50):
        await s.add_items([msg(str(i))])
        clock.advance(1)
    inner.limits.clear()
    got = await s.get_items(limit=5)
    assert texts(got) == ["45", "46", "47", "48", "49"]
    assert inner.limits == [5]
    inner.limits.clear()
    assert len(await s.get_items(limit=40)) == 30  # items 20..49 are younger than 30 s
    assert inner.limits == [40]


@pytest.mark.asyncio
async def test_session_settings_limit_applies_through_the_layer() -> None:
    s = TTLSession(InMemorySession(sid(), store=InMemoryStore()), DAY)
    await s.add_items([msg(str(i)) for i in range(5)])
    from agents.memory import SessionSettings

    s.session_settings = SessionSettings(limit=2)
    assert s.inner.session_settings is s.session_settings
    assert texts(await s.get_items()) == ["3", "4"]


@pytest.mark.asyncio
async def test_items_not_written_through_the_layer_are_never_shown() -> None:
    inner = InMemorySession(sid(), store=InMemoryStore())
    await inner.add_items([msg("legacy, age unknown")])
    s = TTLSession(inner, DAY)
    assert await s.get_items() == []
    await s.add_items([msg("new")])
    assert texts(await s.get_items()) == ["new"]
    raw: list[Any] = list(await inner.get_items())
    assert raw[-1]["type"] == "agent_sessions.ttl" and raw[-1]["item"] == msg("new")


@pytest.mark.asyncio
async def test_bad_item_names_its_index_and_writes_nothing() -> None:
    inner = InMemorySession(sid(), store=InMemoryStore())
    s = TTLSession(inner, DAY)
    with pytest.raises(ValueError, match="item 1"):
        bad: Any = {"role": "user", "content": {1}}
        await s.add_items([msg("ok"), bad])
    with pytest.raises(ValueError, match="item 0"):
        await s.add_items([msg("x" * s.max_item_bytes)])
    assert await inner.get_items() == []


@pytest.mark.asyncio
async def test_the_family_add_stores_what_the_envelope_encodes_to(tmp_path: Path) -> None:
    inner = SQLiteSession(sid(), tmp_path / "t.db", max_item_bytes=400)
    s = TTLSession(inner, DAY, max_item_bytes=1000, clock=lambda: 1764694800.125)
    await s.add_items([msg('h\u00e9 "x" \U0001f600')])
    raw: list[Any] = list(await inner.get_items())
    assert raw == [
        {"type": "agent_sessions.ttl", "t": 1764694800.125, "item": msg('h\u00e9 "x" \U0001f600')}
    ]
    with pytest.raises(ValueError, match=r"item 1 .* above the limit of 400 bytes"):
        await s.add_items([msg("ok"), msg("x" * 380)])  # fits the layer, not the inner
    assert await inner.get_items() == raw, "nothing of the batch was written"
    await inner.close()


# -- physical removal ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_purge_removes_a_dead_session_and_keeps_a_live_one() -> None:
    clock = FakeClock()
    store = InMemoryStore()
    dead = TTLSession(InMemorySession(sid(), store=store), 60, clock=clock, clock_skew=5)
    live = TTLSession(InMemorySession(sid(), store=store), 60, clock=clock, clock_skew=5)
    await dead.add_items([msg(str(i)) for i in range(10)])
    clock.advance(62)
    await live.add_items([msg("fresh")])
    assert await dead.get_items() == []
    assert await dead.purge_expired() == 0, "dead by less than clock_skew: not removed yet"
    clock.advance(4)
    assert await dead.purge_expired() == 10
    assert await dead.inner.count_items() == 0  # type: ignore[attr-defined]
    assert await live.purge_expired() == 0
    assert texts(await live.get_items()) == ["fresh"]


@pytest.mark.asyncio
async def test_purge_removes_only_the_dead_prefix(tmp_path: Path) -> None:
    clock = FakeClock()
    inner = SQLiteSession(sid(), str(tmp_path / "p.db"))
    s = TTLSession(inner, 60, item_ttl=30, clock=clock, clock_skew=0)
    try:
        for i in range(400):  # more than one purge page
            await s.add_items([msg(str(i))])
            clock.advance(0.1)
        # now = start + 40: items written before start + 10 (0..99) are dead
        assert await s.purge_expired() == 100
        assert await inner.count_items() == 300
        assert texts(await s.get_items()) == [str(i) for i in range(100, 400)]
        # a gap longer than ttl kills everything before it
        clock.advance(61)
        await s.add_items([msg("after the gap")])
        assert await s.purge_expired() == 300
        assert texts(await s.get_items()) == ["after the gap"]
    finally:
        await s.clear_session()
        await s.close()


@pytest.mark.asyncio
async def test_purge_reaches_the_dead_prefix_past_a_page_shortened_by_skipped_items() -> None:
    # A non-strict inner leaves undecodable rows out of a read, so a page can come back
    # shorter than asked although older rows exist: that is not the start of the session.
    clock = FakeClock()
    store = InMemoryStore()
    inner = InMemorySession(sid(), store=store)
    s = TTLSession(inner, item_ttl=30, clock=clock, clock_skew=0)
    for i in range(260):
        await s.add_items([msg(str(i))])
        clock.advance(0.1)
    # now = start + 26 + 10: items 0..59 (written before start + 6) are dead
    clock.advance(10)
    store.sessions[inner.session_id].payloads[-5] = "{damaged"  # in the newest page
    assert await s.purge_expired() == 60
    assert texts(await s.get_items()) == [str(i) for i in range(60, 260) if i != 255]


@pytest.mark.asyncio
async def test_purge_concurrent_with_writers_loses_no_live_item(tmp_path: Path) -> None:
    clock = FakeClock()
    path = str(tmp_path / "c.db")
    s = TTLSession(SQLiteSession(sid(), path), item_ttl=5, clock=clock, clock_skew=0)
    written: list[tuple[float, str]] = []
    purged = 0

    async def writer(w: int) -> None:
        for k in range(60):
            clock.advance(0.05)
            text = f"{w}:{k}"
            written.append((clock(), text))  # the layer stamps before its first await
            await s.add_items([msg(text)])

    async def purger() -> None:
        nonlocal purged
        while len(written) < 4 * 60:
            purged += await s.purge_expired()
            await asyncio.sleep(0)

    try:
        await asyncio.gather(*(writer(w) for w in range(4)), purger())
        now = clock()
        got = texts(await s.get_items())
        # every item still within its lifetime is there, each writer's in its own order
        live = [text for t, text in written if now - t <= 5]
        assert live and set(live) <= set(got)
        for w in range(4):
            mine = [int(text.split(":")[1]) for text in got if text.startswith(f"{w}:")]
            assert mine == sorted(mine)
        assert purged > 0
        purged += await s.purge_expired()
        assert await s.inner.count_items() == len(got)  # type: ignore[attr-defined]
        assert purged + len(got) == 4 * 60
    finally:
        await s.clear_session()
        await s.close()


async def _native_inner(backend: str) -> tuple[Any, Callable[[], Awaitable[int]]]:
    """A Redis (real server) or MongoDB (stand-in) session, and a probe that counts the items
    physically stored for it, read from the raw store."""
    if backend == "redis":
        from urllib.parse import urlsplit

        from agent_sessions import RedisSession
        from tests.servers import REDIS_URL, RUN, require_server

        parts = urlsplit(REDIS_URL)
        require_server("Redis", parts.hostname or "127.0.0.1", parts.port or 6379)
        redis = RedisSession.from_url(sid(), url=REDIS_URL, key_prefix=f"ttl{RUN}")

        async def stored_in_redis() -> int:
            return int(await redis.client.zcard(redis.keys[0]))

        return redis, stored_in_redis
    from mongomock_motor import AsyncMongoMockClient

    from agent_sessions import MongoDBSession

    mongo = MongoDBSession(sid(), client=AsyncMongoMockClient(), database="ttl_test")
    messages = mongo.client[mongo.database][mongo.messages_collection]

    async def stored_in_mongodb() -> int:
        docs = [d async for d in messages.find({"session_id": mongo.session_id})]
        assert all(d["n"] == len(d["items"]) for d in docs)
        return sum(d["n"] for d in docs)

    return mongo, stored_in_mongodb


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["redis", "mongodb-standin"])
async def test_purge_physically_removes_expired_items_from_redis_and_mongodb(
    backend: str,
) -> None:
    clock = FakeClock()
    inner, stored = await _native_inner(backend)
    s = TTLSession(inner, item_ttl=30, clock=clock, clock_skew=0)
    try:
        for i in range(5):  # batches of two written at t = 0, 10, 20, 30, 40
            await s.add_items([msg(f"{i}a"), msg(f"{i}b")])
            clock.advance(10)
        clock.advance(1)  # t = 51: the batches of t = 0, 10 and 20 are older than 30 s
        assert await stored() == 10
        assert await s.purge_expired() == 6
        assert await stored() == 4, "expired items must be gone from the store itself"
        assert texts(await s.get_items()) == ["3a", "3b", "4a", "4b"]
        assert await s.purge_expired() == 0
        await s.clear_session()
        await s.add_items([msg("after clear")])
        assert texts(await s.get_items()) == ["after clear"]
        clock.advance(31)
        assert await s.purge_expired() == 1
        assert await stored() == 0
    finally:
        await s.clear_session()
        if backend == "redis":
            await inner.client.delete(*inner.keys)  # the counter hash clear_session keeps
        await s.close()


@pytest.mark.asyncio
async def test_purge_over_a_session_without_the_capability_says_so(tmp_path: Path) -> None:
    s = TTLSession(SDKSQLiteSession(sid(), str(tmp_path / "sdk.db")), 60)
    with pytest.raises(NotImplementedError, match="range deletion"):
        await s.purge_expired()
    await s.close()


@pytest.mark.asyncio
async def test_expiry_is_pushed_down_to_native_expiry() -> None:
    clock = FakeClock()
    inner = NativeExpiryMemorySession(sid(), clock=clock, store=InMemoryStore())
    s = TTLSession(inner, 60, item_ttl=90, clock=clock, clock_skew=5)
    assert inner.native_ttl == 65  # the session is dead 60 s after its last write, +skew
    await s.add_items([msg("a")])
    clock.advance(40)
    await s.add_items([msg("b")])
    clock.advance(64)
    await inner.sweep()
    assert texts(await s.get_items()) == [], "dead by the layer's clock already"
    assert await inner.count_items() == 2, "the store keeps it for the skew margin"
    clock.advance(2)
    await inner.sweep()
    assert await inner.count_items() == 0


@pytest.mark.asyncio
async def test_family_writes_keep_a_quiet_side_stores_native_expiry_alive() -> None:
    clock = FakeClock()
    inner = NativeExpiryMemorySession(sid(), clock=clock, store=InMemoryStore())
    s = TTLSession(inner, 60, clock=clock, clock_skew=5)
    await side_store(s, "side").add_items([msg("side")])
    stored = side_store(inner, "side")
    assert isinstance(stored, NativeExpiryMemorySession)
    clock.advance(40)  # over ttl / 2: this write pushes expiry to every member
    await s.add_items([msg("main")])
    clock.advance(30)  # 70 s after the side store's own write, 30 s after the family's
    await stored.sweep()
    assert await stored.count_items() == 1
    assert texts(await side_store(s, "side").get_items()) == ["side"]


def test_side_stores_carry_the_same_expiry() -> None:
    s = TTLSession(InMemorySession(sid()), 60, sliding=False, item_ttl=10)
    other = side_store(s, "side")
    assert isinstance(other, TTLSession)
    assert (other.ttl, other.sliding, other.item_ttl) == (60, False, 10)


def test_a_family_exists_only_when_the_inner_has_one(tmp_path: Path) -> None:
    assert supports(TTLSession(InMemorySession(sid()), 60), Capability.FAMILY)
    foreign = SDKSQLiteSession(sid(), str(tmp_path / "x.db"))
    assert not supports(TTLSession(foreign, 60), Capability.FAMILY)
    with pytest.raises(TypeError, match="FAMILY"):
        side_store(TTLSession(foreign, 60), "side")
    foreign.close()


@pytest.mark.asyncio
async def test_runner_does_not_see_expired_history() -> None:
    from agents import Runner

    from agent_sessions.testing.helpers import model_input_texts, scripted_agent
    from agent_sessions.wrappers.encrypted import EncryptedSession

    clock = FakeClock()
    ttl = TTLSession(InMemorySession(sid(), store=InMemoryStore()), 600, clock=clock)
    s = EncryptedSession(ttl, encryption_key="test passphrase that is long enough, really")
    agent, model = scripted_agent("Noted.", "I do not know.", "Blue.")
    await Runner.run(agent, "My favourite colour is blue.", session=s)
    clock.advance(601)
    await Runner.run(agent, "What is my favourite colour?", session=s)
    assert model_input_texts(model) == ["What is my favourite colour?"]
    clock.advance(300)
    await Runner.run(agent, "Are you sure?", session=s)
    assert model_input_texts(model) == [
        "What is my favourite colour?",
        "I do not know.",
        "Are you sure?",
    ]


@pytest.mark.asyncio
async def test_sliding_expiry_counts_from_the_familys_last_write_even_after_a_pop() -> None:
    clock = FakeClock()
    s = TTLSession(InMemorySession(sid(), store=InMemoryStore()), 60, clock=clock)
    await s.add_items([msg("a")])
    clock.advance(50)
    await s.add_items([msg("b")])
    clock.advance(50)
    assert item_text(await s.pop_item()) == "b"
    assert [item_text(i) for i in await s.get_items()] == ["a"], "last write at 50: alive"
    clock.advance(11)
    assert await s.get_items() == [], "documented: a pop does not extend the session"


# -- sequence numbers through the TTL layer ----------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "settings",
    [
        {"item_ttl": 30},
        {"ttl": 25},
        {"ttl": 60, "sliding": False},
        {"ttl": 40, "item_ttl": 70},
    ],
    ids=["item_ttl", "sliding", "absolute", "sliding+item_ttl"],
)
@pytest.mark.parametrize("seed", range(6))
async def test_ranged_reads_agree_with_get_items_while_items_expire(
    settings: dict[str, Any], seed: int
) -> None:
    """Random adds, pops, clock jumps and clears: after each step the sequenced view equals
    get_items(), ranged reads and counts are its slices, and every live item keeps its number."""
    import random

    rng = random.Random(seed)
    clock = FakeClock()
    inner = InMemorySession(sid(), store=InMemoryStore())
    s = TTLSession(inner, clock=clock, clock_skew=0, **settings)
    other = TTLSession(inner, clock=clock, clock_skew=0, **settings)  # a second object
    numbers: dict[str, int] = {}
    for step in range(120):
        roll = rng.random()
        if roll < 0.45:
            batch = [msg(f"{step}.{k}") for k in range(rng.randint(1, 3))]
            writer = s if rng.random() < 0.7 else other
            for seq, item in zip(await writer.add_sequenced_items(batch), batch, strict=True):
                numbers[item_text(item)] = seq
        elif roll < 0.6:
            await (s if rng.random() < 0.5 else other).pop_item()
        elif roll < 0.95:
            clock.advance(rng.choice([1, 3, 8, 20, 35]))
        else:
            await other.clear_session()
        visible = texts(await s.get_items())
        rows = await s.get_sequenced_items()
        assert [item_text(i) for _, i in rows] == visible
        assert all(numbers[item_text(i)] == q for q, i in rows), "numbers never shift"
        assert await s.count_items() == len(visible)
        if len(rows) >= 3:
            lo, hi = rows[0][0], rows[-1][0]
            middle = [item_text(i) for _, i in await s.get_sequenced_items(after=lo, before=hi)]
            assert middle == visible[1:-1]
            assert texts(await s.get_items(2)) == visible[-2:]
            assert [item_text(i) for _, i in await s.get_sequenced_items(2, before=hi)] == (
                visible[-3:-1]
            )
            assert await s.count_items(after=lo, before=hi) == len(visible) - 2
        assert [item_text(i) for _, i in await other.get_sequenced_items()] == visible


@pytest.mark.asyncio
async def test_a_foreign_or_damaged_row_hides_everything_older_in_ranged_reads() -> None:
    clock = FakeClock()
    inner = InMemorySession(sid(), store=InMemoryStore())
    s = TTLSession(inner, item_ttl=100, clock=clock)
    await s.add_items([msg("a"), msg("b")])
    await inner.add_items([msg("planted, no envelope")])
    await s.add_items([msg("c")])
    assert texts(await s.get_items()) == ["c"]
    assert [item_text(i) for _, i in await s.get_sequenced_items()] == ["c"]
    assert await s.count_items() == 1
    await inner.add_items([{"type": "agent_sessions.ttl", "t": clock()}])  # type: ignore[list-item]
    await s.add_items([msg("d")])
    assert texts(await s.get_items()) == ["d"], "an envelope without an item is damaged: hidden"
    assert [item_text(i) for _, i in await s.get_sequenced_items()] == ["d"]
    assert item_text(await s.pop_item()) == "d"
    assert await s.get_items() == []  # the damaged envelope is now the newest: nothing older
    assert await s.pop_item() is None  # the damaged one: removed, never returned
    await s.add_items([msg("e")])
    assert texts(await s.get_items()) == ["c", "e"]
    assert [item_text(i) for _, i in await s.get_sequenced_items()] == ["c", "e"]


@pytest.mark.parametrize("wrapper", ["branching", "usage", "compaction", "advanced"])
def test_position_keeping_wrappers_refuse_expiry_without_sequence_numbers(
    wrapper: str, tmp_path: Path
) -> None:
    from agent_sessions.wrappers.advanced import AdvancedSession
    from agent_sessions.wrappers.branching import BranchingSession
    from agent_sessions.wrappers.compaction import CompactionSession
    from agent_sessions.wrappers.encrypted import EncryptedSession
    from agent_sessions.wrappers.usage import UsageTrackingSession

    make: dict[str, Callable[..., Any]] = {
        "branching": BranchingSession,
        "usage": UsageTrackingSession,
        "compaction": CompactionSession,
        "advanced": AdvancedSession,
    }
    foreign = SDKSQLiteSession(sid(), str(tmp_path / "sdk.db"))
    factory = {"sibling_factory": lambda i: SDKSQLiteSession(i, str(tmp_path / "sdk.db"))}
    try:
        stack = EncryptedSession(TTLSession(foreign, 3600), encryption_key="k" * 40)
        with pytest.raises(ValueError, match="TTLSession in it removes old items from reads"):
            make[wrapper](stack, **factory)
        make[wrapper](foreign, **factory)  # without expiry, ForeignSession numbers it
        numbered = TTLSession(InMemorySession(sid()), 3600)
        make[wrapper](EncryptedSession(numbered, encryption_key="k" * 40))  # numbered: fine
    finally:
        foreign.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("change", ["clear", "deep-pops", "purge-then-pops"])
async def test_ranged_reads_follow_big_changes_made_by_another_object(change: str) -> None:
    clock = FakeClock()
    inner = InMemorySession(sid(), store=InMemoryStore())
    s = TTLSession(inner, item_ttl=1000, clock=clock, clock_skew=0)
    other = TTLSession(inner, item_ttl=1000, clock=clock, clock_skew=0)
    await s.add_items([msg(f"old{i}") for i in range(30)])
    assert len(await s.get_sequenced_items()) == 30  # s now knows 30 live items
    if change == "clear":
        await other.clear_session()
        await other.add_items([msg("new")])
        expected = ["new"]
    elif change == "deep-pops":
        for _ in range(12):  # more than the tail a refresh re-reads
            await other.pop_item()
        await other.add_items([msg("new")])
        expected = [f"old{i}" for i in range(18)] + ["new"]
    else:
        clock.advance(500)
        await other.add_items([msg(f"mid{i}") for i in range(10)])
        clock.advance(600)  # the 30 old items are dead, the 10 mid ones live
        assert await other.purge_expired() == 30
        for _ in range(3):
            await other.pop_item()
        expected = [f"mid{i}" for i in range(7)]
    assert [item_text(i) for _, i in await s.get_sequenced_items()] == expected
    assert texts(await s.get_items()) == expected
    assert await s.count_items() == len(expected)


@pytest.mark.asyncio
async def test_ranged_reads_forget_items_once_they_expire() -> None:
    """The boundary tracker keeps only what can still expire: with item_ttl, an object that
    lives long (a server's) must not hold every item it ever saw."""
    clock = FakeClock()
    s = TTLSession(InMemorySession(sid(), store=InMemoryStore()), item_ttl=10, clock=clock)
    for i in range(300):
        await s.add_items([msg(f"m{i}")])
        clock.advance(1)
        rows = await s.get_sequenced_items()
        assert len(rows) == min(i + 1, 10)
    assert len(s._boundary.seqs) <= 11


@pytest.mark.parametrize("wrapper", ["branching", "usage", "compaction"])
def test_the_sdks_expiring_encrypted_session_is_refused_too(wrapper: str, tmp_path: Path) -> None:
    """The SDK's EncryptedSession hides items older than its ttl (always set, 600 s by
    default), so positions into it shift exactly as over a TTLSession."""
    from agents.extensions.memory.encrypt_session import EncryptedSession as SDKEncrypted

    from agent_sessions.wrappers.branching import BranchingSession
    from agent_sessions.wrappers.compaction import CompactionSession
    from agent_sessions.wrappers.usage import UsageTrackingSession

    make: dict[str, Callable[..., Any]] = {
        "branching": BranchingSession,
        "usage": UsageTrackingSession,
        "compaction": CompactionSession,
    }
    path = str(tmp_path / "sdk.db")
    foreign = SDKSQLiteSession("s", path)
    factory = {"sibling_factory": lambda i: SDKSQLiteSession(i, path)}
    try:
        with pytest.raises(ValueError, match="EncryptedSession in it removes old items"):
            make[wrapper](SDKEncrypted("s", foreign, "k" * 44, ttl=60), **factory)
    finally:
        foreign.close()


@pytest.mark.asyncio
async def test_a_reused_lifecycle_record_shows_what_a_fresh_read_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_sessions.wrappers.ttl import family

    reads: list[float] = []
    original = family.Lifecycle.read

    async def counted(self: Any) -> Any:
        reads.append(clock())
        return await original(self)

    monkeypatch.setattr(family.Lifecycle, "read", counted)
    clock = FakeClock()
    path, session_id = str(tmp_path / "ttl.db"), sid()

    def layer() -> TTLSession:
        return TTLSession(SQLiteSession(session_id, path), ttl=100, clock=clock, clock_skew=5)

    reader, writer = layer(), layer()
    await reader.add_items([msg("1")])
    clock.advance(50)
    family._KNOWN.clear()  # the writer is "another process": the reader keeps its own record
    await writer.add_items([msg("2")])
    family._KNOWN.clear()
    reads.clear()
    assert texts(await reader.get_items()) == ["1", "2"]
    assert reads == []  # its record vouches until t + ttl - clock_skew: no round trip
    clock.advance(52)  # dead by the reader's record, alive by the writer's: read again
    assert texts(await reader.get_items()) == ["1", "2"] and len(reads) == 1
    clock.advance(49)  # 101 s after the last write anywhere: the whole family is dead
    assert await reader.get_items() == []
    assert await layer().get_items() == []


@pytest.mark.asyncio
async def test_a_checked_pop_racing_the_first_write_of_a_family_does_not_drop_it() -> None:
    """A checked pop (EncryptedSession's pop over TTL) read the family's lifecycle record
    before another object's first write and the newest item after it: the item looked dead
    (no lifetime yet), so the pop removed it as expired data and returned None. Found by
    tests/test_interleavings.py (encrypted-ttl)."""
    store, session_id, clock = InMemoryStore(), sid(), FakeClock()
    writer = TTLSession(InMemorySession(session_id, store=store), ttl=DAY, clock=clock)
    inner: Any = InMemorySession(session_id, store=store)
    popper = TTLSession(inner, ttl=DAY, clock=clock)
    pop_checked = inner.pop_checked
    written: list[bool] = []

    async def after_a_write(check: Any) -> Any:  # between the pop's record read and its pop
        if not written:
            await writer.add_items([msg("only")])
            written.append(True)
        return await pop_checked(check)

    inner.pop_checked = after_a_write
    assert item_text(await popper.pop_checked(lambda item: item)) == "only"
    assert written and await writer.get_items() == []
