"""The catalog of one Redis key prefix (standalone or Cluster).

Sessions are found by ``SCAN MATCH P:{*}:meta`` (on every primary of a Cluster); SCAN has no
order, so a listing's first page costs O(keys) names, the pages continuing it reuse them
(``ScanListing``), and each page reads its metadata in one pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...core.catalog import (
    CatalogQuery,
    ScanListing,
    SessionInfo,
    family_root,
    group_families,
    is_side_store,
    utc,
)
from ...core.family import REGISTRY
from ...core.ids import SIBLING_MARK
from .layout import escape_session_id, session_keys, unescape_session_id

_META = "}:meta"
_REGISTRY = f"{SIBLING_MARK}{REGISTRY}{SIBLING_MARK}"


def glob_escape(text: str) -> str:
    """Escape Redis glob metacharacters (``* ? [ ] \\``) in ``text``."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisCatalog:
    """Lists and deletes the sessions stored under one key prefix."""

    def __init__(self, call: Callable[..., Awaitable[Any]], client: Any, prefix: str) -> None:
        self.call = call  # the session's: runs a command, its errors translated
        self.client = client
        self.prefix = prefix
        self._listing = ScanListing()

    async def exists(self) -> bool:
        await self.call(self.client.ping, reads=True)  # nothing to create: reaching it is enough
        return True

    async def _ids(self, tag_pattern: str) -> list[str]:
        """Return the session ids whose meta key matches ``P:{<tag_pattern>}:meta``."""
        pattern = f"{glob_escape(self.prefix)}:{{{tag_pattern}{_META}"
        start = len(self.prefix) + 2

        async def scan() -> list[str]:
            found: list[str] = []
            async for key in self.client.scan_iter(match=pattern, count=1000):
                text = key.decode() if isinstance(key, bytes) else key
                found.append(unescape_session_id(text[start : -len(_META)]))
            return found

        ids: list[str] = await self.call(scan, reads=True)
        return ids

    async def _infos(self, session_ids: list[str]) -> list[SessionInfo | None]:
        """Each session's info (None for one without metadata: it is not stored), read in
        one pipeline (one round trip per node)."""

        async def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for sid in session_ids:
                items, meta = session_keys(self.prefix, sid)
                pipe.exists(meta).hmget(meta, "created_ms", "updated_ms").zcard(items)
            return list(await pipe.execute())

        replies = await self.call(read, reads=True)
        out: list[SessionInfo | None] = []
        for i, sid in enumerate(session_ids):
            exists, times, count = replies[3 * i : 3 * i + 3]
            created, updated = (None if t is None else utc(int(t) / 1000) for t in times)
            out.append(SessionInfo(sid, created, updated, int(count)) if exists else None)
        return out

    lists_families = True
    """A listing of sessions holds every family root (see ``SessionCatalog``): one SCAN finds
    the sessions and the family registries under the prefix."""

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        if query.internal:
            tag = glob_escape(escape_session_id(query.prefix or "")) + "*"
            return await self._listing.page(query, tag, lambda: self._ids(tag), self._infos)
        prefix = glob_escape(escape_session_id(query.prefix or ""))
        tag = f"*{prefix}*" if prefix else "*"  # both the roots and the registries hold it

        async def roots() -> list[str]:
            found = set()
            for sid in await self._ids(tag):
                root = sid.removeprefix(_REGISTRY)
                if not is_side_store(root):  # a session, or a family's registry
                    found.add(root)
            return list(found)

        return await self._listing.page(query, "roots:" + tag, roots, self._root_infos)

    async def _root_infos(self, roots: list[str]) -> list[SessionInfo | None]:
        """Each root's info: its own, else its family registry's times and no items."""
        found = await self._infos([sid for root in roots for sid in (root, _REGISTRY + root)])
        out: list[SessionInfo | None] = []
        for root, own, registry in zip(roots, found[::2], found[1::2], strict=True):
            if own is None and registry is not None:
                own = SessionInfo(root, registry.created_at, registry.updated_at, 0)
            out.append(own)
        return out

    async def infos(self, session_ids: Sequence[str]) -> dict[str, SessionInfo]:
        found = await self._infos(list(session_ids))
        return {info.session_id: info for info in found if info is not None}

    async def family_ids(self, session_id: str) -> list[str]:
        tail = glob_escape(escape_session_id(SIBLING_MARK + session_id))
        ids = await self._ids(f"{SIBLING_MARK}*{tail}")
        return [sid for sid in ids if family_root(sid) == session_id]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        return group_families(await self._ids(f"{SIBLING_MARK}*"), session_ids)

    async def delete(self, session_ids: Sequence[str]) -> int:
        existed = 0
        for start in range(0, len(session_ids), 100):

            async def drop(ids: Sequence[str] = session_ids[start : start + 100]) -> list[Any]:
                # Both keys of a session share its hash tag: one DEL per session, cluster-safe.
                return await asyncio.gather(
                    *(self.client.delete(*session_keys(self.prefix, sid)) for sid in ids)
                )

            existed += sum(1 for n in await self.call(drop) if int(n) > 0)
        return existed
