"""How a generated text meets the query: R2MED's combination rules, one function.

R2MED searches each method's text as follows (R2MED/R2MED ``src/eval_BM25.py`` L124-133 for
BM25, ``src/eval_retrieval.py`` L37-44 for dense retrievers, whose ``encode_queries`` averages
the two embeddings of a ``[query, text]`` pair, ``src/utils.py`` L79-89):

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
"""

from __future__ import annotations

from agents.llm.text import read_response
from retrievers.base import SearchRequest

SEP = "[SEP]"  # src/eval_retrieval.py L42


def generated_request(method: str, query: str, text: str, parser: str = "none") -> SearchRequest:
    """What ``method``'s generated ``text`` searches for ``query``; ``parser`` is the text's
    reasoning family (``none`` for a model that writes its response only)."""
    if method == "reason":
        response = read_response(text, parser)
        return SearchRequest(query=query, sparse_text=response, dense_text=response)
    if parser != "none":
        response = read_response(text, parser)
        return SearchRequest(query=query, expansion=response, sparse_text=response)
    if method == "query2doc":
        return SearchRequest(
            query=query, sparse_text=query * 2 + " " + text, dense_text=query + SEP + text
        )
    if method == "lamer":
        return SearchRequest(query=query, expansion=text, sparse_text=query + " " + text)
    return SearchRequest(query=query, expansion=text, sparse_text=text)


def is_empty(text: str, parser: str = "none") -> bool:
    """Whether the part of ``text`` that would be searched holds nothing (then the agents
    search with the raw query instead, and say so)."""
    return not read_response(text, parser).strip()
