"""ReasonEmbed's Table 3 (Chen et al., 2025, arXiv 2510.08252) as a reference source beside runs.

The shipped eval/references/reasonembed-table3.json is `build-reasonembed` of the TSV transcribed
from the table's image (shared/data/reasonembed-r2med/table3.tsv, kept beside the repo, never in
it): every row, every figure and every printed cell are the TSV's. The table's own
inconsistencies are found from its rows and shown with both figures (RaDeR-gte-Qwen2-7B's Avg
35.19 against its tasks' mean 35.215; Qwen3-4B-ms printed with Size 8B). Its four rows that are
R2MED's own figures (BM25, OpenAI-3-Large, GritLM-7B, NV-Embed-v2) sit under R2MED's row ids and
are compared with R2MED's rows figure by figure: the same, and a changed figure is reported. A
dense run of one of its models, under the hub name the authors' script loads, is set beside its
row (agents.execution.published_row), and agents.run prints the row's figures beside its own; the
commands in docs/results.md's section on the table make exactly those runs.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from agents.config.serialise import to_dict
from agents.config.settings import from_settings
from agents.execution.published_row import (
    REASONEMBED_RETRIEVERS,
    RETRIEVERS,
    average_note,
    figure_note,
    paper_reference,
    paper_references,
    paper_spec,
)
from eval.compare.__main__ import main as compare_main
from eval.datasets import R2MED_TASKS
from eval.references.__main__ import main as references_main
from eval.references.conflicts import agrees, inconsistencies, repeats_of
from eval.references.leaderboard import leaderboard_text
from eval.references.model import REASONEMBED_TABLE, TABLES
from eval.references.reading import DATA_DIR, load_references, reference, references_of
from eval.references.reasonembed import build_reasonembed, paper_tsv
from eval.task_summary import TaskSummary
from retrievers.families import family_for
from tests.agents.commands.test_run_printout import run_and_parse
from tests.helpers import REPO, SHARED_ABSENT

SHIPPED = DATA_DIR / "reasonembed-table3.json"
# the table as transcribed beside the repo (never into it); the shipped JSON is built from it
SHARED_TSV = REPO.parent / "shared" / "data" / "reasonembed-r2med" / "table3.tsv"
COMMIT = "b2f2e40050f47453848fa84beefee793dbdb88a5"  # VectorSpaceLab/agentic-search
IMAGE = "ReasonEmbed/imgs/r2med-performance.png"
IMAGE_URL = f"https://github.com/VectorSpaceLab/agentic-search/blob/{COMMIT}/{IMAGE}"
TITLE = "ReasonEmbed: Enhanced Text Embeddings for Reasoning-Intensive Document Retrieval"
RADER, QWEN3_4B_MS = "base/rader-gte-qwen2-7b", "base/qwen3-4b-ms"
REASON_8B = "base/reason-embed-qwen3-8b"
REPEATED = ("base/bm25", "base/openai", "base/grit", "base/nv")  # R2MED's figures, by the caption
TSV_HEADER = "Model\tGroup\tSize\tMark\tAvg\t" + "\t".join(R2MED_TASKS)


def shared_tsv() -> Path:
    """The shared TSV; skips (fails under CI=true) when the shared data folder lacks it."""
    if not SHARED_TSV.is_file():
        reason = f"ReasonEmbed's Table 3 TSV not found at {SHARED_TSV} (the shared data folder)"
        if os.environ.get("R2MED_SHARED_DATA") == "absent":
            pytest.skip(f"{SHARED_ABSENT}: {reason}")
        pytest.skip(reason)
    return SHARED_TSV


def table():
    return load_references(REASONEMBED_TABLE)


def pct(fraction: float) -> Decimal:
    """A shipped fraction as the figure ×100 it was read from, exactly (0.501 -> 50.1)."""
    return Decimal(repr(fraction)) * 100


# ---- the source: every row and figure of the TSV, labelled with the paper -------------------


def test_shipped_table_is_the_shared_tsv_built(tmp_path):
    out = tmp_path / "built.json"
    assert references_main(["build-reasonembed", str(shared_tsv()), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == SHIPPED.read_text(encoding="utf-8")


def test_every_row_and_figure_is_the_tsv_s():
    """19 rows × (8 tasks and the printed Avg), and each row's Model, Group, Size and Mark,
    equal to the TSV's cells; nothing else in the table."""
    with shared_tsv().open(encoding="utf-8", newline="") as f:
        lines = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = {ref.printed["Model"]: ref for ref in table().values()}
    assert len(lines) == 19 and sorted(rows) == sorted(line["Model"] for line in lines)
    checked = 0
    for line in lines:
        ref = rows[line["Model"]]
        assert dict(ref.printed) == {k: line[k] for k in ("Model", "Group", "Size", "Mark")}
        assert pct(ref.published_average) == Decimal(line["Avg"]), line["Model"]
        for task in R2MED_TASKS:
            assert pct(ref.figure(task)) == Decimal(line[task]), (line["Model"], task)
            checked += 1
        checked += 1
    assert checked == 19 * 9


