"""How a generated text meets the query: R2MED's combination rules, one function.

R2MED searches each method's text as follows (R2MED/R2MED ``src/eval_BM25.py`` L124-133 for
BM25, ``src/eval_retrieval.py`` L37-44 for dense retrievers, whose ``encode_queries`` averages
the two embeddings of a ``[query, text]`` pair, ``src/utils.py`` L79-90):

=====================  =========================================  ==================================
text of                BM25 scores                                a dense retriever embeds
=====================  =========================================  ==================================
a reasoning model      the response alone (`agents.llm.text`)     [query, response], averaged
query2doc              ``query * 2 + " " + text`` (no space       one string, ``query + "[SEP]" +
                       between the two copies)                    text``
lamer                  ``query + " " + text``                     [query, text], averaged
hyde, search-o1,       the text alone                             [query, text], averaged
search-r1
=====================  =========================================  ==================================

"A reasoning model" is R2MED's list (`agents.llm.text.reasoning_parser`); its rule holds for
every method, query2doc and LameR included. ``reason`` is BRIGHT's rewrite, which replaces the
query: both retrievers search the (response of the) text alone.

An empty text. R2MED searches every text as it is, an empty response included (no fallback,
L124-133): its BM25 analyses it to no term, scores every document 0 and keeps the first 100 of
its stable descending sort, the corpus's first 100 in file order (``retrieval_bm25``,
L74-83); a dense retriever averages the query's embedding with that of the empty text. Our
BM25 ranks no document for a text without a corpus term (retrievers/bm25.py: only a matching
document is ranked), and ``--pad`` fills an empty ranking with the corpus's first documents at
score 0 in file order (`eval.evaluate.pad_run`): R2MED's list. `r2med_request` sends an empty
BM25 text as one space, which analyses to no term as R2MED's empty text does, because an
empty ``sparse_text`` means the query to our retrievers (retrievers/base.py). A dense
retriever follows R2MED under its rules (``dense.r2med_rules``, on under ``--preset paper``): a
``[query, text]`` request is ``paired`` (`retrievers.base.SearchRequest`), and its empty text is
embedded and averaged in, ``(emb(query) + emb("")) / 2`` (src/utils.py L79-90). Otherwise a
dense retriever embeds the query alone for an empty text (retrievers/dense.py averages only a
non-empty expansion). `falls_back` says when the agents search the raw query instead (ours,
the default for generated texts): only with their fallback on, and only when the part of the
text that would be searched holds nothing.
"""

from __future__ import annotations

import dataclasses

from agents.llm.text import read_response
from retrievers.base import SearchRequest

SEP = "[SEP]"  # src/eval_retrieval.py L42
# A BM25 text without a term: what R2MED's BM25 makes of an empty text (an empty sparse_text
# would mean the query to retrievers/base.py)
NO_TERM = " "


def generated_request(method: str, query: str, text: str, parser: str = "none") -> SearchRequest:
    """What ``method``'s generated ``text`` searches for ``query``; ``parser`` is the text's
    reasoning family (``none`` for a model that writes its response only)."""
    if method == "reason":
        response = read_response(text, parser)
        return SearchRequest(query=query, sparse_text=response, dense_text=response)
    if parser != "none":
        response = read_response(text, parser)
        return SearchRequest(query=query, expansion=response, sparse_text=response, paired=True)
    if method == "query2doc":
        return SearchRequest(
            query=query, sparse_text=query * 2 + " " + text, dense_text=query + SEP + text
        )
    if method == "lamer":
        return SearchRequest(
            query=query, expansion=text, sparse_text=query + " " + text, paired=True
        )
    return SearchRequest(query=query, expansion=text, sparse_text=text, paired=True)


def r2med_request(method: str, query: str, text: str, parser: str = "none") -> SearchRequest:
    """`generated_request`, an empty text included: its BM25 text is then `NO_TERM`, which
    ranks nothing, as R2MED's BM25 ranks nothing above 0 for it."""
    request = generated_request(method, query, text, parser)
    if request.sparse_text == "":
        return dataclasses.replace(request, sparse_text=NO_TERM)
    return request


def is_empty(text: str, parser: str = "none") -> bool:
    """Whether the part of ``text`` that would be searched holds nothing."""
    return not read_response(text, parser).strip()


def falls_back(text: str, parser: str = "none", query_fallback: bool = True) -> bool:
    """Whether ``text`` is searched as the raw query instead of as R2MED searches it: with the
    fallback on (ours) and nothing to search in it (then the agents say so in the trace).
    Without it (``--preset paper``, R2MED's released texts) an empty text is searched as it is,
    as R2MED's src/eval_BM25.py L124-133 searches it."""
    return query_fallback and is_empty(text, parser)
