"""Each dense family's encoder, computing what R2MED's encoder classes compute.

An `Encoder` maps ``(texts, instruction, role)`` to one row per text; ``role`` is
``"query"`` (queries and LLM expansions) or ``"doc"``. How the instruction enters depends on
the family, as in R2MED (R2MED/R2MED@62b7074, src/utils.py):

* ``hf`` (``FlagDRESModel`` / ``HighScaleModel``, Base mode, L113-133, L470-490): AutoModel,
  the instruction prefixed, a padded and truncated batch, ``cls``/``mean``/``last`` pooling
  (L158-174), normalised where the family is.
* ``bmr`` (their BMR mode, L41-44, L134-156): padded with EOS on the left when the tokenizer
  has no pad token, truncated one short of the limit, an EOS appended, ``last-bmr`` pooling
  (L175-183), not normalised; under ``torch.cuda.amp.autocast()`` (L147, L504) on a CUDA device
  (fp16 matmuls), in the weights' fp32 on the CPU, where that context changes nothing.
* ``medcpt`` (``BiEncoderModel``, L346-384): CLS of one model for both roles (R2MED passes the
  Article encoder for both), documents as the pair ``("", text)``, not normalised.
* ``instructor`` (``InstructorModel``, L185-268): sentence-transformers with the instruction as
  the prompt, left out of the pooled tokens (``set_pooling_include_prompt(False)``).
* ``grit`` (``GritModel``, L542-609): the gritlm package's ``GritLM`` in embedding mode
  (bidirectional attention, the instruction masked out of the mean), 512 tokens for queries
  and 2,048 for documents.
* ``nv`` (``NVEmbedModel``, L611-679): the model's own ``encode(texts, instruction=,
  max_length=)`` from its repository's code, normalised.
* ``sentence-transformers``: the model's own modules, the instruction prefixed, normalised
  (families R2MED does not run, e.g. the default all-MiniLM-L6-v2).

The ReasonEmbed authors' R2MED evaluation (VectorSpaceLab/agentic-search@b2f2e40,
ReasonEmbed/evaluation_r2med) runs the reasoning embedders that lead R2MED:

* ``flag-decoder`` (FlagEmbedding 1.3.5's ``BaseLLMEmbedder``, inference/embedder/decoder_only/
  base.py): AutoTokenizer/AutoModel, the instruction prefixed, each text truncated to 512
  tokens, batches longest first padded on the tokenizer's own side, last-token pooling as
  theirs detects left padding, normalised.
* ``reasonir`` (their ``ReasonIREncoder``, code/reasonir_models.py): the model's own code
  through sentence-transformers with its prompts, the checkpoint's own max length, normalised.

Tokenizers: R2MED ran transformers 4.x, whose Llama-style tokenizers honoured
``add_bos_token``/``add_eos_token`` from ``tokenizer_config.json``; transformers 5 follows
only ``tokenizer.json``'s template, so e5-mistral and SFR lose the ``</s>`` their last-token
pooling reads. `special_tokens_to_add` finds what the configuration asks for and the
tokenizer no longer adds, and it is added back as 4.x added it: the text truncated so that
the whole sequence, special tokens included, fits the limit.

Models load once per process and argument set; weights load on the CPU unless a device is
given. Everything runs under ``torch.inference_mode``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .families import REMOTE_CODE_OPTION, Family

Encoder = Callable[[list[str], str, str], np.ndarray]  # (texts, instruction, role) -> rows
GRITLM_INSTALL = "pip install --no-deps gritlm==1.0.2"


def prefixing(encode_texts: Callable[[list[str]], np.ndarray]) -> Encoder:
    """An encoder that puts the instruction in front of each text."""

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        return encode_texts([instruction + t for t in texts])

    return encode


def torch_dtype(dtype: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, "auto")


@dataclass(frozen=True)
class Load:
    """What a family's encoder is built from."""

    path: str  # the weights' folder or hub name
    family: Family
    dtype: str  # resolved: fp32, bf16, fp16 or auto (the checkpoint's)
    device: str  # resolved: cpu, cuda[:N], mps
    max_length: int | None  # the user's limit; None: the family's
    batch_size: int

    def length(self, role: str) -> int | None:
        return self.max_length or self.family.length_for(role)


