"""Every command in the fenced bash blocks of README.md, docs/usage.md, docs/experiments.md and
docs/serving.md.

Each `python -m <ours>` command is parsed by its real command line's parser (a flag that does
not exist, or a value it refuses, fails here) and, for agents.run, turned into its run's
configuration. Those that can run here, offline and cheaply, are run as written in a folder laid
out as a clone (``docs/`` and ``../shared`` where the docs expect them) with exit status 0: the
runs they read are made first, on the demo with a scripted model, under the names the docs use.
A run that calls the embedded model is run as its ``--dry-run``; a retrieval server the docs
start is started (on a free port of 127.0.0.1) until it answers ``/health``. Every other command
is in
`NOT_RUN` with the reason, and a command there that the docs no longer show fails the test.
(tests/project/test_readme.py checks the README's other promises: its front page, figures and
Python.)
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agents.llm import scripted
from tests.helpers import REPO, SCIFACT

DOCS = ["README.md", "docs/usage.md", "docs/experiments.md", "docs/serving.md"]
SCIFACT_ARG = "../shared/data/scifact"

# command (as `commands` normalises it) -> why it is not run here
HUB = "needs the Hugging Face hub (R2MED's tasks are downloaded)"
NOT_RUN = {
    "CMAKE_ARGS=-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_BMI2=ON pip install --no-cache-dir -e .[test]": "the install itself",
    "python -m pytest -q": "the test suite itself",
    "python -m agents.run --agent hyde --dataset r2med --generations r2med:qwen-7b --pad": HUB,
    "python -m agents.run --agent query2doc --dataset r2med --generations r2med:gpt4 --pad": HUB,
    "python -m agents.run --agent search-o1 --dataset r2med --generations r2med:qwq-32b "
    "--retriever dense:nvidia/NV-Embed-v2 --trust-remote-code": HUB + "; NV-Embed-v2 needs a GPU",
    "python -m eval.compare runs/hyde-bm25q-r2med_qwen-7b-r2med-pad "
    "--reference r2med:hyde/qwen-7b/bm25": "reads the R2MED run above",
    "python -m agents.run --agent hyde --dataset Biology": HUB,
    "python -m agents.run --agent hyde --dataset r2med": HUB,
    "export OPENAI_API_KEY=...": "sets a secret (a placeholder here)",
    "python -m agents.run --agent hyde --dataset Biology --model openai/gpt-4o-mini": HUB
    + "; needs an OpenAI API key",
    "python -m agents.run --agent search-o1 --model openai/Qwen2.5-7B-Instruct "
    "--api-base http://localhost:8000/v1": "needs a vLLM server at localhost:8000",
    "git clone https://github.com/8421BCD/ReasonRank": "needs GitHub",
    "python -m agents.rerank ReasonRank/runs/r2med_Biology/e5-mistral-7b-instruct_top100.txt "
    "--task Biology --rerank llm-listwise --rerank-model openai/gpt-4o-mini": "reads the clone "
    "above; " + HUB + "; needs an OpenAI API key",
    "python -m agents.rerank ReasonRank/runs/r2med_Biology/e5-mistral-7b-instruct_top100.txt "
    "--task Biology --order file --rerank reasonrank,tokenizer=liuwenhan/reasonrank-32B "
    "--rerank-model hosted_vllm/liuwenhan/reasonrank-32B "
    "--rerank-api-base http://127.0.0.1:8000/v1": "reads the clone above; "
    + HUB
    + "; needs a vLLM server serving ReasonRank-32B",
    "python -m agents.sweep docs/sweep-example.toml": "runs its 5 cells with the embedded model "
    "on SciFact (hours here); its --list and --dry-run are run",
    **{
        f"python -m agents.rerank ReasonRank/runs/r2med_{task}/e5-mistral-7b-instruct_top100.txt "
        f"--task {task} --duplicates max --rerank cross:BAAI/bge-reranker-v2-m3,depth=100": (
            "reads the clone above; " + HUB + " (the tasks and the cross-encoder)"
        )
        for task in (
            "Biology",
            "Bioinformatics",
            "Medical-Sciences",
            "MedXpertQA-Exam",
            "MedQA-Diag",
            "PMC-Treatment",
            "PMC-Clinical",
            "IIYi-Clinical",
        )
    },  # fmt: skip
}
VLLM = "needs vLLM and a GPU"
NOT_RUN |= {
    "vllm serve Qwen/QwQ-32B --served-model-name QwQ-32B --tensor-parallel-size 4 "
    "--max-model-len 32768 --port 8000": VLLM,
    "python -m agents.run --agent search-o1 --dataset r2med --preset paper --model "
    "hosted_vllm/QwQ-32B --api-base http://localhost:8000/v1 --server vllm --retriever "
    "dense:nvidia/NV-Embed-v2 --trust-remote-code --concurrency 32 --dry-run": HUB
    + "; NV-Embed-v2 from the hub",
    "vllm serve PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo --served-model-name "
    "SearchR1-qwen2.5-7b-it-em-ppo --port 8001": VLLM,
    "python -m agents.run --agent search-r1 --dataset r2med --preset paper --model "
    "hosted_vllm/SearchR1-qwen2.5-7b-it-em-ppo --api-base http://localhost:8001/v1 --server "
    "vllm --retriever dense:nvidia/NV-Embed-v2 --trust-remote-code": HUB + "; " + VLLM,
    "vllm serve Qwen/Qwen3-32B --served-model-name qwen3 --tensor-parallel-size 4 "
    "--enable-auto-tool-choice --tool-call-parser hermes --port 8002": VLLM,
    "python -m agents.run --agent tool-search --dataset r2med --model hosted_vllm/qwen3 "
    "--api-base http://localhost:8002/v1 --server vllm": HUB + "; " + VLLM,
    "python -m agents.run --agent search-o1 --dataset r2med --model hosted_vllm/qwq --server "
    "vllm --api-base http://node1:8000/v1,http://node2:8000/v1,http://node3:8000/v1 --routing "
    "least-busy --concurrency 96": HUB + "; needs three vLLM nodes",
    "llama-server -m qwen2.5-7b-instruct-q4_k_m.gguf --port 8080 -c 16384": "llama.cpp's own "
    "server binary and a 7B file (tests/agents/llm/test_llamacpp_server.py serves the embedded "
    "model)",
    "python -m agents.run --agent search-o1 --model openai/qwen --api-base "
    "http://localhost:8080/v1 --server llamacpp": "needs the llama-server above "
    "(tests/agents/llm/test_llamacpp_server.py runs search-o1 against llama_cpp.server)",
    "llama-server -m model.gguf --port 8080 -c 4096 -b 128 -ub 128 -np 1": "llama.cpp's own "
    "server binary",
    "python -m llama_cpp.server --model model.gguf --port 8080 --n_ctx 4096 --n_batch 128 "
    "--n_ubatch 128": "model.gguf is a placeholder (tests/agents/llm/test_llamacpp_server.py "
    "starts it with these settings on the embedded model's file)",
    "vllm serve nvidia/NV-Embed-v2 --task embed --trust-remote-code --port 8002": VLLM,
    "python -m agents.run --agent none --dataset r2med --retriever api:openai/nvidia/NV-Embed-v2 "
    "--embed-api-base http://localhost:8002/v1 --embed-batch-size 64": HUB + "; " + VLLM,
    "export R2MED_SERVE_TOKEN=$(python -c import secrets; print(secrets.token_urlsafe(32)))": (
        "sets a secret for the server after it"
    ),
    "python -m retrievers.serve --dataset demo --retriever bm25 --host 0.0.0.0 --port 8000": (
        "binds every interface (the same server on 127.0.0.1 is the command before it)"
    ),
    "python -m retrievers.serve --dataset demo --retriever bm25 --mcp --transport http --port "
    "8001": "started with a token by tests/project/test_serving_docs_mcp.py, which runs the "
    "section's clients against it",
    "python -m retrievers.serve --dataset demo --retriever bm25 --mcp": "a stdio server: its "
    "client starts it (tests/project/test_serving_docs_mcp.py runs that client)",
    "python bench/serve_bench.py": "~100 s; its --smoke run is in tests/project/test_bench.py",
    "vllm serve PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo --served-model-name "
    "SearchR1-qwen2.5-7b-it-em-ppo --port 8001 --gpu-memory-utilization 0.6": VLLM,
    "python -m retrievers.serve --dataset r2med --retriever dense:BAAI/bge-large-en-v1.5 "
    "--device cuda --host 0.0.0.0 --port 8000": HUB + "; needs a GPU",
    "python -m agents.run --agent search-r1 --dataset Biology --preset paper --model "
    "hosted_vllm/SearchR1-qwen2.5-7b-it-em-ppo --server vllm --api-base "
    "http://gpu-box:8001/v1,http://gpu-box2:8001/v1 --routing least-busy --retriever "
    "remote:http://gpu-box:8000 --concurrency 32": HUB + "; needs the servers on gpu-box",
}
# the run folders the docs' commands read, made first on the demo: name -> agent
SEED_RUNS = {
    "none-bm25q-demo": "none",
    "hyde-bm25q-qwen2.5-coder-0.5b-demo": "hyde",
    "a": "none",
    "b": "hyde",
    "c": "query2doc",
    "hyde-base": "hyde",
    "hyde-textbook": "hyde",
}
# a run that calls the embedded model (minutes to hours here): its dry run instead
DRY = ("--agent search-o1", "--agent hyde", "--agent query2doc", "--agent lamer")


def _loops(lines: list[str]) -> list[str]:
    """The lines with each ``for VAR in A B; do`` ... ``done`` expanded, one body per value."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = re.fullmatch(r"for (\w+) in (.*); do", lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        end = lines.index("done", i)
        for value in match.group(2).split():
            out += [body.replace(f"${match.group(1)}", value) for body in lines[i + 1 : end]]
        i = end + 1
    return out


