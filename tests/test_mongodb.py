"""MongoDBSession: the conformance kit and the backend's own behaviour.

No MongoDB server can run on the development machines, so every test runs against the most
faithful stand-in available from PyPI, ``mongomock-motor`` (an in-process imitation of Motor's
client over mongomock), and again against a real server when ``AGENT_SESSIONS_MONGODB_URL`` is
set. The stand-in cannot show transactions, server-side TTL expiry, network behaviour or true
parallelism; docs/mongodb.md says which guarantee was verified where.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_asyncio
from agents.memory import Session
from mongomock_motor import AsyncMongoMockClient

from agent_sessions import open_session
from agent_sessions.backends.mongodb.session import (
    COUNTER_GRACE,
    DEFAULT_DATABASE,
    DEFAULT_MAX_ITEM_BYTES,
    MAX_BATCH_BYTES,
    MongoDBSession,
    ttl_slack,
)
from agent_sessions.core.capabilities import Capability, capabilities_of, supports
from agent_sessions.core.ids import derive_sibling_id
from agent_sessions.errors import (
    BackendDataError,
    BackendUnavailableError,
    InvalidSessionIdError,
    ItemTooLargeError,
    SessionClosedError,
)
from agent_sessions.testing import SessionConformanceSuite
from agent_sessions.testing.helpers import item_text, texts
from tests.servers import MONGODB_URL

RUN = uuid.uuid4().hex[:10]
STANDIN: Any = AsyncMongoMockClient()
"""One stand-in 'server' for the whole module; it is loop-agnostic, so tests may share it."""
STANDIN_DB = f"as_test_{RUN}"
SERVER_DB = "agent_sessions_test"
SERVER_PREFIX = f"t{RUN}_"


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _require_server() -> str:
    if not MONGODB_URL:
        pytest.skip(
            "no MongoDB server: set AGENT_SESSIONS_MONGODB_URL=mongodb://... to run the kit "
            "against a real server (none can be installed on this project's machines)"
        )
    return MONGODB_URL


@pytest.fixture(scope="module", autouse=True)
def _drop_server_collections() -> Iterator[None]:
    """Remove this run's collections from the real server (nothing else is touched)."""
    yield
    if not MONGODB_URL:
        return
    from pymongo import MongoClient

    client: MongoClient[Any] = MongoClient(MONGODB_URL, serverSelectionTimeoutMS=3000)
    try:
        db = client[SERVER_DB]
        for name in db.list_collection_names():
            if name.startswith(SERVER_PREFIX):
                db.drop_collection(name)
    finally:
        client.close()


# -- the conformance kit ---------------------------------------------------------------------


class TestServerConformance(SessionConformanceSuite):
    """The kit against a real MongoDB server (AGENT_SESSIONS_MONGODB_URL), one owned client per
    session so that no client outlives the event loop it was used on."""

    max_item_bytes = DEFAULT_MAX_ITEM_BYTES

    async def create_session(self, session_id: str) -> Session:
        return MongoDBSession.from_uri(
            session_id, uri=_require_server(), database=SERVER_DB, collection_prefix=SERVER_PREFIX
        )


# -- the backend's own behaviour, on the stand-in and (when set) on a server --------------------

Factory = Callable[..., MongoDBSession]


