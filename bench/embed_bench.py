"""Corpus encoding speed of the default embedder in fp32 and bf16, and how far they agree.

    python bench/embed_bench.py [--docs 500] [--data ../shared/data/scifact] [--smoke]

Encodes the first N SciFact documents with each dtype (after a short warm-up), prints docs/s
and the bf16/fp32 ratio, then the agreement: cosine between each document's fp32 and bf16
embedding, and the overlap of the top-10 lists of every SciFact query searched over those N
documents. No cache is used, so every run measures the encoder itself.

``--smoke`` runs the same steps on 12 documents and 4 queries of the bundled demo dataset
(unless ``--data`` is given) in a few seconds, so the test suite keeps the script working; its
figures measure nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.datasets import DEMO_DIR, load_folder  # noqa: E402
from retrievers.dense import (  # noqa: E402
    DEFAULT_DENSE_MODEL,
    build_index,
    instructions_for,
    load_sentence_transformer,
    prefixing,
    resolve_model,
    sentence_transformer_encoder,
)

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--queries", type=int, help="queries searched (default: all)")
    parser.add_argument("--data", type=Path, help=f"a dataset folder (default: {SCIFACT})")
    parser.add_argument("--model", default=DEFAULT_DENSE_MODEL)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, a few seconds: checks the script runs"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.docs, args.queries = 12, 4
        args.data = args.data or DEMO_DIR
        print("smoke run: tiny sizes, every step, figures meaningless")
    if args.threads:
        torch.set_num_threads(args.threads)

    task = load_folder(args.data or SCIFACT)
    corpus = dict(list(task.corpus.items())[: args.docs])
    model_id, load_path = resolve_model(args.model)
    print(
        f"model {model_id}, {len(corpus)} {task.name} docs, torch threads "
        f"{torch.get_num_threads()}, load average at start {os.getloadavg()[0]:.2f} (other "
        "processes skew the rates)"
    )

    indexes, rate = {}, {}
    for dtype in ("fp32", "bf16"):
        encode = prefixing(
            sentence_transformer_encoder(
                load_sentence_transformer(load_path, dtype, None), args.batch_size
            )
        )
        encode(list(corpus.values())[:16], "", "doc")  # warm-up: first-call allocations and kernels
        start = time.perf_counter()
        indexes[dtype] = build_index(
            corpus, dtype, encode, instructions_for(model_id), cache_dir=None, progress=False
        )
        seconds = time.perf_counter() - start
        rate[dtype] = len(corpus) / seconds
        print(f"{dtype}: {rate[dtype]:.1f} docs/s ({seconds:.1f} s)")
    print(f"bf16/fp32 speed ratio: {rate['bf16'] / rate['fp32']:.2f}")
    fp32, bf16 = indexes["fp32"], indexes["bf16"]

    cos = np.sum(fp32.doc_embeddings * bf16.doc_embeddings, axis=1)
    print(f"doc embedding cosine fp32 vs bf16: mean {cos.mean():.5f}, min {cos.min():.5f}")
    queries = list(task.queries.values())[: args.queries]
    top = {d: idx.search_vectors(idx.encode_queries(queries), 10) for d, idx in indexes.items()}
    overlap = [len(set(a) & set(b)) / 10 for a, b in zip(top["fp32"], top["bf16"], strict=True)]
    same_first = np.mean(
        [next(iter(a)) == next(iter(b)) for a, b in zip(*top.values(), strict=True)]
    )
    print(
        f"top-10 overlap over {len(queries)} queries: mean {np.mean(overlap):.4f}, "
        f"min {min(overlap):.1f}; same top-1 {same_first:.4f}"
    )


if __name__ == "__main__":
    main()