def shell_lines() -> list[tuple[str, str]]:
    """(doc, line) of every command line in the docs' bash blocks: continuations joined,
    loops expanded, blank and comment-only lines dropped."""
    found = []
    for doc in DOCS:
        text = (REPO / doc).read_text()
        for block in re.findall(r"^```bash\n(.*?)^```$", text, re.DOTALL | re.MULTILINE):
            lines = [" ".join(line.split()) for line in block.replace("\\\n", " ").splitlines()]
            found += [(doc, line) for line in _loops(lines) if shlex.split(line, comments=True)]
    return found


def commands() -> list[tuple[str, list[str]]]:
    """(doc, argv) of every command in the docs' bash blocks."""
    return [(doc, shlex.split(line, comments=True)) for doc, line in shell_lines()]


def key(argv: list[str]) -> str:
    return " ".join(argv)


COMMANDS = commands()
OURS = [  # the commands of this project's own modules
    (d, a) for d, a in COMMANDS
    if a[:2] == ["python", "-m"] and a[2].split(".")[0] in ("agents", "eval", "retrievers")
]  # fmt: skip


def test_the_docs_have_commands_and_the_not_run_list_names_only_commands_they_show():
    shown = {key(a) for _, a in COMMANDS}
    assert len(COMMANDS) >= 25
    assert [c for c in NOT_RUN if c not in shown] == []