# --- tokenization as transformers 4.x did it ------------------------------------------------


@dataclass(frozen=True)
class SpecialTokens:
    """Token ids the tokenizer's configuration asks for that the tokenizer does not add."""

    bos: int | None = None
    eos: int | None = None

    @property
    def count(self) -> int:
        return (self.bos is not None) + (self.eos is not None)


def _tokenizer_config(load_path: str) -> dict[str, Any]:
    from transformers.utils import cached_file

    try:
        found = cached_file(
            load_path, "tokenizer_config.json", _raise_exceptions_for_missing_entries=False
        )
    except OSError:
        return {}
    if not found:
        return {}
    with open(found, encoding="utf-8") as f:
        return json.load(f)


def special_tokens_to_add(tokenizer: Any, load_path: str) -> SpecialTokens:
    """BOS/EOS that ``tokenizer_config.json`` asks for (``add_bos_token``/``add_eos_token``,
    as transformers 4.x's Llama-style tokenizers honoured them) and the tokenizer omits."""
    config = _tokenizer_config(load_path)
    probe = tokenizer("a")["input_ids"]
    bos = tokenizer.bos_token_id
    eos = tokenizer.eos_token_id
    missing_bos = config.get("add_bos_token") is True and bos is not None and probe[:1] != [bos]
    missing_eos = config.get("add_eos_token") is True and eos is not None and probe[-1:] != [eos]
    return SpecialTokens(bos if missing_bos else None, eos if missing_eos else None)


def token_ids(
    tokenizer: Any, texts: Sequence[str], max_length: int, specials: SpecialTokens
) -> list[list[int]]:
    """Each text's ids truncated to ``max_length`` with ``specials`` added as 4.x added them."""
    ids = tokenizer(
        list(texts),
        truncation=True,
        max_length=max_length - specials.count,
        padding=False,
        return_attention_mask=False,
        return_token_type_ids=False,
    )["input_ids"]
    head = [specials.bos] if specials.bos is not None else []
    tail = [specials.eos] if specials.eos is not None else []
    return [head + row + tail for row in ids]


def _padded(tokenizer: Any, rows: list[list[int]], device: str) -> dict[str, Any]:
    return tokenizer.pad(
        {"input_ids": rows}, padding=True, return_attention_mask=True, return_tensors="pt"
    ).to(device)


# --- pooling (R2MED src/utils.py L158-183, L515-540) -----------------------------------------


def pool(hidden: Any, mask: Any, method: str) -> Any:
    import torch

    if method == "cls":
        return hidden[:, 0]
    if method == "mean":
        summed = torch.sum(hidden * mask.unsqueeze(-1).float(), dim=1)
        return summed / mask.sum(dim=1, keepdim=True).float()
    if method not in ("last", "last-bmr"):
        raise ValueError(f"unknown pooling {method!r}")
    if method == "last-bmr":
        hidden = hidden.masked_fill(~mask[..., None].bool(), 0.0)
    # Left-padded batches end every row with a real token; right-padded ones are indexed.
    if bool(mask[:, -1].sum() == mask.shape[0]):
        return hidden[:, -1]
    lengths = mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths]


def _rows(embeddings: Any, normalize: bool) -> np.ndarray:
    import torch

    if normalize:
        embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
    return embeddings.float().cpu().numpy()


