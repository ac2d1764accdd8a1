import hashlib
import re
from pathlib import Path

import pytest

from agents.graphs.generate_retrieve import format_docs
from eval.datasets import R2MED_KINDS, R2MED_TASKS
from prompts import (
    MAIN_VARIANTS,
    PROMPTS_DIR,
    PromptBook,
    PromptError,
    check_placeholders,
    load_prompt,
    override_key,
    parse_prompt_overrides,
    placeholder_rules,
    prompt_family,
    prompt_names,
)

REPO = Path(__file__).resolve().parents[2]

GAR = ("hyde", "query2doc", "lamer")
VALUES = {"query": "A 3-year-old with fever and a rash.", "docs": "\n[1]. d", "examples": "E"}


@pytest.mark.parametrize("name", GAR)
@pytest.mark.parametrize("task", R2MED_TASKS)
def test_every_task_has_a_prompt_that_renders(name, task):
    prompt = load_prompt(name, task=task)
    assert prompt.name in (f"{name}/{task}", f"{name}/{R2MED_KINDS[task]}")
    text = prompt.render(**VALUES)
    assert VALUES["query"] in text
    assert "{" not in text


@pytest.mark.parametrize("name", GAR)
@pytest.mark.parametrize("kind", ["exam", "case", "similar-case"])
def test_shared_kinds_resolve_without_a_task(name, kind):
    assert load_prompt(name, kind).name == f"{name}/{kind}"


def test_post_prompts_are_per_task_with_our_generic_default():
    # R2MED names the domain in post prompts; tasks outside R2MED get our generic "query" text.
    assert "Medical Science post" in load_prompt("hyde", task="medical-sciences").text
    assert load_prompt("hyde", task="scifact").name == "hyde/default"
    assert "help answer the query" in load_prompt("hyde", "post").text


def test_texts_match_r2med_exactly():
    # Spot checks against R2MED's src/instrcution.py, with {TEXT}/{PASSAGE} renamed.
    assert load_prompt("hyde", "exam").text == (
        "Please write a passage to help answer the Medical Exam.\nExam: {query}\nPassage: "
    )
    assert load_prompt("lamer", task="Biology").text == (
        "Give a Biology post and its possible relevant passages (most of these passages are "
        "wrong). Please write a correct passage that help answer the post.\nJust output the "
        "correct passage, don't explanation.\n\nPost: {query}\n\nPossible Relevant Passages: {docs}"
    )
    assert load_prompt("query2doc", task="Biology").text.startswith(
        "Write a passage that help answer the Biology post.\n\n###Examples:###\n{examples}"
    )


@pytest.mark.parametrize("name", GAR)
@pytest.mark.parametrize("task", ["PMC-Clinical", "IIYi-Clinical"])
def test_similar_case_prompts_ask_for_a_similar_case(name, task):
    text = load_prompt(name, task=task).text
    assert "similar case" in text
    assert "passage" not in text.lower()


def test_reason_is_one_prompt_for_every_kind():
    names = {load_prompt("reason", task=t).name for t in R2MED_TASKS}
    assert names == {"reason/default"}
    text = load_prompt("reason").render(query="Q")
    assert text.startswith("Q\n\nInstructions:\n1. Identify the essential problem.\n")


def test_lamer_renders_with_docs():
    docs = format_docs(["first doc", "second\ndoc"])
    text = load_prompt("lamer", "exam").render(query="Q", docs=docs)
    assert text.endswith("Possible Relevant Passages: \n[1]. first doc\n[2]. second doc")


def test_format_docs_cuts_each_doc_to_512_words():
    long = " ".join(f"w{i}" for i in range(600))
    out = format_docs([long, "short  text\n\nhere"])
    first, second = out.split("\n")[1:]
    assert first.startswith("[1]. w0 ") and len(first.split()) == 1 + 512
    assert first.endswith(" w511")
    assert second == "[2]. short text here"
    assert format_docs([]) == ""
    assert format_docs(["a b c"], max_words=2) == "\n[1]. a b"


def test_sha256_is_of_the_file_bytes():
    prompt = load_prompt("hyde", "exam")
    assert prompt.path == PROMPTS_DIR / "hyde" / "exam.txt"
    assert prompt.sha256 == hashlib.sha256(prompt.path.read_bytes()).hexdigest()


