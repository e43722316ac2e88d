"""Moving conversations between stores: copy, export and import (JSON lines), resumable.

A copy writes a session's stored items unchanged (encrypted or TTL envelopes stay envelopes,
still bound to the same session id), together with its side stores (branch logs, usage,
compaction records), so the layers find their data at the destination. Each session is copied
in batches; a copy stopped halfway resumes where it stopped, and finishes by checking that the
destination holds as many items as the source::

    result = await copy_store("sqlite:///app.db", "postgresql+asyncpg://u:pw@db/app")

Sessions are read whole into memory one at a time (a conversation, not a store).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from .catalog import SessionCatalog, SupportsCatalog, is_side_store
from .core.family import close_quietly
from .core.ids import validate_session_id
from .errors import BackendDataError, SessionError, StoreNotFoundError

DEFAULT_BATCH = 500
EXPORT_FORMAT = "agent-sessions-export/1"
"""``format`` of the first line of an export file."""

Progress = Callable[[str, int], None]
"""``progress(session_id, items_written_so_far)``, called after each batch."""


class TransferConflictError(SessionError, ValueError):
    """The destination already holds other items for a session; nothing was written to it."""


@dataclass
class TransferReport:
    """What a copy or import did: sessions written, skipped as already complete, items."""

    sessions: int = 0
    side_stores: int = 0
    skipped: int = 0
    items: int = 0
    ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values."""
        return {
            "sessions": self.sessions,
            "side_stores": self.side_stores,
            "skipped": self.skipped,
            "items": self.items,
        }


def _is_sqlalchemy(url: str) -> bool:
    scheme = url.split("://", 1)[0].lower().removeprefix("sdk+")
    base, _, driver = scheme.partition("+")
    return base in ("postgres", "postgresql", "mysql", "mariadb") or (
        base == "sqlite" and bool(driver)
    )


