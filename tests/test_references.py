"""R2MED's published figures: read from its results/ layout exactly (both spellings of its
metric keys), shipped as eval/references/r2med.json and checked against R2MED's files by
value; the row a run's configuration reproduces (agents.paper); the figures and the exact
differences beside real runs in eval.compare's outputs and agents.run's printed lines."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agents.cli import report
from agents.config import RunConfig, from_settings, to_dict
from agents.paper import paper_figures, paper_row
from agents.pipeline import run
from agents.run import main as run_main
from eval.compare import compare_runs
from eval.compare.__main__ import main as compare_main
from eval.datasets import DEMO_DIR, R2MED_TASKS
from eval.references import (
    DATA_DIR,
    UnknownReference,
    build_table,
    load_references,
    r2med_key,
    reference,
    references_from,
    table_text,
)
from eval.references import main as references_main

COMMIT = "62b7074600407f7776fbec6f55a4db96eb237ea4"  # R2MED's commit the shipped table is from
SHIPPED_FILE = DATA_DIR / "r2med.json"
REPO = Path(__file__).resolve().parents[1]


def _write_task(results: Path, row_folder: str, task: str, test: dict) -> None:
    folder = results / row_folder
    folder.mkdir(parents=True, exist_ok=True)
    data = {"dataset_name": task, "evaluation_time": "0.21 minutes", "test": test}
    (folder / f"{task}.json").write_text(json.dumps(data, indent=2, sort_keys=True))


# ---- (a) the importer, on R2MED's layout made here ---------------------------------------------

# Excerpts of R2MED's own files at COMMIT, in the spelling each uses.
BASE_BM25_BIOLOGY = {  # results/base retriever/bm25/Biology.json
    "map_at_10": 0.13328, "mrr": 0.27195, "ndcg_at_1": 0.18447, "ndcg_at_10": 0.19188,
    "precision_at_10": 0.07573, "recall_at_10": 0.21846, "recall_at_100": 0.45447,
}  # fmt: skip
HYDE_QWEN7B_BM25_BIOLOGY = {  # results/gar/hyde/qwen-7b/bm25/Biology.json
    "MAP@10": 0.38864, "MRR": 0.5704, "NDCG@10": 0.48493, "NDCG@25": 0.53041,
    "P@10": 0.19709, "Recall@10": 0.54784,
}  # fmt: skip
HYDE_QWEN7B_NV_BIOLOGY = {  # results/gar/hyde/qwen-7b/nv/Biology.json (no MRR in this shape)
    "map_at_3": 0.16632, "ndcg_at_10": 0.30123, "precision_at_5": 0.18835, "recall_at_1": 0.0999,
}  # fmt: skip
RERANK_BIOLOGY = {  # results/reranker/bge-reranker/nv/top_10/Biology.json
    "MAP@10": 0.14585, "MRR": 0.27308, "NDCG@10": 0.2279, "P@10": 0.11748, "Recall@100": 0.30947,
}  # fmt: skip


def test_build_table_maps_both_spellings_exactly_to_our_names(tmp_path):
    results = tmp_path / "results"
    _write_task(results, "base retriever/bm25", "PMC-Clinical", {"ndcg_at_10": 0.21662})
    _write_task(results, "base retriever/bm25", "Biology", BASE_BM25_BIOLOGY)
    _write_task(results, "gar/hyde/qwen-7b/bm25", "Biology", HYDE_QWEN7B_BM25_BIOLOGY)
    _write_task(results, "gar/hyde/qwen-7b/nv", "Biology", HYDE_QWEN7B_NV_BIOLOGY)
    _write_task(results, "reranker/bge-reranker/nv/top_10", "Biology", RERANK_BIOLOGY)

    table = build_table(results, COMMIT)

    assert table["source"] == {
        "repository": "https://github.com/R2MED/R2MED", "commit": COMMIT, "folder": "results"
    }  # fmt: skip
    assert table["tasks"] == list(R2MED_TASKS)
    rows = table["rows"]
    assert list(rows) == [
        "base/bm25", "hyde/qwen-7b/bm25", "hyde/qwen-7b/nv", "reranker/bge-reranker/nv/top_10"
    ]  # fmt: skip
    base = rows["base/bm25"]
    assert base["path"] == "results/base retriever/bm25" and base["spelling"] == "ndcg_at_k"
    assert list(base["tasks"]) == ["Biology", "PMC-Clinical"]  # R2MED's order, not the disk's
    biology = base["tasks"]["Biology"]
    assert biology == {
        "NDCG@1": 0.18447, "NDCG@10": 0.19188, "MAP@10": 0.13328, "Recall@10": 0.21846,
        "Recall@100": 0.45447, "P@10": 0.07573, "MRR": 0.27195,
    }  # fmt: skip
    assert list(biology) == ["NDCG@1", "NDCG@10", "MAP@10", "Recall@10", "Recall@100", "P@10",
                             "MRR"]  # fmt: skip
    gar = rows["hyde/qwen-7b/bm25"]
    assert gar["path"] == "results/gar/hyde/qwen-7b/bm25" and gar["spelling"] == "NDCG@k"
    assert gar["tasks"] == {"Biology": HYDE_QWEN7B_BM25_BIOLOGY}  # our names already
    assert rows["hyde/qwen-7b/nv"]["tasks"]["Biology"] == {
        "NDCG@10": 0.30123, "MAP@3": 0.16632, "Recall@1": 0.0999, "P@5": 0.18835
    }  # fmt: skip
    rerank = rows["reranker/bge-reranker/nv/top_10"]
    assert rerank["path"] == "results/reranker/bge-reranker/nv/top_10"
    assert rerank["tasks"]["Biology"] == RERANK_BIOLOGY

    refs = references_from(table)
    assert refs["base/bm25"].figure("biology") == 0.19188
    assert refs["base/bm25"].figure("Biology", "MRR") == 0.27195
    assert refs["hyde/qwen-7b/nv"].figure("Biology", "MRR") is None  # absent, not 0
    assert refs["base/bm25"].average() == pytest.approx((0.19188 + 0.21662) / 2)
    with pytest.raises(ValueError, match="no MRR for task 'PMC-Clinical'"):
        refs["base/bm25"].average("MRR")


@pytest.mark.parametrize(
    "folder, task, test, message",
    [
        ("gar/hyde/qwen-7b/bm25", "Biology", {"ndcg@10": 0.1}, "unknown metric key 'ndcg@10'"),
        ("gar/hyde/qwen-7b/bm25", "Biology", {"NDCG@10": "0.1"}, "not a number"),
        ("gar/hyde/qwen-7b/bm25", "Biology", {"NDCG@10": 0.1, "mrr": 0.2}, "mixes the spellings"),
        ("gar/hyde/qwen-7b/bm25", "Stack-Biology", {"NDCG@10": 0.1}, "not an R2MED task"),
        ("gar/hyde/qwen-7b", "Biology", {"NDCG@10": 0.1}, "outside R2MED's layout"),
    ],
)
def test_build_table_refuses_what_is_not_r2med_s_layout(tmp_path, folder, task, test, message):
    results = tmp_path / "results"
    _write_task(results, "base retriever/bm25", "Biology", BASE_BM25_BIOLOGY)
    _write_task(results, folder, task, test)
    with pytest.raises(ValueError, match=message):
        build_table(results, COMMIT)


def test_a_row_whose_tasks_mix_spellings_is_refused(tmp_path):
    results = tmp_path / "results"
    _write_task(results, "base retriever/bm25", "Biology", BASE_BM25_BIOLOGY)
    _write_task(results, "base retriever/bm25", "MedQA-Diag", {"NDCG@10": 0.1})
    with pytest.raises(ValueError, match=r"base retriever/bm25: its tasks mix the spellings"):
        build_table(results, COMMIT)


# ---- (b) the shipped table, written back into R2MED's layout and rebuilt ----------------------


def test_shipped_table_round_trips_through_r2med_s_layout(tmp_path):
    shipped = json.loads(SHIPPED_FILE.read_text(encoding="utf-8"))
    spellings = {}
    for row, entry in shipped["rows"].items():
        spellings[row] = entry["spelling"]
        for task, metrics in entry["tasks"].items():
            test = {r2med_key(m, entry["spelling"]): v for m, v in metrics.items()}
            _write_task(tmp_path, entry["path"], task, test)

    rebuilt = build_table(tmp_path / "results", shipped["source"]["commit"])
    assert rebuilt == shipped
    assert table_text(rebuilt) == SHIPPED_FILE.read_text(encoding="utf-8")
    # the spellings R2MED used, kind by kind: so both shapes went through the round trip
    assert {spellings[r] for r in spellings if r.startswith("base/")} == {"ndcg_at_k"}
    assert {spellings[r] for r in spellings if r.startswith("reranker/")} == {"NDCG@k"}
    assert {spellings[r] for r in spellings if r.endswith("/bm25") and "/" in r[5:]} == {"NDCG@k"}
    gar_dense = [r for r in spellings if r.split("/")[0] in ("hyde", "search-o1") and
                 r.endswith(("/bge", "/nv"))]  # fmt: skip
    assert gar_dense and {spellings[r] for r in gar_dense} == {"ndcg_at_k"}


# ---- (c) the shipped figures against R2MED's files, read at COMMIT ------------------------------

# (R2MED path of the row, our row id, the mean of its 8 ndcg@10 values ×100 to 2 decimals)
AVERAGES = [
    ("results/gar/query2doc/gpt4/bm25", "query2doc/gpt4/bm25", 35.85),
    ("results/gar/query2doc/gpt4/nv", "query2doc/gpt4/nv", 41.65),
    ("results/gar/search-o1/qwq-32b/nv", "search-o1/qwq-32b/nv", 38.22),
    ("results/gar/search-r1/qwen-7b-ins/nv", "search-r1/qwen-7b-ins/nv", 35.11),
    ("results/base retriever/bm25", "base/bm25", 15.13),
    ("results/base retriever/nv", "base/nv", 31.43),
    ("results/gar/hyde/qwen-7b/bm25", "hyde/qwen-7b/bm25", 26.38),
    ("results/gar/hyde/gpt4/nv", "hyde/gpt4/nv", 39.37),
    ("results/reranker/bge-reranker/nv/top_10", "reranker/bge-reranker/nv/top_10", 25.55),
]
# (R2MED file, its key, its value)
FIGURES = [
    ("results/base retriever/bm25/Biology.json", "ndcg_at_10", 0.19188),
    ("results/base retriever/bm25/PMC-Clinical.json", "mrr", 0.26524),
    ("results/gar/hyde/qwen-7b/bm25/PMC-Clinical.json", "NDCG@10", 0.24485),
    ("results/gar/search-o1/qwq-32b/nv/IIYi-Clinical.json", "ndcg_at_10", 0.2152),
    ("results/gar/search-r1/qwen-7b-ins/nv/MedQA-Diag.json", "recall_at_100", 0.51603),
    ("results/reranker/bge-reranker/nv/top_10/PMC-Treatment.json", "MRR", 0.22054),
    ("results/gar/query2doc/gpt4/nv/Bioinformatics.json", "ndcg_at_10", 0.52347),
]


@pytest.mark.parametrize("path, row, average", AVERAGES)
def test_shipped_averages_are_r2med_s(path, row, average):
    ref = load_references()[row]
    assert ref.path == path and ref.commit == COMMIT
    assert len(ref.tasks) == 8 and list(ref.tasks) == list(R2MED_TASKS)
    assert f"{ref.average('NDCG@10') * 100:.2f}" == f"{average:.2f}"


@pytest.mark.parametrize("file, key, value", FIGURES)
def test_shipped_figures_are_r2med_s_values(file, key, value):
    folder, task = file.rsplit("/", 1)
    rows = {r.path: r for r in load_references().values()}
    metric = {"ndcg_at_10": "NDCG@10", "mrr": "MRR", "recall_at_100": "Recall@100"}.get(key, key)
    assert rows[folder].figure(task.removesuffix(".json"), metric) == value


def test_the_table_holds_every_row_r2med_published_and_no_other():
    rows = load_references()
    kinds = {}
    for row in rows:
        kinds[row.split("/")[0]] = kinds.get(row.split("/")[0], 0) + 1
    assert kinds == {"base": 15, "hyde": 27, "query2doc": 9, "lamer": 9, "search-o1": 4,
                     "search-r1": 4, "reranker": 3}  # fmt: skip
    hyde_llms = sorted({r.split("/")[1] for r in rows if r.startswith("hyde/")})
    assert hyde_llms == ["gpt4", "huatuo-o1-70b", "llama-70b", "qwen-32b", "qwen-72b",
                         "qwen-7b", "qwq-32b", "r1-llama-70b", "r1-qwen-32b"]  # fmt: skip
    assert all(len(r.tasks) == 8 for r in rows.values())


def test_reference_specs_and_one_line_refusals():
    assert reference("r2med:hyde/qwen-7b/bm25").row == "hyde/qwen-7b/bm25"
    assert reference("r2med:gar/hyde/qwen-7b/bm25").row == "hyde/qwen-7b/bm25"  # R2MED's path
    assert reference("r2med:results/base retriever/bm25").row == "base/bm25"
    with pytest.raises(UnknownReference) as e:
        reference("r2med:hyde/o3-mini/bm25")  # the paper has o3-mini; R2MED's files do not
    message = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in message
    assert "'r2med:hyde/o3-mini/bm25'" in message and "close matches: hyde/" in message
    with pytest.raises(UnknownReference, match="expected <table>:<row>"):
        reference("hyde/qwen-7b/bm25")
    with pytest.raises(UnknownReference, match="unknown reference table 'paper'; known: r2med"):
        reference("paper:base/bm25")
    with pytest.raises(UnknownReference, match="unknown reference table"):
        reference("../r2med:base/bm25")


# ---- the command line ------------------------------------------------------------------------


def test_list_show_and_build_commands(tmp_path, capsys):
    assert references_main(["list", "--method", "hyde"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| hyde/")]
    assert len(rows) == 27
    assert "| hyde/qwen-7b/bm25 | 26.38 | results/gar/hyde/qwen-7b/bm25 |" in rows
    assert references_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "| base/bm25 | 15.13 | results/base retriever/bm25 |" in out
    assert "| search-r1/qwen-7b-ins/nv | 35.11 |" in out

    assert references_main(["show", "hyde/qwen-7b/bm25"]) == 0
    out = capsys.readouterr().out
    assert "| Biology | 0.48493 | 0.38864 | 0.54784 | 0.19709 | 0.57040 |" in out
    assert "| Avg ×100 | 26.38 |" in out and f"at {COMMIT}" in out
    assert references_main(["show", "r2med:base/bge"]) == 0
    assert "| Biology | 0.12706 | 0.07706 | 0.16545 | 0.06311 | - |" in capsys.readouterr().out

    results = tmp_path / "results"
    _write_task(results, "base retriever/bm25", "Biology", BASE_BM25_BIOLOGY)
    out_file = tmp_path / "table.json"
    assert references_main(["build", str(results), "--commit", COMMIT, "-o", str(out_file)]) == 0
    assert out_file.read_text() == table_text(build_table(results, COMMIT))
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["list", "--method", "hyd"], "--method 'hyd': known: base, hyde, query2doc"),
        (["list", "--metric", "nDCG"], "--metric: unknown metric 'nDCG'"),
        (["show", "hyde/qwen-7b/bm2"], "close matches: hyde/qwen-7b/bm25"),
        (["build", ".", "--commit", "main"], "--commit 'main': expected 7 to 40 hex digits"),
        (["build", "nowhere", "--commit", COMMIT], "RESULTS_DIR nowhere: not a folder"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(argv, message, capsys):
    assert references_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_help_imports_nothing_heavy():
    code = (
        "import sys, runpy; sys.argv = ['x', '--help']\n"
        "try: runpy.run_module('eval.references', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "heavy = {'numpy', 'torch', 'scipy', 'litellm', 'pytrec_eval', 'agents'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "build" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ---- (d) which row a run's configuration reproduces --------------------------------------------

NV, BGE = "dense:nvidia/NV-Embed-v2", "dense:BAAI/bge-large-en-v1.5"
SEARCH_R1_7B = "PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo"

ROWS = [
    ({"agent": "none"}, "base/bm25"),  # bm25 is bm25q by default: R2MED's BM25
    ({"agent": "none", "bm25_method": "lucene"}, None),
    ({"agent": "none", "bm25_method": "okapi"}, None),
    ({"agent": "none", "retriever": BGE}, "base/bge"),
    ({"agent": "none", "retriever": "dense:baai/BGE-large-en-v1.5"}, "base/bge"),
    ({"agent": "none", "retriever": NV}, "base/nv"),
    ({"agent": "none", "retriever": "dense:ncbi/MedCPT-Query-Encoder"}, "base/medcpt"),
    ({"agent": "none", "retriever": "api:text-embedding-3-large"}, "base/openai"),
    ({"agent": "none", "retriever": "api:voyage-3"}, "base/voyage"),
    ({"agent": "none", "retriever": "dense"}, None),  # our default MiniLM
    ({"agent": "none", "retriever": f"bm25+{BGE}"}, None),  # fusion
    ({"agent": "hyde", "model": "openai/gpt-4o-2024-11-20"}, "hyde/gpt4/bm25"),
    ({"agent": "hyde", "model": "gpt-4o-2024-11-20", "retriever": NV}, "hyde/gpt4/nv"),
    ({"agent": "hyde", "model": "openai/gpt-4o"}, None),  # another snapshot than R2MED's
    ({"agent": "hyde", "model": "hosted_vllm/Qwen/Qwen2.5-7B-Instruct", "retriever": BGE},
     "hyde/qwen-7b/bge"),
    ({"agent": "query2doc", "model": "openai/qwen/qwen2.5-72b-instruct", "retriever": NV},
     "query2doc/qwen-72b/nv"),
    ({"agent": "lamer", "model": "openai/Qwen/Qwen2.5-7B-Instruct", "bm25_method": "lucene"},
     None),
    ({"agent": "hyde", "model": "openai/meta-llama/Meta-Llama-3.1-70B-Instruct"},
     "hyde/llama-70b/bm25"),
    ({"agent": "hyde", "model": "openai/FreedomIntelligence/HuatuoGPT-o1-70B", "retriever": NV},
     "hyde/huatuo-o1-70b/nv"),
    ({"agent": "hyde", "model": "openai/o3-mini"}, None),  # R2MED published no hyde/o3-mini
    ({"agent": "hyde", "generations": "r2med:qwq-32b"}, "hyde/qwq-32b/bm25"),
    ({"agent": "lamer", "generations": "r2med:gpt4@/data/r2med", "retriever": BGE},
     "lamer/gpt4/bge"),
    ({"agent": "hyde", "generations": "r2med:o3-mini"}, None),
    ({"agent": "search-o1", "model": "openai/Qwen/QwQ-32B", "retriever": NV},
     "search-o1/qwq-32b/nv"),
    ({"agent": "search-o1", "model": "openai/Qwen/QwQ-32B"}, None),  # R2MED: bge and nv only
    ({"agent": "search-o1", "model": "openai/Qwen/Qwen3-32B", "retriever": BGE},
     "search-o1/qwen3-32b/bge"),
    ({"agent": "search-r1", "model": f"openai/{SEARCH_R1_7B}", "retriever": NV},
     "search-r1/qwen-7b-ins/nv"),
    ({"agent": "search-r1", "model": "openai/Qwen/Qwen2.5-7B-Instruct", "retriever": NV}, None),
    ({"agent": "hyde"}, None),  # the embedded default model
    ({"agent": "tool-search", "model": "openai/gpt-4o-2024-11-20"}, None),
    # reranker rows: one cross-encoder stage, depth 10, over NV-Embed-v2, no generation
    ({"agent": "none", "retriever": NV, "rerank": ["cross:BAAI/bge-reranker-v2-m3,depth=10"]},
     "reranker/bge-reranker/nv/top_10"),
    ({"agent": "none", "retriever": NV, "rerank": ["cross:castorini/monobert-large-msmarco"],
      "rerank_depth": 10}, "reranker/monobert/nv/top_10"),
    ({"agent": "none", "retriever": NV, "rerank": ["cross:BAAI/bge-reranker-v2-m3"]}, None),
    ({"agent": "none", "rerank": ["cross:BAAI/bge-reranker-v2-m3,depth=10"]}, None),  # on bm25
    ({"agent": "none", "retriever": NV,
      "rerank": ["cross:BAAI/bge-reranker-v2-m3,depth=10", "cross:BAAI/bge-reranker-v2-m3"]},
     None),
    ({"agent": "hyde", "model": "openai/gpt-4o-2024-11-20", "retriever": NV,
      "rerank": ["cross:BAAI/bge-reranker-v2-m3,depth=10"]}, None),
]  # fmt: skip


@pytest.mark.parametrize("settings, row", ROWS)
def test_paper_row_of_a_configuration(settings, row):
    config = to_dict(from_settings(settings))
    assert paper_row(config) == row


def test_paper_figures_keep_the_run_s_r2med_tasks():
    config = to_dict(from_settings({"agent": "none", "dataset": "demo"}))
    assert paper_row(config) == "base/bm25"  # the dataset plays no part in the row
    assert paper_figures(config, ["demo"]) == {}
    assert paper_figures(config, ["biology", "demo", "PMC-Clinical"]) == {
        "biology": 0.19188, "PMC-Clinical": 0.21662  # results/base retriever/bm25/<Task>.json
    }  # fmt: skip
    nv = to_dict(from_settings({"agent": "none", "retriever": NV}))
    assert paper_figures(nv, ["Biology"]) == {"Biology": 0.27152}  # .../base retriever/nv/
    lucene = to_dict(from_settings({"agent": "none", "bm25_method": "lucene"}))
    assert paper_figures(lucene, ["Biology"]) is None


# ---- (e) eval.compare --reference on real runs -------------------------------------------------

# results/base retriever/bm25/<Task>.json and results/gar/hyde/qwen-7b/bm25/<Task>.json, ndcg@10
PAPER = {
    "base/bm25": {"Biology": 0.19188, "PMC-Clinical": 0.21662},
    "hyde/qwen-7b/bm25": {"Biology": 0.48493, "PMC-Clinical": 0.24485},
}
TASKS = ["Biology", "PMC-Clinical", "toy"]  # two of R2MED's names and one of none


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two runs without an LLM (R2MED's BM25 and Lucene's) over the demo task copied into
    folders named like R2MED tasks, and one folder named like none of them."""
    root = tmp_path_factory.mktemp("references")
    for task in TASKS:
        shutil.copytree(DEMO_DIR, root / "data" / task)
    dataset = ",".join(str(root / "data" / t) for t in TASKS)
    for method in ("bm25q", "lucene"):
        run(_config(root, dataset, root / "runs", method, bm25_method=method), progress=False)
    return {"root": root, "bm25q": root / "runs" / "bm25q", "lucene": root / "runs" / "lucene"}


