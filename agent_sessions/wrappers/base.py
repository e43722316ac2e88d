"""``SessionWrapper``: the shared plumbing of a layer that takes an inner Session and is one.

A wrapper keeps one settings object with its inner session, owns the inner session (closing the
wrapper closes it), and offers ``sibling()`` exactly when the inner session does, wrapping the
inner sibling in the same layer so side data gets the same treatment (e.g. encryption).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from agents.memory import Session, SessionABC, SessionSettings

from ..core.capabilities import SupportsSiblings
from ..core.closing import Closing

if TYPE_CHECKING:
    from .rewrite import Transform

W = TypeVar("W", bound="SessionWrapper")


class SessionWrapper(SessionABC):
    """Base of a layer over ``inner``; subclasses implement the four Session methods.

    ``session_id`` is the inner session's; ``session_settings`` reads and writes the inner
    session's, so the whole stack shares one ``limit``. ``sibling(id)`` exists only when
    ``inner`` offers it (so ``isinstance(w, SupportsSiblings)`` is truthful) and returns
    ``self.wrap_sibling(inner.sibling(id))``.
    """

    sibling: Callable[[str], Session]

    def __init__(self, inner: Session) -> None:
        if not all(
            callable(getattr(inner, name, None))
            for name in ("get_items", "add_items", "pop_item", "clear_session")
        ):
            raise TypeError(
                f"{type(self).__name__} wraps a Session (get_items, add_items, pop_item, "
                f"clear_session); got {type(inner).__name__}"
            )
        self.inner = inner
        self.session_id = inner.session_id
        if isinstance(inner, SupportsSiblings):
            self.sibling = self._sibling

    @property  # type: ignore[override]
    def session_settings(self) -> SessionSettings | None:
        """The inner session's settings (one object for the whole stack)."""
        return getattr(self.inner, "session_settings", None)

    @session_settings.setter
    def session_settings(self, value: SessionSettings | None) -> None:
        self.inner.session_settings = value

    def resolve_limit(self, limit: int | None) -> int | None:
        """Apply the SDK's rule: an explicit limit wins, else ``session_settings.limit``."""
        if limit is None:
            settings = self.session_settings
            if settings is not None:
                return settings.limit
        return limit

    def wrap_sibling(self, inner_sibling: Session) -> Session:
        """Return this layer, configured like ``self``, over ``inner_sibling``."""
        raise NotImplementedError(f"{type(self).__name__} does not define wrap_sibling")

    async def rewrite_items(self, transform: Transform) -> int:
        """Replace this session's items (as this layer exposes them) by ``transform(items)``,
        keeping order and this layer's metadata; see ``rewrite.rewrite_session`` for safety.
        Returns how many items the session holds afterwards."""
        raise NotImplementedError(f"{type(self).__name__} does not support rewrite_items")

    def _sibling(self, session_id: str) -> Session:
        assert isinstance(self.inner, SupportsSiblings)
        return self.wrap_sibling(self.inner.sibling(session_id))

    def close(self) -> Closing:
        """Close the inner session (sync or async ``close``), if it has one; works called
        bare or awaited (see ``core.closing.Closing``)."""
        return Closing(self._close_inner())

    async def _close_inner(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result

    async def __aenter__(self: W) -> W:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


def check_max_item_bytes(value: object) -> int:
    """Return ``value`` if it is a positive int, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_item_bytes must be a positive int, got {value!r}")
    return value


__all__ = ["SessionWrapper", "check_max_item_bytes"]
