"""Documents per second of the `cross` rerank stage on this machine, at batch 16, 32 and 64.

    python bench/cross_bench.py [--model PATH_OR_NAME] [--queries 4] [--depth 100] [--smoke]

Each query's top `depth` is `depth` consecutive SciFact documents (real lengths, which is what
the speed depends on); the stage reranks every query once per batch size with no score cache,
after a short warm-up, then once more over a warm cache. Without ``--model`` the model is the
bundled all-MiniLM-L6-v2 with a fresh, seeded one-label head (the shape of an ms-marco MiniLM
cross-encoder; no cross-encoder weights can be downloaded here), so the rates are those of a
6-layer model, not of bge-reranker-v2-m3 (24 layers, several times slower).

``--smoke`` runs every step on 2 queries of depth 8 from the bundled demo (unless ``--data``
is given), in a few seconds, so the test suite keeps the script working; its figures measure
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.config.run_config import typed_options  # noqa: E402
from agents.rerank import StageContext  # noqa: E402
from agents.rerank.cross import CROSS, build_stage  # noqa: E402
from eval.datasets import DEMO_DIR, load_folder  # noqa: E402
from retrievers.dense import resolve_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
BATCH_SIZES = (16, 32, 64)


def tiny_cross_encoder(folder: Path) -> str:
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)  # the head is new: seeded, so two runs time the same model
    model = CrossEncoder(resolve_model("all-MiniLM-L6-v2")[1], num_labels=1, device="cpu")
    model.save(str(folder))
    return str(folder)


def rerank_all(stage, queries: dict[str, str], rankings: dict[str, dict[str, float]]) -> float:
    """Seconds to rerank every query, one after another (as the stage's model lock runs them)."""
    start = time.perf_counter()
    for q, text in queries.items():
        asyncio.run(stage.rerank(q, text, rankings[q]))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="hub name or path (default: a seeded tiny MiniLM head)")
    parser.add_argument("--data", type=Path, help=f"a dataset folder (default: {SCIFACT})")
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, a few seconds: checks the script runs"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.queries, args.depth = 2, 8
        args.data = args.data or DEMO_DIR
        print("smoke run: tiny sizes, every step, figures meaningless")
    if args.threads:
        torch.set_num_threads(args.threads)
    task = load_folder(args.data or (SCIFACT if SCIFACT.is_dir() else DEMO_DIR))
    doc_ids = list(task.corpus)
    queries = dict(list(task.queries.items())[: args.queries])
    rankings = {
        q: {doc_ids[(i * args.depth + r) % len(doc_ids)]: float(args.depth - r)
            for r in range(args.depth)}
        for i, q in enumerate(queries)
    }  # fmt: skip
    pairs = sum(len(r) for r in rankings.values())

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or tiny_cross_encoder(Path(tmp) / "tiny-cross")

        def stage(batch_size: int, cache_dir: Path | None):
            options = {"model": model, "depth": args.depth, "batch_size": batch_size,
                       "max_length": args.max_length, "device": "cpu"}  # fmt: skip
            ctx = StageContext(
                corpus=task.corpus, task=task.name, options=typed_options(CROSS, options, "rerank"),
                cache_dir=cache_dir,
            )  # fmt: skip
            return build_stage(ctx)

        print(
            f"model {model if args.model else 'all-MiniLM-L6-v2 + seeded head'}, {len(queries)} "
            f"{task.name} queries x depth {args.depth} = {pairs} pairs, max_length "
            f"{args.max_length}, torch threads {torch.get_num_threads()}, load average at start "
            f"{os.getloadavg()[0]:.2f} (other processes skew the rates)"
        )
        warm = stage(BATCH_SIZES[0], None)
        first = next(iter(queries))
        asyncio.run(warm.rerank(first, queries[first], dict(list(rankings[first].items())[:8])))
        rate = {}
        for batch_size in BATCH_SIZES:
            seconds = rerank_all(stage(batch_size, None), queries, rankings)
            rate[batch_size] = pairs / seconds
            print(f"  batch {batch_size:>3}: {rate[batch_size]:8.1f} docs/s ({seconds:.2f} s)")
        cache_dir = Path(tmp) / "cache"
        rerank_all(stage(32, cache_dir), queries, rankings)  # fills the score cache
        cached = pairs / rerank_all(stage(32, cache_dir), queries, rankings)
        print(f"  cached rerun: {cached:8.1f} docs/s")
        best = max(rate, key=rate.get)
        print(f"  ratio batch 64 / batch 16: {rate[64] / rate[16]:.2f} (best: batch {best})")
        print(f"  cached rerun vs batch 32: {cached / rate[32]:.1f}x faster")


if __name__ == "__main__":
    main()
