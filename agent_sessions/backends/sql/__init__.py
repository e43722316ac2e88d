"""Sessions in PostgreSQL, MariaDB/MySQL or SQLite through SQLAlchemy (see docs/sqlalchemy.md)."""

from .session import SQLAlchemySession, open_url

__all__ = ["SQLAlchemySession", "open_url"]
