"""``ContextScopedSession``: one session object for many run contexts (tenants, users).

The Runner (openai-agents >= 0.25) passes each call its run's ``wrapper=``; this session maps
``wrapper.context`` through ``scope`` to a session id and acts on that session of the store,
built by ``wrap`` (docs/context-scopes.md). Each scope's history is a plain session of the
store: listed, erased, copied, encrypted or branched like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from agents.memory import Session, SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings

from ..core.family import close_owned, close_quietly
from ..core.ids import validate_session_id
from ..core.registry import Store, open_store
from ..errors import InvalidSessionIdError, SessionClosedError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem


class ContextScopedSession(SessionABC):
    """A session whose history is chosen by the run context: ``scope(context)`` names the
    store's session that a run with that ``context`` reads and writes.

    Args:
        store: a store (``open_store(url)``; the caller closes it) or its URL (opened on first
            use with ``store_options``, closed by ``close()``).
        scope: maps the run's ``context`` (``Runner.run(..., context=...)``) to a session id,
            e.g. ``lambda ctx: f"{ctx.tenant}:{ctx.user}"``.
        wrap: builds the stack over each scope's session, e.g.
            ``lambda s: EncryptedSession(s, encryption_key=key)`` (a key per scope); every
            layer, also those that keep side data, works per scope here.
        session_id: this object's name (the SDK's ``session_id``; no history is stored under it).
        session_settings: set on each scope's session (the SDK's ``limit``).
        session_options: the backend's per-session options, for ``store.session(scope_id,
            **session_options)`` (e.g. Redis ``key_prefix``).

    Every call opens the scope's session (``wrap(store.session(scope_id))``), uses it and closes
    it, as a request handler would: nothing is cached between calls, so any number of scopes
    cost nothing while idle. Called without a run context (an SDK before 0.25, a direct call,
    or a run without ``context=``) it raises TypeError: use :meth:`session_for` outside a run.
    """

    context_aware: ClassVar[bool] = True
    """It keeps one history per run context (``wrapper.base.context_aware``)."""
    capabilities: ClassVar[frozenset[Any]] = frozenset()
    """None: a layer over it cannot reach a scope's store directly."""
    run_compaction: Callable[..., Awaitable[None]]
    """Present with ``wrap``: the Runner's compaction hook, run in the context's stack."""

    def __init__(
        self,
        store: Store | str,
        scope: Callable[[Any], str],
        *,
        wrap: Callable[[Session], Session] | None = None,
        session_id: str = "context-scoped",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        session_options: dict[str, Any] | None = None,
        **store_options: Any,
    ) -> None:
        if not callable(scope):
            raise TypeError(f"scope must map a run context to a session id, got {scope!r}")
        if wrap is not None and not callable(wrap):
            raise TypeError(f"wrap must build a session from a session, got {wrap!r}")
        if isinstance(store, str):
            self._url: str | None = store
            self._store: Store | None = None
        elif callable(getattr(store, "session", None)):
            if store_options:
                raise TypeError("store options are for a URL; configure the store you pass")
            self._url, self._store = None, store
        else:
            raise TypeError(f"store must be a Store (open_store) or a URL, got {store!r}")
        self.scope = scope
        self.wrap = wrap
        self.session_id = validate_session_id(session_id)
        self.session_settings = (
            None if session_settings is None else coerce_session_settings(session_settings)
        )
        self._store_options = store_options
        self._session_options = dict(session_options or {})
        # One open_store for concurrent first calls, each of which would take a hold on the
        # store and only the last be closed (test_fifty_concurrent_runs_...).
        self._opening = asyncio.Lock()
        self._closed = False
        if wrap is not None:
            # The Runner's compaction hook, for a CompactionSession in ``wrap``; offered only
            # with ``wrap``, so the SDK's detection of the hook stays truthful.
            self.run_compaction = self._run_compaction

    def scope_id(self, context: Any) -> str:
        """The session id of ``context``'s history: ``scope(context)``, validated.

        Raises:
            InvalidSessionIdError: ``scope`` returned no valid session id.
        """
        value = self.scope(context)
        try:
            return validate_session_id(value)
        except InvalidSessionIdError as exc:
            raise InvalidSessionIdError(
                f"ContextScopedSession {self.session_id!r}: scope(context) returned {value!r} "
                f"for the context {context!r}, which is no session id: {exc}"
            ) from None

    async def session_for(self, context: Any) -> Session:
        """``context``'s session, as runs use it (``wrap`` applied); the caller closes it
        (``async with`` or ``await s.close()``). For the APIs of the layers in ``wrap``
        (branches, usage, ...) and for use outside a run."""
        store = await self._opened_store()
        session: Session = store.session(self.scope_id(context), **self._session_options)
        if self.session_settings is not None:
            session.session_settings = self.session_settings
        if self.wrap is None:
            return session
        try:
            return self.wrap(session)
        except BaseException:  # a layer refused it: the handle is not left open
            await close_quietly(session)
            raise

    async def _opened_store(self) -> Store:
        if self._closed:
            raise SessionClosedError(f"ContextScopedSession {self.session_id!r} is closed")
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    assert self._url is not None
                    self._store = await open_store(self._url, **self._store_options)
        return self._store

    @asynccontextmanager
    async def _in(self, wrapper: Any) -> AsyncIterator[Any]:
        if wrapper is None or wrapper.context is None:
            raise TypeError(
                f"ContextScopedSession {self.session_id!r} keeps one history per run context "
                "and got none: pass it to Runner.run(agent, input, context=..., session=...) "
                "(openai-agents >= 0.25 hands it the run's context), or use "
                "await session.session_for(context) outside a run"
            )
        session = await self.session_for(wrapper.context)
        try:
            yield session
        finally:
            await close_owned(session)

    async def get_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """The latest ``limit`` items of the run context's history."""
        async with self._in(wrapper) as session:
            return await session.get_items(limit)  # type: ignore[no-any-return]

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: Any = None) -> None:
        """Append ``items`` to the run context's history."""
        async with self._in(wrapper) as session:
            await session.add_items(items)

    async def pop_item(self, *, wrapper: Any = None) -> TResponseInputItem | None:
        """Remove and return the newest item of the run context's history."""
        async with self._in(wrapper) as session:
            return await session.pop_item()  # type: ignore[no-any-return]

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Clear the run context's history (as its session's ``clear_session`` does)."""
        async with self._in(wrapper) as session:
            await session.clear_session()

    async def _run_compaction(self, args: Any = None, *, wrapper: Any = None) -> None:
        """Run the SDK's compaction hook of the context's stack, when it has one (it finishes
        before returning: the stack is closed after the call, ``background=True`` or not)."""
        async with self._in(wrapper) as session:
            hook = getattr(session, "run_compaction", None)
            if callable(hook):
                await hook(args)
                # A background compaction must finish before its session object is closed
                # (test_the_runners_compaction_hook_compacts_the_contexts_own_history).
                settle = getattr(session, "wait_for_compaction", None)
                if callable(settle):
                    await settle()

    async def close(self) -> None:
        """Close the store if this object opened it from a URL; idempotent."""
        self._closed = True
        if self._url is not None and self._store is not None:
            store, self._store = self._store, None
            await store.close()

    async def __aenter__(self) -> ContextScopedSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        where = self._url if self._url is not None else type(self._store).__name__
        return f"ContextScopedSession({where!r}, session_id={self.session_id!r})"


__all__ = ["ContextScopedSession"]
