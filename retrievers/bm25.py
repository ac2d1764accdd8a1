"""BM25 over a scipy sparse term-document matrix, with an on-disk index cache.

Three scoring variants share one index layout: a CSR matrix with one row of postings per
term (documents as columns), holding each (term, document) pair's precomputed weight.
A query gathers its terms' rows and takes one sparse matrix-vector product with its per-term
weights. A document is ranked iff it *matches*: it holds at least one of the query's analysed
terms (a posting in one of the gathered rows), the same rule for every method and whatever
its score's sign. A document that matches nothing is never ranked; one that matches keeps its
score, negative or zero included, so a variant whose idf can be negative (``okapi``) still
ranks what it scored. For ``bm25q`` and ``lucene`` every idf is positive, so a match always
scores above 0 there.

- ``bm25q`` (default): what R2MED's (and BRIGHT's) ``retrieval_bm25`` computes with gensim,
  ``LuceneBM25Model(k1=0.9, b=0.4)`` applied to the documents *and* to the query's bag of
  words, scored by an unnormalised dot product in float32. Reproduced bit for bit (same
  term ids, same float64 weight expression, same float32 summation order). Because the query
  goes through the same model, every matching term counts ``idf**2`` and the query's own
  term frequencies get the BM25 saturation, normalised by the query length over ``avgdl``.
- ``lucene``: Lucene's ``BM25Similarity`` (Lucene >= 8, no ``(k1 + 1)`` factor, as in
  Anserini/pyserini): ``sum_t qtf * idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` with
  ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``. Like Lucene, document lengths go through
  the one-byte norm encoding (``SmallFloat.intToByte4``, exact below 24 tokens), and ``N``
  and ``avgdl`` count only documents that have at least one token.
- ``okapi``: rank_bm25's ``BM25Okapi`` (k1=1.5, b=0.75, negative idfs floored at
  ``epsilon * mean idf``), stored in float64 so scores equal rank_bm25's. A term in more than
  half the documents has a negative idf, and when most terms are that common the mean (and
  so the floor) is negative too: such matches score below 0 and are ranked all the same,
  after every positive score. (rank_bm25's ``get_scores`` also gives 0 to documents that
  match nothing; those are not ranked here, under any method.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
import zipfile
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from eval.plumbing.files import create_temp_dir
from eval.plumbing.fingerprint import corpus_fingerprint
from eval.plumbing.progress import progress_bar

from .analyzer import ANALYZER_ID, analyze, analyze_many
from .settings import BM25_DEFAULTS, BM25_METHODS

logger = logging.getLogger(__name__)

# Bump when the on-disk layout or any scoring detail changes: old caches then miss.
FORMAT_VERSION = 1
# float32 is what gensim's SparseMatrixSimilarity (and Lucene) score in; rank_bm25 uses float64.
_DTYPES = {"bm25q": np.float32, "lucene": np.float32, "okapi": np.float64}
# gensim's Dictionary prunes its vocabulary to this many terms while it is being built.
_GENSIM_PRUNE_AT = 2_000_000
_ANALYZE_CHUNK = 1000


@dataclass
class BM25Index:
    doc_ids: list[str]
    fingerprint: str
    method: str
    params: dict[str, float]
    vocab: dict[str, int]
    postings: sp.csr_matrix  # terms x documents, precomputed per-pair weights
    idf: np.ndarray  # float64, per term id; the bm25q query side needs it
    avgdl: float

    def query_weights(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Term ids (ascending) and weights of an analysed query; unknown terms are dropped."""
        counts = Counter(self.vocab[t] for t in tokens if t in self.vocab)
        if not counts:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        term_ids = np.array(sorted(counts), dtype=np.int64)
        qtf = np.array([counts[t] for t in term_ids], dtype=np.int64)
        if self.method != "bm25q":
            # Lucene and rank_bm25 both add a repeated query term once per occurrence.
            return term_ids, qtf.astype(np.float64)
        # gensim's LuceneBM25Model.get_term_weights on the query's bag of words, written in the
        # same operation order so the float64 weights are identical.
        k1, b = self.params["k1"], self.params["b"]
        qlen = int(qtf.sum())
        return term_ids, self.idf[term_ids] * (qtf / (qtf + k1 * (1 - b + b * qlen / self.avgdl)))

    def search_tokens(self, tokens: list[str], k: int = 100) -> dict[str, float]:
        """Top-k documents for an already analysed query, best first."""
        term_ids, weights = self.query_weights(tokens)
        if len(term_ids) == 0 or k <= 0:
            return {}
        # Gather the query terms' posting rows, then one sparse matrix-vector product adds them
        # term by term in ascending term id, in float32 for float32 weights: the order and
        # precision of gensim's sparse product, so bm25q scores match it to the last bit.
        rows = self.postings[term_ids]
        scores = rows.T @ weights.astype(self.postings.dtype)
        # Matching is having a posting, not scoring > 0: a negative or zero idf (okapi) must
        # not make a matching document vanish. The rows keep stored zeros (scipy does not
        # drop them on indexing), so a term whose weight is 0 still matches.
        hit = np.zeros(len(self.doc_ids), dtype=bool)
        hit[rows.indices] = True
        matched = np.flatnonzero(hit)
        docs, values = _top_k(matched, scores[matched], k)
        return {self.doc_ids[d]: float(v) for d, v in zip(docs, values, strict=True)}

    def search(self, query: str, k: int = 100) -> dict[str, float]:
        """Top-k documents for ``query`` as {doc_id: score}, ordered by decreasing score."""
        return self.search_tokens(analyze(query), k)

    def search_many(
        self, queries: dict[str, str], k: int = 100, progress: bool = True
    ) -> dict[str, dict[str, float]]:
        """{query_id: {doc_id: score}} for every query: the pytrec_eval run format."""
        tokenized = analyze_many(list(queries.values()))
        bar = progress_bar(
            zip(queries, tokenized, strict=True),
            total=len(queries),
            desc="BM25 search",
            file=sys.stderr,
            disable=not progress,
        )
        return {qid: self.search_tokens(tokens, k) for qid, tokens in bar}


