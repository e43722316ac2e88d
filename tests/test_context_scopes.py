"""Run contexts (openai-agents >= 0.25 passes ``wrapper=`` to context-aware sessions) through
every layer, and ContextScopedSession (issue 38; docs/context-scopes.md).

A tenant-scoped inner session, as in the SDK's tests/memory/test_session_context_wrapper.py,
under each layer that forwards the context and under stacks of them: Runner runs for two
tenants never show one tenant's items to the other, and pops and the retry rewind stay in the
scope. Each layer that keeps side data refuses such a session at construction, and works per
scope inside ``ContextScopedSession(wrap=...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from agents import RunContextWrapper, Runner
from agents.memory import Session, SessionSettings
from agents.run_internal.session_persistence import rewind_session_items

from agent_sessions import (
    ContextScopedSession,
    EncryptedSession,
    InMemorySession,
    InMemoryStore,
    TTLSession,
    WindowSession,
)
from agent_sessions.errors import InvalidSessionIdError
from agent_sessions.memory.recall import RecallSession
from agent_sessions.testing import CoreConformance, StrictConformance, scripted_agent, texts
from agent_sessions.testing.helpers import model_input_texts
from agent_sessions.wrappers.base import context_aware
from agent_sessions.wrappers.compaction import CompactionSession, item_count_trigger
from agent_sessions.wrappers.foreign import ForeignSession
from tests.matrix import _SQLITE_DIR, KEY, STACKS
from tests.servers import (
    POSTGRES_URL,
    REDIS_URL,
    RUN,
    drop_redis_keys,
    drop_sql_tables,
    require_server,
)
from tests.wrapper_stacks import IdentitySummarizer

DAY = 86_400.0


@dataclass(frozen=True)
class Tenant:
    tenant: str
    user: str = "u"


def ctx(tenant: str) -> RunContextWrapper[Any]:
    return RunContextWrapper(context=Tenant(tenant))


class TenantSession:
    """A context-aware session from outside: one history per ``wrapper.context.tenant``, and
    a ``default`` one for calls without ``wrapper`` (the SDK test's ContextAwareSession)."""

    def __init__(self) -> None:
        self.session_id = f"tenants-{uuid.uuid4().hex[:8]}"
        self.session_settings: SessionSettings | None = None
        self.by_scope: dict[str, list[Any]] = {"default": []}

    def _items(self, wrapper: RunContextWrapper[Any] | None) -> list[Any]:
        key = "default" if wrapper is None else wrapper.context.tenant
        return self.by_scope.setdefault(key, [])

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[Any]:
        items = self._items(wrapper)
        return list(items if limit is None else items[-limit:] if limit > 0 else [])

    async def add_items(
        self, items: list[Any], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        self._items(wrapper).extend(items)

    async def pop_item(self, *, wrapper: RunContextWrapper[Any] | None = None) -> Any:
        items = self._items(wrapper)
        return items.pop() if items else None

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        self._items(wrapper).clear()


class PartialSession(TenantSession):
    """Takes ``wrapper=`` on reads and writes only: the SDK then passes it to none."""

    async def pop_item(self) -> Any:  # type: ignore[override]
        return await super().pop_item()

    async def clear_session(self) -> None:  # type: ignore[override]
        await super().clear_session()


def _foreign(inner: Any) -> Any:
    store = InMemoryStore()
    return ForeignSession(
        inner, sibling_factory=lambda sid: InMemorySession(sid, store=store, _internal_id=True)
    )


FORWARDING: dict[str, Callable[[Any], Any]] = {
    "encrypted": lambda inner: EncryptedSession(inner, encryption_key=KEY),
    "encrypted-scan": lambda inner: EncryptedSession(inner, encryption_key=KEY, max_scan_items=8),
    "ttl": lambda inner: TTLSession(inner, ttl=DAY),
    "ttl-absolute": lambda inner: TTLSession(inner, ttl=DAY, sliding=False, item_ttl=DAY),
    "window": lambda inner: WindowSession(inner, max_turns=5),
    "window-unbounded": lambda inner: WindowSession(inner),
    "foreign": _foreign,
    "encrypted-ttl": lambda inner: EncryptedSession(TTLSession(inner, ttl=DAY), encryption_key=KEY),
    "encrypted-window": lambda inner: EncryptedSession(
        WindowSession(inner, max_turns=5), encryption_key=KEY
    ),
    "window-encrypted-ttl": lambda inner: WindowSession(
        EncryptedSession(TTLSession(inner, ttl=DAY), encryption_key=KEY), max_turns=5
    ),
    "window-foreign": lambda inner: WindowSession(_foreign(inner), max_turns=5),
}
"""The layers that pass the run context on, alone and stacked."""


async def _run(session: Session, tenant: str, text: str) -> list[str]:
    """One Runner turn of ``tenant`` asking ``text``; returns what the model was shown."""
    agent, model = scripted_agent(f"re:{text}")
    await Runner.run(agent, text, context=Tenant(tenant), session=session)
    return model_input_texts(model, 0)


async def _two_tenants_stay_apart(session: Session) -> None:
    """acme, globex, acme again: each run sees only its tenant's history; pops and the
    retry rewind act on their tenant's history only."""
    assert await _run(session, "acme", "a1") == ["a1"]
    assert await _run(session, "globex", "g1") == ["g1"]
    assert await _run(session, "acme", "a2") == ["a1", "re:a1", "a2"]
    acme, globex = ctx("acme"), ctx("globex")
    assert texts(await session.get_items(wrapper=globex)) == ["g1", "re:g1"]  # type: ignore[call-arg]
    assert texts([await session.pop_item(wrapper=acme)]) == ["re:a2"]  # type: ignore[call-arg]
    assert texts(await session.get_items(wrapper=acme)) == ["a1", "re:a1", "a2"]  # type: ignore[call-arg]
    assert texts(await session.get_items(wrapper=globex)) == ["g1", "re:g1"]  # type: ignore[call-arg]
    # The Runner's retry rewind (pops through the same wrapper) removes acme's newest turn only.
    newest = (await session.get_items(wrapper=acme))[-1:]  # type: ignore[call-arg]
    await rewind_session_items(session, newest, wrapper=acme)
    assert texts(await session.get_items(wrapper=acme)) == ["a1", "re:a1"]  # type: ignore[call-arg]
    assert texts(await session.get_items(wrapper=globex)) == ["g1", "re:g1"]  # type: ignore[call-arg]
    await session.clear_session(wrapper=globex)  # type: ignore[call-arg]
    assert await session.get_items(wrapper=globex) == []  # type: ignore[call-arg]
    assert texts(await session.get_items(wrapper=acme)) == ["a1", "re:a1"]  # type: ignore[call-arg]


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", FORWARDING.values(), ids=FORWARDING.keys())
async def test_a_forwarding_layer_keeps_each_tenant_in_its_scope(stack: Any) -> None:
    inner = TenantSession()
    session = stack(inner)
    assert context_aware(session)
    await _two_tenants_stay_apart(session)
    assert inner.by_scope["default"] == []  # nothing landed in the shared default history
    assert len(inner.by_scope["acme"]) == 2
    assert inner.by_scope["globex"] == []


@pytest.mark.asyncio
async def test_the_pop_of_a_forwarding_layer_pops_its_tenant_only() -> None:
    inner = TenantSession()
    session = EncryptedSession(TTLSession(inner, ttl=DAY), encryption_key=KEY)
    await session.add_items([{"role": "user", "content": "a"}], wrapper=ctx("acme"))
    await session.add_items([{"role": "user", "content": "g"}], wrapper=ctx("globex"))
    popped = await session.pop_item(wrapper=ctx("acme"))
    assert texts([popped]) == ["a"]
    assert await session.pop_item(wrapper=ctx("acme")) is None
    assert texts(await session.get_items(wrapper=ctx("globex"))) == ["g"]


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", FORWARDING.values(), ids=FORWARDING.keys())
async def test_over_a_session_without_contexts_a_forwarding_layer_works_as_before(
    stack: Any,
) -> None:
    """A plain session is one history whatever the context (the SDK passes the wrapper to the
    layer, which drops it): exactly the behaviour before 0.25."""
    session = stack(InMemorySession(f"legacy-{uuid.uuid4().hex[:8]}"))
    assert not context_aware(session)
    assert await _run(session, "acme", "a1") == ["a1"]
    assert await _run(session, "globex", "g1") == ["a1", "re:a1", "g1"]


@pytest.mark.asyncio
async def test_a_session_taking_wrapper_on_some_methods_only_gets_it_on_none() -> None:
    inner = PartialSession()
    session = EncryptedSession(cast(Any, inner), encryption_key=KEY)
    assert not context_aware(session)
    await _run(session, "acme", "a1")
    await session.pop_item(wrapper=ctx("acme"))
    assert list(inner.by_scope) == ["default"] and len(inner.by_scope["default"]) == 1


REFUSING: dict[str, Callable[[Any], Any]] = {
    "branching": lambda inner: STACKS["branching"](inner),
    "advanced": lambda inner: STACKS["advanced"](inner),
    "usage": lambda inner: STACKS["usage"](inner),
    "compaction": lambda inner: STACKS["compaction"](inner),
    "resilient": lambda inner: STACKS["resilient"](inner),
    "recall": lambda inner: RecallSession(inner, cast(Any, None)),
    "full": lambda inner: STACKS["full"](inner),
}
"""The layers that keep side data per session id, which every context would share."""


@pytest.mark.parametrize("stack", REFUSING.values(), ids=REFUSING.keys())
@pytest.mark.parametrize(
    "inner",
    [
        TenantSession,
        lambda: EncryptedSession(TenantSession(), encryption_key=KEY),
        lambda: WindowSession(TTLSession(TenantSession(), ttl=DAY), max_turns=3),
        lambda: ContextScopedSession(InMemoryStore(), scope=lambda c: c.tenant),
    ],
    ids=["tenants", "encrypted-tenants", "window-ttl-tenants", "context-scoped"],
)
def test_a_layer_keeping_side_data_refuses_a_context_aware_session(stack: Any, inner: Any) -> None:
    with pytest.raises(TypeError, match=r"ContextScopedSession\(store, scope=") as raised:
        stack(inner())
    message = str(raised.value)
    assert "wrap=lambda session: " in message
    # Its own reason, or (the "full" stack encrypts over a ContextScopedSession) encryption's.
    assert "which every context would share" in message or "for a key per scope" in message


def test_encryption_over_a_context_scoped_session_points_to_a_key_per_scope() -> None:
    scoped = ContextScopedSession(InMemoryStore(), scope=lambda c: c.tenant)
    builds: list[Callable[[], Any]] = [
        lambda: EncryptedSession(scoped, encryption_key=KEY),
        lambda: EncryptedSession(TTLSession(scoped, ttl=DAY), encryption_key=KEY),
    ]
    for build in builds:
        with pytest.raises(TypeError, match=r"one key.*wrap=lambda session: EncryptedSession"):
            build()


# -- ContextScopedSession --------------------------------------------------------------------


def _scope(context: Tenant) -> str:
    return f"{context.tenant}:{context.user}"


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
async def test_every_stack_works_per_scope_inside_a_context_scoped_session(stack: Any) -> None:
    """Every layer (also those refusing a context-aware inner) inside ``wrap=``: each scope's
    history is the store's session of that id, which the same stack reads as any other."""
    store = InMemoryStore()
    session = ContextScopedSession(store, scope=_scope, wrap=stack)
    await _two_tenants_stay_apart(session)
    acme = stack(store.session("acme:u"))
    assert texts(await acme.get_items()) == ["a1", "re:a1"]
    async with await session.session_for(Tenant("acme")) as own:  # type: ignore[attr-defined]
        assert texts(await own.get_items()) == ["a1", "re:a1"]


@pytest.mark.asyncio
@pytest.mark.parametrize("stack", ["window", "ttl", "window-foreign"])
async def test_a_forwarding_layer_over_a_context_scoped_session_keeps_tenants_apart(
    stack: str,
) -> None:
    store = InMemoryStore()
    session = FORWARDING[stack](ContextScopedSession(store, scope=_scope))
    await _two_tenants_stay_apart(session)
    assert len(await store.session("acme:u").get_items()) == 2
    assert await store.session("globex:u").get_items() == []


@pytest.mark.asyncio
async def test_a_context_scoped_session_needs_a_context_and_a_valid_scope_id() -> None:
    session = ContextScopedSession(InMemoryStore(), scope=lambda c: c)
    with pytest.raises(TypeError, match=r"got none: pass it to Runner\.run.*session_for"):
        await session.get_items()
    with pytest.raises(TypeError, match=r"got none: pass it to Runner\.run"):
        await Runner.run(scripted_agent("r")[0], "hi", session=session)  # no context=
    for bad in (7, "", "\x1eside", "x" * 300):
        with pytest.raises(InvalidSessionIdError, match=r"scope\(context\) returned"):
            await session.add_items([{"role": "user", "content": "x"}], wrapper=ctx_of(bad))
    with pytest.raises(TypeError, match="scope must map"):
        ContextScopedSession(InMemoryStore(), scope=cast(Any, "tenant"))


def ctx_of(value: Any) -> RunContextWrapper[Any]:
    return RunContextWrapper(context=value)


class _BoundScope:
    """One scope of a ContextScopedSession as a plain Session (the kit's view): every call
    carries the same run context."""

    def __init__(self, scoped: ContextScopedSession, scope_id: str) -> None:
        self.scoped, self.session_id, self._ctx = scoped, scope_id, ctx_of(scope_id)

    @property
    def session_settings(self) -> Any:
        return self.scoped.session_settings

    @session_settings.setter
    def session_settings(self, value: Any) -> None:
        self.scoped.session_settings = value

    async def get_items(self, limit: int | None = None) -> Any:
        return await self.scoped.get_items(limit, wrapper=self._ctx)

    async def add_items(self, items: list[Any]) -> None:
        await self.scoped.add_items(items, wrapper=self._ctx)

    async def pop_item(self) -> Any:
        return await self.scoped.pop_item(wrapper=self._ctx)

    async def clear_session(self) -> None:
        await self.scoped.clear_session(wrapper=self._ctx)

    async def close(self) -> None:
        await self.scoped.close()


REDIS_PREFIX = f"ctx{RUN}"
SQL_PREFIX = f"ctx{RUN}_"


def _url(name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The store URL of ``name``, its store options and its per-session options (names
    carrying this run's tag, so that they are removed after the run)."""
    if name == "redis":
        require_server("Redis", "127.0.0.1", 6379)
        return REDIS_URL, {}, {"key_prefix": REDIS_PREFIX}
    if name == "postgres":
        require_server("PostgreSQL", "127.0.0.1", 5432)
        return POSTGRES_URL, {"table_prefix": SQL_PREFIX}, {}
    if name == "sqlite":
        return f"sqlite:///{os.path.join(_SQLITE_DIR, 'context.db')}", {}, {}
    return "memory://", {}, {}


def _scoped(name: str, scope: Callable[[Any], str]) -> ContextScopedSession:
    url, store_options, session_options = _url(name)
    return ContextScopedSession(url, scope, session_options=session_options, **store_options)


@pytest.fixture(scope="module", autouse=True)
def _drop_leftovers_at_end() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):  # a server that was down has nothing to drop
        asyncio.run(drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*"))
    with contextlib.suppress(Exception):
        asyncio.run(drop_sql_tables(POSTGRES_URL, SQL_PREFIX))


class _ScopeKit(CoreConformance, StrictConformance):
    """The kit per scope: each kit session is one scope of its own ContextScopedSession."""

    store_name: str

    async def create_session(self, session_id: str) -> Session:
        scoped = _scoped(self.store_name, lambda c: f"{RUN}-{c}")
        return cast(Session, _BoundScope(scoped, session_id))


for _name in ("memory", "sqlite", "redis", "postgres"):
    globals()[f"TestScopeKit_{_name}"] = type(
        f"TestScopeKit_{_name}", (_ScopeKit,), {"store_name": _name}
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("store_name", ["redis", "postgres"])
async def test_fifty_concurrent_runs_over_ten_tenants_keep_every_history_exact(
    store_name: str,
) -> None:
    tag = uuid.uuid4().hex[:6]
    session = _scoped(store_name, lambda c: f"{RUN}-{tag}-{c.tenant}")
    tenants = [f"t{n}" for n in range(10)]

    async def run(tenant: str, i: int) -> list[str]:
        return await _run(session, tenant, f"{tenant}/q{i}")

    try:
        runs = [(i, t) for i in range(5) for t in tenants]
        seen = await asyncio.gather(*(run(t, i) for i, t in runs))
        for shown, (i, tenant) in zip(seen, runs, strict=True):
            assert f"{tenant}/q{i}" in shown
            assert all(text.split("/")[0] in (tenant, f"re:{tenant}") for text in shown)
        for tenant in tenants:
            stored = texts(await session.get_items(wrapper=ctx(tenant)))
            expected = [f"{tenant}/q{i}" for i in range(5)]
            expected += [f"re:{q}" for q in expected]
            assert sorted(stored) == sorted(expected)
    finally:
        for tenant in tenants:
            await session.clear_session(wrapper=ctx(tenant))
        await session.close()


@pytest.mark.asyncio
async def test_the_runners_compaction_hook_compacts_the_contexts_own_history() -> None:
    def compacting(inner: Session) -> Session:
        return CompactionSession(
            inner,
            summarizer=IdentitySummarizer(),
            should_trigger_compaction=item_count_trigger(4),
            keep_last=2,
            background=True,
        )

    session = ContextScopedSession(InMemoryStore(), scope=_scope, wrap=compacting)
    for i in range(3):
        await _run(session, "acme", f"a{i}")
    assert await _run(session, "globex", "g0") == ["g0"]
    async with await session.session_for(Tenant("acme")) as acme:  # type: ignore[attr-defined]
        assert await acme.get_compaction_records()
        assert texts(await acme.get_items()) == ["a0", "re:a0", "a1", "re:a1", "a2", "re:a2"]
    async with await session.session_for(Tenant("globex")) as globex:  # type: ignore[attr-defined]
        assert await globex.get_compaction_records() == []


@pytest.mark.asyncio
async def test_every_handle_a_context_scoped_session_opens_is_closed() -> None:
    """Each call's handle is closed after the call, also when ``wrap`` refuses it."""
    handed: list[Any] = []

    class RecordingStore:  # a store wrapper: records the handles it gives out
        def __init__(self) -> None:
            self.store = InMemoryStore()

        def session(self, session_id: str, **options: Any) -> Any:
            handed.append(self.store.session(session_id, **options))
            return handed[-1]

    def refuse(session: Session) -> Session:
        raise ValueError("this stack refuses")

    store = RecordingStore()
    session = ContextScopedSession(cast(Any, store), scope=_scope)
    await _run(session, "acme", "a1")
    with pytest.raises(ValueError, match="refuses"):
        await ContextScopedSession(cast(Any, store), scope=_scope, wrap=refuse).get_items(
            wrapper=ctx("acme")
        )
    assert len(handed) == 4 and all(handle.closed for handle in handed)
