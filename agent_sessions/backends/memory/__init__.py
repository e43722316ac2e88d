"""The in-process store: sessions in a dict, for tests, demos and one-process apps."""

from .session import InMemorySession, InMemoryStore, open_url

__all__ = ["InMemorySession", "InMemoryStore", "open_url"]