class Parsed(BaseException):  # noqa: N818 - not an error: the parse is all that is wanted
    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


def parse(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    """``python -m MODULE ARGS`` parsed by MODULE's own parser, stopped before its body runs."""
    original = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    module = importlib.import_module(argv[2])
    if not hasattr(module, "main"):  # a package: its __main__
        module = importlib.import_module(f"{argv[2]}.__main__")
    with pytest.raises(Parsed) as info:
        module.main(argv[3:])
    return info.value.namespace


@pytest.mark.parametrize("argv", [a for _, a in OURS], ids=[key(a)[10:70] for _, a in OURS])
def test_each_command_is_taken_by_its_parser(argv, monkeypatch, capsys):
    try:
        args = parse(argv, monkeypatch)
    except SystemExit:
        pytest.fail(f"{key(argv)}: {capsys.readouterr().err.strip()}")
    if argv[2] == "agents.run":  # its values, as the run's configuration takes them
        from agents.config.settings import from_settings, settings_from_args

        settings = settings_from_args(args)
        settings.pop("prompt", None)  # a prompt file a doc writes first (checked when run)
        from_settings(settings)
    elif argv[2] == "eval.compare":  # its --metric, as the comparison checks it
        from eval.metrics import parse_metric

        parse_metric(args.metric)
    elif argv[2] == "agents.sweep":  # its file, as the sweep reads it
        from agents.config.sweep_file import load_sweep

        load_sweep(REPO / args.config)


def test_the_example_sweeps_listing_is_what_list_prints(monkeypatch):
    from agents.config.sweep_file import load_sweep
    from agents.config.sweep_grid import list_cells

    monkeypatch.chdir(REPO)  # the file named as the docs name it, from the clone's root
    text = (REPO / "docs" / "experiments.md").read_text()
    [shown] = re.findall(r"^`--list` of the example prints:\n\n```\n(.*?)^```$", text,
                         re.DOTALL | re.MULTILINE)  # fmt: skip
    printed = list_cells(load_sweep(Path("docs/sweep-example.toml")))
    assert shown.rstrip("\n") == printed.replace(str(REPO), "/path/to/r2med-agents")


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> dict[str, Path | dict[str, str]]:
    """A folder laid out as the docs assume (docs/ inside, ../shared beside), with the runs the
    docs' commands read, and the environment of a machine offline and without API keys."""
    from agents.commands.run import main

    root = tmp_path_factory.mktemp("docs")
    work = root / "r2med-agents"
    work.mkdir()
    (work / "docs").symlink_to(REPO / "docs")
    (root / "shared").symlink_to(SCIFACT.parent.parent)
    cache = root / "cache"
    scripted.install(lambda messages, params: "Insulin lowers blood glucose.")
    cwd = Path.cwd()
    os.chdir(work)
    try:
        for name, agent in SEED_RUNS.items():
            extra = ["--model", "scripted/docs"] if agent != "none" else []
            assert main(["--agent", agent, "--run-name", name, "--limit", "3", "--quiet",
                         "--cache-dir", str(cache), *extra]) == 0  # fmt: skip
    finally:
        os.chdir(cwd)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HF_HUB_OFFLINE="1", R2MED_AGENTS_CACHE=str(cache))
    return {"work": work, "env": env}


