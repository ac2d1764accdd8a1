"""A dense family as an MTEB encoder, with R2MED's instructions on R2MED's tasks.

``mteb.evaluate(mteb_encoder("BMRetriever/BMRetriever-7B"), mteb.get_benchmark("R2MED"))``
encodes as ``--retriever dense:<model>`` does: the model loaded as its family loads it
(`retrievers.dense.load_encoder`: R2MED's loaders, pooling, lengths and dtypes, or the
ReasonEmbed authors'), each text behind the family's query or document instruction for the
task (`retrievers.families`: R2MED's per-task instructions when the MTEB task is one of
R2MED's eight, the family's own elsewhere). MTEB does the rest: its exact search (cosine),
its top-k, its scoring. Protocol: ``mteb.models.models_protocols.EncoderProtocol``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from agents.integrations.mteb_tasks import r2med_task_of
from eval.plumbing.extras import import_extra
from retrievers.dense import (
    EncoderSettings,
    LoadedEncoder,
    load_encoder,
    resolve_instructions,
    resolve_model,
)
from retrievers.families import Instructions, family_for


class MTEBEncoder:
    """MTEB's ``EncoderProtocol`` over one of our loaded dense models."""

    def __init__(self, loaded: LoadedEncoder, instruction_set: str = "r2med"):
        self.loaded = loaded
        self.instruction_set = instruction_set

    def instructions(self, mteb_task: str) -> Instructions:
        """The query/document instructions this encoder uses on MTEB task ``mteb_task``."""
        return _instructions(self.loaded.model_id, r2med_task_of(mteb_task),
                             self.instruction_set, self.loaded.family.name)  # fmt: skip

    def encode(
        self,
        inputs: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        texts = [text for batch in inputs for text in batch["text"]]
        instructions = self.instructions(task_metadata.name)
        # MTEB's PromptType: "query" or "document"; a symmetric task sends None (a document)
        role = "query" if getattr(prompt_type, "value", prompt_type) == "query" else "doc"
        instruction = instructions.query if role == "query" else instructions.doc
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return self.loaded.encode(texts, instruction, role)

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Any:
        from sentence_transformers.util import cos_sim

        return cos_sim(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Any:
        from sentence_transformers.util import pairwise_cos_sim

        return pairwise_cos_sim(embeddings1, embeddings2)

    @property
    def mteb_model_meta(self) -> Any:
        from mteb.models.model_meta import ModelMeta

        return ModelMeta.create_empty({
            "name": self.loaded.model_id if "/" in self.loaded.model_id
            else f"local/{self.loaded.model_id}",
            "revision": self.loaded.encoder_id.split("revision=")[1].split("|")[0],
            "similarity_fn_name": "cosine",
            "use_instructions": self.instruction_set != "none",
            "framework": ["PyTorch"],
        })  # fmt: skip


def mteb_encoder(
    model: str,
    *,
    instructions: str = "r2med",
    dtype: str = "auto",
    batch_size: int | None = None,
    max_length: int | None = None,
    device: str = "auto",
    family: str = "auto",
    trust_remote_code: bool = False,
    progress: bool = True,
) -> MTEBEncoder:
    """``model`` (a hub name or a local folder), loaded as ``--retriever dense:<model>`` loads it
    with the same ``dense.*`` settings, as an MTEB encoder. ``instructions``: ``r2med`` (the
    family's, per R2MED task) or ``none``."""
    import_extra("mteb", "mteb", "mteb_encoder")
    if family_for(resolve_model(model)[0], family).is_api:  # no weights here to encode with
        raise ValueError(f"mteb_encoder({model!r}): an API embedder; search with it through "
                         f"MTEBSearch('api:{model}')")  # fmt: skip
    settings = EncoderSettings(model=model, dtype=dtype, max_length=max_length, device=device,
                               family=family, trust_remote_code=trust_remote_code)  # fmt: skip
    if batch_size is not None:
        settings = EncoderSettings(**{**settings.__dict__, "batch_size": batch_size})
    return MTEBEncoder(load_encoder(settings, progress), instructions)


@cache
def _instructions(
    model_id: str, task: str | None, instruction_set: str, family: str
) -> Instructions:
    return resolve_instructions(model_id, task, instruction_set, family)
