"""``SessionWrapper``: the shared plumbing of a layer that takes an inner Session and is one.

A wrapper reaches its inner session as ``inner``, shares one settings object with it, owns it
(closing the wrapper closes it), and declares the capabilities it passes on from it. Side
stores come from the inner session's family (or the caller's ``sibling_factory``), through
``wrap_member`` so that side data gets this layer's treatment (e.g. encryption). A view layer
(``numbering = foreign.sequenced``) gets an inner session with sequence numbers: a foreign one
is numbered through ``ForeignSession``.

Run contexts (the SDK's ``wrapper=``, docs/context-scopes.md): a layer over a *context-aware*
session (one whose four methods take ``wrapper=``, so it keeps one history per run context)
either forwards ``wrapper=`` on every call (``ContextForwardingWrapper``) or refuses it at
construction. Refusing is the default: a layer that keeps anything per session id beside the
items would share it between the contexts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from agents.memory import Session, SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings

from ..core.capabilities import Capability, capabilities_of
from ..core.closing import Closing, release_here
from ..core.family import Family, close_at_once, close_owned, member_purposes, side_store
from ..core.ids import derive_sibling_id
from ..core.options import OptionsChecked
from ..errors import SessionClosedError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

W = TypeVar("W", bound="SessionWrapper")


class SessionWrapper(OptionsChecked, SessionABC):
    """Base of a layer over ``inner``; a layer overrides the Session methods it changes (the
    others pass through to ``inner``).

    ``session_id`` is the inner session's; ``session_settings`` reads and writes the inner
    session's, so the whole stack shares one ``limit`` (one passed to the constructor is set
    there). ``capabilities`` is what ``inner`` declares, limited to the class's ``passes``,
    plus its ``offers``.
    ``sibling_factory`` opens side stores by derived id, for an inner session without a family
    (e.g. the SDK's own classes).
    """

    passes: ClassVar[frozenset[Capability]] = frozenset({Capability.FAMILY})
    """The capabilities this layer offers whenever its inner session does."""
    offers: ClassVar[frozenset[Capability]] = frozenset()
    """The capabilities this layer implements itself, over any inner session."""
    numbering: ClassVar[Callable[..., Session] | None] = None
    """For a view layer, which keeps sequence numbers of ``inner`` and side data:
    ``foreign.sequenced``, which numbers a foreign ``inner`` through ``ForeignSession`` (side
    stores are then required). Set by the layer, so this module need not import foreign.py."""
    forwards_context: ClassVar[bool] = False
    """Whether this layer passes the Runner's ``wrapper=`` on (``ContextForwardingWrapper``);
    otherwise a context-aware ``inner`` is refused at construction."""
    keeps: ClassVar[str] = "state of its own per session id"
    """What this layer keeps beside the items, named when it refuses a context-aware inner."""

    def __init__(
        self,
        inner: Session,
        *,
        sibling_factory: Callable[[str], Session] | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        name = type(self).__name__
        if not all(
            callable(getattr(inner, method, None))
            for method in ("get_items", "add_items", "pop_item", "clear_session")
        ):
            raise TypeError(
                f"{name} wraps a Session (get_items, add_items, pop_item, "
                f"clear_session); got {type(inner).__name__}"
            )
        if sibling_factory is not None and not callable(sibling_factory):
            raise TypeError(f"{name}: sibling_factory must be callable, got {sibling_factory!r}")
        self.context_aware = context_aware(inner)
        """Whether ``inner`` keeps one history per run context (its methods take ``wrapper=``)."""
        if self.context_aware and not self.forwards_context:
            raise TypeError(
                f"{name} cannot wrap {type(inner).__name__}: that session keeps one history "
                f"per run context (its methods take the Runner's wrapper=), but {name} keeps "
                f"{self.keeps}, which every context would share. Scope the whole layer by the "
                f"context instead: ContextScopedSession(store, scope=lambda ctx: ..., "
                f"wrap=lambda session: {name}(session, ...))"
            )
        capabilities = capabilities_of(inner)
        if self.numbering is not None and Capability.SEQUENCED not in capabilities:
            inner = self.numbering(inner, sibling_factory, wrapper=name)
            capabilities = capabilities_of(inner)
        self._inner_caps = capabilities
        """What ``inner`` declares, read once (a session's capabilities are fixed)."""
        if (
            self.numbering is not None
            and sibling_factory is None
            and (Capability.FAMILY not in capabilities)
        ):
            raise TypeError(
                f"{name} keeps its side data in the same store as the inner session, but "
                f"a {type(inner).__name__} cannot open sibling sessions; pass "
                "sibling_factory=, e.g. sibling_factory=lambda sid: SQLiteSession(sid, path)"
            )
        self.inner = inner
        self.session_id = inner.session_id
        if sibling_factory is not None:
            capabilities |= {Capability.FAMILY}
        self.capabilities = (capabilities & self.passes) | self.offers
        if self.context_aware:  # a capability addresses one history: none of a context's
            self.capabilities = frozenset()
        self._factory = sibling_factory
        self._family: Family | None = None
        self._closed = False
        self._closing: Closing | None = None
        if session_settings is not None:
            self.session_settings = coerce_session_settings(session_settings)

    # -- the Session API: passed through to ``inner`` unless the layer changes it ------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the inner session's latest ``limit`` items."""
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the inner session."""
        await self.inner.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the inner session's newest item."""
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        """Clear the inner session."""
        await self.inner.clear_session()

    @property  # type: ignore[override]
    def session_settings(self) -> SessionSettings | None:
        """The inner session's settings (one object for the whole stack)."""
        return getattr(self.inner, "session_settings", None)

    @session_settings.setter
    def session_settings(self, value: SessionSettings | None) -> None:
        self.inner.session_settings = value

    def resolve_limit(self, limit: int | None) -> int | None:
        """Apply the SDK's rule: an explicit limit wins, else ``session_settings.limit``."""
        if limit is None and (settings := self.session_settings) is not None:
            return settings.limit
        return limit

    def _inner(self, capability: Capability) -> Any:
        """The inner session, if this layer offers ``capability`` (else NotImplementedError)."""
        if capability not in self.capabilities:
            raise NotImplementedError(
                f"{type(self).__name__} over {type(self.inner).__name__} cannot do this: the "
                f"inner session does not declare {capability}; wrap one of agent_sessions' "
                "backends"
            )
        return self.inner

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        """Forward native expiry to the inner session (NATIVE_EXPIRY, when passed on)."""
        self._inner(Capability.NATIVE_EXPIRY).set_sliding_ttl(ttl_seconds)

    async def refresh_expiry(self) -> None:
        """Forward to the inner session (NATIVE_EXPIRY, when passed on)."""
        await self._inner(Capability.NATIVE_EXPIRY).refresh_expiry()

    # -- the SDK compaction session's hooks (see core.sdk_compaction) ---------------------------

    sdk_compaction_passthrough: ClassVar[bool] = False
    """True for a layer that stores items unchanged and keeps nothing per item: the SDK's
    compaction hooks then go straight to the inner session. Otherwise the layer overrides them
    or declines, and ``OpenAIResponsesCompactionSession`` falls back to its own checked path."""

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The SDK's hook: the inner session's snapshot when this layer passes it through,
        else None (declined)."""
        reader = getattr(self.inner, "_get_compaction_snapshot", None)
        if not self.sdk_compaction_passthrough or reader is None:
            return None
        if prune_prefix is None:
            return await reader(limit)
        return await reader(limit, prune_prefix=prune_prefix)

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The SDK's hook: replace the whole history in one transaction through the inner
        session when this layer passes it through; False (declined) otherwise."""
        if not self.sdk_compaction_passthrough:
            return False
        return await atomic_replace(self.inner, items)

    # -- the family ------------------------------------------------------------------------------

    def side_store(self, purpose: str) -> Session:
        """Return the side store for ``purpose`` in this session's family (see
        ``core.family``), with this layer's treatment of side data."""
        if self._family is None:
            opened = None
            if self._factory is None:
                member = side_store(self.inner, purpose)
                opened = self.wrap_member(member)
                if opened is member:  # the inner's own, which its family keeps and closes
                    return member
            self._family = Family(purpose, opened)
        return self._family.member(purpose, self._open_member)

    def _open_member(self, purpose: str) -> Session:
        return self.wrap_member(self._plain_member(purpose))

    def _plain_member(self, purpose: str) -> Session:
        """The side store for ``purpose`` as the store keeps it: from ``sibling_factory``
        when given, else from the inner session's family."""
        if self._factory is None:
            return side_store(self.inner, purpose)
        return self._factory(derive_sibling_id(self.session_id, purpose))

    def wrap_member(self, member: Session) -> Session:
        """Return ``member`` (a side store of the inner session) as this layer keeps it:
        numbered for a view layer, else unchanged; a layer that transforms items (encryption)
        wraps it."""
        if self.numbering is not None:
            return self.numbering(member, self._factory)
        return member

    async def family_purposes(self) -> list[str]:
        """The purposes of every side store ever written in this session's family."""
        return await member_purposes(self.inner)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(
                f"{type(self).__name__} {self.session_id!r} is closed; open a new session"
            )

    def close(self) -> Closing:
        """Close the side stores this object opened, then the inner session (sync or async
        ``close``); idempotent; works called bare or awaited (see ``core.closing.Closing``)."""
        if self._closing is None:
            self._closing = Closing(None if self._closed_at_once() else self._release())
        return self._closing

    def _closed_at_once(self) -> bool:
        """Close the side stores and ``inner`` without I/O if possible (see
        ``core.family.close_at_once``); True when done. Otherwise ``_release`` does the rest."""
        self._closed = True
        return (
            self._idle()
            and (self._family is None or self._family.close_at_once())
            and close_at_once(self.inner)
        )

    def _idle(self) -> bool:
        """Whether this layer has nothing of its own to finish when closing (its own
        ``_release`` would run otherwise)."""
        return type(self)._release is SessionWrapper._release

    def _close_at_once(self) -> bool:
        """``close_at_once``'s hook: ``close()`` if it needs no I/O; True when closed so (or
        closed already without error)."""
        if self._closing is not None:
            return self._closing.done and not self._closing.failed
        if type(self).close is not SessionWrapper.close:
            return False
        if self._closed_at_once():
            self._closing = Closing(None)
            return True
        return False

    async def _close_owned(self) -> None:
        """``close()`` from the release of a session that owns this one (``close_owned``)."""
        if type(self).close is not SessionWrapper.close:  # a subclass's close does more
            await self.close()
        elif self._close_at_once():
            return
        elif self._closing is None:
            self._closing, release = release_here(self._release)
            await release
        else:
            await self._closing

    async def _release(self) -> None:
        if self._family is not None:
            await self._family.close()
        await close_owned(self.inner)

    async def __aenter__(self: W) -> W:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class ContextForwardingWrapper(SessionWrapper):
    """A layer that passes the Runner's ``wrapper=`` (the run context) on to ``inner`` on every
    Session call, so over a context-aware session each context keeps its own history; over any
    other session ``wrapper`` is dropped and nothing changes. A layer overriding one of the four
    methods takes ``wrapper=`` and reaches ``inner`` through ``in_scope(wrapper)``."""

    forwards_context = True

    def in_scope(self, wrapper: Any) -> Any:
        """``inner``, or a view of it passing ``wrapper=`` to each of its four methods when it
        is context-aware (it takes ``wrapper=`` on all four, as the SDK requires)."""
        if wrapper is None or not self.context_aware:
            return self.inner
        return InScope(self.inner, wrapper)

    async def get_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """Return the inner session's latest ``limit`` items (in ``wrapper``'s context)."""
        return await self.in_scope(wrapper).get_items(limit)  # type: ignore[no-any-return]

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: Any = None) -> None:
        """Append ``items`` to the inner session (in ``wrapper``'s context)."""
        await self.in_scope(wrapper).add_items(items)

    async def pop_item(self, *, wrapper: Any = None) -> TResponseInputItem | None:
        """Remove and return the inner session's newest item (in ``wrapper``'s context)."""
        return await self.in_scope(wrapper).pop_item()  # type: ignore[no-any-return]

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Clear the inner session (in ``wrapper``'s context)."""
        await self.in_scope(wrapper).clear_session()


class InScope:
    """A context-aware session's four methods with one run's ``wrapper=`` bound (declares no
    capability: a checked pop through it reads and pops through these methods)."""

    __slots__ = ("session", "session_id", "wrapper")

    def __init__(self, session: Session, wrapper: Any) -> None:
        self.session, self.session_id, self.wrapper = session, session.session_id, wrapper

    async def get_items(self, limit: int | None = None) -> Any:
        return await self.session.get_items(limit, wrapper=self.wrapper)  # type: ignore[call-arg]

    async def add_items(self, items: list[Any]) -> None:
        await self.session.add_items(items, wrapper=self.wrapper)  # type: ignore[call-arg]

    async def pop_item(self) -> Any:
        return await self.session.pop_item(wrapper=self.wrapper)  # type: ignore[call-arg]

    async def clear_session(self) -> None:
        await self.session.clear_session(wrapper=self.wrapper)  # type: ignore[call-arg]


def context_aware(session: object) -> bool:
    """Whether ``session`` keeps one history per run context: the SDK passes it ``wrapper=``
    (all four methods take it by keyword) and it does not merely pass it on to a session that
    ignores it (ours say so in ``context_aware``; the SDK's EncryptedSession over its
    ``underlying_session``)."""
    own = getattr(session, "context_aware", None)
    if isinstance(own, bool):
        return own
    try:
        methods = [getattr(session, name) for name in _METHODS]
    except Exception:  # as the SDK's check: an attribute that fails to resolve opts out
        return False
    if not all(takes_wrapper(method) for method in methods):
        return False
    underlying = getattr(session, "underlying_session", None)
    return underlying is None or context_aware(underlying)


_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def takes_wrapper(method: Any) -> bool:
    """Whether ``method`` takes ``wrapper`` by keyword, as the SDK's check requires (a
    signature that cannot be read, or ``**kwargs`` alone, does not)."""
    function = getattr(method, "__func__", method)
    try:
        return _takes_wrapper(function)
    except TypeError:  # unhashable: not cached
        return _takes_wrapper.__wrapped__(function)


@lru_cache(maxsize=256)
def _takes_wrapper(function: Any) -> bool:
    # Cached per function: inspect.signature costs ~15 us, and layers ask at construction.
    try:
        param = inspect.signature(function).parameters.get("wrapper")
    except Exception:
        return False
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


async def atomic_replace(session: Session, items: list[Any]) -> bool:
    """Call ``session``'s SDK hook ``_atomic_replace_items`` as the SDK does (looked up on its
    type); False when it has none or declines."""
    replace = getattr(type(session), "_atomic_replace_items", None)
    return replace is not None and bool(await replace(session, items))


def check_max_item_bytes(value: object) -> int:
    """Return ``value`` if it is a positive int, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_item_bytes must be a positive int, got {value!r}")
    return value


__all__ = [
    "ContextForwardingWrapper",
    "InScope",
    "SessionWrapper",
    "atomic_replace",
    "check_max_item_bytes",
    "context_aware",
    "takes_wrapper",
]
