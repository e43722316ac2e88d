"""Protocol layer: ids, codec (both JSON paths), open_session, errors, import hygiene."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from agents.items import TResponseInputItem

import agent_sessions
from agent_sessions import InMemorySession, SQLiteSession, open_session
from agent_sessions.core import codec
from agent_sessions.core.ids import SIBLING_MARK, derive_sibling_id, validate_session_id
from agent_sessions.errors import (
    InvalidItemError,
    InvalidSessionIdError,
    ItemTooLargeError,
    MissingDependencyError,
    SessionError,
    UnknownSchemeError,
)


@pytest.mark.parametrize(
    "bad",
    ["", None, 42, b"bytes", "a\x00b", "x" * 257, SIBLING_MARK + "x", "\ud800"],
    ids=["empty", "none", "int", "bytes", "nul", "too-long", "reserved-prefix", "surrogate"],
)
@pytest.mark.parametrize("backend", [InMemorySession, SQLiteSession])
def test_bad_session_ids_are_refused_at_construction(backend: type, bad: Any) -> None:
    with pytest.raises(InvalidSessionIdError) as info:
        backend(bad)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert "session_id" in str(info.value)


def test_sibling_ids_never_equal_a_user_id_and_are_injective() -> None:
    a = derive_sibling_id("user", "branches")
    assert a.startswith(SIBLING_MARK)
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(str(a))  # typed in (or read from a request) it is refused
    assert validate_session_id(a) == a, "as derived, for a side-store factory, it is accepted"
    assert derive_sibling_id("a", "b") != derive_sibling_id(SIBLING_MARK + "b" + SIBLING_MARK, "a")
    assert derive_sibling_id(derive_sibling_id("u", "x"), "y") != derive_sibling_id("u", "y")
    with pytest.raises(ValueError):
        derive_sibling_id("u", "bad" + SIBLING_MARK)


@pytest.mark.parametrize("use_orjson", [True, False], ids=["orjson", "stdlib"])
def test_codec_rules_are_the_same_on_both_json_paths(
    monkeypatch: pytest.MonkeyPatch, use_orjson: bool
) -> None:
    if use_orjson and codec._orjson is None:
        pytest.skip("orjson not installed")
    if not use_orjson:
        monkeypatch.setattr(codec, "_orjson", None)
        monkeypatch.setattr(codec, "dumps", codec._std_dumps)
        monkeypatch.setattr(codec, "loads", json.loads)
    good = {"role": "user", "content": ["é🙂", 1, 2.5, None, True, {"k": []}], "t": (1, 2)}
    text = codec.encode_item(good, 0)
    assert codec.decode_item(text) == {**good, "t": [1, 2]}
    for bad, reason in [
        ({"x": math.nan}, "nan"),
        ({"x": -math.inf}, "inf"),
        ({1: "x"}, "non-string key"),
        ({None: "x"}, "non-string key"),
        ({"x": {1, 2}}, "set"),
        ({"x": b"b"}, "bytes"),
        ({"x": object()}, "object"),
        ({"x": "\udc00"}, "surrogate"),
    ]:
        with pytest.raises(InvalidItemError) as info:
            codec.encode_batch([good, bad])
        assert info.value.index == 1
        assert "item 1" in str(info.value) and "nothing of the batch was written" in str(
            info.value
        ), reason
    with pytest.raises(ItemTooLargeError, match="max_item_bytes"):
        codec.encode_item({"x": "é" * 60}, 3, max_item_bytes=100)  # 60 chars, 120 bytes
    assert codec.encode_item({"x": "é" * 40}, 0, max_item_bytes=100)
    with pytest.raises(InvalidItemError, match="list of items"):
        codec.encode_batch({"role": "user"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        codec.decode_item("[1, 2]")


@pytest.mark.asyncio
async def test_max_item_bytes_is_configurable_and_validated() -> None:
    s = InMemorySession("cap", max_item_bytes=50)
    with pytest.raises(ItemTooLargeError):
        await s.add_items([cast("TResponseInputItem", {"content": "x" * 60})])
    with pytest.raises(ValueError, match="max_item_bytes"):
        InMemorySession("cap", max_item_bytes=0)


def test_errors_subclass_the_builtins_the_sdk_raises() -> None:
    from agent_sessions import errors

    assert issubclass(errors.InvalidItemError, (ValueError, TypeError, SessionError))
    assert issubclass(errors.SessionClosedError, RuntimeError)
    assert issubclass(errors.BackendUnavailableError, ConnectionError)
    assert issubclass(errors.BranchNotFoundError, ValueError)
    assert issubclass(errors.MissingDependencyError, ImportError)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "url, expected_path",
    [
        ("sqlite:///relative.db", "relative.db"),
        ("sqlite:////ABS/x.db", "/ABS/x.db"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite://", None),
    ],
)
async def test_open_session_sqlite_urls(url: str, expected_path: str | None) -> None:
    if expected_path is None:
        with pytest.raises(UnknownSchemeError, match="three slashes"):
            await open_session(url, "s")
        return
    s = await open_session(url, "s")
    assert isinstance(s, SQLiteSession)
    assert s.path == expected_path
    await s.close()


@pytest.mark.asyncio
async def test_open_session_memory_and_real_file(tmp_path: Path) -> None:
    m = await open_session("memory://", "open-mem")
    assert isinstance(m, InMemorySession)
    f = await open_session(f"sqlite:///{tmp_path}/db.sqlite", "s", busy_timeout=1)
    assert isinstance(f, SQLiteSession) and f.path == f"{tmp_path}/db.sqlite"
    await f.add_items([{"role": "user", "content": "x"}])
    assert len(await f.get_items()) == 1
    await f.close()


@pytest.mark.asyncio
async def test_open_session_unknown_scheme_names_it() -> None:
    with pytest.raises(UnknownSchemeError, match="'ftp'"):
        await open_session("ftp://host/x", "s")
    with pytest.raises(UnknownSchemeError, match="URL like"):
        await open_session("not a url", "s")


@pytest.mark.asyncio
async def test_open_session_missing_extra_names_the_pip_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_sessions.core import registry

    registry.register_scheme("fakedb", "agent_sessions_no_such_driver:open", extra="fakedb")
    try:
        with pytest.raises(MissingDependencyError) as info:
            await open_session("fakedb://x", "s")
        assert 'pip install "agent-sessions-store[fakedb]"' in str(info.value)
        assert "fakedb://" in str(info.value)
    finally:
        registry._SCHEMES.pop("fakedb")


def test_importing_the_package_imports_no_optional_driver() -> None:
    optional = [
        "redis",
        "asyncpg",
        "asyncmy",
        "aiomysql",
        "sqlalchemy",
        "pymongo",
        "motor",
        "cryptography",
        "tiktoken",
    ]
    code = (
        "import sys, agents; before = set(sys.modules); import agent_sessions, "
        "agent_sessions.errors; new = set(sys.modules) - before; "
        f"print(sorted(m for m in new if m.split('.')[0] in {optional!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_names_resolve_or_fail_clearly() -> None:
    with pytest.raises(AttributeError, match="no attribute"):
        agent_sessions.NoSuchThing  # noqa: B018


@pytest.mark.asyncio
async def test_memory_compaction_snapshot_prunes_the_oldest_items_atomically() -> None:
    """The SDK's suffix swap on InMemorySession drops a prunable prefix in the same step,
    refuses when the suffix changed, and never reuses a number."""
    s = InMemorySession("prune", store=agent_sessions.InMemoryStore())
    summary: Any = {"type": "compaction", "encrypted_content": "s"}
    await s.add_items([{"role": "user", "content": str(i)} for i in range(5)])
    snapshot = await s._get_compaction_snapshot(2, prune_prefix=lambda i: i["content"] < "2")
    assert [i["content"] for i in snapshot.items] == ["3", "4"] and not snapshot.complete
    await s.add_items([{"role": "user", "content": "late"}])
    assert not await snapshot.replace_suffix(0, [summary])
    snapshot = await s._get_compaction_snapshot(3, prune_prefix=lambda i: i["content"] < "2")
    assert await snapshot.replace_suffix(1, [summary])
    assert [i.get("content") for i in await s.get_items()] == ["2", "3", None]
    assert await s.add_sequenced_items([{"role": "user", "content": "next"}]) == [8]


def _guarded_pair(kind: str, tmp_path: Path) -> tuple[Any, Any]:
    """Two objects of one fresh session on ``kind``."""
    if kind == "memory":
        s = InMemorySession("guarded")
        return s, InMemorySession("guarded", store=s.store)
    if kind == "sqlite":
        path = tmp_path / "g.db"
        return SQLiteSession("guarded", path), SQLiteSession("guarded", path)
    from agent_sessions.backends.redis import RedisSession
    from tests.servers import REDIS_URL, RUN, require_server

    require_server("Redis", "127.0.0.1", 6379)
    prefix = f"guard-{RUN}-{uuid.uuid4().hex[:10]}"
    return (
        RedisSession.from_url("guarded", url=REDIS_URL, key_prefix=prefix),
        RedisSession.from_url("guarded", url=REDIS_URL, key_prefix=prefix),
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
@pytest.mark.asyncio
async def test_append_if_newest_writes_only_while_the_guard_is_unchanged(
    kind: str, tmp_path: Path
) -> None:
    s, other = _guarded_pair(kind, tmp_path)
    assert await s.append_if_newest(s, None, [{"n": 0}]) == [1]  # empty: newest is None
    assert await s.append_if_newest(s, None, [{"n": 1}]) is None
    seqs = await s.append_if_newest(s, 1, [{"n": 1}, {"n": 2}])
    assert seqs == [2, 3]
    await other.add_items([{"n": 3}])  # another object moves the newest item
    assert await s.append_if_newest(s, 3, [{"n": 9}]) is None
    await other.pop_item()  # back to 3 items, but the number 4 is not reused
    assert await s.append_if_newest(s, 3, [{"n": 4}]) == [5]
    assert [i["n"] for i in await s.get_items()] == [0, 1, 2, 4]
    await s.clear_session()
    await s.close()
    await other.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.asyncio
async def test_pop_if_newest_pops_only_while_the_guard_is_unchanged(
    kind: str, tmp_path: Path
) -> None:
    s, other = _guarded_pair(kind, tmp_path)
    guard = s.side_store("log")

    async def pop(seq: int | None) -> tuple[bool, Any]:
        return await s.pop_if_newest(guard, seq)  # type: ignore[no-any-return]

    await s.add_items([{"n": 0}, {"n": 1}])
    assert await pop(None) == (True, {"n": 1})  # the guard is empty
    [seq] = await guard.add_sequenced_items([{"op": "x"}])
    assert await pop(None) == (False, None)  # it moved: nothing popped
    assert [i["n"] for i in await other.get_items()] == [0]
    assert await pop(seq) == (True, {"n": 0})
    assert await pop(seq) == (True, None)  # empty, guard unchanged
    await guard.clear_session()
    await s.clear_session()
    await s.close()
    await other.close()


@pytest.mark.asyncio
async def test_a_store_hold_gives_its_share_back_once_and_opens_nothing_after() -> None:
    from agent_sessions.core.registry import StoreHold
    from agent_sessions.errors import SessionClosedError

    class Shared:
        def __init__(self) -> None:
            self.users, self.path = 2, "/tmp/x.db"

        async def release(self) -> None:
            self.users -= 1

        def session(self, session_id: str) -> str:
            return session_id

    shared = Shared()
    hold = StoreHold(shared)
    assert (hold.session("a"), hold.path) == ("a", "/tmp/x.db")
    for _ in range(3):
        await hold.close()
    assert shared.users == 1, "the other holder keeps its share"
    with pytest.raises(SessionClosedError, match="open it again with open_store"):
        hold.session("b")