def _config(root: Path, dataset: str, runs_dir: Path, name: str, **settings) -> RunConfig:
    """A run without an LLM, its cache shared by every run of this module."""
    return from_settings(
        {"agent": "none", "dataset": dataset, "runs_dir": str(runs_dir),
         "cache_dir": str(root / "cache"), "run_name": name, **settings}
    )  # fmt: skip


def _ndcg(folder: Path, task: str) -> float:
    return json.loads((folder / task / "metrics.json").read_text())["metrics"]["NDCG@10"]


def _pct(value: float) -> str:
    return f"{value * 100:.2f}"


def _diff(value: float) -> str:
    return f"{value * 100:+.2f}"


def test_compare_sets_the_published_rows_beside_the_runs(runs, capsys):
    out = runs["root"] / "cmp"
    argv = [str(runs["bm25q"]), str(runs["lucene"]), "--out", str(out), "--no-plots",
            "--reference", "r2med:base/bm25", "--reference", "r2med:hyde/qwen-7b/bm25",
            "--reference", "r2med:gar/hyde/qwen-7b/bm25"]  # fmt: skip
    assert compare_main(argv) == 0
    printed = capsys.readouterr().out
    report_md = (out / "report.md").read_text(encoding="utf-8")
    assert report_md in printed

    own = {name: {t: _ndcg(runs[name], t) for t in TASKS} for name in ("bm25q", "lucene")}
    assert own["bm25q"]["Biology"] != own["lucene"]["Biology"]  # two runs, two results
    label = {"bm25q": "none bm25q", "lucene": "none lucene"}
    for row, figures in PAPER.items():
        paper_avg = sum(figures.values()) / 2
        # the leaderboard: the paper's figure per task, "-" where it has none, Avg starred
        line = (f"| R2MED paper: {row} | {_pct(figures['Biology'])} | "
                f"{_pct(figures['PMC-Clinical'])} | - | {_pct(paper_avg)}* |")  # fmt: skip
        assert line in report_md
        assert line in (out / "leaderboard.md").read_text()
        for name in ("bm25q", "lucene"):
            mine = own[name]
            run_avg = (mine["Biology"] + mine["PMC-Clinical"]) / 2
            cells = [_diff(mine["Biology"] - figures["Biology"]),
                     _diff(mine["PMC-Clinical"] - figures["PMC-Clinical"]), "-",
                     _diff(run_avg - paper_avg)]  # fmt: skip
            assert f"| {label[name]} | {row} | " + " | ".join(cells) + " |" in report_md
    assert report_md.count("| R2MED paper: hyde/qwen-7b/bm25 |") == 1  # given twice, shown once
    assert "R2MED paper: base/bm25: toy: not R2MED's task(s)" in report_md
    assert ("R2MED paper: base/bm25: the runs lack 6 of its 8 tasks (Bioinformatics, "
            "Medical-Sciences, MedXpertQA-Exam, MedQA-Diag, PMC-Treatment, IIYi-Clinical)"
            ) in report_md  # fmt: skip
    assert "the paper's own Avg over its 8 tasks is 15.13" in report_md
    assert f"https://github.com/R2MED/R2MED at {COMMIT}, results/base retriever/bm25" in report_md

    csv_rows = (out / "leaderboard.csv").read_text().splitlines()
    assert csv_rows[-2] == (
        f"R2MED paper: base/bm25,https://github.com/R2MED/R2MED/tree/{COMMIT}/results/"
        f"base%20retriever/bm25,0.19188,0.21662,,{(0.19188 + 0.21662) / 2:.5f}"
    )
    published = (out / "published.csv").read_text().splitlines()
    assert published[0] == "run,reference,task,run_mean,paper,difference"
    assert (f"none lucene,r2med:hyde/qwen-7b/bm25,Biology,{own['lucene']['Biology']:.5f},"
            f"0.48493,{own['lucene']['Biology'] - 0.48493:.5f}") in published  # fmt: skip
    summary = json.loads((out / "comparison.json").read_text())
    assert [p["row"] for p in summary["published"]] == list(PAPER)
    assert summary["published"][0]["figures"] == PAPER["base/bm25"]

    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count('<tr data-run="') == 2  # the runs; the paper's rows are marked apart
    page = _Rows()
    page.feed(html)
    marked = page.rows["published"]
    assert [r["attrs"]["data-reference"] for r in marked] == list(PAPER)
    for r, (row, figures) in zip(marked, PAPER.items(), strict=True):
        assert r["cells"][0] == f"R2MED paper: {row} published"  # its tag says what it is
        assert r["cells"][1:5] == [_pct(figures["Biology"]), _pct(figures["PMC-Clinical"]), "-",
                                   _pct(sum(figures.values()) / 2) + "*"]  # fmt: skip
    deltas = {(r["attrs"]["data-reference"], r["attrs"]["data-of"]): r["cells"]
              for r in page.rows["difference"]}  # fmt: skip
    mine = own["lucene"]
    assert deltas[("hyde/qwen-7b/bm25", "none lucene")] == [
        "none lucene", "hyde/qwen-7b/bm25", _diff(mine["Biology"] - 0.48493),
        _diff(mine["PMC-Clinical"] - 0.24485), "-",
        _diff((mine["Biology"] + mine["PMC-Clinical"]) / 2 - (0.48493 + 0.24485) / 2),
    ]  # fmt: skip
    assert 'class="tag published"' in html and "tr.published" in html  # styled apart


