"""Embedders: turn texts into vectors for archival search (``name``, ``dim``, ``embed``)."""

from __future__ import annotations

import asyncio
import hashlib
import math
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..core.extras import require
from .search import tokenize


@runtime_checkable
class Embedder(Protocol):
    """What archival memory needs of an embedding model."""

    name: str
    """Identifies the model; vectors of another name are never compared with this one's."""
    dim: int

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of ``dim`` floats per text."""
        ...


class HashingEmbedder:
    """Deterministic, offline feature hashing of words and character trigrams (for tests and
    for near-duplicate wording; it knows no meaning)."""

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in tokenize(text):
            padded = f" {word} "
            features = [word, *(padded[i : i + 3] for i in range(len(padded) - 2))]
            for feature in features:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                index = int.from_bytes(digest[:4], "little") % self.dim
                vector[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Hash each text."""
        return [self._vector(text) for text in texts]


class OpenAIEmbedder:
    """Embeddings from the OpenAI API through the ``openai`` client the SDK installs."""

    def __init__(
        self, model: str = "text-embedding-3-small", dim: int = 1536, client: Any = None
    ) -> None:
        self.model, self.dim = model, dim
        self.name = f"openai:{model}:{dim}"
        self._client = client

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Call the embeddings endpoint once for all ``texts``."""
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI()
        response = await self._client.embeddings.create(
            model=self.model, input=texts, dimensions=self.dim
        )
        return [list(d.embedding) for d in response.data]


class WordLlamaEmbedder:
    """Offline embeddings from the static token vectors that ship inside the ``wordllama``
    package (MIT licence; extra ``memory-offline``): no key, no network, no download.

    A text's vector is the mean of its tokens' vectors (WordLlama ``l2_supercat``, 256
    dimensions, trained so its first 64 or 128 also work: pass ``dim`` to truncate).
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= 256:
            raise ValueError(f"dim must be an int from 1 to 256 (64, 128 or 256), got {dim!r}")
        wordllama: Any = require("wordllama", "WordLlamaEmbedder", "memory-offline")
        # The package's own folder holds weights/ and tokenizers/: loading from there as the
        # cache, with downloads disabled, never reaches the network.
        self._model = wordllama.WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, disable_download=True, trunc_dim=dim
        )
        self.dim = dim
        self.name = f"wordllama:l2_supercat:{dim}"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` on a worker thread (the event loop stays free)."""
        if not texts:
            return []
        vectors = await asyncio.to_thread(self._model.embed, texts, norm=True)
        return [[float(x) for x in row] for row in vectors]
