"""Redis (standalone or Cluster): a sorted set of items and a metadata hash per session."""

from .session import DEFAULT_TIMEOUT, RedisSession, RedisStore, open_store, open_url

__all__ = ["DEFAULT_TIMEOUT", "RedisSession", "RedisStore", "open_store", "open_url"]
