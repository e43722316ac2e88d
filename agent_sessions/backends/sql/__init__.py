"""PostgreSQL, MariaDB/MySQL and SQLite through a SQLAlchemy ``AsyncEngine``."""

from .session import SQLAlchemySession, SQLStore, open_store, open_url

__all__ = ["SQLAlchemySession", "SQLStore", "open_store", "open_url"]
