"""Tool calls as text, for the backends whose prompts are rendered here (``local/`` models,
``--server llamacpp``): OpenAI-style tools and tool messages in, tool calls parsed out.

The format is Qwen2.5's (Hermes-style), as its own chat template writes it: the tools' JSON
schemas in the system message inside ``<tools></tools>``, each call the model makes as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, and each result sent back in a
user turn inside ``<tool_response></tool_response>``. `text_messages` turns a conversation with
tools into plain messages that ChatML rendering then turns into exactly the prompt the model's
template gives (checked against the GGUF's own template in the tests); `parse_tool_calls` reads
the calls back out of the output, as vLLM's ``hermes`` tool parser does on a server.

A call whose JSON cannot be read is still returned as a call (its ``arguments`` the raw text):
the agent answers it with an error message the model can act on, rather than losing the turn.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from agents.llm.embedded.chatml import content_text

CALL, END_CALL = "<tool_call>", "</tool_call>"
RESPONSE, END_RESPONSE = "<tool_response>", "</tool_response>"

# Qwen2.5's template, word for word, around the tool schemas
TOOLS_HEAD = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

_CALLS = re.compile(re.escape(CALL) + r"(.*?)(?:" + re.escape(END_CALL) + r"|$)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_FENCE = re.compile(r"```(?:json)?\s*```")  # a code fence left empty once its calls are taken


@dataclass(frozen=True)
class ToolCall:
    """One function call as the OpenAI API gives it: ``arguments`` is JSON text (or, when the
    model wrote something else, that text)."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        """The entry of an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def _json(value: Any) -> str:
    # transformers' tojson filter for chat templates: json.dumps, non-ASCII kept
    return json.dumps(value, ensure_ascii=False)


def _call_text(call: dict[str, Any]) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        # the template wants a mapping (transformers and vLLM parse OpenAI's JSON text); text
        # that is not JSON is what the model wrote, so it goes back as it was
        try:
            arguments = _json(json.loads(arguments))
        except ValueError:
            pass
    else:
        arguments = _json(arguments)
    return f'{CALL}\n{{"name": "{function.get("name", "")}", "arguments": {arguments}}}\n{END_CALL}'


def tool_names(tools: list[dict] | None) -> list[str]:
    """The function names of OpenAI-style tools."""
    return [str(tool.get("function", {}).get("name", "")) for tool in tools or ()]


def uses_tools(messages: list[dict[str, Any]], tools: list[dict] | None) -> bool:
    """Whether a request needs the text protocol: tools offered, or tool turns in the chat."""
    return bool(tools) or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def text_messages(
    messages: list[dict[str, Any]], tools: list[dict] | None, default_system: str | None
) -> list[dict[str, str]]:
    """``messages`` (with ``tool_calls`` and ``tool`` turns) as plain role/content messages."""
    out: list[dict[str, str]] = []
    rest = list(messages)
    if tools:
        system = default_system or ""
        if rest and rest[0].get("role") == "system":
            system = content_text(rest.pop(0).get("content"))
        schemas = "".join("\n" + _json(tool) for tool in tools)
        out.append({"role": "system", "content": system + TOOLS_HEAD + schemas + TOOLS_TAIL})
    previous = None
    for message in rest:
        role = message.get("role", "user")
        if role == "tool":
            block = f"{RESPONSE}\n{content_text(message.get('content'))}\n{END_RESPONSE}"
            if previous == "tool":  # consecutive results share one user turn
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + block}
            else:
                out.append({"role": "user", "content": block})
        else:
            text = content_text(message.get("content"))
            if role == "assistant" and message.get("tool_calls"):
                calls = "\n".join(_call_text(call) for call in message["tool_calls"])
                text = f"{text}\n{calls}" if text else calls
            out.append({"role": role, "content": text})
        previous = role
    return out


def mapping_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each call's JSON ``arguments`` text as a mapping, which is what chat
    templates expect (transformers' convention; vLLM converts the same way)."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = dict(call.get("function", {}))
                try:
                    function["arguments"] = json.loads(function.get("arguments") or "{}")
                except (TypeError, ValueError):
                    pass  # already a mapping, or not JSON: the template gets what there is
                calls.append({**call, "function": function})
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def parse_tool_calls(text: str, names: Collection[str] = ()) -> tuple[str, list[ToolCall]]:
    """(the text before the first call, stripped; the calls) of a model's output.

    Without a ``<tool_call>`` block, a JSON object naming one of ``names`` (the tools
    offered) with its ``arguments``, bare or in a Markdown code fence, is read as a call too:
    small models often write calls that way, and llama.cpp's generic tool format is the same.
    Call ids are derived from the output, so the same output always gets the same ids.
    """
    found = [m.group(1).strip() for m in _CALLS.finditer(text)]
    if found:
        content = text[: text.find(CALL)].strip()
    else:
        content, found = _loose_calls(text, names)
    if not found:
        return text, []
    stem = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    calls = []
    for i, body in enumerate(found):
        name, arguments = "", body
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
            match = _NAME.search(body)
            name = match.group(1) if match else ""
        if isinstance(parsed, dict):
            name = str(parsed.get("name", ""))
            args = parsed.get("arguments", parsed.get("parameters", {}))
            arguments = args if isinstance(args, str) else _json(args)
        calls.append(ToolCall(f"call_{stem}_{i}", name, arguments))
    return content, calls


def _loose_calls(text: str, names: Collection[str]) -> tuple[str, list[str]]:
    """JSON calls outside ``<tool_call>`` tags: (the text around them, their JSON texts).

    Every JSON object in the text that names an offered tool counts (one per line, several
    in a row, or in code fences); the fences around them go with them."""
    if not names:
        return text, []
    decoder = json.JSONDecoder()
    calls, kept, at, i = [], [], 0, text.find("{")
    while i >= 0:
        try:
            parsed, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(parsed, dict) and parsed.get("name") in names:
            calls.append(text[i:end])
            kept.append(text[at:i])
            at = end
        i = text.find("{", end)
    if not calls:
        return text, []
    kept.append(text[at:])
    return _FENCE.sub("", "".join(kept)).strip(), calls
