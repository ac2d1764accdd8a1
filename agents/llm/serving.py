"""How a served model is driven: the server kind, continuing a turn, and chat templates.

Search-o1 and Search-R1 continue the model's own unfinished assistant turn with search results
spliced into it (vLLM on raw prompts); a chat API instead starts a new assistant turn after
each message. Which one a server can do depends on what it is (``--server``):

* ``vllm``, ``sglang``: the chat endpoint continues the final assistant message when asked
  (``continue_final_message: true, add_generation_prompt: false`` in the request body), with
  the model's own chat template on the server.
* ``llamacpp``: every call goes to the completions endpoint (``/v1/completions``) with the
  prompt rendered here by a chat template, so a trailing assistant message is left open.
* ``openai`` (generic APIs): chat only; agents hand results back as user turns.
* ``auto``: ``vllm`` for litellm's ``hosted_vllm/`` models, else ``openai``.

Chat templates for the completions path (``--chat-template``): ``chatml`` (built in; plain
ChatML, without the default system message Qwen's own template adds), a Jinja template file,
or a local tokenizer folder whose ``tokenizer_config.json`` holds one (rendered by
transformers' ``apply_chat_template``). Without one, the template the server reports is used
(llama.cpp's ``llama-server`` gives the model's own at ``GET /props``), so a served run renders
what the model's template renders; a server that reports none is refused with one line asking
for ``--chat-template``. A file
is rendered the way transformers renders it, so the two give the same text. Tools (the
``tool-search`` agent) are rendered by a template that knows them (Qwen's, as the GGUF carries
it) and written in as text otherwise; the calls are read back from the completion's text
(agents/llm/tool_text.py).

Every prompt on the completions path is evaluated from its first token, as the embedded
provider's outputs are (agents/llm/embedded/generation.py: fresh chunks, or restored whole chunks
that are bitwise the same), so that an answer does not depend on which request the server ran before
it (``FreshPrompts``). The same floats as in-process also need the server to evaluate in the
same chunks (docs/serving.md: ``--n_batch 128 --n_ubatch 128``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.llm.embedded.names import is_local

SERVERS = ("auto", "openai", "vllm", "sglang", "llamacpp")
ROUTINGS = ("simple-shuffle", "least-busy")  # litellm Router strategies over replicas
CHAT_CONTINUING = frozenset({"vllm", "sglang"})  # continue on their chat endpoint, when asked
CONTINUING_SERVERS = CHAT_CONTINUING | {"llamacpp"}
CHATML = "chatml"


def resolve_server(server: str, model: str) -> str:
    if server != "auto":
        return server
    return "vllm" if model.startswith("hosted_vllm/") else "openai"


def continues_turns(server: str, model: str) -> bool:
    """Whether the backend continues a trailing assistant message in the same turn."""
    return is_local(model) or resolve_server(server, model) in CONTINUING_SERVERS


def replicas(api_base: str | None) -> list[str]:
    """The servers named by ``--api-base``: one URL, or several joined by commas."""
    return [url.strip() for url in (api_base or "").split(",") if url.strip()]


@dataclass(frozen=True)
class ChatTemplate:
    """Renders messages to one prompt; a trailing assistant message stays open."""

    name: str  # "chatml", a file or a tokenizer folder
    sha256: str  # of the template text: part of every cache key it renders for
    text: str | None  # Jinja source (None: built-in ChatML)
    folder: str | None = None  # a tokenizer folder rendered by transformers

    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> str:
        """The prompt for ``messages`` (and OpenAI-style ``tools``, with ``tool_calls`` and
        ``tool`` turns): a template that knows tools renders them itself, as the model's
        server would; for one that does not, and for ChatML, they are written in as text
        (agents/llm/tool_text.py)."""
        from agents.llm import tool_text

        partial = bool(messages) and messages[-1].get("role") == "assistant"
        if tool_text.uses_tools(messages, tools):
            if self.text is None or "tools" not in self.text:
                messages, tools = tool_text.text_messages(messages, tools, None), None
            else:
                messages = tool_text.mapping_arguments(messages)
        if self.text is None:
            from agents.llm.embedded.chatml import render_chatml

            return render_chatml(messages)
        if self.folder is not None:
            tokenizer = _tokenizer(self.folder)
            return tokenizer.apply_chat_template(
                messages,
                tools=tools,
                tokenize=False,
                add_generation_prompt=not partial,
                continue_final_message=partial,
            )
        rendered = _jinja(self.text).render(
            messages=messages,
            tools=tools,
            add_generation_prompt=not partial,
            bos_token="",
            eos_token="",
            raise_exception=_raise,
        )
        return _continue_final(rendered, messages) if partial else rendered


SERVER_TEMPLATE_TIMEOUT_S = 10.0

# llama.cpp's llama-server keeps each slot's KV cache and evaluates only the part of a prompt
# that the slot's previous one does not share; asked not to, it evaluates the whole prompt
CACHE_PROMPT_OFF = {"cache_prompt": False}


def fresh_call(call: dict[str, Any]) -> dict[str, Any]:
    """The completion request ``call`` with ``cache_prompt: false`` in its body (a field the
    caller set wins)."""
    return {**call, "extra_body": {**CACHE_PROMPT_OFF, **(call.get("extra_body") or {})}}


def reset_call(call: dict[str, Any]) -> dict[str, Any]:
    """A request like ``call`` that leaves nothing for ``call`` to reuse: a one-character
    prompt whose first token differs from ``call``'s (a token's text starts with the
    prompt's first character), one token, no logprobs, no stop."""
    first = " " if call["prompt"].startswith("\n") else "\n"
    return {**call, "prompt": first, "max_tokens": 1, "logprobs": None, "stop": None}


