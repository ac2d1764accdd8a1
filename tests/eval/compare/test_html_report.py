"""report.html of eval.compare on real demo runs (no LLM, search-o1 and HyDE + a listwise
rerank stage with scripted models), read back without a browser: offline, complete, the
relevance marks the qrels', slim trajectories, safe against hostile text, small per query.
The charts' legibility is checked on the figures themselves."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

import prompts
from agents.commands.run import main as run_main
from agents.graphs.search_o1 import BEGIN_QUERY
from agents.llm import scripted
from eval.compare import compare_runs, reference_run, write_comparison
from eval.compare.__main__ import main as compare_main
from eval.compare.html import SHORT_CHARS, TEXT_CHARS, cut, embed_json, report_data, slim_step
from eval.compare.plots import (
    cost_figure,
    label_boxes,
    label_boxes_overlap,
    svg_text,
    task_bars_figure,
)
from eval.datasets import DEMO_DIR, load_task
from eval.runs import QrelsError, RunFolder, RunQrels

PASSAGE = "Immersion wrinkling of the fingers needs intact sympathetic nerves to the skin."
ANSWER = "The wrinkling is an active, nerve-driven vasoconstriction, not passive soaking."
HOSTILE = "Is it </script><script>document.title='pwned'</script> or <!-- <script> a comment?"


def _respond(messages: list[dict], params: dict):
    """One scripted model for every LLM the runs call, told apart by their prompts."""
    first = str(messages[0]["content"])
    if first.startswith("You are RankGPT"):  # a listwise window
        return "[2] > [1] > [3]"
    if first.startswith("**Task Instruction:**"):  # search-o1 reading the documents
        return "Reading.\n**Final Information**\n\nWrinkling depends on sympathetic nerves."
    if params.get("stop"):  # search-o1's reasoning stops at the end of a search query
        if sum(m["role"] == "assistant" for m in messages) == 0:
            return f"I should look this up.\n\n{BEGIN_QUERY}wrinkled fingers sympathetic nerves"
        return ANSWER
    return PASSAGE  # HyDE's passage


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("html")
    scripted.install(_respond)
    common = ["--dataset", "demo", "--runs-dir", str(root / "runs"), "--cache-dir",
              str(root / "cache"), "--quiet", "--concurrency", "1"]  # fmt: skip
    runs = {
        "none": ["--agent", "none"],
        "o1": ["--agent", "search-o1", "--model", "scripted/x"],
        "rerank": ["--agent", "hyde", "--model", "scripted/x", "--rerank", "llm-listwise",
                   "--rerank-depth", "20"],
    }  # fmt: skip
    for name, argv in runs.items():
        assert run_main([*argv, *common, "--run-name", name]) == 0
    folders = {name: root / "runs" / name for name in runs}
    folders["root"] = root
    return folders


@pytest.fixture(scope="module")
def report(demo) -> dict:
    """The page of the three runs, through the command line, and their Comparison."""
    out = demo["root"] / "cmp"
    folders = [demo[k] for k in ("none", "o1", "rerank")]
    argv = [*map(str, folders), "--out", str(out), "--cache-dir", str(demo["root"] / "cache")]
    assert compare_main(argv) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    c = compare_runs(folders)
    labels = {c.runs[k].path.name: k for k in c.labels}
    return {"html": html, "data": _data(html), "c": c, "label": labels}


def _data(html: str) -> dict:
    scripts = re.findall(
        r'<script id="report-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert len(scripts) == 1
    return json.loads(scripts[0])


class _Elements(HTMLParser):
    """Every start tag as (tag, attributes, the ids of the sections it is in)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None], tuple[str, ...]]] = []
        self.sections: list[str] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.found.append((tag, attributes, tuple(self.sections)))
        if tag == "section":
            self.sections.append(attributes.get("id") or "")
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        if tag == "section":
            self.sections.pop()
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text.append(data)


def _elements(html: str) -> _Elements:
    parser = _Elements()
    parser.feed(html)
    return parser


