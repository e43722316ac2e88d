"""``open_session(url, session_id)`` and ``open_store(url)``: every backend by URL scheme."""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable
from urllib.parse import urlsplit

from agents.memory.session import Session, SessionABC

from ..errors import MissingDependencyError, SessionClosedError, UnknownSchemeError
from .extras import install_hint, missing, require
from .family import close_quietly

Opener = Callable[..., Session | Awaitable[Session]]
"""``opener(url, session_id, **options)`` returns a session (or an awaitable of one)."""


@dataclass(frozen=True)
class _Entry:
    target: str | Opener  # "module:function" is imported on first use
    extra: str | None
    store: str | Callable[..., Any] | None = None  # open_store's opener, likewise


_SCHEMES: dict[str, _Entry] = {}


def register_scheme(
    scheme: str,
    opener: str | Opener,
    *,
    extra: str | None = None,
    store: str | Callable[..., Any] | None = None,
) -> None:
    """Make ``open_session`` (and, given ``store``, ``open_store``) handle ``scheme://`` URLs.

    ``opener(url, session_id, **options)`` and ``store(url, **options)`` (each may return an
    awaitable) are callables or lazily imported ``"package.module:function"`` strings;
    ``extra`` is the pip extra named when the driver is missing.
    """
    _SCHEMES[scheme.lower()] = _Entry(opener, extra, store)


def registered_schemes() -> list[str]:
    """Return the registered URL schemes, sorted."""
    return sorted(_SCHEMES)


@runtime_checkable
class ClosableSession(Session, Protocol):
    """What :func:`open_session` returns: a Session closed by ``await s.close()`` or
    ``async with`` (every backend of this package is one)."""

    async def close(self) -> None:
        """Release the session's resources; idempotent."""

    async def __aenter__(self) -> ClosableSession: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


class _Closable(SessionABC):
    """A third-party Session given the closable shape; ``close`` closes it if it can."""

    def __init__(self, inner: Session) -> None:
        self.inner = inner
        self.session_id = inner.session_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property  # type: ignore[override]
    def session_settings(self) -> Any:
        return self.inner.session_settings

    @session_settings.setter
    def session_settings(self, value: Any) -> None:
        self.inner.session_settings = value

    async def get_items(self, limit: int | None = None) -> Any:
        return await self.inner.get_items(limit)

    async def add_items(self, items: Any) -> None:
        await self.inner.add_items(items)

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()

    async def close(self) -> None:
        await close_quietly(self.inner)

    async def __aenter__(self) -> _Closable:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def open_session(url: str, session_id: str, **options: Any) -> ClosableSession:
    """Open ``session_id`` in the store named by ``url``.

    Examples: ``memory://``, ``sqlite:///relative.db``, ``sqlite:////abs/path.db``,
    ``sqlite:///:memory:``, ``redis://localhost:6379/0``, ``postgresql+asyncpg://...``
    (``postgres://``, ``postgresql://``, ``mysql://`` and ``mariadb://`` pick the installed
    async driver). ``options`` go to the backend (an unknown one raises TypeError). Close the
    result with ``async with`` or ``await s.close()``.

    Raises:
        UnknownSchemeError: no backend handles the URL's scheme.
        MissingDependencyError: the backend's optional driver is not installed.
    """
    scheme, entry = _lookup(url, "open_session")
    result = await _call(scheme, entry, entry.target, url, session_id, **options)
    return result if isinstance(result, ClosableSession) else _Closable(result)


def _lookup(url: str, caller: str) -> tuple[str, _Entry]:
    if not isinstance(url, str) or "://" not in url:
        raise UnknownSchemeError(
            f"{caller} needs a URL like 'sqlite:///file.db' or 'memory://', got {url!r}"
        )
    scheme = urlsplit(url).scheme.lower()
    entry = _SCHEMES.get(scheme)
    if entry is None:
        raise UnknownSchemeError(
            f"no backend handles the URL scheme {scheme!r}; known schemes: "
            f"{', '.join(registered_schemes())}"
        )
    return scheme, entry


