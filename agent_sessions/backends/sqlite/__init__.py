"""SQLite through the standard library, in the SDK's own table layout."""

from ...core.sqltext import check_identifier
from .session import SQLiteSession, SQLiteStore, open_store, open_url

__all__ = ["SQLiteSession", "SQLiteStore", "check_identifier", "open_store", "open_url"]
