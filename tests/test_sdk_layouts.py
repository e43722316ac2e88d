"""The SDK's own storage layouts: written by the SDK's real classes, read and migrated by ours,
and migrated back so the SDK's classes read our conversations."""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agents.extensions.memory import MongoDBSession as SDKMongoDBSession
from agents.extensions.memory import RedisSession as SDKRedisSession
from agents.extensions.memory import SQLAlchemySession as SDKSQLAlchemySession

from agent_sessions import RedisSession, SQLAlchemySession, open_session
from agent_sessions.cli import main
from agent_sessions.ops.catalog import SessionCatalog
from agent_sessions.ops.migrate import copy_store
from agent_sessions.ops.sdk_layouts import (
    SDK_MESSAGES_TABLE,
    SDK_MONGO_DATABASE,
    SDK_REDIS_PREFIX,
    SDK_SESSIONS_TABLE,
    SDKLayoutSession,
)
from tests.servers import (
    POSTGRES_URL,
    REDIS_URL,
    RUN,
    drop_redis_keys,
    drop_sql_tables,
    require_server,
)


def _conversation(sid: str, n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"{sid} says {i} — ünïcode"}
        if i % 2 == 0
        else {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"reply {i}"}],
        }
        for i in range(n)
    ]


def _default(cls: Any, name: str) -> Any:
    return inspect.signature(cls.__init__).parameters[name].default


def test_sdk_defaults_are_the_installed_sdks() -> None:
    assert _default(SDKRedisSession, "key_prefix") == SDK_REDIS_PREFIX
    assert _default(SDKSQLAlchemySession, "sessions_table") == SDK_SESSIONS_TABLE
    assert _default(SDKSQLAlchemySession, "messages_table") == SDK_MESSAGES_TABLE
    assert _default(SDKMongoDBSession, "database") == SDK_MONGO_DATABASE
    assert _default(SDKMongoDBSession, "sessions_collection") == SDK_SESSIONS_TABLE
    # ... and ours differ, which is why the sdk+ URLs and the migration exist.
    assert _default(RedisSession, "key_prefix") != SDK_REDIS_PREFIX
    assert _default(SQLAlchemySession, "table_prefix") + "sessions" != SDK_SESSIONS_TABLE


@pytest.fixture
def redis_prefixes() -> Iterator[tuple[str, str, str]]:
    require_server("Redis", "127.0.0.1", 6379)
    run = f"{RUN}{uuid.uuid4().hex[:6]}"
    yield f"sdk{run}", f"ours{run}", f"back{run}"
    for prefix in ("sdk", "ours", "back"):
        asyncio.run(drop_redis_keys(REDIS_URL, f"{prefix}{run}*"))


@pytest.mark.asyncio
async def test_redis_sdk_layout_to_ours_and_back(redis_prefixes: tuple[str, str, str]) -> None:
    sdk_prefix, ours, back = redis_prefixes
    written = {"alice": _conversation("alice", 5), "bob:1": _conversation("bob:1", 2)}
    for sid, items in written.items():
        sdk = SDKRedisSession.from_url(sid, url=REDIS_URL, key_prefix=sdk_prefix)
        await sdk.add_items(items[:1])
        await sdk.add_items(items[1:])
        await sdk.close()

    # In place: the sdk+ URL reads and writes what the SDK's class does.
    in_place = await open_session(f"sdk+{REDIS_URL}", "alice", key_prefix=sdk_prefix)
    assert isinstance(in_place, SDKLayoutSession)
    assert await in_place.get_items() == written["alice"]
    catalog = SessionCatalog(in_place)
    listed = [(i.session_id, i.item_count) async for i in catalog.iter_sessions()]
    assert listed == [("alice", 5), ("bob:1", 2)]
    assert await catalog.families(["alice", "bob:1"]) == {"alice": [], "bob:1": []}
    assert all([i.updated_at is not None async for i in catalog.iter_sessions()])
    await in_place.close()

    report = await copy_store(
        f"sdk+{REDIS_URL}",
        REDIS_URL,
        src_options={"key_prefix": sdk_prefix},
        dst_options={"key_prefix": ours},
    )
    assert (report.sessions, report.items) == (2, 7)
    for sid, items in written.items():
        async with RedisSession.from_url(sid, url=REDIS_URL, key_prefix=ours) as mine:
            assert await mine.get_items() == items
    async with RedisSession.from_url("alice", url=REDIS_URL, key_prefix=ours) as mine:
        await mine.add_items([{"role": "user", "content": "written after the switch"}])

    # Back into the SDK's layout, from the command line: the SDK's class reads it all.
    assert (
        await asyncio.to_thread(
            main,
            [
                "copy",
                REDIS_URL,
                f"sdk+{REDIS_URL}",
                "--src-option",
                f"key_prefix={ours}",
                "--dst-option",
                f"key_prefix={back}",
                "--json",
            ],
        )
        == 0
    )
    for sid, items in written.items():
        sdk = SDKRedisSession.from_url(sid, url=REDIS_URL, key_prefix=back)
        expected = items + (
            [{"role": "user", "content": "written after the switch"}] if sid == "alice" else []
        )
        assert await sdk.get_items() == expected
        await sdk.close()


