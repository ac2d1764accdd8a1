import hashlib
from pathlib import Path

import pytest

from eval.datasets import R2MED_KINDS, R2MED_TASKS
from prompts import (
    PROMPTS_DIR,
    PromptError,
    format_docs,
    load_prompt,
    parse_prompt_overrides,
    prompt_names,
)

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
    assert parse_prompt_overrides([f"hyde/exam={mine}", f"lamer={mine}"]) == {
        "hyde/exam": mine,
        "lamer": mine,
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
        match="known prompts: hyde, lamer, query2doc, query2doc-examples, reason, search-o1, "
        "search-r1, system",
    ):
        load_prompt("hide", "exam")


def test_prompt_names_lists_every_file():
    names = prompt_names()
    assert "hyde/exam" in names and "reason/default" in names and "lamer/Biology" in names
    assert len(names) == len(list(Path(PROMPTS_DIR).glob("*/*.txt")))
