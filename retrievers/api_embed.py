"""Dense retrieval with an API embedding model through litellm (e.g. text-embedding-3-large).

The corpus embeddings go through the same cache as local models (``dense.build_index``), so
a corpus is paid for once per model; queries are embedded on every search. Calls are batched
and retried with exponential backoff on rate limits, 5xx errors, timeouts and dropped
connections; other errors (bad key, unknown model, input too long) fail at once. Every attempt
waits at most its ``timeout`` (``transport``: the run's ``--timeout``; one in ``params`` wins);
a batch whose every attempt timed out or found no server fails with one line naming the
server. ``transport`` options change no vector and are no part of the cache identity.

The two API embedders R2MED runs are called as its ``RetrievalOPENAI`` calls them (R2MED's
src/utils.py L681-809; their family in ``families.json``): each text cut to 6,000
``cl100k_base`` tokens (text-embedding-3-large) or 16,000 of the model's own tokenizer
(Voyage), newlines replaced by spaces and the text sent JSON-quoted (L776), and Voyage told
whether it embeds a query or a document (``input_type``, L792). Any other model's texts are
sent as they are. Under R2MED's rules (``dense.r2med_rules``, on under ``--preset paper``) a
family with ``retry_cuts`` (text-embedding-3-large) sends a batch whose request failed again with
its texts cut shorter, as R2MED's loop does (L777-804; `api_encoder`); its corpus embeddings
are keyed apart and read from a run without the rules, whose requests all succeeded at once.

``api_base`` and ``params`` (extra litellm arguments such as ``dimensions`` or ``input_type``)
go to every call. Everything that can change the vectors is in the cache key: every param
except the transport-only ones in `TRANSPORT_PARAMS`, and a hash of ``api_base`` (two servers
can serve different models under one name; the hash keeps a URL, and any token in it, out of
the cache's meta.json). With neither, the key is what it was before they existed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.plumbing.lazy import load_litellm
from eval.plumbing.retry import DEFAULT_TIMEOUT_S, EMBED_ATTEMPTS, EMBED_BACKOFF, retrying
from eval.plumbing.secrets.api_keys import placeholder_key
from eval.plumbing.secrets.credentials import public_url

from .dense import DenseIndex, build_index
from .encoders import Encoder
from .families import Family, family_for, family_instructions
from .settings import API_BATCH_SIZE

# Params that change how a request travels, never the vectors that come back.
TRANSPORT_PARAMS = frozenset({"timeout", "max_retries", "num_retries", "extra_headers"})


class EmbeddingUnavailable(ValueError):
    """The embedding server stopped answering; the message names it (one line)."""


def api_encoder(
    model: str,
    batch_size: int = API_BATCH_SIZE,
    max_attempts: int = EMBED_ATTEMPTS,
    api_base: str | None = None,
    params: Mapping[str, Any] | None = None,
    transport: Mapping[str, Any] | None = None,
    family: Family | None = None,
    retry_cuts: Sequence[int] = (),
) -> Encoder:
    """``(texts, instruction, role) -> L2-normalised float32 rows`` via ``litellm.embedding``,
    in batches; ``family`` (openai, voyage) prepares texts as R2MED's code does.

    ``retry_cuts`` (a family's, under R2MED's rules): a batch whose request fails is sent again
    with every text (as sent: flattened and JSON-quoted) cut to each of these token counts in
    turn, as R2MED's ``RetrievalOPENAI.encode`` does (src/utils.py L777-804: any exception,
    500 tokens fewer each time, the fifth failure ends its run); the last failure is raised.
    A server that does not answer (connection refused, timed out) fails at once instead: a
    shorter text cannot make it answer, where R2MED would retry until it exits.
    """
    # litellm takes ~3 s to import: a run that builds no API embedder (or only reads this
    # module's defaults) does not pay for it.
    litellm = load_litellm()
    retryable = (
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
        litellm.Timeout,  # not an APIConnectionError of litellm's (it is the OpenAI SDK's)
    )
    embed_kwargs = {"timeout": DEFAULT_TIMEOUT_S, **(transport or {}), **(params or {})}
    if api_base is not None:
        embed_kwargs["api_base"] = api_base

    def embed_batch(batch: list[str], role_kwargs: dict[str, Any]) -> list[list[float]]:
        return retrying(EMBED_BACKOFF, max_attempts, retryable)(embed_once, batch, role_kwargs)

    def embed_once(batch: list[str], role_kwargs: dict[str, Any]) -> list[list[float]]:
        response = litellm.embedding(model=model, input=batch, **role_kwargs, **embed_kwargs)
        data = sorted(response.data, key=lambda e: e["index"])  # order is not guaranteed
        if len(data) != len(batch):
            raise ValueError(f"{model} returned {len(data)} embeddings for {len(batch)} texts")
        return [e["embedding"] for e in data]

    def unavailable(exc: BaseException) -> bool:
        if isinstance(exc, litellm.APIConnectionError | litellm.Timeout):
            return True
        no_server = ("Connection error", "Cannot connect to host", "Connection refused")
        return isinstance(exc, litellm.InternalServerError) and any(
            m in str(exc) for m in no_server
        )

    prepare = r2med_texts(family, model) if family is not None and family.is_api else None
    cut_to = _cutter(family, model) if family is not None and retry_cuts else None

    def embed_cut(batch: list[str], role_kwargs: dict[str, Any]) -> list[list[float]]:
        for n, cut in enumerate((None, *retry_cuts)):
            if cut is not None and cut_to is not None:
                batch = [cut_to(t, cut) for t in batch]
            try:
                return embed_batch(batch, role_kwargs)
            except Exception as exc:
                if n == len(retry_cuts) or unavailable(exc):
                    if n:
                        cuts = ", ".join(str(c) for c in retry_cuts)
                        exc.add_note(f"api:{model}: sent again cut to {cuts} tokens, as R2MED")
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        texts = [instruction + t for t in texts]
        if prepare is not None:
            texts = prepare(texts)
        # OpenAI-style endpoints reject empty strings.
        texts = [t if t.strip() else " " for t in texts]
        role_kwargs = {}
        if family is not None and family.loader == "voyage" and "input_type" not in embed_kwargs:
            role_kwargs["input_type"] = "document" if role == "doc" else "query"
        rows: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            try:
                rows.extend(embed_cut(texts[start : start + batch_size], role_kwargs))
            except retryable as exc:
                if not unavailable(exc):
                    raise
                where = _host(api_base) or "its provider's API"
                why = (
                    f"no answer within {embed_kwargs['timeout']:g} s"
                    if isinstance(exc, litellm.Timeout)
                    else "no server answered"
                )
                raise EmbeddingUnavailable(
                    f"api:{model} at {where}: {why} in {max_attempts} attempts; is the "
                    "embedding server up? (--timeout sets the wait)"
                ) from None
        emb = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    return encode


def r2med_texts(family: Family, model: str):
    """What R2MED's ``RetrievalOPENAI.encode`` sends for each text (src/utils.py L756-776):
    cut to ``family.cut_tokens`` tokens, newlines replaced by spaces, JSON-quoted."""
    import json as json_module

    count, decode = _tokenizer(family, model)
    limit = family.cut_tokens

    def cut(text: str) -> str:
        ids = count(text)
        return decode(ids[:limit]) if limit and len(ids) > limit else text

    def prepare(texts: list[str]) -> list[str]:
        return [json_module.dumps(cut(t).replace("\n", " ")) for t in texts]

    return prepare


def _cutter(family: Family, model: str):
    """``(text, n) -> text`` cut to its first ``n`` tokens of ``family``'s tokenizer, as
    R2MED's ``cut_text_openai`` cuts (src/utils.py L761-765)."""
    count, decode = _tokenizer(family, model)

    def cut(text: str, limit: int) -> str:
        ids = count(text)
        return decode(ids[:limit]) if len(ids) > limit else text

    return cut


