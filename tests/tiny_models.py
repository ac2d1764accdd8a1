"""Tiny models in the layouts of R2MED's retrievers, built from seeded random weights.

No hub is reachable here, so each family's loading code is tested on a folder laid out as its
real model's hub repository is: ``config.json`` and safetensors weights, the tokenizer's files
(``tokenizer.json`` + ``tokenizer_config.json``, as the real repositories ship them), and for
sentence-transformers models their ``modules.json`` and module folders. The weights are random:
what is compared is the arithmetic, not the quality.
"""

from __future__ import annotations

import json
from pathlib import Path

TEXTS = [
    "Aspirin irreversibly inhibits cyclooxygenase and platelet aggregation.",
    "Insulin lowers blood glucose by promoting uptake into muscle and fat.",
    "The mitochondrion produces ATP through oxidative phosphorylation.",
    "Penicillin blocks bacterial cell wall synthesis.",
    "Represent the Clinical Case for retrieval: a patient with fever and cough.",
    "Instruct: Given a question, retrieve relevant documents that answer the question",
    "<|user|>\nGiven a Medical Exam, retrieve relevant passages\n<|embed|>\n",
]
ALPHABET = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;-?!'()<>|_/\n")


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def bert(folder: Path, seed: int = 0, num_labels: int | None = None) -> Path:
    """A tiny BERT (bge, contriever and MedCPT are BERT models): WordPiece, [CLS] ... [SEP]."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.train_from_iterator(
        TEXTS * 3, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials)
    )
    # vocab.txt and a BertTokenizer, as BERT repositories ship them (its pairs carry segment ids)
    vocab = sorted(tk.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab))
    BertTokenizer(str(folder / "vocab.txt"), model_max_length=512).save_pretrained(folder)
    config = BertConfig(
        vocab_size=tk.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=512,
    )
    torch.manual_seed(seed)
    if num_labels is None:
        BertModel(config).save_pretrained(folder)
    else:
        from transformers import BertForSequenceClassification

        config.num_labels = num_labels
        BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def llama_tokenizer(folder: Path, add_eos_token: bool, pad_token: str | None) -> None:
    """A Llama/Mistral-style tokenizer as those repositories ship it: a byte-level-free BPE whose
    ``tokenizer.json`` template adds only ``<s>``, and ``tokenizer_config.json`` flags saying
    whether ``</s>`` is appended too (transformers 4.x honoured them; 5.x reads the template)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=260, special_tokens=specials, initial_alphabet=[*ALPHABET, "▁"]
    )
    tk.train_from_iterator(TEXTS * 3, trainer)
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tk.token_to_id("<s>"))]
    )
    tk.save(str(folder / "tokenizer.json"))
    config = {
        "add_bos_token": True,
        "add_eos_token": add_eos_token,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "tokenizer_class": "LlamaTokenizer",
        "model_max_length": 32768,
    }
    if pad_token is not None:
        config["pad_token"] = pad_token
    _write_json(folder / "tokenizer_config.json", config)


