"""Copy, export and import (JSON lines) sessions between stores, resumable: items unchanged
with their side stores, numbers and times (a destination without SEQUENCED_WRITE numbers anew
and refuses side stores unless ``renumber=True``); each session is checked by its count::

    result = await copy_store("sqlite:///app.db", "postgresql+asyncpg://u:pw@db/app")
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from itertools import groupby, pairwise
from typing import IO, Any

from ..core.capabilities import Capability, supports
from ..core.catalog import SupportsCatalog, family_root, is_side_store, utc
from ..core.codec import DEFAULT_MAX_ITEM_BYTES, encode_batch
from ..core.family import close_quietly
from ..core.ids import validate_session_id
from ..errors import (
    BackendDataError,
    InvalidItemError,
    SequenceConflictError,
    SessionError,
    StoreNotFoundError,
)
from .catalog import SessionCatalog

DEFAULT_BATCH = 500
EXPORT_FORMAT = "agent-sessions-export/2"
"""``format`` of the first line of an export file this version writes."""
_READABLE_FORMATS = ("agent-sessions-export/1", EXPORT_FORMAT)

Progress = Callable[[str, int], None]
"""``progress(session_id, items_written_so_far)``, called after each batch."""
OnSession = Callable[[str, int], None]
"""``on_session(session_id, items)``, called after each session."""


class TransferConflictError(SessionError, ValueError):
    """The destination already holds other items for a session; nothing was written to it."""


class RenumberingError(SessionError, ValueError):
    """The destination cannot keep sequence numbers and the sessions have side stores that
    point at items by number; nothing was written."""


@dataclass
class SessionData:
    """One session read from a store or an export (``seqs`` and times None when unknown)."""

    session_id: str
    items: list[Any]
    seqs: list[int] | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass
class TransferReport:
    """What a copy or import did: sessions written, skipped as already complete, items."""

    sessions: int = 0
    side_stores: int = 0
    skipped: int = 0
    """Sessions and side stores skipped as already complete (counted in the two above)."""
    skipped_sessions: int = 0
    """The user sessions among ``skipped``."""
    items: int = 0
    ids: list[str] = field(default_factory=list)
    renumbered: int = 0
    """Sessions the destination numbered anew (it cannot write at given numbers)."""
    side_stores_left: int = 0
    """Side stores not copied because the destination renumbers (``renumber=True``)."""

    def as_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values (without ``ids``)."""
        return {k: v for k, v in asdict(self).items() if k != "ids"}


def _is_sqlalchemy(url: str) -> bool:
    base, _, driver = url.split("://", 1)[0].lower().removeprefix("sdk+").partition("+")
    return base in ("postgres", "postgresql", "mysql", "mariadb") or (
        base == "sqlite" and bool(driver)
    )


class Store(AbstractAsyncContextManager["Store"]):
    """One store opened by URL: a catalog plus sessions by id, sharing one connection."""

    def __init__(self, url: str, base: Any, catalog: SessionCatalog | None) -> None:
        self.url, self.base, self.catalog = url, base, catalog

    @classmethod
    async def open(
        cls, url: str, options: dict[str, Any] | None = None, *, read_only: bool = False
    ) -> Store:
        """Open the store at ``url``; ``read_only`` creates nothing (StoreNotFoundError)."""
        from ..core.registry import open_session

        opts = dict(options or {})
        if read_only and _is_sqlalchemy(url):
            opts.setdefault("create_tables", False)
        base = await open_session(url, "agent-sessions-cli", **opts)
        store = cls(url, base, SessionCatalog(base) if isinstance(base, SupportsCatalog) else None)
        try:
            if read_only and store.catalog is not None and not await store.catalog.exists():
                raise StoreNotFoundError(f"{_absent(url)}; nothing was created")
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def keeps_numbers(self) -> bool:
        """Whether sessions of this store can be written at given sequence numbers."""
        return supports(self.base, Capability.SEQUENCED_WRITE)

    def session(self, session_id: str) -> Any:
        """Return a session of this store for ``session_id`` (close it after use)."""
        sibling = getattr(self.base, "sibling", None)
        if sibling is None:
            raise TypeError(f"{type(self.base).__name__} cannot open other sessions")
        return sibling(session_id)

    @asynccontextmanager
    async def opened(self, session_id: str) -> AsyncIterator[Any]:
        """:meth:`session` for the ``async with`` block, closed after it."""
        session = self.session(session_id)
        try:
            yield session
        finally:
            await close_quietly(session)

    def require_catalog(self) -> SessionCatalog:
        if self.catalog is None:
            raise TypeError(
                f"the store at {redacted(self.url)} cannot list its sessions; name the "
                "session ids explicitly"
            )
        return self.catalog

    async def close(self) -> None:
        await close_quietly(self.base)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _absent(url: str) -> str:
    """Why there is no session store at ``url``: for a SQLite file, what the file is."""
    scheme, _, rest = url.partition("://")
    why = "no such tables, keys or collections; check the URL and options such as table_prefix"
    if scheme.lower().removeprefix("sdk+").split("+")[0] == "sqlite":
        path = rest.removeprefix("/").split("?")[0]
        try:
            with open(path, "rb") as file:
                head = file.read(16)
        except OSError:
            why = f"no file {path} (sqlite:///relative/path or sqlite:////absolute/path)"
        else:
            sqlite = not head or head == b"SQLite format 3\x00"
            why = "it holds no session tables; check options such as table_prefix"
            why = why if sqlite else f"{path} is not a SQLite database file"
    return f"no session store at {redacted(url)} ({why})"


