"""EncryptedSession: the conformance kit over three inners, alone and over TTLSession, plus
tamper, replay, wrong/unknown key, strict mode, rotation and the raw-store check."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import uuid
from pathlib import Path
from typing import Any, cast
from unittest.mock import patch

import pytest
from agents.memory import Session
from agents.memory import SQLiteSession as SDKSQLiteSession
from cryptography.fernet import Fernet, InvalidToken

from agent_sessions import Capability, InMemorySession, InMemoryStore, SQLiteSession, supports
from agent_sessions.core.family import side_store
from agent_sessions.errors import DecryptionError, ItemTooLargeError
from agent_sessions.testing import SessionConformanceSuite
from agent_sessions.testing.helpers import item_text, texts
from agent_sessions.wrappers.encrypted import EncryptedSession, KeyMismatchError
from agent_sessions.wrappers.ttl import TTLSession
from tests.wrapper_stacks import FakeClock, YieldingSession

KEY = Fernet.generate_key().decode()
OLD_KEY = Fernet.generate_key().decode()
DAY = 86_400.0


def msg(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


async def raw_items(session: Any) -> list[Any]:
    """The stored envelopes of a wrapper's inner session, untyped."""
    return list(await session.get_items())


def sid() -> str:
    return f"enc-{uuid.uuid4().hex[:12]}"


def cap(session: EncryptedSession) -> int:
    return session.max_item_bytes


# -- conformance --------------------------------------------------------------------------------


class TestEncryptedOverSDKSQLiteConformance(SessionConformanceSuite):
    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sdk.db")

    async def create_session(self, session_id: str) -> Session:
        return EncryptedSession(
            SDKSQLiteSession(session_id, self.path),
            encryption_key="a long random passphrase, as the SDK accepts",
        )


class TestEncryptedTTLOverSDKSQLiteConformance(SessionConformanceSuite):
    @pytest.fixture(autouse=True)
    def _db_path(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "sdk.db")

    async def create_session(self, session_id: str) -> Session:
        inner = TTLSession(SDKSQLiteSession(session_id, self.path), DAY, sliding=False)
        return EncryptedSession(inner, encryption_key=KEY)


# -- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "encryption_key is required"),
        ({"encryption_key": ""}, "empty"),
        ({"encryption_key": b""}, "empty"),
        ({"encryption_key": 123}, "str or bytes"),
        ({"encryption_key": KEY, "keys": {"a": KEY}}, "not both"),
        ({"keys": {}}, "non-empty"),
        ({"keys": {"bad id": KEY}}, "key id"),
        ({"keys": {"a": KEY, "b": OLD_KEY}}, "active="),
        ({"keys": {"a": KEY}, "active": "b"}, "not in keys"),
        ({"keys": {"a": ""}}, "empty"),
        ({"encryption_key": KEY, "ttl": 0}, "ttl must be a positive"),
        ({"encryption_key": KEY, "ttl": -5}, "positive"),
        ({"encryption_key": KEY, "max_scan_items": 0}, "max_scan_items"),
        ({"encryption_key": KEY, "max_item_bytes": 0}, "max_item_bytes"),
        ({"encryption_key": KEY, "cache_bytes": -1}, "cache_bytes"),
        ({"encryption_key": KEY, "cache_bytes": 1.5}, "cache_bytes"),
    ],
)
def test_bad_configuration_is_refused_at_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EncryptedSession(InMemorySession(sid()), **kwargs)


def test_sdk_signature_and_key_forms_are_accepted() -> None:
    inner = InMemorySession(sid())
    s = EncryptedSession(session_id=inner.session_id, underlying_session=inner, encryption_key=KEY)
    assert s.underlying_session is inner and s.session_id == inner.session_id
    # Built the SDK's way, items expire after the SDK's default 600 s unless no_ttl=True.
    assert s.ttl == 600 and s.inner is inner and s.expires_items
    kept = EncryptedSession(underlying_session=inner, encryption_key=KEY, no_ttl=True)
    assert kept.ttl is None and not kept.expires_items
    assert EncryptedSession(inner, encryption_key=KEY).ttl is None  # our form: no expiry
    positional = EncryptedSession(inner.session_id, inner, KEY, 60, max_scan_items=100)
    assert positional.ttl == 60 and positional.inner is inner
    with pytest.raises(ValueError, match="differs"):
        EncryptedSession(inner, encryption_key=KEY, session_id="other")
    with pytest.raises(TypeError):
        EncryptedSession(encryption_key=KEY)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "key", [KEY, KEY.encode(), "correct horse battery staple, but much longer", b"\x01" * 32]
)
async def test_each_key_form_round_trips_across_objects(key: str | bytes) -> None:
    store = InMemoryStore()
    session_id = sid()
    first = EncryptedSession(InMemorySession(session_id, store=store), encryption_key=key)
    await first.add_items([msg("hello")])
    second = EncryptedSession(InMemorySession(session_id, store=store), encryption_key=key)
    assert texts(await second.get_items()) == ["hello"]


