"""R2MED's cross-encoder rerankers, scored as R2MED's code scores them.

R2MED (github.com/R2MED/R2MED, commit 62b7074) reranks with ``RerankerModel`` (src/utils.py
L811-882), driven by ``reranker_by_dense`` and ``eval_reranker`` (src/eval_reranker.py
L90-160). Its three modes, each a scoring rule here:

* ``logit`` (mode "bge", bge-reranker-v2-m3): the pairs tokenised together with
  ``padding=True, truncation=True, max_length`` (utils.py L848-854), the score
  ``logits.view(-1).float()`` (L855), the raw logit, no sigmoid.
* ``label1`` (mode "mono", castorini/monobert-large-msmarco, a 2-label BERT): queries and
  passages as two lists with ``truncation=True, padding="longest", max_length`` (L858-866),
  the score ``logits[:, 1]`` (L867), the raw "relevant" logit, no softmax.
* ``rankllama`` (mode "llama"): a PEFT LoRA adapter over its base model, loaded as
  ``AutoModelForSequenceClassification(num_labels=1)`` in float16 (L822-824), the adapter
  applied with ``PeftModel.from_pretrained`` and merged with ``merge_and_unload`` (L825-826),
  the tokenizer the base model's (L821); each pair alone as ``f"query: {q}"``,
  ``f"document: {p}"`` with ``max_length`` and no truncation flag (L872-879), the score
  ``logits[0][0]`` (L880-881). Without a truncation flag, transformers 4.44 (R2MED's era)
  warned and defaulted to ``longest_first``; transformers 5 does the same silently
  (``tokenization_utils_base._get_padding_truncation_strategies``, "Backward compatibility
  for previous behavior"). We pass ``truncation="longest_first"``: that effective behaviour,
  whatever a later transformers drops.

R2MED loaded the "bge" and "mono" models without a dtype (L829), which under transformers 4.44
meant float32; transformers 5 defaults to the dtype in the model's config, so float32 is
asked for explicitly. ``predict`` takes all of a query's pairs in one batch (L848-855; the
``batch_size`` of L815/L830 is never used); with R2MED's depth of 10 our ``batch_size`` (32)
gives the same single batch. R2MED's ``device_map="auto"`` (L823) spreads the 7B model over
the GPUs it sees; here the model goes to the stage's one device.

Names. ``eval_reranker`` (L126-135) calls the models "bge-reranker", "monobert" and
"rankllama" and passes ``mode=reranker_name``, which matches none of the modes ``predict``
knows ("bge", "mono", "llama", utils.py L847/L857/L869): as written, ``predict`` would return
an unbound ``scores`` (and "rankllama"'s path pair would reach ``AutoTokenizer`` as a list,
L828), so the published file could not have produced ``results/reranker/``. We map each name
to the mode it plainly stands for (``R2MED_NAMES``). For the same reason ``max_length=1024 if
reranker_name == "llama" else 512`` (L134) gives 512 to all three as written: our default
``max_length`` is 512 for every rule; ``max_length=1024`` is what was probably meant for
rankllama.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# auto: by R2MED's name, else by the model's files (see `resolve_scoring`)
SCORINGS: tuple[str, ...] = ("auto", "sentence-transformers", "logit", "label1", "rankllama")
ST = "sentence-transformers"  # CrossEncoder.predict, its activation: the stage's original rule

# A fragment of R2MED's reranker name (src/eval_reranker.py L126-130) -> the RerankerModel
# mode it evidently ran under (utils.py L847/L857/L869), as a rule here. Matched in a model's
# last path component, lower-cased, so a hub name, a local folder of that name and a hub
# snapshot path whose repo folder keeps it ("models--castorini--monobert-large-msmarco") count.
R2MED_NAMES: dict[str, str] = {
    "bge-reranker": "logit",  # BAAI/bge-reranker-v2-m3, mode "bge"
    "monobert": "label1",  # castorini/monobert-large-msmarco, mode "mono"
    "rankllama": "rankllama",  # castorini/rankllama-v1-7b-lora-passage, mode "llama"
}

PEFT_MISSING = "scoring rankllama loads a PEFT adapter and needs peft: pip install peft"


def rule_by_name(model: str) -> str | None:
    """The rule R2MED scored a model of this name with, or None for a name R2MED never used."""
    path = Path(model.strip().rstrip("/"))
    name = path.name
    if path.parent.name == "snapshots":  # .../models--org--name/snapshots/<commit>
        name = path.parent.parent.name
    return next((r for f, r in R2MED_NAMES.items() if f in name.lower()), None)


def read_model_json(load_path: str, filename: str) -> dict[str, Any] | None:
    """``filename`` of a model folder or hub repo as JSON; None when the model has no such file.

    A hub file is read from the local hub cache when it is there, else downloaded; a hub error
    other than "no such file" (offline and not cached) is raised, not taken for an absence.
    """
    path = Path(load_path)
    if path.is_dir():
        file = path / filename
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RemoteEntryNotFoundError

    try:
        found = try_to_load_from_cache(load_path, filename)
    except HFValidationError:  # neither a folder nor a repo id: the loader will say so
        return None
    if found is not None and not isinstance(found, str):
        return None  # the cache knows the repo has no such file
    if found is None:
        try:
            found = hf_hub_download(load_path, filename)
        except RemoteEntryNotFoundError:
            return None
    return json.loads(Path(found).read_text(encoding="utf-8"))


def num_labels(config: Mapping[str, Any]) -> int:
    """A transformers config's label count: its ``id2label``, else ``num_labels``, else 2
    (transformers' default, which it leaves out of a saved config.json)."""
    id2label = config.get("id2label")
    return len(id2label) if id2label else int(config.get("num_labels", 2))


def resolve_scoring(scoring: str, model: str, load_path: str) -> str:
    """The rule a stage scores ``model`` with: ``scoring`` unless it is ``auto``; then R2MED's
    rule for one of its names, ``rankllama`` for a PEFT adapter, ``label1`` for a 2-label
    classifier (logits[:, 1], as R2MED reads monoBERT) and sentence-transformers' own
    CrossEncoder otherwise (a single-logit model, or files the loader will judge)."""
    if scoring != "auto":
        return scoring
    named = rule_by_name(model) or rule_by_name(load_path)
    if named is not None:
        return named
    if read_model_json(load_path, "adapter_config.json") is not None:
        return "rankllama"  # the one rule that loads an adapter
    config = read_model_json(load_path, "config.json")
    if config is None or not any(
        str(a).endswith("ForSequenceClassification") for a in config.get("architectures") or ()
    ):
        return ST  # no classifier head of its own: CrossEncoder adds one, as before
    labels = num_labels(config)
    if labels == 1:
        return ST
    if labels == 2:
        return "label1"
    raise ValueError(
        f"option scoring: {model} has {labels} labels, no one relevance score; set scoring "
        "(label1 reads logits[:, 1])"
    )


@dataclass(frozen=True)
class Scoring:
    """How a stage's model is scored, resolved from its options and files."""

    rule: str  # one of SCORINGS but auto
    base_id: str | None = None  # a rankllama adapter's base model, as cache keys name it
    base_path: str | None = None  # and what loads it


def resolve(scoring: str, model: str, load_path: str, base: str) -> Scoring:
    """The rule for ``model`` (`resolve_scoring`) and, for a PEFT adapter, its base model:
    option ``base``, else the adapter's ``base_model_name_or_path`` (adapter_config.json)."""
    from retrievers.dense import resolve_model

    rule = resolve_scoring(scoring, model, load_path)
    adapter = read_model_json(load_path, "adapter_config.json") if rule == "rankllama" else None
    if adapter is None:
        if base:
            raise ValueError(f"option base: {model} is not a PEFT adapter (no adapter_config.json)")
        return Scoring(rule)
    base = base or str(adapter.get("base_model_name_or_path") or "")
    if not base:
        raise ValueError(f"option base: the adapter {model} names no base model; set base=")
    if not peft_available():
        raise ValueError(PEFT_MISSING)
    return Scoring(rule, *resolve_model(base))


def peft_available() -> bool:
    """Whether peft can be imported, without importing it (it pulls in torch)."""
    try:
        return importlib.util.find_spec("peft") is not None
    except (ImportError, ValueError):
        return False


@dataclass
class TransformersScorer:
    """A transformers sequence classifier scoring (query, passage) pairs by R2MED's rule."""

    rule: str  # logit, label1 or rankllama
    tokenizer: Any
    model: Any
    max_length: int
    device: str

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> list[float]:
        import torch

        with torch.no_grad():  # utils.py L844
            if self.rule == "rankllama":  # one pair at a time (L871-881): no padding to differ
                return [self._rankllama(q, p) for q, p in pairs]
            out: list[float] = []
            for start in range(0, len(pairs), batch_size):
                out += self._batch(pairs[start : start + batch_size])
            return out

    def _batch(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if self.rule == "logit":  # utils.py L848-856
            inputs = self.tokenizer([list(p) for p in pairs], padding=True, truncation=True,
                                    return_tensors="pt", max_length=self.max_length)  # fmt: skip
            logits = self.model(**inputs.to(self.device), return_dict=True).logits
            return logits.view(-1).float().cpu().tolist()
        queries, passages = zip(*pairs, strict=True)  # utils.py L858-868
        inputs = self.tokenizer(list(queries), list(passages), return_tensors="pt",
                                truncation=True, padding="longest",
                                max_length=self.max_length)  # fmt: skip
        return self.model(**inputs.to(self.device)).logits[:, 1].float().cpu().tolist()

    def _rankllama(self, query: str, passage: str) -> float:
        # utils.py L872-881; truncation as transformers 4.44 defaulted it (module docstring)
        inputs = self.tokenizer(f"query: {query}", f"document: {passage}", return_tensors="pt",
                                max_length=self.max_length,
                                truncation="longest_first")  # fmt: skip
        return self.model(**inputs.to(self.device)).logits[0][0].float().item()


@cache
def load_scorer(
    rule: str, load_path: str, base_path: str | None, max_length: int, device: str
) -> TransformersScorer:
    """The model for ``rule``, once per argument set; ``base_path`` is the base model of a
    rankllama adapter at ``load_path`` (None: ``load_path`` is a whole model)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if rule == "rankllama":
        source = base_path or load_path
        tokenizer = AutoTokenizer.from_pretrained(source)  # the base's tokenizer, L821
        model = AutoModelForSequenceClassification.from_pretrained(
            source,
            num_labels=1,
            dtype=torch.float16,  # L822-824
        )
        if base_path is not None:
            if not peft_available():
                raise ValueError(PEFT_MISSING)
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, load_path).merge_and_unload()  # L825-826
    else:
        tokenizer = AutoTokenizer.from_pretrained(load_path)  # L828-829, float32 as in 4.44
        model = AutoModelForSequenceClassification.from_pretrained(load_path, dtype=torch.float32)
    model.to(device).eval()
    return TransformersScorer(rule, tokenizer, model, max_length, device)