# ---- the page -------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_prints_the_page_and_write_comparison_returns_it(demo, tmp_path, capsys):
    out = tmp_path / "out"
    assert compare_main([str(demo["none"]), str(demo["o1"]), "--out", str(out)]) == 0
    assert (
        f"HTML report (opens offline in a browser): {out / 'report.html'}"
        in capsys.readouterr().out
    )
    c = compare_runs([demo["none"], demo["o1"]])
    assert out / "report.html" in write_comparison(c, out)
    assert (out / "tasks.png").is_file() and (out / "cost.png").is_file()

    bare = tmp_path / "bare"
    assert compare_main([str(demo["none"]), str(demo["o1"]), "--out", str(bare), "--no-html"]) == 0
    assert (bare / "report.md").is_file() and not (bare / "report.html").exists()
    assert "HTML report" not in capsys.readouterr().out
    written = write_comparison(c, tmp_path / "plain", plots=False, html=False)
    assert [p.name for p in written] == [
        "report.md", "leaderboard.md", "leaderboard.csv", "deltas.csv", "comparison.json"
    ]  # fmt: skip


def test_the_page_loads_nothing_from_the_network(report):
    html = report["html"]
    for tag, attrs, _ in _elements(html).found:
        for key in ("src", "href", "xlink:href", "action", "data"):
            value = attrs.get(key) or ""
            assert not re.match(r"\s*(https?:)?//", value), (tag, key, value)
        assert tag not in ("link", "iframe", "img") or not attrs.get("src", "").startswith("http")
    assert "@import" not in html and "url(http" not in html
    assert not re.search(r"<script[^>]*\bsrc=", html)


def test_every_run_task_and_query_is_in_the_page(report):
    data, html, c = report["data"], report["html"], report["c"]
    assert data["labels"] == c.labels and data["tasks"] == ["demo"]
    assert data["labels"][data["baseline"]] == c.baseline
    demo_ids = [json.loads(line)["id"] for line in (DEMO_DIR / "query.jsonl").open()]
    assert [r[1] for r in data["rows"]] == demo_ids  # every query, in the task's order
    for task, qid, text, scores in data["rows"]:
        assert text == c.runs[c.baseline].tasks[task].records[qid]["query"]
        assert scores == [pytest.approx(c.scores[k][task][qid], abs=1e-5) for k in c.labels]
        for label in c.labels:
            assert data["traj"][label][task][qid]["stages"], (label, qid)

    found = _elements(html).found
    rows = {
        a["data-run"]: a
        for t, a, s in found
        if t == "tr" and "leaderboard" in s and "data-run" in a
    }
    assert list(rows) == c.labels
    assert [k for k, a in rows.items() if "baseline" in (a.get("class") or "").split()] == [
        c.baseline
    ]
    for section in ("tasks-chart", "cost-chart"):
        assert any(t == "svg" and section in s for t, _, s in found), section
    options = [a.get("value") for t, a, s in found if t == "option" and "queries" in s]
    assert options == ["", "demo"]
    ids = {a.get("id") for _, a, _ in found}
    assert {"task-filter", "text-filter", "query-table", "leaderboard", "queries"} <= ids
    sorts = [a["data-sort"] for t, a, _ in found if t == "th" and "data-sort" in a]
    others = [f"delta:{k}" for k in c.labels if k != c.baseline]
    assert sorts == ["task", "query", "text", *c.labels, *others]
    # the leaderboard's numbers: means ×100, the Δ of Avg and the pooled p-value
    for label in c.labels:
        assert f"{c.means[label]['demo'] * 100:.2f}" in html
    other = c.labels[1]
    assert f"{c.deltas[other]['Overall'].p_value:.3g}" in html


def test_relevance_grades_are_the_qrels(report):
    qrels = load_task("demo", Path("unused")).qrels
    data = report["data"]
    assert data["qrels"]["demo"]["q01"] == {d: g for d, g in qrels["q01"].items() if g > 0}
    assert data["qrels"]["demo"]["q01"], "q01 has relevant documents in the demo"
    assert all(data["qrels"]["demo"][q] == qrels.get(q, {}) for q in data["qrels"]["demo"])
    # a relevant document the baseline ranked is there to be marked (d261 is q01's)
    top = [d for d, _ in data["traj"][data["labels"][0]]["demo"]["q01"]["top"]]
    assert "d261" in top and qrels["q01"]["d261"] == 2


def _record(path: Path, query_id: str) -> dict:
    records = (json.loads(line) for line in path.read_text().splitlines())
    return next(r for r in records if r["query_id"] == query_id)