def test_overrides_take_precedence_and_change_the_hash(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("Answer this exam: {query}")
    builtin = load_prompt("hyde", "exam")

    for key in ("hyde/exam", "hyde", "hyde/MedQA-Diag"):
        prompt = load_prompt("hyde", task="MedQA-Diag", overrides={key: mine})
        assert prompt.path == mine
        assert prompt.render(query="Q") == "Answer this exam: Q"
        assert prompt.sha256 != builtin.sha256

    # The most specific override wins; other kinds keep the built-in text.
    other = tmp_path / "other.txt"
    other.write_text("{query}")
    both = {"hyde": other, "hyde/exam": mine}
    assert load_prompt("hyde", "exam", both).path == mine
    assert load_prompt("hyde", "case", both).path == other
    assert load_prompt("hyde", "case", {"hyde/exam": mine}).path == PROMPTS_DIR / "hyde/case.txt"


def test_parse_prompt_overrides(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("{query}")
    lamer = tmp_path / "lamer.txt"
    lamer.write_text("{query} {docs}")
    assert parse_prompt_overrides([f"hyde/exam={mine}", f"lamer={lamer}"]) == {
        "hyde/exam": mine,
        "lamer": lamer,
    }
    assert parse_prompt_overrides([f"hyde/medqa-diag={mine}"]) == {"hyde/MedQA-Diag": mine}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("hyde/exam", "expected NAME=path"),
        ("=x.txt", "expected NAME=path"),
        ("hyde=", "expected NAME=path"),
        ("hyd=MINE", "unknown prompt 'hyd'"),
        ("hyde/exams=MINE", "'exams' is not a kind"),
        # never loaded: "chat" is a helper prompt of the search agents, not of hyde
        ("hyde/chat=MINE", r"or a helper prompt of hyde \(it has none\)"),
        ("search-o1/answer=MINE", r"helper prompt of search-o1 \(search-o1/chat, search-o1/doc"),
        ("hyde/exam=missing.txt", "no such file"),
    ],
)
def test_bad_override_specs_are_clear_errors(tmp_path, spec, message):
    mine = tmp_path / "mine.txt"
    mine.write_text("{query}")
    with pytest.raises(PromptError, match=message):
        parse_prompt_overrides([spec.replace("MINE", str(mine))])