def _tokenizer(family: Family, model: str):
    """(text -> ids, ids -> text) of the tokenizer ``family.tokenizer`` names."""
    kind, _, name = (family.tokenizer or "").partition(":")
    if kind == "tiktoken":
        # litellm ships tiktoken's cl100k_base file; tiktoken would fetch it otherwise.
        load_litellm()
        from litellm.litellm_core_utils import tokenizers

        os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.dirname(tokenizers.__file__))
        import tiktoken

        encoding = tiktoken.get_encoding(name)
        return encoding.encode, encoding.decode
    if kind == "hub":
        from transformers import AutoTokenizer

        # R2MED loads ../voyageai/<model> (src/utils.py L701): the model's hub tokenizer.
        tokenizer = AutoTokenizer.from_pretrained(name.format(model=model.split("/")[-1]))
        return (lambda text: tokenizer(text)["input_ids"]), tokenizer.decode
    raise ValueError(f"{family.name}: unknown tokenizer {family.tokenizer!r}")


def _host(url: str | None) -> str | None:
    """The first of ``url``'s replicas as an error may show it: credentials masked by the
    one URL rule (`eval.plumbing.secrets.credentials.public_url`)."""
    if not url:
        return None
    return public_url(url.split(",")[0].strip())


# an option value written into the cache identity as it is: a number or a word without digits
# ("search_document"); anything else (a key among them) is written as its hash
_PLAIN_WORD = re.compile(r"-?[0-9]+(\.[0-9]+)?|[A-Za-z_.-]{1,32}")


