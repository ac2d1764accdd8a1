"""config.json as the run configuration's modules write and read it.

The user's inputs are `RunConfig`'s own fields; what a run records about itself is apart, in
`RunConfig.recorded`. The file keeps both at its top level in the order it always had, so a run
folder written before the split reads, resumes and compares byte for byte. Each job of the
configuration has a module of its own (agents.config.run_config, agents.config.stages,
agents.config.serialise, agents.config.settings, agents.config.binding); the lower ones load none of
the higher.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from agents.config.binding import binding, differences
from agents.config.run_config import ConfigError, Recorded, RunConfig
from agents.config.serialise import KEYS, from_dict, to_dict
from agents.config.settings import from_settings
from tests.helpers import REPO

# config.json's top-level keys in the order run folders have always held them (the fields of
# RunConfig, in order, before the recorded ones moved into `Recorded`)
WRITTEN = [
    "agent", "dataset", "options", "retriever", "rerank", "llm", "eval", "limit",
    "prompt_files", "prompts", "runs_dir", "run_name", "cache_dir", "source_run", "run_file",
    "run_file_sha256", "run_file_duplicates", "run_file_order", "generations",
    "generation_sha256", "reasoning", "sampling", "chat_template_sha256", "embedded",
    "retriever_index", "timeout", "machine",
]  # fmt: skip

RECORDED = {
    "prompts": {"hyde/default": "a" * 64},
    "run_file_sha256": None,
    "generation_sha256": {"toy": "b" * 64},
    "sampling": {"hyde/generate": {"model": "m", "params": {"temperature": 0.0}}},
    "chat_template_sha256": "c" * 64,
    "embedded": {"local/smollm2-135m": {"n_batch": 64}},
    "retriever_index": {"toy": {"remote:http://h": {"corpus": "d" * 64}}},
    "machine": {"cpu": {"arch": "x86_64"}},
}


def test_the_file_keeps_its_keys_and_their_order():
    assert list(to_dict(RunConfig())) == WRITTEN
    recorded = from_settings({"agent": "hyde"}).with_recorded(**RECORDED)
    data = to_dict(recorded)
    assert list(data) == WRITTEN and "recorded" not in data
    assert {k: data[k] for k in RECORDED} == RECORDED  # at the top level, as before


def test_keys_name_every_field_once():
    fields = {f.name for f in dataclasses.fields(RunConfig)} - {"recorded"}
    recorded = {f.name for f in dataclasses.fields(Recorded)}
    assert not fields & recorded  # an input is never also a record, nor the other way
    assert sorted(KEYS) == sorted(fields | recorded) and len(KEYS) == len(set(KEYS))


def test_the_users_inputs_are_apart_from_the_record():
    config = from_settings({"agent": "hyde", "model": "openai/m"})
    assert config.recorded == Recorded()  # settings never fill the record
    assert not hasattr(config, "prompts") and config.prompt_files == {}
    assert "prompt_files" not in {f.name for f in dataclasses.fields(Recorded)}
    kept = config.with_recorded(prompts={"hyde/default": "a" * 64})
    assert dataclasses.replace(kept, recorded=Recorded()) == config  # nothing else moved


def test_an_old_file_reads_back_equal_and_bound_the_same():
    config = from_settings({"agent": "hyde", "model": "openai/m"}).with_recorded(**RECORDED)
    text = json.dumps(to_dict(config), indent=2)
    read = from_dict(json.loads(text))
    assert read == config and read.recorded.sampling == RECORDED["sampling"]
    assert json.dumps(to_dict(read), indent=2) == text
    assert "machine" not in binding(read) and binding(read)["prompts"] == RECORDED["prompts"]
    other = read.with_recorded(sampling={}, machine={})
    assert differences(binding(read), binding(other)) == ["sampling"]  # machine is runtime


def test_unknown_keys_are_named_with_the_known_ones():
    with pytest.raises(ConfigError) as refused:
        from_dict({"agent": "hyde", "recorded": {}})
    assert str(refused.value) == f"recorded: unknown setting; known: {', '.join(sorted(KEYS))}"


@pytest.mark.parametrize(
    ("module", "absent"),
    [
        ("agents.config.run_config", ("agents.config.stages", "agents.config.serialise",
                                      "agents.config.settings", "agents.config.binding",
                                      "eval.plumbing.flags", "retrievers.flags")),
        ("agents.config.stages", ("agents.config.serialise", "agents.config.settings",
                                  "agents.config.binding")),
        ("agents.config.serialise", ("agents.config.stages", "agents.config.settings",
                                     "agents.config.binding")),
        ("agents.config.settings", ("agents.config.binding",)),
    ],
)  # fmt: skip
def test_each_job_loads_none_above_it(module, absent):
    code = f"import sys, {module}; print([m for m in {list(absent)!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", f"{module} loads {out.stdout.strip()}"