def test_llm_steps_keep_reasoning_and_calls_but_not_the_messages(report, demo):
    data = report["data"]
    steps = data["traj"][report["label"]["o1"]]["demo"]["q01"]["stages"][0]["steps"]
    assert [s["node"] for s in steps] == ["reason", "search", "documents", "reason", "final"]
    record = _record(demo["o1"] / "demo" / "queries.jsonl", "q01")
    assert steps[0]["output"] == record["steps"][0]["output"] and "messages" not in steps[0]
    assert steps[1]["query"] == "wrinkled fingers sympathetic nerves"
    assert [d for d, _ in steps[1]["docs"]] == record["steps"][1]["doc_ids"][:10]
    assert steps[3]["output"] == ANSWER
    # the prompts the messages carried appear nowhere: not repeated per turn, not at all
    prompt = (Path(prompts.__file__).parent / "search-o1" / "default.txt").read_text()
    prompt = prompt.splitlines()[0]
    assert prompt and prompt not in json.dumps(data, ensure_ascii=False)
    assert '"messages"' not in report["html"]


def test_rerank_windows_and_the_final_top10_are_the_stage_s(report, demo):
    traj = report["data"]["traj"][report["label"]["rerank"]]["demo"]["q03"]
    assert [s["stage"] for s in traj["stages"]] == ["agent", "rerank-1-llm-listwise"]
    stage = _record(demo["rerank"] / "demo" / "rerank-1-llm-listwise" / "queries.jsonl", "q03")
    window = traj["stages"][1]["steps"][0]
    assert window["node"] == "window" and window["window"] == stage["steps"][0]["window"]
    assert (
        window["in"] == stage["steps"][0]["doc_ids"] and window["out"] == stage["steps"][0]["order"]
    )
    assert window["in"][:2] == window["out"][1::-1]  # "[2] > [1]": the first two swapped
    assert traj["top"] == [[d, pytest.approx(s, abs=1e-4)] for d, s in stage["ranking"][:10]]