def redacted(url: str) -> str:
    """``url`` without its password."""
    head, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{head}://{creds.split(':', 1)[0]}:***@{host}"


async def _count(session: Any) -> int:
    counter = getattr(session, "count_items", None)
    return int(await counter()) if counter is not None else len(await session.get_items())


async def write_session(
    dst: Any,
    items: list[Any],
    *,
    replace: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    seqs: list[int] | None = None,
    created_at: datetime | None = None,
    updated_at: datetime | None = None,
) -> int:
    """Make ``dst`` hold exactly ``items``; return how many were written (0: already did).
    With ``seqs`` and SEQUENCED_WRITE, written whole at those numbers and times in one step,
    else appended in batches after the prefix already there; ``replace`` clears other content.

    Raises:
        TransferConflictError: ``dst`` holds other items (nothing written).
        InvalidItemError: an item cannot be stored (nothing written).
        BackendDataError: the item count differs afterwards.
    """
    sid, progress = dst.session_id, progress or (lambda sid, written: None)
    encode_batch(items, getattr(dst, "max_item_bytes", DEFAULT_MAX_ITEM_BYTES))
    have = await _count(dst)
    if seqs is not None and supports(dst, Capability.SEQUENCED_WRITE):
        wanted = list(zip(seqs, items, strict=True))
        existing = await dst.get_sequenced_items() if have else []
        if have and existing == wanted:
            return 0
        if existing != wanted[: len(existing)] and not replace:
            raise _conflict(sid, have)
        if have:
            await dst.clear_session()
        await dst.write_sequenced_items(wanted, created_at=created_at, updated_at=updated_at)
        progress(sid, len(items))
        have = 0
    else:
        if have and (have > len(items) or await dst.get_items(have) != items[:have]):
            if not replace:
                raise _conflict(sid, have)
            await dst.clear_session()
            have = 0
        for start in range(have, len(items), batch):
            chunk = items[start : start + batch]
            await dst.add_items(chunk)
            progress(sid, start + len(chunk))
    final = await _count(dst)
    if final != len(items):
        raise BackendDataError(
            f"session {sid!r}: the destination holds {final} item(s) after the copy, the "
            f"source {len(items)}; another writer may be using it. Run the copy again"
        )
    return len(items) - have


def _conflict(sid: str, have: int) -> TransferConflictError:
    return TransferConflictError(
        f"the destination already holds {have} item(s) for session {sid!r} that are not the "
        "source's; nothing was written to it. Pass replace=True (--replace) to overwrite it"
    )


async def _todo(
    store: Store, ids: Iterable[str] | None, prefix: str | None, side_stores: bool
) -> list[str]:
    """The chosen sessions, each followed by its side stores when asked (and listable)."""
    if ids is not None:
        roots = [validate_session_id(sid) for sid in ids]
    else:
        listed = store.require_catalog().iter_sessions(prefix=prefix)
        roots = [info.session_id async for info in listed]
    if not side_stores or store.catalog is None:
        return roots
    families = await store.catalog.families(roots)
    return [m for sid in roots for m in [sid, *families[sid]]]


async def _read(store: Store, sid: str) -> SessionData:
    async with store.opened(sid) as source:
        info = await store.catalog.get(sid) if store.catalog is not None else None
        times = (info.created_at, info.updated_at) if info is not None else (None, None)
        if supports(source, Capability.SEQUENCED):
            pairs = await source.get_sequenced_items()
            return SessionData(sid, [i for _, i in pairs], [n for n, _ in pairs], *times)
        return SessionData(sid, list(await source.get_items()), None, *times)