def test_compare_without_references_writes_what_it_wrote(runs, tmp_path):
    c = compare_runs([runs["bm25q"], runs["lucene"]])
    assert c.published == []
    out = tmp_path / "plain"
    from eval.compare import write_comparison

    written = write_comparison(c, out, plots=False, html=True)
    assert "published.csv" not in [p.name for p in written]
    html = (out / "report.html").read_text()
    assert "data-reference" not in html and "Against the published figures" not in html
    assert "R2MED paper" not in (out / "report.md").read_text()
    assert "R2MED paper" not in (out / "leaderboard.csv").read_text()
    assert json.loads((out / "comparison.json").read_text())["published"] == []


def test_compare_refuses_an_unknown_reference_in_one_line(runs, capsys):
    argv = [str(runs["bm25q"]), "--out", str(runs["root"] / "bad"), "--reference", "r2med:bm25"]
    assert compare_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --reference: reference 'r2med:bm25'")
    assert "close matches: base/bm25" in err
    assert not (runs["root"] / "bad").exists()  # refused before --out was made


def test_a_limited_run_is_noted_against_the_paper(runs, tmp_path):
    biology = str(runs["root"] / "data" / "Biology")
    run(_config(runs["root"], biology, tmp_path, "limited", limit=5), progress=False)
    c = compare_runs([tmp_path / "limited"], references=["r2med:base/bm25"])
    (p,) = c.published
    assert p.figures == {"Biology": 0.19188}
    assert p.differences["none bm25q"] == {
        "Biology": c.means["none bm25q"]["Biology"] - 0.19188,
        "Avg": c.means["none bm25q"]["Biology"] - 0.19188,
    }
    assert any("run on the first 5 queries" in n for n in c.notes)


