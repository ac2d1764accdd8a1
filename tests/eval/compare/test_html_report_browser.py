"""The comparison's report.html, opened offline in headless Chromium (Selenium) and checked
from the rendered DOM: leaderboard, charts, every query's row, the filters, sorting, the
trajectories with their relevant documents, a screenshot that is not blank, and no network.

The runs are real: BM25 (`--agent none`) and tool-search with a scripted model, on two tasks
made of the demo: `demo` itself (all 15 queries) and `demo-exam`, a copy holding only its
board-exam queries q06-q10 under the same ids, so rows are told apart by task and query.
Debian's chromium and chromedriver are used (see tests/browser.py), found on PATH or in
/usr/bin; nothing is installed here (.ci/run installs them). Where either is missing the
browser tests skip with the reason, and fail with it under CI=true (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

import tests.browser
from agents.commands.run import main as run_main
from agents.llm import scripted
from agents.llm.scripted import Reply
from eval.compare.__main__ import main as compare_main
from eval.datasets import DEMO_DIR, load_tasks
from eval.records import unpack_record
from tests.browser import find_chromium, start_chromium

EXAM = [f"q{i:02d}" for i in range(6, 11)]  # the demo's board-exam questions
READY_S = 60
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


def _demo_exam(folder: Path) -> Path:
    """The demo's corpus with only its exam queries (and their qrels), as task "demo-exam"."""
    folder.mkdir(parents=True)
    shutil.copy(DEMO_DIR / "corpus.jsonl", folder / "corpus.jsonl")
    for name, key in (("query.jsonl", "id"), ("qrels.jsonl", "q_id")):
        lines = (DEMO_DIR / name).read_text().splitlines()
        kept = [line for line in lines if json.loads(line)[key] in EXAM]
        (folder / name).write_text("\n".join(kept) + "\n")
    return folder


def _tool_model(queries: list[str]):
    """tool-search's scripted model: searches the question, then its first words, then
    submits the first search's top 3 in reverse order (so it scores unlike BM25)."""

    def respond(messages: list[dict], params: dict) -> Reply:
        question = next(q for q in queries if q in messages[0]["content"])
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        if not results:
            return Reply("Search the question.", tool_calls=[("search", {"query": question})])
        if len(results) == 1:
            short = " ".join(question.split()[:8])
            return Reply("Narrow it down.", tool_calls=[("search", {"query": short, "k": 5})])
        top = [hit["id"] for hit in results[0][:3]][::-1]
        return Reply("These answer it.", tool_calls=[("submit", {"doc_ids": top})])

    return respond


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report")
    dataset = f"demo,{_demo_exam(root / 'data' / 'demo-exam')}"
    cache = root / "cache"
    tasks = {t.name: t for t in load_tasks(dataset, cache)}
    assert list(tasks) == ["demo", "demo-exam"]
    common = ["--dataset", dataset, "--runs-dir", str(root / "runs"), "--cache-dir", str(cache),
              "--quiet"]  # fmt: skip
    assert run_main(["--agent", "none", "--run-name", "bm25", *common]) == 0
    scripted.install(_tool_model([q for t in tasks.values() for q in t.queries.values()]))
    argv = ["--agent", "tool-search", "--model", "scripted/report", "--run-name", "tools"]
    assert run_main([*argv, *common]) == 0
    folders = [root / "runs" / "bm25", root / "runs" / "tools"]
    out = root / "comparison"
    assert compare_main([*map(str, folders), "--out", str(out)]) == 0
    html = out / "report.html"
    assert html.is_file(), f"eval.compare wrote no report.html; it wrote {sorted(out.iterdir())}"
    summary = json.loads((out / "comparison.json").read_text())
    labels = list(summary["runs"])
    records = {}  # label -> task -> query id -> its record in queries.jsonl
    for label, folder in zip(labels, folders, strict=True):
        records[label] = {}
        for task in tasks:
            lines = (folder / task / "queries.jsonl").read_text().splitlines()
            records[label][task] = {
                r["query_id"]: r for r in map(unpack_record, map(json.loads, lines))
            }
    return {
        "html": html,
        "url": html.resolve().as_uri(),
        "labels": labels,
        "baseline": summary["baseline"],
        "tasks": tasks,
        "records": records,
        "root": root,
    }