# figures read off the image itself, so the table is checked without the shared TSV too
FROM_THE_IMAGE = {
    REASON_8B: ("43.18", "54.01 66.33 67.64 20.93 27.96 51.38 33.76 23.43"),
    RADER: ("35.19", "36.02 53.58 50.32 15.41 20.31 49.94 34.31 21.83"),
    "base/bm25": ("15.13", "19.19 21.55 19.68 0.66 2.55 23.69 21.66 12.02"),
    "base/reasonir-8b": ("27.94", "26.16 44.84 39.28 11.21 14.92 36.56 29.20 21.37"),
}


@pytest.mark.parametrize("row, figures", FROM_THE_IMAGE.items())
def test_rows_hold_the_image_s_figures(row, figures):
    avg, tasks = figures
    ref = table()[row]
    assert pct(ref.average()) == Decimal(avg)  # all 8 tasks: the printed Avg
    assert [pct(ref.figure(t)) for t in R2MED_TASKS] == [Decimal(v) for v in tasks.split()]
    assert ref.figure("Biology", "MAP@10") is None  # the table prints nDCG@10 alone


def test_the_table_s_sections_and_marks():
    refs = table().values()
    groups = [r.printed["Group"] for r in refs]
    assert {g: groups.count(g) for g in groups} == {
        "general": 10, "reasoning": 3, "reasonembed-basic": 3, "reasonembed": 3,
    }  # fmt: skip
    marks = {r.row: r.printed["Mark"] for r in refs}
    assert sorted(r for r, m in marks.items() if m == "†") == [
        "base/llama-3.1-8b-ms", "base/qwen3-4b-ms", "base/qwen3-8b-ms",
    ]  # fmt: skip
    assert len([m for m in marks.values() if m == "*"]) == 6


def test_shipped_table_round_trips_through_its_tsv(tmp_path):
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    path = tmp_path / "table3.tsv"
    path.write_text(paper_tsv(shipped), encoding="utf-8")
    rebuilt = build_reasonembed(path)
    assert rebuilt == shipped
    assert leaderboard_text(rebuilt) == SHIPPED.read_text(encoding="utf-8")


