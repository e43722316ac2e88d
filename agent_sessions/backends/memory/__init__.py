"""The in-process store: sessions in a dict, for tests, demos and one-process apps."""

from .session import DEFAULT_STORE, InMemorySession, InMemoryStore, open_store, open_url

__all__ = ["DEFAULT_STORE", "InMemorySession", "InMemoryStore", "open_store", "open_url"]
