"""RedisSession on the real Redis at 127.0.0.1:6379, on a 3-master cluster this module starts,
and on a private redis-server that the fault tests stop and restart."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from agents.memory import Session
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection
from redis.crc import key_slot

from agent_sessions.backends.redis import RedisSession
from agent_sessions.backends.redis.layout import (
    escape_session_id,
    session_keys,
    unescape_session_id,
)
from agent_sessions.core.capabilities import Capability, capabilities_of
from agent_sessions.core.ids import derive_sibling_id
from agent_sessions.core.registry import open_session
from agent_sessions.errors import BackendDataError, BackendUnavailableError
from agent_sessions.testing import HOSTILE_ID_SUFFIXES, SessionConformanceSuite, texts

from .redis_servers import RedisCluster3, RedisServer, free_port, require_binaries
from .servers import REDIS_URL, RUN, drop_redis_keys, require_server

_parts = urlsplit(REDIS_URL)
REDIS_HOST, REDIS_PORT = _parts.hostname or "127.0.0.1", _parts.port or 6379
PREFIX = f"agent_sessions_test{RUN}"
"""Per run: clear_session keeps each session's counter hash, which the module drops at its end."""
REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.server


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def _sid(tag: str = "t") -> str:
    return f"redis-{tag}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_up() -> None:
    require_server("Redis", REDIS_HOST, REDIS_PORT)