def test_duplicate_override_is_an_error(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("{query}")
    with pytest.raises(PromptError, match="given twice"):
        parse_prompt_overrides([f"hyde={mine}", f"hyde={mine}"])


def test_missing_override_file_at_load_is_an_error(tmp_path):
    with pytest.raises(PromptError, match="cannot read prompt hyde/exam"):
        load_prompt("hyde", "exam", {"hyde/exam": tmp_path / "gone.txt"})


def test_malformed_override_fails_at_load(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("Use {query} and a lone { brace")
    with pytest.raises(PromptError, match="malformed"):
        load_prompt("hyde", "exam", {"hyde": bad})
    bad.write_text("positional {}")
    with pytest.raises(PromptError, match="positional"):
        load_prompt("hyde", "exam", {"hyde": bad})


def test_missing_placeholder_value_names_prompt_and_placeholder():
    with pytest.raises(
        PromptError, match=r"lamer/exam needs a value for placeholder\(s\) \{docs\}"
    ):
        load_prompt("lamer", "exam").render(query="Q")
    with pytest.raises(PromptError, match=r"query2doc/case .*\{examples\}"):
        load_prompt("query2doc", "case").render(query="Q")


def test_unknown_prompt_name_lists_known_ones():
    with pytest.raises(
        PromptError,
        match="known prompts: diver-pointwise, grouprank, hyde, insertrank, lamer, query2doc, "
        "query2doc-examples, rank1, rank1-query, reason, reasonrank, rerank-listwise, "
        "rerank-pointwise, search-o1, search-r1, system",
    ):
        load_prompt("hide", "exam")


def test_prompt_names_lists_every_file():
    names = prompt_names()
    assert "hyde/exam" in names and "reason/default" in names and "lamer/Biology" in names
    assert len(names) == len(list(Path(PROMPTS_DIR).glob("*/*.txt")))


# The placeholder rules come from the built-in files; these pin what they derive to.
RULES = {
    "hyde": ({"query"}, {"query"}),
    "lamer": ({"query", "docs"}, {"query", "docs"}),
    "query2doc": ({"query", "examples"}, {"query"}),  # {examples} is one text for the run
    "query2doc-examples": (set(), set()),
    "reason": ({"query"}, {"query"}),
    "search-o1": ({"query", "max_searches"}, {"query"}),
    "search-o1/qwq": ({"query", "max_searches"}, {"query"}),  # Search-o1's QwQ task prompt
    "search-o1/documents": (
        {"prev_reasoning", "search_query", "documents"},
        {"prev_reasoning", "search_query", "documents"},
    ),
    "search-o1/chat": ({"observation"}, {"observation"}),
    "search-r1": ({"query"}, {"query"}),
    "search-r1/chat": ({"observation"}, {"observation"}),
    "search-r1/final": (set(), set()),
    "tool-search": ({"query", "max_searches"}, {"query"}),
    "tool-search/nudge": (set(), set()),
    "tool-search/read": (set(), set()),
    "tool-search/search": (set(), set()),
    "tool-search/submit": (set(), set()),
    "system": (set(), set()),
    "system/reason": (set(), set()),
    "insertrank": ({"num", "query", "score_name"}, {"num", "query", "score_name"}),
    "insertrank/rank": ({"num", "query", "score_name"}, {"num", "query", "score_name"}),
    "insertrank/passage": (
        {"passage", "rank", "score", "score_name"},
        {"passage", "rank", "score", "score_name"},
    ),
    "insertrank/received": ({"rank"}, {"rank"}),
    "insertrank/system": ({"score_name"}, {"score_name"}),
    "insertrank/ready": (set(), set()),
    "rerank-listwise": ({"num", "query"}, {"num", "query"}),
    "rerank-listwise/rank": ({"num", "query"}, {"num", "query"}),
    "rerank-listwise/passage": ({"passage", "rank"}, {"passage", "rank"}),
    "rerank-listwise/received": ({"rank"}, {"rank"}),
    "rerank-listwise/ready": (set(), set()),
    "rerank-listwise/system": (set(), set()),
    "reasonrank": ({"num", "query"}, {"num", "query"}),
    "reasonrank/rank": ({"num", "query"}, {"num", "query"}),
    "reasonrank/passage": ({"passage", "rank"}, {"passage", "rank"}),
    "reasonrank/system": (set(), set()),
    "rank1": ({"query", "passage"}, {"query", "passage"}),
    "rank1-query": ({"query"}, {"query"}),
    "grouprank": ({"num", "query", "passages"}, {"num", "query", "passages"}),
    "grouprank/passage": ({"passage", "rank"}, {"passage", "rank"}),
    "grouprank/system": (set(), set()),
    "diver-pointwise": ({"query", "passage"}, {"query", "passage"}),
    **{
        name: ({"query", "passage"}, {"query", "passage"})
        for name in (
            "rerank-pointwise",
            "rerank-pointwise/grade",
            "rerank-pointwise/reason",
            "rerank-pointwise/reason-grade",
        )
    },  # fmt: skip
}


def test_rules_derived_from_the_builtin_files():
    rules = placeholder_rules()
    assert {f: (set(r.allowed), set(r.required)) for f, r in rules.items()} == RULES
    assert len(rules["hyde"].builtins) == 7 and rules["search-o1/chat"].builtins == (
        "search-o1/chat",
    )


@pytest.mark.parametrize("name", prompt_names())
def test_every_builtin_passes_its_family_check(name):
    family, variant = name.split("/")
    prompt = load_prompt(family, variant)
    assert prompt.name == name and prompt.path == PROMPTS_DIR / f"{name}.txt"
    check_placeholders(prompt)
    # A copy of the file is accepted as an override of itself and, for a main prompt, of the
    # whole family ("--prompt hyde=copy-of-hyde-Biology.txt").
    assert parse_prompt_overrides([f"{name}={prompt.path}"]) == {name: prompt.path}
    if variant in MAIN_VARIANTS:
        assert prompt_family(name) == family
        assert parse_prompt_overrides([f"{family}={prompt.path}"]) == {family: prompt.path}


def test_no_builtin_starts_with_a_bom():
    # The hash of a built-in is the sha256sum of its file only if nothing is stripped on read.
    assert not [n for n in prompt_names() if (PROMPTS_DIR / f"{n}.txt").read_bytes()[:3] == BOM]


def override_error(tmp_path: Path, key: str, text: str) -> str:
    """The one-line error parse_prompt_overrides gives for ``key`` set to a file with ``text``."""
    path = tmp_path / "mine.txt"
    path.write_text(text)
    with pytest.raises(PromptError) as info:
        parse_prompt_overrides([f"{key}={path}"])
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    return message


@pytest.mark.parametrize("key", ["hyde", "hyde/exam", "hyde/MedQA-Diag", "reason", "search-r1"])
def test_override_without_query_is_refused_at_parse(tmp_path, key):
    # Without {query} every query would get the same prompt.
    message = override_error(tmp_path, key, "Write a passage about medicine.\nPassage: ")
    assert "lacks placeholder(s) {query}" in message and f"prompt {key} " in message


def test_missing_per_query_inputs_are_named(tmp_path):
    assert "lacks placeholder(s) {docs}" in override_error(tmp_path, "lamer/exam", "Q: {query}")
    message = override_error(tmp_path, "search-o1/documents", "{documents}")
    assert "lacks placeholder(s) {prev_reasoning}, {search_query}" in message
    message = override_error(tmp_path, "search-o1/chat", "Results follow.")
    assert "lacks placeholder(s) {observation}" in message


def test_unknown_placeholder_is_named_with_the_allowed_ones(tmp_path):
    message = override_error(tmp_path, "lamer", "Q: {query}\nDocs: {docs}\nNotes: {notes}")
    assert "unknown placeholder(s) {notes}; lamer prompts take: {docs}, {query}" in message
    # hyde is rendered with docs="" too, but its prompts never show documents
    message = override_error(tmp_path, "hyde/case", "{query} {docs}")
    assert "unknown placeholder(s) {docs}; hyde prompts take: {query}" in message
    # search-r1's agent has no max_searches to give its prompt
    message = override_error(tmp_path, "search-r1", "{query} (at most {max_searches} searches)")
    assert "unknown placeholder(s) {max_searches}" in message
    # attribute access would send "<built-in method upper ...>": only plain names are filled
    assert "has placeholder {query.upper}: only plain {name}" in override_error(
        tmp_path, "hyde", "{query.upper}"
    )


@pytest.mark.parametrize("key", ["system", "search-r1/final", "query2doc-examples"])
def test_texts_without_placeholders_take_none(tmp_path, key):
    message = override_error(tmp_path, key, "Answer {query} carefully.")
    assert "unknown placeholder(s) {query}" in message and "prompts take: none" in message
    # they are rendered like every other file: a doubled brace is the escape
    assert "write {{ and }} for literal braces" in message


@pytest.mark.parametrize("name", prompt_names())
def test_every_builtin_renders_to_its_own_bytes(name):
    # One escape rule for every file: a file is what str.format makes of it. Only GroupRank's
    # user prompt holds doubled braces (its JSON example, rerank_groupwise.py L79, a
    # str.format template there too), so each renders to the file's bytes with the
    # placeholders filled and those braces single.
    prompt = load_prompt(*name.split("/"))
    values = {p: f"<{p}>" for p in prompt.placeholders}
    expected = prompt.path.read_bytes().decode("utf-8")
    for p in prompt.placeholders:
        expected = expected.replace("{" + p + "}", f"<{p}>")
    if name == "grouprank/default":
        expected = expected.replace("{{", "{").replace("}}", "}")
    else:
        assert "{{" not in expected and "}}" not in expected
    assert prompt.render(**values) == expected


def test_a_doubled_brace_is_one_brace_in_every_kind_of_file(tmp_path):
    path = tmp_path / "braces.txt"
    path.write_text('Reply as JSON: {{"ids": [...]}}')
    for key in ("system", "search-r1/final", "tool-search/submit", "query2doc-examples"):
        family, _, variant = key.partition("/")
        prompt = load_prompt(family, variant or "default", {key: path})
        assert prompt.render() == 'Reply as JSON: {"ids": [...]}'
        # the recorded hash is of the template, before rendering: the file's sha256sum
        assert prompt.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text("Answer {query} as JSON: {{...}}")
    assert load_prompt("hyde", overrides={"hyde": path}).render(query="Q") == (
        "Answer Q as JSON: {...}"
    )


def test_run_constants_may_be_left_out(tmp_path):
    # The zero-shot "textbook" prompt of docs/sweep-scifact.toml replaces hyde's and query2doc's.
    textbook = REPO / "docs" / "sweep-prompts" / "textbook.txt"
    assert parse_prompt_overrides([f"hyde={textbook}", f"query2doc={textbook}"])
    no_limit = tmp_path / "o1.txt"
    no_limit.write_text("Search as needed, then answer.\n\nQuestion: {query}")
    assert parse_prompt_overrides([f"search-o1={no_limit}"]) == {"search-o1": no_limit}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Use {query} and a lone } brace", "malformed: Single '}'"),
        ("Use {query} and a lone { brace", "malformed"),
        ("Use {query", "malformed"),
        ("{} {query}", "positional placeholder"),
        ("{0} {query}", "positional placeholder"),
        ("{query!x}", r"placeholder \{query!x\}, which fails to render .*Unknown conversion"),
        ("{query:{width}}", r"placeholder \{query:\{width\}\}, which fails to render"),
        ("{query:d}", r"placeholder \{query:d\}, which fails to render .*format code 'd'"),
        ("{query:>{width}}", r"placeholder \{query:>\{width\}\}"),
        ("{query!r}", r"placeholder \{query!r\}: only plain \{name\} fields"),
        ("{query:>20}", r"placeholder \{query:>20\}: only plain"),
        ("{query} {docs[0]}", r"placeholder \{docs\[0\]\}: only plain"),
        ("{ query}", r"placeholder \{ query\}: only plain"),
    ],
)
def test_malformed_override_is_refused_at_parse(tmp_path, text, message):
    assert re.search(message, override_error(tmp_path, "hyde", text))