@dataclass
class FreshPrompts:
    """Makes a llama.cpp server evaluate every prompt from its first token, as the embedded
    provider does, so that what ran before a request cannot change its answer.

    llama-cpp-python's server (``python -m llama_cpp.server``) has one context and no way to
    ask for this: ``Llama.generate`` keeps the longest prefix the new prompt shares with the
    previous request's tokens (its prompt and its output) and evaluates only the rest, in
    batches that start where the prefix ends, not where a fresh evaluation's start; the
    matrix kernels round differently for other batch shapes, enough to change a greedy
    continuation. It ignores ``cache_prompt``. A tiny request whose first token differs from
    the prompt's leaves no shared prefix, so the request after it is evaluated afresh; the two
    are sent back to back, one pair at a time per server (it runs one request at a time
    anyway).

    llama.cpp's own ``llama-server`` (it answers ``GET /props``) honours ``cache_prompt:
    false``, which every request carries, and gets no reset request: its slots stay parallel.
    Replicas behind litellm's Router get ``cache_prompt: false`` alone: the Router could send
    a reset and its call to two replicas."""

    _resets: dict[str, bool] = field(default_factory=dict)  # by URL: needs reset requests
    _locks: dict[tuple[int, str], asyncio.Lock] = field(default_factory=dict)

    async def send(
        self, url: str, call: dict[str, Any], sender: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Any:
        """``sender(call)``'s answer, ``call`` evaluated afresh on the server at ``url``."""
        call = fresh_call(call)
        if url not in self._resets:  # asked once per server; a second asker asks again
            self._resets[url] = not await _answers_props(url)
        if not self._resets[url]:
            return await sender(call)
        async with self._lock(url):  # no other request may come between the pair
            await sender(reset_call(call))
            return await sender(call)

    def _lock(self, url: str) -> asyncio.Lock:
        # an asyncio lock belongs to one event loop; a process may run several in turn
        key = (id(asyncio.get_running_loop()), url)
        return self._locks.setdefault(key, asyncio.Lock())


async def _answers_props(url: str) -> bool:
    """Whether the server is llama.cpp's ``llama-server``: it answers ``GET /props``."""
    import httpx

    root = url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=SERVER_TEMPLATE_TIMEOUT_S) as client:
            response = await client.get(f"{root}/props")
        return response.status_code == 200 and isinstance(response.json(), dict)
    except (httpx.HTTPError, ValueError):
        return False