class Store:
    """One store opened by URL: a catalog plus sessions by id (side-store ids included),
    sharing one connection. ``read_only`` opens it so that nothing is created: it must exist."""

    def __init__(self, url: str, base: Any, catalog: SessionCatalog | None) -> None:
        self.url = url
        self.base = base
        self.catalog = catalog

    @classmethod
    async def open(
        cls, url: str, options: dict[str, Any] | None = None, *, read_only: bool = False
    ) -> Store:
        """Open the store at ``url`` (``options`` as for ``open_session``).

        Raises:
            StoreNotFoundError: ``read_only`` and the store (file, tables) does not exist.
        """
        from .core.registry import open_session

        opts = dict(options or {})
        if read_only and _is_sqlalchemy(url):
            opts.setdefault("create_tables", False)
        base = await open_session(url, "agent-sessions-cli", **opts)
        catalog = SessionCatalog(base) if isinstance(base, SupportsCatalog) else None
        store = cls(url, base, catalog)
        if read_only and catalog is not None:
            try:
                found = await catalog.exists()
            except BaseException:
                await store.close()
                raise
            if not found:
                await store.close()
                raise StoreNotFoundError(
                    f"no session store at {_redacted(url)} (no such database file, tables or "
                    "collections; check the URL and options such as table_prefix); nothing "
                    "was created"
                )
        return store

    def session(self, session_id: str) -> Any:
        """Return a session of this store for ``session_id`` (close it after use)."""
        sibling = getattr(self.base, "sibling", None)
        if sibling is None:
            raise TypeError(f"{type(self.base).__name__} cannot open other sessions")
        return sibling(session_id)

    def require_catalog(self) -> SessionCatalog:
        if self.catalog is None:
            raise TypeError(
                f"the store at {_redacted(self.url)} cannot list its sessions; name the "
                "session ids explicitly"
            )
        return self.catalog

    async def close(self) -> None:
        close = getattr(self.base, "close", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _redacted(url: str) -> str:
    """``url`` without its password."""
    head, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{head}://{creds.split(':', 1)[0]}:***@{host}"


async def _count(session: Any) -> int:
    counter = getattr(session, "count_items", None)
    if counter is not None:
        return int(await counter())
    return len(await session.get_items())


async def write_session(
    dst: Any,
    items: list[Any],
    *,
    replace: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> int:
    """Make ``dst`` hold exactly ``items``; return how many were written (0: already did).

    An empty destination gets every item; one holding the first ``k`` of them (a copy that
    stopped) gets the rest. Any other content is a conflict: it is cleared first when
    ``replace``, else :class:`TransferConflictError` is raised and nothing is written.

    Raises:
        BackendDataError: the destination's item count differs from ``len(items)`` afterwards.
    """
    have = await _count(dst)
    sid = dst.session_id
    if have:
        existing = await dst.get_items(have) if have <= len(items) else None
        if existing is None or existing != items[: len(existing)] or len(existing) != have:
            if not replace:
                raise TransferConflictError(
                    f"the destination already holds {have} item(s) for session {sid!r} that "
                    "are not the source's; nothing was written to it. Pass replace=True "
                    "(--replace) to overwrite it"
                )
            await dst.clear_session()
            have = 0
    written = 0
    for start in range(have, len(items), batch):
        chunk = items[start : start + batch]
        await dst.add_items(chunk)
        written += len(chunk)
        if progress is not None:
            progress(sid, have + written)
    final = await _count(dst)
    if final != len(items):
        raise BackendDataError(
            f"session {sid!r}: the destination holds {final} item(s) after the copy, the "
            f"source {len(items)}; another writer may be using it. Run the copy again"
        )
    return written


async def _ids(store: Store, ids: Iterable[str] | None, prefix: str | None) -> list[str]:
    if ids is not None:
        return [validate_session_id(sid) for sid in ids]
    catalog = store.require_catalog()
    return [info.session_id async for info in catalog.iter_sessions(prefix=prefix)]


async def _todo(
    store: Store, ids: Iterable[str] | None, prefix: str | None, side_stores: bool
) -> list[str]:
    """The ids to transfer: the chosen sessions, each followed by its side stores when asked
    and the store lists them."""
    roots = await _ids(store, ids, prefix)
    if not side_stores or store.catalog is None:
        return roots
    out: list[str] = []
    for sid in roots:
        out.append(sid)
        out.extend(await store.catalog.family(sid))
    return out


async def _read(store: Store, sid: str) -> list[Any]:
    source = store.session(sid)
    try:
        return list(await source.get_items())
    finally:
        await close_quietly(source)


async def _write(
    store: Store,
    sid: str,
    items: list[Any],
    report: TransferReport,
    on_session: Callable[[str, int], None] | None,
    **options: Any,
) -> None:
    """``write_session`` into ``store``'s ``sid``, counted in ``report``."""
    target = store.session(sid)
    try:
        written = await write_session(target, items, **options)
    finally:
        await close_quietly(target)
    _tally(report, sid, written, len(items), on_session)


async def copy_store(
    src_url: str,
    dst_url: str,
    *,
    session_ids: Iterable[str] | None = None,
    prefix: str | None = None,
    src_options: dict[str, Any] | None = None,
    dst_options: dict[str, Any] | None = None,
    replace: bool = False,
    side_stores: bool = True,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    on_session: Callable[[str, int], None] | None = None,
    plan: Callable[[list[str]], None] | None = None,
) -> TransferReport:
    """Copy sessions (all, those starting with ``prefix``, or ``session_ids``) with their side
    stores from the store at ``src_url`` to the one at ``dst_url``; see :func:`write_session`
    for resuming and conflicts. ``plan(ids)`` is told the ids first, ``on_session(id, n)``
    after each session."""
    report = TransferReport()
    writing = {"replace": replace, "batch": batch, "progress": progress}
    async with await Store.open(src_url, src_options, read_only=True) as src:
        async with await Store.open(dst_url, dst_options) as dst:
            todo = await _todo(src, session_ids, prefix, side_stores)
            if plan is not None:
                plan(todo)
            for sid in todo:
                items = await _read(src, sid)
                await _write(dst, sid, items, report, on_session, **writing)
    return report


def _tally(
    report: TransferReport,
    sid: str,
    written: int,
    total: int,
    on_session: Callable[[str, int], None] | None,
) -> None:
    if is_side_store(sid):
        report.side_stores += 1
    else:
        report.sessions += 1
        report.ids.append(sid)
    if total and not written:
        report.skipped += 1
    report.items += written
    if on_session is not None:
        on_session(sid, total)


async def export_store(
    url: str,
    out: IO[str],
    *,
    session_ids: Iterable[str] | None = None,
    prefix: str | None = None,
    options: dict[str, Any] | None = None,
    side_stores: bool = True,
    on_session: Callable[[str, int], None] | None = None,
) -> TransferReport:
    """Write sessions as JSON lines to ``out``: a header line
    ``{"format": "agent-sessions-export/1"}``, then one line per item,
    ``{"session_id": ..., "item": {...}}``, sessions one after another, items oldest first.
    Reads only; the store must exist."""
    report = TransferReport()
    async with await Store.open(url, options, read_only=True) as src:
        todo = await _todo(src, session_ids, prefix, side_stores)
        out.write(json.dumps({"format": EXPORT_FORMAT}) + "\n")
        for sid in todo:
            items = await _read(src, sid)
            for item in items:
                out.write(json.dumps({"session_id": sid, "item": item}, ensure_ascii=False))
                out.write("\n")
            _tally(report, sid, len(items), len(items), on_session)
    return report


def read_export(lines: Iterable[str]) -> Iterator[tuple[str, list[Any]]]:
    """Yield ``(session_id, items)`` from an export's lines, one session at a time.

    Raises:
        ValueError: the text is not an export (line number and reason in the message).
    """
    current: str | None = None
    items: list[Any] = []
    done: set[str] = set()
    header = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {number} is not JSON: {exc}") from None
        if not header:
            if not isinstance(record, dict) or record.get("format") != EXPORT_FORMAT:
                raise ValueError(
                    f"line {number}: not an agent-sessions export (expected a first line "
                    f'{{"format": "{EXPORT_FORMAT}"}}, as `agent-sessions export` writes)'
                )
            header = True
            continue
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("session_id"), str)
            or not isinstance(record.get("item"), dict)
        ):
            raise ValueError(
                f'line {number}: expected {{"session_id": "...", "item": {{...}}}}, got '
                f"{line.strip()[:80]!r}"
            )
        sid = record["session_id"]
        if sid != current:
            if current is not None:
                yield current, items
                done.add(current)
            if sid in done:
                raise ValueError(
                    f"line {number}: session {sid!r} appears again after other sessions; "
                    "an export lists each session's items together"
                )
            current, items = sid, []
        items.append(record["item"])
    if not header:
        raise ValueError("the input is empty: not an agent-sessions export")
    if current is not None:
        yield current, items


async def import_store(
    url: str,
    lines: Iterable[str],
    *,
    options: dict[str, Any] | None = None,
    replace: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    on_session: Callable[[str, int], None] | None = None,
) -> TransferReport:
    """Write the sessions of an export (see :func:`export_store`) into the store at ``url``;
    importing the same file again writes nothing (resumable like a copy)."""
    report = TransferReport()
    writing = {"replace": replace, "batch": batch, "progress": progress}
    async with await Store.open(url, options) as dst:
        for sid, items in read_export(lines):
            validate_session_id(sid, internal=True)
            await _write(dst, sid, items, report, on_session, **writing)
    return report


__all__ = [
    "EXPORT_FORMAT",
    "Store",
    "TransferConflictError",
    "TransferReport",
    "copy_store",
    "export_store",
    "import_store",
    "read_export",
    "write_session",
]
