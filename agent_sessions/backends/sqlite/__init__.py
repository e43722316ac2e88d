"""SQLite through the standard library, in the SDK's own table layout."""

from .session import SQLiteSession, check_identifier, open_url

__all__ = ["SQLiteSession", "check_identifier", "open_url"]
