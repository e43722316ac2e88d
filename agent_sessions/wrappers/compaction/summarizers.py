"""Summarizers (:class:`Summarizer`): turn an old part of a history and the summary it extends
into a few valid Responses input items that stand for it, e.g. ``{"role": "developer", ...}``."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from .text import item_line, item_text

if TYPE_CHECKING:
    from agents import Agent, RunConfig
    from agents.items import TResponseInputItem
    from agents.models.interface import Model
    from openai import AsyncOpenAI

SummaryRole = Literal["user", "developer", "system", "assistant"]

SUMMARY_HEADER = "Summary of the earlier conversation (older messages were compacted):"
"""First line of the text summaries, so the model reads them as context, not as a new request."""

DEFAULT_SUMMARY_INSTRUCTIONS = (
    "You compress conversation history for an AI assistant that will continue the conversation "
    "with only your summary and the latest messages. Write a concise summary that keeps: the "
    "user's goals and preferences, facts and numbers established, decisions made, tool results "
    "that still matter, and open questions or tasks. Use short bullet points. Do not address the "
    "user; do not invent anything."
)
"""The default prompt of :class:`AgentSummarizer`."""


@runtime_checkable
class Summarizer(Protocol):
    """Produces the items that replace a compacted part of a history."""

    async def summarize(
        self, items: list[TResponseInputItem], *, previous_summary: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        """Return replacement items for ``previous_summary`` followed by ``items``.

        Raise to abandon the compaction; the history stays as it was.
        """
        ...


def summary_message(text: str, role: SummaryRole) -> TResponseInputItem:
    """Return a message input item holding ``text`` under :data:`SUMMARY_HEADER`."""
    return {"role": role, "content": f"{SUMMARY_HEADER}\n{text}"}


def _strip_header(text: str) -> str:
    return text[len(SUMMARY_HEADER) :].lstrip("\n") if text.startswith(SUMMARY_HEADER) else text


class ExtractiveSummarizer:
    """Deterministic, model-free: keeps one shortened line per item, newest lines first when the
    summary would exceed ``max_chars``.

    Args:
        max_chars: size cap of the summary text (older lines are dropped first, with a note).
        max_chars_per_item: each item's text is cut to this many characters.
        role: role of the summary message.
    """

    name = "extractive"

    def __init__(
        self,
        *,
        max_chars: int = 4000,
        max_chars_per_item: int = 200,
        role: SummaryRole = "developer",
    ) -> None:
        if max_chars < 100 or max_chars_per_item < 10:
            raise ValueError("max_chars must be >= 100 and max_chars_per_item >= 10")
        self.max_chars = max_chars
        self.max_chars_per_item = max_chars_per_item
        self.role = role

    async def summarize(
        self, items: list[TResponseInputItem], *, previous_summary: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        """Return one message listing the items' lines (and the earlier summary's lines)."""
        lines: list[str] = []
        for old in previous_summary:
            lines.extend(ln for ln in _strip_header(item_text(old)).splitlines() if ln.strip())
        lines.extend(line for item in items if (line := item_line(item, self.max_chars_per_item)))
        # The newest lines whose sizes (a newline each) add up to at most max_chars - 40.
        sizes = list(accumulate(len(line) + 1 for line in reversed(lines)))
        kept = lines[len(lines) - bisect_right(sizes, self.max_chars - 40) :]
        dropped = len(lines) - len(kept)
        if dropped:
            kept.insert(0, f"({dropped} older lines omitted)")
        return [summary_message("\n".join(kept), self.role)]


class AgentSummarizer:
    """Summarises with an Agents SDK ``Agent``: any model the SDK supports.

    Args:
        agent: the agent to run; default one built from ``model`` and ``instructions``.
        model: model name or ``Model`` for the default agent (None: the SDK's default model).
        instructions: the summarising prompt of the default agent.
        run_config: passed to ``Runner.run`` (e.g. a model provider); default names the trace
            workflow "Session compaction".
        role: role of the summary message.
        max_chars_per_item: each item's text is cut to this many characters in the transcript.
    """

    name = "agent"

    def __init__(
        self,
        agent: Agent[Any] | None = None,
        *,
        model: str | Model | None = None,
        instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS,
        run_config: RunConfig | None = None,
        role: SummaryRole = "developer",
        max_chars_per_item: int | None = 4000,
    ) -> None:
        if agent is None:
            from agents import Agent

            agent = Agent(name="history-summarizer", instructions=instructions, model=model)
        self.agent = agent
        self.run_config = run_config
        self.role = role
        self.max_chars_per_item = max_chars_per_item

    async def summarize(
        self, items: list[TResponseInputItem], *, previous_summary: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        """Run the agent on a transcript of the items; its final output is the summary."""
        from agents import Runner

        lines = [item_line(item, self.max_chars_per_item) for item in items]
        earlier = "\n".join(_strip_header(item_text(i)) for i in previous_summary).strip()
        if earlier:
            lines.insert(0, f"Summary so far:\n{earlier}\n\nNew messages:")
        text = "\n".join(line for line in lines if line)
        if self.run_config is None:
            from agents import RunConfig

            self.run_config = RunConfig(workflow_name="Session compaction")
        result = await Runner.run(
            self.agent,
            f"Summarize this conversation:\n\n{text}",
            max_turns=1,
            run_config=self.run_config,
        )
        summary = str(result.final_output or "").strip()
        if not summary:
            raise ValueError("the summarizer agent returned an empty summary")
        return [summary_message(summary, self.role)]


class ResponsesCompactionSummarizer:
    """Calls the OpenAI Responses compaction endpoint (``client.responses.compact``).

    The endpoint returns the conversation's user messages followed by one ``compaction`` item
    (encrypted, readable only by OpenAI models), which replace the compacted part as they are.

    Args:
        client: an ``AsyncOpenAI``; default the Agents SDK's default client, created at first use.
        model: the model that compacts (an OpenAI model, e.g. ``"gpt-4.1"``).
        instructions: optional extra instructions sent with the request.
    """

    name = "responses.compact"

    def __init__(
        self,
        client: AsyncOpenAI | None = None,
        *,
        model: str = "gpt-4.1",
        instructions: str | None = None,
    ) -> None:
        self._client = client
        self.model = model
        self.instructions = instructions

    @property
    def client(self) -> AsyncOpenAI:
        """The client in use (created on first access)."""
        if self._client is None:
            from agents.models._openai_shared import get_default_openai_client
            from openai import AsyncOpenAI

            self._client = get_default_openai_client() or AsyncOpenAI()
        return self._client

    async def summarize(
        self, items: list[TResponseInputItem], *, previous_summary: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        """Send the summary so far and the items as input; return the compacted output."""
        kwargs: dict[str, Any] = {"model": self.model, "input": [*previous_summary, *items]}
        if self.instructions is not None:
            kwargs["instructions"] = self.instructions
        compacted = await self.client.responses.compact(**kwargs)
        output = [
            dict(item)
            if isinstance(item, dict)
            else item.model_dump(exclude_unset=True, warnings=False)
            for item in (compacted.output or [])
        ]
        if not output:
            raise ValueError("responses.compact returned no output items")
        if not any(item.get("type") == "reasoning" for item in output):
            # Assistant message ids refer to reasoning items the output no longer holds; the API
            # rejects such ids on input, so drop them (as the SDK's compaction session does).
            for item in output:
                if item.get("role") == "assistant":
                    item.pop("id", None)
        return output  # type: ignore[return-value]