def _batched(
    texts: list[str], batch_size: int, encode_batch: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    import torch

    with torch.inference_mode():
        parts = [encode_batch(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    return np.concatenate(parts).astype(np.float32, copy=False)


# --- loaders ------------------------------------------------------------------------------


@cache
def _auto_model(load_path: str, dtype: str, device: str) -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(load_path)
    model = AutoModel.from_pretrained(load_path, dtype=torch_dtype(dtype)).to(device).eval()
    return tokenizer, model


def hf_encoder(load: Load) -> Encoder:
    """FlagDRESModel / HighScaleModel in Base mode (R2MED src/utils.py L113-133, L470-490)."""
    tokenizer, model = _auto_model(load.path, load.dtype, load.device)
    specials = special_tokens_to_add(tokenizer, load.path)
    pooling = load.family.pooling or "cls"
    length = load.length("doc")

    def encode_batch(batch: list[str]) -> np.ndarray:
        if specials.count:
            inputs = _padded(tokenizer, token_ids(tokenizer, batch, length, specials), load.device)
        else:
            inputs = tokenizer(
                batch, padding=True, truncation=True, max_length=length, return_tensors="pt"
            ).to(load.device)
        hidden = model(**inputs, return_dict=True).last_hidden_state
        return _rows(pool(hidden, inputs["attention_mask"], pooling), load.family.normalize)

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        return _batched([instruction + t for t in texts], load.batch_size, encode_batch)

    return encode


@cache
def _bmr_model(load_path: str, dtype: str, device: str) -> tuple[Any, Any]:
    tokenizer, model = _auto_model(load_path, dtype, device)
    if tokenizer.pad_token is None:  # R2MED src/utils.py L41-44
        tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
    return tokenizer, model


def bmr_autocast(device: str) -> Any:
    """The context BMR mode's forward pass runs in: R2MED's ``torch.cuda.amp.autocast()``
    (src/utils.py L147, L504), fp16 matmuls, on a CUDA device. Elsewhere nothing: that context
    casts CUDA operations only, so R2MED's code ran fp32 on the CPU, and so does ours (MPS,
    which R2MED never ran, as the CPU)."""
    import contextlib

    import torch

    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.float16)  # torch.cuda.amp.autocast()'s
    return contextlib.nullcontext()


def device_recipe(family: Family, device: str) -> str:
    """What the device changes in ``family``'s vectors, for cache keys: BMR mode's autocast
    on a CUDA device (fp16 matmuls; the CPU's key is what it always was)."""
    return "|autocast=cuda-fp16" if family.loader == "bmr" and device.startswith("cuda") else ""


def bmr_encoder(load: Load) -> Encoder:
    """BMRetriever as R2MED's BMR mode encodes (src/utils.py L134-156, L175-183), under
    `bmr_autocast` on a CUDA device; on the CPU in the weights' dtype (fp32), as R2MED's code
    ran there."""
    tokenizer, model = _bmr_model(load.path, load.dtype, load.device)
    specials = special_tokens_to_add(tokenizer, load.path)
    length = load.length("doc")

    def encode_batch(batch: list[str]) -> np.ndarray:
        # One short of the limit, then the EOS R2MED appends (after any special token the
        # tokenizer's configuration asks for, as transformers 4.x gave R2MED both).
        rows = token_ids(tokenizer, batch, length - 1, specials)
        rows = [row + [tokenizer.eos_token_id] for row in rows]
        with bmr_autocast(load.device):  # around the padding, forward and pooling, as L147-155
            inputs = _padded(tokenizer, rows, load.device)
            hidden = model(**inputs).last_hidden_state
            pooled = pool(hidden, inputs["attention_mask"], "last-bmr")
        return _rows(pooled, load.family.normalize)

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        return _batched([instruction + t for t in texts], load.batch_size, encode_batch)

    return encode


def medcpt_encoder(load: Load) -> Encoder:
    """BiEncoderModel given one model for both roles (R2MED src/utils.py L346-384,
    src/eval_retrieval.py L159-163)."""
    tokenizer, model = _auto_model(load.path, load.dtype, load.device)
    length = load.length("doc")
    segments = getattr(model.config, "type_vocab_size", 0) > 1 or None

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        def encode_batch(batch: list[str]) -> np.ndarray:
            if role == "doc":  # an empty title paired with the text
                inputs = tokenizer(
                    [""] * len(batch),
                    batch,
                    padding=True,
                    truncation="longest_first",
                    return_tensors="pt",
                    max_length=length,
                    # the pair's segment ids, which transformers 4.x's BERT tokenizers always
                    # returned and a generic tokenizer of transformers 5 leaves out
                    return_token_type_ids=segments,
                )
            else:
                inputs = tokenizer(
                    batch, padding=True, truncation=True, return_tensors="pt", max_length=length
                )
            hidden = model(**inputs.to(load.device)).last_hidden_state
            return _rows(hidden[:, 0, :], load.family.normalize)

        return _batched([instruction + t for t in texts], load.batch_size, encode_batch)

    return encode


@cache
def _instructor_model(load_path: str, dtype: str, device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        load_path, device=device, model_kwargs={"dtype": torch_dtype(dtype)}
    )
    model.set_pooling_include_prompt(False)  # R2MED src/utils.py L198
    return model.eval()


def instructor_encoder(load: Load) -> Encoder:
    """InstructorModel (R2MED src/utils.py L185-268): the instruction is the prompt, left out
    of the pooled tokens.

    As sentence-transformers 3.0 computed it for R2MED (its ``encode(prompt=)`` and
    ``Transformer.tokenize``): every text (prompt + text) stripped of surrounding white space
    before tokenizing, and the prompt's length counted on the stripped prompt, less its final
    special token. Sentence-transformers 6 strips nothing, which counts a trailing space of the
    prompt as a prompt token wherever the tokenizer keeps it.
    """
    model = _instructor_model(load.path, load.dtype, load.device)
    if load.max_length is not None:  # R2MED keeps the model's own (L199-200)
        model.max_seq_length = load.max_length

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        return _encode_prompted(model, list(texts), instruction, load.batch_size, True)

    return encode


def _encode_prompted(
    model: Any, texts: list[str], instruction: str, batch_size: int, normalize: bool
) -> np.ndarray:
    """A SentenceTransformer's rows for ``instruction`` + each text, as its ``encode(prompt=)``
    computed them up to version 5: each prompt + text stripped of surrounding white space
    before tokenizing (``Transformer.tokenize``), and the prompt's length (its stripped tokens
    less the final special token) passed on to the pooling, which uses it only where the
    pooling leaves the prompt out."""
    import torch

    prompt_length = 0
    if instruction:
        prompt_length = model.preprocess([instruction.strip()])["input_ids"].shape[-1] - 1

    def encode_batch(batch: list[str]) -> np.ndarray:
        features = model.preprocess([(instruction + t).strip() for t in batch])
        features = {
            k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()
        }
        if prompt_length:
            features["prompt_length"] = prompt_length
        return _rows(model(features)["sentence_embedding"], normalize)

    return _batched(texts, batch_size, encode_batch)


@cache
def _grit_model(load_path: str, dtype: str, device: str) -> Any:
    try:
        from gritlm import GritLM
    except ImportError:
        raise ValueError(
            f"dense: GritLM models are encoded by the gritlm package; {GRITLM_INSTALL}"
        ) from None
    # R2MED src/utils.py L553: torch_dtype "auto", embedding mode (GritLM always passes
    # trust_remote_code: the checkpoint's bidirectional attention is its own code).
    return GritLM(load_path, mode="embedding", torch_dtype=torch_dtype(dtype), device=device)


def grit_encoder(load: Load) -> Encoder:
    """GritModel (R2MED src/utils.py L542-609)."""
    model = _grit_model(load.path, load.dtype, load.device)

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        length = load.length(role)

        def encode_batch(batch: list[str]) -> np.ndarray:
            out = model.encode(
                batch, instruction=instruction, batch_size=load.batch_size, max_length=length
            )
            return np.asarray(out, dtype=np.float32).reshape(len(batch), -1)

        return _batched(list(texts), load.batch_size, encode_batch)

    return encode


@cache
def _nv_model(load_path: str, dtype: str, device: str) -> Any:
    from transformers import AutoModel

    model = AutoModel.from_pretrained(load_path, trust_remote_code=True, dtype=torch_dtype(dtype))
    return model.to(device).eval()


def nv_encoder(load: Load) -> Encoder:
    """NVEmbedModel (R2MED src/utils.py L611-679): the model's own encode, normalised."""
    model = _nv_model(load.path, load.dtype, load.device)
    if not callable(getattr(model, "encode", None)):  # loaded, but not as NV-Embed's class
        raise ValueError(
            f"dense: {load.path} loaded as {type(model).__name__}, which has no encode(): the "
            f"{load.family.name} family encodes with NV-Embed's own model class, from the code "
            "its repository ships (config.json's auto_map); pick this model's family with "
            "--dense-family"
        )
    length = load.length("doc")

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        def encode_batch(batch: list[str]) -> np.ndarray:
            out = model.encode(batch, instruction=instruction, max_length=length)
            return _rows(out, load.family.normalize)

        return _batched(list(texts), load.batch_size, encode_batch)

    return encode


# --- the ReasonEmbed authors' R2MED evaluation ----------------------------------------------

# Tokenizer classes whose transformers 4.x versions honoured tokenizer_config.json's
# add_bos_token/add_eos_token (LlamaTokenizer(Fast).update_post_processor and its copies): the
# authors ran 4.x, so only these get the special tokens 5.x no longer adds. Others (Qwen2's,
# Llama 3's PreTrainedTokenizerFast) ignored the flags then as they do now.
_SPECIAL_FLAGS_HONOURED_BY_4X = frozenset(
    f"{name}{fast}" for name in ("LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer")
    for fast in ("", "Fast")
)  # fmt: skip


@cache
def _flag_decoder_model(load_path: str, dtype: str, device: str, remote_code: bool) -> tuple:
    from transformers import AutoModel, AutoTokenizer

    # FlagEmbedding decoder_only/base.py L90-99: trust_remote_code for both, as the family's
    # script passes it (RaDeR's: --trust_remote_code True); the dtype as resolved (base.py
    # L214-215: fp16 on a GPU, switched off on the CPU)
    tokenizer = AutoTokenizer.from_pretrained(load_path, trust_remote_code=remote_code)
    model = AutoModel.from_pretrained(
        load_path, trust_remote_code=remote_code, dtype=torch_dtype(dtype)
    )
    return tokenizer, model.to(device).eval()


def flag_decoder_encoder(load: Load) -> Encoder:
    """FlagEmbedding 1.3.5's BaseLLMEmbedder.encode_single_device (decoder_only/base.py
    L188-295), as the ReasonEmbed authors' runner builds it (code/runner.py L46-63)."""
    import torch

    tokenizer, model = _flag_decoder_model(
        load.path, load.dtype, load.device, load.family.remote_code
    )
    if tokenizer.pad_token is None:  # tokenizer.pad (base.py L268) would fail mid-encode
        raise ValueError(
            f"dense: {load.path}: its tokenizer has no pad token, so FlagEmbedding's "
            f"BaseLLMEmbedder cannot batch it either ({load.family.name} checkpoints ship one)"
        )
    config = _tokenizer_config(load.path)
    honoured = config.get("tokenizer_class") in _SPECIAL_FLAGS_HONOURED_BY_4X
    specials = special_tokens_to_add(tokenizer, load.path) if honoured else SpecialTokens()

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, model.config.hidden_size), dtype=np.float32)
        # base.py L226-239: every text tokenized with truncation at the role's max length
        rows = token_ids(tokenizer, [instruction + t for t in texts], load.length(role), specials)
        # L241-243: longest first (their np.argsort), so a batch pads little
        order = np.argsort([-len(r) for r in rows])
        parts = []
        with torch.inference_mode():
            for start in range(0, len(rows), load.batch_size):
                batch = [rows[i] for i in order[start : start + load.batch_size]]
                inputs = _padded(tokenizer, batch, load.device)  # L268-273: the tokenizer's side
                hidden = model(**inputs, return_dict=True).last_hidden_state
                # L275-277: last_token_pool (L12-29), the same test for left padding as pool()
                pooled = pool(hidden, inputs["attention_mask"], "last")
                parts.append(_rows(pooled, load.family.normalize))
        out = np.concatenate(parts)[np.argsort(order)]  # L290: back to the input order
        return out.astype(np.float32, copy=False)

    return encode