def encoder_id(
    model: str,
    api_base: str | None,
    params: Mapping[str, Any],
    family: Family | None = None,
    retry_cuts: Sequence[int] = (),
) -> str:
    """The cache identity of ``model`` behind ``api_base`` called with ``params`` (and
    ``retry_cuts``, which change the vectors of a batch whose request failed)."""
    parts = [f"api:{model}"]
    if family is not None and family.is_api:
        parts.append(family.recipe())
    if retry_cuts:
        parts.append("retry_cuts=" + "/".join(str(c) for c in retry_cuts))
    for name in sorted(set(params) - TRANSPORT_PARAMS):
        value = params[name]
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        if not _PLAIN_WORD.fullmatch(text):  # it may be a key: the cache's meta.json keeps it
            text = f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        parts.append(f"{name}={text}")
    if api_base is not None:
        # the masked URL: a secret in it must not be recoverable from meta.json by guessing,
        # and a renewed token must not discard the corpus's embeddings
        shown = public_url(api_base) or api_base
        parts.append(f"api_base=sha256:{hashlib.sha256(shown.encode()).hexdigest()[:16]}")
    return "|".join(parts)


def build_api_dense(
    corpus: dict[str, str],
    model: str,
    task_name: str | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
    batch_size: int = API_BATCH_SIZE,
    api_base: str | None = None,
    params: Mapping[str, Any] | None = None,
    transport: Mapping[str, Any] | None = None,
    ignore_identical_ids: bool = True,
    r2med_rules: bool = False,
) -> DenseIndex:
    """A DenseIndex over ``corpus`` embedded by the litellm model ``model``.

    ``api_base`` and ``params`` (e.g. ``{"dimensions": 1024}``) go to every call.
    ``r2med_rules``: a failed request is sent again cut shorter where the family says how
    (``retry_cuts``); the corpus embeddings of a run without them are reused, since every
    request of theirs succeeded at its first cut, as it would have here.
    """
    params = dict(params or {})
    family = family_for(model)
    retry_cuts = family.retry_cuts if r2med_rules else ()
    encode = api_encoder(
        model, batch_size, api_base=api_base, params=params, transport=transport,
        family=family, retry_cuts=retry_cuts,
    )  # fmt: skip
    plain = encoder_id(model, api_base, params, family)
    return build_index(
        corpus,
        encoder_id(model, api_base, params, family, retry_cuts),
        encode,
        family_instructions(family, task_name),
        cache_dir,
        progress,
        ignore_identical_ids=ignore_identical_ids,
        ties=family.ties,
        reuse=(plain,) if retry_cuts else (),
    )


def embedding_transport(config: Any, timeout: float) -> dict[str, Any]:
    """What every embedding API call of ``config``'s retriever gets beside its parameters:
    ``timeout``, and the LLM client's rule for a server that needs no key (a placeholder key
    when the provider's key variable is unset and ``api.api_base`` names a server).
    ``config`` is a `retrievers.config.RetrieverConfig`, not imported here: it reads
    `retrievers.kinds`, whose api builder imports this module."""
    models = [p.arg for p in config.parts if p.kind == "api"]
    return {"timeout": timeout, **placeholder_key(models, config.api.api_base, config.api.params)}
