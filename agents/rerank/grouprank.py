"""GroupRank (`grouprank`): groupwise reasoning reranking as its own code runs it.

GroupRank (DIVER; github.com/AQ-MedAI/Diver at 95b111b, ``Reranker/rerank_groupwise.py``; the
checkpoints Diver-GroupRank-7B and -32B) scores the first stage's top ``input_k`` documents in
groups, each group one call:

* the lists (L19, L116-141, L229-238): the top ``input_k`` of each query's first-stage scores
  (``--input_k``, 100 in ``reranker_script.sh``), shuffled in place by Python's ``random``,
  seeded 666 at import (L19), then cut into groups ``docs[i:i + group_size]`` for ``i`` in
  ``range(0, len(docs), interval)`` (L124-125; the CLI's defaults ``group_size`` 10,
  ``interval`` 10, L192-193). Here the input ranking's first ``depth``, in its order: the same
  list unless first-stage scores tie, which L234's stable sort leaves in the score file's order
  (a TREC run file keeps its own with ``--order file``);
* a group's messages (L126-135): each document's runs of newlines made one space and its text
  cut to ``max_doc_len`` = 3,000 characters (L130, L195), numbered ``"[{}]. {}\\n\\n"`` (L131,
  ``prompts/grouprank/passage.txt``); the user prompt (L64-82, ``prompts/grouprank/default.txt``)
  filled with the query, the documents and ``TOPK`` = the group's size (L132); the system
  prompt (L42-62, ``prompts/grouprank/system.txt``); through the checkpoint's chat template with
  the generation prompt (L133-135: here the server's);
* sampling (L40): temperature 0.3, top_p 0.8, ``max_tokens`` 8,000 (option ``max_tokens``, which
  the sampling table sends; ``agents.llm.sampling``); ``logprobs=10`` is not sent: only the
  text is read (L159);
* ``repeat_num`` passes (L143-148, default 2, L194): every pass shuffles every query's list
  again, in place, so a pass shuffles the order the pass before left;
* the reply (``_extract_rerank_output`` L84-114, `extract_scores`): the inside of its first
  ``<answer>...</answer>``, stripped, where it has one; the last ```` ```json ```` block, else the
  last ``{...}`` (non-greedy); ``[7]]`` mended to ``[7]``; one ``}`` added where ``{`` outnumber
  ``}``; whitespace made single spaces; ``dict(json.loads(...))``;
* each entry (L162, `entry_scores`): ``dids[int(idx.strip().strip('[]')) - 1]`` scored
  ``score / 10``; so ``[0]`` is the group's last document (Python's index -1); an id outside
  the group, a score that is not a number, or a reply with no readable JSON fails the whole
  group, whose documents all score 0 (L163-167); a document the reply leaves out gets nothing
  from it;
* the merge (L156-174, ``avg_scores`` L22-33): each document's scores over all passes averaged,
  documents in the order of their first score; sorted by the average, descending (stable); the
  top ``k`` kept (100 in ``reranker_script.sh``), so a document no reply scored is dropped;
* the interpolation (L267-273): ``(0.6 * grouprank) + (0.4 * first-stage score)`` over the kept
  documents, sorted again (stable). Here the first-stage score is the input ranking's, the
  previous stage's; ``interpolate=false`` returns GroupRank's averages (the original's
  ``reranker_results.json``, L263).

The shuffle stream. The original draws every shuffle from the one global stream: for each
pass, for each query in the order of its score file (L230, written in the dataset's order by
``Retriever/run.py`` L148-156, L202-207), one ``random.shuffle`` of that query's list (L123).
A query's groups thus depend on every query before it and on the passes before. The stage is
given the lengths of all its queries' input lists in the task's order
(`agents.rerank.StageContext.list_lengths`) and replays that stream when it is built
(`shuffle_stream`: ``random.Random(seed)``, ``shuffle`` of an index list per query per pass,
composed in place: the same draws as shuffling the documents). A run over the same queries in
the same order, with lists as long, groups every query as the original does. A run over
fewer queries (``--limit``, a query whose first stage failed) draws another stream: the
first pass of the leading queries is the same, nothing after them is; each query's trace
says where it stood in the stream it drew (its ``shuffle`` step: position, number of
queries, and `stream_sha256` of the (query id, length) list). A stage given no lengths (built
alone, as in a test) draws a stream of the one query, and its step says so. This assumes
nothing else drew from the original's global stream between L19 and the first shuffle:
its vLLM (0.10.0, ``env_requirements/requirements.txt`` L7) seeds its engine in the engine's
own process unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0``.

Each group's outcome (`OUTCOMES`) is in its trace step (its documents, pass, the scores read,
the call) and counted in the task's summary. The reply is read whole
(`agents.llm.text.whole_reply`). One departure: a score that is not finite once divided
by 10 (NaN, Infinity, beyond float32), which the original would carry into its sort and
which the evaluator refuses, makes its group unread. Each pass's calls are sent with its
sample index, so a group whose prompt repeats in another pass (a list of one document) is
sampled again rather than read from the cache, as vLLM samples every prompt of its batch.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agents.llm.errors import LLMReplyError
from agents.llm.steps import llm_call
from agents.llm.text import whole_reply
from agents.rerank import StageContext
from agents.shared.specs import StageSpec
from eval.usage import Usage

FAMILY = "grouprank"
PARTS = ("system", "passage")  # besides default.txt, the user prompt
DEFAULTS: dict[str, Any] = {
    # the run's --model (and its --api-base); agents.config.run_config fills in the name
    "model": "",
    "api_base": "",
    "depth": 100,  # --input_k (reranker_script.sh: 100)
    "k": 100,  # --k, the top kept (reranker_script.sh: 100)
    "group_size": 10,  # --group_size L192
    "interval": 10,  # --interval L193
    "passes": 2,  # --repeat_num L194
    "max_doc_chars": 3000,  # --max_doc_len L195 (characters)
    "seed": 666,  # random.seed(666) L19
    "max_tokens": 8000,  # SamplingParams L40: each call's budget (agents.llm.sampling)
    "interpolate": True,  # L267-273
    "group_weight": 0.6,  # L272
    "first_stage_weight": 0.4,  # L272
    # false: the original's list, the top k scored documents alone; true: the documents not
    # kept (unscored, below k or below depth) follow in their previous order
    "keep_rest": False,
}
POSITIVE = ("depth", "k", "group_size", "interval", "passes", "max_doc_chars", "max_tokens")
UNREAD_SCORE = 0  # L167
FLOAT32_MAX = 3.4028234663852886e38  # the evaluator refuses scores beyond float32
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # L88
_FENCED = re.compile(r"(?:```json\s*)([\s\S]+?)(?:\s*```)")  # L95
_BRACED = re.compile(r"\{[\s\S]*?\}")  # L100
_DOUBLED = re.compile(r"(\[\d+\])\]")  # L104
_SPACE = re.compile(r"\s+")  # L107
_NEWLINES = re.compile("\n+")  # L130
OUTCOMES = {
    "read": "the last ```json block (of the <answer>, where there is one) read as written",
    "repaired": "read after a repair: no ```json block (the last {...} was read), a '[n]]' "
    "mended to '[n]', or a missing '}' added",
    "unread": "no JSON object could be read, or an entry could not be used (an id outside "
    "the group, a score that is not a number): the group's documents all scored 0",
    "unusable-reply": "the reply could not be read as received (reason says why: not UTF-8, "
    "no choices, emptied by the length limit): the group's documents all scored 0",
}


def check_options(options: dict[str, Any]) -> None:
    for key in POSITIVE:
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")


def shuffle_stream(lengths: Mapping[str, int], passes: int, seed: int) -> dict[str, list]:
    """query id -> for each pass, the positions of its list in the order that pass groups
    them: L123's in-place ``random.shuffle`` of every query's list, query after query in
    ``lengths``' order, pass after pass, from one stream seeded ``seed`` (L19)."""
    rng = random.Random(seed)
    orders = {q: list(range(n)) for q, n in lengths.items()}
    out: dict[str, list[list[int]]] = {q: [] for q in lengths}
    for _ in range(passes):
        for q, order in orders.items():
            rng.shuffle(order)  # in place: the next pass shuffles this order
            out[q].append(list(order))
    return out


