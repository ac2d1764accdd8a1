"""Corpus encoding speed of the reasoning embedders' loader (``flag-decoder``) against
FlagEmbedding's own ``BaseLLMEmbedder``, and how much a corpus asks of an encoder.

    python bench/reasoning_embed_bench.py [--data FOLDER] [--docs 300] [--smoke]

The real checkpoints (0.6B to 8B) are not on this machine, so both encoders run a tiny Qwen3
built in Qwen3-Embedding's layout (tests/tiny_models.py): the same arithmetic, a fraction of
the work per token. Each encodes the same first N documents (after a warm-up) at the same
batch size; the script prints tokens per second for each (tokens: what each encodes, after the
512-token cut), their ratio, and how far their vectors agree.

Then the dataset's whole corpus as the Qwen-based families see it: documents and tokens after
the 512-token cut, counted with the Qwen2.5 vocabulary of the embedded model (llama.cpp, no
weights), standing in for those families' own tokenizers. That count is the first run's work;
a GPU's tokens per second for a 4-8B model is not measured here, so no time is printed for it.

``--smoke`` runs every step on 12 documents of the bundled demo dataset in seconds, so the test
suite keeps the script working; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.datasets import DEMO_DIR, load_folder  # noqa: E402
from retrievers.encoders import family_encoder  # noqa: E402
from retrievers.families import family_for  # noqa: E402
from tests import flag_reference, tiny_models  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
CUT = 512  # every script's --embedder_passage_max_length (the authors' scripts, L31)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=300, help="documents timed (default 300)")
    parser.add_argument("--data", type=Path, help=f"a dataset folder (default: {SCIFACT})")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, a few seconds: checks the script runs"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.docs = 12
        args.data = args.data or DEMO_DIR
        print("smoke run: tiny sizes, every step, figures meaningless")
    if args.threads:
        torch.set_num_threads(args.threads)
    reference = flag_reference.base_llm_embedder_class()
    if reference is None:
        sys.exit(f"FlagEmbedding is needed for the reference: {flag_reference.FLAG_INSTALL}")

    task = load_folder(args.data or SCIFACT)
    texts = list(task.corpus.values())[: args.docs]
    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_models.qwen3(Path(tmp) / "Qwen3-Embedding-tiny")
        family = family_for("Qwen/Qwen3-Embedding-8B")
        ours = family_encoder(str(folder), family, "fp32", "cpu", None, args.batch_size, False)
        theirs = flag_reference.flag_embedder(reference, folder, "")
        theirs.batch_size = args.batch_size
        tokens = sum(
            min(len(ids), CUT) for ids in theirs.tokenizer(texts, truncation=False)["input_ids"]
        )
        print(
            f"tiny Qwen3 ({sum(p.numel() for p in theirs.model.parameters()):,} parameters), "
            f"{len(texts)} {task.name} docs, {tokens:,} tokens of its tokenizer after the "
            f"{CUT}-token cut, batch {args.batch_size}, torch threads {torch.get_num_threads()}, "
            f"load average at start {os.getloadavg()[0]:.2f} (other processes skew the rates)"
        )
        encoders = {
            "ours (flag-decoder)": lambda batch: ours(batch, "", "doc"),
            "FlagEmbedding BaseLLMEmbedder": lambda batch: np.asarray(theirs.encode_corpus(batch)),
        }
        vectors, rate = {}, {}
        for name, encode in encoders.items():
            encode(texts[:8])  # warm-up: first-call allocations and kernels
            start = time.perf_counter()
            vectors[name] = encode(texts)
            seconds = time.perf_counter() - start
            rate[name] = tokens / seconds
            print(f"  {name}: {rate[name]:,.0f} tokens/s ({seconds:.2f} s)")
    first, second = rate
    print(f"  ratio ours / FlagEmbedding: {rate[first] / rate[second]:.2f}x tokens/s")
    diff = np.abs(vectors[first] - vectors[second]).max()
    print(f"  vectors: max abs difference {diff:.2e} (the same encoder, to float tolerance)")
    corpus_cost(task)


def corpus_cost(task) -> None:
    """The whole corpus's documents and tokens after the cut, with the Qwen2.5 vocabulary."""
    from agents.llm.embedded.pool import model_file, vocabulary

    vocab = vocabulary(model_file("qwen2.5-coder-0.5b"))
    lengths = [len(vocab.tokenize(text)) for text in task.corpus.values()]
    cut = sum(min(n, CUT) for n in lengths)
    over = sum(n > CUT for n in lengths)
    print(
        f"corpus {task.name}: {len(lengths):,} documents, {cut:,} tokens after the {CUT}-token "
        f"cut ({sum(lengths):,} before; {over:,} documents cut), counted with Qwen2.5's "
        "vocabulary; a GPU's rate for a 4-8B model: not measured here"
    )


if __name__ == "__main__":
    main()
