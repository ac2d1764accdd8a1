"""FlagEmbedding 1.3.5's own ``BaseLLMEmbedder``, the reference the reasoning embedders' families
are checked against (tests/retrievers/test_reasoning_embedders.py) and timed against
(bench/reasoning_embed_bench.py).

Its package ``__init__`` imports what this environment leaves out (datasets; rerankers written
for transformers 4), so the parent packages are stood in for by empty packages on the same
folders and only ``abc/inference/AbsEmbedder.py`` and ``inference/embedder/decoder_only/base.py``
run, as they are on disk; ``sys.modules`` is left as it was.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

FLAG_INSTALL = "pip install --no-deps FlagEmbedding==1.3.5 (.ci/run does)"
_STAND_INS = ("", "abc", "abc/inference", "inference", "inference/embedder",
              "inference/embedder/decoder_only")  # fmt: skip


def base_llm_embedder_class() -> type | None:
    """The class, or None when FlagEmbedding is not installed."""
    spec = importlib.util.find_spec("FlagEmbedding")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "FlagEmbedding"}
    try:
        for sub in _STAND_INS:
            name = ".".join(["FlagEmbedding", *filter(None, sub.split("/"))])
            package = types.ModuleType(name)
            package.__path__ = [str(root / sub)]
            sys.modules[name] = package
        from FlagEmbedding.abc.inference.AbsEmbedder import AbsEmbedder

        # base.py L8 imports the class from the package, whose __init__ exports it
        sys.modules["FlagEmbedding.abc.inference"].AbsEmbedder = AbsEmbedder  # type: ignore[attr-defined]
        from FlagEmbedding.inference.embedder.decoder_only.base import BaseLLMEmbedder
    finally:
        for name in [k for k in sys.modules if k.split(".")[0] == "FlagEmbedding"]:
            del sys.modules[name]
        sys.modules.update(saved)
    return BaseLLMEmbedder


# every script's --query_instruction_format_for_retrieval (e.g. scripts/ours/
# eval_reason_embed_qwen3_8b.sh L26): a backslash and an n, which FlagEmbedding's
# abc/evaluation/arguments.py L181-184 (and AbsEmbedder.py L155-156) turn into a newline
FORMAT = "Instruct: {}\\nQuery: {}"


def flag_embedder(cls: type, folder: Path, instruction: str, remote_code: bool = False):
    """What the authors' code/runner.py L47-63 builds from a script's arguments
    (scripts/ours/*.sh L22-29): last_token pooling, the 'Instruct: {}\\nQuery: {}' format,
    batch 256, 512/512 tokens, FlagEmbedding's defaults normalize_embeddings and use_fp16 true
    (abc/evaluation/arguments.py L92-100; fp16 is switched off on the CPU, decoder_only/base.py
    L214), the task's instruction (runner.py L142), on the CPU."""
    return cls(
        str(folder),
        normalize_embeddings=True,
        use_fp16=True,
        query_instruction_for_retrieval=instruction,
        query_instruction_format=FORMAT,
        devices="cpu",
        trust_remote_code=remote_code,
        batch_size=256,
        query_max_length=512,
        passage_max_length=512,
        pooling_method="last_token",
    )
