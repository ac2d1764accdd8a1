"""Do the embedded model's greedy outputs depend on the machine? Threads, and llama.cpp builds.

    python bench/llama_kernels.py [--prompts 4] [--max-tokens 120] [--other-build DIR] [--smoke]

Generates HyDE passages for the demo's first queries at temperature 0 with the installed
llama-cpp-python, once with one batch thread and once with two (the thread count of a 1-core
and a 2-core machine), and prints a hash of each output. ``--other-build DIR`` runs the same
in a second process whose ``llama_cpp`` comes from DIR (another build of the same version,
e.g. ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON ..." pip install --target DIR
llama-cpp-python==0.3.36``) and counts the prompts on which the two builds agree: the kernels a
build was compiled for decide the floats, and so, at a near-tie, the greedy token.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def outputs(model: str, prompts: int, max_tokens: int, batch_threads: int) -> list[str]:
    """The greedy texts, as the embedded provider renders and runs them."""
    import llama_cpp

    from agents.llm.embedded.chatml import render_chatml
    from agents.llm.embedded.weights import LOCAL_MODELS, model_file

    llm = llama_cpp.Llama(
        model_path=str(model_file(model)), n_ctx=4096, n_threads=1,
        n_threads_batch=batch_threads, verbose=False,
    )  # fmt: skip
    lines = (REPO / "eval" / "demo" / "query.jsonl").read_text().splitlines()
    texts = []
    for line in lines[:prompts]:
        query = json.loads(line)["text"]
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Please write a passage to help answer the question."
             f"\nQuestion: {query}\nPassage: "},
        ]  # fmt: skip
        prompt = render_chatml(messages, LOCAL_MODELS[model].default_system)
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        llm.reset()
        out: list[int] = []
        for token in llm.generate(tokens, temp=0, top_k=0, min_p=0.0, repeat_penalty=1.0):
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token) or len(out) >= max_tokens:
                break
            out.append(token)
        texts.append(llm.detokenize(out).decode("utf-8", errors="ignore"))
    llm.close()
    return texts


def build_line() -> str:
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode().replace("CPU :", "")
    flags = [f.split("=")[0].strip() for f in info.split("|") if f.strip().endswith("= 1")]
    return ", ".join(f for f in flags if f not in ("LLAMAFILE", "OPENMP", "REPACK"))


def digest(texts: list[str]) -> list[str]:
    return [hashlib.sha256(t.encode()).hexdigest()[:8] for t in texts]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=120)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--other-build", type=Path, default=None, help="a folder holding llama_cpp")
    p.add_argument("--smoke", action="store_true", help="a tiny run for the test suite")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the child's output
    args = p.parse_args()
    if args.smoke:
        args.prompts, args.max_tokens, args.model = 2, 8, "smollm2-135m"
        print("smoke run: tiny sizes, every step, figures meaningless")
    one = outputs(args.model, args.prompts, args.max_tokens, 1)
    if args.json:  # as the child of --other-build: this build's texts only
        print(json.dumps({"build": build_line(), "texts": one}))
        return 0
    two = outputs(args.model, args.prompts, args.max_tokens, 2)
    print(f"llama.cpp build: {build_line()}; {args.model}, {args.prompts} prompts, "
          f"{args.max_tokens} tokens")  # fmt: skip
    print(f"  1 batch thread   {' '.join(digest(one))}")
    print(f"  2 batch threads  {' '.join(digest(two))}")
    same = sum(a == b for a, b in zip(one, two, strict=True))
    print(f"  threads: same outputs on {same} of {len(one)} prompts")
    if args.other_build is not None:
        env = {**os.environ, "PYTHONPATH": f"{args.other_build}{os.pathsep}{REPO}"}
        child = [sys.executable, __file__, "--json", "--prompts", str(args.prompts),
                 "--max-tokens", str(args.max_tokens), "--model", args.model]  # fmt: skip
        done = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
        other = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  other build ({other['build']})  {' '.join(digest(other['texts']))}")
        agree = sum(a == b for a, b in zip(one, other["texts"], strict=True))
        print(f"  builds: same outputs on {agree} of {len(one)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
