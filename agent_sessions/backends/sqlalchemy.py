"""The import path of :class:`SQLAlchemySession` before the SQL backend became a package."""

from .sql import SQLAlchemySession, open_url

__all__ = ["SQLAlchemySession", "open_url"]
