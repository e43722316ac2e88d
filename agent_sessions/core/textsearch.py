"""The rules of :attr:`Capability.TEXT_SEARCH` every backend shares: checking a query and its
filters, the words of a query, and the filters applied to a decoded item (for stores that
filter in Python); and the one tokenization policy every engine applies at index and query
time (:func:`tokens`, :func:`cjk_terms`, and their SQL forms for FTS5, ``tsvector`` and
InnoDB ``FULLTEXT``).

The policy: the words of a text (``\\w+``, folded as the engines fold case: ``İ`` is ``i``)
and, beside them, for every run of Hangul, Han or Kana characters its overlapping bigrams
(a run of one character: that character). Korean attaches particles to words ("부산은요")
and Chinese and Japanese write no spaces, so a word is found by the bigrams it shares with
the run it sits in. The databases index the text followed by the run's terms (computed in
SQL by the statements below, so writers that are not this package are indexed the same);
MariaDB indexes no token shorter than 3 characters (``innodb_ft_min_token_size``), so there
a bigram is written with a ``_`` after it (a word character to InnoDB only) and one CJK
character alone is not searchable (as words of 1-2 letters are not)."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from .capabilities import TEXT_FIELD

_WORD = re.compile(r"\w+")
_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3005, 0x3007),  # iteration mark, closing mark, ideographic zero
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xA960, 0xA97F),  # Hangul Jamo Extended-A
    (0xAC00, 0xD7A3),  # Hangul Syllables
    (0xD7B0, 0xD7FF),  # Hangul Jamo Extended-B
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x20000, 0x3134F),  # CJK Extensions B-G
)
"""The characters whose runs are indexed as bigrams (every one of them is a ``\\w``)."""
CJK_CLASS = _CLASS = "[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]"
"""A regular-expression class of those characters (also the token estimate's)."""
_RUN = re.compile(_CLASS + "+")
TOKENS_VERSION = 2
"""The version of this policy: an index built under another (a snapshot, a database's
triggers) is rebuilt, never searched with terms it does not hold."""
TEXT_MARK = f"agent_sessions text tokens {TOKENS_VERSION}"
"""Written into the SQL that builds a database's index (a comment), so an index built under
another policy is recognised, dropped and built again."""
_FIELD = re.compile(r"[a-z_]{1,32}")

Equal = dict[str, tuple[str, ...]]
Between = dict[str, tuple["float | None", "float | None"]]


def fold(text: str) -> str:
    """``text`` lower-cased as the engines do, one character to one: ``İ`` to ``i`` (Python's
    ``lower`` adds a combining dot, which no engine's index holds)."""
    return text.replace("\u0130", "i").lower()


def cjk_terms(text: str) -> list[str]:
    """The terms of the Hangul/Han/Kana runs of ``text``, in order: each run's overlapping
    bigrams, or the character of a run of one."""
    out: list[str] = []
    for run in _RUN.findall(text):
        out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return out


def tokens(text: str) -> list[str]:
    """The terms an in-process index (``core.bm25``) holds for ``text`` and looks up for a
    query: its folded words, then its CJK terms."""
    folded = fold(text)
    return _WORD.findall(folded) + cjk_terms(folded)


def search_text(text: str) -> str:
    """What the databases index for ``text``: the text, then a space and its CJK terms when
    it has any (the SQL forms below compute the same; tests compare them)."""
    terms = cjk_terms(text)
    return f"{text} {' '.join(terms)}" if terms else text


def query_words(query: str) -> list[str]:
    """The distinct words (``\\w+``) of ``query`` and their CJK terms, in order: never the
    store's query syntax. Not folded: each engine folds them as it folds what it indexed."""
    words = _WORD.findall(query)
    return list(dict.fromkeys(words + cjk_terms(" ".join(words))))


def is_cjk_term(word: str) -> bool:
    """Whether ``word`` is all Hangul/Han/Kana (a term :func:`cjk_terms` may produce)."""
    return bool(word) and _RUN.fullmatch(word) is not None


def sqlite_search_text(expr: str) -> str:
    """SQLite's form of :func:`search_text` over the SQL text ``expr`` (repeated, so a column
    or a short expression), taken only when a CJK character is present: a recursive walk over
    the bytes of the UTF-8 text, each step carrying the two characters before. It reads a
    window of 4096 bytes at a time (``r = 1`` rows, which emit nothing): each read of the
    whole value costs its length, so a walk over it was O(n²) (100k characters: 12 s). About
    4 µs a character of such a text (a 40-character Korean line: 0.2 ms a write)."""
    lead = "substr(hex(substr(c.win, c.p, 1)), 1, 1)"
    width = (
        f"(CASE {lead} WHEN 'E' THEN 3 WHEN 'F' THEN 4 WHEN 'C' THEN 2 WHEN 'D' THEN 2 ELSE 1 END)"
    )
    char = f"CAST(substr(c.win, c.p, {width}) AS TEXT)"
    more = "c.base + length(c.win) <= b.n"  # bytes beyond the window
    terms = (
        f"(WITH RECURSIVE b(n, v) AS MATERIALIZED (SELECT length(CAST({expr} AS BLOB)), "
        f"CAST({expr} AS BLOB)), "
        "c(r, base, win, p, ch, k, pch, pk, ppk) AS ("
        "SELECT 1, 1, substr(b.v, 1, 4096), 1, '', 0, '', 0, 0 FROM b UNION ALL "
        f"SELECT 0, c.base, c.win, c.p + {width}, {char}, {char} GLOB '{_CLASS}', c.ch, c.k, "
        f"c.pk FROM c, b WHERE (c.p <= length(c.win) - 4 OR NOT ({more})) "
        "AND c.p <= length(c.win) + 1 UNION ALL "  # one step past the end: the last one's turn
        "SELECT 1, c.base + c.p - 1, substr(b.v, c.base + c.p - 1, 4096), 1, c.ch, c.k, c.pch, "
        f"c.pk, c.ppk FROM c, b WHERE c.p > length(c.win) - 4 AND {more}) "
        "SELECT group_concat(CASE WHEN r THEN NULL WHEN pk AND k THEN pch || ch "
        "WHEN pk AND NOT ppk AND NOT k THEN pch END, ' ') FROM c)"
    )
    return (
        f"(CASE WHEN {expr} GLOB '*{_CLASS}*' THEN {expr} || coalesce(' ' || {terms}, '') "
        f"ELSE {expr} END)"
    )


def postgres_search_text(expr: str) -> str:
    """PostgreSQL's form of :func:`search_text` over the SQL text ``expr``: the runs found by
    a regular expression, each split into its characters."""
    terms = (
        "(SELECT string_agg(CASE WHEN cardinality(c.a) = 1 THEN c.a[1] "
        "ELSE c.a[g.i] || c.a[g.i + 1] END, ' ') "
        f"FROM regexp_matches({expr}, '{_CLASS}+', 'g') AS m(r) "
        "CROSS JOIN LATERAL (SELECT regexp_split_to_array(m.r[1], '') AS a) c "
        "CROSS JOIN LATERAL generate_series(1, greatest(cardinality(c.a) - 1, 1)) AS g(i))"
    )
    return f"({expr} || coalesce(' ' || {terms}, ''))"


_MARIADB_CLASS = (
    "[" + "".join(f"~x{{{lo:X}}}-~x{{{hi:X}}}" for lo, hi in _CJK_RANGES if hi <= 0xFFFF) + "]"
)
"""MariaDB's class leaves out CJK Extensions B-G (beyond U+FFFF, rare characters): with them
the server takes about 4 ms to compile the expression, which a trigger does for every row
(0.5 ms without); a run of them stays a whole word there."""


def _mariadb_regex(pattern: str) -> str:
    """A PCRE ``pattern`` written with ``~`` for a backslash, as MariaDB SQL: the server's
    ``NO_BACKSLASH_ESCAPES`` mode does not matter. ``\\x{...}`` escapes, not the characters:
    a class holding the characters themselves takes the server 1.5-6 ms to compile, which a
    trigger does for every row."""
    return f"REPLACE('{pattern}', '~', CHAR(92))"


def _mariadb_replace(expr: str, mariadb: bool) -> str:
    c = _MARIADB_CLASS
    pattern = _mariadb_regex(f"({c})(?=({c}))|{c}|[^{c[1:]}++")
    groups = "CONCAT(CHAR(92), '1', CHAR(92), '2_ ')" if mariadb else "'$1$2_ '"
    return f"REGEXP_REPLACE({expr}, {pattern}, {groups})"


def mariadb_search_text(expr: str, function: str, mariadb: bool = True) -> str:
    """MariaDB's form of :func:`search_text` over the SQL text ``expr``: each bigram written
    with a ``_`` after it (see the module's note) by one ``REGEXP_REPLACE``, which leaves a
    lone ``_`` (shorter than any indexed token) for everything else. Inline up to 2000
    characters; a longer text goes to ``function`` (:func:`mariadb_terms_function`): one
    ``REGEXP_REPLACE`` costs O(n²), as the server checks the whole subject's UTF-8 at each
    match (30k Hangul: 4.1 s), and a stored function call costs 3-10 ms however short its
    text. An ASCII text costs one length comparison; another without CJK, one ``REGEXP``
    (MySQL 8's ICU names groups ``$1``; untested here: no MySQL server in CI)."""
    inline = f"CONCAT({expr}, ' ', {_mariadb_replace(expr, mariadb)})"
    has_cjk = (
        f"CHAR_LENGTH({expr}) <> LENGTH({expr}) AND {expr} REGEXP {_mariadb_regex(_MARIADB_CLASS)}"
    )
    return f"IF({has_cjk}, IF(CHAR_LENGTH({expr}) <= 2000, {inline}, {function}({expr})), {expr})"


def mariadb_terms_function(name: str, mariadb: bool = True) -> str:
    """The ``CREATE FUNCTION`` of ``name(text)``, :func:`mariadb_search_text` for a long text:
    ``REGEXP_REPLACE`` over pieces of 2000 characters (and one more, so a bigram across two
    pieces is written once), about 30 µs a CJK character (30k: 0.5-1.2 s). Its comment is
    :data:`TEXT_MARK`."""
    text = "LONGTEXT CHARACTER SET utf8mb4"
    piece = _mariadb_replace("SUBSTRING(t, i + 1, 2001)", mariadb)
    return (
        f"CREATE FUNCTION {name}(t {text}) RETURNS {text} DETERMINISTIC NO SQL "
        f"COMMENT '{TEXT_MARK}' BEGIN "
        f"DECLARE i BIGINT DEFAULT 0; DECLARE o {text} DEFAULT ''; "
        f"IF t IS NULL OR t NOT REGEXP {_mariadb_regex(_MARIADB_CLASS)} THEN RETURN t; END IF; "
        f"WHILE i < CHAR_LENGTH(t) DO SET o = CONCAT(o, {piece}); SET i = i + 2000; "
        "END WHILE; RETURN CONCAT(t, ' ', o); END"
    )


def mariadb_words(words: list[str]) -> list[str]:
    """Query terms as MariaDB's index holds them: a CJK bigram with its ``_``."""
    return [f"{w}_" if len(w) == 2 and is_cjk_term(w) else w for w in words]


def item_text(item: Any) -> str | None:
    """The indexed text of a decoded item: its top-level ``"text"`` when a non-empty string."""
    text = item.get(TEXT_FIELD) if isinstance(item, dict) else None
    return text if isinstance(text, str) and text else None


def _field(name: object, what: str) -> str:
    if not isinstance(name, str) or not _FIELD.fullmatch(name):
        raise ValueError(f"search_text: {what} field names are 1-32 of a-z and _, got {name!r}")
    return name


def _bound(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(
            f"search_text: between[{field!r}] bounds are numbers or None, got {value!r}"
        )
    return value


def check_search(
    query: object,
    limit: object,
    equal: Mapping[str, Collection[str]] | None,
    between: Mapping[str, tuple[float | None, float | None]] | None,
) -> tuple[list[str], Equal, Between]:
    """Check the arguments of ``search_text``; return the query's words and the filters as
    plain dicts. Raises ValueError for a bad field name, TypeError for a wrong type."""
    if not isinstance(query, str):
        raise TypeError(f"search_text: query must be a str, got {type(query).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"search_text: limit must be an int, got {limit!r}")
    equal_out: Equal = {}
    for name, values in (equal or {}).items():
        _field(name, "equal")
        if isinstance(values, (str, bytes)) or not isinstance(values, Collection):
            raise TypeError(
                f"search_text: equal[{name!r}] is a collection of strings (a list or set), "
                f"got {values!r}"
            )
        if not all(isinstance(v, str) for v in values):
            raise TypeError(f"search_text: equal[{name!r}] holds strings only, got {values!r}")
        equal_out[name] = tuple(dict.fromkeys(values))
    between_out: Between = {}
    for name, pair in (between or {}).items():
        _field(name, "between")
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"search_text: between[{name!r}] is (low, high), got {pair!r}")
        between_out[name] = (_bound(pair[0], name), _bound(pair[1], name))
    return query_words(query), equal_out, between_out


def passes(item: Any, equal: Equal, between: Between) -> bool:
    """Whether a decoded item passes the filters (top-level fields; strings for ``equal``,
    numbers but not booleans for ``between``, bounds inclusive)."""
    if not isinstance(item, dict):
        return False
    for name, values in equal.items():
        value = item.get(name)
        if not isinstance(value, str) or value not in values:
            return False
    for name, (low, high) in between.items():
        value = item.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if (low is not None and value < low) or (high is not None and value > high):
            return False
    return True


__all__ = [
    "CJK_CLASS",
    "TEXT_MARK",
    "TOKENS_VERSION",
    "Between",
    "Equal",
    "check_search",
    "cjk_terms",
    "fold",
    "is_cjk_term",
    "item_text",
    "mariadb_search_text",
    "mariadb_terms_function",
    "mariadb_words",
    "passes",
    "postgres_search_text",
    "query_words",
    "search_text",
    "sqlite_search_text",
    "tokens",
]
