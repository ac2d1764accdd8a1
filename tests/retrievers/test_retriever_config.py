import json
import math
import subprocess
import sys
from dataclasses import FrozenInstanceError, fields

import pytest

from retrievers import bm25, dense, hybrid
from retrievers.config import RetrieverConfig
from retrievers.kinds import RETRIEVERS, parse_spec
from retrievers.settings import (
    BM25_METHODS,
    DENSE_BATCH_SIZE,
    DTYPES,
    FUSION_METHODS,
    MIN_DEPTH,
    RRF_K,
    ApiEmbedConfig,
    BM25Config,
    DenseConfig,
    FusionConfig,
)

ALL = (BM25Config, DenseConfig, ApiEmbedConfig, FusionConfig, RetrieverConfig)


def test_defaults_are_todays_behaviour():
    config = RetrieverConfig()
    assert config.spec == "bm25"
    assert config.bm25 == BM25Config("bm25q", None, None)
    assert config.dense == DenseConfig("auto", "auto", DENSE_BATCH_SIZE, None, "r2med")
    assert DENSE_BATCH_SIZE == 32
    assert config.api == ApiEmbedConfig(None, 64, {})
    assert config.fusion == FusionConfig("rrf", RRF_K, MIN_DEPTH) == FusionConfig("rrf", 60, 100)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: BM25Config(method="bm26"), "bm25.method: must be one of bm25q, lucene, okapi"),
        (lambda: BM25Config(k1=-0.1), "bm25.k1: must be a number >= 0, got -0.1"),
        (lambda: BM25Config(k1=math.nan), "bm25.k1: expected a finite number"),
        (lambda: BM25Config(b=1.5), r"bm25.b: must be a number in \[0, 1\], got 1.5"),
        (lambda: BM25Config(b="x"), "bm25.b: expected a number or None, got str 'x'"),
        (lambda: DenseConfig(device="gpu"), "dense.device: must be one of auto, cpu, cuda"),
        (lambda: DenseConfig(device="cuda:x"), "dense.device: must be one of"),
        (lambda: DenseConfig(device=0), "dense.device: expected text, got int 0"),
        (lambda: DenseConfig(dtype="fp8"), "dense.dtype: must be one of auto, fp32, bf16, fp16"),
        (lambda: DenseConfig(family="nv"), "dense.family: must be one of auto, e5-mistral, "),
        (lambda: DenseConfig(trust_remote_code="yes"), "dense.trust_remote_code: expected true"),
        (lambda: DenseConfig(ignore_identical_ids=1), "dense.ignore_identical_ids: expected true"),
        (lambda: DenseConfig(batch_size=0), "dense.batch_size: must be a positive integer, got 0"),
        (lambda: DenseConfig(batch_size=2.5), "dense.batch_size: expected an integer, got float"),
        (lambda: DenseConfig(batch_size=True), "dense.batch_size: expected an integer"),
        (lambda: DenseConfig(max_length=0), "dense.max_length: must be a positive integer"),
        (lambda: DenseConfig(instructions="bge"), "dense.instructions: must be one of r2med, none"),
        (lambda: ApiEmbedConfig(api_base=""), "api.api_base: expected a URL, got ''"),
        (lambda: ApiEmbedConfig(api_base=" http://x"), "api.api_base: expected a URL"),
        (lambda: ApiEmbedConfig(batch_size=-1), "api.batch_size: must be a positive integer"),
        (lambda: ApiEmbedConfig(params=[1]), "api.params: expected a mapping.*got list"),
        (lambda: ApiEmbedConfig(params={"api_key": "sk-1"}), "api.params: 'api_key' looks like"),
        (
            lambda: ApiEmbedConfig(params={"aws_secret_access_key": "s"}),
            "api.params: 'aws_secret_access_key' looks like a credential",
        ),
        (
            lambda: ApiEmbedConfig(params={"extra_headers": {"Authorization": "Bearer x"}}),
            "api.params: 'extra_headers.Authorization' looks like a credential",
        ),
        (lambda: ApiEmbedConfig(params={"api_base": "u"}), "api.params: 'api_base' .*api.api_base"),
        (lambda: ApiEmbedConfig(params={"model": "m"}), "api.params: 'model' cannot be set here"),
        (lambda: ApiEmbedConfig(params={"f": {1, 2}}), "api.params: must be JSON-serialisable"),
        (lambda: ApiEmbedConfig(params={"f": math.inf}), "api.params: must be JSON-serialisable"),
        (lambda: ApiEmbedConfig(params={1: 2}), "api.params: expected a mapping of text to"),
        (
            lambda: FusionConfig(method="wsum"),
            "fusion.method: must be one of rrf, combsum, combmnz",
        ),
        (lambda: FusionConfig(k=-1), "fusion.k: must be an integer >= 0, got -1"),
        (lambda: FusionConfig(depth=0), "fusion.depth: must be a positive integer, got 0"),
        (lambda: RetrieverConfig(spec="bm26"), r"retriever.spec: unknown retriever 'bm26'; valid"),
        (lambda: RetrieverConfig(spec="bm25+"), r"retriever.spec: unknown retriever ''"),
        (lambda: RetrieverConfig(spec=None), "retriever.spec: expected text, got None"),
        (lambda: RetrieverConfig(dense={}), "retriever.dense: expected a DenseConfig, got dict"),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(make, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        make()


def test_text_is_a_flags_to_read_and_a_value_from_python_must_be_typed():
    from retrievers.flags import retriever_settings

    settings = retriever_settings()
    # a flag's text is read by the field's own rule ...
    assert settings["batch_size"].type("8") == 8 and settings["k1"].type("1.2") == 1.2
    # ... and a value given from Python is refused unless it is of the field's type
    for make in (lambda: DenseConfig(batch_size="8"), lambda: BM25Config(k1="1.2")):
        with pytest.raises(ValueError, match="expected .*, got str"):
            make()
    assert BM25Config(k1=1, b=0) == BM25Config(k1=1.0, b=0.0)  # an int is a number
    assert isinstance(BM25Config(k1=1).k1, float)


def test_configs_are_frozen_and_own_their_params():
    params = {"dimensions": 256}
    api = ApiEmbedConfig(params=params)
    params["dimensions"] = 512
    assert api.params == {"dimensions": 256}
    with pytest.raises(FrozenInstanceError):
        api.batch_size = 1  # type: ignore[misc]
    hash(RetrieverConfig(api=api))  # usable as a dict key despite the params dict


def test_round_trip_through_json():
    config = RetrieverConfig(
        spec="bm25+dense:BAAI/bge-large-en-v1.5+api:text-embedding-3-large",
        bm25=BM25Config("lucene", k1=1.2, b=0.75),
        dense=DenseConfig("cuda:1", "fp32", 8, 512, "none", "medcpt", True, False),
        api=ApiEmbedConfig("http://localhost:8000/v1", 16, {"dimensions": 1024, "x": [1, "a"]}),
        fusion=FusionConfig("combmnz", 10, 200),
    )
    data = json.loads(json.dumps(config.to_dict()))
    assert data["dense"] == {
        "device": "cuda:1",
        "dtype": "fp32",
        "batch_size": 8,
        "max_length": 512,
        "instructions": "none",
        "family": "medcpt",
        "trust_remote_code": True,
        "ignore_identical_ids": False,
        "r2med_rules": None,
    }
    assert RetrieverConfig.from_dict(data) == config
    assert RetrieverConfig.from_dict(RetrieverConfig().to_dict()) == RetrieverConfig()
    # missing keys take their defaults
    assert RetrieverConfig.from_dict({"dense": {"batch_size": 4}}) == RetrieverConfig(
        dense=DenseConfig(batch_size=4)
    )


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"dense": {"batchsize": 3}},
            "retriever.dense.batchsize: unknown setting; known: device, ",
        ),
        ({"retriever": "bm25"}, "retriever.retriever: unknown setting; known: spec, bm25, dense,"),
        ({"fusion": {"method": "rrf", "rrf_k": 1}}, "retriever.fusion.rrf_k: unknown setting"),
        ({"dense": {"batch_size": 0}}, "retriever.dense.batch_size: must be a positive integer"),
        ({"api": {"params": {"api_key": "x"}}}, "retriever.api.params: 'api_key' looks like"),
        ({"spec": "colbert"}, "retriever.spec: unknown retriever 'colbert'"),
        ({"bm25": "okapi"}, "retriever.bm25: expected a table of settings, got 'okapi'"),
        ("bm25", "retriever: expected a table of settings, got 'bm25'"),
    ],
)
def test_from_dict_names_the_bad_key(data, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        RetrieverConfig.from_dict(data)


def test_from_dict_roots_messages_where_the_config_is_nested():
    with pytest.raises(ValueError, match=r"^run\.retriever\.fusion\.depth: must be a positive"):
        RetrieverConfig.from_dict({"fusion": {"depth": -3}}, where="run.retriever")
    with pytest.raises(ValueError, match=r"^run\.retriever\.spec: unknown retriever"):
        RetrieverConfig.from_dict({"spec": "x"}, where="run.retriever")


def test_spec_forms():
    assert [(p.kind, p.arg, p.text) for p in parse_spec("bm25 + dense: + api:m")] == [
        ("bm25", "", "bm25"),
        ("dense", "", "dense:"),
        ("api", "m", "api:m"),
    ]
    assert [p.arg for p in RetrieverConfig("dense:/models/x+dense").parts] == ["/models/x", ""]
    for bad in ("bm26", "dense+colbert", "api", "bm25:okapi", ""):
        with pytest.raises(ValueError, match="valid: bm25, dense, dense:<model>, api:<model>"):
            parse_spec(bad)
    assert list(RETRIEVERS) == [
        "bm25", "dense", "dense:<model>", "api:<model>", "remote:<url>", "<a>+<b>[+...]"
    ]  # fmt: skip


def test_the_config_has_a_field_for_each_kind_with_settings():
    """RetrieverConfig's fields are the spec, each row's settings (in the rows' order) and
    fusion, exactly: a row whose settings have no field, or a field no row names, fails here."""
    from dataclasses import MISSING

    from retrievers.kinds import RETRIEVER_KINDS

    sections = [(k.field, k.settings) for k in RETRIEVER_KINDS.values() if k.settings]
    expected = [("spec", MISSING), *sections, ("fusion", FusionConfig)]
    assert [(f.name, f.default_factory) for f in fields(RetrieverConfig)] == expected
    assert [f.type for f in fields(RetrieverConfig)] == ["str"] + [
        c.__name__ for _, c in expected[1:]
    ]
    assert [k.field for k in RETRIEVER_KINDS.values()] == ["bm25", "dense", "api", None]


def test_each_kind_is_one_row():
    """The spec forms, the --retriever help and the builders all come from the rows."""
    from retrievers.kinds import RETRIEVER_KINDS, SPEC_HELP, RetrieverKind

    spec = next(f for f in fields(RetrieverConfig) if f.name == "spec")
    assert spec.metadata["help"] == SPEC_HELP
    assert SPEC_HELP == "bm25, dense[:model], api:<model>, remote:<url>, or a+b fusion"
    assert [(k.name, k.arg) for k in RETRIEVER_KINDS.values()] == [
        ("bm25", "none"), ("dense", "optional"), ("api", "required"), ("remote", "required")
    ]  # fmt: skip
    assert all(callable(k.build) for k in RETRIEVER_KINDS.values())
    bm25_row = RETRIEVER_KINDS["bm25"]
    for bad in (
        {"arg": "maybe"},
        {"arg": "none", "arg_name": "model"},
        {"arg": "required", "arg_name": ""},
        {"arg": "optional", "arg_name": "model"},  # one help line for two forms
    ):
        with pytest.raises(ValueError, match="^bm25: "):
            RetrieverKind(bm25_row.name, help=bm25_row.help, build=bm25_row.build, **bad)


def test_every_field_has_one_line_of_help():
    for cls in ALL:
        for f in fields(cls):
            text = f.metadata.get("help")  # a flag's help too: argparse wraps it
            assert text and "\n" not in text and len(text) <= 160, (cls.__name__, f.name)


def test_the_retriever_flags_are_the_fields_own():
    """agents.run and retrievers.serve take the same retriever flags, each built from its
    field's metadata: one help text, one check, one default."""
    import argparse

    from agents.config.settings import SETTINGS, add_arguments
    from retrievers.flags import TASK_SETTINGS, add_retriever_arguments, retriever_settings

    own = {**retriever_settings(), **TASK_SETTINGS}
    assert {k: SETTINGS[k] for k in own} == own
    assert [s.path for s in retriever_settings().values()] == [
        f"retriever.{c.SECTION}.{f.name}" if c is not RetrieverConfig else f"retriever.{f.name}"
        for c in (RetrieverConfig, *ALL[:-1])
        for f in fields(c)
        if "flag" in f.metadata
    ]
    run, serve = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_arguments(run, only=tuple(own))
    add_retriever_arguments(serve)
    shown = [
        [(a.dest, a.help, a.type, a.choices, a.metavar) for a in p._actions] for p in (run, serve)
    ]
    assert shown[0] == shown[1]


def test_choices_come_from_the_modules_that_implement_them():
    assert set(BM25_METHODS) == {"bm25q", "lucene", "okapi"}
    for method in BM25_METHODS:
        assert BM25Config(method).method == method
    for dtype in DTYPES:
        assert DenseConfig(dtype=dtype).dtype == dtype
    for method in FUSION_METHODS:
        assert FusionConfig(method).method == method
    for device in ("auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"):
        assert DenseConfig(device=device).device == device


def test_the_modules_use_the_config_vocabulary():
    assert bm25.BM25_METHODS is BM25_METHODS
    assert dense.DTYPES is DTYPES
    # every listed method can be fused: ranx's, and DIVER's merge (hybrid.diver_minmax)
    assert set(hybrid._RANX) | {"diver-minmax"} == set(FUSION_METHODS)


def test_importing_the_config_loads_no_heavy_library():
    heavy = ("numpy", "scipy", "torch", "litellm", "ranx")
    code = f"import sys, retrievers.config; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import sys, retrievers.search; print('torch' in sys.modules, 'litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_a_flag_takes_what_its_field_takes():
    """--fusion-k 0 is RRF's 1/rank, as a config file's k = 0: the flag and the field share
    one check."""
    import argparse

    from retrievers.flags import add_retriever_arguments

    parser = argparse.ArgumentParser()
    add_retriever_arguments(parser)
    assert parser.parse_args(["--fusion-k", "0"]).fusion_k == 0
    assert FusionConfig(k=0).k == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["--fusion-k", "-1"])
    with pytest.raises(ValueError, match="fusion.k"):
        FusionConfig(k=-1)
