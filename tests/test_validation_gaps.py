"""Issue 13 item 5: validation that was looser on one path than another (regressions)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import uuid
from typing import Any

import pytest

from agent_sessions.backends.sqlite import check_identifier
from agent_sessions.core import codec
from agent_sessions.errors import InvalidItemError


class _Color(enum.Enum):
    RED = 1


class _Word(str, enum.Enum):
    HI = "hi"


@dataclasses.dataclass
class _Point:
    x: int = 1


def _nested(depth: int) -> dict[str, Any]:
    item: dict[str, Any] = {}
    current = item
    for _ in range(depth - 1):
        current["a"] = {}
        current = current["a"]
    return item


@pytest.fixture(params=["orjson", "stdlib"])
def json_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "orjson" and codec._orjson is None:
        pytest.skip("orjson not installed")
    if request.param == "stdlib":
        monkeypatch.setattr(codec, "_orjson", None)
        monkeypatch.setattr(codec, "dumps", codec._std_dumps)
        monkeypatch.setattr(codec, "loads", json.loads)
    return str(request.param)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (datetime.datetime(2026, 1, 2, 3, 4, 5), "datetime"),
        (datetime.date(2026, 1, 2), "date"),
        (uuid.UUID(int=7), "UUID"),
        (_Color.RED, "_Color"),
        (_Point(), "_Point"),
        (2**64, "64-bit"),
        (-(2**63) - 1, "64-bit"),
        (frozenset({1}), "frozenset"),
    ],
    ids=["datetime", "date", "uuid", "enum", "dataclass", "big-int", "small-int", "frozenset"],
)
def test_both_json_paths_refuse_what_the_sdk_refuses(
    json_path: str, value: Any, reason: str
) -> None:
    with pytest.raises(InvalidItemError, match=reason) as info:
        codec.encode_batch([{"role": "user"}, {"role": "user", "content": [value]}])
    assert info.value.index == 1
    assert "item['content'][0]" in str(info.value)


def test_both_json_paths_accept_str_and_int_subclasses_as_their_value(json_path: str) -> None:
    text = codec.encode_item({"w": _Word.HI, "n": 2**63, "t": (1, True)}, 0)
    assert json.loads(text) == {"w": "hi", "n": 2**63, "t": [1, True]}


@pytest.mark.parametrize("depth", [codec.MAX_DEPTH + 1, 5000, 100_000])
def test_deep_nesting_is_an_invalid_item_not_a_recursion_error(json_path: str, depth: int) -> None:
    with pytest.raises(InvalidItemError, match=f"deeper than {codec.MAX_DEPTH}"):
        codec.encode_item(_nested(depth), 2)
    deep_list: Any = []
    for _ in range(depth):
        deep_list = [deep_list]
    with pytest.raises(InvalidItemError, match="deeper"):
        codec.encode_item({"x": deep_list}, 0)


def test_nesting_up_to_the_limit_round_trips(json_path: str) -> None:
    item = _nested(codec.MAX_DEPTH)
    assert codec.decode_item(codec.encode_item(item, 0)) == item


@pytest.mark.parametrize("name", ["messages\n", "a\nb", "\nmessages", "t\r", "x" * 64, "1a", ""])
def test_identifiers_refuse_a_trailing_newline_and_other_junk(name: str) -> None:
    with pytest.raises(ValueError, match="plain identifier"):
        check_identifier(name, "messages_table")
    assert check_identifier("ok_" + "x" * 60, "t") == "ok_" + "x" * 60


@pytest.mark.parametrize("name", ["messages\n", "a b"])
def test_backends_refuse_table_names_with_a_newline(name: str) -> None:
    from agent_sessions import SQLiteSession
    from agent_sessions.backends.sql.common import Tables

    with pytest.raises(ValueError, match="plain identifier"):
        SQLiteSession("s", messages_table=name)
    with pytest.raises(ValueError, match="plain identifier"):
        Tables.build(name, None, None)


@pytest.mark.server
@pytest.mark.asyncio
@pytest.mark.parametrize("value", ["abc", "-3", "1.5", "1e400", ""])
async def test_a_corrupt_redis_counter_is_a_data_error_and_changes_nothing(value: str) -> None:
    from redis.asyncio import Redis

    from agent_sessions import RedisSession
    from agent_sessions.errors import BackendDataError

    from .servers import REDIS_URL, RUN, drop_redis_keys, require_server

    require_server("Redis", "127.0.0.1", 6379)
    prefix = f"gap{RUN}{uuid.uuid4().hex[:6]}"
    session = RedisSession.from_url("s", url=REDIS_URL, key_prefix=prefix)
    raw = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await session.add_items([{"role": "user", "content": "kept"}])
        meta = f"{prefix}:{{s}}:meta"
        await raw.hset(meta, "seq", value)
        with pytest.raises(BackendDataError, match="counter") as info:
            await session.add_items([{"role": "user", "content": "lost"}])
        assert "seq" in str(info.value)
        with pytest.raises(BackendDataError, match="counter"):
            await session.clear_session()
        assert [i["content"] for i in await session.get_items()] == ["kept"]  # type: ignore[typeddict-item]
        assert await raw.hget(meta, "seq") == value
    finally:
        await session.close()
        await raw.aclose()
        await drop_redis_keys(REDIS_URL, f"{prefix}:*")
