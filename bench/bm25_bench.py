"""Time and size our sparse BM25 against rank_bm25 and bm25s on a synthetic corpus.

    python bench/bm25_bench.py [--docs 60000] [--queries 200] [--rank-bm25-queries 3] [--smoke]

Documents (~150 words) and queries (200 words) are drawn from one Zipfian vocabulary whose
head is English stopwords, with a fixed seed. Each system runs in its own forked process, so
"peak MB" is that process's ru_maxrss minus its RSS when it started: the memory its index
build and queries added, C allocations included. Query times are per query, one at a time,
text in and top-100 out, analysis included; "scoring only" starts from analysed tokens.

``--smoke`` runs every system and prints every line at tiny sizes in a few seconds, so the test
suite keeps the script working; its figures measure nothing. A system whose library is not
installed (bm25s's numba backend needs numba) is reported in one line and left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from retrievers import bm25  # noqa: E402

STOPWORDS = (
    "the of and to a in is that for it as was with be by on not this are or at from but an "
    "they which will if their there no such into then these"
).split()


def synthetic(
    n_docs: int, n_queries: int, seed: int = 0, n_words: int = 200_000
) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 12, size=n_words)
    words = ["".join(rng.choice(letters, size=n)) for n in lengths]
    words[: len(STOPWORDS)] = STOPWORDS
    vocab = np.array(words)
    p = 1.0 / np.arange(1, n_words + 1) ** 1.07
    p /= p.sum()

    def texts(n: int, sizes: np.ndarray) -> list[str]:
        ids = rng.choice(n_words, size=int(sizes.sum()), p=p)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        return [" ".join(vocab[ids[a:b]]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    docs = texts(n_docs, rng.integers(100, 201, size=n_docs))
    queries = texts(n_queries, np.full(n_queries, 200))
    return docs, queries


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _in_child(target, *args) -> dict:
    """Run target(*args) -> dict in a forked process and add its peak-memory delta."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def run():
        start = _rss_mb()
        try:
            result = target(*args)
        except BaseException:
            # Sent back, not raised here: a child that dies without sending leaves recv() to
            # wait forever.
            child.send({"error": traceback.format_exc()})
            return
        result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - start
        child.send(result)

    proc = ctx.Process(target=run)
    proc.start()
    child.close()
    try:
        result = parent.recv()
    except EOFError:  # killed before it could send anything (e.g. out of memory)
        proc.join()
        result = {"error": f"the child process died with exit code {proc.exitcode}"}
    proc.join()
    if "error" in result:
        raise SystemExit(f"{target.__name__} failed in its child process:\n{result['error']}")
    return result


def _median_ms(fn, items) -> float:
    times = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def run_ours(method: str, docs: list[str], queries: list[str]) -> dict:
    corpus = {f"d{i}": text for i, text in enumerate(docs)}
    analysis = []
    real_analyze_many = bm25.analyze_many

    def timed_analyze_many(texts: list[str]) -> list[list[str]]:
        t = time.perf_counter()
        tokens = real_analyze_many(texts)
        analysis.append(time.perf_counter() - t)
        return tokens

    bm25.analyze_many = timed_analyze_many  # only in this forked process
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        index = bm25.build_bm25(corpus, method, cache_dir=Path(tmp), progress=False)
        t1 = time.perf_counter()
        bm25.build_bm25(corpus, method, cache_dir=Path(tmp), progress=False)
        t2 = time.perf_counter()
    bm25.analyze_many = real_analyze_many
    t = time.perf_counter()
    bm25.index_fingerprint(list(corpus), docs, method, index.params)
    fingerprint_s = time.perf_counter() - t
    analysis_s = sum(analysis)
    query_tokens = bm25.analyze_many(queries)
    return {
        "build_s": t1 - t0,
        "detail": f"analysis {analysis_s:.1f}s + fingerprint {fingerprint_s:.1f}s + matrix and "
        f"save {t1 - t0 - analysis_s - fingerprint_s:.1f}s; load from cache {t2 - t1:.2f}s",
        "query_ms": _median_ms(index.search, queries),
        "scoring_ms": _median_ms(index.search_tokens, query_tokens),
        "queries_timed": len(queries),
    }


def run_rank_bm25(docs: list[str], queries: list[str], n_timed: int) -> dict:
    from rank_bm25 import BM25Okapi

    t0 = time.perf_counter()
    tokens = bm25.analyze_many(docs)
    t1 = time.perf_counter()
    index = BM25Okapi(tokens)
    t2 = time.perf_counter()
    query_tokens = bm25.analyze_many(queries[:n_timed])

    def search(q: list[str]) -> None:
        scores = index.get_scores(q)
        top = np.argpartition(-scores, 100)[:100]
        top[np.argsort(-scores[top])]

    return {
        "build_s": t2 - t0,
        "detail": f"our analysis {t1 - t0:.1f}s + BM25Okapi {t2 - t1:.1f}s",
        "query_ms": None,
        "scoring_ms": _median_ms(search, query_tokens),
        "queries_timed": n_timed,
    }