@cache
def _reasonir_model(load_path: str, dtype: str, device: str) -> tuple[Any, int | None]:
    """The model, and its own max_seq_length (a later --max-length changes the cached
    model's; the next encoder without one puts this back)."""
    from sentence_transformers import SentenceTransformer

    # code/reasonir_models.py L31 with runner.py L40-44: SentenceTransformer with the
    # repository's own code, model_kwargs torch_dtype "auto"
    model = SentenceTransformer(
        load_path,
        device=device,
        trust_remote_code=True,
        model_kwargs={"dtype": torch_dtype(dtype)},
    )
    return model.eval(), model.max_seq_length


def reasonir_encoder(load: Load) -> Encoder:
    """The authors' ReasonIREncoder (code/reasonir_models.py L16-69): ``model.encode(texts,
    prompt=, normalize_embeddings=True)``, queries behind
    ``<|user|>\\n{instruction}\\n<|embed|>\\n`` and documents behind ``<|embed|>\\n``, at the
    checkpoint's own max_seq_length: their 512 (L49, L62) is set after their MultiGPUModel
    (L10) has handed the model to sentence-transformers' encoding processes, which never see
    it. ``--max-length`` sets one.

    As the sentence-transformers of their stack (<= 5, on transformers 4.x) computed it
    (`_encode_prompted`); sentence-transformers 6 strips nothing. Their encoder never calls
    set_pooling_include_prompt: the checkpoint's own pooling configuration decides.
    """
    model, own_length = _reasonir_model(load.path, load.dtype, load.device)

    def encode(texts: list[str], instruction: str, role: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, model.get_embedding_dimension()), dtype=np.float32)
        # the checkpoint's own unless the user sets one (see above)
        model.max_seq_length = load.length(role) or own_length
        # sentence-transformers' encode: longest texts first, batch by batch
        order = np.argsort([-len((instruction + t).strip()) for t in texts])
        ordered = _encode_prompted(
            model, [texts[i] for i in order], instruction, load.batch_size, load.family.normalize
        )
        return ordered[np.argsort(order)]

    return encode


LOADERS: dict[str, Callable[..., Encoder]] = {
    "hf": hf_encoder,
    "bmr": bmr_encoder,
    "medcpt": medcpt_encoder,
    "instructor": instructor_encoder,
    "grit": grit_encoder,
    "nv": nv_encoder,
    "flag-decoder": flag_decoder_encoder,
    "reasonir": reasonir_encoder,
}


def family_encoder(
    load_path: str,
    family: Family,
    dtype: str,
    device: str,
    max_length: int | None,
    batch_size: int,
    trust_remote_code: bool,
) -> Encoder:
    """``family``'s encoder for the weights at ``load_path``; refuses remote code unless allowed."""
    if family.remote_code and not trust_remote_code:
        raise ValueError(
            f"dense: {family.name} models run code from their own repository "
            f"({load_path}); allow it with {REMOTE_CODE_OPTION}"
        )
    return LOADERS[family.loader](Load(load_path, family, dtype, device, max_length, batch_size))