@pytest.mark.asyncio
async def test_ttl_hides_old_items_one_by_one_and_pop_drains_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000.0]
    monkeypatch.setattr("agent_sessions.wrappers.encrypted.session.time.time", lambda: now[0])
    inner = InMemorySession(sid())
    s = EncryptedSession(inner, encryption_key=KEY, ttl=10)
    await s.add_items([msg("old")])
    now[0] += 8
    await s.add_items([msg("young")])
    await inner.add_items([msg("plaintext")])  # a foreign newest item hides nothing
    now[0] += 5  # "old" is 13 s old, "young" 5 s
    assert texts(await s.get_items()) == ["young"]
    assert texts(await s.get_items(limit=1)) == ["young"]
    assert len(await inner.get_items()) == 3  # expired items stay stored, as the SDK's
    envelope: dict[str, Any] = dict(cast(dict[str, Any], (await inner.get_items())[1]))
    tampered = {**envelope, "t": envelope["t"] + 100}  # authenticated: cannot be moved
    copy = InMemorySession(inner.session_id, store=InMemoryStore())
    await copy.add_items([envelope, tampered])  # type: ignore[list-item]
    assert texts(await EncryptedSession(copy, encryption_key=KEY).get_items()) == ["young"]
    assert item_text(await s.pop_item()) == "young"
    assert await s.pop_item() is None  # the expired item is drained on the way
    assert await inner.get_items() == []


# -- what the store sees ------------------------------------------------------------------------

