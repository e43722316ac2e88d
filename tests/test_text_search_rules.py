"""The argument rules of ``search_text`` every backend shares (``core/textsearch.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from agent_sessions.core.textsearch import check_search, item_text, passes, query_words


def test_words_are_distinct_word_characters_in_order() -> None:
    assert query_words('NEAR("a" b*) -a c:d') == ["NEAR", "a", "b", "c", "d"]
    assert query_words("¿?¡! -- ;") == []


@pytest.mark.parametrize(
    ("query", "limit", "equal", "between"),
    [
        (b"bytes", 10, None, None),
        ("q", True, None, None),
        ("q", 2.0, None, None),
        ("q", 10, {"role": "user"}, None),
        ("q", 10, {"role": [1]}, None),
        ("q", 10, None, {"at": (True, None)}),
        ("q", 10, None, {"at": ("1", None)}),
        ("q", 10, None, {"at": (float("nan"), None)}),
        ("q", 10, None, {"at": (1,)}),
    ],
)
def test_wrong_types_raise_type_error(query: Any, limit: Any, equal: Any, between: Any) -> None:
    with pytest.raises(TypeError, match="search_text"):
        check_search(query, limit, equal, between)


def test_filters_match_top_level_strings_and_numbers() -> None:
    words, equal, between = check_search("x", 5, {"role": ("user", "user")}, {"at": (1, None)})
    assert (words, equal, between) == (["x"], {"role": ("user",)}, {"at": (1, None)})
    assert passes({"role": "user", "at": 1.5}, equal, between)
    assert not passes({"role": "user", "at": True}, equal, between)
    assert not passes({"role": ["user"], "at": 2}, equal, between)
    assert not passes("not a dict", {}, {})
    assert item_text({"text": "a"}) == "a"
    assert item_text({"text": ""}) is None and item_text({"text": 1}) is None
