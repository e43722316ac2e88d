"""WordLlamaEmbedder: offline embeddings from weights inside the ``wordllama`` wheel (extra
``memory-offline``); skipped when it is not installed."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from agent_sessions.memory import Memory, WordLlamaEmbedder
from agent_sessions.memory.search import dot

pytest.importorskip("wordllama")


def _no_network(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the offline embedder reached for the network")


@pytest.mark.asyncio
async def test_wordllama_embeds_offline_and_ranks_by_meaning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import requests

    monkeypatch.setattr(requests, "get", _no_network)
    embedder = WordLlamaEmbedder(128)
    assert (embedder.name, embedder.dim) == ("wordllama:l2_supercat:128", 128)
    assert await embedder.embed([]) == []
    texts = ["The kitten is napping on the couch", "Stock prices fell sharply today"]
    vectors = await embedder.embed(texts)
    assert [len(v) for v in vectors] == [128, 128]
    assert all(math.isclose(dot(v, v), 1.0, rel_tol=1e-4) for v in vectors)
    assert await embedder.embed(texts) == vectors  # deterministic
    [probe] = await embedder.embed(["a cat sleeping on the sofa"])
    assert dot(probe, vectors[0]) > dot(probe, vectors[1])


@pytest.mark.asyncio
async def test_archive_search_with_the_offline_embedder_finds_by_meaning() -> None:
    from agent_sessions import InMemorySession

    memory = Memory(InMemorySession("memory:offline:"), embedder=WordLlamaEmbedder())
    for fact in ["The kitten is napping on the couch", "Stock prices fell sharply today"]:
        await memory.archive.insert(fact)
    [top] = await memory.archive.search("cat asleep, sofa", top_k=1)  # no word shared
    assert top.content == "The kitten is napping on the couch"
    assert top.embedder == "wordllama:l2_supercat:256"


def test_bad_dims_are_refused() -> None:
    for dim in (0, 257, True, 64.0):
        with pytest.raises(ValueError, match="dim"):
            WordLlamaEmbedder(dim)  # type: ignore[arg-type]


def test_without_wordllama_the_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['wordllama'] = None\n"
        "from agent_sessions import WordLlamaEmbedder\n"
        "from agent_sessions.errors import MissingDependencyError\n"
        "try:\n"
        "    WordLlamaEmbedder()\n"
        "except MissingDependencyError as exc:\n"
        "    assert 'agent-sessions-store[memory-offline]' in str(exc), exc\n"
        "else:\n"
        "    sys.exit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
