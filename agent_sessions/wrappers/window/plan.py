"""Where the model's view of a history starts (shared by ``WindowSession`` and the callback).

The view is a suffix ``items[s:]``; a start ``s`` is *valid* when every output in the view has
its call in it (paired as in compaction) and ``items[s - 1]`` is not a reasoning item. An empty
view is always valid; a call still awaiting its output does not block a start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core.options import check_int
from ..compaction.boundary import _is_user_message as is_user_message
from ..compaction.boundary import _pair_key, after_reasoning


@dataclass(frozen=True)
class WindowBudget:
    """How much history the model sees.

    Attributes:
        max_turns: at most this many user turns (a turn starts at a user message), or None.
        max_tokens: at most this many estimated tokens, or None.
    """

    max_turns: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1, least_text="1 or None")

    @property
    def bounded(self) -> bool:
        """Whether any bound is set (else the view is the whole history)."""
        return self.max_turns is not None or self.max_tokens is not None


def valid_starts(items: Sequence[Any]) -> list[bool]:
    """Return ``ok`` with ``ok[s]`` (0 <= s <= len(items)) True when ``items[s:]`` is a valid
    view (see the module docstring). Items before ``items[0]`` count as absent."""
    n = len(items)
    delta = [0] * (n + 2)
    opened: dict[str, int] = {}
    for j, item in enumerate(items):
        pair = _pair_key(item)
        if pair is None:
            continue
        key, opening = pair
        if opening:
            opened[key] = j
            continue
        # A start in (opener, j] keeps this output without its call.
        low = opened[key] + 1 if key in opened else 0
        delta[low] += 1
        delta[j + 1] -= 1
    ok = []
    depth = 0
    for s in range(n + 1):
        depth += delta[s]
        ok.append(s == n or (depth == 0 and not after_reasoning(items, s)))
    return ok


def plan_start(
    items: Sequence[Any],
    tokens: Sequence[int],
    budget: WindowBudget,
    *,
    complete: bool,
    reserved_tokens: int = 0,
) -> int | None:
    """Return where the view of ``items`` starts, or None when ``items`` does not reach far
    enough back to decide (read older items and ask again).

    ``items`` is the newest part of a history, oldest first; ``complete`` says it is the whole
    history. ``tokens[i]`` is the estimate of ``items[i]`` as shown. The start is the first valid
    one at or after the earliest start the budget allows (the ``max_turns``-th user message from
    the end; the oldest item whose suffix fits ``max_tokens - reserved_tokens``).
    """
    n, earliest, users, total = len(items), 0, 0, reserved_tokens
    if budget.max_tokens is not None and total > budget.max_tokens:
        return n
    for i in range(n - 1, -1, -1):
        if budget.max_tokens is not None and total + tokens[i] > budget.max_tokens:
            earliest = i + 1
            break
        total += tokens[i]
        if is_user_message(items[i]):
            users += 1
            if budget.max_turns is not None and users >= budget.max_turns:
                earliest = i
                break
    if earliest == 0 and not complete:
        return None  # older items decide (more may fit; a reasoning one makes 0 invalid)
    ok = valid_starts(items)
    return next(s for s in range(earliest, n + 1) if ok[s])


def turn_ages(items: Sequence[Any], later_users: int = 0) -> list[int]:
    """Return, per item, how many user messages come after it (``later_users`` of them after
    ``items[-1]``): 0 for the newest turn, 1 for the one before, and so on."""
    ages = [0] * len(items)
    users = later_users
    for i in range(len(items) - 1, -1, -1):
        ages[i] = users
        if is_user_message(items[i]):
            users += 1
    return ages
