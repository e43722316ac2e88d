"""What the MongoDB backend's modules share about the driver: its errors translated, cursors
read whole."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pymongo.errors import ConfigurationError, ConnectionFailure, ExecutionTimeout

from ...errors import BackendUnavailableError


@asynccontextmanager
async def translated(what: str) -> AsyncIterator[None]:
    """Turn PyMongo's connectivity errors into :class:`BackendUnavailableError`."""
    try:
        yield
    except (ConnectionFailure, ExecutionTimeout) as exc:
        raise BackendUnavailableError(
            f"MongoDB is unreachable or timed out ({what}): {exc}; check that the server is up "
            "and that the URI's host and port are right"
        ) from exc
    except ConfigurationError as exc:
        if "DNS" not in str(exc):
            raise
        # PyMongo's async client resolves a mongodb+srv:// seed list on first use.
        raise BackendUnavailableError(
            f"cannot resolve the MongoDB host ({what}): {exc}; check the mongodb+srv:// host name"
        ) from exc


async def settled(value: Any) -> Any:
    """``value``, awaited if it is awaitable: PyMongo returns coroutines where Motor may not."""
    return await value if inspect.isawaitable(value) else value


async def to_list(cursor: Any) -> list[Any]:
    """Every document of ``cursor`` (PyMongo's ``aggregate`` returns a coroutine of one)."""
    return [doc async for doc in await settled(cursor)]