async def _write(
    store: Store,
    data: SessionData,
    report: TransferReport,
    on_session: OnSession | None,
    *,
    needs_numbers: bool,
    **options: Any,
) -> int:
    """``write_session`` of ``data``, counted; appended when its numbers are taken elsewhere
    and no side store points into it."""
    sid, seqs = data.session_id, data.seqs
    options.update(created_at=data.created_at, updated_at=data.updated_at)
    try:
        async with store.opened(sid) as target:
            try:
                written = await write_session(target, data.items, seqs=seqs, **options)
            except SequenceConflictError:
                if needs_numbers or seqs is None or await _count(target):
                    raise
                seqs = None  # numbers taken by other sessions (one SQLite layout)
                written = await write_session(target, data.items, **options)
    except InvalidItemError as exc:
        raise InvalidItemError(
            f"stopped at session {sid!r}, item {exc.index}: {exc}. Nothing of that session "
            f"was written; {_before(report)}",
            index=exc.index,
        ) from exc
    if data.seqs is not None and (seqs is None or not store.keeps_numbers):
        report.renumbered += 1
    _tally(report, sid, written, len(data.items), on_session)
    return written


def _before(report: TransferReport) -> str:
    written = report.sessions + report.side_stores
    if not written:
        return "no session before it was written"
    ids = ", ".join(repr(sid) for sid in report.ids[-3:])
    return (
        f"the {written} session(s) before it were written ({report.sessions} user "
        f"session(s), the last {ids}); fix the item and run again to write the rest"
    )


async def _write_family(
    store: Store,
    family: list[SessionData],
    report: TransferReport,
    on_session: OnSession | None,
    renumber: bool,
    **options: Any,
) -> None:
    """Write a family; when a member's numbers are refused, clear what it wrote."""
    kept = set(_writable(store, [d.session_id for d in family], renumber, report))
    family = [d for d in family if d.session_id in kept]
    fresh: list[str] = []
    try:
        for data in family:
            if await _write(
                store, data, report, on_session, needs_numbers=len(family) > 1, **options
            ):
                fresh.append(data.session_id)
    except SequenceConflictError:
        for sid in fresh:
            async with store.opened(sid) as written:
                await written.clear_session()
        raise


def _writable(dst: Store, ids: list[str], renumber: bool, report: TransferReport) -> list[str]:
    """``ids`` without side stores (counted as left) when ``dst`` renumbers and ``renumber``.

    Raises:
        RenumberingError: ``dst`` renumbers, side stores exist and not ``renumber``.
    """
    side_ids = [sid for sid in ids if is_side_store(sid)]
    if dst.keeps_numbers or not side_ids:
        return ids
    if renumber:
        report.side_stores_left += len(side_ids)
        return [sid for sid in ids if not is_side_store(sid)]
    roots = sorted({family_root(sid) for sid in side_ids})
    raise RenumberingError(
        f"the destination {redacted(dst.url)} numbers items anew (it cannot write at given "
        f"sequence numbers, e.g. an SDK layout), and {len(roots)} session(s) have side stores "
        f"({len(side_ids)}: branches, usage, compaction, TTL records) that point at items by "
        f"number, starting with {roots[0]!r}. Nothing was written. Copy into a store of this "
        "package, or pass renumber=True (--renumber) to copy the sessions without their side "
        "stores"
    )


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
    on_session: OnSession | None = None,
    plan: Callable[[list[str]], None] | None = None,
    renumber: bool = False,
) -> TransferReport:
    """Copy sessions (all, by ``prefix``, or ``session_ids``) with their side stores, numbers
    and times (:func:`write_session`); ``plan(ids)`` gets the ids first.

    Raises:
        RenumberingError: ``dst`` renumbers and side stores exist, without ``renumber``
            (nothing written).
    """
    report = TransferReport()
    writing = {"replace": replace, "batch": batch, "progress": progress}
    async with await Store.open(src_url, src_options, read_only=True) as src:
        async with await Store.open(dst_url, dst_options) as dst:
            todo = await _todo(src, session_ids, prefix, side_stores)
            todo = _writable(dst, todo, renumber, report)
            if plan is not None:
                plan(todo)
            for _, family in groupby(todo, family_root):
                members = [await _read(src, sid) for sid in family]
                await _write_family(dst, members, report, on_session, renumber, **writing)
    return report