PROBE_TIMEOUT_S = 3.0  # a server that does not accept a connection in this long is not there


def unreachable(url: str) -> str | None:
    """Why no server answers at ``url`` ("connection refused", "cannot resolve <host>", "no
    answer within 3 s"), or None when something accepts a connection there (a TCP connect:
    no request is sent). A URL reached through a proxy (the environment's, which httpx and
    the SDKs use) is not probed: only the proxy could say."""
    import socket
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    if not host or parts.scheme not in ("http", "https"):
        return None  # not a URL this can probe; the call says what is wrong with it
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(host):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return f"cannot resolve {host}"
    except TimeoutError:
        return f"no answer within {PROBE_TIMEOUT_S:g} s"
    except OSError as e:
        return e.strerror or type(e).__name__


def require_servers(api_base: str | None, flag: str) -> None:
    """Every server ``api_base`` names (one URL or replicas) accepts a connection; ValueError
    in one line naming the flag and the first one that does not."""
    from eval.plumbing.secrets.redaction import public_url

    for url in replicas(api_base):
        why = unreachable(url)
        if why is not None:
            sep = "" if flag.endswith("=") else " "
            raise ValueError(f"{flag}{sep}{public_url(url)}: no server answers there ({why})")


def server_template(api_base: str | None) -> ChatTemplate:
    """The chat template a llama.cpp server reports (``GET <server>/props``, its
    ``chat_template``); ValueError (one line) when it reports none."""
    import httpx

    from eval.plumbing.secrets.redaction import public_url

    urls = replicas(api_base)
    require_servers(api_base, "--api-base")  # no server: said so, not "no chat template"
    for url in urls:
        root = url.rstrip("/").removesuffix("/v1")
        try:
            response = httpx.get(f"{root}/props", timeout=SERVER_TEMPLATE_TIMEOUT_S)
            text = response.json().get("chat_template") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):  # down, or not llama.cpp's
            text = None
        if isinstance(text, str) and text.strip():
            _jinja(text)
            return ChatTemplate(f"server {public_url(url)}", _sha(text), text)
    where = public_url(urls[0]) if urls else "--api-base"
    raise ValueError(
        f"--server llamacpp: the server at {where} reports no chat template (GET /props); give "
        "--chat-template: chatml, a Jinja file, or the model's tokenizer folder"
    )


def load_template(spec: str | None) -> ChatTemplate:
    """``chatml``/None, a Jinja file, or a tokenizer folder; a bad one is refused in one line."""
    if spec in (None, "", CHATML):
        from agents.llm.embedded.chatml import TEMPLATE_SHA256

        return ChatTemplate(CHATML, TEMPLATE_SHA256, None)
    path = Path(spec).expanduser()
    if path.is_dir():
        text = _folder_template(path, spec)
        return ChatTemplate(str(path), _sha(text), text, folder=str(path.resolve()))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(
            f"--chat-template {spec}: not 'chatml', a template file or a tokenizer folder "
            f"({e.strerror or e})"
        ) from None
    try:
        _jinja(text)
    except Exception as e:  # jinja2's TemplateSyntaxError and friends
        raise ValueError(f"--chat-template {spec}: not a Jinja template: {e}") from None
    return ChatTemplate(str(path), _sha(text), text)


