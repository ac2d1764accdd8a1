"""One LLM call as a trace step: the node's sampling sent, the reply and its usage recorded.

Agents' graph nodes and rerank stages alike call the model through here, so every trace step
of a call has one shape and every call is made under its node's name (what the sampling table
and a dry run's worst-case answers go by).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents.llm.dry import NODE


async def llm_call(
    ctx: Any, node: str, messages: list[dict], **params: Any
) -> tuple[Any, dict[str, Any]]:
    """Call ``ctx.llm`` with the node's sampling (``ctx.sampling``, which ``params`` override)
    and describe the call as a trace step; returns (completion, step). ``ctx`` is an agent's
    or a rerank stage's context."""
    if ctx.llm is None:
        raise RuntimeError(f"node {node!r} needs an LLM but the agent was built without one")
    token = NODE.set(node)
    try:
        completion = await ctx.llm.chat(messages, **{**ctx.sampling.get(node, {}), **params})
    finally:
        NODE.reset(token)
    return completion, _step(node, {"messages": messages}, completion)


async def llm_complete_call(
    ctx: Any, node: str, prompt: str, **params: Any
) -> tuple[Any, dict[str, Any]]:
    """`llm_call` for a raw prompt (`agents.llm.LLM.complete`: no chat template); the step
    records the ``prompt`` where a chat's records its messages."""
    if ctx.llm is None:
        raise RuntimeError(f"node {node!r} needs an LLM but the agent was built without one")
    token = NODE.set(node)
    try:
        completion = await ctx.llm.complete(prompt, **{**ctx.sampling.get(node, {}), **params})
    finally:
        NODE.reset(token)
    return completion, _step(node, {"prompt": prompt}, completion)


def _step(node: str, sent: dict[str, Any], completion: Any) -> dict[str, Any]:
    step = {
        "node": node,
        **sent,
        "output": completion.text,
        "finish_reason": completion.finish_reason,
        "cached": completion.cached,
        "usage": completion.usage.to_dict(),
    }
    if completion.tool_calls:
        step["tool_calls"] = [dataclasses.asdict(call) for call in completion.tool_calls]
    return step


async def llm_step(
    ctx: Any, node: str, messages: list[dict], **params: Any
) -> tuple[str, dict[str, Any]]:
    """Call the LLM and describe the call as a trace step; returns (text, step)."""
    completion, step = await llm_call(ctx, node, messages, **params)
    return completion.text, step
