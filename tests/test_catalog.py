"""The session catalog on every backend: pages, filters, metadata, family-wide erase."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from agent_sessions import BranchingSession
from agent_sessions.core.ids import derive_sibling_id
from agent_sessions.errors import SessionNotFoundError
from agent_sessions.ops.catalog import SessionCatalog, family_root, is_side_store
from tests.matrix import BACKENDS, Backend

from .redis_servers import RedisCluster3, require_binaries


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.param
    if chosen.needs is not None:
        chosen.needs()
    return chosen


def test_family_root_unwraps_nested_side_store_ids() -> None:
    sid = "user\x1e:1"
    branch_log = derive_sibling_id(sid, "branches")
    nested = derive_sibling_id(branch_log, "usage")
    assert family_root(nested) == family_root(branch_log) == sid
    assert is_side_store(nested) and not is_side_store(sid)


@pytest.mark.asyncio
async def test_catalog_lists_pages_filters_and_erases_families(backend: Backend) -> None:
    run = f"cat{uuid.uuid4().hex[:8]}-"
    ids = [f"{run}a", f"{run}b", f"{run}b:x", f"{run}c%_"]
    sessions = [await backend.open(sid) for sid in ids]
    other = await backend.open(f"z{run}")
    branching: BranchingSession | None = None
    try:
        for n, session in enumerate(sessions, start=1):
            await session.add_items([_msg(f"m{i}") for i in range(n)])
        await other.add_items([_msg("elsewhere")])
        # A real layer's side data for session a, plus a hand-made nested side store of b.
        branching = BranchingSession(sessions[0])
        await branching.add_items([_msg("turn 2")])
        await branching.create_branch_from_turn(1)
        b_side = sessions[1].sibling(derive_sibling_id(ids[1], "usage"))  # type: ignore[attr-defined]
        sessions.append(b_side)
        await b_side.add_items([_msg("usage")])
        catalog = SessionCatalog(sessions[0])  # type: ignore[arg-type]

        page = await catalog.list_sessions(prefix=run)
        assert [i.session_id for i in page.sessions] == ids
        assert page.next_cursor is None
        assert [i.item_count for i in page.sessions] == [2, 2, 3, 4]
        now = datetime.now(timezone.utc)
        for info in page.sessions:
            assert info.created_at is not None and info.updated_at is not None
            assert abs(info.updated_at - now) < timedelta(minutes=5)
            assert info.created_at <= info.updated_at

        seen: list[str] = []
        cursor: str | None = None
        while True:
            part = await catalog.list_sessions(prefix=run, limit=3, cursor=cursor)
            assert len(part.sessions) <= 3
            seen += [i.session_id for i in part.sessions]
            if part.next_cursor is None:
                break
            cursor = part.next_cursor
        assert seen == ids
        assert [i.session_id async for i in catalog.iter_sessions(prefix=run, page_size=1)] == ids
        assert [i.session_id for i in (await catalog.list_sessions(prefix=f"{run}b")).sessions] == [
            f"{run}b",
            f"{run}b:x",
        ]
        hour_ago = now - timedelta(hours=1)
        assert (await catalog.list_sessions(prefix=run, updated_before=hour_ago)).sessions == []
        recent = await catalog.list_sessions(prefix=run, updated_after=hour_ago)
        assert [i.session_id for i in recent.sessions] == ids

        assert (await catalog.get(ids[2])) == page.sessions[2]
        assert await catalog.get(f"{run}missing") is None
        with pytest.raises(SessionNotFoundError, match="no session"):
            await catalog.require(f"{run}missing")
        family = await catalog.family(ids[0])
        assert family and all(family_root(sid) == ids[0] for sid in family)
        assert await catalog.family(ids[1]) == [derive_sibling_id(ids[1], "usage")]

        assert await catalog.delete_sessions([ids[0], ids[1], f"{run}never"]) == 2
        left = await catalog.list_sessions(prefix=run)
        assert [i.session_id for i in left.sessions] == ids[2:]
        assert await catalog.family(ids[0]) == [] and await catalog.family(ids[1]) == []
        for sid in [*family, derive_sibling_id(ids[1], "usage")]:
            assert await catalog.get(sid) is None
        assert await sessions[2].get_items() == [_msg("m0"), _msg("m1"), _msg("m2")]
        assert len(await other.get_items()) == 1
        with pytest.raises(TypeError, match="list of ids"):
            await catalog.delete_sessions(ids[2])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit"):
            await catalog.list_sessions(limit=0)
        await catalog.delete_sessions([*ids[2:], f"z{run}"])
    finally:
        if branching is not None:
            await branching.close()  # closes its side stores, then sessions[0]
        for session in [*sessions, other]:
            await session.close()  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_catalog_refuses_a_session_without_a_store() -> None:
    from agent_sessions import TTLSession
    from agent_sessions.backends.memory import InMemorySession

    with pytest.raises(TypeError, match="offers no catalog"):
        SessionCatalog(TTLSession(InMemorySession("x"), ttl=5))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster3]:
    require_binaries("redis-server", "redis-cli")
    started = RedisCluster3(tmp_path_factory.mktemp("catalog-cluster"))
    started.start()
    try:
        yield started
    finally:
        started.kill()


@pytest.mark.asyncio
async def test_catalog_on_redis_cluster_scans_every_primary(cluster: RedisCluster3) -> None:
    from agent_sessions import RedisSession

    ids = [f"user-{i}" for i in range(40)]  # spread over the three primaries' slots
    first = RedisSession.from_url(ids[0], url=cluster.url, cluster=True)
    try:
        for sid in ids:
            session = first if sid == ids[0] else first.sibling(sid)
            await session.add_items([_msg(sid)])
        side = first.sibling(derive_sibling_id(ids[0], "branches"))
        await side.add_items([_msg("side")])
        catalog = SessionCatalog(first)
        listed = [i.session_id async for i in catalog.iter_sessions(page_size=7)]
        assert listed == sorted(ids)
        assert await catalog.delete_sessions(ids[:20]) == 20
        assert [i.session_id async for i in catalog.iter_sessions()] == sorted(ids[20:])
        assert await catalog.family(ids[0]) == []
    finally:
        await first.close()


_ID_CHARS = "aA%_{}*?[]\\:é-\x1e"


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["memory", "sqlite", "redis"])
async def test_catalog_pages_match_a_sorted_reference(name: str) -> None:
    """Random ids (glob, LIKE and hash-tag characters, side-store marks) and page sizes: every
    listing equals the sorted, filtered reference, and erasing drops exactly the families."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    backend = next(b for b in BACKENDS if b.name == name)
    if backend.needs is not None:
        backend.needs()
    user_ids = st.text(_ID_CHARS, min_size=1, max_size=6).filter(lambda s: not s.startswith("\x1e"))

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        ids=st.sets(user_ids, min_size=1, max_size=8),
        prefix=st.text(_ID_CHARS[:-1], max_size=2),
        page=st.integers(1, 4),
        erase=st.integers(0, 7),
    )
    def check(ids: set[str], prefix: str, page: int, erase: int) -> None:
        asyncio.run(run_once(sorted(ids), prefix, page, erase))

    async def run_once(ids: list[str], prefix: str, page: int, erase: int) -> None:
        run = f"p{uuid.uuid4().hex[:6]}"
        full = [run + sid for sid in ids]
        base = await backend.open(full[0])
        opened: list[Any] = []
        try:
            for sid in full:
                session = base if sid == full[0] else base.sibling(sid)  # type: ignore[attr-defined]
                opened.append(session)
                await session.add_items([_msg(sid)])
                side = base.sibling(derive_sibling_id(sid, "usage"))  # type: ignore[attr-defined]
                opened.append(side)
                await side.add_items([_msg("side")])
            catalog = SessionCatalog(base)  # type: ignore[arg-type]
            want = sorted(s for s in full if s.startswith(run + prefix))
            got = [
                i.session_id
                async for i in catalog.iter_sessions(prefix=run + prefix, page_size=page)
            ]
            assert got == want
            victim = full[erase % len(full)]
            assert await catalog.delete_sessions([victim]) == 1
            left = [i.session_id async for i in catalog.iter_sessions(prefix=run)]
            assert left == sorted(s for s in full if s != victim)
            assert await catalog.family(victim) == []
            for sid in left[:1]:
                assert await catalog.family(sid) == [derive_sibling_id(sid, "usage")]
            await catalog.delete_sessions(left)
            assert [i async for i in catalog.iter_sessions(prefix=run)] == []
        finally:
            for session in opened:
                await session.close()

    await asyncio.to_thread(check)