RUN = list({key(a): (d, a) for d, a in COMMANDS if key(a) not in NOT_RUN}.values())


@pytest.mark.slow
@pytest.mark.parametrize("argv", [a for _, a in RUN], ids=[key(a)[:70] for _, a in RUN])
def test_each_command_that_can_run_here_runs_as_written(argv, clone, request):
    if SCIFACT_ARG in argv:
        request.getfixturevalue("scifact_dir")  # the shared data beside the repo, or a skip
    command = key(argv)
    if argv[:3] == ["python", "-m", "retrievers.serve"]:  # a server: until it answers
        serve_until_healthy(argv, clone)
        return
    if argv[:2] == ["python", "-m"]:
        argv = [sys.executable, *argv[1:]]
        if argv[2] == "agents.run" and command.startswith(tuple(f"python -m agents.run {a}"
                                                                for a in DRY)):  # fmt: skip
            argv += ["--dry-run", "--quiet"]
        done = subprocess.run(argv, cwd=clone["work"], env=clone["env"], capture_output=True,
                              text=True, timeout=600)  # fmt: skip
    else:  # a shell line (printf ... > file): as the shell runs it
        shell = next(line for _, line in shell_lines() if shlex.split(line, comments=True) == argv)
        done = subprocess.run(shell, shell=True, cwd=clone["work"], env=clone["env"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"{command}:\n{done.stderr[-2000:]}"


def serve_until_healthy(argv: list[str], clone: dict) -> None:
    """Start the server as written, on a free port of 127.0.0.1 instead of the one shown (so
    that nothing else on the machine answers for it), until its /health answers 200."""
    import socket
    import time
    import urllib.request

    from tests.helpers import stop_process

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [sys.executable, *argv[1:]]
    args[args.index("--port") + 1] = str(port)
    proc = subprocess.Popen(args, cwd=clone["work"], env=clone["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{key(argv)}: exited {proc.returncode}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert r.status == 200
                    return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"{key(argv)}: no answer on /health in 120 s")
    finally:
        stop_process(proc)
