"""Generate-then-retrieve agents: the LLM writes a text once, the retriever searches with it.

``hyde``, ``query2doc`` and ``lamer`` are R2MED's generation-augmented baselines, messages and
combination rules as R2MED runs them (`agents.graphs.combine`): the text is searched alone
(HyDE), after the query twice (query2doc; dense retrievers embed ``query[SEP]text``) or after
the query (LameR); a reasoning model's response is searched alone whatever the method. LameR's
prompt also shows the BM25 top-10, each cut to 512 words. ``reason`` is BRIGHT's reasoning
rewrite (reason.py L157-164): the query with its newlines collapsed, BRIGHT's system message,
and the whole text (a reasoning model's response) replaces the query.

With a generation source (``ctx.generations``, `agents.shared.generations`) ``generate`` reads each
query's text instead of calling a model, and no prompt is loaded; the same rules apply to it. A
query the source has no text for is searched with the raw query, and its trace says so. LameR
then skips its first pass: the BM25 top-10 only feeds the prompt, which is not sent, and a
top-10 of ours beside a text written from R2MED's would suggest a link that is not there.

Graph: START -> [first_pass] -> generate -> retrieve -> END.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.graphs.combine import falls_back, r2med_request
from agents.graphs.context import AgentContext, AgentState, search_step
from agents.llm.steps import llm_step
from agents.shared.specs import AgentSpec
from retrievers.base import SearchRequest

LAMER_DOCS = 10
LAMER_DOC_WORDS = 512
LAMER_DOC_TEMPLATE = "\n[{i}]. {text}"


def format_docs(
    texts: list[str], max_words: int = LAMER_DOC_WORDS, template: str = LAMER_DOC_TEMPLATE
) -> str:
    """Number documents for a prompt: each text has its whitespace collapsed to single spaces
    and is cut to ``max_words`` words, then fills ``template`` ({i} 1-based, {text}).

    The default template is LameR's ``{docs}`` exactly as R2MED builds it: ``"\\n[i]. text"``,
    so the prompt's "Possible Relevant Passages: {docs}" puts the list on the next line. Pass
    the first-stage top-10 (`LAMER_DOCS`); this function does not cut the list.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be positive, got {max_words}")
    return "".join(
        template.format(i=i, text=" ".join(text.split()[:max_words]))
        for i, text in enumerate(texts, 1)
    )


@dataclass(frozen=True)
class GenerateSpec:
    name: str
    description: str
    prompt: str  # prompt family under prompts/
    reads_docs: bool = False  # the prompt shows the first-stage top-10 (LameR)
    few_shot: bool = False  # the prompt takes {examples} from "<prompt>-examples" (query2doc)
    system: str | None = None  # a fixed system prompt ("system/<name>"); None: R2MED's, by task
    flat_query: bool = False  # the query's newlines become spaces before it is inserted (BRIGHT)

    @property
    def prompts(self) -> tuple[str, ...]:
        """The prompt families the agent reads, for the run's record of prompt hashes."""
        system = f"system/{self.system}" if self.system else "system"
        return (system, self.prompt) + ((f"{self.prompt}-examples",) if self.few_shot else ())


SPECS: dict[str, GenerateSpec] = {
    spec.name: spec
    for spec in (
        GenerateSpec("hyde", "HyDE: write a hypothetical answer passage, search with it", "hyde"),
        GenerateSpec(
            "query2doc",
            "query2doc: write a passage (few-shot), search with query x2 + passage",
            "query2doc",
            few_shot=True,
        ),
        GenerateSpec(
            "lamer",
            "LameR: answer from the BM25 top-10, search with query + answer",
            "lamer",
            reads_docs=True,
        ),
        GenerateSpec(
            "reason",
            "BRIGHT's reasoning rewrite: reason about the need, search with the reasoning",
            "reason",
            system="reason",
            flat_query=True,
        ),
    )
}


