"""Retrieval on a Ray cluster (``--ray ADDRESS``): joining it (`connect`) and encoding a
corpus on its workers (`encode`). Ray is an optional extra, imported only by these modules and
only when a command is given ``--ray``."""