@pytest_asyncio.fixture(params=["standin", "server"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    """``make(session_id=None, **options)`` -> a session on the stand-in or the real server;
    all are cleared and closed afterwards."""
    if request.param == "server":
        url = _require_server()
        from pymongo import AsyncMongoClient

        client: Any = AsyncMongoClient(url, serverSelectionTimeoutMS=3000)
        options: dict[str, Any] = {"database": SERVER_DB, "collection_prefix": SERVER_PREFIX}
    else:
        client = STANDIN
        options = {"database": STANDIN_DB}
    made: list[MongoDBSession] = []

    def factory(session_id: str | None = None, **extra: Any) -> MongoDBSession:
        sid = session_id if session_id is not None else f"t-{uuid.uuid4().hex[:12]}"
        session = MongoDBSession(sid, client=client, **{**options, **extra})
        made.append(session)
        return session

    yield factory
    for session in made:
        if not session.closed:
            await session.clear_session()
            await session.close()
    if client is not STANDIN:
        await client.close()


def _collections(s: MongoDBSession) -> tuple[Any, Any]:
    db = s.client[s.database]
    return db[s.sessions_collection], db[s.messages_collection]


async def _docs(s: MongoDBSession) -> list[dict[str, Any]]:
    _, messages = _collections(s)
    return [d async for d in messages.find({"session_id": s.session_id}).sort("seq", 1)]


@pytest.mark.asyncio
async def test_offers_the_capabilities(make: Factory) -> None:
    s = make()
    # No COMMIT (added with issue 39): without transactions no write waits on another session.
    assert capabilities_of(s) == frozenset(Capability) - {Capability.TEXT_SEARCH, Capability.COMMIT}


@pytest.mark.asyncio
async def test_one_document_per_batch_numbered_by_the_counter(make: Factory) -> None:
    s = make()
    assert await s.add_sequenced_items([_msg("a"), _msg("b"), _msg("c")]) == [1, 2, 3]
    assert await s.add_sequenced_items([_msg("d")]) == [4]
    docs = await _docs(s)
    assert [(d["seq"], d["n"], len(d["items"])) for d in docs] == [(1, 3, 3), (4, 1, 1)]
    counters, _ = _collections(s)
    counter = await counters.find_one({"_id": s.session_id})
    assert counter is not None and counter["seq"] == 4


@pytest.mark.asyncio
async def test_numbers_are_never_reused_after_pop_or_clear(make: Factory) -> None:
    s = make()
    await s.add_sequenced_items([_msg("a"), _msg("b")])
    assert item_text(await s.pop_item()) == "b"
    assert await s.add_sequenced_items([_msg("c")]) == [3]
    await s.clear_session()
    assert await s.add_sequenced_items([_msg("d")]) == [4]
    assert texts(await s.get_items()) == ["d"]


@pytest.mark.asyncio
async def test_pop_shrinks_a_batch_and_removes_it_when_empty(make: Factory) -> None:
    s = make()
    await s.add_items([_msg("a"), _msg("b")])
    assert item_text(await s.pop_item()) == "b"
    docs = await _docs(s)
    assert [(d["n"], d["items"]) for d in docs] == [(1, ['{"role":"user","content":"a"}'])]
    assert item_text(await s.pop_item()) == "a"
    assert await _docs(s) == []


@pytest.mark.asyncio
async def test_a_pop_whose_cleanup_fails_still_returns_the_item(make: Factory) -> None:
    from pymongo.errors import AutoReconnect

    s = make()
    await s.add_items([_msg("a")])
    await s.add_items([_msg("b")])

    async def lost_connection(*args: Any, **kwargs: Any) -> Any:
        raise AutoReconnect("connection lost after the pop")

    s.messages.delete_one = lost_connection  # only the emptied batch's removal fails
    assert item_text(await s.pop_item()) == "b"
    assert texts(await s.get_items()) == ["a"], "the emptied batch left behind stays invisible"
    assert await s.count_items() == 1
    assert item_text(await s.pop_item()) == "a"
    assert await s.pop_item() is None


@pytest.mark.asyncio
async def test_latest_n_of_large_batches_after_pops(make: Factory) -> None:
    s = make()
    await s.add_items([_msg(f"a{i}") for i in range(50)])  # seqs 1-50
    await s.add_items([_msg("b")])  # seq 51
    await s.add_items([_msg(f"c{i}") for i in range(10)])  # seqs 52-61
    for _ in range(3):
        await s.pop_item()  # c9, c8, c7
    assert texts(await s.get_items(limit=3)) == ["c4", "c5", "c6"]
    assert texts(await s.get_items(limit=9)) == ["a49", "b"] + [f"c{i}" for i in range(7)]
    pairs = await s.get_sequenced_items(10)
    assert [seq for seq, _ in pairs] == list(range(49, 59))
    assert texts(i for _, i in pairs) == ["a48", "a49", "b"] + [f"c{i}" for i in range(7)]
    assert len(await s.get_items()) == 58


@pytest.mark.asyncio
async def test_ranged_reads_and_counts_cut_through_batches(make: Factory) -> None:
    s = make()
    await s.add_items([_msg(str(i)) for i in range(1, 6)])  # seqs 1-5, one document
    await s.add_items([_msg(str(i)) for i in range(6, 9)])  # seqs 6-8
    await s.add_items([_msg("9")])  # seq 9

    async def got(limit: int | None = None, **bounds: int) -> list[str]:
        return texts(i for _, i in await s.get_sequenced_items(limit, **bounds))

    assert await got(after=3) == [str(i) for i in range(4, 10)]
    assert await got(after=3, before=7) == ["4", "5", "6"]
    assert await got(2, after=3, before=7) == ["5", "6"]
    assert await got(4, after=3, before=7) == ["4", "5", "6"]
    assert await got(before=3) == ["1", "2"]
    assert await got(3) == ["7", "8", "9"]
    assert await got(after=9) == []
    assert await got(after=6, before=7) == []
    for after, before in [(None, None), (3, None), (None, 7), (3, 7), (0, 10), (5, 6), (4, 9)]:
        expected = [
            i
            for i in range(1, 10)
            if (after is None or i > after) and (before is None or i < before)
        ]
        assert await s.count_items(after=after, before=before) == len(expected), (after, before)


@pytest.mark.asyncio
async def test_range_delete_trims_a_straddling_batch_and_counts_exactly(make: Factory) -> None:
    s = make()
    assert supports(s, Capability.RANGE_DELETE)
    await s.add_items([_msg(t) for t in "abc"])  # 1-3
    await s.add_items([_msg(t) for t in "defg"])  # 4-7
    await s.add_items([_msg("h")])  # 8
    assert await s.delete_items(before=2) == 1
    assert await s.delete_items(before=6) == 4  # 2-3 whole, 4-5 off the front of 4-7
    docs = await _docs(s)
    assert [(d["seq"], d["n"], len(d["items"])) for d in docs] == [(6, 2, 2), (8, 1, 1)]
    assert texts(await s.get_items()) == ["f", "g", "h"]
    assert [seq for seq, _ in await s.get_sequenced_items(after=6)] == [7, 8]
    assert await s.count_items(after=5, before=8) == 2
    assert item_text(await s.pop_item()) == "h"
    assert item_text(await s.pop_item()) == "g"
    assert await s.delete_items(before=6) == 0
    assert await s.delete_items(before=100) == 1
    assert await _docs(s) == []
    counters, _ = _collections(s)
    assert await counters.count_documents({"_id": s.session_id}) == 1
    assert await s.add_sequenced_items([_msg("i")]) == [9]


@pytest.mark.asyncio
async def test_concurrent_range_deletes_and_pops_count_every_item_once(make: Factory) -> None:
    s = make()
    total = 0
    for size in (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8):
        await s.add_items([_msg(str(total + i)) for i in range(size)])
        total += size
    seen: list[int] = []

    async def purge(before: int) -> None:
        seen.append(await s.delete_items(before=before))

    async def pop() -> None:
        seen.append(0 if await s.pop_item() is None else 1)

    await asyncio.gather(*(purge(b) for b in (5, 20, 12, 33, 2, 40)), *(pop() for _ in range(6)))
    remaining = await s.get_sequenced_items()
    assert sum(seen) + len(remaining) == total
    assert all(seq >= 40 for seq, _ in remaining)
    assert [seq for seq, _ in remaining] == list(range(40, 40 + len(remaining)))


@pytest.mark.asyncio
async def test_session_ids_are_values_never_operators_or_paths(make: Factory) -> None:
    ids = ["$gt", "$where", "a.b", "$a.$b", '{"$ne": null}', "ünï.cødé", "日本.語", "$"]
    sessions = [make(sid) for sid in ids]
    for i, s in enumerate(sessions):
        await s.add_items([_msg(f"item of {i}")])
    for i, s in enumerate(sessions):
        assert texts(await s.get_items()) == [f"item of {i}"]
        assert [d["session_id"] for d in await _docs(s)] == [ids[i]]
        assert await s.count_items() == 1
    assert item_text(await sessions[0].pop_item()) == "item of 0"
    await sessions[1].clear_session()
    assert texts(await sessions[2].get_items()) == ["item of 2"]
    with pytest.raises(InvalidSessionIdError):
        MongoDBSession({"$ne": None}, client=STANDIN)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_512_character_sibling_id_is_stored(make: Factory) -> None:
    parent = make("p" * 256)
    side = parent.sibling(derive_sibling_id(parent.session_id, "branches"))
    try:
        await side.add_items([_msg("side")])
        assert texts(await side.get_items()) == ["side"]
        assert await parent.get_items() == []
    finally:
        await side.clear_session()
        await side.close()


@pytest.mark.asyncio
async def test_a_batch_larger_than_one_document_is_refused_whole(make: Factory) -> None:
    s = make()
    await s.add_items([_msg("kept")])
    mib = _msg("x" * (1024 * 1024))
    with pytest.raises(ItemTooLargeError, match="smaller batches") as info:
        await s.add_items([mib] * 17)
    assert info.value.index == 15
    assert texts(await s.get_items()) == ["kept"]
    assert MAX_BATCH_BYTES < 16 * 1024 * 1024


def _utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # PyMongo returns naive UTC


@pytest.mark.asyncio
async def test_sliding_ttl_keeps_every_document_alive_past_the_last_write(make: Factory) -> None:
    s = make()
    await s.add_items([_msg("before ttl")])
    counters, messages = _collections(s)

    async def expiries() -> list[Any]:
        """The expiry of every document, the counter's moved back by its grace."""
        counter = await counters.find_one({"_id": s.session_id})
        assert counter is not None
        at = counter.get("expires_at")
        return [at if at is None else at - COUNTER_GRACE] + [
            d.get("expires_at") for d in await _docs(s)
        ]

    async def write_and_check(ttl: float, write: Callable[[], Any]) -> list[Any]:
        before = _utc_now()
        await write()
        after = _utc_now()
        got = await expiries()
        low = before + timedelta(seconds=ttl)
        high = after + timedelta(seconds=ttl + ttl_slack(ttl))
        assert all(e is not None and low <= e <= high for e in got), (low, got, high)
        return got

    s.set_sliding_ttl(3600)
    first = await write_and_check(3600, lambda: s.add_items([_msg("a"), _msg("b")]))
    assert len(first) == 3 and len(set(first)) == 1, (
        "one write sets one expiry everywhere; the counter outlives the items by its grace"
    )
    after_pop = await write_and_check(3600, s.pop_item)
    assert after_pop[1] == first[1], "a document far from expiry is not rewritten"
    s.set_sliding_ttl(7200)
    await write_and_check(7200, lambda: s.add_items([_msg("c")]))
    await write_and_check(7200, s.clear_session)
    indexes = await messages.index_information()
    assert any(
        spec.get("expireAfterSeconds") == 0 and spec["key"] == [("expires_at", 1)]
        for spec in indexes.values()
    )
    counter_indexes = await counters.index_information()
    assert any(spec.get("expireAfterSeconds") == 0 for spec in counter_indexes.values())
    await s.add_items([_msg("d")])
    s.set_sliding_ttl(None)
    await s.add_items([_msg("after ttl")])
    assert set(await expiries()) == {None}, "switching the TTL off removes the expiry"
    with pytest.raises(ValueError):
        s.set_sliding_ttl(0)
    for bad in (True, float("inf"), float("nan"), -1, "60"):
        with pytest.raises(ValueError):
            s.set_sliding_ttl(bad)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_indexes_are_created_once_per_client_and_collections(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = MongoDBSession._create_index

    async def counting(self: MongoDBSession) -> None:
        calls.append(self.session_id)
        await original(self)

    monkeypatch.setattr(MongoDBSession, "_create_index", counting)
    prefix = f"idx{uuid.uuid4().hex[:8]}_"
    sessions = [make(collection_prefix=prefix) for _ in range(5)]
    await asyncio.gather(*(s.add_items([_msg("x")]) for s in sessions))
    await sessions[0].get_items()
    assert len(calls) == 1
    _, messages = _collections(sessions[0])
    unique = [spec for spec in (await messages.index_information()).values() if spec.get("unique")]
    assert [spec["key"] for spec in unique] == [[("session_id", 1), ("seq", 1)]]
    await asyncio.gather(*(s.clear_session() for s in sessions))
    await messages.drop()
    await sessions[0].client[sessions[0].database][sessions[0].sessions_collection].drop()


@pytest.mark.asyncio
async def test_siblings_share_the_client_and_collections(make: Factory) -> None:
    s = make(collection_prefix=f"sib{RUN}_")
    sib = s.sibling(derive_sibling_id(s.session_id, "usage"))
    assert sib.client is s.client
    assert (sib.database, sib.messages_collection) == (s.database, s.messages_collection)
    await sib.add_items([_msg("side")])
    await sib.clear_session()
    await sib.close()
    await s.add_items([_msg("still works after the sibling closed")])
    assert len(await s.get_items()) == 1


@pytest.mark.asyncio
async def test_foreign_documents_raise_backend_data_error(make: Factory) -> None:
    s = make()
    _, messages = _collections(s)
    # What the Agents SDK's MongoDBSession writes: a different format in the same place.
    await messages.insert_one(
        {"session_id": s.session_id, "seq": 1, "generation": 0, "n": 1, "message_data": ["{}"]}
    )
    with pytest.raises(BackendDataError, match="did not write"):
        await s.get_items()
    with pytest.raises(BackendDataError, match="did not write"):
        await s.add_items([_msg("x")])
    await messages.delete_many({"session_id": s.session_id})


@pytest.mark.asyncio
@pytest.mark.parametrize("collisions", [1, 2])
async def test_a_counter_upsert_colliding_twice_raises_backend_data_error(
    make: Factory, collisions: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first writes upserting the counter at once: the loser retries once. A second
    duplicate key is no such race; it is the package's error, not PyMongo's."""
    from pymongo.errors import DuplicateKeyError

    s = make()
    upsert = s.counters.find_one_and_update
    left = [collisions]

    async def colliding(*args: Any, **kwargs: Any) -> Any:
        if left[0]:
            left[0] -= 1
            raise DuplicateKeyError("E11000 duplicate key error", 11000)
        return await upsert(*args, **kwargs)

    monkeypatch.setattr(s.counters, "find_one_and_update", colliding)
    if collisions == 1:
        await s.add_items([_msg("x")])
        assert texts(await s.get_items()) == ["x"]
        return
    with pytest.raises(BackendDataError, match=r"duplicate key twice.*Nothing was written"):
        await s.add_items([_msg("x")])
    monkeypatch.undo()
    assert await s.get_items() == [] and await _docs(s) == []


@pytest.mark.asyncio
async def test_injected_client_stays_open_after_close(make: Factory) -> None:
    s = make()
    await s.add_items([_msg("x")])
    await s.close()
    other = make(s.session_id)
    assert texts(await other.get_items()) == ["x"]
    await s.add_items([_msg("y")])  # the closed object stays usable, as the SDK's
    assert texts(await s.get_items()) == ["x", "y"]


# -- construction, URLs and an unreachable server (a real AsyncMongoClient; needs no server) ----


@pytest.mark.asyncio
async def test_unreachable_server_raises_backend_unavailable() -> None:
    uri = f"mongodb://127.0.0.1:{_closed_port()}/?serverSelectionTimeoutMS=200"
    s = MongoDBSession.from_uri("unreachable", uri=uri)
    try:
        with pytest.raises(BackendUnavailableError, match="unreachable"):
            await s.add_items([_msg("x")])
        with pytest.raises(BackendUnavailableError):
            await s.get_items()
        with pytest.raises(ConnectionError):  # the builtin the SDK's callers may catch
            await s.pop_item()
        assert await s.ping() is False
    finally:
        await s.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("driver", ["pymongo", "motor"])
async def test_every_operation_passes_the_real_driver_and_fails_only_on_the_network(
    driver: str,
) -> None:
    """Without a server, the real drivers still check each call's arguments before selecting
    a server: every operation must get as far as the network, then raise our error."""
    uri = f"mongodb://127.0.0.1:{_closed_port()}/?serverSelectionTimeoutMS=100"
    if driver == "motor":
        from motor.motor_asyncio import AsyncIOMotorClient

        client: Any = AsyncIOMotorClient(uri)
    else:
        from pymongo import AsyncMongoClient

        client = AsyncMongoClient(uri)
    s = MongoDBSession(f"validate-{driver}", client=client)
    try:
        with pytest.raises(BackendUnavailableError):
            await s.get_items()  # index creation is the first call to reach the network
        names = (s.database, s.sessions_collection, s.messages_collection)
        for with_ttl in (False, True):  # from here on, pretend the indexes exist
            s.store.indexes.done.add((*names, with_ttl))
        reads_and_writes: list[Callable[[], Any]] = [
            lambda: s.add_items([_msg("a"), _msg("b")]),
            s.get_items,
            lambda: s.get_items(limit=2),
            lambda: s.get_sequenced_items(2, after=1, before=5),
            lambda: s.get_sequenced_items(after=1),
            s.pop_item,
            s.clear_session,
            s.count_items,
            lambda: s.count_items(after=1, before=5),
            lambda: s.delete_items(before=3),
        ]
        writes: list[Callable[[], Any]] = [
            lambda: s.add_items([_msg("c")]),
            s.pop_item,
            s.clear_session,
        ]
        # Plain, then with a TTL to set, then with one to remove (the writes differ each time).
        for ttl, operations in ((None, reads_and_writes), (3600.0, writes), (None, writes)):
            s.set_sliding_ttl(ttl)
            for operation in operations:
                with pytest.raises(BackendUnavailableError):
                    await operation()
        assert await s.ping() is False
    finally:
        await s.close()
        closing = client.close()
        if asyncio.iscoroutine(closing):
            await closing


@pytest.mark.asyncio
async def test_open_session_with_a_mongodb_url() -> None:
    port = _closed_port()
    s: Any = await open_session(
        f"mongodb://127.0.0.1:{port}/mydb",
        "via-url",
        client_kwargs={"serverSelectionTimeoutMS": 200},
    )
    try:
        assert isinstance(s, MongoDBSession)
        assert s.database == "mydb"
        assert s.client.options.server_selection_timeout == 0.2
        with pytest.raises(BackendUnavailableError):
            await s.get_items(limit=1)
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_clients_we_create_time_out_in_seconds_not_half_a_minute() -> None:
    port = _closed_port()
    default = MongoDBSession.from_uri("a", uri=f"mongodb://127.0.0.1:{port}")
    from_uri = MongoDBSession.from_uri(
        "b", uri=f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=1234"
    )
    from_kwargs = MongoDBSession.from_uri(
        "c", uri=f"mongodb://127.0.0.1:{port}", client_kwargs={"serverSelectionTimeoutMS": 50}
    )
    try:
        assert default.client.options.server_selection_timeout == 3.0
        assert default.database == DEFAULT_DATABASE
        assert from_uri.client.options.server_selection_timeout == 1.234
        assert from_kwargs.client.options.server_selection_timeout == 0.05
    finally:
        for s in (default, from_uri, from_kwargs):
            await s.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("failure", [ConnectionError("close failed"), asyncio.CancelledError()])
async def test_a_failed_close_of_the_owned_client_is_terminal_and_retried(
    failure: BaseException,
) -> None:
    """As the SDK's: the session is closed from the first attempt; the next close() tries the
    client's close again, and once it succeeded closing does nothing more."""
    s = MongoDBSession.from_uri("owner", uri=f"mongodb://127.0.0.1:{_closed_port()}")
    original = s.client.close
    calls: list[int] = []

    async def close() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise failure
        await original()

    s.client.close = close
    with pytest.raises(type(failure)):
        await s.close()
    assert s.closed
    with pytest.raises(SessionClosedError):
        await s.get_items()
    await s.close()
    await s.close()
    assert calls == [1, 1]


@pytest.mark.asyncio
async def test_owned_client_is_closed_with_the_last_sibling() -> None:
    s = MongoDBSession.from_uri("owner", uri=f"mongodb://127.0.0.1:{_closed_port()}")
    sib = s.sibling(derive_sibling_id("owner", "branches"))
    closed: list[bool] = []
    original = s.client.close

    async def close() -> None:
        closed.append(True)
        await original()

    s.client.close = close
    await s.close()
    assert closed == []
    await sib.close()
    assert closed == [True]


@pytest.mark.asyncio
async def test_an_unresolvable_srv_host_raises_backend_unavailable() -> None:
    s = MongoDBSession.from_uri(
        "x", uri="mongodb+srv://no-such-host.invalid/", client_kwargs={"connectTimeoutMS": 2000}
    )
    try:
        with pytest.raises(BackendUnavailableError, match="resolve"):
            await s.get_items()
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_latest_n_reads_examine_n_documents_through_the_index() -> None:
    url = _require_server()
    s = MongoDBSession.from_uri(
        f"explain-{uuid.uuid4().hex[:8]}",
        uri=url,
        database=SERVER_DB,
        collection_prefix=SERVER_PREFIX,
    )
    try:
        for i in range(50):
            await s.add_items([_msg(str(i))])
        assert texts(await s.get_items(limit=3)) == ["47", "48", "49"]
        _, messages = _collections(s)
        cursor = messages.find({"session_id": s.session_id, "n": {"$gt": 0}}).sort("seq", -1)
        plan = await cursor.limit(3).explain()
        stats = plan["executionStats"]
        assert stats["totalDocsExamined"] <= 3, stats
        assert "IXSCAN" in str(plan["queryPlanner"]["winningPlan"])
        await s.clear_session()
    finally:
        await s.close()


_KILL_WRITER = """
import asyncio, sys
from agent_sessions.backends.mongodb import MongoDBSession

async def main():
    url, db, prefix, sid = sys.argv[1:5]
    s = MongoDBSession.from_uri(sid, uri=url, database=db, collection_prefix=prefix)
    for b in range(100000):
        await s.add_items([{"role": "user", "content": f"{b}:{k}"} for k in range(20)])
        print(b, flush=True)

asyncio.run(main())
"""


def test_a_killed_writer_leaves_only_whole_batches() -> None:
    import os
    import signal
    import subprocess
    import sys

    url = _require_server()
    sid = f"kill-{uuid.uuid4().hex[:8]}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_WRITER, url, SERVER_DB, SERVER_PREFIX, sid],
        stdout=subprocess.PIPE,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert proc.stdout is not None
    for _ in range(30):  # let it commit a few batches, then kill it mid-stream
        if not proc.stdout.readline():
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    async def check() -> None:
        s = MongoDBSession.from_uri(
            sid, uri=url, database=SERVER_DB, collection_prefix=SERVER_PREFIX
        )
        try:
            got = texts(await s.get_items())
            assert len(got) >= 20 * 30 and len(got) % 20 == 0
            for start in range(0, len(got), 20):
                batch = got[start].split(":")[0]
                assert got[start : start + 20] == [f"{batch}:{k}" for k in range(20)]
            await s.clear_session()
        finally:
            await s.close()

    asyncio.run(check())


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="from_uri"):
        MongoDBSession("x", client=None)
    with pytest.raises(ValueError, match="database"):
        MongoDBSession("x", client=STANDIN, database="")
    with pytest.raises(ValueError, match="URI"):
        MongoDBSession.from_uri("x", uri="mongodb://127.0.0.1:notaport")
    with pytest.raises(InvalidSessionIdError):
        MongoDBSession("", client=STANDIN)


@pytest.mark.parametrize("session_id", [{"$ne": None}, ["x"], None, 42, ""])
def test_from_uri_refuses_a_bad_session_id_before_making_a_client(
    session_id: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent_sessions.backends.mongodb.session as backend

    made: list[Any] = []
    monkeypatch.setattr(backend, "AsyncMongoClient", lambda *a, **k: made.append(a))
    client_kwargs = {"appname": "test-app"}
    with pytest.raises(InvalidSessionIdError):
        MongoDBSession.from_uri(session_id, uri="mongodb://127.0.0.1", client_kwargs=client_kwargs)
    assert made == []
    assert client_kwargs == {"appname": "test-app"}


def test_sdk_constructor_arguments_are_accepted() -> None:
    s = MongoDBSession(
        "x",
        client=STANDIN,
        database="agents",
        sessions_collection="agent_sessions",
        messages_collection="agent_messages",
        session_settings={"limit": 5},
    )
    assert (s.sessions_collection, s.messages_collection) == ("agent_sessions", "agent_messages")
    assert s.session_settings is not None and s.session_settings.limit == 5


@pytest.mark.asyncio
async def test_motor_client_against_a_real_server() -> None:
    url = _require_server()
    from motor.motor_asyncio import AsyncIOMotorClient

    client: Any = AsyncIOMotorClient(url, serverSelectionTimeoutMS=3000)
    s = MongoDBSession(
        f"motor-{uuid.uuid4().hex[:8]}",
        client=client,
        database=SERVER_DB,
        collection_prefix=SERVER_PREFIX,
    )
    try:
        await s.add_items([_msg("a"), _msg("b")])
        assert texts(await s.get_items(limit=1)) == ["b"]
        assert await s.count_items() == 2
        assert item_text(await s.pop_item()) == "b"
        await s.clear_session()
    finally:
        await s.close()
        client.close()


def test_stores_of_one_client_share_its_index_record_until_it_is_collected() -> None:
    import gc

    from agent_sessions.backends.mongodb.session import _INDEXES, MongoDBStore

    class Client:  # the store only keeps it
        pass

    client = Client()
    store = MongoDBStore(client, owned=False)
    assert MongoDBStore(client, owned=False).indexes is store.indexes
    assert MongoDBStore(Client(), owned=False).indexes is not store.indexes
    key = id(client)
    del client, store
    gc.collect()
    assert key not in _INDEXES


@pytest.mark.asyncio
async def test_write_sequenced_items_leaves_nothing_when_a_later_document_fails() -> None:
    """Runs of consecutive numbers are separate documents (no transaction): one refused by
    the unique index takes the ones inserted before it back out."""
    s = MongoDBSession(f"seqw-{uuid.uuid4().hex[:8]}", client=STANDIN, database=STANDIN_DB)
    try:
        await s.add_items([_msg("x")])
        await s.clear_session()  # the index exists; the session holds nothing
        _, messages = _collections(s)
        # a document holding no items at number 5 (not counted), as foreign data could be
        await messages.insert_one({"session_id": s.session_id, "seq": 5, "n": 0, "items": []})
        pairs = [(1, _msg("a")), (2, _msg("b")), (5, _msg("c")), (6, _msg("d"))]
        with pytest.raises(BackendDataError):
            await s.write_sequenced_items(pairs)
        assert [d["seq"] for d in await _docs(s)] == [5]  # only the foreign one
        assert await s.get_items() == []
        await messages.delete_many({"session_id": s.session_id})
        await s.write_sequenced_items(pairs)
        assert [d["seq"] for d in await _docs(s)] == [1, 5]  # one document per run
        assert [seq for seq, _ in await s.get_sequenced_items()] == [1, 2, 5, 6]
        assert (await s.add_sequenced_items([_msg("e")]))[0] > 6
    finally:
        await s.clear_session()
        await s.close()
