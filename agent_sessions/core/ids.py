"""Session id rules and the derivation of sibling ids that can never equal a user's id."""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidSessionIdError

MAX_SESSION_ID_LENGTH = 256
"""Longest session id a user may pass, in characters."""

MAX_INTERNAL_ID_LENGTH = 512
"""Longest id a backend must store: user ids plus sibling prefixes."""

SIBLING_MARK = "\x1e"
"""Starts every derived (sibling) id; user ids may not start with it, so the two never meet."""

SCOPE_MARK = "\x1d"
"""Starts every memory scope id (``SCOPE_MARK + "memory:<agent>:<user>"``); a user id starting
with it must be a well-formed scope id, so no conversation id can name a memory scope."""

SCOPE_NAME = "memory:"
"""How the CLI and docs name a scope: its id without :data:`SCOPE_MARK`."""

_SCOPE = re.compile(r"\x1dmemory:[A-Za-z0-9_.@+\-]{0,100}:[A-Za-z0-9_.@+\-]{0,100}\Z")


def is_scope_id(session_id: str) -> bool:
    """Whether ``session_id`` is a memory scope id (made by ``agent_sessions.memory.scope_id``)."""
    return bool(_SCOPE.match(session_id)) and session_id != SCOPE_MARK + "memory::"


def display_id(session_id: str) -> str:
    """``session_id`` as the CLI shows it: a memory scope as ``memory:<agent>:<user>``."""
    return session_id[1:] if is_scope_id(session_id) else session_id


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
    if session_id.startswith(SCOPE_MARK) and not is_scope_id(session_id):
        raise InvalidSessionIdError(
            "session_id must not start with '\\x1d' unless it is a memory scope id from "
            "agent_sessions.memory.scope_id(); that prefix is reserved for memory scopes"
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
