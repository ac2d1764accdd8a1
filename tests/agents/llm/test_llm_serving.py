"""How served models are driven (agents.llm.serving): request shapes and chat templates.

The request shapes are checked on the bytes a real HTTP server receives (a capturing server on
127.0.0.1 that answers like an OpenAI-compatible one); the templates against transformers'
own `apply_chat_template` on a tokenizer folder built here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.llm import LLM
from agents.llm.embedded.chatml import render_chatml
from agents.llm.serving import load_template, replicas, resolve_server
from eval.plumbing.secrets.redaction import public_url
from tests.helpers import send_body

PARTIAL = [
    {"role": "user", "content": "Why is the sky blue?"},
    {"role": "assistant", "content": "Let me search. <search> sky colour </search>\n\n"
                                     "<information>Rayleigh scattering.</information>\n\n"},
]  # fmt: skip
FRESH = PARTIAL[:1]
TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _capturing_server(props: dict | None):
    """An OpenAI-compatible endpoint that records each request's path and JSON body; it
    answers ``GET /props`` with ``props`` as llama.cpp's llama-server does (None: 404, as
    llama-cpp-python's server does)."""
    seen: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append((self.path, {}))
            if self.path != "/props" or props is None:
                self.send_error(404)
                return
            self._reply(json.dumps(props).encode())

        def do_POST(self):  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            if self.path.endswith("/chat/completions"):
                choice = {"index": 0, "finish_reason": "stop", "stop_reason": "</search>",
                          "message": {"role": "assistant", "content": "ok"}}  # fmt: skip
            else:
                choice = {"index": 0, "finish_reason": "stop", "text": "ok", "logprobs": None}
            self._reply(json.dumps({
                "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [choice],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }).encode())  # fmt: skip

        def _reply(self, reply: bytes) -> None:
            send_body(self, reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def capture():
    """llama-cpp-python's server, or any server without ``GET /props``."""
    yield from _capturing_server(None)


@pytest.fixture
def llama_server():
    """llama.cpp's llama-server: it reports its chat template at ``GET /props``."""
    yield from _capturing_server({"chat_template": TEMPLATE})


def ask(url: str, messages: list[dict], **client) -> None:
    llm = LLM(model="openai/m", api_base=url, **client)
    asyncio.run(llm.chat(messages, stop=["</search>"], temperature=0))


@pytest.mark.parametrize("server", ["vllm", "sglang"])
def test_vllm_and_sglang_are_asked_to_continue_the_final_message(capture, server):
    url, seen = capture
    ask(url, PARTIAL, server=server)
    ask(url, FRESH, server=server)
    (path, body), (_, fresh) = seen
    assert path == "/v1/chat/completions" and body["messages"] == PARTIAL
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert "continue_final_message" not in fresh  # a new turn is an ordinary chat request
    assert body["stop"] == ["</search>"]


def test_a_generic_api_is_never_sent_continue_fields(capture):
    url, seen = capture
    ask(url, PARTIAL, server="openai")
    ((path, body),) = seen
    assert path == "/v1/chat/completions" and "continue_final_message" not in body


def posts(seen: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return [(path, body) for path, body in seen if body]


def test_llamacpp_gets_the_rendered_prompt_on_the_completions_endpoint(capture, tmp_path):
    url, seen = capture
    template = tmp_path / "t.jinja"
    template.write_text(TEMPLATE)
    ask(url, PARTIAL, server="llamacpp", chat_template=str(template))
    ask(url, FRESH, server="llamacpp", chat_template="chatml")  # built-in ChatML
    (_, reset), (path, body), (_, reset_fresh), (_, fresh) = posts(seen)
    assert path == "/v1/completions"
    expected = render_chatml(PARTIAL, "You are a helpful assistant.")
    assert body["prompt"] == expected and body["prompt"].endswith("</information>\n\n")
    assert fresh["prompt"] == render_chatml(FRESH)
    assert (body["top_k"], body["min_p"], body["repeat_penalty"]) == (0, 0.0, 1.0)
    assert body["stop"] == ["</search>"] and "messages" not in body
    assert body["cache_prompt"] is False and fresh["cache_prompt"] is False
    # llama-cpp-python's server ignores cache_prompt: a one-token request whose first token
    # differs from the prompt's goes before each call, so nothing of the previous one is kept
    for before, call in ((reset, body), (reset_fresh, fresh)):
        assert before["prompt"] == "\n" != call["prompt"][0]
        assert before["max_tokens"] == 1 and not before.get("stop")
        assert {k: v for k, v in before.items() if k not in ("prompt", "max_tokens", "stop")} == {
            k: v for k, v in call.items() if k not in ("prompt", "max_tokens", "stop")
        }


def test_a_llama_server_is_asked_not_to_reuse_a_cached_prompt_and_gets_no_reset(llama_server):
    """llama-server honours cache_prompt: false; its slots run in parallel, so nothing is
    sent between the calls, and its template is read once, from /props."""
    url, seen = llama_server

    async def three_in_flight() -> None:
        llm = LLM(model="openai/m", api_base=url, server="llamacpp")
        await asyncio.gather(*(llm.chat(m, temperature=0) for m in (PARTIAL, FRESH, PARTIAL)))

    asyncio.run(three_in_flight())
    calls = posts(seen)
    assert len(calls) == 3 and all(body["cache_prompt"] is False for _, body in calls)
    assert sorted(body["prompt"] for _, body in calls) == sorted(
        [render_chatml(PARTIAL, "You are a helpful assistant.")] * 2
        + [render_chatml(FRESH, "You are a helpful assistant.")]
    )


def test_the_reset_request_differs_from_the_prompt_in_its_first_character():
    from agents.llm.serving import fresh_call, reset_call

    call = {"prompt": "\nhello", "max_tokens": 9, "logprobs": 2, "stop": ["x"], "top_p": 1}
    assert reset_call(call) == {"prompt": " ", "max_tokens": 1, "logprobs": None,
                                "stop": None, "top_p": 1}  # fmt: skip
    assert reset_call({**call, "prompt": "<|im_start|>"})["prompt"] == "\n"
    assert fresh_call({"prompt": "p", "extra_body": {"top_k": 0}})["extra_body"] == {
        "cache_prompt": False, "top_k": 0
    }  # fmt: skip
    asked = {"prompt": "p", "extra_body": {"cache_prompt": True}}
    assert fresh_call(asked)["extra_body"] == {"cache_prompt": True}  # the caller's word wins


def test_a_jinja_file_renders_as_transformers_renders_a_tokenizer_folder(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "tok"
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
        unk_token="[UNK]",
    )
    tok.chat_template = TEMPLATE
    tok.save_pretrained(folder)
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    from_file, from_folder = load_template(str(tmp_path / "t.jinja")), load_template(str(folder))
    for messages in (PARTIAL, FRESH):
        assert from_file.render(messages) == from_folder.render(messages)
    assert from_file.sha256 == from_folder.sha256
    assert from_file.render(PARTIAL) == render_chatml(PARTIAL, "You are a helpful assistant.")


def test_bad_templates_are_refused_in_one_line(tmp_path):
    (tmp_path / "bad.jinja").write_text("{% for m in messages %}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "tokenizer_config.json").write_text("{}")
    for spec, why in ((tmp_path / "none.jinja", "not 'chatml', a template file"),
                      (tmp_path / "bad.jinja", "not a Jinja template"),
                      (tmp_path / "empty", "holds no chat_template")):  # fmt: skip
        with pytest.raises(ValueError, match=why) as e:
            load_template(str(spec))
        assert "\n" not in str(e.value)


def test_server_kinds_replicas_and_masked_replica_urls():
    assert resolve_server("auto", "hosted_vllm/qwen") == "vllm"
    assert resolve_server("auto", "openai/gpt-4o-mini") == "openai"
    assert replicas("http://a:1/v1, http://b:2/v1,") == ["http://a:1/v1", "http://b:2/v1"]
    assert replicas(None) == []
    assert public_url("http://u:pw1@a:1/v1,http://b:2/v1?api_key=k2") == (
        "http://u:***@a:1/v1,http://b:2/v1?api_key=***"
    )


def test_the_agents_continue_on_continuing_servers_only():
    from types import SimpleNamespace

    from agents.graphs.search_loop import resolve_llm_mode

    def mode(**client):
        ctx = SimpleNamespace(options={"llm_mode": "auto"}, llm=LLM(model="openai/m", **client))
        return resolve_llm_mode(ctx)

    assert [mode(server=s) for s in ("vllm", "sglang", "llamacpp", "openai", "auto")] == [
        "continue", "continue", "continue", "chat", "chat"
    ]  # fmt: skip


def test_the_stop_string_a_server_reports_reaches_the_completion_and_the_cache(capture, tmp_path):
    url, seen = capture
    llm = LLM(model="openai/m", api_base=url, server="vllm", cache_dir=tmp_path)
    first = asyncio.run(llm.chat(PARTIAL, stop=["</search>"]))
    again = asyncio.run(llm.chat(PARTIAL, stop=["</search>"]))
    assert first.stop_reason == again.stop_reason == "</search>"
    assert again.cached and len(seen) == 1


def test_a_chat_template_is_checked_with_the_config_before_any_run_folder(tmp_path):
    from agents.config.run_config import ConfigError
    from agents.config.settings import from_settings

    with pytest.raises(ConfigError, match="only --server llamacpp has prompts rendered here"):
        from_settings({"model": "openai/m", "chat_template": "chatml", "server": "vllm"})
    with pytest.raises(ConfigError, match=r"^llm\.chat_template .*nope.jinja: not 'chatml'"):
        from_settings({"model": "openai/m", "server": "llamacpp",
                       "chat_template": str(tmp_path / "nope.jinja")})  # fmt: skip
    assert not (tmp_path / "runs").exists()
    ok = from_settings({"agent": "hyde", "model": "openai/m", "server": "llamacpp",
                        "chat_template": "chatml"})  # fmt: skip
    assert ok.llm.chat_template == "chatml"
