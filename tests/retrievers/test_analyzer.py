"""Tests for retrievers.analyzer.

Every expectation below was checked against pyserini 0.22.1's
``Analyzer(get_lucene_analyzer()).analyze`` (Lucene's StandardTokenizer + EnglishPossessive +
LowerCase + Stop + PorterStem), so a failure here means we drifted from Lucene. The last tests
run pyserini itself (the ``lucene_analyzer`` fixture of tests/conftest.py: it skips, or fails
under CI=true, when pyserini is not installed or there is no Java >= 11; any other ImportError
is an error) over the synthetic task and, as an extra, SciFact.
"""

import json

import pytest

from eval.datasets import load_folder
from retrievers.analyzer import (
    ANALYZER_ID,
    ENGLISH_STOPWORDS,
    analyze,
    analyze_many,
    tokenize,
)

CASES = {
    "possessives": (
        "John's JOHN'S John’s dogs' it's",
        ["john", "john", "john", "dog"],  # "it's" -> "it", a stopword
    ),
    "stopwords": ("as is us a an I", ["us", "i"]),
    "porter": (
        "running connected generalizations possibly biology apology",
        ["run", "connect", "gener", "possibl", "biologi", "apolog"],
    ),
    "porter_more": (
        "hopeful electrical sensitivity formalize",
        ["hope", "electr", "sensit", "formal"],
    ),
    # Lucene's Porter (Porter's C code) keeps -logi -> -log and -bli -> -ble; Snowball does not.
    "porter_departures": (
        "feasibly ably tabled troubling cabling blogging logging logic analogies apologies",
        ["feasibl", "abli", "tabl", "troubl", "cabl", "blog", "log", "logic", "analog", "apolog"],
    ),
    "porter_step1": (
        "agreed feed bleed hoping hopping filing failing sky skies dying lying ties cried happy",
        [
            "agre",
            "feed",
            "bleed",
            "hope",
            "hop",
            "file",
            "fail",
            "sky",
            "ski",
            "dy",
            "ly",
            "ti",
            "cri",
            "happi",
        ],
    ),
    "numbers_and_dots": (
        "3.14 1,000 1.000,5 a.b a:b a,b 3a 3.a a.3 U.S.A. e.g. i.e.",
        # "i.e" stems to "i." (Porter drops the final e); a stopword "a" vanishes twice.
        ["3.14", "1,000", "1.000,5", "a.b", "a:b", "b", "3a", "3", "3", "u.s.a", "e.g", "i."],
    ),
    "mid_punctuation": (
        "1,2,3 1.2.3 a.b.c. x'y'z a''b a..b 1..2 1;2 a;b a·b ‘quoted’ “dq” 1’000",
        [
            "1,2,3",
            "1.2.3",
            "a.b.c",
            "x'y'z",
            "b",
            "b",
            "1",
            "2",
            "1;2",
            "b",
            "a·b",
            "quot",
            "dq",
            "1’000",
        ],
    ),
    "hyphens": ("well-known state-of-the-art", ["well", "known", "state", "art"]),
    "inner_apostrophes": ("can't won't o'clock", ["can't", "won't", "o'clock"]),
    "unicode_letters": (
        # Java lowercases char by char: no final sigma, and "İ" becomes a plain "i".
        "naïve café Σίσυφος ΣΟΦΟΣ İstanbul straße",
        ["naïv", "café", "σίσυφος", "σοφοσ", "istanbul", "straße"],
    ),
    "symbols": (
        "🙂 👍🏽 x_y __ _a 2²  m² 10⁵ µm ½ №5",
        ["🙂", "👍🏽", "x_y", "_a", "2", "m", "10", "µm", "5"],
    ),
    "biomedical": (
        "IL-6 TNF-α p<0.05 5'-UTR 3′ C57BL/6 CD4+ n=12",
        ["il", "6", "tnf", "α", "p", "0.05", "5", "utr", "3", "c57bl", "6", "cd4", "n", "12"],
    ),
    "emoji": (
        "© ™ ❤️ 🇺🇸 #️⃣ 👨\u200d👩\u200d👧",
        ["©", "™", "❤️", "🇺🇸", "#️⃣", "👨\u200d👩\u200d👧"],
    ),
    "format_chars": ("co\u00adoperate x\u200by", ["co\u00adoper", "x", "y"]),  # soft hyphen, ZWSP
    "empty": ("", []),
    "blank": (" \n\t ", []),
}


@pytest.mark.parametrize("text,expected", list(CASES.values()), ids=list(CASES))
def test_analyze_matches_lucene(text: str, expected: list[str]) -> None:
    assert analyze(text) == expected


