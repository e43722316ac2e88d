"""Keyring: master keys parsed once and owned by the caller, shared by EncryptedSession objects
(issue 39 item 6), over SQLite and Redis."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from cryptography.fernet import Fernet

from agent_sessions import Keyring, SQLiteSession
from agent_sessions.backends.redis import RedisSession
from agent_sessions.errors import DecryptionError
from agent_sessions.testing.helpers import texts
from agent_sessions.wrappers.encrypted import EncryptedSession, KeyMismatchError
from tests.servers import REDIS_URL, RUN, drop_redis_keys, require_server

KEY = Fernet.generate_key().decode()
OLD_KEY = Fernet.generate_key().decode()
PREFIX = f"agent_sessions_test{RUN}kr"
Make = Callable[[str], Any]


def msg(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.fixture(scope="module", autouse=True)
def _drop_redis_keys_at_end() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):  # a server that was down has nothing to drop
        asyncio.run(drop_redis_keys(REDIS_URL, f"{PREFIX}:*"))


@pytest_asyncio.fixture(params=["sqlite", "redis"])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    """A factory of bare sessions of one store (a new object per call), closed at the end."""
    opened: list[Any] = []
    if request.param == "redis":
        parts = urlsplit(REDIS_URL)
        require_server("Redis", parts.hostname or "127.0.0.1", parts.port or 6379)

    def build(session_id: str) -> Any:
        if request.param == "sqlite":
            session: Any = SQLiteSession(session_id, str(tmp_path / "ring.db"))
        else:
            session = RedisSession.from_url(session_id, url=REDIS_URL, key_prefix=PREFIX)
        opened.append(session)
        return session

    yield build
    for session in opened:
        await session.close()


def sid() -> str:
    return f"ring-{uuid.uuid4().hex[:12]}"


@pytest.mark.asyncio
async def test_a_ring_reads_what_encryption_key_wrote_and_back(make: Make) -> None:
    ring, s = Keyring(KEY), sid()
    await EncryptedSession(make(s), encryption_key=KEY).add_items([msg("by key")])
    await EncryptedSession(make(s), keyring=ring).add_items([msg("by ring")])
    by_key = EncryptedSession(make(s), encryption_key=KEY, strict=True)
    assert texts(await by_key.get_items()) == ["by key", "by ring"]
    assert texts(await EncryptedSession(make(s), keyring=ring, strict=True).get_items()) == [
        "by key",
        "by ring",
    ]


@pytest.mark.asyncio
async def test_rotation_through_a_ring(make: Make) -> None:
    s = sid()
    await EncryptedSession(make(s), keys={"k1": OLD_KEY}).add_items([msg("old"), msg("older")])
    ring = Keyring(keys={"k2": KEY, "k1": OLD_KEY}, active="k2")
    await EncryptedSession(make(s), keyring=ring).add_items([msg("new")])
    assert await EncryptedSession(make(s), keyring=ring).rotate() == 2
    only_new = EncryptedSession(make(s), keyring=Keyring(keys={"k2": KEY}), strict=True)
    assert texts(await only_new.get_items()) == ["old", "older", "new"]


@pytest.mark.asyncio
async def test_keyring_cache_is_bounded_and_clear_drops_it(make: Make) -> None:
    ring = Keyring(KEY, max_sessions=2)
    ids = [sid() for _ in range(3)]
    for session_id in ids:
        await EncryptedSession(make(session_id), keyring=ring).add_items([msg(session_id)])
    assert ring.cached() == 2  # the least recently used session's cipher went
    ring.clear()
    assert ring.cached() == 0
    for session_id in ids:  # reuse after clear: derived again, same keys
        fresh = EncryptedSession(make(session_id), keyring=ring, strict=True)
        assert texts(await fresh.get_items()) == [session_id]
    assert ring.cached() == 2


@pytest.mark.asyncio
async def test_a_wrong_ring_never_yields_plaintext(make: Make) -> None:
    s = sid()
    await EncryptedSession(make(s), keyring=Keyring(KEY)).add_items([msg("secret")])
    for wrong in (Keyring(OLD_KEY), Keyring(keys={"other": KEY})):
        assert await EncryptedSession(make(s), keyring=wrong).get_items() == []
        with pytest.raises(DecryptionError):
            await EncryptedSession(make(s), keyring=wrong, strict=True).get_items()
        with pytest.raises(KeyMismatchError):
            await EncryptedSession(make(s), keyring=wrong).pop_item()
    assert texts(await EncryptedSession(make(s), encryption_key=KEY).get_items()) == ["secret"]


@pytest.mark.asyncio
async def test_two_rings_are_isolated(make: Make) -> None:
    a, b, s = Keyring(KEY), Keyring(OLD_KEY), sid()
    await EncryptedSession(make(s), keyring=a).add_items([msg("a")])
    await EncryptedSession(make(s), keyring=b).add_items([msg("b")])
    assert texts(await EncryptedSession(make(s), keyring=a).get_items()) == ["a"]
    assert texts(await EncryptedSession(make(s), keyring=b).get_items()) == ["b"]
    a.clear()  # one ring's clear leaves the other's keys alone
    assert (a.cached(), b.cached()) == (0, 1)
    assert texts(await EncryptedSession(make(s), keyring=b).get_items()) == ["b"]


def test_keyring_arguments_are_checked() -> None:
    ring = Keyring(KEY)
    inner = SQLiteSession(sid())
    with pytest.raises(ValueError, match="not both"):
        EncryptedSession(inner, encryption_key=KEY, keyring=ring)
    with pytest.raises(ValueError, match="not both"):
        EncryptedSession(inner, keyring=ring, active="default")
    with pytest.raises(TypeError, match="Keyring"):
        EncryptedSession(inner, keyring=KEY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_sessions"):
        Keyring(KEY, max_sessions=0)
    with pytest.raises(ValueError, match="active="):
        Keyring(keys={"a": KEY, "b": OLD_KEY})
    assert KEY not in repr(ring) and "default" in repr(ring)
    assert EncryptedSession(inner, keyring=ring).keyring is ring
    assert EncryptedSession(inner, encryption_key=KEY).keyring is not ring  # its own, per object