class _Rows(HTMLParser):
    """The text of each cell of the leaderboard's published rows and the differences' rows."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, list[dict]] = {"published": [], "difference": []}
        self.row: dict | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-reference" in a:
            kind = "published" if "published" in (a.get("class") or "") else "difference"
            self.row = {"attrs": a, "cells": []}
            self.rows[kind].append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row["cells"].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


# ---- (f) agents.run prints the paper's figure ----------------------------------------------------


def test_agents_run_prints_the_paper_s_figures_for_a_matching_run(runs, tmp_path, capsys):
    dataset = ",".join(str(runs["root"] / "data" / t) for t in ("Biology", "toy"))
    common = ["--agent", "none", "--dataset", dataset, "--runs-dir", str(tmp_path),
              "--cache-dir", str(runs["root"] / "cache"), "--quiet"]  # fmt: skip
    assert run_main([*common, "--run-name", "mine"]) == 0
    out = capsys.readouterr().out
    ndcg = _ndcg(tmp_path / "mine", "Biology")
    assert f"Biology: NDCG@10 = {ndcg:.5f} (R2MED paper, base/bm25: 0.19188)\n" in out
    assert f"toy: NDCG@10 = {_ndcg(tmp_path / 'mine', 'toy'):.5f}\n" in out  # not R2MED's
    lines = out.splitlines()
    paper = "R2MED paper (base/bm25): avg nDCG@10 19.19 over the same tasks"
    assert paper in lines and lines[lines.index(paper) + 1].startswith("wall time")

    assert run_main([*common, "--run-name", "lucene", "--bm25-method", "lucene"]) == 0
    out = capsys.readouterr().out
    assert "R2MED paper" not in out and "Biology: NDCG@10 = " in out


def test_report_lines_without_a_row_are_unchanged(runs):
    from agents.pipeline import TaskResult

    summary = json.loads((runs["bm25q"] / "Biology" / "metrics.json").read_text())
    result = TaskResult(name="Biology", folder="Biology", summary=summary)
    plain = report(result)
    ref = load_references()["hyde/qwen-7b/bm25"]
    first, rest = plain.split("\n", 1)
    assert report(result, ref) == f"{first} (R2MED paper, hyde/qwen-7b/bm25: 0.48493)\n{rest}"
    other = TaskResult(name="toy", folder="toy", summary=summary)
    assert report(other, ref) == report(other)


def test_agents_sweep_prints_the_paper_s_figures_for_a_matching_cell(runs, tmp_path, capsys):
    """A sweep's cells print through agents.run's printer: a cell of R2MED's BM25 over its
    Biology task is the paper's base/bm25 row."""
    from agents.sweep import main as sweep_main

    config = tmp_path / "sweep.toml"
    config.write_text(
        f'output = "out"\ncache_dir = "{runs["root"] / "cache"}"\nagents = ["none"]\n'
        f'datasets = ["{runs["root"] / "data" / "Biology"}"]\n[options]\nquiet = true\n'
    )
    assert sweep_main([str(config)]) == 0
    out = capsys.readouterr().out
    ndcg = _ndcg(tmp_path / "out" / "runs" / "none-bm25q-Biology", "Biology")
    assert f"Biology: NDCG@10 = {ndcg:.5f} (R2MED paper, base/bm25: 0.19188)\n" in out
    assert "R2MED paper (base/bm25): avg nDCG@10 19.19 over the same tasks\n" in out


