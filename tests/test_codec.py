"""Issue 25 item 4: the orjson path walks no valid item in Python and keeps the rules."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import uuid
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sessions.core import codec
from agent_sessions.errors import InvalidItemError

orjson = pytest.importorskip("orjson")


class _Color(enum.Enum):
    RED = 1


class _Level(enum.IntEnum):
    HIGH = 3


class _Word(str, enum.Enum):
    HI = "hi"


class _Str(str):
    pass


class _Float(float):
    pass


class _Tuple(tuple[Any, ...]):
    pass


class _Dict(dict[str, Any]):
    pass


@dataclasses.dataclass
class _Point:
    x: int = 1


_ODD = [
    math.nan, -math.inf, 2**64, -(2**63) - 1, 2**64 - 1, "\udc00", uuid.UUID(int=7), _Color.RED,
    _Level.HIGH, _Word.HI, _Str("s"), _Float(1.5), _Float("nan"), _Tuple((1,)), _Point(),
    datetime.date(2026, 1, 2), frozenset({1}), b"b", orjson.Fragment(b'{"x":1}'),
]  # fmt: skip
# Keys that never compare equal to each other (True == 1, _Word.HI == "hi").
_KEYS = st.text("abc", max_size=3) | st.sampled_from([7, None, 2.5, _Str("zz"), _Word.HI])
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=4)
    | st.sampled_from(_ODD),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_KEYS, inner, max_size=4)
        | st.dictionaries(st.text("abc", max_size=3), inner, max_size=3).map(_Dict)
    ),
    max_leaves=12,
)


def _outcome(item: dict[Any, Any]) -> tuple[str, Any]:
    try:
        return "stored", json.loads(codec.encode_item(item, 4))
    except InvalidItemError as exc:
        assert exc.index == 4
        return "refused", str(exc)


@settings(max_examples=150, deadline=1000)
@given(st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_the_orjson_path_stores_and_refuses_exactly_what_the_stdlib_path_does(
    item: dict[Any, Any],
) -> None:
    fast = _outcome(item)
    with mock.patch.multiple(codec, _orjson=None, dumps=codec._std_dumps):
        slow = _outcome(item)
    assert fast == slow


def test_a_valid_item_is_not_walked_on_the_orjson_path() -> None:
    entries = [{"k": i, "v": "x", "f": i / 3, "t": ["a"], "m": {"n": None}} for i in range(200)]
    item = {"type": "function_call_output", "output": entries}

    def walk(value: Any, path: str) -> str | None:
        raise AssertionError("the validation walk ran on a valid item")

    with mock.patch.object(codec, "_find_problem", walk):
        assert json.loads(codec.encode_item(item, 0)) == item


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (math.nan, "nan"),
        (math.inf, "inf"),
        (uuid.UUID(int=1), "UUID"),
        (_Color.RED, "_Color"),
        (orjson.Fragment(b"1"), "Fragment"),
    ],
)
def test_what_orjson_converts_but_json_refuses_is_named_by_path(value: Any, reason: str) -> None:
    with pytest.raises(InvalidItemError, match=reason) as info:
        codec.encode_batch([{"a": 1}, {"a": [{"b": value}]}])
    assert info.value.index == 1
    assert "item['a'][0]['b']" in str(info.value)