@pytest.mark.asyncio
async def test_erase_takes_every_family_member_a_layer_wrote(backend: Backend) -> None:
    """A real layer's side stores, and (once core.family keeps one) the family registry, are
    members; after the erase no member is left and nothing else is touched."""
    import importlib.util

    sid = f"fam{uuid.uuid4().hex[:8]}"
    inner = await backend.open(sid)
    neighbour = await backend.open(f"{sid}-neighbour")
    branching = BranchingSession(inner)
    try:
        await neighbour.add_items([_msg("stays")])
        await branching.add_items([_msg("q1"), {"role": "assistant", "content": "a1"}])
        await branching.add_items([_msg("q2")])
        await branching.create_branch_from_turn(2)
        catalog = SessionCatalog(inner)  # type: ignore[arg-type]
        members = await catalog.family(sid)
        assert derive_sibling_id(sid, "branches") in members
        if importlib.util.find_spec("agent_sessions.core.family") is not None:
            assert derive_sibling_id(sid, "family") in members  # the registry itself
        assert [i.session_id async for i in catalog.iter_sessions(prefix=sid)] == [
            sid,
            f"{sid}-neighbour",
        ]
        assert await catalog.delete_sessions([sid]) == 1
        assert await catalog.family(sid) == []
        for member in members:
            assert await catalog.get(member) is None
        assert await neighbour.get_items() == [_msg("stays")]
        await catalog.delete_sessions([f"{sid}-neighbour"])
    finally:
        await branching.close()
        await inner.close()  # type: ignore[attr-defined]
        await neighbour.close()  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_families_of_many_sessions_are_found_in_one_pass(backend: Backend) -> None:
    """``families`` equals ``family`` per id (nested side stores, ids that end alike, an id
    with no side store), and erasing many sessions reads the side stores once per chunk
    instead of once per session."""
    from agent_sessions.core.catalog import SupportsFamilies

    run = f"fm{uuid.uuid4().hex[:6]}"
    roots = [f"{run}a", f"{run}ba", f"{run}a\x1eb", f"{run}lone", f"{run}x"]
    base = await backend.open(roots[0])
    opened: list[Any] = [base]
    try:
        for sid in roots:
            session = base if sid == roots[0] else base.sibling(sid)  # type: ignore[attr-defined]
            opened.append(session)
            await session.add_items([_msg(sid)])
            if sid.endswith("lone"):
                continue
            side = derive_sibling_id(sid, "usage")
            for member in (side, derive_sibling_id(side, "ttl")):  # a side store's own one
                opened.append(base.sibling(member))  # type: ignore[attr-defined]
                await opened[-1].add_items([_msg("side")])
        catalog = SessionCatalog(base)  # type: ignore[arg-type]
        assert isinstance(catalog.store, SupportsFamilies)
        each = {sid: await catalog.family(sid) for sid in roots}
        assert each.pop(f"{run}lone") == [] and all(len(found) == 2 for found in each.values())
        each[f"{run}lone"] = []
        assert await catalog.families(roots) == each

        calls: list[str] = []
        family_ids, families = catalog.store.family_ids, catalog.store.families

        async def spy_one(session_id: str) -> list[str]:
            calls.append("family_ids")
            return await family_ids(session_id)

        async def spy_many(session_ids: Any) -> dict[str, list[str]]:
            calls.append("families")
            return await families(session_ids)

        catalog.store.family_ids, catalog.store.families = spy_one, spy_many  # type: ignore[method-assign]
        assert await catalog.delete_sessions(roots[1:]) == len(roots) - 1
        assert calls == ["families"]
        assert await catalog.families(roots) == {
            roots[0]: each[roots[0]],
            **{sid: [] for sid in roots[1:]},
        }
        for member in [m for sid in roots[1:] for m in each[sid]]:
            assert await catalog.get(member) is None
        await catalog.delete_sessions(roots[:1])
    finally:
        for session in opened:
            await session.close()