@pytest_asyncio.fixture
async def raw(redis_up: None) -> AsyncIterator[Redis]:
    """A plain client for inspecting and tampering with keys."""
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture(scope="module", autouse=True)
def _drop_leftovers_at_end() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):  # a server that was down has nothing to drop
        asyncio.run(drop_redis_keys(REDIS_URL, f"{PREFIX}:*"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster3]:
    require_binaries("redis-server", "redis-cli")
    started = RedisCluster3(tmp_path_factory.mktemp("redis-cluster"))
    started.start()
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture
def cluster_url(cluster: RedisCluster3) -> str:
    return cluster.url


# -- the conformance kit ---------------------------------------------------------------------


class TestRedisConformanceDecoded(SessionConformanceSuite):
    """decode_responses=True, with sliding expiry on so every write runs the expiry path."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_up: None) -> None:
        pass

    async def create_session(self, session_id: str) -> Session:
        return RedisSession.from_url(
            session_id,
            url=REDIS_URL,
            redis_kwargs={"decode_responses": True},
            key_prefix=PREFIX,
            ttl=600,
        )


class TestRedisClusterConformance(SessionConformanceSuite):
    """A real 3-master Redis Cluster on loopback, started by this module."""

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster_url: str) -> None:
        type(self).url = cluster_url

    url = ""

    async def create_session(self, session_id: str) -> Session:
        return RedisSession.from_url(
            session_id,
            url=self.url,
            cluster=True,
            redis_kwargs={"decode_responses": True},
            key_prefix=PREFIX,
        )


# -- construction and key layout ---------------------------------------------------------------


def test_capabilities_are_offered() -> None:
    s = RedisSession("x", client=Redis())
    assert capabilities_of(s) == frozenset(Capability) - {Capability.TEXT_SEARCH}


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="client"):
        RedisSession("x")
    with pytest.raises(TypeError, match="exactly one"):
        RedisSession("x", client=Redis(), redis_client=Redis())
    for prefix in ("", "a{b", "a}b"):
        with pytest.raises(ValueError, match="key_prefix"):
            RedisSession("x", client=Redis(), key_prefix=prefix)
    for ttl in (0, -1, "10", float("nan"), float("inf"), 2**63 // 1000 + 1):
        with pytest.raises((TypeError, ValueError), match="ttl"):
            RedisSession("x", client=Redis(), ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        RedisSession("x", client=Redis(), timeout=0)
    assert RedisSession("x", redis_client=Redis()).session_id == "x"  # the SDK's argument name


def test_hostile_ids_get_distinct_keys_inside_the_prefix_and_one_slot_each() -> None:
    ids = [f"p{s}" for s in HOSTILE_ID_SUFFIXES] + [
        "{",
        "}",
        "{}",
        "%",
        "%7B",
        "%257B",
        "a}:items",
        "x}:{y",
        "a:{b}:meta",
        "\x1e",
        " ",
        derive_sibling_id("u" * 256, "branches"),
    ]
    seen: set[str] = set()
    for sid in ids:
        items, meta = session_keys("pre", sid)
        assert items.startswith("pre:{") and meta.startswith("pre:{")
        tag = items[len("pre:{") : items.index("}")]
        assert unescape_session_id(tag) == sid
        assert "{" not in escape_session_id(sid) and "}" not in escape_session_id(sid)
        assert items.endswith("}:items") and meta.endswith("}:meta")
        assert key_slot(items.encode()) == key_slot(meta.encode())
        seen.update((items, meta))
    assert len(seen) == 2 * len(ids)


# -- behaviour on the standalone server ------------------------------------------------------


@pytest.mark.asyncio
async def test_injected_client_is_not_closed_and_owned_client_is(raw: Redis) -> None:
    name = f"as-test-{uuid.uuid4().hex[:8]}"

    async def connections(suffix: str) -> int:
        return sum(1 for c in await raw.client_list() if c["name"] == f"{name}-{suffix}")

    injected = Redis.from_url(REDIS_URL, client_name=f"{name}-injected")
    s = RedisSession(_sid(), client=injected, key_prefix=PREFIX)
    await s.add_items([_msg("a")])
    await s.clear_session()
    await s.close()
    assert await connections("injected") == 1
    assert await injected.ping()
    await injected.aclose()

    owned = RedisSession.from_url(
        _sid(), url=REDIS_URL, key_prefix=PREFIX, redis_kwargs={"client_name": f"{name}-owned"}
    )
    await owned.add_items([_msg("a")])
    await owned.clear_session()
    assert await connections("owned") == 1
    await owned.close()
    for _ in range(50):  # the server notices the closed socket a moment later
        if await connections("owned") == 0:
            break
        await asyncio.sleep(0.02)
    assert await connections("owned") == 0


@pytest.mark.asyncio
async def test_open_session_urls(redis_up: None) -> None:
    s = await open_session(REDIS_URL, _sid(), key_prefix=PREFIX)
    assert isinstance(s, RedisSession)
    try:
        await s.add_items([_msg("via open_session")])
        assert texts(await s.get_items()) == ["via open_session"]
        assert await s.ping()
    finally:
        await s.clear_session()
        await s.close()
    tls = await open_session("rediss://127.0.0.1:6390/2", _sid(), key_prefix=PREFIX)
    assert isinstance(tls, RedisSession)
    pool = tls.client.connection_pool  # type: ignore[union-attr]
    assert pool.connection_class is SSLConnection  # built lazily; nothing connected yet
    assert pool.connection_kwargs["db"] == 2
    await tls.close()


@pytest.mark.asyncio
async def test_siblings_share_the_client_and_outlive_their_parent(raw: Redis) -> None:
    parent = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX)
    side = parent.sibling(derive_sibling_id(parent.session_id, "branches"))
    long_side = parent.sibling("\x1e" + "x" * 511)
    assert side.client is parent.client and long_side.client is parent.client
    await parent.add_items([_msg("main")])
    await side.add_items([_msg("side")])
    await long_side.add_items([_msg("long")])
    assert texts(await parent.get_items()) == ["main"]
    assert texts(await side.get_items()) == ["side"]
    await parent.clear_session()
    await parent.close()
    assert texts(await side.get_items()) == ["side"]  # the shared client stays open
    await long_side.clear_session()
    await long_side.close()
    await side.clear_session()
    await side.close()
    items_keys = (parent.keys[0], side.keys[0], long_side.keys[0])
    assert await raw.exists(*items_keys) == 0
    assert await raw.exists(parent.keys[1], side.keys[1], long_side.keys[1]) == 3, (
        "clear_session keeps each counter, so numbers are never reused"
    )


@pytest.mark.asyncio
async def test_ttl_reaches_the_end_of_redis_expiry_range(raw: Redis) -> None:
    # The SDK accepts any ttl whose server-absolute expiry fits in Redis's int64 ms, and
    # raises ValueError at the write when it does not (its test uses ~9.2e15 s).
    seconds, micros = await raw.time()
    now_ms = seconds * 1000 + micros // 1000
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX)
    try:
        s.set_sliding_ttl((2**63 - 1 - now_ms) // 1000 - 86_400)
        await s.add_items([_msg("a"), _msg("b")])
        assert await s.pop_item() == _msg("b")
        for key in s.keys:
            assert await raw.pexpiretime(key) > 2**63 - 86_400_000 - now_ms
        s.set_sliding_ttl(2**63 // 1000 - 1)  # a valid int64 ms, but not from now
        for write in (s.add_items([_msg("c")]), s.pop_item(), s.clear_session()):
            with pytest.raises(ValueError, match="expiry range of Redis"):
                await write
        assert await s.get_items() == [_msg("a")], "a refused write changes nothing"
    finally:
        s.set_sliding_ttl(None)
        await s.clear_session()
        await s.close()


@pytest.mark.asyncio
async def test_sliding_ttl_covers_every_key_and_every_write(raw: Redis) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX, ttl=100)
    try:
        await s.add_items([_msg("a"), _msg("b")])
        for key in s.keys:
            assert 0 < await raw.pttl(key) <= 100_000
        for key in s.keys:
            await raw.pexpire(key, 5_000)
        await s.pop_item()
        for key in s.keys:
            assert await raw.pttl(key) > 5_000, "pop must refresh the expiry of every key"
        other = s.sibling(derive_sibling_id(s.session_id, "usage"))
        assert other.ttl == 100  # siblings inherit the expiry in force when made
        other.set_sliding_ttl(None)
        await other.add_items([_msg("kept")])
        for key in other.keys:
            assert await raw.pttl(key) == -1
        await other.clear_session()
        await other.close()
    finally:
        await s.clear_session()
        await s.close()


@pytest.mark.asyncio
async def test_clear_keeps_only_the_counter_and_it_keeps_expiring(raw: Redis) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX, ttl=100)
    items, meta = s.keys
    try:
        seqs = await s.add_sequenced_items([_msg("a"), _msg("b"), _msg("c")])
        await raw.pexpire(meta, 5_000)
        await s.clear_session()
        assert await raw.exists(items) == 0
        kept = await raw.hgetall(meta)
        assert kept.pop("seq") == str(seqs[-1])
        assert set(kept) == {"created_ms", "updated_ms"}  # the catalog's times, no items
        assert await raw.pttl(meta) > 5_000, "clear is a write: it refreshes the kept counter"
        again = await s.add_sequenced_items([_msg("d"), _msg("e")])
        assert again[0] == seqs[-1] + 1
        for key in s.keys:
            await raw.pexpire(key, 5_000)
        assert await s.delete_items(before=again[1]) == 1
        assert await raw.zcard(items) == 1
        for key in s.keys:
            assert 0 < await raw.pttl(key) <= 5_000, "a purge must not prolong the rest"
    finally:
        await s.clear_session()
        await s.close()


@pytest.mark.asyncio
async def test_expired_session_disappears_whole(raw: Redis) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX, ttl=0.3)
    try:
        await s.add_items([_msg("short-lived")])
        assert await raw.exists(*s.keys) == 2
        for _ in range(200):  # Redis expires keys lazily and by sampling: poll, up to 10 s
            if not await raw.exists(*s.keys):
                break
            await asyncio.sleep(0.05)
        assert await raw.exists(*s.keys) == 0
        assert await s.get_items() == []
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_numbers_keep_growing_after_the_session_expired(raw: Redis) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX, ttl=0.3)
    try:
        old = await s.add_sequenced_items([_msg(f"old{i}") for i in range(5)])
        assert old == list(range(old[0], old[0] + 5)) and old[0] > 10**15  # server clock, us
        for _ in range(200):
            if not await raw.exists(*s.keys):
                break
            await asyncio.sleep(0.05)
        assert await raw.exists(*s.keys) == 0
        new = await s.add_sequenced_items([_msg("new")])
        assert new[0] > old[-1], "a session that expired must not reuse its numbers"
        # a purge that read the old numbers just before the expiry spares the new item
        assert await s.delete_items(before=old[-1] + 1) == 0
        assert texts(await s.get_items()) == ["new"]
    finally:
        await s.clear_session()
        await s.close()


@pytest.mark.asyncio
async def test_sequence_numbers_survive_a_lost_meta_key(raw: Redis) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX)
    try:
        first = await s.add_sequenced_items([_msg("a"), _msg("b"), _msg("c")])
        await raw.delete(s.keys[1])  # e.g. evicted under maxmemory
        second = await s.add_sequenced_items([_msg("d")])
        assert second[0] > first[-1]
        assert texts(await s.get_items()) == ["a", "b", "c", "d"]
    finally:
        await s.clear_session()
        await s.close()


@pytest.mark.asyncio
async def test_large_batch_is_one_atomic_write(
    redis_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX)
    try:
        sent: list[object] = []
        monkeypatch.setattr(s.client, "execute_command", _recording(s.client, sent))
        seqs = await s.add_sequenced_items([_msg(str(i)) for i in range(5000)])
        assert sent == ["EVALSHA"], "a batch must be one command"
        monkeypatch.undo()
        assert seqs == list(range(1, 5001))
        assert await s.count_items() == 5000
        assert texts(await s.get_items(limit=2)) == ["4998", "4999"]
        window = await s.get_sequenced_items(3, after=100, before=2000)
        assert [seq for seq, _ in window] == [1997, 1998, 1999]
    finally:
        await s.clear_session()
        await s.close()


def _recording(client: Any, sent: list[object]) -> Any:
    execute = client.execute_command

    async def execute_command(*args: Any, **options: Any) -> Any:
        sent.append(args[0])
        return await execute(*args, **options)

    return execute_command


# The writer sends what RedisSession.add_items sends (one APPEND script per batch) without
# importing the SDK, which takes seconds on a loaded machine.
_WRITER = """
import asyncio, json, sys
from redis.asyncio import Redis
from agent_sessions.backends.redis.layout import APPEND, session_keys

async def main():
    client = Redis.from_url(sys.argv[1])
    keys = session_keys(sys.argv[3], sys.argv[2])
    batch = 0
    while True:
        items = [{"role": "user", "content": f"{batch}:{k}:" + "x" * 5000} for k in range(200)]
        await APPEND(client, keys, "0", *[json.dumps(item) for item in items])
        batch += 1

asyncio.run(main())
"""


@pytest.mark.asyncio
async def test_killed_writer_leaves_whole_batches_only(raw: Redis) -> None:
    """SIGKILL a process that streams 1 MB batches: whatever it sent is whole batches."""
    sid = _sid("kill")
    items_key = session_keys(PREFIX, sid)[0]
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WRITER,
        REDIS_URL,
        sid,
        PREFIX,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    try:
        for _ in range(600):  # until two batches are stored, up to 30 s
            if await raw.zcard(items_key) >= 400 or writer.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert writer.returncode is None, "the writer process died on its own"
        writer.send_signal(signal.SIGKILL)
        await writer.wait()
        s = RedisSession.from_url(sid, url=REDIS_URL, key_prefix=PREFIX)
        try:
            got = [t.split(":")[:2] for t in texts(await s.get_items())]
            assert len(got) >= 400 and len(got) % 200 == 0
            for start in range(0, len(got), 200):
                batch = got[start][0]
                assert got[start : start + 200] == [[batch, str(k)] for k in range(200)]
        finally:
            await s.clear_session()
            await s.close()
    finally:
        if writer.returncode is None:
            writer.kill()
            await writer.wait()


# -- foreign data at the session's keys ---------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("which", ["items", "meta"])
async def test_foreign_value_gives_clear_error_and_is_left_alone(raw: Redis, which: str) -> None:
    victim = RedisSession.from_url(_sid("victim"), url=REDIS_URL, key_prefix=PREFIX)
    bystander = RedisSession.from_url(_sid("bystander"), url=REDIS_URL, key_prefix=PREFIX)
    try:
        await bystander.add_items([_msg("safe")])
        key = victim.keys[0] if which == "items" else victim.keys[1]
        await raw.set(key, "someone else's value")
        with pytest.raises(BackendDataError, match="another type") as info:
            await victim.add_items([_msg("x")])
        assert "key_prefix" in str(info.value)
        with pytest.raises(BackendDataError):
            await victim.clear_session()
        if which == "items":
            with pytest.raises(BackendDataError):
                await victim.get_items()
            with pytest.raises(BackendDataError):
                await victim.pop_item()
            with pytest.raises(BackendDataError):
                await victim.count_items()
        else:
            assert await raw.exists(victim.keys[0]) == 0, "a failed add must write nothing"
        assert await raw.get(key) == "someone else's value"
        assert texts(await bystander.get_items()) == ["safe"]
        await raw.delete(key)
        await victim.add_items([_msg("works again")])
        assert texts(await victim.get_items()) == ["works again"]
    finally:
        await raw.delete(*victim.keys)
        await bystander.clear_session()
        await victim.close()
        await bystander.close()


@pytest.mark.asyncio
async def test_foreign_sorted_set_members_give_clear_error(raw: Redis) -> None:
    s = RedisSession.from_url(_sid(), url=REDIS_URL, key_prefix=PREFIX)
    try:
        await raw.zadd(s.keys[0], {"not ours": 1})
        with pytest.raises(BackendDataError, match="did not write"):
            await s.get_items()
    finally:
        await raw.delete(*s.keys)
        await s.close()


# -- server down, hung, and back ----------------------------------------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    require_binaries("redis-server", "redis-cli")
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            with_signal = server.process
            with_signal.send_signal(signal.SIGCONT)
        server.kill()


async def _every_operation_fails_fast(s: RedisSession, bound: float) -> None:
    operations: list[Any] = [
        lambda: s.add_items([_msg("unknown-0"), _msg("unknown-1"), _msg("unknown-2")]),
        lambda: s.get_items(),
        lambda: s.get_items(limit=2),
        lambda: s.pop_item(),
        lambda: s.count_items(),
        lambda: s.clear_session(),
    ]
    for op in operations:
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1"):
            await op()
        assert time.monotonic() - started < bound, "an unreachable server must not hang a call"


@pytest.mark.asyncio
async def test_stopped_server_raises_quickly_and_the_same_session_recovers(
    private_redis: RedisServer,
) -> None:
    s = RedisSession.from_url(_sid(), url=private_redis.url, timeout=1.0)
    injected = Redis.from_url(private_redis.url)  # redis-py's default: 10 retries with backoff
    t = RedisSession(s.session_id, client=injected, timeout=1.0)
    try:
        await s.add_items([_msg("before"), _msg("outage")])
        private_redis.stop()
        await _every_operation_fails_fast(s, bound=4.0)
        await _every_operation_fails_fast(t, bound=4.0)
        assert not await s.ping()
        private_redis.start()
        assert texts(await s.get_items()) == ["before", "outage"]
        await s.add_items([_msg("after")])
        assert texts(await t.get_items()) == ["before", "outage", "after"]
    finally:
        await s.close()
        await t.close()
        await injected.aclose()


@pytest.mark.asyncio
async def test_hung_server_raises_within_the_timeout_and_recovers(
    private_redis: RedisServer,
) -> None:
    s = RedisSession.from_url(_sid(), url=private_redis.url, timeout=0.5)
    try:
        await s.add_items([_msg("before")])
        assert private_redis.process is not None
        os.kill(private_redis.process.pid, signal.SIGSTOP)  # accepts nothing, answers nothing
        s.timeout = 0.2  # six calls each wait this long; the healthy calls keep 0.5 s
        try:
            await _every_operation_fails_fast(s, bound=3.0)
        finally:
            os.kill(private_redis.process.pid, signal.SIGCONT)
            s.timeout = 0.5
        # Commands already in the socket run when the server resumes, so the outcome of the
        # timed-out writes is unknown; what is certain: the batch is whole or absent.
        await s.add_items([_msg("after")])
        got = texts(await s.get_items())
        assert got[-1] == "after"
        unknown = [t for t in got if t.startswith("unknown")]
        assert unknown in ([], ["unknown-0", "unknown-1", "unknown-2"])
    finally:
        await s.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
async def test_wrong_port_raises_backend_unavailable(cluster: bool) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    s = RedisSession.from_url(_sid(), url=url, cluster=cluster, timeout=1.0)
    try:
        await _every_operation_fails_fast(s, bound=4.0)
    finally:
        await s.close()


# -- cluster specifics ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_cluster_spreads_sessions_and_keeps_each_in_one_slot(cluster_url: str) -> None:
    root = RedisSession.from_url(_sid(), url=cluster_url, cluster=True, key_prefix=PREFIX)
    sessions = [root] + [root.sibling(f"{root.session_id}-{i}{{x}}:y") for i in range(12)]
    try:
        for i, s in enumerate(sessions):
            await s.add_items([_msg(f"item {i}")])
        nodes = set()
        for i, s in enumerate(sessions):
            assert texts(await s.get_items()) == [f"item {i}"]
            items, meta = s.keys
            assert key_slot(items.encode()) == key_slot(meta.encode())
            nodes.add(root.client.get_node_from_key(items).name)  # type: ignore[union-attr]
        assert len(nodes) > 1, "sessions should land on more than one master"
    finally:
        for s in sessions:
            await s.clear_session()
            await s.close()


@pytest.mark.asyncio
async def test_hung_cluster_node_fails_its_sessions_only_and_they_recover(
    cluster: RedisCluster3,
) -> None:
    root = RedisSession.from_url(
        _sid(), url=cluster.url, cluster=True, key_prefix=PREFIX, timeout=0.5
    )
    sessions = [root] + [root.sibling(f"{root.session_id}-{i}") for i in range(12)]
    try:
        for s in sessions:
            await s.add_items([_msg("before")])
        client: Any = root.client
        port_of = {s.session_id: client.get_node_from_key(s.keys[0]).port for s in sessions}
        victim = next(n for n in cluster.nodes if n.port in port_of.values())
        assert victim.process is not None
        os.kill(victim.process.pid, signal.SIGSTOP)  # briefly: well under cluster-node-timeout
        try:  # at most two timeouts (1 s), so the cluster never marks the node as failed
            on_victim = [s for s in sessions if port_of[s.session_id] == victim.port]
            for s in on_victim[:2]:
                with pytest.raises(BackendUnavailableError):
                    await s.get_items()
            for s in sessions:
                if s not in on_victim:
                    assert texts(await s.get_items()) == ["before"]
        finally:
            os.kill(victim.process.pid, signal.SIGCONT)
        for s in sessions:
            assert texts(await s.get_items()) == ["before"]
    finally:
        for s in sessions:
            await s.clear_session()
            await s.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("decode", [False, True])
async def test_compaction_snapshot_prunes_the_oldest_items_in_the_same_script(
    redis_up: None, decode: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's encrypted session asks the store to drop an expired prefix while it swaps
    the suffix; a prefix that changed meanwhile makes the swap change nothing."""
    s = RedisSession.from_url(
        _sid(), url=REDIS_URL, key_prefix=PREFIX, redis_kwargs={"decode_responses": decode}
    )
    summary = {"type": "compaction", "encrypted_content": "s"}
    try:
        await s.add_items([_msg(str(i)) for i in range(6)])
        snapshot = await s._get_compaction_snapshot(
            2, prune_prefix=lambda item: item["content"] in ("0", "1", "3")
        )
        assert texts(snapshot.items) == ["4", "5"] and not snapshot.complete
        assert await snapshot.replace_suffix(0, [summary])
        assert await s.get_items() == [_msg("2"), _msg("3"), summary]
        snapshot = await s._get_compaction_snapshot(1, prune_prefix=lambda item: True)
        prunable = s._prunable

        async def racing(before: int, prune: Any) -> list[Any]:
            found = await prunable(before, prune)
            await s.rewrite_items([(3, _msg("changed"))])  # between the read and the script
            return found

        monkeypatch.setattr(s, "_prunable", racing)
        assert not await snapshot.replace_suffix(0, [summary])
        assert await s.get_items() == [_msg("changed"), _msg("3"), summary]
        seqs = await s.add_sequenced_items([_msg("after")])
        assert seqs == [8], "replaced items' numbers are never reused"
    finally:
        await s.clear_session()
        await s.close()


# -- checked pops ------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("decode", [True, False], ids=["str", "bytes"])
async def test_a_checked_pop_removes_exactly_the_item_it_checked(
    redis_up: None, raw: Redis, decode: bool
) -> None:
    from cryptography.fernet import Fernet

    from agent_sessions.wrappers.encrypted import EncryptedSession, KeyMismatchError

    def open_as(key: str) -> EncryptedSession:
        inner = RedisSession.from_url(
            session_id,
            url=REDIS_URL,
            redis_kwargs={"decode_responses": decode},
            key_prefix=PREFIX,
        )
        return EncryptedSession(inner, encryption_key=key)

    session_id = f"checked-pop-{uuid.uuid4().hex[:8]}"
    good, other = open_as(Fernet.generate_key().decode()), open_as(Fernet.generate_key().decode())
    items_key = good.inner.keys[0]  # type: ignore[attr-defined]
    guesses = cast(RedisSession, good.inner).store.newest  # the process's guess per session

    async def stored() -> int:
        return int(await raw.zcard(items_key))

    await good.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    stale = guesses.get(items_key)
    assert texts([await good.pop_item()]) == ["b"]
    guesses.note(items_key, stale)  # the process's guess is an item popped since
    assert texts([await good.pop_item()]) == ["a"]
    assert await stored() == 0

    await good.add_items([{"role": "user", "content": "c"}])
    readable = guesses.get(items_key)
    await other.add_items([{"role": "user", "content": "x"}])  # another key's item on top
    guesses.note(items_key, readable)  # the guess is readable but no longer the newest
    for _ in range(2):
        with pytest.raises(KeyMismatchError):
            await good.pop_item()
        assert await stored() == 2, "a wrong key never removes anything"
    unreadable = guesses.get(items_key)
    assert texts([await other.pop_item()]) == ["x"]
    guesses.note(items_key, unreadable)  # a guess this key cannot open, popped since
    assert texts([await good.pop_item()]) == ["c"]

    await good.add_items([{"role": "user", "content": "d"}])
    await raw.zadd(items_key, {"999999999:not json": 999999999})  # undecodable: drained
    assert texts([await good.pop_item()]) == ["d"]
    assert await good.pop_item() is None
    assert await stored() == 0


@pytest.mark.asyncio
async def test_a_new_objects_checked_pop_is_one_round_trip(
    redis_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh object per request pops in one round trip: the client keeps each session's
    newest member as a guess, which outlives the session objects."""
    from cryptography.fernet import Fernet

    from agent_sessions.wrappers.encrypted import EncryptedSession

    key, sid = Fernet.generate_key().decode(), _sid()
    client = Redis.from_url(REDIS_URL)

    def fresh() -> EncryptedSession:
        return EncryptedSession(
            RedisSession(sid, client=client, key_prefix=PREFIX), encryption_key=key
        )

    try:
        await fresh().add_items([_msg("a"), _msg("b")])
        gc.collect()  # no session object of this client is left
        sent: list[object] = []
        monkeypatch.setattr(client, "execute_command", _recording(client, sent))
        assert texts([await fresh().pop_item()]) == ["b"]
        assert sent == ["EVALSHA"], "the guess from the earlier object's add is checked in one"
        sent.clear()
        assert texts([await fresh().pop_item()]) == ["a"]
        assert sent == ["EVALSHA"], "a pop's answer names the next newest: the next guess"
        monkeypatch.undo()
        assert await fresh().pop_item() is None
    finally:
        await RedisSession(sid, client=client, key_prefix=PREFIX).clear_session()
        await client.aclose()


def test_the_remembered_newest_members_stay_within_their_budget() -> None:
    from agent_sessions.backends.redis.session import NewestMembers

    newest = NewestMembers(budget=1000)
    for n in range(50):
        newest.note(f"k{n}", "x" * 100)
    assert newest.size <= 1000 and newest.get("k49") == "x" * 100 and newest.get("k0") is None
    newest.note("k49", "y" * 70_000)  # longer than any guess kept: forgotten, not stored
    assert newest.get("k49") is None and newest.size <= 1000
    newest.note("k48", None)
    assert newest.get("k48") is None


@pytest.mark.asyncio
async def test_a_family_write_refused_by_one_key_writes_nothing(redis_up: None, raw: Redis) -> None:
    from agent_sessions.core.family import REGISTRY, side_store

    session = RedisSession.from_url(
        f"family-write-{uuid.uuid4().hex[:8]}", url=REDIS_URL, key_prefix=PREFIX
    )
    side: Any = side_store(session, "records")
    registry: Any = side_store(session, REGISTRY)
    await raw.set(registry.keys[0], "another application's value")
    batches: Any = [(side, [{"role": "user", "content": "r"}]), (session, [{"content": "a"}])]
    with pytest.raises(BackendDataError):
        await session.add_sequenced_family(batches)
    assert await raw.exists(side.keys[0], session.keys[0], side.keys[1], session.keys[1]) == 0
    await raw.delete(registry.keys[0])
    numbers = await session.add_sequenced_family(batches)
    assert [len(n) for n in numbers] == [1, 1]
    assert await session.family_purposes() == ["records"]
    await session.close()