def _top_k(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (doc, score) pairs, ties broken by doc order.

    The tie rule is the one R2MED's stable ``sorted(..., reverse=True)`` applies, and it
    also decides which tied documents make the cut at rank k.
    """
    if len(scores) > k:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        above = scores > threshold
        ties = np.flatnonzero(scores == threshold)
        ties = ties[np.argsort(docs[ties], kind="stable")[: k - int(above.sum())]]
        keep = np.concatenate([np.flatnonzero(above), ties])
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))
    return docs[order], scores[order]


def resolve_params(
    method: str, k1: float | None = None, b: float | None = None
) -> dict[str, float]:
    """The method's default parameters with any given k1/b swapped in."""
    if method not in BM25_DEFAULTS:
        raise ValueError(f"unknown BM25 method {method!r}; choose from {BM25_METHODS}")
    params = dict(BM25_DEFAULTS[method])
    if k1 is not None:
        params["k1"] = float(k1)
    if b is not None:
        params["b"] = float(b)
    return params


def index_fingerprint(
    doc_ids: list[str], texts: list[str], method: str, params: dict[str, float]
) -> str:
    """sha256 over everything an index depends on: texts in order, analyzer, method, params."""
    header = {"format": FORMAT_VERSION, "analyzer": ANALYZER_ID, "method": method, "params": params}
    return corpus_fingerprint(doc_ids, texts, header)


def build_bm25(
    corpus: dict[str, str],
    method: str = "bm25q",
    k1: float | None = None,
    b: float | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> BM25Index:
    """Index ``corpus`` ({doc_id: text}), reusing a cached index from ``cache_dir`` if present."""
    params = resolve_params(method, k1, b)
    doc_ids = list(corpus)
    texts = [corpus[d] for d in doc_ids]
    fingerprint = index_fingerprint(doc_ids, texts, method, params)
    path = Path(cache_dir) / f"bm25-{fingerprint[:24]}" if cache_dir is not None else None
    if path is not None and os.path.lexists(path):  # a file or dangling link in the way too
        index = load_index(path, fingerprint)
        if index is not None:
            return index
    tokens = _analyze_stream(texts, progress)
    index = build_bm25_from_tokens(doc_ids, tokens, method, params["k1"], params["b"], fingerprint)
    if path is not None:
        save_index(index, path)
    return index


def _analyze_stream(texts: list[str], progress: bool) -> Iterator[list[str]]:
    # Analysed in chunks and consumed as they come, so the corpus's token strings never all
    # sit in memory at once; only their integer term ids do.
    with progress_bar(
        total=len(texts), desc="BM25 analysing", unit="doc", file=sys.stderr, disable=not progress
    ) as bar:
        for start in range(0, len(texts), _ANALYZE_CHUNK):
            chunk = texts[start : start + _ANALYZE_CHUNK]
            yield from analyze_many(chunk)
            bar.update(len(chunk))


def build_bm25_from_tokens(
    doc_ids: list[str],
    tokens: Iterable[list[str]],
    method: str = "bm25q",
    k1: float | None = None,
    b: float | None = None,
    fingerprint: str = "",
) -> BM25Index:
    """Index already analysed documents (no cache); ``build_bm25`` is the usual entry point."""
    params = resolve_params(method, k1, b)
    vocab, term_of_token, dl = _term_ids(tokens)
    n_docs, n_terms = len(dl), len(vocab)
    if len(doc_ids) != n_docs:
        raise ValueError(f"{len(doc_ids)} doc ids but {n_docs} token lists")
    if n_docs == 0:
        raise ValueError("cannot index an empty corpus")
    if method == "bm25q" and n_terms > _GENSIM_PRUNE_AT:
        logger.warning(
            "%d distinct terms: gensim's Dictionary would have pruned to %d, so bm25q scores "
            "will differ slightly from R2MED's",
            n_terms,
            _GENSIM_PRUNE_AT,
        )
    # Sorting (term, doc) keys groups postings by term with documents ascending: CSR order.
    keys = term_of_token * n_docs + np.repeat(np.arange(n_docs, dtype=np.int64), dl)
    del term_of_token  # one int64 per token: free it before np.unique copies the keys
    pairs, tf = np.unique(keys, return_counts=True)
    del keys
    term, doc = np.divmod(pairs, n_docs)
    df = np.bincount(term, minlength=n_terms)
    indptr = np.concatenate([[0], np.cumsum(df)])
    weights, idf, avgdl = _WEIGHTS[method](tf, dl[doc], df, term, dl, params)
    index_dtype = np.int32 if max(n_docs, len(pairs)) < 2**31 else np.int64
    postings = sp.csr_matrix(
        (
            weights.astype(_DTYPES[method]),
            doc.astype(index_dtype),
            indptr.astype(index_dtype),
        ),
        shape=(n_terms, n_docs),
    )
    return BM25Index(list(doc_ids), fingerprint, method, params, vocab, postings, idf, avgdl)


def _term_ids(tokens: Iterable[list[str]]) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """Vocabulary, the term id of every token in corpus order, and document lengths.

    Ids are assigned as gensim's Dictionary does: per document, new terms in sorted order.
    Sharing gensim's ids makes scipy add a document's terms in gensim's order, which is what
    makes float32 bm25q scores identical rather than merely close.
    """
    vocab: dict[str, int] = {}
    ids, lengths = array("q"), array("q")
    for doc in tokens:
        for term in sorted(set(doc).difference(vocab)):
            vocab[term] = len(vocab)
        ids.extend(map(vocab.__getitem__, doc))
        lengths.append(len(doc))
    return vocab, np.frombuffer(ids, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64)


def _bm25q_weights(tf, dl_of_pair, df, term, dl, params):
    # gensim LuceneBM25Model: idf = ln(N + 1) - ln(df + 0.5) (math.log, as gensim does), and
    # get_term_weights' expression, evaluated in the same order so float64 results agree.
    k1, b = params["k1"], params["b"]
    n_docs = len(dl)
    avgdl = int(dl.sum()) / n_docs
    idf = np.array([math.log(n_docs + 1.0) - math.log(f + 0.5) for f in df.tolist()])
    norm = k1 * (1 - b + b * dl_of_pair / avgdl)
    return idf[term] * (tf / (tf + norm)), idf, avgdl


def _lucene_weights(tf, dl_of_pair, df, term, dl, params):
    k1, b = params["k1"], params["b"]
    n_docs = max(int(np.count_nonzero(dl)), 1)  # Lucene's docCount: docs with the field
    avgdl = int(dl.sum()) / n_docs
    idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    norm = k1 * (1 - b + b * lucene_norm_length(dl_of_pair) / avgdl)
    return idf[term] * (tf / (tf + norm)), idf, avgdl


def _okapi_weights(tf, dl_of_pair, df, term, dl, params):
    # rank_bm25 BM25Okapi._calc_idf, including its floor for negative idfs.
    k1, b, epsilon = params["k1"], params["b"], params["epsilon"]
    n_docs = len(dl)
    avgdl = int(dl.sum()) / n_docs
    idf = np.array([math.log(n_docs - f + 0.5) - math.log(f + 0.5) for f in df.tolist()])
    if len(idf):
        idf[idf < 0] = epsilon * (math.fsum(idf.tolist()) / len(idf))
    norm = k1 * (1 - b + b * dl_of_pair / avgdl)
    return idf[term] * (tf * (k1 + 1) / (tf + norm)), idf, avgdl


_WEIGHTS = {"bm25q": _bm25q_weights, "lucene": _lucene_weights, "okapi": _okapi_weights}


def _int_to_int4(i: np.ndarray) -> np.ndarray:
    # Lucene SmallFloat.longToInt4: keep the 4 most significant bits plus a shift.
    num_bits = np.frexp(i.astype(np.float64))[1].astype(np.int64)  # bit_length, exact < 2**53
    shift = np.maximum(num_bits - 4, 0)
    encoded = ((i >> shift) & 0x07) | ((shift + 1) << 3)
    return np.where(num_bits < 4, i, encoded)


def _int4_to_int(i: np.ndarray) -> np.ndarray:
    shift = (i >> 3) - 1
    return np.where(shift < 0, i & 0x07, ((i & 0x07) | 0x08) << np.maximum(shift, 0))


_NUM_FREE_VALUES = 255 - int(_int_to_int4(np.array([2**31 - 1]))[0])  # 24


def lucene_norm_length(dl: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene's BM25Similarity sees them after its one-byte norm.

    SmallFloat.intToByte4 followed by byte4ToInt: exact below 24, then 4 significant bits.
    """
    dl = np.asarray(dl, dtype=np.int64)
    small = dl < _NUM_FREE_VALUES
    big = np.maximum(dl - _NUM_FREE_VALUES, 0)
    decoded = _NUM_FREE_VALUES + _int4_to_int(_int_to_int4(big))
    return np.where(small, dl, decoded)


# --- on-disk cache: a directory per fingerprint holding index.npz and meta.json ---
# meta.json's checksum covers the arrays and the rest of meta.json, so an index that was
# edited (meta.json's avgdl, say) is rebuilt rather than silently scoring otherwise.


def save_index(index: BM25Index, path: Path) -> None:
    """Write ``index`` to the directory ``path`` atomically (temp dir, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = create_temp_dir(path.parent, prefix=f".{path.name}.")  # umask mode, not 0700
    try:
        arrays = _arrays(index)
        np.savez(tmp / "index.npz", **arrays)
        meta = {
            "format": FORMAT_VERSION,
            "fingerprint": index.fingerprint,
            "analyzer": ANALYZER_ID,
            "method": index.method,
            "params": index.params,
            "avgdl": index.avgdl,
            "shape": list(index.postings.shape),
        }
        meta["checksum"] = _checksum(meta, arrays)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if path.is_dir():  # another process saved the same index meanwhile: keep it
            return
        os.rename(tmp, path)
    except OSError as err:
        logger.warning("could not save BM25 index to %s (%s)", path, err)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _arrays(index: BM25Index) -> dict[str, np.ndarray]:
    """What index.npz holds."""
    vocab_blob, vocab_offsets = _pack_strings(list(index.vocab))
    ids_blob, ids_offsets = _pack_strings(index.doc_ids)
    return {
        "data": index.postings.data,
        "indices": index.postings.indices,
        "indptr": index.postings.indptr,
        "idf": index.idf,
        "vocab_blob": vocab_blob,
        "vocab_offsets": vocab_offsets,
        "ids_blob": ids_blob,
        "ids_offsets": ids_offsets,
    }


def _checksum(meta: Mapping[str, object], arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 over meta.json (but its checksum) and every array's name, dtype, shape and
    bytes: the cheapest check that catches any edit, however well formed."""
    digest = hashlib.sha256()
    rest = {key: value for key, value in meta.items() if key != "checksum"}
    digest.update(json.dumps(rest, sort_keys=True).encode())
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"\n{name} {array.dtype.str} {array.shape}\n".encode())
        digest.update(array.data)
    return digest.hexdigest()


def load_index(path: Path, fingerprint: str) -> BM25Index | None:
    """The index cached at ``path``, or None if it is unreadable, stale or edited: then it is
    moved aside (``<path>.corrupt-<time>-<pid>``) with one warning, for the caller to rebuild."""
    path = Path(path)
    try:
        if not path.is_dir():
            raise ValueError("not a folder")
        meta = json.loads((path / "meta.json").read_text())
        if meta["format"] != FORMAT_VERSION or meta["fingerprint"] != fingerprint:
            raise ValueError("cached index belongs to a different corpus or version")
        with np.load(path / "index.npz", allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        if "checksum" not in meta:
            raise ValueError("no checksum in its meta.json (an older version wrote it)")
        if meta["checksum"] != _checksum(meta, arrays):
            raise ValueError("its contents do not match the checksum in its meta.json")
        n_terms, n_docs = meta["shape"]
        vocab_list = _unpack_strings(arrays["vocab_blob"], arrays["vocab_offsets"])
        doc_ids = _unpack_strings(arrays["ids_blob"], arrays["ids_offsets"])
        if len(vocab_list) != n_terms or len(doc_ids) != n_docs or len(arrays["idf"]) != n_terms:
            raise ValueError("cached index arrays have inconsistent sizes")
        postings = sp.csr_matrix(
            (arrays["data"], arrays["indices"], arrays["indptr"]), shape=(n_terms, n_docs)
        )
        postings.check_format(full_check=True)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as err:
        aside = _move_aside(path)
        kept = f"; moved to {aside.name}" if aside is not None else ""
        logger.warning("rebuilding BM25 index: cache at %s unusable (%s)%s", path, err, kept)
        return None
    vocab = {term: i for i, term in enumerate(vocab_list)}
    return BM25Index(
        doc_ids,
        fingerprint,
        meta["method"],
        meta["params"],
        vocab,
        postings,
        arrays["idf"],
        meta["avgdl"],
    )


def _move_aside(path: Path) -> Path | None:
    """Rename an unusable cache entry out of the way (kept, as the LLM cache keeps its own, for
    whoever edited it); None when it could not be (another process moved it first)."""
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}-{os.getpid()}")
    try:
        os.rename(path, aside)
    except OSError:
        return None
    return aside


def _pack_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    # One UTF-8 blob plus character offsets: compact, and loadable without pickle.
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)), out=offsets[1:])
    return np.frombuffer("".join(strings).encode(), dtype=np.uint8), offsets


def _unpack_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    text = blob.tobytes().decode()
    if len(text) != offsets[-1]:
        raise ValueError("string table does not match its offsets")
    bounds = offsets.tolist()
    return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
