"""Sessions in PostgreSQL, MariaDB/MySQL or SQLite through SQLAlchemy (see docs/sqlalchemy.md)."""

from .session import SQLAlchemySession, open_url
from .store import SQLStore, open_store

__all__ = ["SQLAlchemySession", "SQLStore", "open_store", "open_url"]