def _folder_template(path: Path, spec: str) -> str:
    """A tokenizer folder's chat template: ``chat_template.jinja`` (transformers >= 4.43
    saves it there) or ``tokenizer_config.json``'s ``chat_template`` (its default one)."""
    import json

    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = path / "tokenizer_config.json"
    try:
        text = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError) as e:
        raise ValueError(f"--chat-template {spec}: cannot read {config}: {e}") from None
    if isinstance(text, list):  # named templates: [{"name": "default", "template": ...}]
        text = next((t.get("template") for t in text if t.get("name") == "default"), None)
    if not isinstance(text, str) or not text:
        raise ValueError(f"--chat-template {spec}: {config} holds no chat_template")
    return text


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _raise(message: str) -> None:
    raise ValueError(f"chat template: {message}")


@functools.cache
def _jinja(text: str) -> Any:
    # the environment transformers renders chat templates in: trim_blocks, lstrip_blocks
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson  # transformers' own: not HTML-escaped, keys in order
    return env.from_string(text)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None,
            separators: Any = None, sort_keys: bool = False) -> str:  # fmt: skip
    import json

    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)  # fmt: skip


@functools.cache
def _tokenizer(folder: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _continue_final(rendered: str, messages: list[dict[str, Any]]) -> str:
    """Cut the rendered chat after the final message's text, as transformers does for
    ``continue_final_message``: the end-of-turn the template wrote after it goes."""
    final = messages[-1].get("content") or ""
    if not final.strip():
        raise ValueError("chat template: the message to continue is empty")
    at = rendered.rfind(final)
    if at < 0:  # templates that strip the content
        final = final.strip()
        at = rendered.rfind(final)
    if at < 0:
        raise ValueError("chat template: the final message is not in the rendered prompt")
    return rendered[: at + len(final)]


def server_token_ids(api_base: str | None, server: str, model: str, text: str) -> list[int] | None:
    """``text``'s token ids as the server's tokenizer gives them, without special tokens, or
    None where the server has no tokenize endpoint: llama-cpp-python's ``/extras/tokenize``,
    llama.cpp's ``/tokenize``, vLLM's ``/tokenize``."""
    import httpx

    urls = replicas(api_base)
    if not urls or server not in ("llamacpp", "vllm"):
        return None
    root = urls[0].rstrip("/").removesuffix("/v1")
    name = model.split("/", 1)[1] if "/" in model else model
    asks: list[tuple[str, dict[str, Any]]] = (
        [(f"{root}/extras/tokenize", {"input": text}),
         (f"{root}/tokenize", {"content": text, "add_special": False})]
        if server == "llamacpp"
        else [(f"{root}/tokenize", {"model": name, "prompt": text, "add_special_tokens": False})]
    )  # fmt: skip
    for url, body in asks:
        try:
            reply = httpx.post(url, json=body, timeout=30.0)
        except httpx.HTTPError:
            return None
        if reply.status_code == 200:
            ids = token_ids_answer(reply.content, url)
            if url.endswith("/extras/tokenize"):  # it adds the model's BOS, if it has one
                try:
                    probe = httpx.post(url, json={"input": "a"}, timeout=30.0)
                except httpx.HTTPError:
                    return None
                ids = ids[max(0, len(token_ids_answer(probe.content, url)) - 1) :]
            return ids
    return None


def token_ids_answer(body: bytes, url: str) -> list[int]:
    """The ids of a tokenize endpoint's answer, read strictly: a JSON object whose
    ``tokens`` is a list of non-negative integers; LLMReplyError (one line naming the
    endpoint and what is wrong) otherwise."""
    import json

    from agents.llm.errors import LLMReplyError
    from eval.plumbing.secrets.redaction import public_url

    def wrong(why: str) -> LLMReplyError:
        return LLMReplyError(f"the server's tokenize answer ({public_url(url)}) is unusable: {why}")

    try:
        answer = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise wrong("not UTF-8") from None
    except ValueError:
        raise wrong("not JSON") from None
    if not isinstance(answer, dict):
        raise wrong(f"a JSON {type(answer).__name__}, not an object")
    tokens = answer.get("tokens")
    if not isinstance(tokens, list):
        raise wrong("no 'tokens' list")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in tokens):
        raise wrong("'tokens' holds something other than token ids (non-negative integers)")
    return tokens