def test_hostile_query_text_cannot_break_the_page(demo, tmp_path):
    data_dir = tmp_path / "hostile"
    shutil.copytree(DEMO_DIR, data_dir)
    lines = (data_dir / "query.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({"id": first["id"], "text": HOSTILE})
    (data_dir / "query.jsonl").write_text("\n".join(lines) + "\n")
    argv = ["--agent", "none", "--dataset", str(data_dir), "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(demo["root"] / "cache"), "--quiet",
            "--run-name", "hostile"]  # fmt: skip
    assert run_main(argv) == 0
    assert compare_main([str(tmp_path / "runs" / "hostile"), "--out", str(tmp_path / "c")]) == 0
    html = (tmp_path / "c" / "report.html").read_text(encoding="utf-8")

    parsed = _elements(html)
    scripts = [a for t, a, _ in parsed.found if t == "script"]
    assert len(scripts) == 2  # the data and the page's own script, nothing injected
    data = _data(html)
    assert data["rows"][0][2] == HOSTILE  # the text survives whole, only escaped
    assert "</script" not in html.split('id="report-data"')[1].split("</script>")[0]
    assert "pwned" not in "".join(parsed.script_text).replace(embed_json(HOSTILE)[1:-1], "")


def test_qrels_that_cannot_be_loaded_leave_a_note_not_a_failure(demo, tmp_path):
    lost = tmp_path / "lost"
    shutil.copytree(demo["none"], lost)
    info = json.loads((lost / "demo" / "task.json").read_text())
    info.pop("binding")  # as a folder written before task.json held it: config.json edited
    (lost / "demo" / "task.json").write_text(json.dumps(info))
    config = json.loads((lost / "config.json").read_text())
    config["dataset"] = str(tmp_path / "gone")
    (lost / "config.json").write_text(json.dumps(config))
    c = compare_runs([lost])  # per_query.jsonl has the metric: no qrels needed to score
    data = report_data(c)
    assert data["qrels"]["demo"]["q01"] == {}
    assert any("no relevance marks" in n and "cannot load qrels" in n for n in data["notes"])


def test_run_qrels_is_the_loader_compare_uses(demo, tmp_path):
    qrels = RunFolder(demo["none"]).qrels("demo", demo["root"] / "cache")
    assert qrels == load_task("demo", Path("unused")).qrels
    loader = RunQrels()
    assert loader.get(demo["none"], "demo") is loader.get(demo["o1"], "demo")  # loaded once
    with pytest.raises(QrelsError, match=r"has no task 'nope'"):
        loader.get(demo["none"], "nope")
    with pytest.raises(QrelsError, match=r"not a run folder \(no config.json\)"):
        RunFolder(tmp_path).qrels("demo")


# ---- slimming -------------------------------------------------------------------------------


def test_long_texts_are_cut_with_a_visible_marker():
    step = {
        "node": "reason",
        "messages": [{"role": "user", "content": "x" * 50_000}],
        "output": "y" * (TEXT_CHARS + 123),
        "tool_calls": [{"id": "c1", "name": "search", "arguments": "z" * (SHORT_CHARS + 7)}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }
    slim = slim_step(step)
    assert slim["output"] == "y" * TEXT_CHARS + " … [cut: 123 more characters]"
    assert slim["calls"][0]["arguments"].endswith("[cut: 7 more characters]")
    assert slim["tokens"] == [10, 3] and "messages" not in slim
    assert cut("short") == "short"
    cross = {"node": "cross", "doc_ids": ["a", "b"], "scores": [float("nan"), 0.123456]}
    assert slim_step(cross)["docs"] == [["a", None], ["b", 0.1235]]  # JSON has no NaN
    assert json.loads(embed_json(slim_step(cross)))["found"] == 2


def _synthetic_runs(root: Path, queries: int, runs: int, turns: int = 6) -> list[Path]:
    """Run folders of a tool-search-like agent: `turns` reasoning calls, each re-sending the
    whole conversation (as real traces do), a search per turn, a 100-document ranking."""
    data = root / "data"
    data.mkdir()
    with open(data / "corpus.jsonl", "w") as f:
        for d in range(200):
            f.write(json.dumps({"id": f"d{d}", "text": f"document {d} " * 30}) + "\n")
    texts = {
        f"q{q}": f"A patient of {q} years presents with " + "symptoms " * 150
        for q in range(queries)
    }
    with open(data / "query.jsonl", "w") as f:
        for q, text in texts.items():
            f.write(json.dumps({"id": q, "text": text}) + "\n")
    with open(data / "qrels.jsonl", "w") as f:
        for i, q in enumerate(texts):
            f.write(json.dumps({"q_id": q, "p_id": f"d{i % 200}", "score": 1}) + "\n")
    folders = []
    for r in range(runs):
        folder = root / f"run{r}"
        (folder / "data").mkdir(parents=True)
        config = {"agent": f"agent{r}", "dataset": str(data), "retriever": "bm25"}
        (folder / "config.json").write_text(json.dumps(config))
        with (
            open(folder / "data" / "queries.jsonl", "w") as f,
            open(folder / "data" / "per_query.jsonl", "w") as g,
        ):
            for n, (q, text) in enumerate(texts.items()):
                messages, steps = [{"role": "user", "content": text}], []
                for t in range(turns):
                    thought = f"Turn {t}: the findings suggest a search for cause {t}. " * 12
                    call = {
                        "id": f"c{t}",
                        "name": "search",
                        "arguments": json.dumps({"query": f"cause {t}"}),
                    }
                    usage = {"prompt_tokens": 900, "completion_tokens": 80}
                    steps.append({"node": "reason", "messages": list(messages), "output": thought,
                                  "tool_calls": [call], "usage": usage})  # fmt: skip
                    ids = [f"d{(n + t + k) % 200}" for k in range(10)]
                    result = json.dumps([{"id": d, "snippet": "snippet text " * 20} for d in ids])
                    steps.append({"node": "tool", "tool": "search", "arguments": call["arguments"],
                                  "request": {"query": f"cause {t}"}, "doc_ids": ids,
                                  "scores": [10.0 - k for k in range(10)], "error": False,
                                  "result": result})  # fmt: skip
                    messages += [
                        {"role": "assistant", "content": thought},
                        {"role": "tool", "content": result},
                    ]
                ranking = [[f"d{(n + k) % 200}", 100.0 - k] for k in range(100)]
                record = {"query_id": q, "query": text, "ranking": ranking, "steps": steps,
                          "usage": {"calls": turns}, "seconds": 1.0, "error": None}  # fmt: skip
                f.write(json.dumps(record) + "\n")
                g.write(json.dumps({"query_id": q, "NDCG@10": (n * (r + 1)) % 7 / 7}) + "\n")
        folders.append(folder)
    return folders


BYTES_PER_QUERY_RUN = 12_000  # 876 queries x 5 runs stay under 53 MB of embedded data


def test_embedded_data_stays_small_per_query(tmp_path):
    queries, runs = 120, 3
    folders = _synthetic_runs(tmp_path, queries, runs)
    raw = sum((f / "data" / "queries.jsonl").stat().st_size for f in folders)
    c = compare_runs(folders)
    size = len(embed_json(report_data(c)).encode())
    per_query_run = size / (queries * runs)
    assert per_query_run < BYTES_PER_QUERY_RUN, per_query_run
    assert raw / (queries * runs) > 10 * per_query_run  # the traces were large: slimming works


# ---- charts ---------------------------------------------------------------------------------

LABELS = [
    "none bm25q",
    "hyde bm25q qwen2.5-coder-0.5b p:3fa2c1e",
    "query2doc bm25q qwen2.5-coder-0.5b p:3d5872b",
    "lamer bm25q qwen2.5-coder-0.5b p:aaaaaaa",
    "tool-search bm25q gpt-4o-mini p:1234567 rerank:llm-listwise",
    "search-o1 bm25q qwen2.5-coder-0.5b p:9999999",
]


def test_task_bars_fit_the_axis_to_the_data_and_mark_the_reference():
    tasks = ["Biology", "Bioinformatics", "Medical-Sciences"]
    means = {label: {t: 0.62 + 0.01 * i + 0.02 * j for j, t in enumerate(tasks)}
             for i, label in enumerate(LABELS)}  # fmt: skip
    fig = task_bars_figure(means, tasks, "NDCG@10", reference=LABELS[0])
    ax = fig.axes[0]
    lowest = min(v * 100 for row in means.values() for v in row.values())
    bottom, top = ax.get_ylim()
    assert 0 < bottom < lowest and top > max(v * 100 for r in means.values() for v in r.values())
    assert top - bottom < 30  # a few points of difference fill the chart
    assert "not 0" in ax.get_ylabel()
    reference = [means[LABELS[0]][t] * 100 for t in tasks]
    reference.append(sum(reference) / len(reference))
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert [p.get_y() + p.get_height() for p in hatched] == pytest.approx(reference)
    for i, bar in enumerate(hatched):  # each in its own task's slot, as wide as its group's
        assert i - 0.5 < bar.get_x() < bar.get_x() + bar.get_width() < i + 0.5
    lines = ax.collections[0].get_segments()  # the dashed marker across each group
    assert [segment[0][1] for segment in lines] == pytest.approx(reference)
    renderer = fig.canvas.get_renderer()  # the legend sits under the task names
    legend = ax.get_legend().get_window_extent(renderer)
    assert all(legend.y1 < t.get_window_extent(renderer).y0 for t in ax.get_xticklabels())
    low = task_bars_figure({"a": {"t": 0.05}, "b": {"t": 0.4}}, ["t"], "NDCG@10")
    assert low.axes[0].get_ylim()[0] == 0 and "not 0" not in low.axes[0].get_ylabel()


@pytest.mark.slow
def test_cost_labels_stay_inside_the_axes_and_apart():
    points = {label: (1000.0 + 7 * i, 0.50 + 0.002 * (i % 3)) for i, label in enumerate(LABELS)}
    fig = cost_figure(points, "LLM tokens (in + out)", "Avg NDCG@10", reference=LABELS[0])
    ax = fig.axes[0]
    area = ax.get_window_extent(fig.canvas.get_renderer())
    boxes = label_boxes(fig)
    assert len(boxes) == len(LABELS)
    for box in boxes:
        assert area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1
    assert not label_boxes_overlap(fig)
    assert ax.get_ylim()[0] >= -1 and ax.get_xlim()[0] > 0  # nothing impossible on the axes


def test_the_page_s_svg_is_the_png_s_figure_with_its_own_ids(demo):
    c = compare_runs([demo["none"], demo["o1"]])
    assert reference_run(c) == c.baseline  # "none": the no-LLM run
    llm_first = compare_runs([demo["o1"], demo["none"]])
    assert reference_run(llm_first) == llm_first.labels[1] != llm_first.baseline
    svg = svg_text(task_bars_figure(c.means, c.tasks, c.metric, c.baseline), "tasks-chart")
    assert svg.startswith("<svg") and "<metadata" not in svg
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert ids and all(i.startswith("tasks-chart-") for i in ids)
    refs = re.findall(r'(?:href="|url\()#([^")]+)', svg)
    assert refs and set(refs) <= set(ids)
