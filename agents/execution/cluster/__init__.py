"""Runs and sweeps on a Ray cluster (``--ray ADDRESS``): one LLM cache for every worker
(`cache`), a run folder's inputs and outputs sent as bytes (`folders`), a sweep's cells as Ray
tasks (`cells`), one run's queries on a pool of actors (`queries`). Joining the cluster is
retrievers.cluster.connect's."""
