"""Dense retrieval with an API embedding model through litellm (e.g. text-embedding-3-large).

The corpus embeddings go through the same cache as local models (``dense.build_index``), so
a corpus is paid for once per model; queries are embedded on every search. Calls are batched
and retried with exponential backoff on rate limits, 5xx errors, timeouts and dropped
connections; other errors (bad key, unknown model, input too long) fail at once.
Texts are sent as they are: no truncation to the model's input limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from .dense import DenseIndex, Encoder, build_index, instructions_for

# Without this, importing litellm tries to download its model price list (no internet here).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

RETRYABLE = (
    litellm.RateLimitError,
    litellm.InternalServerError,
    litellm.ServiceUnavailableError,
    litellm.BadGatewayError,
    litellm.APIConnectionError,  # includes litellm.Timeout
)


def api_encoder(model: str, batch_size: int = 64, max_attempts: int = 6, **embed_kwargs) -> Encoder:
    """``texts -> L2-normalised float32 rows`` via ``litellm.embedding``, in batches."""

    @retry(
        retry=retry_if_exception_type(RETRYABLE),
        wait=wait_exponential(multiplier=1, min=1, max=60),
        stop=stop_after_attempt(max_attempts),
        reraise=True,
    )
    def embed_batch(batch: list[str]) -> list[list[float]]:
        response = litellm.embedding(model=model, input=batch, **embed_kwargs)
        data = sorted(response.data, key=lambda e: e["index"])  # order is not guaranteed
        if len(data) != len(batch):
            raise ValueError(f"{model} returned {len(data)} embeddings for {len(batch)} texts")
        return [e["embedding"] for e in data]

    def encode(texts: list[str]) -> np.ndarray:
        # OpenAI-style endpoints reject empty strings.
        texts = [t if t.strip() else " " for t in texts]
        rows: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            rows.extend(embed_batch(texts[start : start + batch_size]))
        emb = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    return encode


def build_api_dense(
    corpus: dict[str, str],
    model: str,
    task_name: str | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
    batch_size: int = 64,
    **embed_kwargs,
) -> DenseIndex:
    """A DenseIndex over ``corpus`` embedded by the litellm model ``model``.

    ``embed_kwargs`` (e.g. ``dimensions=1024``, ``api_base=...``) go to every call;
    ``dimensions`` changes the vectors, so it is part of the cache key.
    """
    suffix = f"|dimensions={embed_kwargs['dimensions']}" if "dimensions" in embed_kwargs else ""
    return build_index(
        corpus,
        f"api:{model}{suffix}",
        api_encoder(model, batch_size, **embed_kwargs),
        instructions_for(model, task_name),
        cache_dir,
        progress,
    )