async def _call(scheme: str, entry: _Entry, opener: Any, *args: Any, **options: Any) -> Any:
    """``opener(*args, **options)`` (a ``"module:function"`` imported first), awaited if need
    be; a missing driver is named with its pip extra."""
    if isinstance(opener, str):
        module, _, attr = opener.partition(":")
        opener = getattr(require(module, f"the {scheme}:// backend", entry.extra), attr)
    try:
        result = opener(*args, **options)
        return await result if isinstance(result, Awaitable) else result
    except ImportError as exc:  # a driver imported on first use (e.g. by the SDK's classes)
        if isinstance(exc, MissingDependencyError) or entry.extra is None:
            raise
        raise missing(f"the {scheme}:// backend", entry.extra, exc) from exc


@runtime_checkable
class Store(Protocol):
    """What :func:`open_store` returns: one backend's connection, setup and catalog, shared
    by cheap session handles."""

    def session(self, session_id: str, **options: Any) -> ClosableSession:
        """A session handle on this store (``options``: the backend's per-session ones)."""

    def catalog(self) -> Any:
        """The catalog of this store's sessions (see ``agent_sessions.ops.catalog``)."""

    async def close(self) -> None:
        """Give back this store (once, however often called); its connection closes when
        no other store object or open session holds it."""


class StoreHold:
    """One caller's hold on a store that several callers share (one file's worker, one URL's
    pool): ``close()`` gives back this hold once, so closing it again never takes a hold
    another caller or an open session still counts on. Anything else is the shared store's."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _open(self) -> Any:
        if self.closed:
            raise SessionClosedError("this store was closed; open it again with open_store")
        return self.store

    def session(self, session_id: str, **options: Any) -> Any:
        """A session handle on the store; it holds its own share until closed."""
        return self._open().session(session_id, **options)

    def catalog(self, *args: Any, **kwargs: Any) -> Any:
        """The store's catalog (see ``agent_sessions.ops.catalog``)."""
        return self._open().catalog(*args, **kwargs)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.store.release()


async def open_store(url: str, **options: Any) -> Store:
    """Open the store named by ``url`` (as for :func:`open_session`) with the backend's store
    options; stores of one URL and options may be shared until ``await store.close()``.

    Raises:
        UnknownSchemeError: no backend handles the URL's scheme, or it has no store.
        MissingDependencyError: the backend's optional driver is not installed.
    """
    url = driver_url(url) if isinstance(url, str) else url
    scheme, entry = _lookup(url, "open_store")
    if entry.store is None:
        raise UnknownSchemeError(f"the {scheme}:// backend has no store; use open_session")
    return cast(Store, await _call(scheme, entry, entry.store, url, **options))


# The backends, and the Agents SDK's own layouts opened in place (``sdk+`` + the same scheme,
# by the SDK's classes: ops/sdk_layouts.py).
for _module, _extra, _sdk, _schemes in (
    ("memory", None, None, "memory"),
    ("sqlite", None, None, "sqlite"),
    ("redis", "redis", "redis", "redis rediss"),
    ("sql", "postgres", "sqlalchemy", "postgresql+asyncpg"),
    ("sql", "mysql", "sqlalchemy", "mysql+asyncmy mysql+aiomysql mariadb+asyncmy mariadb+aiomysql"),
    ("sql", "sqlalchemy", "sqlalchemy", "sqlite+aiosqlite"),
    ("mongodb", "mongodb", "mongodb", "mongodb mongodb+srv"),
):
    for _scheme in _schemes.split():
        _backend = f"agent_sessions.backends.{_module}"
        register_scheme(
            _scheme, f"{_backend}:open_url", extra=_extra, store=f"{_backend}:open_store"
        )
        if _sdk is not None:
            register_scheme(
                f"sdk+{_scheme}", f"agent_sessions.ops.sdk_layouts:open_{_sdk}", extra=_extra
            )

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
    return await open_session(driver_url(url), session_id, **options)


for _scheme, (_candidates, _extra) in _ALIASES.items():
    register_scheme(_scheme, _open_sql_alias, extra=_extra)
