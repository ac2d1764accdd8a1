"""Every field of every config class a user builds is checked against its annotation once, at
construction: a wrong-typed value from Python is one line naming the class, the field and the
value (clipped), as strict as a flag; the defaults and typed values still pass, and a flag's
text is still read by the same rule."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

import pytest

from agents.config.registry import STAGES
from agents.config.run_config import EvalConfig, LLMConfig, Recorded, RunConfig, StageConfig
from agents.config.settings import add_arguments, from_settings, settings_from_args
from retrievers.base import SearchRequest
from retrievers.config import RetrieverConfig
from retrievers.settings import ApiEmbedConfig, BM25Config, DenseConfig, FusionConfig

# every config dataclass exported for users, with what it needs besides its defaults
CLASSES: dict[type, dict[str, object]] = {
    RunConfig: {},
    LLMConfig: {},
    EvalConfig: {},
    StageConfig: {"kind": "llm-listwise"},
    Recorded: {},
    RetrieverConfig: {},
    BM25Config: {},
    DenseConfig: {},
    ApiEmbedConfig: {},
    FusionConfig: {},
    SearchRequest: {"query": "q"},
}
BIG = "x" * 1_000_000


def _optional(hint: object) -> bool:
    args = typing.get_args(hint)
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args


def _base(hint: object) -> object:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def wrong_values(hint: object) -> list[object]:
    """Values of another type than ``hint``: str for int, int for str, bool for int, float
    for int, None where not Optional, a list for text, ..."""
    base = _base(hint)
    origin = typing.get_origin(base) or base
    values: list[object] = []
    if base is int:
        values = ["64", True, 6.5, 64.0, [1], BIG]
    elif base is float:
        values = ["0.5", True, [0.5], {}, BIG]
    elif base is bool:
        values = ["true", 1, 0.0, [True]]
    elif base is str:
        values = [8080, 6.5, True, ["a"], {"a": 1}]
    elif origin in (dict, typing.Mapping) or str(origin).endswith("Mapping'>"):
        values = [[1], "a=b", 5, BIG]
    elif origin is tuple:
        values = [5, {"kind": "cross"}, [5], [BIG]]
    elif dataclasses.is_dataclass(base):
        values = ["x", 5, [], BIG]
    if not _optional(hint):
        values.append(None)
    return values


CASES = [
    pytest.param(cls, f.name, value, id=f"{cls.__name__}.{f.name}={type(value).__name__}{i}")
    for cls in CLASSES
    for f in dataclasses.fields(cls)
    for i, value in enumerate(wrong_values(typing.get_type_hints(cls)[f.name]))
]


def test_every_field_has_wrong_values_to_try():
    for cls in CLASSES:
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            assert wrong_values(hint), f"{cls.__name__}.{f.name}: {hint} has no wrong value"


@pytest.mark.parametrize(("cls", "name", "value"), CASES)
def test_a_wrong_typed_value_is_one_bounded_line_naming_class_and_field(cls, name, value):
    with pytest.raises(ValueError) as caught:
        cls(**{**CLASSES[cls], name: value})
    message = str(caught.value)
    assert "\n" not in message
    assert len(message) < 400, message[:500]
    assert f"{cls.__name__}.{name}" in message
    assert f".{name}: expected" in message or message.startswith(f"{name}: expected")
    if value is BIG:
        assert "1,000,000 characters" in message


@pytest.mark.parametrize("cls", list(CLASSES))
def test_the_defaults_pass(cls):
    made = cls(**CLASSES[cls])
    assert cls(**{f.name: getattr(made, f.name) for f in dataclasses.fields(cls)}) == made


@pytest.mark.parametrize("kind", list(STAGES))
def test_every_stage_kind_builds_with_its_defaults(kind):
    options = {"model": "m"} if kind == "cross" else {}  # the one stage whose model is required
    stage = StageConfig(kind, {**STAGES[kind].defaults, **options})
    assert stage.kind == kind


def test_typed_values_pass_and_ints_are_numbers():
    llm = LLMConfig(max_tokens=64, temperature=0, api_base="http://h:1/v1", top_p=1)
    assert llm.max_tokens == 64 and llm.temperature == 0.0 and isinstance(llm.top_p, float)
    run = RunConfig(
        agent="hyde",
        llm=llm,
        rerank=({"kind": "cross", "options": {"model": "m"}}, StageConfig("llm-listwise")),
        limit=2,
        timeout=5,
        prompt_files={"hyde": "p.txt"},
    )
    assert run.timeout == 5.0 and [s.kind for s in run.rerank] == ["cross", "llm-listwise"]
    assert EvalConfig(depth=10, pad=True).depth == 10


def test_a_stage_option_from_python_is_typed_as_its_default():
    with pytest.raises(ValueError, match=r"rerank api_base=8080: expected text, got int"):
        StageConfig("llm-listwise", {"api_base": 8080})
    with pytest.raises(ValueError, match=r"rerank depth=6.5: expected an integer, got float"):
        StageConfig("llm-listwise", {"depth": 6.5})
    assert StageConfig("llm-listwise", {"depth": "7"}).options["depth"] == 7  # a spec's text
    with pytest.raises(ValueError, match=r"rerank depth='1_000': expected an integer"):
        StageConfig("llm-listwise", {"depth": "1_000"})


def test_flags_still_read_text_by_the_same_rules():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--agent", "hyde", "--max-tokens", "64", "--temperature", "0.5", "--limit", "3"]
        + ["--batch-size", "8", "--k1", "1.2", "--local-prefix-reuse", "off"]
    )
    config = from_settings(settings_from_args(args))
    assert config.llm is not None and config.llm.max_tokens == 64
    assert config.llm.temperature == 0.5 and config.llm.local_prefix_reuse is False
    assert config.limit == 3 and config.retriever.dense.batch_size == 8
    assert config.retriever.bm25.k1 == 1.2


@pytest.mark.parametrize("text", ["1_000", "١٢", " 3", "3 ", "0x10", "nan", "inf", "1e400"])
def test_a_flag_takes_only_ascii_decimals(text, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--temperature" if "." in text or "e" in text else "--limit", text])
    assert "argument" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["127.0.0.1:8000/v1", "localhost:8000", "http://", "ftp://h/v1",
                                 "http://h:1/v1,h2:2"])  # fmt: skip
def test_a_server_address_without_its_scheme_is_refused_at_once(url):
    """Once accepted, then retried 6 times over 22 s as if the server were down."""
    from retrievers.config import RetrieverConfig

    says = r"expected http://HOST:PORT\[/v1\] \(or several joined by commas\)"
    with pytest.raises(ValueError, match=rf"^llm.api_base: {says}"):
        LLMConfig(model="openai/m", api_base=url)
    with pytest.raises(ValueError, match=rf"^rerank llm-listwise api_base: {says}"):
        StageConfig("llm-listwise", {"api_base": url})
    with pytest.raises(ValueError, match=rf"^retriever.api.api_base: {says}"):
        RetrieverConfig.from_dict({"spec": "api:openai/e", "api": {"api_base": url}})
    for good in ("http://127.0.0.1:8000/v1", "https://h", "http://a:1/v1,http://b:2/v1"):
        assert LLMConfig(model="openai/m", api_base=good).api_base == good
