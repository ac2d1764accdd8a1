"""R2MED's published figures, from both its sources: its repository's results/ layout read
exactly (both spellings of its metric keys), shipped as eval/references/r2med.json and checked
against R2MED's files by value; its leaderboard (r2med.github.io) read from a TSV copy, shipped
as eval/references/r2med-leaderboard.json; where the two agree (to the page's rounding) and
where they conflict, found from the data; the row a run's configuration reproduces
(agents.execution.published_row), from either source; the figures, their sources and the exact
differences beside real runs in eval.compare's outputs and agents.run's printed lines; the R2MED
figures methods' own authors published (eval/references/r2med-authors.json), an average alone shown
as such and never split into per-task figures."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agents.commands.run import main as run_main
from agents.config.run_config import RunConfig
from agents.config.serialise import to_dict
from agents.config.settings import from_settings
from agents.execution.published_row import (
    LLMS,
    RETRIEVERS,
    paper_figures,
    paper_reference,
    paper_row,
    paper_spec,
)
from agents.execution.report import report
from agents.execution.whole_run import run_dataset
from eval.compare import compare_runs
from eval.compare.__main__ import main as compare_main
from eval.datasets import DEMO_DIR, R2MED_TASKS
from eval.references.__main__ import main as references_main
from eval.references.conflicts import agrees, conflict_of, conflicts, find_conflicts
from eval.references.leaderboard import (
    LEADERBOARD_LLMS,
    LEADERBOARD_RETRIEVERS,
    build_leaderboard,
    leaderboard_text,
    leaderboard_tsv,
)
from eval.references.model import AUTHORS_TABLE, UnknownReference
from eval.references.reading import (
    DATA_DIR,
    load_references,
    reference,
    references_from,
    references_of,
    table_names,
)
from eval.references.repository import build_table, r2med_key, table_text
from eval.runs import TaskFolder
from eval.task_summary import TaskSummary
from tests.helpers import SHARED_ABSENT

COMMIT = "62b7074600407f7776fbec6f55a4db96eb237ea4"  # R2MED's commit the shipped table is from
SHIPPED_FILE = DATA_DIR / "r2med.json"
LEADERBOARD_FILE = DATA_DIR / "r2med-leaderboard.json"
REPO = Path(__file__).resolve().parents[2]
# the page's table as copied beside the repo (never into it); the shipped JSON is built from it
SHARED_TSV = REPO.parent / "shared" / "data" / "r2med-leaderboard" / "leaderboard.tsv"


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


# ---- (d) the leaderboard: read from the page's table, shipped beside the repository's --------

TSV_HEADER = "llm\tretriever\tavg\t" + "\t".join(R2MED_TASKS)
# three rows of the page as published (its names, its ×100 figures), with a base row
TSV_ROWS = [
    "o3-mini\tNV-Embed-v2\t41.35\t34.01\t55.90\t51.28\t28.99\t40.30\t48.97\t50.86\t20.47",
    "Search-O1 (QwQ-32b)\tBM25\t35.57\t60.78\t41.58\t43.93\t24.07\t39.94\t37.52\t28.38\t8.34",
    "Search-R1 (Qwen2.5-3b-it-em-ppo)\tText-embedding-3-large\t30.19\t24.48\t40.91\t47.65"
    "\t11.62\t16.78\t47.79\t32.27\t20",
    "-\tMedCPT\t9.02\t2.15\t17.57\t14.74\t1.68\t2.02\t11.33\t14.62\t8.03",
]


def _tsv(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "leaderboard.tsv"
    path.write_text("\n".join([TSV_HEADER, *lines]) + "\n", encoding="utf-8")
    return path


def test_build_leaderboard_maps_the_page_s_names_to_r2med_s(tmp_path):
    table = build_leaderboard(_tsv(tmp_path, *TSV_ROWS))
    assert table["source"]["kind"] == "leaderboard"
    assert table["source"]["name"] == "R2MED leaderboard, r2med.github.io"
    assert list(table["rows"]) == ["hyde/o3-mini/nv", "search-o1/qwq-32b/bm25",
                                   "search-r1/qwen-3b-ins/openai", "base/medcpt"]  # fmt: skip
    entry = table["rows"]["search-r1/qwen-3b-ins/openai"]
    assert entry["llm"] == "Search-R1 (Qwen2.5-3b-it-em-ppo)" and entry["avg"] == 30.19
    assert entry["tasks"]["IIYi-Clinical"] == 20.0 and list(entry["tasks"]) == list(R2MED_TASKS)

    refs = references_from(table)
    o3 = refs["hyde/o3-mini/nv"]
    assert o3.spec == "r2med-leaderboard:hyde/o3-mini/nv"
    assert o3.label == "R2MED leaderboard: hyde/o3-mini/nv"
    assert o3.source == "R2MED leaderboard, r2med.github.io (its row o3-mini / NV-Embed-v2)"
    assert o3.location == "https://r2med.github.io"
    assert o3.figure("biology") == 0.3401 and o3.figure("Biology", "MAP@10") is None
    assert o3.format(o3.figure("Biology")) == "0.3401"
    assert o3.average() == 0.4135  # the page's own Avg over the 8 tasks
    assert o3.average(tasks=["Biology", "Bioinformatics"]) == pytest.approx((0.3401 + 0.559) / 2)
    assert refs["base/medcpt"].source.endswith("(its row MedCPT)")


@pytest.mark.parametrize(
    "line, message",
    [
        ("GPT-5\tBM25\t1\t1\t1\t1\t1\t1\t1\t1\t1", ":2: llm 'GPT-5': no R2MED short name"),
        ("Search-O2 (QwQ-32b)\tBM25\t1\t1\t1\t1\t1\t1\t1\t1\t1",
         ":2: llm 'Search-O2': no R2MED short name"),
        ("Search-O1 (QwQ-72b)\tBM25\t1\t1\t1\t1\t1\t1\t1\t1\t1",
         ":2: llm 'QwQ-72b': no R2MED short name"),
        ("-\tColBERT\t1\t1\t1\t1\t1\t1\t1\t1\t1", ":2: retriever 'ColBERT': no R2MED"),
        ("-\tBM25\t1\t1\t1", ":2: 5 tab-separated fields, expected 11"),
        ("-\tBM25\t1\t1\tx\t1\t1\t1\t1\t1\t1", ":2: Bioinformatics 'x': not a number"),
        ("-\tBM25\t1\t1\t1\t1\t1\t1\t1\t1\t1.005", ":2: IIYi-Clinical '1.005': not a figure"),
        ("-\tBM25\t1\t1\t1\t1\t1\t1\t1\t1\t-1", ":2: IIYi-Clinical '-1': not a figure"),
        ("-\tBM25\t2\t1\t1\t1\t1\t1\t1\t1\t1", ":2: avg 2: the 8 tasks' mean is 1.000"),
    ],
)  # fmt: skip
def test_build_leaderboard_refuses_a_bad_line_in_one_line(tmp_path, line, message):
    with pytest.raises(ValueError) as e:
        build_leaderboard(_tsv(tmp_path, line))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith((tmp_path / "leaderboard.tsv").as_posix())


def test_build_leaderboard_refuses_a_bad_header_or_a_row_twice(tmp_path):
    path = tmp_path / "leaderboard.tsv"
    path.write_text("llm\tretriever\tavg\tBiology\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"leaderboard.tsv:1: header .*: expected the columns"):
        build_leaderboard(path)
    twice = TSV_ROWS[3].replace("MedCPT", "medcpt")  # the same row, named in another case
    with pytest.raises(ValueError, match=r"leaderboard.tsv:3: row base/medcpt again \(line 2\)"):
        build_leaderboard(_tsv(tmp_path, TSV_ROWS[3], twice))


def test_shipped_leaderboard_round_trips_through_its_tsv(tmp_path):
    shipped = json.loads(LEADERBOARD_FILE.read_text(encoding="utf-8"))
    path = tmp_path / "leaderboard.tsv"
    path.write_text(leaderboard_tsv(shipped), encoding="utf-8")
    rebuilt = build_leaderboard(path)
    assert rebuilt == shipped
    assert leaderboard_text(rebuilt) == LEADERBOARD_FILE.read_text(encoding="utf-8")


def test_shipped_leaderboard_is_the_shared_tsv_built(tmp_path):
    """The shipped JSON is `build-leaderboard` of the page's table as copied in shared/."""
    if not SHARED_TSV.is_file():
        reason = f"the leaderboard's TSV not found at {SHARED_TSV} (the shared data folder)"
        if os.environ.get("R2MED_SHARED_DATA") == "absent":
            pytest.skip(f"{SHARED_ABSENT}: {reason}")
        pytest.skip(reason)
    out = tmp_path / "built.json"
    assert references_main(["build-leaderboard", str(SHARED_TSV), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == LEADERBOARD_FILE.read_text(encoding="utf-8")


# rows the page has and the repository's results/ lacks, with the page's Avg
LEADERBOARD_ONLY = {
    "hyde/o3-mini/nv": 41.35, "hyde/o3-mini/bm25": 41.01, "hyde/o3-mini/bge": 31.29,
    "search-o1/qwq-32b/bm25": 35.57, "search-o1/qwen3-32b/bm25": 33.84,
    "search-r1/qwen-7b-ins/bm25": 24.56, "search-r1/qwen-3b-ins/bm25": 20.03,
    "hyde/o3-mini/openai": 39.09, "hyde/huatuo-o1-70b/openai": 38.24,
    "search-o1/qwen3-32b/openai": 37.87, "hyde/gpt4/openai": 37.79,
    "hyde/r1-llama-70b/openai": 37.36, "search-o1/qwq-32b/openai": 37.30,
    "hyde/qwq-32b/openai": 36.51, "hyde/llama-70b/openai": 35.76, "hyde/r1-qwen-32b/openai": 34.68,
    "hyde/qwen-32b/openai": 34.25, "search-r1/qwen-7b-ins/openai": 32.89,
    "hyde/qwen-7b/openai": 31.53, "search-r1/qwen-3b-ins/openai": 30.19,
}  # fmt: skip


def test_the_leaderboard_holds_the_page_s_67_rows():
    board, repo = load_references("r2med-leaderboard"), load_references()
    assert len(board) == 67 and all(len(r.tasks) == 8 for r in board.values())
    assert {row: round(board[row].average() * 100, 2) for row in board if row not in repo} == (
        LEADERBOARD_ONLY
    )
    kinds = {}
    for row in board:
        kinds[row.split("/")[0]] = kinds.get(row.split("/")[0], 0) + 1
    assert kinds == {"hyde": 36, "search-o1": 8, "search-r1": 8, "base": 15}
    assert len([r for r in board if r.endswith("/openai")]) == 14  # every text-embedding-3-large
    # the page's order, best first
    assert list(board)[:2] == ["hyde/o3-mini/nv", "hyde/o3-mini/bm25"]
    assert board["base/medcpt"].figure("Bioinformatics") == 0.1757


def test_the_leaderboard_s_names_are_r2med_s_short_names():
    """Every name the page's cells map to is one agents.execution.published_row knows (and so a run
    can match)."""
    assert set(LEADERBOARD_RETRIEVERS.values()) <= set(RETRIEVERS) | {"bm25"}
    assert set(LEADERBOARD_LLMS.values()) <= set(LLMS)
    for row in load_references("r2med-leaderboard"):
        method, *names = row.split("/")
        assert names[-1] in RETRIEVERS or names[-1] == "bm25", row
        assert method == "base" or names[0] in LLMS, row


# ---- (e) where the two sources agree and where they conflict -----------------------------------


def _thousandths_apart(repository_value: float, page_value: float) -> int:
    """|repository ×100 − page| in thousandths of the page's unit, from their decimal text."""
    repo = round(repository_value * 100_000)  # R2MED's files: 5 decimals of the fraction
    page = round(page_value * 10_000) * 10  # the page: 2 decimals ×100
    return abs(repo - page)


def test_every_row_both_sources_hold_agrees_to_the_page_s_rounding_but_the_conflicts():
    """Per task, the page's nDCG@10 ×100 is the repository's rounded to 2 decimals (at most
    5 thousandths apart: the page rounds halves both ways), on every row both hold except the
    conflicts the code finds; those differ beyond rounding on each task it lists."""
    board, repo = load_references("r2med-leaderboard"), load_references()
    found = conflicts()
    both = [row for row in board if row in repo]
    assert len(both) == 47 and set(found) <= set(both)
    # the page's rows with an LLM alone are HyDE's: its 24 that results/gar/hyde also holds agree
    assert len([row for row in both if row.startswith("hyde/")]) == 24
    assert not [row for row in found if row.startswith("hyde/")]
    for row in both:
        apart = {t: _thousandths_apart(repo[row].figure(t), board[row].figure(t))
                 for t in R2MED_TASKS}  # fmt: skip
        differ = tuple(t for t in R2MED_TASKS if apart[t] > 5)
        if row in found:
            assert differ and found[row].tasks == differ, row
        else:
            assert differ == (), (row, {t: apart[t] for t in differ})
    assert any(
        5 == a
        for row in both
        for a in [
            _thousandths_apart(repo[row].figure(t), board[row].figure(t)) for t in R2MED_TASKS
        ]
    )  # fmt: skip  (ties exist, and count as agreeing)
    medcpt = found["base/medcpt"]  # the one the page's README names
    assert len(medcpt.tasks) == 7 and "Biology" not in medcpt.tasks
    assert f"{medcpt.repository.average() * 100:.2f}" == "7.87"
    assert f"{medcpt.leaderboard.average() * 100:.2f}" == "9.02"
    text = medcpt.text()
    assert "\n" not in text and "Bioinformatics 18.376 vs 17.57" in text
    assert "Avg 7.87 in the R2MED repository (r2med:base/medcpt) vs 9.02 on the R2MED " in text


def test_agrees_is_rounding_either_way_at_a_half():
    assert agrees(0.52815, 0.5281) and agrees(0.52815, 0.5282)  # a half: the page went down/up
    assert agrees(0.19188, 0.1919) and not agrees(0.19188, 0.1918)
    assert not agrees(0.18376, 0.1757) and not agrees(0.02156, 0.0215)


def test_find_conflicts_finds_a_changed_figure():
    """Not a list kept by hand: a figure changed on either side is a conflict at once."""
    board, repo = load_references("r2med-leaderboard"), load_references()
    assert set(find_conflicts(repo, board)) == set(conflicts())
    nv = repo["base/nv"]
    tasks = {t: dict(m) for t, m in nv.tasks.items()}
    tasks["MedQA-Diag"]["NDCG@10"] += 0.0001  # 16.72 on the page; now 16.73
    changed = {**repo, "base/nv": replace(nv, tasks=tasks)}
    found = find_conflicts(changed, board)
    assert found["base/nv"].tasks == ("MedQA-Diag",) and "base/medcpt" in found


def test_reference_specs_and_one_line_refusals():
    assert reference("r2med:hyde/qwen-7b/bm25").row == "hyde/qwen-7b/bm25"
    assert reference("r2med:gar/hyde/qwen-7b/bm25").row == "hyde/qwen-7b/bm25"  # R2MED's path
    assert reference("r2med:results/base retriever/bm25").row == "base/bm25"
    assert reference("r2med:base/bm25").label == "R2MED repository: base/bm25"
    o3 = reference("r2med-leaderboard:hyde/o3-mini/bm25")
    assert o3.label == "R2MED leaderboard: hyde/o3-mini/bm25" and o3.average() == 0.4101
    assert reference("R2MED-Leaderboard:base/bm25").spec == "r2med-leaderboard:base/bm25"
    with pytest.raises(UnknownReference) as e:
        reference("r2med:hyde/o3-mini/bm25")  # the leaderboard has o3-mini; results/ does not
    message = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in message
    assert "'r2med:hyde/o3-mini/bm25': no such row in r2med" in message
    assert "the R2MED leaderboard has it: r2med-leaderboard:hyde/o3-mini/bm25" in message
    with pytest.raises(UnknownReference, match="the R2MED repository has it: r2med:lamer/gpt4/nv"):
        reference("r2med-leaderboard:lamer/gpt4/nv")
    with pytest.raises(UnknownReference, match="close matches: hyde/"):
        reference("r2med:hyde/o4-mini/bm25")
    with pytest.raises(UnknownReference, match="expected <table>:<row>"):
        reference("hyde/qwen-7b/bm25")
    with pytest.raises(
        UnknownReference,
        match="unknown reference table 'paper'; known: r2med, r2med-authors, r2med-leaderboard, "
        "reasonembed-table3",
    ):
        reference("paper:base/bm25")
    with pytest.raises(UnknownReference, match="unknown reference table"):
        reference("../r2med:base/bm25")


# ---- the command line ------------------------------------------------------------------------


def test_list_shows_both_sources_side_by_side_and_the_conflict(capsys):
    assert references_main(["list", "--method", "hyde"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| hyde/")]
    assert len(rows) == 27 + 12  # the repository's 27 and 12 only on the leaderboard
    assert "| hyde/qwen-7b/bm25 | 26.38 | 26.38 |  |" in rows
    assert "| hyde/o3-mini/bm25 | - | 41.01 |  |" in rows
    assert "| hyde/qwen-72b/nv | 37.00 | - |  |" in rows
    assert "| hyde/huatuo-o1-70b/bm25 | 33.42 | 33.43 |  |" in rows  # the page's own Avg
    assert lines[0] == "| row | R2MED repository | R2MED leaderboard | note |"
    assert references_main(["list"]) == 0  # every row: the authors' and Table 3's columns too
    out = capsys.readouterr().out
    assert out.startswith("| row | R2MED repository | R2MED leaderboard | method's authors | "
                          "ReasonEmbed Table 3 | note")  # fmt: skip
    assert "| base/bm25 | 15.13 | 15.13 | - | 15.13 | ReasonEmbed Table 3 repeats R2MED's: " \
        "same |" in out  # fmt: skip
    assert "| search-o1/qwq-32b/bm25 | - | 35.57 | - | - |  |" in out
    assert "| base/medcpt | 7.87 | 9.02 | - | - | CONFLICT: 7 of 8 tasks differ |" in out
    # R2MED's 92 rows and the 15 of Table 3's 19 that R2MED has not
    assert "107 rows shown" in out and f"71 rows from the R2MED repository (https://github.com/" \
        f"R2MED/R2MED at {COMMIT}, results/; specs r2med:<row>)" in out  # fmt: skip
    assert "67 rows from the R2MED leaderboard (https://r2med.github.io" in out
    assert "CONFLICT: base/medcpt: R2MED's two sources conflict" in out
    # one source alone still says its row conflicts with the other
    assert references_main(["list", "--table", "r2med", "--method", "base"]) == 0
    out = capsys.readouterr().out
    assert "| base/medcpt | 7.87 | CONFLICT: 7 of 8 tasks differ |" in out
    assert "vs 9.02 on the R2MED leaderboard" in out
    assert references_main(["list", "--metric", "MAP@10", "--method", "search-r1"]) == 0
    assert "| search-r1/qwen-7b-ins/bm25 | - | - |  |" in capsys.readouterr().out


def test_show_gives_each_source_s_figures_and_the_conflict(capsys):
    assert references_main(["show", "hyde/qwen-7b/bm25"]) == 0
    out = capsys.readouterr().out
    assert "| Biology | 0.48493 | 0.38864 | 0.54784 | 0.19709 | 0.57040 |" in out
    assert "| Avg ×100 | 26.38 |" in out and f"at {COMMIT}" in out
    assert "R2MED leaderboard: hyde/qwen-7b/bm25\n" in out and "| Biology | 0.4849 |" in out
    assert "CONFLICT" not in out
    assert references_main(["show", "r2med:base/bge"]) == 0
    out = capsys.readouterr().out
    assert "| Biology | 0.12706 | 0.07706 | 0.16545 | 0.06311 |\n" in out  # MRR: not in its files
    assert "R2MED leaderboard" not in out
    assert references_main(["show", "r2med-leaderboard:hyde/o3-mini/bm25"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("R2MED leaderboard: hyde/o3-mini/bm25\nfrom R2MED leaderboard, "
                          "r2med.github.io (its row o3-mini / BM25)\n")  # fmt: skip
    assert "| task | NDCG@10 |" in out and "| Biology | 0.5965 |" in out
    assert "| Avg ×100 | 41.01 |" in out
    assert references_main(["show", "r2med:base/medcpt"]) == 0  # one source: the conflict too
    out = capsys.readouterr().out
    assert "CONFLICT: R2MED's two sources differ on base/medcpt" in out
    assert "| Bioinformatics | 18.376 | 17.57 | differs |" in out
    assert "| Biology | 2.155 | 2.15 |  |" in out and "| Avg | 7.87 | 9.02 | |" in out


def test_the_build_commands_write_what_the_functions_build(tmp_path, capsys):
    results = tmp_path / "results"
    _write_task(results, "base retriever/bm25", "Biology", BASE_BM25_BIOLOGY)
    out_file = tmp_path / "table.json"
    assert references_main(["build", str(results), "--commit", COMMIT, "-o", str(out_file)]) == 0
    assert out_file.read_text() == table_text(build_table(results, COMMIT))
    tsv = _tsv(tmp_path, *TSV_ROWS)
    board = tmp_path / "board.json"
    assert references_main(["build-leaderboard", str(tsv), "-o", str(board)]) == 0
    assert board.read_text() == leaderboard_text(build_leaderboard(tsv))
    assert references_main(["build-leaderboard", str(tsv)]) == 0  # printed
    assert capsys.readouterr().out.endswith(leaderboard_text(build_leaderboard(tsv)))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["list", "--method", "hyd"], "--method 'hyd': known: base, hyde, query2doc"),
        (["list", "--metric", "nDCG"], "--metric: unknown metric 'nDCG'"),
        (["show", "hyde/qwen-7b/bm2"], "close matches: hyde/qwen-7b/bm25"),
        (["build", ".", "--commit", "main"], "--commit 'main': expected 7 to 40 hex digits"),
        (["build", "nowhere", "--commit", COMMIT], "RESULTS_DIR nowhere: not a folder"),
        (["build-leaderboard", "nowhere.tsv"], "TSV nowhere.tsv: not a file"),
        (["list", "--table", "paper"], "--table: unknown reference table 'paper'"),
        (
            ["show", "r2med:search-o1/qwq-32b/bm25"],
            "the R2MED leaderboard has it: r2med-leaderboard:search-o1/qwq-32b/bm25",
        ),
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


# ---- (f) which row a run's configuration reproduces --------------------------------------------

NV, BGE = "dense:nvidia/NV-Embed-v2", "dense:BAAI/bge-large-en-v1.5"
SEARCH_R1_7B = "PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo"

ROWS = [
    ({"agent": "none"}, "base/bm25"),  # bm25 is bm25q by default: R2MED's BM25
    ({"agent": "none", "bm25_method": "lucene"}, None),
    ({"agent": "none", "bm25_method": "okapi"}, None),
    ({"agent": "none", "retriever": BGE}, "base/bge"),
    ({"agent": "none", "retriever": "dense:baai/BGE-large-en-v1.5"}, "base/bge"),
    ({"agent": "none", "retriever": NV}, "base/nv"),
    # R2MED's MedCPT row encodes queries too with the Article encoder (eval_retrieval.py L159)
    ({"agent": "none", "retriever": "dense:ncbi/MedCPT-Article-Encoder"}, "base/medcpt"),
    ({"agent": "none", "retriever": "dense:ncbi/MedCPT-Query-Encoder"}, None),
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
    ({"agent": "hyde", "model": "openai/o3-mini"}, "hyde/o3-mini/bm25"),  # the leaderboard's
    ({"agent": "hyde", "model": "openai/Qwen/Qwen2.5-72B-Instruct",
      "retriever": "api:text-embedding-3-large"}, None),  # in neither source
    ({"agent": "hyde", "generations": "r2med:qwq-32b"}, "hyde/qwq-32b/bm25"),
    ({"agent": "lamer", "generations": "r2med:gpt4@/data/r2med", "retriever": BGE},
     "lamer/gpt4/bge"),
    ({"agent": "hyde", "generations": "r2med:o3-mini", "retriever": NV}, "hyde/o3-mini/nv"),
    ({"agent": "search-o1", "model": "openai/Qwen/QwQ-32B", "retriever": NV},
     "search-o1/qwq-32b/nv"),
    ({"agent": "search-o1", "model": "openai/Qwen/QwQ-32B"}, "search-o1/qwq-32b/bm25"),
    ({"agent": "search-o1", "model": "openai/Qwen/QwQ-32B",
      "retriever": "dense:facebook/contriever-msmarco"}, None),
    ({"agent": "search-r1", "model": f"openai/{SEARCH_R1_7B}",
      "retriever": "api:text-embedding-3-large"}, "search-r1/qwen-7b-ins/openai"),
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
    # NV-Embed-v2 runs its repository's code: a config naming it must allow that
    config = to_dict(from_settings({"trust_remote_code": True, **settings}))
    assert paper_row(config) == row


SPECS = [  # the repository's row where it has one, else the leaderboard's
    ({"agent": "hyde", "model": "openai/o3-mini"}, "r2med-leaderboard:hyde/o3-mini/bm25"),
    ({"agent": "hyde", "model": "openai/gpt-4o-2024-11-20"}, "r2med:hyde/gpt4/bm25"),
    ({"agent": "search-o1", "model": "openai/Qwen/QwQ-32B"},
     "r2med-leaderboard:search-o1/qwq-32b/bm25"),
    ({"agent": "none", "retriever": "dense:ncbi/MedCPT-Article-Encoder"}, "r2med:base/medcpt"),
    ({"agent": "none", "bm25_method": "lucene"}, None),
]  # fmt: skip


@pytest.mark.parametrize("settings, spec", SPECS)
def test_paper_spec_names_the_source(settings, spec):
    config = to_dict(from_settings(settings))
    assert paper_spec(config) == spec
    ref = paper_reference(config)
    assert (ref.spec if ref is not None else None) == spec


def test_paper_figures_of_a_leaderboard_only_row_are_the_page_s():
    config = to_dict(from_settings({"agent": "hyde", "model": "openai/o3-mini"}))
    assert paper_figures(config, ["Biology", "demo", "IIYi-Clinical"]) == {
        "Biology": 0.5965, "IIYi-Clinical": 0.0786  # the page: 59.65, 7.86
    }  # fmt: skip
    assert paper_reference(config).label == "R2MED leaderboard: hyde/o3-mini/bm25"


def test_paper_figures_keep_the_run_s_r2med_tasks():
    config = to_dict(from_settings({"agent": "none", "dataset": "demo"}))
    assert paper_row(config) == "base/bm25"  # the dataset plays no part in the row
    assert paper_figures(config, ["demo"]) == {}
    assert paper_figures(config, ["biology", "demo", "PMC-Clinical"]) == {
        "biology": 0.19188, "PMC-Clinical": 0.21662  # results/base retriever/bm25/<Task>.json
    }  # fmt: skip
    nv = to_dict(from_settings({"agent": "none", "retriever": NV, "trust_remote_code": True}))
    assert paper_figures(nv, ["Biology"]) == {"Biology": 0.27152}  # .../base retriever/nv/
    lucene = to_dict(from_settings({"agent": "none", "bm25_method": "lucene"}))
    assert paper_figures(lucene, ["Biology"]) is None


# ---- (g) eval.compare --reference on real runs -------------------------------------------------

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
        run_dataset(
            _config(root, dataset, root / "runs", method, bm25_method=method), progress=False
        )
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


@pytest.mark.slow
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
        line = (f"| R2MED repository: {row} | {_pct(figures['Biology'])} | "
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
    assert (
        report_md.count("| R2MED repository: hyde/qwen-7b/bm25 |") == 1
    )  # given twice, shown once
    assert "R2MED repository: base/bm25: toy: not R2MED's task(s)" in report_md
    assert ("R2MED repository: base/bm25: the runs lack 6 of its 8 tasks (Bioinformatics, "
            "Medical-Sciences, MedXpertQA-Exam, MedQA-Diag, PMC-Treatment, IIYi-Clinical)"
            ) in report_md  # fmt: skip
    assert "the paper's own Avg over its 8 tasks is 15.13" in report_md
    assert f"https://github.com/R2MED/R2MED at {COMMIT}, results/base retriever/bm25" in report_md

    csv_rows = (out / "leaderboard.csv").read_text().splitlines()
    assert csv_rows[-2] == (
        f"R2MED repository: base/bm25,https://github.com/R2MED/R2MED/tree/{COMMIT}/results/"
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
        assert r["cells"][0] == f"R2MED repository: {row} published"  # its tag says what it is
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


@pytest.mark.slow
def test_compare_without_references_writes_what_it_wrote(runs, tmp_path):
    c = compare_runs([runs["bm25q"], runs["lucene"]])
    assert c.published == []
    out = tmp_path / "plain"
    from eval.compare import write_comparison

    written = write_comparison(c, out, plots=False, html=True)
    assert "published.csv" not in [p.name for p in written]
    html = (out / "report.html").read_text()
    assert "data-reference" not in html and "Against the published figures" not in html
    assert "R2MED repository" not in (out / "report.md").read_text()
    assert "R2MED repository" not in (out / "leaderboard.csv").read_text()
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
    run_dataset(_config(runs["root"], biology, tmp_path, "limited", limit=5), progress=False)
    c = compare_runs([tmp_path / "limited"], references=["r2med:base/bm25"])
    (p,) = c.published
    assert p.figures == {"Biology": 0.19188}
    assert p.differences["none bm25q"] == {
        "Biology": c.means["none bm25q"]["Biology"] - 0.19188,
        "Avg": c.means["none bm25q"]["Biology"] - 0.19188,
    }
    assert any("run on the first 5 queries" in n for n in c.notes)


def test_compare_names_a_leaderboard_row_and_shows_a_conflict(runs, tmp_path, capsys):
    """A leaderboard row beside the runs is labelled as the leaderboard's, with the page as
    its source; a row whose two sources conflict brings both figures into the notes."""
    out = tmp_path / "cmp"
    argv = [str(runs["bm25q"]), "--out", str(out), "--no-plots",
            "--reference", "r2med-leaderboard:hyde/o3-mini/bm25",
            "--reference", "r2med:base/medcpt"]  # fmt: skip
    assert compare_main(argv) == 0
    capsys.readouterr()
    report_md = (out / "report.md").read_text(encoding="utf-8")
    o3 = {"Biology": 0.5965, "PMC-Clinical": 0.3532}  # the page: 59.65, 35.32
    avg = sum(o3.values()) / 2
    assert (f"| R2MED leaderboard: hyde/o3-mini/bm25 | 59.65 | 35.32 | - | {_pct(avg)}* |"
            in report_md)  # fmt: skip
    assert ("- R2MED leaderboard: hyde/o3-mini/bm25: R2MED leaderboard, r2med.github.io "
            "(its row o3-mini / BM25)") in report_md  # fmt: skip
    own = _ndcg(runs["bm25q"], "Biology")
    assert f"| none bm25q | hyde/o3-mini/bm25 | {_diff(own - 0.5965)} |" in report_md
    conflict = conflicts()["base/medcpt"].text()
    assert f"R2MED repository: base/medcpt: CONFLICT: {conflict}" in report_md
    assert "Avg 7.87 in the R2MED repository" in conflict and "vs 9.02 on the R2MED" in conflict
    assert report_md.count("CONFLICT") == 1  # the leaderboard's o3-mini row has none
    csv_rows = (out / "leaderboard.csv").read_text().splitlines()
    assert (f"R2MED leaderboard: hyde/o3-mini/bm25,https://r2med.github.io,0.59650,0.35320,,"
            f"{avg:.5f}") in csv_rows  # fmt: skip
    published = json.loads((out / "comparison.json").read_text())["published"]
    assert published[0]["label"] == "R2MED leaderboard: hyde/o3-mini/bm25"
    assert published[0]["source"] == "R2MED leaderboard, r2med.github.io (its row o3-mini / BM25)"
    assert published[1]["source"].endswith("results/base retriever/medcpt")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert f"CONFLICT: {conflict}".replace("'", "&#39;") in html
    page = _Rows()
    page.feed(html)
    labels = [r["cells"][0] for r in page.rows["published"]]
    assert labels == ["R2MED leaderboard: hyde/o3-mini/bm25 published",
                      "R2MED repository: base/medcpt published"]  # fmt: skip


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


# ---- (h) agents.run prints the paper's figure ----------------------------------------------------


def test_agents_run_prints_the_paper_s_figures_for_a_matching_run(runs, tmp_path, capsys):
    dataset = ",".join(str(runs["root"] / "data" / t) for t in ("Biology", "toy"))
    common = ["--agent", "none", "--dataset", dataset, "--runs-dir", str(tmp_path),
              "--cache-dir", str(runs["root"] / "cache"), "--quiet"]  # fmt: skip
    assert run_main([*common, "--run-name", "mine"]) == 0
    out = capsys.readouterr().out
    ndcg = _ndcg(tmp_path / "mine", "Biology")
    assert f"Biology: NDCG@10 = {ndcg:.5f} (R2MED repository, base/bm25: 0.19188)\n" in out
    assert f"toy: NDCG@10 = {_ndcg(tmp_path / 'mine', 'toy'):.5f}\n" in out  # not R2MED's
    lines = out.splitlines()
    paper = "R2MED repository (base/bm25): avg nDCG@10 19.19 over the same tasks"
    assert paper in lines and lines[lines.index(paper) + 1].startswith("wall time")

    assert run_main([*common, "--run-name", "lucene", "--bm25-method", "lucene"]) == 0
    out = capsys.readouterr().out
    assert "R2MED repository" not in out and "Biology: NDCG@10 = " in out


def test_agents_run_prints_a_leaderboard_only_row_as_the_leaderboard_s(runs, tmp_path, capsys):
    """HyDE with o3-mini over R2MED's BM25 is a row only the leaderboard has: agents.run prints
    the page's figures, labelled as the leaderboard's (o3-mini's texts replayed from files)."""
    gens = tmp_path / "gens"
    queries = [json.loads(line) for line in (DEMO_DIR / "query.jsonl").read_text().splitlines()]
    rows = [{"id": q["id"], "text": q["text"], "hy_doc": q["text"]} for q in queries]
    for task in ("Biology", "PMC-Clinical"):
        path = gens / task / "hyde" / "o3-mini" / "query_with_hydoc.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dataset = ",".join(str(runs["root"] / "data" / t) for t in ("Biology", "PMC-Clinical"))
    argv = ["--agent", "hyde", "--dataset", dataset, "--generations", f"r2med:o3-mini@{gens}",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(runs["root"] / "cache"),
            "--run-name", "o3", "--quiet"]  # fmt: skip
    assert run_main(argv) == 0
    out = capsys.readouterr().out
    ndcg = _ndcg(tmp_path / "runs" / "o3", "Biology")
    line = f"Biology: NDCG@10 = {ndcg:.5f} (BM25 without LLM: {ndcg:.5f}) "  # the texts: queries
    assert f"{line}(R2MED leaderboard, hyde/o3-mini/bm25: 0.5965)\n" in out
    average = (0.5965 + 0.3532) / 2 * 100
    assert f"R2MED leaderboard (hyde/o3-mini/bm25): avg nDCG@10 {average:.2f} over the same " \
        "tasks\n" in out  # fmt: skip
    assert "R2MED repository" not in out and "CONFLICT" not in out.upper()


def test_printed_figures_of_a_conflicting_row_give_both_sources(runs, tmp_path):
    """A run of R2MED's MedCPT setup: each task where the sources conflict shows both figures,
    and the average line both averages; where they agree, the repository's figure alone."""
    from agents.execution.report import paper_average, paper_for
    from agents.execution.whole_run import RunResult, TaskResult

    config = from_settings({"agent": "none", "retriever": "dense:ncbi/MedCPT-Article-Encoder"})
    medcpt = paper_for(config)
    assert medcpt.label == "R2MED repository: base/medcpt"
    summary = TaskFolder(runs["bm25q"] / "Biology").summary()
    tasks = {t: TaskResult(name=t, folder=t, summary=summary) for t in ("Biology", "PMC-Clinical")}
    first = report(tasks["Biology"]).split("\n", 1)[0]
    assert report(tasks["Biology"], medcpt).split("\n", 1)[0] == (
        f"{first} (R2MED repository, base/medcpt: 0.02155)"  # 2.155 and 2.15 agree
    )
    first = report(tasks["PMC-Clinical"]).split("\n", 1)[0]
    assert report(tasks["PMC-Clinical"], medcpt).split("\n", 1)[0] == (
        f"{first} (R2MED repository, base/medcpt: 0.13062; R2MED leaderboard: 0.1462, a conflict)"
    )
    result = RunResult(tmp_path, config, tasks, 1.0)
    repo, board = (0.02155 + 0.13062) / 2 * 100, (0.0215 + 0.1462) / 2 * 100
    assert paper_average(result, medcpt) == (
        f"R2MED repository (base/medcpt): avg nDCG@10 {repo:.2f} over the same tasks; "
        f"R2MED leaderboard: {board:.2f}, a conflict (base/medcpt: python -m eval.references "
        "show base/medcpt)"
    )


def test_report_lines_without_a_row_are_unchanged(runs):
    from agents.execution.whole_run import TaskResult

    summary = json.loads((runs["bm25q"] / "Biology" / "metrics.json").read_text())
    result = TaskResult(name="Biology", folder="Biology", summary=TaskSummary.from_dict(summary))
    plain = report(result)
    ref = load_references()["hyde/qwen-7b/bm25"]
    first, rest = plain.split("\n", 1)
    assert report(result, ref) == f"{first} (R2MED repository, hyde/qwen-7b/bm25: 0.48493)\n{rest}"
    other = TaskResult(name="toy", folder="toy", summary=TaskSummary.from_dict(summary))
    assert report(other, ref) == report(other)


def test_agents_sweep_prints_the_paper_s_figures_for_a_matching_cell(runs, tmp_path, capsys):
    """A sweep's cells print through agents.run's printer: a cell of R2MED's BM25 over its
    Biology task is the paper's base/bm25 row."""
    from agents.commands.sweep import main as sweep_main

    config = tmp_path / "sweep.toml"
    config.write_text(
        f'output = "out"\ncache_dir = "{runs["root"] / "cache"}"\nagents = ["none"]\n'
        f'datasets = ["{runs["root"] / "data" / "Biology"}"]\n[options]\nquiet = true\n'
    )
    assert sweep_main([str(config)]) == 0
    out = capsys.readouterr().out
    ndcg = _ndcg(tmp_path / "out" / "runs" / "none-bm25q-Biology", "Biology")
    assert f"Biology: NDCG@10 = {ndcg:.5f} (R2MED repository, base/bm25: 0.19188)\n" in out
    assert "R2MED repository (base/bm25): avg nDCG@10 19.19 over the same tasks\n" in out


def test_agents_rerank_prints_the_paper_s_figure_for_a_reranker_row(
    runs, tmp_path, capsys, monkeypatch
):
    """A cross-encoder at depth 10 over NV-Embed-v2's lists is R2MED's reranker row, and the
    rerank prints its figures (the run itself stubbed: no model is downloaded here)."""
    import agents.execution.whole_run
    from agents.commands.rerank import main as rerank_main
    from agents.execution.whole_run import RunResult, TaskResult

    source = tmp_path / "nv"
    source.mkdir()
    biology = str(runs["root"] / "data" / "Biology")
    nv = from_settings(
        {"agent": "none", "retriever": NV, "dataset": biology, "trust_remote_code": True}
    )
    (source / "config.json").write_text(json.dumps(to_dict(nv)))
    summary = json.loads((runs["bm25q"] / "Biology" / "metrics.json").read_text())

    def stub(config, *, on_task, **kwargs):
        task = TaskResult(name="Biology", folder="Biology", summary=TaskSummary.from_dict(summary))
        on_task(task)
        return RunResult(tmp_path / "reranked", config, {"Biology": task}, 0.5)

    monkeypatch.setattr(agents.execution.whole_run, "run_dataset", stub)
    argv = [str(source), "--rerank", "cross:BAAI/bge-reranker-v2-m3,depth=10", "--quiet"]
    assert rerank_main(argv) == 0
    out = capsys.readouterr().out
    row = "reranker/bge-reranker/nv/top_10"
    figure = load_references()[row].figure("Biology")
    assert f"Biology: NDCG@10 = {summary['metrics']['NDCG@10']:.5f} " in out
    assert f" (R2MED repository, {row}: {figure:.5f})\n" in out
    assert f"R2MED repository ({row}): avg nDCG@10 {figure * 100:.2f} over the same tasks\n" in out


# ---- (h) figures a method's own authors published ------------------------------------------------

REASONRANK_ROW = "reranker/reasonrank-32b/e5/top_100"
REASONRANK_COMMIT = "06721fd6ef3766c0e00d59a87d2696a0b4b0c17a"
# README.md line 30 at REASONRANK_COMMIT, word for word
REASONRANK_LINE = (
    "- **[Aug 16, 2025]**:🏆 Our ReasonRank (32B) has achieved **SOTA performance 42.85** on "
    "**[R2MED leaderboard](https://r2med.github.io/)**!"
)


def test_reasonrank_32b_is_its_readme_s_average_alone():
    ref = reference(f"{AUTHORS_TABLE}:{REASONRANK_ROW}")
    assert ref.published_average == 0.4285 and ref.average() == 0.4285
    assert ref.average("NDCG@10", reversed(R2MED_TASKS)) == 0.4285  # all 8, in any order
    assert ref.average_only and ref.tasks == {}
    assert [ref.figure(t) for t in R2MED_TASKS] == [None] * 8  # nothing split out of the Avg
    for metric, tasks in (("NDCG@10", ["Biology"]), ("MAP@10", None)):
        with pytest.raises(ValueError, match="published only the NDCG@10 average over R2MED's"):
            ref.average(metric, tasks)
    assert ref.label == f"ReasonRank repository: {REASONRANK_ROW}"
    assert (ref.repository, ref.commit, ref.path, ref.line, ref.quote) == (
        "https://github.com/8421BCD/ReasonRank", REASONRANK_COMMIT, "README.md", 30,
        REASONRANK_LINE,
    )  # fmt: skip
    assert ref.location == (
        f"https://github.com/8421BCD/ReasonRank/blob/{REASONRANK_COMMIT}/README.md#L30"
    )
    assert ref.source == (
        f"https://github.com/8421BCD/ReasonRank at {REASONRANK_COMMIT}, README.md line 30"
    )
    for words in ("reasonrank-32B", "top 100", "windows of 20 by 10", "one pass", "3072"):
        assert words in ref.setup
    assert "runs/r2med_<Task>/e5-mistral-7b-instruct_top100.txt" in ref.note
    assert "not stated beside the figure" in ref.note  # the first stage is inferred: said so
    assert references_of(REASONRANK_ROW) == [ref] and conflict_of(ref) is None
    with pytest.raises(UnknownReference, match=f"the ReasonRank repository has it: "
                       f"{AUTHORS_TABLE}:{REASONRANK_ROW}"):  # fmt: skip
        reference(f"r2med:{REASONRANK_ROW}")


def test_no_rank1_row_is_invented():
    """Neither Rank1's repository nor R2MED's (nor its leaderboard) publishes a Rank1 figure
    on R2MED in a text we could read: no table holds one."""
    assert [r for t in table_names() for r in load_references(t) if "rank1" in r] == []


def test_an_average_only_row_shows_no_per_task_figure(capsys):
    assert references_main(["show", REASONRANK_ROW]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ReasonRank repository: {REASONRANK_ROW}\nfrom https://github.com/"
                          f"8421BCD/ReasonRank at {REASONRANK_COMMIT}, README.md line 30\n"
                          f"which reads: {REASONRANK_LINE}\n")  # fmt: skip
    table = out[out.index("| task |") :].splitlines()
    assert table[0] == "| task | NDCG@10 |"
    assert table[2:10] == [f"| {t} | not published |" for t in R2MED_TASKS]
    assert table[10:] == ["| Avg ×100 | 42.85 (avg only) |"]
    assert references_main(["show", f"{AUTHORS_TABLE}:{REASONRANK_ROW}", "--metrics",
                            "MAP@10,Recall@10"]) == 0  # fmt: skip
    assert capsys.readouterr().out.endswith(
        "it publishes none of MAP@10, Recall@10, only its NDCG@10 average over R2MED's 8 tasks\n"
    )
    assert references_main(["list", "--method", "reranker"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| row | R2MED repository | R2MED leaderboard | method's authors | note")
    assert f"| {REASONRANK_ROW} | - | - | 42.85 (avg only) |  |" in out
    assert "| reranker/bge-reranker/nv/top_10 | 25.55 | - | - |  |" in out
    assert "(avg only): its source published the 8-task NDCG@10 average alone" in out
    assert "1 row(s) its methods' authors published (ReasonRank repository; " in out
    assert references_main(["list", "--method", "reranker", "--metric", "MAP@10"]) == 0
    assert f"| {REASONRANK_ROW} | - | - | - |  |" in capsys.readouterr().out
    assert references_main(["list", "--method", "hyde"]) == 0  # no authors' row: no column
    assert capsys.readouterr().out.startswith("| row | R2MED repository | R2MED leaderboard | note")


MISSING = object()  # a field left out of a row


def _authors_table(**row) -> dict:
    entry = {"name": "X repository", "repository": "https://github.com/x/x", "commit": "a" * 40,
             "path": "README.md", "line": 3, "quote": "we reach 40.00 on R2MED", "avg": 40.0,
             "tasks": {}, **row}  # fmt: skip
    entry = {k: v for k, v in entry.items() if v is not MISSING}
    source = {"kind": "authors", "name": "authors", "metric": "NDCG@10", "scale": 100}
    rows = {"reranker/x/bm25/top_100": entry}
    return {"source": source, "tasks": list(R2MED_TASKS), "rows": rows}


EIGHT = dict(zip(R2MED_TASKS, (30.0, 50.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0), strict=True))


@pytest.mark.parametrize(
    "row, message",
    [
        ({"quote": "we reach the top"}, "avg 40.0 is not in its quoted line"),
        ({"commit": "06721fd"}, "commit '06721fd': expected 40 hex digits"),
        ({"avg": 40.001}, "avg '40.001': not a figure ×100 to 2 decimals"),
        ({"tasks": {"Biologie": 40.0}}, "not R2MED's task(s): Biologie"),
        ({"tasks": {**EIGHT, "Biology": 38.0}}, "avg 40.0: the 8 tasks' mean is 41.000"),
        ({"quote": MISSING, "line": MISSING}, "reranker/x/bm25/top_100: no line, quote"),
    ],
)
def test_an_authors_row_must_be_sourced_and_consistent(row, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        references_from(_authors_table(**row))


def test_an_authors_row_with_every_task_reads_them():
    (ref,) = references_from(_authors_table(tasks=EIGHT)).values()
    assert not ref.average_only and ref.figure("Biology") == 0.3 and ref.average() == 0.4
    assert ref.spec == f"{AUTHORS_TABLE}:reranker/x/bm25/top_100"


def test_compare_beside_an_average_only_row_invents_no_figure(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = [str(runs["bm25q"]), "--out", str(out), "--no-plots",
            "--reference", f"{AUTHORS_TABLE}:{REASONRANK_ROW}"]  # fmt: skip
    assert compare_main(argv) == 0
    report_md = capsys.readouterr().out
    label = f"ReasonRank repository: {REASONRANK_ROW}"
    assert f"| none bm25q | {REASONRANK_ROW} | - | - | - | - |" in report_md
    assert f"- {label}: no published NDCG@10 for any compared task" in report_md
    assert (out / "published.csv").read_text().splitlines() == [
        "run,reference,task,run_mean,paper,difference"
    ]
    address = f"https://github.com/8421BCD/ReasonRank/blob/{REASONRANK_COMMIT}/README.md#L30"
    assert (out / "leaderboard.csv").read_text().splitlines()[-1] == f"{label},{address},,,,"


# ---- the authors' rows beside a run: ReasonRank-32B over its published first stage ----------


def reasonrank_config(**changes):
    """A rerank of ReasonRank's published e5-mistral file by ReasonRank-32B, as recorded."""
    from agents.rerank.reasonrank import DEFAULTS as REASONRANK_DEFAULTS

    options = {**REASONRANK_DEFAULTS, "model": "hosted_vllm/liuwenhan/reasonrank-32B"}
    options.update(changes.pop("options", {}))
    config = {
        "agent": "none",
        "run_file": "/data/ReasonRank/runs/r2med_Biology/e5-mistral-7b-instruct_top100.txt",
        "run_file_order": "file",
        "rerank": [{"kind": "reasonrank", "options": options}],
        "llm": {"model": options["model"], "max_tokens": None, "temperature": None},
    }
    config.update(changes)
    return config


def test_a_rerank_of_reasonranks_file_is_shown_beside_its_published_average():
    from agents.execution.published_row import average_note

    ref = paper_reference(reasonrank_config())
    assert ref is not None and ref.spec == "r2med-authors:reranker/reasonrank-32b/e5/top_100"
    assert paper_figures(reasonrank_config(), ["Biology"]) == {}  # no per-task figure exists
    every = average_note(ref, R2MED_TASKS)
    assert every == (
        "ReasonRank repository (reranker/reasonrank-32b/e5/top_100): avg nDCG@10 42.85 over "
        "R2MED's 8 tasks, published alone (no per-task figures)"
    )
    one = average_note(ref, ["Biology", "toy"])
    assert one.endswith("published over R2MED's 8 tasks alone: not comparable with 1")
    assert average_note(ref, ["toy"]) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"options": {"model": "hosted_vllm/liuwenhan/reasonrank-7B"}},  # another checkpoint
        {"options": {"depth": 20}},
        {"options": {"window": 10}},
        {"options": {"passage_tokens": 256}},
        {"run_file": "/data/runs/r2med_Biology/bm25_top100.txt"},  # another first stage
        {"run_file_order": "score"},  # trec_eval's order, not ReasonRank's loader's
        {"llm": {"model": "x", "max_tokens": 1024, "temperature": None}},  # another budget
        {"rerank": [{"kind": "llm-listwise", "options": {"model": "x/reasonrank-32B"}}]},
    ],
)
def test_another_setup_is_not_shown_beside_reasonranks_figure(changes):
    assert paper_reference(reasonrank_config(**changes)) is None
