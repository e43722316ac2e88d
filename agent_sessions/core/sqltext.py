"""Catalog SQL for every SQL layout (ours and the SDK's, SQLite and SQLAlchemy): a sessions
table (``session_id``, ``created_at``, ``updated_at``) beside a messages table. Prefixes match
with ``substr`` (SQLite's ``LIKE`` ignores case), bounded below so the primary key narrows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .catalog import CatalogQuery, SessionInfo, utc
from .ids import SIBLING_MARK

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise ValueError."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        raise ValueError(
            f"{what} must be a plain identifier (letters, digits, underscore; at most 63 "
            f"characters, not starting with a digit), got {name!r}"
        )
    return name


def like_escape(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def page_sql(
    sessions: str, messages: str, query: CatalogQuery, time_param: Any
) -> tuple[str, dict[str, Any]]:
    """The SELECT of one catalog page and its named parameters; ``time_param(dt)`` renders a
    time bound the way the database compares it."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": query.limit}
    if query.after is not None:
        where.append("s.session_id > :after")
        params["after"] = query.after
    if query.prefix:
        where.append("s.session_id >= :prefix AND substr(s.session_id, 1, :plen) = :prefix")
        params["prefix"], params["plen"] = query.prefix, len(query.prefix)
    if not query.internal:
        where.append("substr(s.session_id, 1, 1) <> :mark")
        params["mark"] = SIBLING_MARK
    if query.updated_after is not None:
        where.append("s.updated_at >= :updated_after")
        params["updated_after"] = time_param(query.updated_after)
    if query.updated_before is not None:
        where.append("s.updated_at < :updated_before")
        params["updated_before"] = time_param(query.updated_before)
    sql = (
        "SELECT s.session_id, s.created_at, s.updated_at, "
        f"(SELECT count(*) FROM {messages} m WHERE m.session_id = s.session_id) "
        f"FROM {sessions} s"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + " ORDER BY s.session_id LIMIT :limit", params


def _ids_like(sessions: str, pattern: str) -> tuple[str, dict[str, Any]]:
    sql = f"SELECT session_id FROM {sessions} WHERE session_id LIKE :pattern ESCAPE '!'"
    return sql, {"pattern": pattern}


def family_sql(sessions: str, root: str) -> tuple[str, dict[str, Any]]:
    """The SELECT of candidate side-store ids of ``root`` (the caller checks each one)."""
    return _ids_like(sessions, f"{SIBLING_MARK}%{SIBLING_MARK}{like_escape(root)}")


def side_stores_sql(sessions: str) -> tuple[str, dict[str, Any]]:
    """The SELECT of every side-store id (an index range: they share their first character)."""
    return _ids_like(sessions, f"{SIBLING_MARK}%")


def sqlite_time(when: datetime | float) -> str:
    # CURRENT_TIMESTAMP text of a time or an epoch; whole seconds, which the catalog refines.
    if not isinstance(when, datetime):
        when = datetime.fromtimestamp(when, timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def sqlite_indexable(row: str) -> str:
    """SQLite's SQL true when ``row``'s JSON holds a non-empty string ``text`` (NULL, not an
    error, for malformed JSON: CASE evaluates its branch only when the JSON is valid)."""
    return (
        f"(CASE WHEN json_valid({row}.message_data) THEN "
        f"json_type({row}.message_data, '$.text') = 'text' "
        f"AND json_extract({row}.message_data, '$.text') <> '' END)"
    )


TSVECTOR_CHARS = 100_000
"""How many characters of an item's text PostgreSQL indexes. A ``tsvector`` holds at most
1 MB; measured, one-letter words of 4-byte letters take the most, 6 bytes a character (CJK
two-letter words 4.7, English words 2.2), so the first 100k characters fit with room."""


def tsvector_sql(text: str) -> str:
    """PostgreSQL's ``tsvector`` of the SQL text expression ``text``, of its first
    ``TSVECTOR_CHARS`` characters (a longer text failed every write and search of its
    session: test_the_store_indexes_a_huge_text_bounded)."""
    return f"to_tsvector('simple', left({text}, {TSVECTOR_CHARS}))"


def rows_to_infos(rows: Sequence[Sequence[Any]]) -> list[SessionInfo]:
    return [SessionInfo(str(r[0]), utc(r[1]), utc(r[2]), int(r[3] or 0)) for r in rows]
