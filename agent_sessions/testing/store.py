"""The store tier: a store opened once serves cheap session handles that share it.

Override ``open_store`` (return an open store: ``session(session_id, **options)``,
``catalog()``, ``await close()``, e.g. ``await agent_sessions.open_store(url)``) and, if the
backend needs them, ``session_options``.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest

from ..core.catalog import CatalogQuery
from ..core.family import close_quietly
from .base import msg
from .helpers import texts


class StoreConformance:
    """One store, many handles: handles of one id see one history, handles share the store,
    and closing handles and store in any order leaves the data for the next store."""

    session_options: ClassVar[dict[str, Any]] = {}
    """Per-session options for ``store.session`` (a key prefix, table names, ...)."""
    catalog_options: ClassVar[dict[str, Any]] = {}
    """Options for ``store.catalog`` naming the same sessions (a key prefix, ...)."""

    async def open_store(self) -> Any:
        """Return a newly opened store of the backend under test."""
        raise NotImplementedError("subclass StoreConformance and implement open_store")

    def _sid(self) -> str:
        return f"store-{uuid.uuid4().hex[:12]}"

    @pytest.mark.asyncio
    async def test_two_handles_of_one_id_see_the_same_items(self) -> None:
        store = await self.open_store()
        sid = self._sid()
        a, b = (store.session(sid, **self.session_options) for _ in "ab")
        try:
            await a.add_items([msg("one"), msg("two")])
            assert texts(await b.get_items()) == ["one", "two"]
            assert texts([await b.pop_item()]) == ["two"]
            assert texts(await a.get_items()) == ["one"]
            await b.clear_session()
            assert await a.get_items() == []
        finally:
            for handle in (a, b):
                await close_quietly(handle)
            await store.close()

    @pytest.mark.asyncio
    async def test_a_handle_is_cheap_and_shares_the_store(self) -> None:
        store = await self.open_store()
        sid = self._sid()
        handles = [store.session(f"{sid}-{n}", **self.session_options) for n in range(200)]
        try:
            shared = getattr(store, "store", store)  # behind a per-caller hold, or the store
            assert all(getattr(h, "store", shared) is shared for h in handles)
            for h in handles[1:]:
                await close_quietly(h)  # closing handles never closes the store
            await handles[0].add_items([msg("still open")])
            assert texts(await handles[0].get_items()) == ["still open"]
            again = store.session(f"{sid}-0", **self.session_options)
            try:
                assert texts(await again.get_items()) == ["still open"]
            finally:
                await close_quietly(again)
        finally:
            await handles[0].clear_session()
            await close_quietly(handles[0])
            await store.close()

    @pytest.mark.asyncio
    async def test_closing_the_store_and_its_handles_keeps_the_data(self) -> None:
        store = await self.open_store()
        sid = self._sid()
        handle = store.session(sid, **self.session_options)
        await handle.add_items([msg("kept")])
        await store.close()
        assert texts(await handle.get_items()) == ["kept"], "a handle holds its own share"
        await close_quietly(handle)
        again = await self.open_store()
        reopened = again.session(sid, **self.session_options)
        try:
            assert texts(await reopened.get_items()) == ["kept"]
            await reopened.clear_session()
        finally:
            await close_quietly(reopened)
            await again.close()

    @pytest.mark.asyncio
    async def test_closing_a_store_again_takes_no_other_holder_s_share(self) -> None:
        first, second = await self.open_store(), await self.open_store()
        sid = self._sid()
        handle = second.session(sid, **self.session_options)
        try:
            for _ in range(3):  # by hand, then again by cleanup code
                await first.close()
            await handle.add_items([msg("still open")])
            assert texts(await handle.get_items()) == ["still open"]
            await handle.clear_session()
        finally:
            await close_quietly(handle)
            await second.close()
        again = await self.open_store()
        reopened = again.session(sid, **self.session_options)
        try:
            assert await reopened.get_items() == []
        finally:
            await close_quietly(reopened)
            await again.close()

    @pytest.mark.asyncio
    async def test_the_catalog_lists_a_handle_s_session(self) -> None:
        store = await self.open_store()
        sid = self._sid()
        handle = store.session(sid, **self.session_options)
        try:
            await handle.add_items([msg("listed")])
            catalog = store.catalog(**self.catalog_options)
            page = await catalog.list_page(CatalogQuery(limit=10, prefix=sid))
            assert [info.session_id for info in page] == [sid]
            await handle.clear_session()
        finally:
            await close_quietly(handle)
            await store.close()


__all__ = ["StoreConformance"]
