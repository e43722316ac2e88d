"""Hypothesis strategies for realistic histories and an independent reference of the window.

A history is a list of turns, each written as one batch (as the Runner does): a user message
(sometimes absent, as when a turn only answers an approval), then steps: assistant messages,
reasoning followed by what it belongs to, parallel tool calls with outputs in any order, MCP
approval requests with their responses, outputs that arrive in the next turn (after an
approval), and at the very end possibly a call still waiting for
its output.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from agent_sessions.wrappers.compaction import TokenEstimator
from agent_sessions.wrappers.window import MicroCompaction

Item = dict[str, Any]
ESTIMATOR = TokenEstimator(encoding=None)  # the offline estimate: deterministic on any machine

_text = st.one_of(
    st.text(alphabet="abc xyz", min_size=0, max_size=40),
    st.integers(min_value=100, max_value=6000).map(lambda n: ("word " * n)[:n]),
)


@st.composite
def histories(draw: st.DrawFn, max_turns: int = 10) -> list[list[Any]]:
    """Batches (one per turn) of a valid history."""
    ids = itertools.count()
    turns: list[list[Any]] = []
    deferred: list[Item] = []  # outputs of calls answered in the next turn
    for t in range(draw(st.integers(min_value=0, max_value=max_turns))):
        batch: list[Item] = []
        if draw(st.integers(0, 9)) > 0:
            batch.append({"role": "user", "content": f"u{t} " + draw(_text)})
        batch += deferred
        deferred = []
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["message", "reasoned-message", "calls", "approval"]))
            if kind in ("message", "reasoned-message"):
                if kind == "reasoned-message":
                    batch.append(_reasoning(next(ids)))
                batch.append({"role": "assistant", "content": draw(_text)})
            elif kind == "calls":
                if draw(st.booleans()):
                    batch.append(_reasoning(next(ids)))
                calls = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
                batch += [
                    {"type": "function_call", "call_id": c, "name": "f", "arguments": "{}"}
                    for c in calls
                ]
                if draw(st.booleans()):  # the model said something along with its calls
                    batch.append({"role": "assistant", "content": draw(_text)})
                order = draw(st.permutations(calls))
                later = draw(st.integers(0, len(order)))  # answered in the next turn (approval)
                outputs = [_output(c, draw(_text)) for c in order]
                batch += outputs[:later]
                deferred += outputs[later:]
            else:
                request = f"mcpr{next(ids)}"
                batch.append(
                    {
                        "type": "mcp_approval_request",
                        "id": request,
                        "name": "t",
                        "arguments": "{}",
                        "server_label": "s",
                    }
                )
                batch.append(
                    {
                        "type": "mcp_approval_response",
                        "approval_request_id": request,
                        "approve": draw(st.booleans()),
                    }
                )
        turns.append(batch)
    if deferred:
        turns.append(deferred)
    pending: bool = draw(st.booleans())
    if turns and pending:  # a call still waiting for its output
        turns[-1].append(
            {"type": "function_call", "call_id": f"c{next(ids)}", "name": "f", "arguments": "{}"}
        )
    return turns


def _output(call_id: str, text: str) -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def _reasoning(n: int) -> Item:
    return {"type": "reasoning", "id": f"rs{n}", "summary": [{"type": "summary_text", "text": "t"}]}


budgets = st.tuples(
    st.one_of(st.none(), st.integers(1, 5)),
    st.one_of(st.none(), st.integers(1, 4000)),
)
micros = st.one_of(
    st.none(),
    st.builds(
        MicroCompaction,
        keep_turns=st.integers(0, 3),
        max_chars=st.just(400),
        head=st.just(100),
        tail=st.just(50),
    ),
)


def is_user(item: Any) -> bool:
    return bool(item.get("role") == "user" and item.get("type", "message") == "message")


def shown(history: list[Item], micro: MicroCompaction | None) -> list[Item]:
    """Each item as the layer must show it: ages counted naively."""
    if micro is None:
        return list(history)
    return [
        micro.shorten(item, sum(1 for later in history[i + 1 :] if is_user(later)))
        for i, item in enumerate(history)
    ]


def tokens(items: list[Item]) -> int:
    return sum(ESTIMATOR.count_item(i) for i in items)


def problems(view: list[Item], before: Item | None) -> list[str]:
    """Why ``view`` (preceded in the history by ``before``) is not valid model input."""
    found = []
    seen_calls: set[str] = set()
    seen_requests: set[str] = set()
    for k, item in enumerate(view):
        kind = item.get("type")
        if kind == "function_call":
            seen_calls.add(item["call_id"])
        elif kind == "function_call_output" and item["call_id"] not in seen_calls:
            found.append(f"output {item['call_id']} without its call")
        elif kind == "mcp_approval_request":
            seen_requests.add(item["id"])
        elif kind == "mcp_approval_response" and item["approval_request_id"] not in seen_requests:
            found.append(f"approval response {item['approval_request_id']} without its request")
        elif kind == "reasoning" and k == len(view) - 1:
            found.append("reasoning without the item it belongs to")
    if view and before is not None and before.get("type") == "reasoning":
        found.append(f"{view[0]} shown without its reasoning")
    return found


def reference_start(
    history: list[Item],
    max_turns: int | None,
    max_tokens: int | None,
    micro: MicroCompaction | None,
    reserved: int = 0,
) -> int:
    """The earliest start that is valid and within the budget, by brute force."""
    display = shown(history, micro)
    users = [i for i, item in enumerate(history) if is_user(item)]
    lowest = 0
    if max_turns is not None and len(users) >= max_turns:
        lowest = users[-max_turns]
    for s in range(lowest, len(history) + 1):
        view = display[s:]
        if not view:
            return s  # nothing shown: valid, and within any budget
        if max_tokens is not None and tokens(view) + reserved > max_tokens:
            continue
        if not problems(view, history[s - 1] if s else None):
            return s
    raise AssertionError("unreachable: the empty view is returned above")