def test_agents_rerank_prints_the_paper_s_figure_for_a_reranker_row(
    runs, tmp_path, capsys, monkeypatch
):
    """A cross-encoder at depth 10 over NV-Embed-v2's lists is R2MED's reranker row, and the
    rerank prints its figures (the run itself stubbed: no model is downloaded here)."""
    import agents.pipeline
    from agents.pipeline import RunResult, TaskResult
    from agents.rerank.__main__ import main as rerank_main

    source = tmp_path / "nv"
    source.mkdir()
    biology = str(runs["root"] / "data" / "Biology")
    nv = from_settings({"agent": "none", "retriever": NV, "dataset": biology})
    (source / "config.json").write_text(json.dumps(to_dict(nv)))
    summary = json.loads((runs["bm25q"] / "Biology" / "metrics.json").read_text())

    def stub(config, *, on_task, **kwargs):
        task = TaskResult(name="Biology", folder="Biology", summary=summary)
        on_task(task)
        return RunResult(tmp_path / "reranked", config, {"Biology": task}, 0.5)

    monkeypatch.setattr(agents.pipeline, "run", stub)
    argv = [str(source), "--rerank", "cross:BAAI/bge-reranker-v2-m3,depth=10", "--quiet"]
    assert rerank_main(argv) == 0
    out = capsys.readouterr().out
    row = "reranker/bge-reranker/nv/top_10"
    figure = load_references()[row].figure("Biology")
    assert f"Biology: NDCG@10 = {summary['metrics']['NDCG@10']:.5f} " in out
    assert f" (R2MED paper, {row}: {figure:.5f})\n" in out
    assert f"R2MED paper ({row}): avg nDCG@10 {figure * 100:.2f} over the same tasks\n" in out