def mistral(folder: Path, seed: int = 0, add_eos_token: bool = True, pad: str | None = "</s>"):
    """A tiny MistralModel (e5-mistral, SFR, BMRetriever-7B and GritLM-7B are Mistral models)."""
    import torch
    from transformers import MistralConfig, MistralModel

    llama_tokenizer(folder, add_eos_token, pad)
    config = MistralConfig(
        vocab_size=260,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    MistralModel(config).save_pretrained(folder)
    return folder


def instructor(folder: Path, seed: int = 0) -> Path:
    """A tiny INSTRUCTOR: a T5 encoder in sentence-transformers' layout (Transformer, mean
    Pooling, Dense, Normalize), as hkunlp/instructor-large ships it."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers import models as tk_models
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    base = folder.parent / f"{folder.name}-t5"
    base.mkdir(parents=True, exist_ok=True)
    tk = Tokenizer(tk_models.Unigram())
    tk.normalizer = normalizers.Replace(" ", "▁")
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tk.train_from_iterator(TEXTS * 3, trainer)
    tk.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", tk.token_to_id("</s>"))]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    ).save_pretrained(base)
    config = T5Config(
        vocab_size=tk.get_vocab_size(),
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
    )
    torch.manual_seed(seed)
    T5EncoderModel(config).save_pretrained(base)
    transformer = models.Transformer(str(base), max_seq_length=512)
    pooling = models.Pooling(32, pooling_mode="mean")
    dense = models.Dense(32, 24, bias=True, activation_function=torch.nn.Identity())
    model = SentenceTransformer(modules=[transformer, pooling, dense, models.Normalize()])
    model.save(str(folder))
    return folder


NV_CONFIG = """from transformers import PretrainedConfig


class TinyNVConfig(PretrainedConfig):
    model_type = "tiny-nv"

    def __init__(self, vocab_size=256, hidden_size=16, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)
"""

NV_MODEL = '''import torch
from transformers import PreTrainedModel

from .configuration_tiny_nv import TinyNVConfig


class TinyNVModel(PreTrainedModel):
    """NV-Embed's interface in miniature: encode(prompts, instruction=, max_length=) embeds
    the instruction and the text, and pools the text's positions only (a latent-attention
    stand-in: a softmax over a learned query)."""

    config_class = TinyNVConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.latent = torch.nn.Parameter(torch.randn(config.hidden_size))
        self.post_init()

    def _init_weights(self, module):
        pass

    def _ids(self, text, max_length):
        return torch.tensor(list(text.encode("utf-8"))[:max_length] or [0])

    def encode(self, prompts, instruction="", max_length=4096, **kwargs):
        rows = []
        for text in prompts:
            head = self._ids(instruction, max_length) if instruction else self._ids("", 0)[:0]
            body = self._ids(text, max_length - len(head))
            hidden = torch.tanh(self.mix(self.embed(torch.cat([head, body]))))
            hidden = hidden + hidden.mean(dim=0, keepdim=True)  # the instruction is seen...
            hidden = hidden[len(head):]  # ...but not pooled
            weights = torch.softmax(hidden @ self.latent.to(hidden.dtype), dim=0)
            rows.append(weights @ hidden)
        return torch.stack(rows)
'''


def nv_embed(folder: Path, seed: int = 0) -> Path:
    """A folder laid out as nvidia/NV-Embed-v2 is: ``auto_map`` to the repository's own modeling
    code, whose model has ``encode(texts, instruction=, max_length=)``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configuration_tiny_nv.py").write_text(NV_CONFIG, encoding="utf-8")
    (folder / "modeling_tiny_nv.py").write_text(NV_MODEL, encoding="utf-8")
    import importlib.util
    import sys

    import torch

    name = f"tiny_nv_{abs(hash(str(folder)))}"
    package = type(sys)(name)
    package.__path__ = [str(folder)]
    sys.modules[name] = package
    for module in ("configuration_tiny_nv", "modeling_tiny_nv"):
        spec = importlib.util.spec_from_file_location(f"{name}.{module}", folder / f"{module}.py")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[f"{name}.{module}"] = loaded
        spec.loader.exec_module(loaded)
    config_cls = sys.modules[f"{name}.configuration_tiny_nv"].TinyNVConfig
    model_cls = sys.modules[f"{name}.modeling_tiny_nv"].TinyNVModel
    config = config_cls(
        auto_map={
            "AutoConfig": "configuration_tiny_nv.TinyNVConfig",
            "AutoModel": "modeling_tiny_nv.TinyNVModel",
        }
    )
    torch.manual_seed(seed)
    model_cls(config).save_pretrained(folder)
    data = json.loads((folder / "config.json").read_text())
    data["auto_map"] = config.auto_map
    data["model_type"] = "tiny-nv"
    _write_json(folder / "config.json", data)
    for module in ("configuration_tiny_nv", "modeling_tiny_nv"):
        sys.modules.pop(f"{name}.{module}", None)
    sys.modules.pop(name, None)
    return folder


# --- the reasoning embedders that lead R2MED (tests/retrievers/test_reasoning_embedders.py) ---


def byte_level_tokenizer(
    folder: Path, specials: list[str], single: str, config: dict, vocab_size: int = 300
) -> int:
    """A byte-level BPE tokenizer as Qwen and Llama 3 repositories ship one: ``tokenizer.json``
    whose post-processor template is ``single`` (e.g. ``"$A <|endoftext|>"``: the EOS the
    tokenizer itself appends), and ``tokenizer_config.json`` = ``config``. Returns the vocabulary
    size."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers import models as tk_models

    folder.mkdir(parents=True, exist_ok=True)
    tk = Tokenizer(tk_models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(TEXTS * 3, trainer)
    used = [s for s in specials if s in single.split()]
    tk.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(s, tk.token_to_id(s)) for s in used]
    )
    tk.save(str(folder / "tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", config)
    return tk.get_vocab_size()


QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen_tokenizer(folder: Path, eos_template: bool, padding_side: str, **extra) -> int:
    """Qwen2/Qwen3's tokenizer: no BOS, ``<|endoftext|>`` as the pad token. Qwen3-Embedding's
    and gte-Qwen2's ``tokenizer.json`` append ``<|endoftext|>`` to every text (their last-token
    pooling reads it); a base Qwen3's does not. ``extra`` joins tokenizer_config.json (e.g.
    ``add_eos_token``, which Qwen's tokenizer classes ignore, in transformers 4 as in 5)."""
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "padding_side": padding_side,
        "model_max_length": 131072,
        **extra,
    }
    single = "$A <|endoftext|>" if eos_template else "$A"
    return byte_level_tokenizer(folder, QWEN_SPECIALS, single, config)


