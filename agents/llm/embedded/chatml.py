"""ChatML prompts, as the embedded models' own chat templates render them.

The embedded provider (`agents.llm.embedded.provider`) renders a prompt here and runs it as a raw
completion rather than through llama-cpp's chat API, so that a trailing assistant message is
continued in the same turn: the Search-o1 agent splices search results into the model's
unfinished reasoning that way. The token counter (`agents.llm.tokens`) and the built-in
``--chat-template chatml`` of a llama.cpp server (`agents.llm.serving`) render the same text.

Rendering needs neither litellm nor llama.cpp, and this module imports neither
(tests/agents/llm/embedded/test_embedded_provider.py).
"""

from __future__ import annotations

import hashlib
from typing import Any

# The built-in ChatML's sha256 in cache keys and run bindings (config.json's
# chat_template_sha256): the hash of the name of the module that rendered it first, kept so
# that recorded runs and cached answers still match.
TEMPLATE_SHA256 = hashlib.sha256(b"agents.llm.embedded.provider").hexdigest()


def content_text(content: Any) -> str:
    """Message content as text: OpenAI-style content parts are reduced to their text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def render_chatml(messages: list[dict], default_system: str | None = None) -> str:
    """The ChatML prompt for `messages`, as the models' own chat templates render it.

    A trailing assistant message is a partial turn: it is left open (no `<|im_end|>`) so the
    model continues it. Otherwise the prompt ends with an opened assistant turn.
    """
    if not messages:
        raise ValueError("messages must not be empty")
    turns = list(messages)
    if default_system is not None and turns[0].get("role") != "system":
        turns.insert(0, {"role": "system", "content": default_system})
    partial = turns[-1].get("role") == "assistant"
    closed = turns[:-1] if partial else turns
    prompt = "".join(
        f"<|im_start|>{turn.get('role', 'user')}\n{content_text(turn.get('content'))}<|im_end|>\n"
        for turn in closed
    )
    if partial:
        return prompt + f"<|im_start|>assistant\n{content_text(turns[-1].get('content'))}"
    return prompt + "<|im_start|>assistant\n"
