"""Any pipeline (an agent, its retriever, its rerank stages) behind MTEB's search protocol.

``mteb.evaluate(MTEBSearch(config), tasks)`` runs ``config`` on MTEB's retrieval tasks:
`index` takes the task's corpus as a `Task` held in memory (named as ours when the MTEB task
is one of R2MED's, so the run gets R2MED's per-task prompts and dense instructions), and
`search` ranks MTEB's queries through `agents.execution.pipeline.Pipeline`, the code a run
uses. The config is a `RunConfig`, or a retriever spec alone (``"bm25"``, ``"dense:<model>"``:
the ``none`` agent). MTEB protocol: ``mteb.models.models_protocols.SearchProtocol``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from agents.config.binding import binding
from agents.config.run_config import RunConfig, default_run_name
from agents.execution.pipeline import Pipeline, retriever_run
from agents.integrations.mteb_tasks import r2med_task_of
from eval.datasets import Task
from eval.export import explicit_order
from eval.plumbing.extras import import_extra
from retrievers.config import RetrieverConfig


class MTEBSearch:
    """MTEB's ``SearchProtocol`` over a pipeline; one corpus indexed at a time."""

    def __init__(
        self,
        config: RunConfig | RetrieverConfig | str,
        *,
        name: str | None = None,
        cache_dir: str | None = None,
    ):
        """``config``: a run's, or a retriever alone (searched by the ``none`` agent, its
        caches in ``cache_dir``). ``name``: the model's name in MTEB's results (default: the
        name a run of the config gets)."""
        import_extra("mteb", "mteb", "MTEBSearch")  # refused now, not at the first task
        if not isinstance(config, RunConfig):
            config = retriever_run(config, cache_dir=cache_dir)
        self.config = config
        self.name = name
        self.pipeline: Pipeline | None = None

    def index(
        self,
        corpus: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        encode_kwargs: Any = None,
        num_proc: int | None = None,
        **kwargs: Any,
    ) -> None:
        # MTEB's corpus rows are {"id", "text", "title", "body"}: "text" is title and body joined
        ids, texts = corpus["id"], corpus["text"]
        name = r2med_task_of(task_metadata.name) or task_metadata.name
        task = Task(name=name, corpus=dict(zip(ids, texts, strict=True)), queries={}, qrels={},
                    path=Path(f"mteb/{task_metadata.name}/{hf_subset}/{hf_split}"))  # fmt: skip
        self.pipeline = Pipeline.open(self.config, task=task)

    def search(
        self,
        queries: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        top_k: int,
        encode_kwargs: Any = None,
        top_ranked: Any = None,
        num_proc: int | None = None,
        **kwargs: Any,
    ) -> dict[str, dict[str, float]]:
        if self.pipeline is None:
            raise RuntimeError("MTEBSearch.search before index: MTEB indexes a corpus first")
        if top_ranked is not None:
            raise ValueError(f"{task_metadata.name}: a reranking task (top_ranked given); "
                             "MTEBSearch ranks the whole corpus, as a run does")  # fmt: skip
        texts = dict(zip(queries["id"], queries["text"], strict=True))
        ranked = self.pipeline.search_many(texts, k=top_k)
        # MTEB re-sorts by score (pytrec_eval: ties by doc id descending): equal scores are
        # made explicit in the order the run's evaluator ranks them (eval.ties), so MTEB ranks
        # as our figures do under either tie order
        ties = self.pipeline.config.eval.ties
        return explicit_order({qid: dict(ranking) for qid, ranking in ranked.items()}, ties)

    @property
    def mteb_model_meta(self) -> Any:
        from mteb.models.model_meta import ModelMeta

        # MTEB keeps results by model name and revision: the name a run of the config gets
        # (on dataset "mteb"), the revision a digest of everything that decides its output
        config = dataclasses.replace(self.config, dataset="mteb")
        digest = hashlib.sha256(json.dumps(binding(config), sort_keys=True, default=str).encode())
        return ModelMeta.create_empty({
            "name": f"r2med-agents/{self.name or default_run_name(config)}",
            "revision": digest.hexdigest()[:12],
            "framework": [],
        })  # fmt: skip