def _decoder_config(kind: str, vocab_size: int):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    sizes = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "vocab_size": vocab_size,
    }
    if kind == "qwen3":
        return Qwen3Config(head_dim=8, **sizes)
    if kind == "qwen2":
        return Qwen2Config(**sizes)
    if kind == "mistral":
        return MistralConfig(**sizes)
    return LlamaConfig(**sizes)


def decoder(folder: Path, kind: str, vocab_size: int, seed: int = 0) -> Path:
    """A tiny base model (AutoModel's class: Qwen3Model, Qwen2Model, LlamaModel) beside the
    tokenizer already written in ``folder``."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    AutoModel.from_config(_decoder_config(kind, vocab_size)).save_pretrained(folder)
    return folder


def qwen3(folder: Path, eos_template: bool = True, seed: int = 0, **extra) -> Path:
    """A tiny Qwen3 (Qwen3-Embedding, DIVER, ReasonEmbed-Qwen3): left padding, as
    Qwen3-Embedding's tokenizer_config.json sets it."""
    return decoder(folder, "qwen3", qwen_tokenizer(folder, eos_template, "left", **extra), seed)


def qwen2(folder: Path, seed: int = 0) -> Path:
    """A tiny Qwen2 (gte-Qwen2-7B-instruct, RaDeR): right padding, ``<|endoftext|>`` appended."""
    return decoder(folder, "qwen2", qwen_tokenizer(folder, True, "right"), seed)


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def llama3_tokenizer(folder: Path, padding_side: str) -> int:
    """Llama 3.1's tokenizer: ``<|begin_of_text|>`` prepended by ``tokenizer.json``, no EOS, a
    PreTrainedTokenizerFast without token type ids; the pad token a fine-tune sets
    (FlagEmbedding's decoder-only fine-tuning: the EOS, finetune/embedder/decoder_only/base/
    runner.py L51-58)."""
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>",
        "pad_token": "<|end_of_text|>",
        "padding_side": padding_side,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
    }
    return byte_level_tokenizer(folder, LLAMA3_SPECIALS, "<|begin_of_text|> $A", config)


def llama3(folder: Path, padding_side: str = "left", seed: int = 0) -> Path:
    """A tiny Llama 3.1 (ReasonEmbed-Llama-3.1-8B)."""
    return decoder(folder, "llama", llama3_tokenizer(folder, padding_side), seed)


REASONIR_MODEL = '''import torch
from transformers import LlamaModel


class TinyReasonIRModel(LlamaModel):
    """The repository's own model class in miniature: a Llama whose hidden states pass through
    one more layer of its own (ReasonIR's real class changes the attention; what matters here
    is that the class comes from the folder's code, not transformers')."""

    def __init__(self, config):
        super().__init__(config)
        self.own = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.last_hidden_state = torch.tanh(self.own(out.last_hidden_state))
        return out
'''


def reasonir(
    folder: Path, seed: int = 0, include_prompt: bool = True, max_seq_length: int = 131072
) -> Path:
    """A folder laid out as reasonir/ReasonIR-8B is: a Llama 3.1 tokenizer, ``config.json``
    whose ``auto_map`` names the repository's own model class (loaded only with remote code),
    and sentence-transformers' modules (Transformer with its own ``max_seq_length``, mean
    Pooling)."""
    import importlib.util
    import sys

    import torch

    vocab_size = llama3_tokenizer(folder, "right")
    (folder / "modeling_tiny_reasonir.py").write_text(REASONIR_MODEL, encoding="utf-8")
    name = f"tiny_reasonir_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, folder / "modeling_tiny_reasonir.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        torch.manual_seed(seed)
        module.TinyReasonIRModel(_decoder_config("llama", vocab_size)).save_pretrained(folder)
    finally:
        sys.modules.pop(name, None)
    data = json.loads((folder / "config.json").read_text())
    data["auto_map"] = {"AutoModel": "modeling_tiny_reasonir.TinyReasonIRModel"}
    data["architectures"] = ["TinyReasonIRModel"]
    _write_json(folder / "config.json", data)
    modules = [("", "Transformer"), ("1_Pooling", "Pooling")]
    _write_json(
        folder / "modules.json",
        [
            {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
            for i, (path, kind) in enumerate(modules)
        ],
    )
    _write_json(folder / "sentence_bert_config.json", {"max_seq_length": max_seq_length})
    (folder / "1_Pooling").mkdir()
    _write_json(
        folder / "1_Pooling" / "config.json",
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True,
         "include_prompt": include_prompt},
    )  # fmt: skip
    return folder