def run_bm25s(backend: str, docs: list[str], queries: list[str]) -> dict:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    t0 = time.perf_counter()
    corpus_tokens = bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False)
    t1 = time.perf_counter()
    retriever = bm25s.BM25(method="lucene", k1=0.9, b=0.4, backend=backend)
    retriever.index(corpus_tokens, show_progress=False)
    t2 = time.perf_counter()
    query_tokens = bm25s.tokenize(
        queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )

    def retrieve(tokens: list[str]) -> None:
        retriever.retrieve([tokens], k=100, show_progress=False, n_threads=1)

    def search(text: str) -> None:
        q = bm25s.tokenize(
            [text], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        retriever.retrieve(q, k=100, show_progress=False, n_threads=1)

    retrieve(query_tokens[0])  # numba compiles on first use
    return {
        "build_s": t2 - t0,
        "detail": f"bm25s.tokenize {t1 - t0:.1f}s + index {t2 - t1:.1f}s",
        "query_ms": _median_ms(search, queries),
        "scoring_ms": _median_ms(retrieve, query_tokens),
        "queries_timed": len(queries),
    }


# What each system needs beyond our own dependencies; a missing one skips only its row.
NEEDS = {"bm25s numpy": ("bm25s",), "bm25s numba": ("bm25s", "numba"), "rank_bm25": ("rank_bm25",)}
SMOKE = {"docs": 300, "queries": 5, "rank_bm25_queries": 2, "vocabulary": 5_000}


def missing_modules(system: str) -> list[str]:
    return [m for m in NEEDS.get(system, ()) if importlib.util.find_spec(m) is None]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=60_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rank-bm25-queries", type=int, default=3)
    parser.add_argument("--vocabulary", type=int, default=200_000, help="distinct words")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, a few seconds: checks the script runs"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
        print("smoke run: tiny sizes, every system and line, figures meaningless")

    t = time.perf_counter()
    docs, queries = synthetic(args.docs, args.queries, n_words=args.vocabulary)
    n_words = sum(d.count(" ") + 1 for d in docs)
    print(
        f"corpus: {len(docs)} docs, {n_words / len(docs):.0f} words/doc, {len(queries)} queries "
        f"of 200 words (generated in {time.perf_counter() - t:.1f}s); analyzer {bm25.ANALYZER_ID}"
    )
    systems = {
        "ours bm25q": (run_ours, "bm25q", docs, queries),
        "ours lucene": (run_ours, "lucene", docs, queries),
        "ours okapi": (run_ours, "okapi", docs, queries),
        "bm25s numpy": (run_bm25s, "numpy", docs, queries),
        "bm25s numba": (run_bm25s, "numba", docs, queries),
        "rank_bm25": (run_rank_bm25, docs, queries, args.rank_bm25_queries),
    }
    results = {}
    for name, (target, *target_args) in systems.items():
        missing = missing_modules(name)
        if missing:
            print(f"skipped {name}: {', '.join(missing)} not installed")
            continue
        results[name] = _in_child(target, *target_args)

    print(f"\n{'system':<13}{'build s':>9}{'query ms':>10}{'scoring ms':>12}{'peak MB':>9}  detail")
    for name, r in results.items():
        query = f"{r['query_ms']:.2f}" if r["query_ms"] is not None else "-"
        print(
            f"{name:<13}{r['build_s']:>9.1f}{query:>10}{r['scoring_ms']:>12.2f}"
            f"{r['peak_mb']:>9.0f}  {r['detail']} [{r['queries_timed']} queries timed]"
        )
    print(
        "\nquery ms: median per query, text in, top-100 out; scoring ms: same from analysed "
        "tokens.\npeak MB: ru_maxrss of the forked process minus its RSS at fork time."
    )

    others = [n for n in ("bm25s numpy", "bm25s numba", "rank_bm25") if n in results]
    print("\nratios (>1 means ours is faster or smaller):")
    for ours in ("ours bm25q", "ours lucene"):
        o = results[ours]
        for other in others:
            r = results[other]
            print(
                f"  {ours} vs {other:<12} build {r['build_s'] / o['build_s']:6.2f}x   "
                f"scoring {r['scoring_ms'] / o['scoring_ms']:8.1f}x   "
                f"peak memory {r['peak_mb'] / max(o['peak_mb'], 1):5.2f}x"
            )

    o = results["ours bm25q"]
    print("\ntargets (ours bm25q):")
    print(f"  build <= 15 s: {o['build_s']:.1f} s -> {'OK' if o['build_s'] <= 15 else 'MISSED'}")
    for other in [n for n in others if n.startswith("bm25s")]:
        r = results[other]
        ok = o["query_ms"] <= r["query_ms"] and o["scoring_ms"] <= r["scoring_ms"]
        print(
            f"  median query <= {other}: {o['query_ms']:.2f} vs {r['query_ms']:.2f} ms "
            f"(scoring {o['scoring_ms']:.2f} vs {r['scoring_ms']:.2f}) "
            f"-> {'OK' if ok else 'MISSED'}"
        )
    if "rank_bm25" in results:
        speedup = results["rank_bm25"]["scoring_ms"] / o["scoring_ms"]
        print(
            f"  >= 100x faster than rank_bm25: {speedup:.0f}x -> "
            f"{'OK' if speedup >= 100 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
