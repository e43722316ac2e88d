"""The tier of :attr:`Capability.TEXT_SEARCH`: ``search_text`` ranks a session's items by the
words of their top-level ``"text"`` with the store's own index.

It asserts what ``SupportsTextSearch`` promises and what every full-text engine does (an item
holding more of the query's words ranks first; the query's words are words, never syntax);
what tokenizers differ on (diacritics, stemming, stop words) is either avoided (the words
queried here are plain, four letters or more, and no engine's stop word) or accepted either
way. Korean, Chinese and Japanese words are found inside their runs (the tokenization
policy of ``core.textsearch``), case folds as the engines fold it (``İzmir``), and every
query word counts.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest

from ..core.capabilities import Capability, supports
from .base import ConformanceBase, msg
from .capability_tiers import _numbers_base

HOSTILE_QUERIES = [
    '"zebra',
    'zebra"',
    '""zebra""',
    "zebra*",
    "-zebra",
    "+zebra",
    "NOT zebra",
    "zebra AND",
    "OR zebra",
    "NEAR(zebra walrus)",
    "NEAR/2 zebra",
    "text:zebra",
    "body:zebra",
    "'zebra'",
    "^zebra",
    "(zebra",
    "zebra)",
    "zebra'; DROP TABLE x; --",
    "{zebra}",
    "[zebra]",
    "zebra~2",
    "@zebra",
    "zebra\\",
    "zebra\x00",
    "'); DELETE FROM t; --zebra",
    "`zebra`",
    "zebra:*",
    "!zebra",
    "zebra|walrus",
    "zebra & walrus",
    "<->zebra",
    "zebra@@",
]
"""Queries holding a full-text engine's syntax (FTS5, tsquery, MySQL boolean mode) or SQL
quotes; each holds the word ``zebra`` (some ``walrus`` too) and nothing else that matches."""


def note(text: Any, **fields: Any) -> dict[str, Any]:
    """An item whose top-level ``"text"`` is ``text``."""
    return {"type": "note", "text": text, **fields}


class TextSearchConformance(ConformanceBase):
    """``search_text``: ranked, any-word, filtered before the limit, syntax-proof, following
    every write of the session, never crossing sessions."""

    ranks_rare_words_first: ClassVar[bool] = True
    """Whether the store's ranking weighs a word by its rarity (BM25: SQLite FTS5, the
    in-memory index). False for a ranking by frequency alone (PostgreSQL's ``ts_rank``)."""

    finds_words_inside_cjk_runs: ClassVar[bool] = True
    """Whether a Korean, Chinese or Japanese word is found inside the run it sits in (this
    package's stores: ``core.textsearch``'s policy). False for a store of your own whose
    engine indexes such a run as one word: those checks are then skipped."""

    async def searchable(self, *needs: Capability, suffix: str | None = None) -> Any:
        return await self.new_session(Capability.TEXT_SEARCH, *needs, suffix=suffix)

    async def found(self, s: Any, query: str, **options: Any) -> list[str]:
        """The texts ``s.search_text`` returns, after checking each hit is the session's own
        stored item at that number and that scores do not increase."""
        hits = await s.search_text(query, **options)
        stored = dict(await s.get_sequenced_items())
        for seq, item, score in hits:
            assert stored.get(seq) == item, f"hit {seq} is not the stored item"
            assert isinstance(score, float) and not math.isnan(score)
        scores = [score for _, _, score in hits]
        assert scores == sorted(scores, reverse=True), "hits must come best first"
        assert len({seq for seq, _, _ in hits}) == len(hits), "a hit was returned twice"
        return [item["text"] for _, item, _ in hits]

    async def test_ranks_items_holding_more_query_words_first(self) -> None:
        s = await self.searchable()
        await s.add_items(
            [
                note("quokka harbor orchard"),
                note("harbor meadow orchard"),
                note("quokka lantern orchard"),
                note("lantern harbor orchard"),
                note("meadow violet harbor"),
            ]
        )
        hits = await self.found(s, "quokka lantern")
        assert hits[0] == "quokka lantern orchard"
        assert sorted(hits[1:]) == ["lantern harbor orchard", "quokka harbor orchard"], (
            "any word of the query matches (OR), and only those items"
        )

    async def test_ranks_a_rarer_word_first(self) -> None:
        if not self.ranks_rare_words_first:
            pytest.skip("this store ranks by word frequency alone")
        s = await self.searchable()
        await s.add_items([note(f"pebble gravel item{i}") for i in range(5)])
        await s.add_items([note("yodel gravel stone"), note("pebble gravel stone")])
        hits = await self.found(s, "pebble yodel", limit=3)
        assert hits[0] == "yodel gravel stone", "the rarer word should weigh more"

    async def test_limit_and_queries_without_words(self) -> None:
        s = await self.searchable()
        await s.add_items([note(f"ferret number{i}") for i in range(4)])
        assert len(await self.found(s, "ferret", limit=2)) == 2
        assert len(await self.found(s, "ferret")) == 4
        assert len(await self.found(s, "ferret", limit=10**30)) == 4, "any int is a limit"
        for limit in (0, -1):
            assert await s.search_text("ferret", limit=limit) == []
        for query in ("", "   ", "?!.", "***", '""', "-- ;", "\n\t"):
            assert await s.search_text(query) == [], f"{query!r} has no words"
        assert await s.search_text("absentword") == []

    async def test_filters_apply_before_the_limit(self) -> None:
        s = await self.searchable()
        await s.add_items(
            [
                note("falcon falcon falcon", role="assistant", at=15),
                note("falcon ledger", role="user", at=10),
                note("falcon ledger quill", role="tool", at=20),
                note("falcon quill", role="user", at=25),
                note("falcon ledger", role=["user"], at="15"),
                note("falcon quill", at=True),
                note("canyon ledger", role="user", at=12),
            ]
        )
        best = await self.found(s, "falcon", limit=1)
        assert best == ["falcon falcon falcon"]
        users = await self.found(s, "falcon", limit=1, equal={"role": ["user"]})
        assert users and users[0] in ("falcon ledger", "falcon quill")
        assert sorted(await self.found(s, "falcon", equal={"role": ["user", "tool"]})) == [
            "falcon ledger",
            "falcon ledger quill",
            "falcon quill",
        ], "equal matches a top-level string field only"
        assert await self.found(s, "falcon", equal={"role": []}) == []
        assert await self.found(s, "falcon", equal={"missing": ["user"]}) == []
        ranged = await self.found(s, "falcon", between={"at": (10, 20)})
        assert sorted(ranged) == ["falcon falcon falcon", "falcon ledger", "falcon ledger quill"]
        assert await self.found(s, "falcon", limit=1, between={"at": (21, None)}) == [
            "falcon quill"
        ]
        assert sorted(await self.found(s, "falcon", between={"at": (None, 15)})) == [
            "falcon falcon falcon",
            "falcon ledger",
        ]
        both = await self.found(
            s, "falcon quill", limit=1, equal={"role": ["user"]}, between={"at": (None, 12)}
        )
        assert both == ["falcon ledger"]

    async def test_bad_field_names_are_refused(self) -> None:
        s = await self.searchable()
        await s.add_items([note("otter")])
        for name in ("Role", "role-x", "", "a" * 33, "a b", "text;", "x1", "ünï", "a.b"):
            with pytest.raises(ValueError):
                await s.search_text("otter", equal={name: ["x"]})
            with pytest.raises(ValueError):
                await s.search_text("otter", between={name: (1, 2)})
        assert await self.found(s, "otter", equal={"a" * 32: ["x"]}) == []

    async def test_query_syntax_is_never_interpreted(self) -> None:
        s = await self.searchable()
        await s.add_items(
            [
                note("zebra walrus"),
                note("zebra"),
                note("zebrafish tank"),
                note("plain words here"),
                note("another line"),
            ]
        )
        for query in HOSTILE_QUERIES:
            hits = await self.found(s, query)
            assert "zebra" in hits and "zebra walrus" in hits, f"{query!r} must find zebra"
            assert "zebrafish tank" not in hits, f"{query!r}: no prefix matching"
            assert "plain words here" not in hits
        for query in ("AND", "OR", "NOT", "NEAR", "NEAR(", '"', "*", ")", "'", "-", ":"):
            assert await self.found(s, query) == [], f"{query!r} matched words it does not hold"

    async def test_only_a_string_text_is_indexed(self) -> None:
        s = await self.searchable()
        await s.add_items(
            [
                note(5),
                note(["badger"]),
                note({"badger": 1}),
                note(""),
                note(None),
                msg("badger in content"),
                {"role": "user", "content": [{"type": "input_text", "text": "badger nested"}]},
                note("badger"),
                note("other words"),
                {"text2": "badger"},
            ]
        )
        assert await self.found(s, "badger") == ["badger"]

    async def test_items_written_before_the_first_search_are_found(self) -> None:
        s = await self.searchable()
        await s.add_items([note("heron early"), note("other early")])
        assert await self.found(s, "heron") == ["heron early"]
        await s.add_items([note("heron later")])
        assert sorted(await self.found(s, "heron")) == ["heron early", "heron later"]

    async def test_the_index_follows_every_write(self) -> None:
        s = await self.searchable()
        assert await self.found(s, "bison") == []  # searched before any write
        await s.add_items([note("bison one"), note("bison two"), note("other three")])
        assert sorted(await self.found(s, "bison")) == ["bison one", "bison two"]
        await s.pop_item()
        await s.pop_item()
        assert await self.found(s, "bison") == ["bison one"]
        await s.add_items([note("bison again"), note("moose here"), note("words four")])
        if supports(s, Capability.REWRITE):
            pairs = await s.get_sequenced_items()
            seq_of = {item.get("text"): seq for seq, item in pairs}
            await s.rewrite_items(
                [(seq_of["bison again"], note("moose again")), (seq_of["moose here"], msg("moose"))]
            )
            assert await self.found(s, "bison") == ["bison one"]
            assert await self.found(s, "moose") == ["moose again"]
        if supports(s, Capability.RANGE_DELETE):
            first = (await s.get_sequenced_items())[0][0]
            await s.delete_items(before=first + 1)
            assert "bison one" not in await self.found(s, "bison")
        await s.clear_session()
        assert await self.found(s, "bison moose words") == []
        await s.add_items([note("bison after clear"), note("other after clear")])
        assert await self.found(s, "bison") == ["bison after clear"]

    async def test_writes_at_given_numbers_are_indexed(self) -> None:
        s = await self.searchable(Capability.SEQUENCED_WRITE)
        assert await s.search_text("ibex") == []
        base = _numbers_base()
        await s.write_sequenced_items(
            [(base, note("ibex copied")), (base + 5, note("other copied"))]
        )
        hits = await s.search_text("ibex copied")
        assert (hits[0][0], hits[0][1]["text"]) == (base, "ibex copied")

    async def test_sessions_never_see_each_other(self) -> None:
        s = await self.searchable()
        other = await self.searchable()
        await s.add_items([note("jackal pinecone"), note("filler pinecone")])
        await other.add_items([note("jackal tulip"), note("jackal pinecone")])
        mine = await s.search_text("jackal pinecone tulip", limit=100)
        assert mine[0][1]["text"] == "jackal pinecone"
        assert {item["text"] for _, item, _ in mine} == {"jackal pinecone", "filler pinecone"}
        assert sorted(await self.found(other, "jackal", limit=100)) == [
            "jackal pinecone",
            "jackal tulip",
        ]
        await other.clear_session()
        assert len(await self.found(s, "jackal")) == 1

    async def test_sessions_written_in_turns_never_see_each_other(self) -> None:
        s = await self.searchable()
        other = await self.searchable()
        for i in range(4):  # their items interleave in the store
            await other.add_items([note(f"jackal jackal other{i}")])
            await s.add_items([note(f"jackal mine{i}")])
        assert len(await self.found(other, "jackal", limit=100)) == 4  # both are indexed
        for limit in (1, 3, 100):  # the other's items hold the word twice: they would rank first
            found = await self.found(s, "jackal", limit=limit)
            assert len(found) == min(limit, 4) and all("mine" in t for t in found), found

    async def test_unicode_words(self) -> None:
        s = await self.searchable()
        await s.add_items(
            [
                note("Müller schreibt"),
                note("日本語 テキスト"),
                note("plain ascii"),
                note("other line"),
                note("more lines"),
            ]
        )
        assert await self.found(s, "Müller") == ["Müller schreibt"]
        assert await self.found(s, "schreibt!") == ["Müller schreibt"]
        expected = (
            [["日本語 テキスト"]] if self.finds_words_inside_cjk_runs else [[], ["日本語 テキスト"]]
        )
        assert await self.found(s, "日本語") in expected
        assert await self.found(s, "🙂 ∑") == []

    async def test_cjk_words_are_found_inside_their_runs(self) -> None:
        # Korean attaches particles to words, Chinese and Japanese write no spaces: a word is
        # found by the bigrams it shares with the run it sits in (core.textsearch).
        if not self.finds_words_inside_cjk_runs:
            pytest.skip("this store indexes a run of CJK characters as one word")
        s = await self.searchable()
        lines = [
            "그럼 부산은요?",
            "날씨가 어때요?",
            "我下周要去北京出差。",
            "東京の天気はどうですか",
        ]
        await s.add_items([note(line) for line in [*lines, "plain ascii", "other line"]])
        for word, line in zip(["부산", "날씨", "北京", "東京"], lines, strict=True):
            assert await self.found(s, word) == [line], word
        assert await self.found(s, "天気") == [lines[3]]
        assert await self.found(s, "부산에서") == [lines[0]]  # another particle: 부산 matches

    async def test_case_folds_as_the_engine_folds_it(self) -> None:
        # Python lower-cases İ to i and a combining dot, which no engine's index holds.
        s = await self.searchable()
        await s.add_items([note("flights to İzmir"), note("plain ascii"), note("other line")])
        for query in ("İzmir", "izmir", "IZMIR"):
            assert await self.found(s, query) == ["flights to İzmir"], query

    async def test_every_query_word_counts(self) -> None:
        s = await self.searchable()
        await s.add_items([note("the walrus sleeps"), note("plain ascii"), note("other line")])
        query = " ".join(f"nothing{i}" for i in range(300)) + " walrus"
        assert await self.found(s, query) == ["the walrus sleeps"]