SECRET_ITEMS: list[Any] = [
    {"role": "user", "content": "my secret diagnosis is XYZZY"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "lookup_patient_record",
        "arguments": '{"id": 42}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "PLUGH"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "XYZZY confirmed"}]},
]
LEAKS = [
    "XYZZY",
    "PLUGH",
    "lookup_patient_record",
    "call_1",
    "function_call",
    "assistant",
    "user",
    "role",
    "content",
    "diagnosis",
]


@pytest.mark.asyncio
async def test_the_raw_store_holds_no_plaintext(tmp_path: Path) -> None:
    path = tmp_path / "raw.db"
    s = EncryptedSession(SQLiteSession(sid(), str(path)), encryption_key=KEY, ttl=DAY)
    await s.add_items(SECRET_ITEMS)
    assert await s.get_items() == SECRET_ITEMS
    await s.close()
    with sqlite3.connect(path) as conn:
        rows = [r[0] for r in conn.execute("SELECT message_data FROM agent_messages")]
    assert len(rows) == len(SECRET_ITEMS)
    for row in rows:
        for leak in LEAKS:
            assert leak not in row, f"{leak!r} visible in the store: {row}"
        assert set(json.loads(row)) == {"type", "v", "kid", "t", "n", "c"}
    raw = path.read_bytes() + (tmp_path / "raw.db-wal").read_bytes()
    for leak in ("XYZZY", "PLUGH", "lookup_patient_record"):
        assert leak.encode() not in raw


@pytest.mark.asyncio
@pytest.mark.parametrize("base64", ["pybase64", "binascii"])
async def test_an_envelope_written_by_an_earlier_version_still_opens(
    base64: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sealed outside the package (cryptography's HKDF and AESGCM): pins the stored format
    # and the key derivation, so stored histories stay readable whatever computes them, with
    # the fast extra's base64 or without it.
    if base64 == "binascii":
        import binascii
        import functools

        module = EncryptedSession.__module__
        monkeypatch.setattr(f"{module}._b64decode", binascii.a2b_base64)
        monkeypatch.setattr(
            f"{module}._b64encode", functools.partial(binascii.b2a_base64, newline=False)
        )
    envelope = {
        "type": "agent_sessions.enc",
        "v": 1,
        "kid": "default",
        "t": 1_700_000_000,
        "n": "AAECAwQFBgcICQoL",
        "c": "t535MiAa6O0FSUBzLUbakKAtOfANCeboZeTQ7RHJMyUAUwphMHgt3Lx0oV7xMON4PgM=",
    }
    inner = InMemorySession("golden", store=InMemoryStore())
    await inner.add_items([envelope])  # type: ignore[list-item]
    key = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="
    assert await EncryptedSession(inner, encryption_key=key).get_items() == [msg("héllo")]
    wrong = EncryptedSession(InMemorySession("golden", store=InMemoryStore()), encryption_key=KEY)
    await wrong.inner.add_items([envelope])  # type: ignore[list-item]
    assert await wrong.get_items() == []
    sealed = EncryptedSession(InMemorySession("golden", store=InMemoryStore()), encryption_key=key)
    await sealed.add_items([msg("round trip")])
    fresh = EncryptedSession(sealed.inner, encryption_key=key)  # no cache: decodes base64
    assert await fresh.get_items() == [msg("round trip")]


@pytest.mark.asyncio
async def test_equal_items_get_distinct_nonces_and_ciphertexts() -> None:
    inner = InMemorySession(sid(), store=InMemoryStore())
    s = EncryptedSession(inner, encryption_key=KEY)
    await s.add_items([msg("same"), msg("same")])
    a, b = await raw_items(inner)
    assert a["n"] != b["n"] and a["c"] != b["c"]


@pytest.mark.asyncio
async def test_item_too_large_once_encrypted_is_refused_with_its_index() -> None:
    inner = InMemorySession(sid(), store=InMemoryStore(), max_item_bytes=4096)
    s = EncryptedSession(inner, encryption_key=KEY)
    assert 2800 < s.max_item_bytes < 3072
    biggest = msg("x" * (s.max_item_bytes - len(json.dumps(msg("")))))
    await s.add_items([biggest])  # exactly at the cap: its envelope fits the inner cap
    assert await s.get_items() == [biggest]
    with pytest.raises(ItemTooLargeError, match="item 1"):
        await s.add_items([msg("ok"), msg("x" * s.max_item_bytes)])
    assert len(await inner.get_items()) == 1


# -- unreadable items ---------------------------------------------------------------------------


async def _stack(**kwargs: Any) -> tuple[EncryptedSession, InMemorySession]:
    inner = InMemorySession(sid(), store=InMemoryStore())
    return EncryptedSession(inner, **kwargs), inner


async def _replace_raw(inner: InMemorySession, index: int, change: Any) -> None:
    raw = await inner.get_items()
    raw[index] = change(dict(raw[index]))
    await inner.clear_session()
    await inner.add_items(raw)


def _flip(b64: str) -> str:
    import base64

    data = bytearray(base64.b64decode(b64))
    data[len(data) // 2] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda e: {**e, "c": _flip(e["c"])}, id="ciphertext-bit"),
        pytest.param(lambda e: {**e, "n": _flip(e["n"])}, id="nonce-bit"),
        pytest.param(lambda e: {**e, "c": e["c"][:-8]}, id="truncated"),
        pytest.param(lambda e: {**e, "kid": "k1"}, id="key-id-swapped"),
        pytest.param(lambda e: {**e, "v": 2}, id="version"),
        pytest.param(lambda e: {**e, "n": "not base64!"}, id="garbage-nonce"),
        pytest.param(lambda e: {"role": "user", "content": "planted plaintext"}, id="plaintext"),
    ],
)
async def test_tampered_item_is_skipped_or_raises_in_strict_mode(
    change: Any, caplog: pytest.LogCaptureFixture
) -> None:
    s, inner = await _stack(keys={"k2": KEY, "k1": OLD_KEY}, active="k2")
    await s.add_items([msg("a"), msg("b"), msg("c")])
    await _replace_raw(inner, 1, change)
    with caplog.at_level(logging.WARNING, logger="agent_sessions"):
        assert texts(await s.get_items()) == ["a", "c"]
    assert "unreadable" in caplog.text and "planted" not in caplog.text
    strict = EncryptedSession(inner, keys={"k2": KEY, "k1": OLD_KEY}, active="k2", strict=True)
    with pytest.raises(DecryptionError):
        await strict.get_items()
    assert texts(await strict.get_items(limit=1)) == ["c"]


@pytest.mark.asyncio
async def test_plaintext_cache_is_bounded_per_object_and_hands_out_independent_copies() -> None:
    s, inner = await _stack(encryption_key=KEY, cache_bytes=64 * 1024)
    assert s._plain is not None
    await s.add_items([msg(f"{i}:" + "x" * 1000) for i in range(200)])  # ~400 KB
    assert 0 < s._plain.size <= 64 * 1024 and 0 < len(s._plain.entries) < 200
    first = await s.get_items(limit=1)
    cast("dict[str, Any]", first[0])["content"] = "mutated by the caller"
    assert item_text((await s.get_items(limit=1))[0]).startswith("199:")
    # the object's own reads of what it opened skip base64 and AES
    with patch(f"{EncryptedSession.__module__}._b64decode", side_effect=AssertionError):
        assert len(await s.get_items(limit=5)) == 5
    off = EncryptedSession(inner, encryption_key=KEY, cache_bytes=0)
    await off.add_items([msg("uncached")])
    assert off._plain is None and texts(await off.get_items(limit=1)) == ["uncached"]
    await s.clear_session()
    assert s._plain.entries == {} and s._plain.size == 0


@pytest.mark.asyncio
async def test_an_object_derives_its_key_on_first_use_and_caches_reads_from_its_second_on() -> None:
    """Issue 25 item 7: an object built per call pays for no work it cannot use."""
    module = EncryptedSession.__module__
    with patch(f"{module}._hkdf_extract", side_effect=AssertionError("derived at construction")):
        s, inner = await _stack(encryption_key=KEY)
    await s.add_items([msg("a"), msg("b")])
    assert len(s._ciphers) == 1  # derived once, for the write
    reader = EncryptedSession(inner, encryption_key=KEY)
    assert reader._plain is not None
    assert texts(await reader.get_items()) == ["a", "b"]
    assert reader._plain.entries == {}  # a first read keeps nothing
    assert texts(await reader.get_items()) == ["a", "b"]
    assert len(reader._plain.entries) == 2
    with patch(f"{module}._b64decode", side_effect=AssertionError("decoded again")):
        assert texts(await reader.get_items()) == ["a", "b"]


@pytest.mark.asyncio
async def test_no_object_reads_plaintext_another_object_opened() -> None:
    """Issue 23 item 8: plaintext lives no wider than the object that decrypted it."""
    import binascii

    s, inner = await _stack(encryption_key=KEY)
    await s.add_items([msg(f"{i}") for i in range(5)])
    assert texts(await s.get_items()) == [str(i) for i in range(5)]
    calls = 0

    def counting(data: Any) -> bytes:
        nonlocal calls
        calls += 1
        return binascii.a2b_base64(data)

    reader = EncryptedSession(inner, encryption_key=KEY)  # same session, same key
    with patch(f"{EncryptedSession.__module__}._b64decode", side_effect=counting):
        assert texts(await reader.get_items()) == [str(i) for i in range(5)]
    assert calls == 10, "each envelope is authenticated again (nonce and ciphertext)"


@pytest.mark.asyncio
async def test_keys_live_no_longer_than_the_object_that_uses_them() -> None:
    """Issue 23 item 8: no process-wide cache keeps master keys after their sessions."""
    import gc
    import sys

    key = b"refcount-test-passphrase-" + uuid.uuid4().hex.encode()
    unused = sys.getrefcount(key)
    s = EncryptedSession(InMemorySession(sid()), encryption_key=key)
    await s.add_items([msg("a")])
    assert texts(await s.get_items()) == ["a"]
    assert sys.getrefcount(key) > unused
    del s
    gc.collect()
    assert sys.getrefcount(key) == unused


@pytest.mark.asyncio
async def test_an_envelope_copied_from_another_session_does_not_open() -> None:
    store = InMemoryStore()
    alice_inner = InMemorySession(sid(), store=store)
    bob_inner = InMemorySession(sid(), store=store)
    alice = EncryptedSession(alice_inner, encryption_key=KEY)
    bob = EncryptedSession(bob_inner, encryption_key=KEY, strict=True)
    await alice.add_items([msg("alice's secret")])
    await bob.add_items([msg("bob's")])
    await bob_inner.add_items(await alice_inner.get_items())  # replayed into bob's session
    with pytest.raises(DecryptionError, match="another session"):
        await bob.get_items()
    lenient = EncryptedSession(bob_inner, encryption_key=KEY)
    assert texts(await lenient.get_items()) == ["bob's"]


@pytest.mark.asyncio
async def test_wrong_key_and_unknown_key_id_never_yield_plaintext(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    session_id = sid()
    writer = EncryptedSession(InMemorySession(session_id, store=store), encryption_key=KEY)
    await writer.add_items([msg("one"), msg("two")])
    wrong = EncryptedSession(InMemorySession(session_id, store=store), encryption_key=OLD_KEY)
    with caplog.at_level(logging.WARNING, logger="agent_sessions"):
        assert await wrong.get_items() == []
    assert "authentication failed" in caplog.text
    unknown = EncryptedSession(
        InMemorySession(session_id, store=store), keys={"other": KEY}, strict=True
    )
    with pytest.raises(DecryptionError, match="not in the keyring"):
        await unknown.get_items()


@pytest.mark.asyncio
async def test_envelope_with_a_non_text_key_id_is_unreadable_not_a_type_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = InMemorySession(sid())
    session = EncryptedSession(inner, encryption_key=KEY)
    await session.add_items([msg("one")])
    envelope = (await raw_items(inner))[0]
    await inner.add_items([cast(Any, {**envelope, "kid": ["default"]})])
    with caplog.at_level(logging.WARNING, logger="agent_sessions"):
        assert texts(await session.get_items()) == ["one"]
    assert "not in the keyring" in caplog.text
    with pytest.raises(KeyMismatchError, match="not in the keyring"):
        await session.pop_item()
    assert len(await raw_items(inner)) == 2


class _TenantSession:
    """A foreign inner session that needs the SDK's ``wrapper=`` on every call."""

    def __init__(self) -> None:
        self.session_id, self.session_settings = "tenant", None
        self.items: list[Any] = []

    def _history(self, wrapper: Any) -> list[Any]:
        assert wrapper == "ctx", "wrapper= was not passed on"
        return self.items

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        items = self._history(wrapper)
        return list(items if limit is None else items[-limit:])

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        self._history(wrapper).extend(items)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        items = self._history(wrapper)
        return items.pop() if items else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        self._history(wrapper).clear()


@pytest.mark.asyncio
async def test_pop_with_the_sdks_wrapper_drains_and_refuses_like_without() -> None:
    inner = _TenantSession()
    session = EncryptedSession(cast(Any, inner), encryption_key=KEY)
    other = EncryptedSession(cast(Any, inner), encryption_key=OLD_KEY)
    await session.add_items([msg("one"), msg("two")], wrapper="ctx")
    inner.items.append(msg("plaintext"))
    assert await session.pop_item(wrapper="ctx") == msg("two")
    assert len(inner.items) == 1
    await other.add_items([msg("foreign")], wrapper="ctx")
    with pytest.raises(KeyMismatchError):
        await session.pop_item(wrapper="ctx")
    assert len(inner.items) == 2
    assert await other.pop_item(wrapper="ctx") == msg("foreign")
    assert await session.pop_item(wrapper="ctx") == msg("one")
    assert await session.pop_item(wrapper="ctx") is None


@pytest.mark.asyncio
async def test_an_envelope_altered_in_place_is_not_served_from_the_cache() -> None:
    inner = _TenantSession()  # keeps the very envelope objects it was given
    session = EncryptedSession(cast(Any, inner), encryption_key=KEY)
    await session.add_items([msg("one")], wrapper="ctx")
    other = EncryptedSession(cast(Any, _TenantSession()), encryption_key=KEY)
    await other.add_items([msg("two")], wrapper="ctx")
    inner.items[0]["c"] = other.inner.items[0]["c"]  # type: ignore[attr-defined]
    assert await session.get_items(wrapper="ctx") == []


def _inner_factories() -> list[Any]:
    """Inner sessions over one store: the generic pop path (memory) and the one where the
    check runs inside the store's atomic pop (SQLite, bare and under TTL)."""

    def memory(tmp: Path) -> Any:
        store = InMemoryStore()
        return lambda session_id: InMemorySession(session_id, store=store)

    def sqlite(tmp: Path) -> Any:
        return lambda session_id: SQLiteSession(session_id, str(tmp / "pop.db"))

    def ttl_sqlite(tmp: Path) -> Any:
        return lambda session_id: TTLSession(SQLiteSession(session_id, str(tmp / "pop.db")), 3600)

    return [
        pytest.param(memory, id="memory"),
        pytest.param(sqlite, id="sqlite"),
        pytest.param(ttl_sqlite, id="ttl-sqlite"),
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize("factory", _inner_factories())
async def test_a_wrong_key_never_deletes_and_reads_skip_unreadable_items(
    factory: Any, tmp_path: Path
) -> None:
    make = factory(tmp_path)
    session_id = sid()
    good = EncryptedSession(make(session_id), encryption_key=KEY)
    await good.add_items([msg("readable")])
    other = EncryptedSession(make(session_id), encryption_key=OLD_KEY)
    await other.add_items([msg("other key 1"), msg("other key 2")])
    stored = await good.inner.get_items()
    # get_items(limit=n) returns the latest n readable items, as the SDK's.
    assert texts(await good.get_items(limit=1)) == ["readable"]
    for _ in range(2):  # the newest item does not open: pop raises and keeps everything
        with pytest.raises(KeyMismatchError) as raised:
            await good.pop_item()
        assert isinstance(raised.value, InvalidToken) and isinstance(raised.value, DecryptionError)
        assert await good.inner.get_items() == stored
    assert item_text(await other.pop_item()) == "other key 2"
    assert item_text(await other.pop_item()) == "other key 1"
    with pytest.raises(KeyMismatchError):
        await other.pop_item()
    assert item_text(await good.pop_item()) == "readable"
    assert await good.pop_item() is None
    assert await good.inner.get_items() == []


@pytest.mark.asyncio
@pytest.mark.parametrize("factory", _inner_factories())
async def test_pop_drains_plaintext_above_the_newest_readable_item(
    factory: Any, tmp_path: Path
) -> None:
    inner = factory(tmp_path)(sid())
    session = EncryptedSession(inner, encryption_key=KEY)
    await session.add_items([msg("kept")])
    await inner.add_items([msg("plaintext 1"), msg("plaintext 2")])
    assert texts(await session.get_items(limit=1)) == ["kept"]
    assert item_text(await session.pop_item()) == "kept"
    assert await inner.get_items() == []


@pytest.mark.asyncio
async def test_scan_budget_bounds_reads_like_the_sdk() -> None:
    inner = InMemorySession(sid())
    await EncryptedSession(inner, encryption_key=KEY).add_items([msg("old")])
    await EncryptedSession(inner, encryption_key=OLD_KEY).add_items(
        [msg(f"other {i}") for i in range(5)]
    )
    wide = EncryptedSession(inner, encryption_key=KEY, max_scan_items=20)  # 1+2+4+8 read
    assert texts(await wide.get_items(limit=1)) == ["old"]
    narrow = EncryptedSession(inner, encryption_key=KEY, max_scan_items=3)
    with pytest.raises(RuntimeError, match="max_scan_items"):
        await narrow.get_items(limit=1)
    with pytest.raises(ValueError, match="non-negative"):
        await narrow.get_items(limit=-1)
    assert await narrow.get_items(limit=0) == []


@pytest.mark.asyncio
async def test_custom_methods_of_the_wrapped_session_are_reachable_but_capabilities_not() -> None:
    class Custom(InMemorySession):
        def get_stats(self) -> dict[str, int]:
            return {"calls": 42}

    inner = Custom(sid())
    session = EncryptedSession(inner, encryption_key=KEY)
    assert session.get_stats() == {"calls": 42}
    # A capability is this layer's own, never the inner one's: what it writes is encrypted.
    await session.add_sequenced_items([msg("secret")])
    assert "secret" not in json.dumps(await inner.get_items())
    with pytest.raises(AttributeError):
        session.no_such_method()  # type: ignore[attr-defined]


# -- rotation -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_rotation_rewrites_under_the_active_key_in_order(tmp_path: Path) -> None:
    path = str(tmp_path / "rot.db")
    session_id = sid()
    old = EncryptedSession(SQLiteSession(session_id, path), keys={"k1": OLD_KEY})
    await old.add_items([msg(f"old {i}") for i in range(5)])
    await old.close()
    ring = EncryptedSession(
        SQLiteSession(session_id, path), keys={"k2": KEY, "k1": OLD_KEY}, active="k2"
    )
    await ring.add_items([msg("new 0")])
    expected = [f"old {i}" for i in range(5)] + ["new 0"]
    assert texts(await ring.get_items()) == expected
    numbers = [seq for seq, _ in await ring.get_sequenced_items()]
    assert await ring.rotate() == 5
    assert {e["kid"] for e in await raw_items(ring.inner)} == {"k2"}
    assert texts(await ring.get_items()) == expected
    assert [seq for seq, _ in await ring.get_sequenced_items()] == numbers, "numbers kept"
    assert await ring.rotate() == 0
    await ring.close()
    only_new = EncryptedSession(SQLiteSession(session_id, path), keys={"k2": KEY}, strict=True)
    assert texts(await only_new.get_items()) == expected
    await only_new.clear_session()
    await only_new.close()


@pytest.mark.asyncio
async def test_rotation_under_ttl_keeps_timestamps_and_leaves_dead_items_alone() -> None:
    clock = FakeClock()
    inner = InMemorySession(sid(), store=InMemoryStore())
    ttl = TTLSession(inner, DAY, item_ttl=100, clock=clock)
    old = EncryptedSession(ttl, keys={"k1": OLD_KEY})
    await old.add_items([msg("expired")])
    clock.advance(50)
    await old.add_items([msg("a"), msg("b")])
    clock.advance(60)
    before = await raw_items(inner)
    ring = EncryptedSession(ttl, keys={"k2": KEY, "k1": OLD_KEY}, active="k2")
    assert await ring.rotate() == 2
    raw = await raw_items(inner)
    assert [e["t"] for e in raw] == [e["t"] for e in before], "lifetimes must not change"
    assert raw[0] == before[0], "a dead item is never shown again, so it is not rewritten"
    assert {e["item"]["kid"] for e in raw[1:]} == {"k2"}
    assert texts(await ring.get_items()) == ["a", "b"]


@pytest.mark.asyncio
async def test_rotation_refuses_unreadable_items_unless_told_to_leave_them() -> None:
    store = InMemoryStore()
    session_id = sid()
    ring = EncryptedSession(
        InMemorySession(session_id, store=store), keys={"k2": KEY, "k1": OLD_KEY}, active="k2"
    )
    await ring.add_items([msg("kept")])
    stranger = EncryptedSession(InMemorySession(session_id, store=store), keys={"k9": KEY})
    await stranger.add_items([msg("no key for this")])
    before = await ring.inner.get_items()
    with pytest.raises(DecryptionError, match="drop_unreadable"):
        await ring.rotate()
    assert await ring.inner.get_items() == before
    assert await ring.rotate(drop_unreadable=True) == 0  # "kept" is under k2 already
    assert texts(await ring.get_items()) == ["kept"]
    after: Any = await ring.inner.get_items()
    assert after[1] == before[1], "the unreadable item stays as it was"
    assert after[0]["kid"] == "k2"


@pytest.mark.asyncio
async def test_rotation_over_a_foreign_session_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    foreign = SDKSQLiteSession(sid(), str(tmp_path / "f.db"))
    ring = EncryptedSession(foreign, keys={"k1": OLD_KEY})
    await ring.add_items([msg("x")])
    before = await foreign.get_items()
    ring2 = EncryptedSession(foreign, keys={"k2": KEY, "k1": OLD_KEY}, active="k2")
    with pytest.raises(NotImplementedError, match="REWRITE"):
        await ring2.rotate()
    assert await foreign.get_items() == before
    foreign.close()


# -- side stores --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_side_stores_are_encrypted_too(tmp_path: Path) -> None:
    s = EncryptedSession(InMemorySession(sid(), store=InMemoryStore()), encryption_key=KEY)
    assert supports(s, Capability.FAMILY)
    side = side_store(s, "usage")
    assert isinstance(side, EncryptedSession)
    usage: Any = {"type": "usage", "tokens": 12}
    await side.add_items([usage])
    raw = await raw_items(side.inner)
    assert raw[0]["type"] == "agent_sessions.enc"
    assert await side.get_items() == [{"type": "usage", "tokens": 12}]
    foreign = SDKSQLiteSession(sid(), str(tmp_path / "f.db"))
    assert not supports(EncryptedSession(foreign, encryption_key=KEY), Capability.FAMILY)
    foreign.close()


@pytest.mark.asyncio
async def test_sequenced_items_are_offered_only_when_the_inner_has_them(tmp_path: Path) -> None:
    s = EncryptedSession(InMemorySession(sid(), store=InMemoryStore()), encryption_key=KEY)
    assert supports(s, Capability.SEQUENCED)
    seqs = await s.add_sequenced_items([msg("a"), msg("b")])
    assert [(q, item_text(i)) for q, i in await s.get_sequenced_items()] == [
        (seqs[0], "a"),
        (seqs[1], "b"),
    ]
    assert await s.count_items(after=seqs[0]) == 1
    over_ttl = EncryptedSession(TTLSession(InMemorySession(sid()), 60), encryption_key=KEY)
    assert supports(over_ttl, Capability.SEQUENCED)  # TTLSession passes the inner's on
    assert [q for q, _ in await over_ttl.get_sequenced_items()] == []
    foreign = SDKSQLiteSession(sid(), str(tmp_path / "f.db"))
    assert not supports(EncryptedSession(foreign, encryption_key=KEY), Capability.SEQUENCED)
    over_foreign_ttl = EncryptedSession(TTLSession(foreign, 60), encryption_key=KEY)
    assert not supports(over_foreign_ttl, Capability.SEQUENCED)
    with pytest.raises(NotImplementedError, match="SEQUENCED"):
        await over_foreign_ttl.get_sequenced_items()
    foreign.close()


@pytest.mark.asyncio
async def test_range_delete_is_offered_only_when_the_inner_has_it(tmp_path: Path) -> None:
    inner = SQLiteSession(sid(), str(tmp_path / "r.db"))
    s = EncryptedSession(inner, encryption_key=KEY)
    assert supports(s, Capability.RANGE_DELETE)
    seqs = await s.add_sequenced_items([msg("a"), msg("b")])
    await inner.add_items([msg("not an envelope")])  # unreadable, still one numbered item
    await s.add_items([msg("c")])
    assert await s.delete_items(before=seqs[1] + 2) == 3  # unreadable ones are deleted too
    assert texts(await s.get_items()) == ["c"]
    assert supports(EncryptedSession(inner, encryption_key=KEY, ttl=60), Capability.RANGE_DELETE)
    foreign = SDKSQLiteSession(sid(), str(tmp_path / "f.db"))
    assert not supports(EncryptedSession(foreign, encryption_key=KEY), Capability.RANGE_DELETE)
    foreign.close()
    await s.close()


@pytest.mark.asyncio
async def test_rotation_cancelled_at_any_point_loses_nothing() -> None:
    store = InMemoryStore()
    expected = [f"item {i}" for i in range(10)]
    steps, finished = 0, False
    while not finished:  # cancel after 0, 1, 2, ... event-loop steps until one run completes
        inner = YieldingSession(sid(), store=store)
        await EncryptedSession(inner, keys={"k1": OLD_KEY}).add_items(
            [msg(text) for text in expected]
        )
        ring = EncryptedSession(inner, keys={"k2": KEY, "k1": OLD_KEY}, active="k2")
        task = asyncio.ensure_future(ring.rotate())
        for _ in range(steps):
            await asyncio.sleep(0)
        finished = task.done()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await ring.rotate()  # finishes the job
        assert texts(await ring.get_items()) == expected, f"cancelled after {steps} steps"
        assert {e["kid"] for e in await raw_items(inner)} == {"k2"}
        steps += 1
    assert steps > 2, "the rotation should take several steps, else this tests nothing"


REPO_ROOT = str(Path(__file__).resolve().parent.parent)
KILLED_ROTATION = """
import asyncio, os, sys
sys.path.insert(0, os.getcwd())
from agent_sessions import SQLiteSession
from agent_sessions.wrappers.encrypted import EncryptedSession, KeyMismatchError

path, session_id, new_key, old_key = sys.argv[1:5]
real_rewrite = SQLiteSession._rewrite

async def rewrite_then_die(self, rows):
    await real_rewrite(self, rows[: len(rows) // 2])
    os._exit(17)  # the process dies halfway through the rewrite

SQLiteSession._rewrite = rewrite_then_die

async def main():
    ring = EncryptedSession(SQLiteSession(session_id, path),
                            keys={"k2": new_key, "k1": old_key}, active="k2")
    await ring.rotate()

asyncio.run(main())
"""


@pytest.mark.asyncio
async def test_a_process_killed_mid_rotation_loses_nothing(tmp_path: Path) -> None:
    import sys

    path = str(tmp_path / "killed.db")
    session_id = sid()
    old = EncryptedSession(SQLiteSession(session_id, path), keys={"k1": OLD_KEY})
    expected = [f"item {i}" for i in range(20)]
    await old.add_items([msg(text) for text in expected])
    await old.close()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILLED_ROTATION,
        path,
        session_id,
        KEY,
        OLD_KEY,
        cwd=REPO_ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(child.communicate(), timeout=60)
    assert child.returncode == 17, stderr.decode()
    ring = EncryptedSession(
        SQLiteSession(session_id, path), keys={"k2": KEY, "k1": OLD_KEY}, active="k2"
    )
    kids = [e["kid"] for e in await raw_items(ring.inner)]
    assert kids == ["k2"] * 10 + ["k1"] * 10, "half rewritten, in place, nothing lost"
    assert texts(await ring.get_items()) == expected
    await ring.rotate()
    assert texts(await ring.get_items()) == expected
    assert {e["kid"] for e in await raw_items(ring.inner)} == {"k2"}
    await ring.clear_session()
    await ring.close()


@pytest.mark.asyncio
async def test_is_encrypted_recognises_stored_envelopes_ours_and_the_sdks() -> None:
    """Issue 22: the SDK example's ``item.get("__enc__") == 1`` misses our envelopes."""
    from agents.extensions.memory.encrypt_session import EncryptedSession as SDKEncrypted

    import agent_sessions
    from agent_sessions.wrappers.encrypted import is_encrypted

    assert agent_sessions.is_encrypted is is_encrypted
    s, inner = await _stack(encryption_key=KEY)
    await s.add_items([msg("secret")])
    await inner.add_items([msg("plain")])
    sdk_inner = InMemorySession(sid())
    await SDKEncrypted(sdk_inner.session_id, sdk_inner, KEY).add_items([msg("sdk")])
    stored = [*await inner.get_items(), *await sdk_inner.get_items()]
    assert [is_encrypted(item) for item in stored] == [True, False, True]
    assert stored[0].get("__enc__") != 1, "why the SDK's check is not enough"
    odd: list[Any] = [None, "x", [], {"type": "agent_sessions.enc"}]
    assert not any(is_encrypted(x) for x in odd)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "plaintext", ['{"role":"user","content":"x"},{"role":"user","content":"y"}', "[1]", "7", "{"]
)
async def test_a_plaintext_that_is_not_one_json_object_is_unreadable(plaintext: str) -> None:
    # Only a key holder can seal such a plaintext; reads that decode many items in one call
    # must still give one item per envelope.
    s, inner = await _stack(encryption_key=KEY)
    await s.add_items([msg("a")])
    await inner.add_items([s._seal(plaintext)])  # type: ignore[list-item]
    await s.add_items([msg("b")])
    for reader in (s, EncryptedSession(inner, encryption_key=KEY)):  # cached, then decrypted
        assert texts(await reader.get_items()) == ["a", "b"]