BOM = "\ufeff".encode()


def test_bom_is_stripped_and_not_hashed(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"Answer: {query}")
    with_bom = tmp_path / "bom.txt"
    with_bom.write_bytes(BOM + b"Answer: {query}")
    assert parse_prompt_overrides([f"hyde={with_bom}"]) == {"hyde": with_bom}
    prompt = load_prompt("hyde", "exam", {"hyde": with_bom})
    assert prompt.text == "Answer: {query}"
    assert prompt.render(query="Q") == "Answer: Q"
    # the hash is of the text sent, so it equals the same prompt saved without a BOM
    assert prompt.sha256 == load_prompt("hyde", "exam", {"hyde": plain}).sha256
    assert prompt.sha256 == hashlib.sha256(b"Answer: {query}").hexdigest()
    # only a leading BOM is an encoding mark; one inside the text is kept
    with_bom.write_bytes(b"Answer: " + BOM + b"{query}")
    assert "\ufeff" in load_prompt("hyde", "exam", {"hyde": with_bom}).text


def test_bad_override_fails_in_load_prompt_too(tmp_path):
    # load_prompt checks whatever it reads, for callers that skip parse_prompt_overrides.
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder")
    with pytest.raises(
        PromptError, match=r"prompt hyde/MedQA-Diag \(.*bad\.txt\) lacks .*\{query\}"
    ):
        load_prompt("hyde", task="MedQA-Diag", overrides={"hyde": bad})
    with pytest.raises(PromptError, match=r"prompt hyde/scifact .* lacks"):
        load_prompt("hyde", task="scifact", overrides={"hyde": bad})


def test_book_records_which_overrides_it_read(tmp_path):
    # What a run needs to refuse an override that no prompt of it reads (a LameR prompt
    # given to a HyDE run, an exam prompt for a run without exam tasks).
    mine = tmp_path / "mine.txt"
    mine.write_text("{query}")
    docs = tmp_path / "docs.txt"
    docs.write_text("{query} {docs}")
    overrides = {"hyde/exam": mine, "lamer": docs, "system/reason": tmp_path / "sys.txt"}
    (tmp_path / "sys.txt").write_text("Reason.")
    book = PromptBook(overrides, "MedQA-Diag")
    book.get("hyde")
    book.get("system")
    assert book.overrides_read == {"hyde/exam"}
    book.get("system", "reason")
    assert book.overrides_read == {"hyde/exam", "system/reason"}
    biology = PromptBook(overrides, "Biology")
    assert biology.get("hyde").name == "hyde/Biology" and biology.overrides_read == set()
    assert override_key("lamer", overrides=overrides, task="Biology") == "lamer"
    assert override_key("hyde", overrides=overrides, task="MedQA-Diag") == "hyde/exam"
    assert override_key("hyde", overrides=overrides, task="Biology") is None
