"""The in-process store: sessions in a dict, for tests, demos and one-process apps."""

from .session import InMemorySession, open_url
from .store import DEFAULT_STORE, InMemoryStore, open_store

__all__ = ["DEFAULT_STORE", "InMemorySession", "InMemoryStore", "open_store", "open_url"]
