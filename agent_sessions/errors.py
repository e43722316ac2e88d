"""The package's error hierarchy.

Every error subclasses :class:`SessionError` and also the builtin the Agents SDK raises for the
same case, so code written against the SDK keeps catching them.
"""

from __future__ import annotations


class SessionError(Exception):
    """Base class of every error raised by agent_sessions."""


class InvalidItemError(SessionError, ValueError, TypeError):
    """An item of a batch cannot be stored; nothing of the batch was written.

    ``index`` is the item's position in the batch passed to ``add_items``.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ItemTooLargeError(InvalidItemError):
    """An item's encoded size exceeds the session's ``max_item_bytes``."""


class InvalidSessionIdError(SessionError, ValueError, TypeError):
    """A session id is empty, not a string, too long, or contains a forbidden character."""


class CorruptItemError(SessionError, ValueError):
    """A stored item no longer decodes (raised only in strict mode)."""


class DecryptionError(SessionError, ValueError):
    """An encrypted item cannot be authenticated or decrypted with the configured keys."""


class BranchError(SessionError, ValueError):
    """A branching operation was refused (unknown turn, reused name, protected branch)."""


class BranchNotFoundError(BranchError):
    """The named branch does not exist."""


class SessionClosedError(SessionError, RuntimeError):
    """The session (or the connection it shares) was closed and cannot be used again."""


class BackendUnavailableError(SessionError, ConnectionError):
    """The backing store could not be reached within the configured timeout."""


class BackendDataError(SessionError, RuntimeError):
    """The backing store holds data this package did not write where it expects its own."""


class SequenceConflictError(SessionError, ValueError):
    """``write_sequenced_items`` was refused: the session already holds items, or a number is
    taken in the store; nothing was written."""


class CommitConflictError(SessionError, RuntimeError):
    """A ``commit`` was refused: a session's newest number was no longer the one expected;
    nothing was written."""


class MemoryEditError(SessionError, ValueError):
    """An edit of agent memory was refused; the message says what to do (it is shown to the
    model)."""


class BlockConflictError(MemoryEditError):
    """Other writers kept changing the memory block; nothing was written."""


class UnknownSchemeError(SessionError, ValueError):
    """``open_session`` got a URL whose scheme no backend registered."""


class MissingDependencyError(SessionError, ImportError):
    """A backend or wrapper needs an optional dependency that is not installed."""


class SessionNotFoundError(SessionError, LookupError):
    """The store holds no session with the given id (raised by the catalog and the CLI)."""


class StoreNotFoundError(SessionError, LookupError):
    """The store itself (database file, tables, collections) does not exist; nothing was
    created."""


__all__ = [
    "BackendDataError",
    "BackendUnavailableError",
    "BlockConflictError",
    "BranchError",
    "BranchNotFoundError",
    "CommitConflictError",
    "CorruptItemError",
    "DecryptionError",
    "InvalidItemError",
    "InvalidSessionIdError",
    "ItemTooLargeError",
    "MemoryEditError",
    "MissingDependencyError",
    "SessionClosedError",
    "SequenceConflictError",
    "SessionError",
    "SessionNotFoundError",
    "StoreNotFoundError",
    "UnknownSchemeError",
]