def test_finding_chromium_installs_nothing_and_names_what_is_missing(tmp_path, monkeypatch):
    import subprocess

    def refuse(*args, **kwargs):
        raise AssertionError(f"tests/browser.py ran a command: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.delenv("R2MED_CHROMIUM", raising=False)
    monkeypatch.delenv("R2MED_CHROMEDRIVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(tests.browser, "FALLBACK_DIR", tmp_path / "usr-bin")
    none = find_chromium()
    assert not none.ok and (none.browser, none.driver) == (None, None)
    assert none.reason.startswith("chromium and chromedriver not found on PATH or in ")
    assert "apt-get install chromium chromium-driver" in none.reason
    with pytest.raises(ValueError, match="installs nothing"):
        find_chromium(install=True)

    (tmp_path / "usr-bin").mkdir()  # Debian's place, off PATH: found there
    for name in ("chromium", "chromedriver"):
        (tmp_path / "usr-bin" / name).write_text("#!/bin/sh\n")
        (tmp_path / "usr-bin" / name).chmod(0o755)
    found = find_chromium()
    assert found.ok and found.browser == str(tmp_path / "usr-bin" / "chromium")
    monkeypatch.setenv("R2MED_CHROMEDRIVER", "no-such-driver")  # named, not found: said so
    named = find_chromium()
    assert not named.ok and named.reason.startswith("chromedriver not found")
    assert "no-such-driver ($R2MED_CHROMEDRIVER) not found" in named.reason


@pytest.fixture(scope="module")
def driver():
    chromium = find_chromium()
    if not chromium.ok:  # under CI=true this fails, naming what is missing (tests/conftest.py)
        pytest.skip(f"no headless browser for the report: {chromium.reason}")
    browser = start_chromium(chromium)
    yield browser
    browser.quit()


@pytest.fixture
def page(driver, report):
    """The report freshly loaded and rendered, its logs holding only this load onwards."""
    driver.get_log("performance")  # reading a log empties it
    driver.get_log("browser")
    driver.get(report["url"])
    try:
        WebDriverWait(driver, READY_S).until(
            lambda d: d.execute_script("return document.body && document.body.dataset.ready") == "1"
        )
    except TimeoutException:
        errors = [e["message"] for e in driver.get_log("browser")]
        pytest.fail(f"body[data-ready='1'] not set within {READY_S} s; console: {errors}")
    return driver


def rows(driver) -> list[dict[str, Any]]:
    """Every tr.query in document order: task, query id, hidden, cells by run."""
    return driver.execute_script(
        """return [...document.querySelectorAll('#query-table tr.query')].map(r => ({
            task: r.dataset.task, query: r.dataset.query, hidden: r.hidden,
            cells: Object.fromEntries([...r.querySelectorAll('td[data-run]')].map(
                td => [td.dataset.run, td.textContent.trim()]))}))"""
    )


def shown(driver) -> set[tuple[str, str]]:
    return {(r["task"], r["query"]) for r in rows(driver) if not r["hidden"]}


def every_query(report) -> set[tuple[str, str]]:
    return {(name, q) for name, task in report["tasks"].items() for q in task.queries}


def open_detail(driver, task: str, query: str):
    row = driver.find_element(
        By.CSS_SELECTOR, f'tr.query[data-task="{task}"][data-query="{query}"]'
    )
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.click()
    selector = f'tr.detail[data-task="{task}"][data-query="{query}"]'
    WebDriverWait(driver, 10).until(
        lambda d: any(e.is_displayed() for e in d.find_elements(By.CSS_SELECTOR, selector))
    )
    return row, driver.find_element(By.CSS_SELECTOR, selector)


# ---- the page ---------------------------------------------------------------------------


@pytest.mark.slow
def test_leaderboard_has_every_run_and_marks_the_baseline(page, report):
    table = page.find_element(By.CSS_SELECTOR, "section#leaderboard table")
    for label in report["labels"]:
        row = table.find_element(By.CSS_SELECTOR, f'tr[data-run="{label}"]')
        assert row.is_displayed()
        classes = (row.get_attribute("class") or "").split()
        assert ("baseline" in classes) == (label == report["baseline"]), (label, classes)
    assert report["baseline"] == report["labels"][0]  # the first run given
    for section in ("tasks-chart", "cost-chart"):
        svg = page.find_element(By.CSS_SELECTOR, f"section#{section} svg")
        assert svg.is_displayed() and svg.size["width"] > 100 and svg.size["height"] > 50


@pytest.mark.slow
def test_every_query_of_every_task_has_a_row_with_a_cell_per_run(page, report):
    options = page.find_elements(By.CSS_SELECTOR, "select#task-filter option")
    values = [o.get_attribute("value") for o in options]
    assert values[0] == "" and sorted(values[1:]) == sorted(report["tasks"])
    all_rows = rows(page)
    keys = [(r["task"], r["query"]) for r in all_rows]
    assert len(keys) == len(set(keys)) and set(keys) == every_query(report)
    assert {q for t, q in keys if t == "demo"} == set(report["tasks"]["demo"].queries)
    for r in all_rows:
        assert not r["hidden"]
        assert set(r["cells"]) == set(report["labels"]), r


@pytest.mark.slow
def test_filter_by_task_then_all_again(page, report):
    select = Select(page.find_element(By.ID, "task-filter"))
    for task in report["tasks"]:
        select.select_by_value(task)
        expected = {(task, q) for q in report["tasks"][task].queries}
        WebDriverWait(page, 5).until(lambda d, want=expected: shown(d) == want)
    select.select_by_value("")
    WebDriverWait(page, 5).until(lambda d: shown(d) == every_query(report))


def _matching(report, word: str) -> set[tuple[str, str]] | None:
    """The queries whose text holds ``word``, or None when it matters whether as a substring
    or as a whole word (whichever the page does, the words used here match the same)."""
    texts = {
        (n, q): t.lower() for n, task in report["tasks"].items() for q, t in task.queries.items()
    }
    found = {key for key, text in texts.items() if word in text}
    whole = {key for key, text in texts.items() if re.search(rf"\b{word}\b", text)}
    return found if found == whole else None


def _words(report, query_id: str | None = None) -> list[str]:
    """Words (6+ letters) of one demo query, or of every query, that _matching accepts."""
    tasks = report["tasks"].values()
    texts = [report["tasks"]["demo"].queries[query_id]] if query_id else [
        text for task in tasks for text in task.queries.values()]  # fmt: skip
    words = sorted({w for t in texts for w in re.findall(r"[a-z]{6,}", t.lower())})
    return [w for w in words if _matching(report, w) is not None]


def _rare_word(report, query_id: str) -> str:
    return min(_words(report, query_id), key=lambda w: len(_matching(report, w)))


def _common_word(report) -> str:
    """A word several queries hold, but not all."""
    n = len(every_query(report))
    usable = [w for w in _words(report) if 3 <= len(_matching(report, w)) < n]
    return max(usable, key=lambda w: len(_matching(report, w)))


@pytest.mark.slow
def test_filter_by_text_and_by_both(page, report):
    box = page.find_element(By.ID, "text-filter")
    word = _rare_word(report, "q02")  # a post, only in the demo task
    assert ("demo", "q02") in _matching(report, word)
    box.send_keys(word.upper())  # the filter ignores case
    WebDriverWait(page, 5).until(lambda d: shown(d) == _matching(report, word))

    box.clear()  # fires no input event; the keys typed next do, with the new value
    common = _common_word(report)
    box.send_keys(common)
    expected = _matching(report, common)
    assert len(expected) >= 3
    WebDriverWait(page, 5).until(lambda d: shown(d) == expected)

    box.clear()
    word = _rare_word(report, "q07")  # an exam question: in both tasks
    box.send_keys(word)
    WebDriverWait(page, 5).until(lambda d: shown(d) == _matching(report, word))
    assert {("demo", "q07"), ("demo-exam", "q07")} <= _matching(report, word)
    Select(page.find_element(By.ID, "task-filter")).select_by_value("demo-exam")
    expected = {key for key in _matching(report, word) if key[0] == "demo-exam"}
    WebDriverWait(page, 5).until(lambda d: shown(d) == expected)
    hidden = [r for r in rows(page) if r["hidden"]]
    assert len(hidden) == len(every_query(report)) - len(expected)


def _number(text: str) -> float | None:
    match = re.search(r"[-+]?\d+(?:\.\d+)?", text)
    return float(match.group()) if match else None


def _run_header(headers: list, label: str):
    """The sortable header of the run's score column: named by data-sort, else by its text."""
    for match in (
        lambda h: h.get_attribute("data-sort") == label,
        lambda h: h.text.split() == label.split(),
    ):
        found = [h for h in headers if match(h)]
        if found:
            return found[0]
    listing = [(h.get_attribute("data-sort"), h.text) for h in headers]
    raise AssertionError(f"no sortable header for run {label!r}: {listing}")


@pytest.mark.slow
def test_clicking_a_run_header_sorts_the_rows_by_that_run(page, report):
    headers = page.find_elements(By.CSS_SELECTOR, "#query-table th[data-sort]")
    assert headers, "no th[data-sort] in #query-table"
    for label in report["labels"]:
        header = _run_header(headers, label)
        orders = []
        for _ in range(2):
            header.click()
            values = [_number(r["cells"][label]) for r in rows(page) if not r["hidden"]]
            assert None not in values, values
            orders.append(values)
        assert len(set(orders[0])) > 1  # the check means something
        assert {tuple(orders[0]), tuple(orders[1])} == {
            tuple(sorted(orders[0])),
            tuple(sorted(orders[0], reverse=True)),
        }, f"{label}: not sorted ascending then descending (or the reverse): {orders}"
    for header in headers:  # every other sortable header sorts without losing a row
        header.click()
        assert sorted((r["task"], r["query"]) for r in rows(page)) == sorted(every_query(report))
    # after sorting, a query still opens its own trajectories, right below its row
    first = rows(page)[0]
    row, detail = open_detail(page, first["task"], first["query"])
    assert page.execute_script("return arguments[0].nextElementSibling", row) == detail
    assert len(detail.find_elements(By.CSS_SELECTOR, "div.trajectory")) == len(report["labels"])


def _relevant_in_top10(report, task: str) -> str:
    """A query of the task with a relevant document in every run's top 10."""
    qrels = report["tasks"][task].qrels
    for q in report["tasks"][task].queries:
        tops = [
            [d for d, _ in report["records"][label][task][q]["ranking"][:10]]
            for label in report["labels"]
        ]
        if all(set(top) & {d for d, g in qrels.get(q, {}).items() if g > 0} for top in tops):
            return q
    raise AssertionError(f"no query of {task} with a relevant doc in every run's top 10")


@pytest.mark.parametrize("task", ["demo", "demo-exam"])
@pytest.mark.slow
def test_clicking_a_query_shows_each_runs_trajectory_with_graded_documents(page, report, task):
    query = _relevant_in_top10(report, task)
    qrels = report["tasks"][task].qrels.get(query, {})
    row, detail = open_detail(page, task, query)
    following = page.execute_script("return arguments[0].nextElementSibling", row)
    assert following == detail, "the detail row does not follow its query row"
    for label in report["labels"]:
        record = report["records"][label][task][query]
        trajectory = detail.find_element(By.CSS_SELECTOR, f'div.trajectory[data-run="{label}"]')
        nodes = [
            s.get_attribute("data-node") for s in trajectory.find_elements(By.CSS_SELECTOR, ".step")
        ]
        assert nodes == [s["node"] for s in record["steps"]], (label, nodes)
        docs = trajectory.find_elements(By.CSS_SELECTOR, "span.doc")
        assert docs, label
        for span in docs:
            doc, classes = span.get_attribute("data-doc"), span.get_attribute("class").split()
            grade = qrels.get(doc, 0)
            if grade > 0:
                assert "relevant" in classes and "not-relevant" not in classes, (label, doc)
                assert span.get_attribute("data-grade") == str(grade), (label, doc)
            else:
                assert "not-relevant" in classes and "relevant" not in classes, (label, doc)
        relevant = trajectory.find_elements(By.CSS_SELECTOR, "span.doc.relevant")
        assert {s.get_attribute("data-doc") for s in relevant} & set(qrels), label
        top10 = trajectory.find_element(By.CSS_SELECTOR, ".final-top10")
        shown_top = [
            s.get_attribute("data-doc") for s in top10.find_elements(By.CSS_SELECTOR, "span.doc")
        ]
        assert shown_top == [d for d, _ in record["ranking"][:10]], label
        assert top10.find_elements(By.CSS_SELECTOR, "span.doc.relevant"), label
    row.click()  # toggles it closed
    WebDriverWait(page, 5).until(lambda d: not detail.is_displayed())


def _not_blank(path: Path) -> None:
    with Image.open(path) as image:
        pixels = image.convert("RGB")
        width, height = pixels.size
        colours = pixels.getcolors(maxcolors=width * height)
    assert width >= 1000 and height >= 700, (path, width, height)
    most = max(count for count, _ in colours)
    assert len(colours) >= 64, f"only {len(colours)} distinct colours in {path}"
    assert most / (width * height) < 0.95, f"one colour covers {most / (width * height):.1%}"


@pytest.mark.slow
def test_screenshots_are_not_blank(page, report, tmp_path):
    """The top of the page (leaderboard, charts) and an opened trajectory, saved as PNG."""
    top = tmp_path / "report-top.png"
    assert page.save_screenshot(str(top))
    _not_blank(top)
    _, detail = open_detail(page, "demo", _relevant_in_top10(report, "demo"))
    page.execute_script("arguments[0].scrollIntoView({block: 'start'})", detail)
    trajectory = tmp_path / "report-trajectory.png"
    assert page.save_screenshot(str(trajectory))
    _not_blank(trajectory)


@pytest.mark.slow
def test_the_page_makes_no_network_request_and_logs_no_error(page, report):
    open_detail(page, "demo-exam", _relevant_in_top10(report, "demo-exam"))
    page.find_element(By.ID, "text-filter").send_keys("pain")
    page.find_elements(By.CSS_SELECTOR, "#query-table th[data-sort]")[0].click()
    resources = page.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert all(u.startswith(LOCAL_SCHEMES) for u in resources), resources
    requested = []
    for entry in page.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    assert requested and requested[0] == report["url"]
    assert all(u.startswith(LOCAL_SCHEMES) for u in requested), requested
    errors = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
