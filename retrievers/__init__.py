"""Retrievers over a task corpus: BM25 variants (and, later, dense and hybrid)."""