def stream_sha256(lengths: Mapping[str, int]) -> str:
    """The sha256 of the (query id, list length) pairs a stream is drawn over, in order."""
    text = json.dumps([[q, n] for q, n in lengths.items()], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def groups(docs: Sequence[str], group_size: int, interval: int) -> list[list[str]]:
    """``docs[i:i + group_size]`` for ``i`` in ``range(0, len(docs), interval)`` (L124-125)."""
    return [list(docs[i : i + group_size]) for i in range(0, len(docs), interval)]


def document_text(text: str, max_chars: int) -> str:
    """A document as a group shows it: runs of newlines one space, cut to ``max_chars`` (L130)."""
    return _NEWLINES.sub(" ", text)[:max_chars]


def extract_scores(reply: str) -> tuple[dict[Any, Any], bool]:
    """The reply's JSON as ``_extract_rerank_output`` reads it (L84-114), and whether it needed
    a repair (`OUTCOMES`); ValueError where the original raises its "no valid JSON" error."""
    text = reply
    answer = _ANSWER.search(text)
    if answer:
        text = answer.group(1).strip()
    fenced = _FENCED.findall(text)
    if fenced:
        found = fenced[-1].strip()
    else:
        braced = _BRACED.findall(text)
        if not braced:  # [-1] of nothing: the original's IndexError, caught at L111
            raise ValueError("no ```json block and no {...} in the reply")
        found = braced[-1]
    found = found.strip()
    mended = _DOUBLED.sub(r"\1", found)
    closed = mended + "}" if mended.count("{") > mended.count("}") else mended
    json_str = _SPACE.sub(" ", closed).replace("\n", " ").strip()
    try:
        scores = dict(json.loads(json_str))
    except Exception as exc:  # L111: a bare except, whatever json.loads or dict() raise
        raise ValueError(f"not a JSON object ({type(exc).__name__}: {exc})") from None
    return scores, not fenced or mended != found or closed != mended


def entry_scores(scores: Mapping[Any, Any], dids: Sequence[str]) -> list[tuple[str, float]]:
    """Each entry as (document, score / 10), in the reply's order (L162); any exception
    (an id outside the group, a key that is not a number, a score that is not one) fails the
    whole group, as at L163-167."""
    return [(dids[int(idx.strip().strip("[]")) - 1], score / 10) for idx, score in scores.items()]


def average_scores(pairs: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """``avg_scores`` (L22-33): each document's mean, in the order of its first score."""
    by_doc: dict[str, list[float]] = {}
    for doc_id, score in pairs:
        by_doc.setdefault(doc_id, []).append(score)
    return [(doc_id, sum(s) / len(s)) for doc_id, s in by_doc.items()]


def top_k(pairs: Sequence[tuple[str, float]], k: int) -> dict[str, float]:
    """L173: sorted by score, descending (stable: equals keep their order), the first ``k``."""
    return dict(sorted(pairs, key=lambda item: item[1], reverse=True)[:k])


def interpolated(
    scores: Mapping[str, float], first: Mapping[str, float], weight: float, first_weight: float
) -> dict[str, float]:
    """L269-273: ``(weight * score) + (first_weight * first-stage score)``, sorted again."""
    mixed = {d: (weight * s) + (first_weight * first[d]) for d, s in scores.items()}
    return dict(sorted(mixed.items(), key=lambda x: x[1], reverse=True))


def group_result(reply: str, dids: Sequence[str]) -> dict[str, Any]:
    """What one reply gives its group: the outcome, the (document, score) pairs, and why a
    group was not read."""
    try:
        scores, repaired = extract_scores(reply)
        pairs = entry_scores(scores, dids)
    except Exception as exc:  # L163: any failure scores the whole group 0
        return unread(dids, f"{type(exc).__name__}: {exc}")
    bad = [(d, s) for d, s in pairs if not abs(s) <= FLOAT32_MAX]  # NaN fails the test too
    if bad:
        return unread(dids, f"score {bad[0][1]} of {bad[0][0]} is not a finite number")
    return {"outcome": "repaired" if repaired else "read", "scores": pairs}


def unread(dids: Sequence[str], reason: str, outcome: str = "unread") -> dict[str, Any]:
    return {"outcome": outcome, "scores": [(d, UNREAD_SCORE) for d in dids], "reason": reason}


class GroupRankReranker:
    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.options = o = ctx.options
        # loaded here, not per query, so that building the stage records every prompt it sends
        self.opening = ctx.prompts.get(FAMILY)
        self.parts = {part: ctx.prompts.get(FAMILY, part) for part in PARTS}
        self.lengths = {q: min(o["depth"], n) for q, n in ctx.list_lengths.items()}
        self.streams = shuffle_stream(self.lengths, o["passes"], o["seed"])
        self.stream_sha256 = stream_sha256(self.lengths)
        self.positions = {q: i for i, q in enumerate(self.lengths, 1)}

    def stream(self, query_id: str, n: int) -> tuple[list[list[int]], dict[str, Any]]:
        """The query's order in each pass, and its place in the stream, for its trace."""
        step: dict[str, Any] = {"node": "shuffle", "seed": self.options["seed"]}
        if query_id not in self.streams:
            alone = {query_id: n}
            note = "no list of the run's queries was given: the stream is this query's alone"
            step.update(stream_position=1, stream_queries=1,
                        stream_sha256=stream_sha256(alone), note=note)  # fmt: skip
            orders = shuffle_stream(alone, self.options["passes"], self.options["seed"])
            return orders[query_id], step
        if self.lengths[query_id] != n:
            raise ValueError(f"{query_id}: its list has {n} documents, its stream was drawn "
                             f"for {self.lengths[query_id]}")  # fmt: skip
        step.update(stream_position=self.positions[query_id], stream_queries=len(self.streams),
                    stream_sha256=self.stream_sha256)  # fmt: skip
        return self.streams[query_id], step

    def messages(self, query: str, dids: Sequence[str]) -> list[dict[str, str]]:
        """A group's messages as L126-135 build them."""
        limit = self.options["max_doc_chars"]
        passages = "".join(
            self.parts["passage"].render(rank=i, passage=document_text(self.ctx.corpus[d], limit))
            for i, d in enumerate(dids, 1)
        )
        user = self.opening.render(num=len(dids), query=query, passages=passages)
        return [
            {"role": "system", "content": self.parts["system"].render()},
            {"role": "user", "content": user},
        ]

    async def score_group(
        self, query: str, dids: list[str], pass_number: int, group: int
    ) -> dict[str, Any]:
        """One group's call and its reading, as its trace step."""
        messages = self.messages(query, dids)
        where = {"node": "group", "pass": pass_number, "group": group, "doc_ids": dids}
        try:
            # each pass its own sample: a prompt that repeats is drawn again, not read back
            completion, call = await llm_call(self.ctx, "group", messages, sample=pass_number - 1)
        except LLMReplyError as exc:
            return {**where, **unread(dids, str(exc), "unusable-reply"), "messages": messages,
                    "output": None, "usage": Usage.unread_call().to_dict()}  # fmt: skip
        # the reply as the model wrote it, whatever the server split off as reasoning
        reply = whole_reply(completion)
        result = group_result(reply, dids)
        scored = {d for d, _ in result["scores"]}
        return {
            **where,
            **result,
            "unscored": [d for d in dids if d not in scored],
            **{k: v for k, v in call.items() if k != "node"},
            "output": reply,
        }

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        o = self.options
        ids = list(ranking)[: o["depth"]]
        orders, shuffled = self.stream(query_id, len(ids))
        steps: list[dict[str, Any]] = [shuffled]
        pairs: list[tuple[str, float]] = []
        for pass_number, order in enumerate(orders, 1):
            docs = [ids[i] for i in order]
            for group, dids in enumerate(groups(docs, o["group_size"], o["interval"]), 1):
                step = await self.score_group(query, dids, pass_number, group)
                pairs.extend(step["scores"])
                steps.append(step)
        kept = top_k(average_scores(pairs), o["k"])
        final = (
            interpolated(kept, ranking, o["group_weight"], o["first_stage_weight"])
            if o["interpolate"]
            else kept
        )
        steps.append({"node": "merge", "average": list(kept.items()),
                      "interpolated": o["interpolate"]})  # fmt: skip
        return {"ranking": with_rest(final, ranking) if o["keep_rest"] else final, "steps": steps}


def with_rest(final: Mapping[str, float], ranking: Mapping[str, float]) -> dict[str, float]:
    """``final`` and then the documents of ``ranking`` it lacks, in their order, each scored
    1 below the one before it (so the ranking still decreases)."""
    out = dict(final)
    floor = min(out.values(), default=0.0)
    rest = [d for d in ranking if d not in out]
    out.update((d, floor - i) for i, d in enumerate(rest, 1))
    return out


def build_grouprank(ctx: StageContext) -> GroupRankReranker:
    return GroupRankReranker(ctx)


GROUPRANK = StageSpec(
    "grouprank",
    "GroupRank: groups of 10 scored 0-10 in 2 shuffled passes, averaged, then 0.6/0.4 with "
    "the first stage (its prompts, sampling and JSON reading)",
    build_grouprank,
    uses_llm=True,
    llm_nodes=("group",),
    prompts=(FAMILY,),
    defaults=DEFAULTS,
    check_options=check_options,
)