def _tally(
    report: TransferReport, sid: str, written: int, total: int, on_session: OnSession | None
) -> None:
    if is_side_store(sid):
        report.side_stores += 1
    else:
        report.sessions += 1
        report.ids.append(sid)
    complete = bool(total and not written)
    report.skipped += complete
    report.skipped_sessions += complete and not is_side_store(sid)
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
    on_session: OnSession | None = None,
) -> TransferReport:
    """Write sessions as JSON lines to ``out`` (reads only): ``{"format": EXPORT_FORMAT}``,
    then per session ``{"session_id", "created_at", "updated_at"}`` (ISO or null) and one line
    per item, oldest first: ``{"session_id", "item", "seq"}``."""
    report = TransferReport()
    async with await Store.open(url, options, read_only=True) as src:
        todo = await _todo(src, session_ids, prefix, side_stores)
        out.write(json.dumps({"format": EXPORT_FORMAT}) + "\n")
        for sid in todo:
            data = await _read(src, sid)
            records: list[dict[str, Any]] = [{"session_id": sid, "item": i} for i in data.items]
            for record, seq in zip(records, data.seqs or (), strict=False):
                record["seq"] = seq
            if data.items:
                created, updated = (w and w.isoformat() for w in (data.created_at, data.updated_at))
                records.insert(0, {"session_id": sid, "created_at": created, "updated_at": updated})
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            _tally(report, sid, len(data.items), len(data.items), on_session)
    return report


def _time(value: Any, number: int, name: str) -> datetime | None:
    when = utc(value) if isinstance(value, str) else None
    if value is not None and when is None:
        raise ValueError(f"line {number}: {name} is {value!r}, not an ISO 8601 time")
    return when


def iter_export(lines: Iterable[str]) -> Iterator[SessionData]:
    """Yield the sessions of an export (format 1 has no numbers or times) one at a time;
    ValueError names the first line that is no export."""
    current: SessionData | None = None
    numbers: list[int | None] = []
    done: set[str] = set()
    version: str | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {number} is not JSON: {exc}") from None
        if version is None:
            if not isinstance(record, dict) or record.get("format") not in _READABLE_FORMATS:
                raise ValueError(
                    f"line {number}: not an agent-sessions export (expected a first line "
                    f'{{"format": "{EXPORT_FORMAT}"}}, as `agent-sessions export` writes)'
                )
            version = record["format"]
            continue
        valid = isinstance(record, dict) and isinstance(record.get("session_id"), str)
        head = valid and version != _READABLE_FORMATS[0] and "item" not in record
        seq = record.get("seq") if valid else None
        if not (
            valid
            and (head or isinstance(record.get("item"), dict))
            and (seq is None or (type(seq) is int and seq > 0))
        ):
            raise ValueError(
                f'line {number}: expected {{"session_id": "...", "seq": n, "item": {{...}}}}, '
                f"got {line.strip()[:80]!r}"
            )
        sid = record["session_id"]
        if current is None or sid != current.session_id or head:
            if current is not None:
                yield _numbered(current, numbers)
                done.add(current.session_id)
            if sid in done:
                raise ValueError(
                    f"line {number}: session {sid!r} appears again after other sessions; "
                    "an export lists each session's items together"
                )
            current, numbers = SessionData(sid, []), []
            if head:
                current.created_at = _time(record.get("created_at"), number, "created_at")
                current.updated_at = _time(record.get("updated_at"), number, "updated_at")
                continue
        current.items.append(record["item"])
        numbers.append(seq)
    if version is None:
        raise ValueError("the input is empty: not an agent-sessions export")
    if current is not None:
        yield _numbered(current, numbers)


def _numbered(data: SessionData, numbers: list[int | None]) -> SessionData:
    """``data`` with its items' ``seqs`` (all increasing, or none)."""
    if all(n is None for n in numbers):
        return data
    seqs = [n for n in numbers if n is not None]
    if len(seqs) != len(numbers) or any(a >= b for a, b in pairwise(seqs)):
        raise ValueError(
            f'session {data.session_id!r}: its items\' numbers ("seq") are missing on some '
            "items or do not increase; an export numbers all of a session's items or none"
        )
    data.seqs = seqs
    return data


async def import_store(
    url: str,
    lines: Iterable[str],
    *,
    options: dict[str, Any] | None = None,
    replace: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    on_session: OnSession | None = None,
    renumber: bool = False,
) -> TransferReport:
    """Write an export's sessions into ``url`` at their numbers and times, resumable.

    Raises:
        InvalidItemError: names the session, item and sessions written before it.
        RenumberingError: as :func:`copy_store`.
    """
    report = TransferReport()
    writing = {"replace": replace, "batch": batch, "progress": progress}
    async with await Store.open(url, options) as dst:
        for _, group in groupby(iter_export(lines), lambda d: family_root(d.session_id)):
            family = list(group)
            for data in family:
                validate_session_id(data.session_id, internal=True)
            await _write_family(dst, family, report, on_session, renumber, **writing)
    return report


__all__ = [
    "EXPORT_FORMAT",
    "RenumberingError",
    "SessionData",
    "Store",
    "TransferConflictError",
    "TransferReport",
    "copy_store",
    "export_store",
    "import_store",
    "iter_export",
    "redacted",
    "write_session",
]
