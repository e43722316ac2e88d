"""``AdvancedSession`` (also named ``AdvancedSQLiteSession``): the SDK's ``AdvancedSQLiteSession``
API (branching plus usage per branch) over any Session."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from .branching import BranchingSession
from .branching.usage_log import UsageQueries
from .foreign import SiblingFactory

if TYPE_CHECKING:
    from agents.memory import Session, SessionSettings


class AdvancedSession(BranchingSession, UsageQueries):
    """Conversation branching and usage analytics (per branch) over any Session.

    Args:
        inner: the session that stores ``main`` (any Session); or omit it and pass
            ``session_id=`` (and ``db_path=``) for a ``SQLiteSession``, as the SDK's
            ``AdvancedSQLiteSession(session_id=..., db_path=..., create_tables=...)``.
        sibling_factory: opens a session of the same store for a derived id; needed only when
            ``inner`` cannot open siblings itself (e.g. the SDK's own session classes).
        logger: where branch operations and usage-store failures are logged.
        session_id, db_path, create_tables, session_settings, sqlite_options: the SDK's
            constructor: a ``SQLiteSession(session_id, db_path, session_settings=...,
            **sqlite_options)`` (e.g. ``sessions_table=``, ``messages_table=``) becomes
            ``inner``. ``create_tables`` is accepted for the SDK's signature: tables are always
            created on first use here.
    """

    def __init__(
        self,
        inner: Session | None = None,
        *,
        sibling_factory: SiblingFactory | None = None,
        logger: logging.Logger | None = None,
        session_id: str | None = None,
        db_path: str | os.PathLike[str] | None = None,
        create_tables: bool = False,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **sqlite_options: Any,
    ) -> None:
        if inner is None:
            if session_id is None:
                raise TypeError(
                    "AdvancedSession needs the session to wrap (inner=...) or, the SDK's way, "
                    "session_id= (and db_path=) for a SQLite one"
                )
            from ..backends.sqlite import SQLiteSession

            path = ":memory:" if db_path is None else db_path
            inner = SQLiteSession(
                session_id, path, session_settings=session_settings, **sqlite_options
            )
        elif db_path is not None or sqlite_options or session_settings is not None:
            raise TypeError(
                "db_path=, session_settings= and SQLite options build the inner session; "
                "configure the session you pass as inner instead"
            )
        elif session_id is not None and session_id != inner.session_id:
            raise ValueError(
                f"session_id {session_id!r} differs from the wrapped session's "
                f"{inner.session_id!r}; omit session_id or make them equal"
            )
        self.create_tables = create_tables
        super().__init__(inner, sibling_factory=sibling_factory, logger=logger)

    async def _after_delete(self, branch: str) -> None:
        await self.side_store("usage").add_items([{"b": branch, "drop_branch": True}])  # type: ignore[list-item]

    async def _after_clear(self) -> None:
        await self.side_store("usage").clear_session()

    @property
    def _current_branch_id(self) -> str:
        """The current branch as of this object's last operation (the SDK's attribute, which
        code written against it reads)."""
        return self._log.state.current

    # The SDK's attribute names, read from the inner session (None when it has none).
    db_path = property(lambda self: getattr(self.inner, "db_path", None))
    """The inner session's database path."""
    sessions_table = property(lambda self: getattr(self.inner, "sessions_table", None))
    """The inner session's sessions table name."""
    messages_table = property(lambda self: getattr(self.inner, "messages_table", None))
    """The inner session's messages table name."""


AdvancedSQLiteSession = AdvancedSession
"""The SDK's name: ``AdvancedSQLiteSession(session_id=..., db_path=..., create_tables=...)``."""

__all__ = ["AdvancedSQLiteSession", "AdvancedSession"]
