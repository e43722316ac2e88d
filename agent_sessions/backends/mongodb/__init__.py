"""MongoDB: batch documents per session and a counter document, in the SDK's collections."""

from .session import (
    DEFAULT_DATABASE,
    DEFAULT_MAX_ITEM_BYTES,
    DEFAULT_SERVER_SELECTION_TIMEOUT_MS,
    MAX_BATCH_BYTES,
    MongoDBSession,
    MongoDBStore,
    make_client,
    open_store,
    open_url,
)

__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_SERVER_SELECTION_TIMEOUT_MS",
    "MAX_BATCH_BYTES",
    "MongoDBSession",
    "MongoDBStore",
    "make_client",
    "open_store",
    "open_url",
]