def test_a_row_is_labelled_with_the_paper_and_where_it_was_read():
    ref = reference(f"{REASONEMBED_TABLE}:{REASON_8B}")
    assert ref.spec == "reasonembed-table3:base/reason-embed-qwen3-8b"
    assert ref.label == "ReasonEmbed Table 3: base/reason-embed-qwen3-8b"
    assert ref.source == (
        f"{TITLE} (Chen et al., 2025, arXiv 2510.08252), Table 3, its row ReasonEmbed-Qwen3-8B "
        f"(RI-InfoNCE), read from https://github.com/VectorSpaceLab/agentic-search at {COMMIT}, "
        f"{IMAGE}"
    )
    assert ref.location == IMAGE_URL
    assert dict(ref.printed) == {"Model": "ReasonEmbed-Qwen3-8B (RI-InfoNCE)",
                                 "Group": "reasonembed", "Size": "8B", "Mark": ""}  # fmt: skip
    assert "scripts/ours/eval_reason_embed_qwen3_8b.sh" in ref.setup
    assert ref.format(ref.figure("Biology")) == "0.5401"
    assert references_of(REASON_8B) == [ref]  # no other source has it
    assert [r.spec for r in references_of("base/nv")] == [
        "r2med:base/nv", "r2med-leaderboard:base/nv", "reasonembed-table3:base/nv",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "line, message",
    [
        ("GPT-5\tgeneral\t8B\t\t1\t1\t1\t1\t1\t1\t1\t1\t1", ":2: Model 'GPT-5': not one of"),
        ("BM25\tother\t-\t\t1\t1\t1\t1\t1\t1\t1\t1\t1", ":2: Group 'other': expected one of"),
        ("BM25\tgeneral\t-\t+\t1\t1\t1\t1\t1\t1\t1\t1\t1", ":2: Mark '+': expected *, † or"),
        ("BM25\tgeneral\t7\t\t1\t1\t1\t1\t1\t1\t1\t1\t1", ":2: Size '7': expected - or a size"),
        ("BM25\tgeneral\t-\t\t1\t1\tx\t1\t1\t1\t1\t1\t1", ":2: Bioinformatics 'x': not a number"),
        ("BM25\tgeneral\t-\t\t1\t1\t1\t1\t1\t1\t1\t1", ":2: 12 tab-separated fields, expected 13"),
        ("BM25\tgeneral\t-\t\t1.005\t1\t1\t1\t1\t1\t1\t1\t1", ":2: Avg '1.005': not a figure"),
    ],
)  # fmt: skip
def test_build_refuses_a_bad_line_in_one_line(tmp_path, line, message):
    path = tmp_path / "table3.tsv"
    path.write_text(f"{TSV_HEADER}\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        build_reasonembed(path)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_build_refuses_a_bad_header_or_a_row_twice(tmp_path):
    path = tmp_path / "table3.tsv"
    path.write_text("Model\tAvg\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"table3.tsv:1: header .*: expected the columns"):
        build_reasonembed(path)
    bm25 = "BM25\tgeneral\t-\t\t1\t1\t1\t1\t1\t1\t1\t1\t1"
    path.write_text(f"{TSV_HEADER}\n{bm25}\n{bm25.lower()}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"table3.tsv:3: row base/bm25 again \(line 2\)"):
        build_reasonembed(path)


# ---- its inconsistencies, shown with both figures -------------------------------------------


def test_the_table_s_inconsistencies_are_found_from_its_rows():
    found = {(i.ref.row, i.cell): (i.printed, i.other) for r in table().values()
             for i in inconsistencies(r)}  # fmt: skip
    assert found == {(RADER, "Avg"): ("35.19", "35.215"), (QWEN3_4B_MS, "Size"): ("8B", "4B")}
    (rader,) = inconsistencies(table()[RADER])
    assert rader.label == "CONFLICT" and "\n" not in rader.text()
    assert rader.text() == (
        "base/rader-gte-qwen2-7b: ReasonEmbed Table 3 prints Avg 35.19, the mean of its 8 "
        "printed task figures is 35.215 (0.025 apart; rounding allows 0.01)"
    )
    assert table()[RADER].average() == 0.3519  # the printed Avg stays the row's figure
    (size,) = inconsistencies(table()[QWEN3_4B_MS])
    assert size.label == "NOTE" and size.text() == (
        "base/qwen3-4b-ms: ReasonEmbed Table 3 prints Size 8B for Qwen3-4B-ms, whose name says 4B"
    )
    for ref in load_references("r2med-leaderboard").values():  # R2MED's: none (checked on build)
        assert inconsistencies(ref) == []


def test_show_and_list_give_the_conflict_and_the_note(capsys):
    assert references_main(["show", RADER]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"ReasonEmbed Table 3: {RADER}\nfrom {TITLE} (Chen et al., 2025, arXiv 2510.08252), "
        "Table 3, its row RaDeR-gte-Qwen2-7B, read from "
    )
    assert ('as printed: Model RaDeR-gte-Qwen2-7B, Group reasoning ("Tailored methods for '
            'reasoning-intensive retrieval"), Size 7B, Mark * ("well-trained models released '
            'by existing studies and evaluated by us")\n') in out  # fmt: skip
    assert "| Biology | 0.3602 |\n" in out and "| Avg ×100 | 35.19 |\n" in out
    assert ("CONFLICT: base/rader-gte-qwen2-7b: ReasonEmbed Table 3 prints Avg 35.19, the mean "
            "of its 8 printed task figures is 35.215") in out  # fmt: skip
    assert references_main(["show", f"{REASONEMBED_TABLE}:{QWEN3_4B_MS}"]) == 0
    out = capsys.readouterr().out
    assert 'Size 8B, Mark † ("reproduced methods in this work")' in out
    assert "NOTE: base/qwen3-4b-ms: ReasonEmbed Table 3 prints Size 8B for Qwen3-4B-ms" in out

    assert references_main(["list", "--table", REASONEMBED_TABLE]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "| row | ReasonEmbed Table 3 | note |"
    assert len([line for line in lines if line.startswith("| base/")]) == 19
    assert (f"| {RADER} | 35.19 | CONFLICT: Avg 35.19 printed, its tasks' mean 35.215 |"
            in lines)  # fmt: skip
    assert f"| {QWEN3_4B_MS} | 23.09 | NOTE: Size 8B printed, its name says 4B |" in lines
    assert f"| {REASON_8B} | 43.18 |  |" in lines
    assert (f"19 rows of {TITLE} (Chen et al., 2025, arXiv 2510.08252), Table 3 (read from "
            f"{IMAGE_URL}; specs reasonembed-table3:<row>; show <row> gives each as printed)."
            ) in lines  # fmt: skip
    assert any(line.startswith("CONFLICT: base/rader-gte-qwen2-7b: ") for line in lines)


def test_list_of_every_source_names_the_new_one(capsys):
    assert references_main(["list", "--method", "base"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| row | R2MED repository | R2MED leaderboard | ReasonEmbed Table 3 | note |"
    assert "| base/reason-embed-qwen3-8b | - | - | 43.18 |  |" in lines
    assert "| base/e5 | 24.92 | 24.92 | - |  |" in lines
    assert any(line.startswith("19 rows of ReasonEmbed: ") for line in lines)


# ---- the rows that repeat R2MED's, compared with R2MED's rows -------------------------------


def test_the_rows_it_marks_as_r2med_s_are_r2med_s_rows():
    """The caption's unmarked baselines are exactly the Table 3 rows R2MED's sources hold."""
    held = {row for row in table() if any(row in load_references(t) for t in TABLES)}
    marked = {row for row, ref in table().items() if repeats_of(ref)}
    assert held == marked == set(REPEATED)


@pytest.mark.parametrize("row", REPEATED)
def test_a_repeated_row_is_r2med_s_figure_by_figure(row):
    """Each task and the Avg: the leaderboard's figure exactly, the repository's rounded (at
    most half a unit of the second decimal ×100 apart), in both directions of the check."""
    ref = table()[row]
    repository, board = (load_references(t)[row] for t in TABLES)
    for task in R2MED_TASKS:
        assert pct(ref.figure(task)) == pct(board.figure(task)), (row, task)
        assert abs(pct(ref.figure(task)) - pct(repository.figure(task))) <= Decimal("0.005")
    assert pct(ref.average()) == pct(board.average())
    assert agrees(repository.average(), ref.average())
    repeats = repeats_of(ref)
    assert [r.original.spec for r in repeats] == [f"r2med:{row}", f"r2med-leaderboard:{row}"]
    assert [r.differ for r in repeats] == [(), ()]
    assert repeats[0].text() == (
        f"{row}: ReasonEmbed Table 3 repeats R2MED's figures; against the R2MED repository "
        f"(r2med:{row}): same on all 8 tasks and the Avg, to 2 decimals"
    )
    # a run of it is set beside R2MED's row first
    spec = RETRIEVERS.get(row.split("/")[1], "bm25")  # R2MED's BM25 is the default bm25
    assert [r.spec for r in paper_references(_config(spec))] == [
        f"r2med:{row}", f"r2med-leaderboard:{row}", f"reasonembed-table3:{row}"
    ]  # fmt: skip


def test_a_changed_figure_of_a_repeated_row_is_reported_with_both_figures():
    ref = table()["base/nv"]
    tasks = {t: dict(m) for t, m in ref.tasks.items()}
    tasks["Biology"]["NDCG@10"] = 0.2725  # 27.25 where R2MED has 27.152 / 27.15
    repository, board = repeats_of(replace(ref, tasks=tasks, published_average=0.3155))
    assert repository.differ == board.differ == ("Biology", "Avg")
    assert repository.text().endswith(
        "against the R2MED repository (r2med:base/nv): CONFLICT: differs on 2 figure(s) "
        "(Biology 27.25 vs 27.152, Avg 31.55 vs 31.43)"
    )
    assert "(Biology 27.25 vs 27.15, Avg 31.55 vs 31.43)" in board.text()


def test_show_compares_a_repeated_row_figure_by_figure(capsys):
    assert references_main(["show", "base/grit", "--metrics", "NDCG@10"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("REPEAT: ReasonEmbed Table 3 prints base/grit") :].splitlines()
    assert block[2] == "| figure | R2MED repository | R2MED leaderboard | ReasonEmbed Table 3 | |"
    assert len(block) == 4 + 9 and all(line.endswith("| same |") for line in block[4:])
    assert "| PMC-Treatment | 39.885 | 39.88 | 39.88 | same |" in block  # a half, rounded down
    assert "| Avg | 31.12 | 31.12 | 31.12 | same |" in block
    assert references_main(["list", "--method", "base"]) == 0
    out = capsys.readouterr().out
    assert "| base/grit | 31.12 | 31.12 | 31.12 | ReasonEmbed Table 3 repeats R2MED's: same |" \
        in out  # fmt: skip
    assert ("REPEAT: base/grit: ReasonEmbed Table 3 repeats R2MED's figures; against the R2MED "
            "leaderboard (r2med-leaderboard:base/grit): same on all 8 tasks") in out  # fmt: skip


# ---- a run of one of its models, beside its row ---------------------------------------------


def _config(spec: str, **settings) -> dict:
    """A run's config.json, as agents.run records it, of a retriever alone."""
    return to_dict(from_settings({"agent": "none", "retriever": spec, "trust_remote_code": True,
                                  **settings}))  # fmt: skip


def test_every_model_with_a_published_checkpoint_maps_to_its_row():
    rows = table()
    assert {f"base/{short}" for short in REASONEMBED_RETRIEVERS} == set(rows) - set(REPEATED) - {
        "base/qwen3-4b-ms", "base/qwen3-8b-ms", "base/llama-3.1-8b-ms"  # no checkpoint
    }  # fmt: skip
    assert not set(REASONEMBED_RETRIEVERS) & set(RETRIEVERS)  # never one of R2MED's names
    for short, spec in REASONEMBED_RETRIEVERS.items():
        assert paper_spec(_config(spec)) == f"reasonembed-table3:base/{short}", spec


@pytest.mark.parametrize(
    "spec, row",
    [
        ("dense:hanhainebula/reason-embed-qwen3-8b-0928", REASON_8B),
        ("dense:hanhainebula/reason-embed-basic-qwen3-8b-0928", "base/reason-embed-basic-qwen3-8b"),
        ("dense:hanhainebula/reason-embed-basic-llama-3.1-8b-0928",
         "base/reason-embed-basic-llama-3.1-8b"),
        ("dense:hanhainebula/reason-embed-qwen3-4b-0928", "base/reason-embed-qwen3-4b"),
        ("dense:Raderspace/RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical", RADER),
        ("dense:Qwen/Qwen3-Embedding-8B", "base/qwen3-embedding-8b"),
        ("dense:qwen/qwen3-embedding-4b", "base/qwen3-embedding-4b"),  # the hub ignores case
        ("dense:Alibaba-NLP/gte-Qwen2-7B-instruct", "base/gte-qwen2-7b-instruct"),
        ("dense:AQ-MedAI/Diver-Retriever-4B", "base/diver-retriever-4b"),
        ("dense:reasonir/ReasonIR-8B", "base/reasonir-8b"),
        ("dense:/models/reason-embed-qwen3-8b-0928", REASON_8B),  # a local copy, by its name
        ("dense:intfloat/e5-mistral-7b-instruct", "base/e5"),  # not in Table 3: R2MED's row
    ],
)  # fmt: skip
def test_a_run_config_maps_to_its_row(spec, row):
    config = _config(spec)
    assert paper_references(config)[0].row == row
    # naming the family the model's name points to, or its own length or rule for a document
    # whose id is the query's, is the same run as leaving them to the family
    own = family_for(spec.split(":", 1)[1])
    same = {"dense_family": own.name, "ignore_identical_ids": own.ignore_identical_ids}
    if own.max_length is not None:
        same["max_length"] = own.max_length
    assert paper_reference(_config(spec, **same)).row == row


@pytest.mark.parametrize(
    "settings",
    [
        {"instructions": "none"},  # not the setup the figures are of
        {"dense_family": "bge"},  # another family's encoding
        {"max_length": 256},  # the family's (the authors') is 512
        {"ignore_identical_ids": True},  # the authors' search keeps a query's own id
        {"agent": "hyde", "model": "openai/gpt-4o-2024-11-20"},  # an LLM expansion
        {"retriever": "bm25+dense:hanhainebula/reason-embed-qwen3-8b-0928"},  # a fusion
        {"rerank": ["cross:BAAI/bge-reranker-v2-m3,depth=10"]},
        {"retriever": "dense:hanhainebula/reason-embed-qwen3-8b"},  # not the published name
    ],
)
def test_another_setup_is_not_set_beside_the_row(settings):
    config = {"retriever": "dense:hanhainebula/reason-embed-qwen3-8b-0928", **settings}
    assert paper_references(_config(config.pop("retriever"), **config)) == []


@pytest.fixture
def tasks(toy_dir: Path) -> dict[str, Path]:
    """The toy task, and a copy named like R2MED's Biology task."""
    biology = toy_dir.parent / "Biology"
    shutil.copytree(toy_dir, biology)
    return {"Biology": biology, "toy": toy_dir}


def test_agents_run_prints_the_row_beside_a_reason_embed_run(tasks, tmp_path, capsys, monkeypatch):
    """`agents.run --agent none --retriever dense:hanhainebula/reason-embed-qwen3-8b-0928`
    prints Table 3's figure beside Biology's and the row's average beside the run's; nothing
    beside the toy task, which is not R2MED's. The pipeline is stubbed (no 8B model here):
    each task's figures are a BM25 run's of the toy, so only the printing is under test."""
    import agents.execution.whole_run
    from agents.execution.whole_run import RunResult, TaskResult

    bm25, _ = run_and_parse({"toy": tasks["toy"]}, tmp_path, capsys, "bm25", "--agent", "none")
    summary = TaskSummary.from_dict(
        json.loads((tmp_path / "runs" / "bm25" / "toy" / "metrics.json").read_text())
    )

    def stub(config, *, on_task, **kwargs):
        done = {}
        for name in tasks:
            done[name] = TaskResult(name=name, folder=name, summary=summary)
            on_task(done[name])
        return RunResult(tmp_path / "runs" / "reason", config, done, 0.5)

    monkeypatch.setattr(agents.execution.whole_run, "run_dataset", stub)
    spec = "dense:hanhainebula/reason-embed-qwen3-8b-0928"
    printed, _ = run_and_parse(tasks, tmp_path, capsys, "reason", "--agent", "none",
                               "--retriever", spec)  # fmt: skip
    biology, toy = printed.tasks["Biology"], printed.tasks["toy"]
    assert biology.ndcg == toy.ndcg == bm25.tasks["toy"].ndcg  # the stub's figures
    assert (biology.paper, biology.paper_figure) == (
        "ReasonEmbed Table 3, base/reason-embed-qwen3-8b", "0.5401"
    )  # fmt: skip
    assert toy.paper is None and toy.paper_figure is None
    assert printed.paper_average == (
        "ReasonEmbed Table 3 (base/reason-embed-qwen3-8b): avg nDCG@10 54.01 over the same tasks"
    )


def test_a_rader_run_over_r2med_s_8_tasks_gives_both_averages():
    ref = paper_reference(_config("dense:Raderspace/RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical"))
    assert ref is not None and ref.spec == f"{REASONEMBED_TABLE}:{RADER}"
    assert figure_note(ref, "Biology") == "ReasonEmbed Table 3, base/rader-gte-qwen2-7b: 0.3602"
    assert average_note(ref, R2MED_TASKS) == (
        "ReasonEmbed Table 3 (base/rader-gte-qwen2-7b): avg nDCG@10 35.19 over the same tasks; "
        "the mean of its printed task figures is 35.215, a conflict (python -m eval.references "
        "show reasonembed-table3:base/rader-gte-qwen2-7b)"
    )
    # over fewer tasks the average is of its printed task figures: no printed Avg in play
    assert average_note(ref, ["Biology", "IIYi-Clinical"]) == (
        "ReasonEmbed Table 3 (base/rader-gte-qwen2-7b): avg nDCG@10 28.93 over the same tasks"
    )


def test_compare_names_the_rows_and_their_notes(tasks, tmp_path, capsys):
    from agents.commands.run import main as run_main

    argv = ["--agent", "none", "--dataset", str(tasks["Biology"]), "--runs-dir",
            str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--run-name", "b",
            "--quiet"]  # fmt: skip
    assert run_main(argv) == 0
    out = tmp_path / "cmp"
    argv = [str(tmp_path / "runs" / "b"), "--out", str(out), "--no-plots", "--no-html",
            "--reference", f"{REASONEMBED_TABLE}:{RADER}",
            "--reference", f"{REASONEMBED_TABLE}:base/nv"]  # fmt: skip
    assert compare_main(argv) == 0
    capsys.readouterr()
    report_md = (out / "report.md").read_text(encoding="utf-8")
    assert f"| ReasonEmbed Table 3: {RADER} | 36.02 | 36.02 |" in report_md
    assert (f"- ReasonEmbed Table 3: {RADER}: CONFLICT: base/rader-gte-qwen2-7b: ReasonEmbed "
            "Table 3 prints Avg 35.19, the mean of its 8 printed task figures is 35.215"
            ) in report_md  # fmt: skip
    assert (
        "- ReasonEmbed Table 3: base/nv: REPEAT: base/nv: ReasonEmbed Table 3 repeats "
        "R2MED's figures; against the R2MED repository (r2med:base/nv): same"
    ) in report_md
    assert "its row RaDeR-gte-Qwen2-7B, read from https://github.com/VectorSpaceLab" in report_md
    rows = (out / "leaderboard.csv").read_text().splitlines()
    assert f"ReasonEmbed Table 3: {RADER},{IMAGE_URL},0.36020,0.36020" in rows


# ---- docs/results.md: each command makes the run its row is of ------------------------------

DOC = REPO / "docs" / "results.md"
DOC_ROW = re.compile(
    r"^\| `(?P<row>base/[\w.-]+)` \([^|]+\) \| (?P<avg>\d+\.\d\d) \| `(?P<command>[^`]+)` \| "
    r"(?P<needs>[^|]+) \|$",
    re.MULTILINE,
)


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## ReasonEmbed's Table 3 (arXiv 2510.08252)")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _run_config(command: str) -> dict:
    from agents.commands.run import parse_args
    from agents.config.settings import settings_from_args

    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "agents.run"], command
    return to_dict(from_settings(settings_from_args(parse_args(argv[3:]))))


def test_the_docs_commands_make_the_runs_of_their_rows():
    found = DOC_ROW.findall(_section())
    assert len(found) == len(REASONEMBED_RETRIEVERS)  # every row a run can reproduce
    assert {row for row, *_ in found} == {f"base/{s}" for s in REASONEMBED_RETRIEVERS}
    for row, avg, command, needs in found:
        config = _run_config(command)
        assert paper_spec(config) == f"{REASONEMBED_TABLE}:{row}", command
        assert f"{table()[row].average() * 100:.2f}" == avg, row
        # the authors' scripts trust RaDeR's and ReasonIR's code; our config refuses a family
        # that runs its repository's code without the flag
        model = config["retriever"]["spec"].split(":", 1)[1]
        remote = row in (RADER, "base/reasonir-8b") or family_for(model).remote_code
        assert ("--trust-remote-code" in command) == remote, command
        assert "a GPU" in needs and "the hub" in needs, row


def test_the_docs_bash_block_runs_and_compares_a_row():
    from agents.commands.run import parse_args
    from agents.config.naming import run_folder_name
    from agents.config.settings import settings_from_args

    (block,) = re.findall(r"```bash\n(.*?)```", _section(), re.DOTALL)
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    runs = [c for c in commands if c.startswith("python -m agents.run ")]
    assert [paper_spec(_run_config(c)) for c in runs] == [
        f"{REASONEMBED_TABLE}:{REASON_8B}", f"{REASONEMBED_TABLE}:{RADER}"
    ]  # fmt: skip
    (compare,) = [c for c in commands if c.startswith("python -m eval.compare ")]
    folder, flag, spec = shlex.split(compare)[3:]
    config = from_settings(settings_from_args(parse_args(shlex.split(runs[0])[3:])))
    assert folder == f"runs/{run_folder_name(config)}" and flag == "--reference"
    assert reference(spec).spec == f"{REASONEMBED_TABLE}:{REASON_8B}"
