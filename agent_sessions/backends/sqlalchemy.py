"""The SDK-shaped import path of :class:`SQLAlchemySession` (the backend is ``backends.sql``)."""

from .sql import SQLAlchemySession, SQLStore, open_store, open_url

__all__ = ["SQLAlchemySession", "SQLStore", "open_store", "open_url"]
