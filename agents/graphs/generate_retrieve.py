"""Generate-then-retrieve agents: the LLM writes a text once, the retriever searches with it.

``hyde``, ``query2doc`` and ``lamer`` follow R2MED's combination rules: BM25 scores the
generated passage alone (HyDE), the query twice plus the passage (query2doc) or the query plus
the passage (LameR); dense retrievers average the embeddings of the instructed query and the
passage. LameR's prompt also shows the BM25 top-10, each cut to 512 words. ``reason`` is
BRIGHT's reasoning rewrite: the LLM's whole text replaces the query. For reasoning models only
the text after ``</think>`` is used.

With a generation source (``ctx.generations``, `agents.generations`) ``generate`` reads each
query's text instead of calling a model, and no prompt is loaded; a query the source has no
text for is searched with the raw query, and its trace says so. LameR then skips its first
pass: the BM25 top-10 only feeds the prompt, which is not sent, and a top-10 of ours beside a
text written from R2MED's would suggest a link that is not there.

Graph: START -> [first_pass] -> generate -> retrieve -> END.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.graphs.context import AgentContext, AgentState, answer_text, llm_step, search_step
from prompts import format_docs
from retrievers.base import SearchRequest

LAMER_DOCS = 10
LAMER_DOC_WORDS = 512


@dataclass(frozen=True)
class GenerateSpec:
    name: str
    description: str
    prompt: str  # prompt family under prompts/
    request: Callable[[str, str], SearchRequest]  # (query, generated text) -> what to search
    reads_docs: bool = False  # the prompt shows the first-stage top-10 (LameR)
    few_shot: bool = False  # the prompt takes {examples} from "<prompt>-examples" (query2doc)

    @property
    def prompts(self) -> tuple[str, ...]:
        """The prompt families the agent reads, for the run's record of prompt hashes."""
        return ("system", self.prompt) + ((f"{self.prompt}-examples",) if self.few_shot else ())


SPECS: dict[str, GenerateSpec] = {
    spec.name: spec
    for spec in (
        GenerateSpec(
            "hyde",
            "HyDE: write a hypothetical answer passage, search with it",
            "hyde",
            lambda q, p: SearchRequest(query=q, expansion=p, sparse_text=p),
        ),
        GenerateSpec(
            "query2doc",
            "query2doc: write a passage, search with query x2 + passage",
            "query2doc",
            lambda q, p: SearchRequest(query=q, expansion=p, sparse_text=f"{q} {q} {p}"),
            few_shot=True,
        ),
        GenerateSpec(
            "lamer",
            "LameR: answer from the BM25 top-10, search with query + answer",
            "lamer",
            lambda q, p: SearchRequest(query=q, expansion=p, sparse_text=f"{q} {p}"),
            reads_docs=True,
        ),
        GenerateSpec(
            "reason",
            "BRIGHT's reasoning rewrite: reason about the need, search with the reasoning",
            "reason",
            lambda q, p: SearchRequest(query=p),
        ),
    )
}


def build_graph(spec: GenerateSpec, ctx: AgentContext) -> Any:
    if ctx.generations is not None:
        return _replay_graph(spec, ctx)
    from langgraph.graph import END, START, StateGraph  # here: naming an agent is free

    prompt = ctx.prompts.get(spec.prompt)
    system = ctx.prompts.get("system")
    # R2MED's few-shot examples for query2doc are not public; ours live in a prompt file
    examples = ctx.prompts.get(f"{spec.prompt}-examples") if spec.few_shot else None

    async def first_pass(state: AgentState) -> dict:
        ranking, step = search_step(
            ctx.first_stage, "first_pass", SearchRequest(query=state["query"]), LAMER_DOCS
        )
        texts = [ctx.corpus[doc_id] for doc_id in ranking]
        return {"steps": [step], "generated": {"docs": format_docs(texts, LAMER_DOC_WORDS)}}

    async def generate(state: AgentState) -> dict:
        values = {"query": state["query"], "docs": state["generated"].get("docs", "")}
        if examples is not None:
            values["examples"] = examples.text
        messages = [
            {"role": "system", "content": system.text},
            {"role": "user", "content": prompt.render(**values)},
        ]
        text, step = await llm_step(ctx, "generate", messages)
        step["prompt"] = {"name": prompt.name, "sha256": prompt.sha256}
        return {"steps": [step], "generated": {"passage": answer_text(text)}}

    graph = StateGraph(AgentState)
    graph.add_node("generate", generate)
    graph.add_node("retrieve", _retrieve(spec, ctx))
    if spec.reads_docs:
        graph.add_node("first_pass", first_pass)
        graph.add_edge(START, "first_pass")
        graph.add_edge("first_pass", "generate")
    else:
        graph.add_edge(START, "generate")
    graph.add_edge("generate", "retrieve")
    graph.add_edge("retrieve", END)
    return graph.compile()


def _retrieve(spec: GenerateSpec, ctx: AgentContext) -> Callable:
    async def retrieve(state: AgentState) -> dict:
        query = state["query"]
        note: dict[str, str] = {}
        if "passage" not in state["generated"]:  # a replayed source without this query
            request = SearchRequest(query=query)
            if ctx.generations is not None:
                label = ctx.generations.label
                note = {"note": f"no generation in {label}; searched with the raw query"}
        elif not state["generated"]["passage"]:
            # An empty generation would make BM25 search for nothing; the query is the honest
            # fallback, and the trace says so.
            request = spec.request(query, query)
            note = {"note": "empty generation; searched with the query instead"}
        else:
            request = spec.request(query, state["generated"]["passage"])
        ranking, step = search_step(ctx.retriever, "retrieve", request, ctx.depth)
        return {"steps": [step | note], "ranking": ranking}

    return retrieve


def _replay_graph(spec: GenerateSpec, ctx: AgentContext) -> Any:
    """generate -> retrieve with each text read from ``ctx.generations``: no LLM, no prompt."""
    from langgraph.graph import END, START, StateGraph

    from agents.generations import stripped

    source = ctx.generations
    assert source is not None

    async def generate(state: AgentState) -> dict:
        text = source.texts.get(state["query_id"])
        step: dict[str, Any] = {"node": "generate", "source": source.label}
        if text is None:
            note = f"no generation in {source.label}; searched with the raw query"
            return {"steps": [step | {"output": None, "note": note}], "generated": {}}
        passage, cut = stripped(text)
        step |= {"output": text, "stripped_think": cut}
        return {"steps": [step], "generated": {"passage": passage}}

    graph = StateGraph(AgentState)
    graph.add_node("generate", generate)
    graph.add_node("retrieve", _retrieve(spec, ctx))
    graph.add_edge(START, "generate")
    graph.add_edge("generate", "retrieve")
    graph.add_edge("retrieve", END)
    return graph.compile()