def test_analyze_many_matches_analyze() -> None:
    texts = [text for text, _ in CASES.values()]
    assert analyze_many(texts) == [expected for _, expected in CASES.values()]
    assert analyze_many(iter(texts)) == analyze_many(texts)  # any iterable, twice (memo warm)


def test_tokenize_keeps_case_and_possessive() -> None:
    assert tokenize("John's U.S.A. IL-6 can't") == ["John's", "U.S.A", "IL", "6", "can't"]
    assert tokenize("") == []


def test_cjk_and_thai() -> None:
    # One token per ideograph / hiragana, whole runs for katakana, hangul and Thai.
    assert tokenize("中文字 ひらがな カタカナ 한국어 ไทยภาษา") == [
        "中",
        "文",
        "字",
        "ひ",
        "ら",
        "が",
        "な",
        "カタカナ",
        "한국어",
        "ไทยภาษา",
    ]


def test_katakana_joins_through_connectors() -> None:
    assert tokenize("a_カ カ_a _カ") == ["a_カ", "カ_a", "_カ"]


def test_long_tokens_split_at_255() -> None:
    assert analyze("a" * 300) == ["a" * 255, "a" * 45]
    # The cut falls on the "."; Lucene keeps the longest token that fits, then rescans.
    assert analyze("a" * 255 + ".b") == ["a" * 255, "b"]
    assert analyze("a" * 254 + ".b") == ["a" * 254, "b"]
    assert analyze("a" * 253 + ".b") == ["a" * 253 + ".b"]  # exactly 255: kept whole
    # Java counts UTF-16 units: 200 astral letters are 400 units.
    assert [len(t) for t in tokenize("\U0001d400" * 200)] == [127, 73]
    # The hot path hands such texts to the careful path without upsetting its neighbours.
    assert analyze_many(["x y", "b" * 256, "z"]) == [["x", "y"], ["b" * 255, "b"], ["z"]]


def test_stopword_set() -> None:
    assert len(ENGLISH_STOPWORDS) == 33
    assert analyze(" ".join(sorted(ENGLISH_STOPWORDS)).upper()) == []
    assert ANALYZER_ID


def _agreement(ours: list[list[str]], expected: list[list[str]]) -> tuple[float, float]:
    """Share of texts analysed identically, and of tokens equal position by position."""
    same_docs = sum(a == b for a, b in zip(ours, expected, strict=True))
    same_tokens = sum(
        sum(x == y for x, y in zip(a, b, strict=False)) for a, b in zip(ours, expected, strict=True)
    )
    total_tokens = sum(max(len(a), len(b)) for a, b in zip(ours, expected, strict=True))
    return same_docs / len(ours), same_tokens / total_tokens


def test_matches_pyserini_on_the_synthetic_task(synthetic_dir, lucene_analyzer) -> None:
    """Every document and query of tests/synthetic.py's task: capitalised sentences, acronyms,
    possessives (both apostrophes), hyphens, decimals, p-values, units, Greek letters, plurals."""
    task = load_folder(synthetic_dir)
    texts = list(task.corpus.values()) + list(task.queries.values())
    expected = [lucene_analyzer(text) for text in texts]
    ours = analyze_many(texts)
    differ = [(t, a, b) for t, a, b in zip(texts, ours, expected, strict=True) if a != b]
    assert not differ, f"{len(differ)} of {len(texts)} texts differ; first: {differ[0]}"
    # not vacuous: the stemmer and the stopword filter both changed something
    tokens = {tok for toks in expected for tok in toks}
    words = {w.lower() for text in texts for w in text.split()}
    assert len(tokens) > 1000 and len(tokens - words) > 500  # stemmed, or split off punctuation
    assert not {"the", "of", "and"} & tokens and {"the", "of", "and"} <= words


@pytest.mark.scifact
@pytest.mark.slow
def test_matches_pyserini_on_scifact(scifact_dir, lucene_analyzer) -> None:
    """Both analyzers over all of SciFact (title + " " + text); about 3 s."""
    with open(scifact_dir / "corpus.jsonl", encoding="utf-8") as f:
        texts = [(d["title"] + " " + d["text"]) for d in map(json.loads, f)]
    docs, tokens = _agreement(analyze_many(texts), [lucene_analyzer(text) for text in texts])
    print(f"\nSciFact: {docs:.2%} of {len(texts)} docs identical, tokens {tokens:.4%}")
    # Measured 100% / 100% (5,183 docs); leave a hair of room for Unicode-version drift.
    assert docs >= 0.998
    assert tokens >= 0.9995
