"""A retrieval server: the same retrievers, built and cached as `agents.run` builds them, served
to other processes.

    python -m retrievers.serve --dataset TASK --retriever SPEC [--host 127.0.0.1 --port N]
    python -m retrievers.serve --dataset TASK --retriever SPEC --mcp

* `index`: one retriever per task and the fingerprint of what it indexes;
* `batch`: requests that arrive together searched as one batch (one encode for dense), on a
  bounded queue;
* `app`: the HTTP API (FastAPI): Search-R1's ``POST /retrieve``, ``GET /health``, and the
  native ``POST /search`` (ids and scores, every field of a `SearchRequest`) that
  ``--retriever remote:`` calls (retrievers/remote.py);
* `guard`: what one careless or hostile client cannot do to the others: the bearer token, the
  body counted and timed as it arrives, a deadline for each request head, a connection cap,
  and the listening socket bound so that a port in use is one line;
* `mcp`: the same retriever as MCP tools ``search`` and ``read`` (the official SDK);
* `__main__`: the command line.
"""