@pytest.mark.asyncio
async def test_get_reads_one_session_without_a_listing_where_the_store_can(
    backend: Backend,
) -> None:
    """``get`` answers what a listing by prefix would (a session, a side store, a missing id,
    an id that only prefixes others); a store offering ``infos`` (Redis, whose listing is a
    SCAN of the whole keyspace) answers without listing, so copying N sessions is not N
    passes over the store."""
    from agent_sessions.core.catalog import CatalogQuery, SupportsInfos

    run = f"gi{uuid.uuid4().hex[:6]}"
    base = await backend.open(f"{run}ab")
    side = base.sibling(derive_sibling_id(f"{run}ab", "usage"))  # type: ignore[attr-defined]
    try:
        await base.add_items([_msg("1"), _msg("2")])
        await side.add_items([_msg("s")])
        catalog = SessionCatalog(base)  # type: ignore[arg-type]
        listed = {
            i.session_id: i
            for i in await catalog.store.list_page(
                CatalogQuery(limit=10, prefix=run, internal=True)
            )
        }
        listed.update(
            {
                i.session_id: i
                for i in await catalog.store.list_page(
                    CatalogQuery(limit=10, prefix=side.session_id, internal=True)
                )
            }
        )
        if isinstance(catalog.store, SupportsInfos):

            async def no_listing(query: Any) -> Any:
                raise AssertionError("get listed the store")

            catalog.store.list_page = no_listing  # type: ignore[method-assign]
        ab = await catalog.get(f"{run}ab")
        assert ab is not None and ab == listed[f"{run}ab"] and ab.item_count == 2
        assert await catalog.get(side.session_id) == listed[side.session_id]
        assert await catalog.get(f"{run}a") is None  # only a prefix of a stored id
        assert await catalog.get(f"{run}missing") is None
    finally:
        await SessionCatalog(base).delete_sessions([f"{run}ab"])  # type: ignore[arg-type]
        await side.close()
        await base.close()  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_paging_through_redis_scans_the_keyspace_once_per_listing() -> None:
    """Redis lists by SCAN, which has no order: a listing's pages reuse the ids its first page
    found instead of scanning every key again for each page; a new listing scans again."""
    backend = next(b for b in BACKENDS if b.name == "redis")
    if backend.needs is not None:
        backend.needs()
    run = f"ps{uuid.uuid4().hex[:6]}"
    ids = [f"{run}{i:02d}" for i in range(10)]
    base = await backend.open(ids[0])
    opened: list[Any] = [base]
    try:
        for sid in ids:
            session = base if sid == ids[0] else base.sibling(sid)  # type: ignore[attr-defined]
            opened.append(session)
            await session.add_items([_msg(sid)])
        catalog = SessionCatalog(base)  # type: ignore[arg-type]
        client = catalog.store.client  # type: ignore[attr-defined]
        scans: list[Any] = []
        scan_iter = client.scan_iter

        def counted(*args: Any, **kwargs: Any) -> Any:
            scans.append(kwargs.get("match"))
            return scan_iter(*args, **kwargs)

        client.scan_iter = counted
        try:
            listed = [i.session_id async for i in catalog.iter_sessions(prefix=run, page_size=3)]
            assert listed == ids and len(scans) == 1
            late = base.sibling(f"{run}99")  # type: ignore[attr-defined]
            opened.append(late)
            await late.add_items([_msg("late")])
            again = [i.session_id async for i in catalog.iter_sessions(prefix=run, page_size=4)]
            assert again == [*ids, f"{run}99"] and len(scans) == 2
        finally:
            client.scan_iter = scan_iter
        await catalog.delete_sessions([*ids, f"{run}99"])
    finally:
        for session in opened:
            await session.close()
