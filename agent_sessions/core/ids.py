"""Session id rules and the derivation of sibling ids that can never equal a user's id."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidSessionIdError

MAX_SESSION_ID_LENGTH = 256
"""Longest session id a user may pass, in characters."""

MAX_INTERNAL_ID_LENGTH = 512
"""Longest id a backend must store: user ids plus sibling prefixes."""

SIBLING_MARK = "\x1e"
"""Starts every derived (sibling) id; user ids may not start with it, so the two never meet."""


def validate_session_id(session_id: Any, *, internal: bool = False) -> str:
    """Return ``session_id`` if it is acceptable, else raise :class:`InvalidSessionIdError`."""
    if type(session_id) is DerivedId:  # from derive_sibling_id: a side-store factory's argument
        return str(session_id)
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session_id must be a str, got {type(session_id).__name__}; pass e.g. str(user_id)"
        )
    if not session_id:
        raise InvalidSessionIdError("session_id must not be empty")
    limit = MAX_INTERNAL_ID_LENGTH if internal else MAX_SESSION_ID_LENGTH
    if len(session_id) > limit:
        raise InvalidSessionIdError(
            f"session_id is {len(session_id)} characters, above the limit of {limit}; "
            "hash long identifiers first"
        )
    if "\x00" in session_id:
        raise InvalidSessionIdError("session_id must not contain NUL ('\\x00')")
    if not internal and session_id.startswith(SIBLING_MARK):
        raise InvalidSessionIdError(
            "session_id must not start with '\\x1e'; that prefix is reserved for derived ids"
        )
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSessionIdError(
            "session_id contains a lone surrogate and is not valid Unicode"
        ) from None
    return session_id


def derive_sibling_id(session_id: str, purpose: str) -> str:
    """Return the id of ``session_id``'s side store for ``purpose`` (e.g. ``"branches"``):
    injective (``purpose`` holds no separator), starting with :data:`SIBLING_MARK`."""
    if not purpose or SIBLING_MARK in purpose or "\x00" in purpose or len(purpose) > 64:
        raise ValueError(f"invalid sibling purpose {purpose!r}")
    return DerivedId(
        validate_session_id(f"{SIBLING_MARK}{purpose}{SIBLING_MARK}{session_id}", internal=True)
    )


class DerivedId(str):
    """A side store's id as :func:`derive_sibling_id` made it: every session constructor of this
    package accepts it (a plain str starting with ``\\x1e`` is refused), so a side-store
    factory such as ``lambda sid: InMemorySession(sid)`` works; the session keeps a plain str."""

    __slots__ = ()