@pytest.fixture
def sql_names() -> Iterator[tuple[str, str]]:
    require_server("PostgreSQL", "127.0.0.1", 5432)
    run = f"{RUN}{uuid.uuid4().hex[:6]}"
    yield f"sdk{run}_", f"ours{run}_"
    for prefix in ("sdk", "ours", "back"):
        asyncio.run(drop_sql_tables(POSTGRES_URL, f"{prefix}{run}_"))


@pytest.mark.asyncio
async def test_sqlalchemy_sdk_layout_to_ours_and_back(sql_names: tuple[str, str]) -> None:
    sdk_prefix, ours = sql_names
    back = sdk_prefix.replace("sdk", "back", 1)
    sdk_tables: dict[str, Any] = {
        "sessions_table": f"{sdk_prefix}sessions",
        "messages_table": f"{sdk_prefix}messages",
    }
    written = {"u-1": _conversation("u-1", 4), "u-2": _conversation("u-2", 3)}
    for sid, items in written.items():
        sdk = SDKSQLAlchemySession.from_url(sid, url=POSTGRES_URL, create_tables=True, **sdk_tables)
        await sdk.add_items(items)
        await sdk.engine.dispose()

    src = f"sdk+{POSTGRES_URL}"
    report = await copy_store(
        src, POSTGRES_URL, src_options=sdk_tables, dst_options={"table_prefix": ours}
    )
    assert (report.sessions, report.items) == (2, 7)
    again = await copy_store(
        src, POSTGRES_URL, src_options=sdk_tables, dst_options={"table_prefix": ours}
    )
    assert (again.skipped, again.items) == (2, 0)  # resumable: nothing left to do
    for sid, items in written.items():
        async with SQLAlchemySession.from_url(sid, url=POSTGRES_URL, table_prefix=ours) as mine:
            assert await mine.get_items() == items

    back_tables: dict[str, Any] = {
        "sessions_table": f"{back}sessions",
        "messages_table": f"{back}messages",
    }
    args = [f"--dst-option={k}={v}" for k, v in back_tables.items()]
    cli = ["copy", POSTGRES_URL, src, f"--src-option=table_prefix={ours}", *args]
    assert await asyncio.to_thread(main, cli) == 0
    for sid, items in written.items():
        sdk = SDKSQLAlchemySession.from_url(sid, url=POSTGRES_URL, **back_tables)
        assert await sdk.get_items() == items
        await sdk.engine.dispose()


def test_sdk_sqlalchemy_list_creates_no_tables(capsys: pytest.CaptureFixture[str]) -> None:
    require_server("PostgreSQL", "127.0.0.1", 5432)
    name = f"missing{uuid.uuid4().hex[:8]}"
    args = ["-o", f"sessions_table={name}_s", "-o", f"messages_table={name}_m"]
    assert main(["list", f"sdk+{POSTGRES_URL}", *args]) == 1
    assert "no session store" in capsys.readouterr().err
    assert main(["list", f"sdk+{POSTGRES_URL}", *args, "--json"]) == 1  # still missing


@pytest.mark.asyncio
async def test_mongodb_sdk_layout_to_ours_and_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from mongomock_motor import AsyncMongoMockClient, AsyncMongoMockCollection

    from agent_sessions import MongoDBSession
    from agent_sessions.ops.migrate import Store, write_session

    class StandIn(AsyncMongoMockClient):  # type: ignore[misc,type-arg]
        """The stand-in lacks two PyMongo calls the SDK's class makes; neither stores data."""

        def append_metadata(self, info: Any) -> None:
            pass

    monkeypatch.setattr(
        AsyncMongoMockCollection, "with_options", lambda self, **kw: self, raising=False
    )
    client: Any = StandIn()
    written = {"m-1": _conversation("m-1", 3), "m-2": _conversation("m-2", 2)}
    for sid, items in written.items():
        await SDKMongoDBSession(sid, client=client).add_items(items)

    src = await Store.open("sdk+mongodb://localhost", {"client": client}, read_only=True)
    catalog = src.require_catalog()
    assert [(i.session_id, i.item_count) async for i in catalog.iter_sessions()] == [
        ("m-1", 3),
        ("m-2", 2),
    ]
    assert await catalog.families(["m-1", "m-2"]) == {"m-1": [], "m-2": []}
    for sid, items in written.items():
        source = src.session(sid)
        assert await source.get_items() == items
        mine = MongoDBSession(sid, client=client, database="ours")
        assert await write_session(mine, await source.get_items()) == len(items)
        assert await mine.get_items() == items
        await source.close()
        # and back into the SDK's layout, in another database
        back = src.session(sid)
        back_sdk = SDKMongoDBSession(sid, client=client, database="back")
        assert await write_session(back_sdk, await mine.get_items()) == len(items)
        assert await SDKMongoDBSession(sid, client=client, database="back").get_items() == items
        await back.close()
        await mine.close()
    await src.close()
    assert json.dumps(written)  # the conversations are plain JSON throughout