def build_graph(spec: GenerateSpec, ctx: AgentContext) -> Any:
    if ctx.generations is not None:
        return replay_graph(spec.name, ctx)
    from langgraph.graph import END, START, StateGraph  # here: naming an agent is free

    prompt = ctx.prompts.get(spec.prompt)
    system = ctx.prompts.get("system", spec.system) if spec.system else ctx.prompts.get("system")
    # query2doc's few-shot examples: R2MED's own per task (src/example.py), ours elsewhere
    examples = ctx.prompts.get(f"{spec.prompt}-examples") if spec.few_shot else None

    async def first_pass(state: AgentState) -> dict:
        ranking, step = search_step(
            ctx.first_stage,
            "first_pass",
            SearchRequest(query=state["query"]),
            LAMER_DOCS,
            state["query_id"],
        )
        texts = [ctx.corpus[doc_id] for doc_id in ranking]
        return {"steps": [step], "generated": {"docs": format_docs(texts, LAMER_DOC_WORDS)}}

    async def generate(state: AgentState) -> dict:
        query = state["query"].replace("\n", " ") if spec.flat_query else state["query"]
        values = {"query": query, "docs": state["generated"].get("docs", "")}
        if examples is not None:
            values["examples"] = examples.render()
        messages = [
            {"role": "system", "content": system.render()},
            {"role": "user", "content": prompt.render(**values)},
        ]
        text, step = await llm_step(ctx, "generate", messages)
        step["prompt"] = {"name": prompt.name, "sha256": prompt.sha256}
        return {"steps": [step], "generated": {"passage": text}}

    graph = StateGraph(AgentState)
    graph.add_node("generate", generate)
    graph.add_node("retrieve", _retrieve(spec.name, ctx))
    if spec.reads_docs:
        graph.add_node("first_pass", first_pass)
        graph.add_edge(START, "first_pass")
        graph.add_edge("first_pass", "generate")
    else:
        graph.add_edge(START, "generate")
    graph.add_edge("generate", "retrieve")
    graph.add_edge("retrieve", END)
    return graph.compile()


def _retrieve(method: str, ctx: AgentContext) -> Callable:
    async def retrieve(state: AgentState) -> dict:
        query = state["query"]
        note: dict[str, str] = {"reasoning": ctx.parser}
        text = state["generated"].get("passage")
        if text is None:  # a replayed source without this query
            request = SearchRequest(query=query)
            if ctx.generations is not None:
                label = ctx.generations.label
                note["note"] = f"no generation in {label}; searched with the raw query"
        elif falls_back(text, ctx.parser, _query_fallback(ctx)):
            # An empty text would make BM25 search for nothing; the query is our fallback,
            # and the trace says so (not for R2MED's own texts: agents.graphs.combine).
            request = SearchRequest(query=query)
            note["note"] = "empty generation; searched with the query instead"
        else:
            # R2MED's rule, an empty text included (src/eval_BM25.py L124-133)
            request = r2med_request(method, query, text, ctx.parser)
        ranking, step = search_step(
            ctx.retriever, "retrieve", request, ctx.depth, state["query_id"]
        )
        return {"steps": [step | note], "ranking": ranking}

    return retrieve


def _query_fallback(ctx: AgentContext) -> bool:
    """Whether an empty text is searched as the raw query: ours, but not for R2MED's released
    texts (R2MED searched them as they are) nor for an agent run without it (--preset paper)."""
    if ctx.generations is not None and ctx.generations.r2med:
        return False
    return bool(ctx.options.get("query_fallback", True))


def replay_graph(method: str, ctx: AgentContext) -> Any:
    """generate -> retrieve with each text read from ``ctx.generations``: no LLM, no prompt.

    ``method`` is the agent whose text it is (its combination rule applies); the search agents
    replay their trajectories' outputs through this graph too.
    """
    from langgraph.graph import END, START, StateGraph

    source = ctx.generations
    assert source is not None

    async def generate(state: AgentState) -> dict:
        text = source.texts.get(state["query_id"])
        step: dict[str, Any] = {"node": "generate", "source": source.label}
        if text is None:
            note = f"no generation in {source.label}; searched with the raw query"
            return {"steps": [step | {"output": None, "note": note}], "generated": {}}
        step |= {"output": text, "reasoning": ctx.parser}
        return {"steps": [step], "generated": {"passage": text}}

    graph = StateGraph(AgentState)
    graph.add_node("generate", generate)
    graph.add_node("retrieve", _retrieve(method, ctx))
    graph.add_edge(START, "generate")
    graph.add_edge("generate", "retrieve")
    graph.add_edge("retrieve", END)
    return graph.compile()


def _agent(spec: GenerateSpec) -> AgentSpec:
    return AgentSpec(
        spec.name,
        spec.description,
        build_graph,
        spec.prompts,
        bound=(spec,),
        llm_nodes=("generate",),
    )


HYDE = _agent(SPECS["hyde"])
QUERY2DOC = _agent(SPECS["query2doc"])
LAMER = _agent(SPECS["lamer"])
REASON = _agent(SPECS["reason"])
