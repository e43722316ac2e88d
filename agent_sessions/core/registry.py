"""``open_session(url, session_id)``: one entry point for every backend, by URL scheme."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable
from urllib.parse import urlsplit

from agents.memory.session import Session

if TYPE_CHECKING:
    pass

from ..errors import MissingDependencyError, UnknownSchemeError
from .extras import install_hint

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
        raise MissingDependencyError(
            f"the {scheme}:// backend needs the package {exc.name or str(exc)!r}, which is not "
            f"installed; install it with: {install_hint(entry.extra)}",
            name=exc.name,
        ) from exc
    opener: Opener = getattr(module, attr)
    return opener


@runtime_checkable
class ClosableSession(Session, Protocol):
    """A Session that releases its connections with ``await s.close()`` or ``async with``.

    What :func:`open_session` returns: every backend of this package is one.
    """

    async def close(self) -> None:
        """Release the session's resources; idempotent."""
        ...

    async def __aenter__(self) -> ClosableSession: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


def _closable(session: Session) -> ClosableSession:
    """Give a Session from a third-party opener that has no ``close`` the closable shape."""
    from ..wrappers.base import SessionWrapper  # wrappers build on core

    class Closable(SessionWrapper):
        passes = frozenset()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    return cast(ClosableSession, Closable(session))


async def open_session(url: str, session_id: str, **options: Any) -> ClosableSession:
    """Open ``session_id`` in the store named by ``url``.

    Examples: ``memory://``, ``sqlite:///relative.db``, ``sqlite:////abs/path.db``,
    ``sqlite:///:memory:``, ``redis://localhost:6379/0``, ``postgresql+asyncpg://...``
    (``postgres://``, ``postgresql://``, ``mysql://`` and ``mariadb://`` pick the installed
    async driver). ``options`` go to the backend's ``from_url`` (or constructor); an unknown
    option raises TypeError naming the valid ones.

    The result is closable: ``async with await open_session(...) as s:`` or
    ``await s.close()`` releases its connections.

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
    opener = _resolve(scheme, entry)
    try:
        result = opener(url, session_id, **options)
        if isinstance(result, Awaitable):
            result = await result
    except ImportError as exc:  # a driver imported on first use (e.g. by the SDK's classes)
        if isinstance(exc, MissingDependencyError) or entry.extra is None:
            raise
        what = f"the package {exc.name!r}" if exc.name else "a package"
        raise MissingDependencyError(
            f"the {scheme}:// backend needs {what} that is not installed ({exc}); install it "
            f"with: {install_hint(entry.extra)}",
            name=exc.name,
        ) from exc
    if isinstance(result, ClosableSession):
        return result
    return _closable(result)


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
_SQLALCHEMY = "agent_sessions.backends.sql:open_url"
register_scheme("postgresql+asyncpg", _SQLALCHEMY, extra="postgres")
for _scheme in ("mysql+asyncmy", "mysql+aiomysql", "mariadb+asyncmy", "mariadb+aiomysql"):
    register_scheme(_scheme, _SQLALCHEMY, extra="mysql")
register_scheme("sqlite+aiosqlite", _SQLALCHEMY, extra="sqlalchemy")

# Plain database URLs, as other tools write them: mapped to the async driver that is installed.
_ALIASES: dict[str, tuple[tuple[str, ...], str]] = {
    "postgres": (("postgresql+asyncpg",), "postgres"),
    "postgresql": (("postgresql+asyncpg",), "postgres"),
    "mysql": (("mysql+asyncmy", "mysql+aiomysql"), "mysql"),
    "mariadb": (("mariadb+asyncmy", "mariadb+aiomysql"), "mysql"),
}


def driver_url(url: str) -> str:
    """Return ``url`` with a plain ``postgres://``, ``postgresql://``, ``mysql://`` or
    ``mariadb://`` scheme replaced by the SQLAlchemy async scheme of the installed driver.

    Raises:
        MissingDependencyError: no supported async driver for that database is installed.
    """
    scheme, sep, rest = url.partition("://")
    alias = _ALIASES.get(scheme.lower())
    if not sep or alias is None:
        return url
    candidates, extra = alias
    for candidate in candidates:
        if importlib.util.find_spec(candidate.partition("+")[2]) is not None:
            return f"{candidate}://{rest}"
    drivers = " or ".join(c.partition("+")[2] for c in candidates)
    raise MissingDependencyError(
        f"{scheme}:// URLs need an async driver ({drivers}), none is installed; install it "
        f"with: {install_hint(extra)}",
        name=candidates[0].partition("+")[2],
    )


async def _open_sql_alias(url: str, session_id: str, **options: Any) -> Session:
    target = driver_url(url)
    scheme = target.partition("://")[0]
    opener = _resolve(scheme, _SCHEMES[scheme])
    result = opener(target, session_id, **options)
    return await result if isinstance(result, Awaitable) else result


for _scheme, (_candidates, _extra) in _ALIASES.items():
    register_scheme(_scheme, _open_sql_alias, extra=_extra)
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
