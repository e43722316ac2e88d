"""``open_session(url, session_id)``: one entry point for every backend, by URL scheme."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agents.memory import Session

from ..errors import MissingDependencyError, UnknownSchemeError

Opener = Callable[..., Session | Awaitable[Session]]
"""``opener(url, session_id, **options)`` returns a session (or an awaitable of one)."""


@dataclass(frozen=True)
class _Entry:
    target: str | Opener  # "module:function" is imported on first use
    extra: str | None


_SCHEMES: dict[str, _Entry] = {}


def register_scheme(scheme: str, opener: str | Opener, *, extra: str | None = None) -> None:
    """Make ``open_session`` handle URLs starting with ``scheme://``.

    ``opener`` is a callable or a ``"package.module:function"`` string imported lazily, so
    registering costs nothing until used. ``extra`` names the pip extra that provides the
    driver, for the error message when it is missing.
    """
    _SCHEMES[scheme.lower()] = _Entry(opener, extra)


def registered_schemes() -> list[str]:
    """Return the registered URL schemes, sorted."""
    return sorted(_SCHEMES)


def _resolve(scheme: str, entry: _Entry) -> Opener:
    if callable(entry.target):
        return entry.target
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f'pip install "agent-sessions[{entry.extra}]"' if entry.extra else "pip install"
        raise MissingDependencyError(
            f"the {scheme}:// backend needs a package that is not installed ({exc.name or exc}); "
            f"install it with: {hint}"
        ) from exc
    opener: Opener = getattr(module, attr)
    return opener


async def open_session(url: str, session_id: str, **options: Any) -> Session:
    """Open ``session_id`` in the store named by ``url``.

    Examples: ``memory://``, ``sqlite:///relative.db``, ``sqlite:////abs/path.db``,
    ``sqlite:///:memory:``, ``redis://localhost:6379/0``, ``postgresql+asyncpg://...``.
    ``options`` go to the backend's constructor.

    Raises:
        UnknownSchemeError: no backend handles the URL's scheme.
        MissingDependencyError: the backend's optional driver is not installed.
    """
    if not isinstance(url, str) or "://" not in url:
        raise UnknownSchemeError(
            f"open_session needs a URL like 'sqlite:///file.db' or 'memory://', got {url!r}"
        )
    scheme = urlsplit(url).scheme.lower()
    entry = _SCHEMES.get(scheme)
    if entry is None:
        raise UnknownSchemeError(
            f"no backend handles the URL scheme {scheme!r}; known schemes: "
            f"{', '.join(registered_schemes())}"
        )
    result = _resolve(scheme, entry)(url, session_id, **options)
    if isinstance(result, Awaitable):
        return await result
    return result


def _open_memory(url: str, session_id: str, **options: Any) -> Session:
    from ..backends.memory import InMemorySession

    return InMemorySession(session_id, **options)


def _open_sqlite(url: str, session_id: str, **options: Any) -> Session:
    from ..backends.sqlite import SQLiteSession

    # sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db"; sqlite:///:memory: -> memory
    rest = url.split("://", 1)[1]
    if not rest.startswith("/"):
        raise UnknownSchemeError(
            f"SQLite URLs have three slashes before a relative path and four before an absolute "
            f"one (sqlite:///rel.db, sqlite:////abs/path.db), got {url!r}"
        )
    path = rest[1:] or ":memory:"
    return SQLiteSession(session_id, path, **options)


register_scheme("memory", _open_memory)
register_scheme("sqlite", _open_sqlite)
for _scheme in ("redis", "rediss"):
    register_scheme(_scheme, "agent_sessions.backends.redis:open_url", extra="redis")
_SQLALCHEMY = "agent_sessions.backends.sqlalchemy:open_url"
register_scheme("postgresql+asyncpg", _SQLALCHEMY, extra="postgres")
for _scheme in ("mysql+asyncmy", "mysql+aiomysql", "mariadb+asyncmy", "mariadb+aiomysql"):
    register_scheme(_scheme, _SQLALCHEMY, extra="mysql")
register_scheme("sqlite+aiosqlite", _SQLALCHEMY, extra="sqlalchemy")
for _scheme in ("mongodb", "mongodb+srv"):
    register_scheme(_scheme, "agent_sessions.backends.mongodb:open_url", extra="mongodb")
# The Agents SDK's own layouts, opened in place by the SDK's classes (agent_sessions.sdk_layouts).
_SDK = "agent_sessions.sdk_layouts:open_"
for _scheme in ("sdk+redis", "sdk+rediss"):
    register_scheme(_scheme, _SDK + "redis", extra="redis")
for _scheme, _extra in (
    ("sdk+postgresql+asyncpg", "postgres"),
    ("sdk+mysql+asyncmy", "mysql"),
    ("sdk+mysql+aiomysql", "mysql"),
    ("sdk+mariadb+asyncmy", "mysql"),
    ("sdk+mariadb+aiomysql", "mysql"),
    ("sdk+sqlite+aiosqlite", "sqlalchemy"),
):
    register_scheme(_scheme, _SDK + "sqlalchemy", extra=_extra)
for _scheme in ("sdk+mongodb", "sdk+mongodb+srv"):
    register_scheme(_scheme, _SDK + "mongodb", extra="mongodb")
