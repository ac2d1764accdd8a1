"""Pure-Python reimplementation of pyserini's default English analyzer.

pyserini's ``get_lucene_analyzer()`` (Anserini's DefaultEnglishAnalyzer) runs Lucene's
StandardTokenizer (UAX#29 word breaks, tokens capped at 255 chars), EnglishPossessiveFilter,
LowerCaseFilter, StopFilter (Lucene's 33 English stopwords) and PorterStemFilter. R2MED and
BRIGHT tokenize with exactly this chain before BM25, so our BM25 scores are only comparable to
theirs if we produce the same terms. We do it without Java: the tokenizer is a regular
expression whose character classes come from the Unicode Word_Break property (read from the
``regex`` module, then compiled with stdlib ``re`` because it is faster), and stemming uses
PyStemmer except where its Snowball Porter departs from Lucene's (see ``_lucene_porter``).

On SciFact (5,183 docs) the output is identical to pyserini 0.22.1 for every document.
Known gaps, none seen there: Unicode-version drift between ``regex`` and Lucene's JFlex
tables, katakana glued to letters through "_" on the letter side ("a_カ"), and the Hebrew
quote rules WB7a-c.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import regex
import Stemmer

# Bump whenever analyze() output can change, so cached indexes built with the old output
# are not silently reused.
ANALYZER_ID = "lucene-english-1"

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, which Anserini's default analyzer uses.
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

# StandardTokenizer.DEFAULT_MAX_TOKEN_LENGTH, counted in UTF-16 code units as Java does.
MAX_TOKEN_LENGTH = 255

# Apostrophes EnglishPossessiveFilter accepts before a final "s".
_APOSTROPHES = ("'s", "\u2019s", "\uff07s")


# --- tokenizer ---------------------------------------------------------------------------


def _class(expr: str, planes: tuple[str, ...]) -> str:
    """A stdlib-``re`` character class body for the ``regex`` (V1) class ``expr``, built by
    finding its runs among the code points in ``planes`` (the BMP below and above the
    surrogates, then optionally the astral planes)."""
    found = regex.compile(expr + "+", regex.V1)
    parts = []
    for first, chars in zip((0, 0xE000, 0x10000), planes, strict=False):
        for m in found.finditer(chars):
            lo, hi = first + m.start(), first + m.end() - 1
            parts.append(rf"\U{lo:08x}" if lo == hi else rf"\U{lo:08x}-\U{hi:08x}")
    return "".join(parts)


@functools.cache
def _classes(astral: bool) -> dict[str, str]:
    """The Word_Break classes the tokenizer needs, as ``re`` class bodies.

    Without the astral planes (``astral=False``) every class stays below U+FFFF, which lets
    ``re`` compile it to a bitmap instead of a list of ranges it tries one by one: about ten
    times faster, and exact for any text without astral characters.
    """
    planes = ("".join(map(chr, range(0xD800))), "".join(map(chr, range(0xE000, 0x10000))))
    if astral:
        planes += ("".join(map(chr, range(0x10000, 0x110000))),)
    exprs = {
        "letter": r"[\p{WB=ALetter}\p{WB=Hebrew_Letter}]",
        "number": r"\p{WB=Numeric}",
        "connector": r"\p{WB=ExtendNumLet}",  # "_" and friends
        "extend": r"[\p{WB=Extend}\p{WB=Format}\p{WB=ZWJ}]",  # WB4: glued to what precedes
        "mid_letter": r"[\p{WB=MidLetter}\p{WB=MidNumLet}\p{WB=Single_Quote}]",
        "mid_number": r"[\p{WB=MidNum}\p{WB=MidNumLet}\p{WB=Single_Quote}]",
        "katakana": r"\p{WB=Katakana}",
        "han": r"\p{Script=Han}",
        "hiragana": r"\p{Script=Hiragana}",
        "complex_context": r"\p{Line_Break=SA}",  # Thai, Lao, Khmer, Myanmar
        "regional": r"\p{Regional_Indicator}",
        # Lucene emits emoji as tokens; ASCII "#*0-9" carry Emoji=Yes but are not emoji alone.
        "emoji": r"[[\p{Emoji}\p{Extended_Pictographic}]--[#*0-9\p{Regional_Indicator}]]",
    }
    return {name: _class(expr, planes) for name, expr in exprs.items()}


@functools.cache
def _token_re(kind: str) -> re.Pattern[str]:
    """The tokenizer regex; ``kind`` is "words" (letters and digits only, for texts with
    nothing else), "bmp" (everything, BMP classes) or "astral" (everything, all planes).

    "words" is the fast path: a pattern that starts with a character class lets ``re`` skip
    ahead to the next possible token in C. It may return runs of bare connectors ("__"),
    which Lucene drops; ``_is_word`` filters those.
    """
    c = _classes(astral=kind == "astral")
    letter, number, connector, extend = c["letter"], c["number"], c["connector"], c["extend"]
    x = f"[{extend}]*"
    # The "word" rule: letters/digits/connectors run together (WB5, WB8-10, WB13a/b); a
    # MidLetter-type char joins two letters (WB6/7: "a.b", "can't", "a:b") and a MidNum-type
    # char joins two digits (WB11/12: "3.14", "1,000"). The lookbehinds see through up to two
    # Extend chars, which covers decomposed accents.
    after_letter = f"(?:(?<=[{letter}])|(?<=[{letter}][{extend}])|(?<=[{letter}][{extend}]{{2}}))"
    after_number = f"(?:(?<=[{number}])|(?<=[{number}][{extend}])|(?<=[{number}][{extend}]{{2}}))"
    body = f"[{letter}{number}{connector}{extend}]"
    head = f"[{letter}{number}{connector}]{body}*"
    joins = (
        f"(?:{after_letter}[{c['mid_letter']}]{x}(?=[{letter}])"
        f"|{after_number}[{c['mid_number']}]{x}(?=[{number}])){body}+"
    )
    if kind == "words":
        return re.compile(f"{head}(?:{joins})*")
    # Katakana runs are their own words (WB13), joined to letters only through a connector
    # (WB13a/b): "カ_a" and "a_カ" are single tokens. "kata" is tried before "word" so that
    # "_カ" is not cut after its "_".
    katakana = c["katakana"]
    after_connector = f"(?<=[{connector}])(?:[{katakana}][{katakana}{connector}{extend}]*|{body}+)"
    word = f"{head}(?:{joins}|{after_connector})*"
    kata = (
        f"[{connector}]*[{katakana}](?:[{katakana}{connector}{extend}]+"
        f"|(?<=[{connector}])[{letter}{number}]{body}*)*"
    )
    emoji = c["emoji"]
    emoji_seq = f"(?:[{emoji}]|[#*]\ufe0f?\u20e3)(?:[{extend}]|(?<=\u200d)[{emoji}])*"
    sa = c["complex_context"]
    branches = [
        kata,
        word,
        f"[{sa}](?:[{sa}{extend}])*",
        f"[{c['han']}]{x}",  # one token per ideograph, as Lucene does
        f"[{c['hiragana']}]{x}",
        emoji_seq,
    ]
    if c["regional"]:  # flags live in the astral planes; "[]" would mean something else to re
        branches.append(f"[{c['regional']}][{c['regional']}]{x}")
    return re.compile("|".join(branches))


@functools.cache
def _special_re() -> re.Pattern[str]:
    """Finds BMP characters that only the full tokenizer handles (kana, Han, Thai, emoji)."""
    c = _classes(astral=False)
    chars = "".join(c[k] for k in ("katakana", "han", "hiragana", "complex_context", "emoji"))
    return re.compile(f"[{chars}\u20e3]")


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _pattern_for(text: str) -> re.Pattern[str]:
    if text.isascii():
        return _token_re("words")
    if _ASTRAL.search(text):
        return _token_re("astral")
    return _token_re("bmp" if _special_re().search(text) else "words")


@functools.cache
def _filler_re() -> re.Pattern[str]:
    c = _classes(astral=False)
    return re.compile(f"[{c['connector']}{c['extend']}]+")


def _is_word(token: str) -> bool:
    """False for a run of bare connectors such as "__", which Lucene does not emit."""
    return _filler_re().fullmatch(token) is None


def _utf16_len(token: str) -> int:
    return len(token) + sum(1 for c in token if ord(c) > 0xFFFF)


def _cut(token: str) -> str:
    """Longest prefix of ``token`` that fits Lucene's 255-unit buffer and is a token itself
    (JFlex returns the longest match it can fit, then resumes scanning right after it)."""
    prefix = token[:MAX_TOKEN_LENGTH]
    while _utf16_len(prefix) > MAX_TOKEN_LENGTH:
        prefix = prefix[:-1]
    m = _pattern_for(prefix).match(prefix)
    return m.group() if m else prefix


def tokenize(text: str) -> list[str]:
    """Split ``text`` the way Lucene's StandardTokenizer does; tokens keep their case."""
    pattern = _pattern_for(text)
    tokens: list[str] = []
    pos = 0
    while m := pattern.search(text, pos):
        token = m.group()
        if len(token) > MAX_TOKEN_LENGTH // 2 and _utf16_len(token) > MAX_TOKEN_LENGTH:
            token = _cut(token)
            pos = m.start() + len(token)
        else:
            pos = m.end()
        if _is_word(token):
            tokens.append(token)
    return tokens


# --- stemming ------------------------------------------------------------------------------


def _consonant(word: str, i: int) -> bool:
    c = word[i]
    if c in "aeiou":
        return False
    if c == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    n = 0
    previous_vowel = False
    for i in range(len(stem)):
        consonant = _consonant(stem, i)
        if consonant and previous_vowel:
            n += 1
        previous_vowel = not consonant
    return n


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str, i: int) -> bool:
    """consonant-vowel-consonant ending at i, the last not w/x/y (e.g. -hop, not -how)."""
    return (
        i >= 2
        and _consonant(word, i)
        and not _consonant(word, i - 1)
        and _consonant(word, i - 2)
        and word[i] not in "wxy"
    )


# Step 2 and 4 rules keyed by the penultimate letter, step 3 by the last; within a key the
# first suffix that matches decides, even if its measure condition then fails (as in Porter's C).
_STEP2 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP3 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_STEP4 = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def _replace_suffix(word: str, rules: tuple[tuple[str, str], ...]) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if _measure(stem) > 0 else word
    return word


def _lucene_porter(word: str) -> str:
    """Porter's stemmer as Lucene's PorterStemmer implements it (Porter's own C version).

    It departs from the published algorithm, which Snowball's "porter" follows, in three
    ways: words of one or two letters are left alone, step 2 maps -bli to -ble (not -abli to
    -able) and has an extra rule -logi to -log. Everything else agrees with PyStemmer, so
    ``_stem`` only sends words where a departure can matter here.
    """
    if len(word) <= 2:
        return word
    # Step 1a: plurals.
    if word.endswith("s"):
        if word.endswith("sses") or word.endswith("ies"):
            word = word[:-2]
        elif word[-2] != "s":
            word = word[:-1]
    # Step 1b: -eed, -ed, -ing.
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        stem = ""
        if word.endswith("ed"):
            stem = word[:-2]
        elif word.endswith("ing"):
            stem = word[:-3]
        if stem and _has_vowel(stem):
            word = stem
            if word.endswith(("at", "bl", "iz")):
                word += "e"
            elif _double_consonant(word):
                if word[-1] not in "lsz":
                    word = word[:-1]
            elif _measure(word) == 1 and _cvc(word, len(word) - 1):
                word += "e"
    # Step 1c: -y to -i after a vowel-bearing stem.
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    # Steps 2 and 3: map double suffixes to single ones.
    if len(word) > 1 and word[-2] in _STEP2:
        word = _replace_suffix(word, _STEP2[word[-2]])
    if word[-1] in _STEP3:
        word = _replace_suffix(word, _STEP3[word[-1]])
    # Step 4: drop -ant, -ence etc. when the rest has m > 1.
    if len(word) > 1 and word[-2] in _STEP4:
        for suffix in _STEP4[word[-2]]:
            if word.endswith(suffix):
                stem = word[: -len(suffix)]
                if suffix == "ion" and not stem.endswith(("s", "t")):
                    break
                if _measure(stem) > 1:
                    word = stem
                break
    # Step 5: tidy a final -e and -ll.
    m = _measure(word)
    if word[-1] == "e" and (m > 1 or (m == 1 and not _cvc(word, len(word) - 2))):
        word = word[:-1]
    if word[-1] == "l" and _double_consonant(word) and m > 1:
        word = word[:-1]
    return word


_SNOWBALL_PORTER = Stemmer.Stemmer("porter")


def _stem(word: str) -> str:
    # A step-2 -bli/-logi can only come from a word containing "bl"/"log"; short words are
    # the third departure. The rest goes to PyStemmer, which is C and much faster.
    if len(word) <= 2 or "bl" in word or "log" in word:
        return _lucene_porter(word)
    return _SNOWBALL_PORTER.stemWord(word)


# --- the filter chain ----------------------------------------------------------------------

# Lowercased token -> final term ("" when it is a stopword). Tokens repeat heavily across a
# corpus, so each is possessive-stripped, stop-checked and stemmed once. It grows with the
# vocabulary (a few MB for a 60k-doc corpus) and is never cleared.
_TERMS: dict[str, str] = {}


def _term(token: str) -> str:
    """The filter chain for one lowercased token ("" when nothing is left of it)."""
    if not _is_word(token):
        return ""
    if token.endswith(_APOSTROPHES):
        token = token[:-2]
    if token in ENGLISH_STOPWORDS:
        return ""
    return _stem(token)


def _lower(text: str) -> str:
    # Java lowercases char by char; Python's str.lower() is context-aware for these two:
    # "İ" becomes "i" plus a combining dot and a word-final "Σ" becomes "ς".
    if "\u0130" in text or "\u03a3" in text:
        text = text.replace("\u0130", "i").replace("\u03a3", "\u03c3")
    return text.lower()


def _analyze_slow(lowered: str) -> list[str]:
    terms = [_term(token) for token in tokenize(lowered)]
    return [t for t in terms if t]


def analyze(text: str) -> list[str]:
    """Terms for ``text``, as pyserini's default Lucene English analyzer would produce."""
    return analyze_many([text])[0]


def analyze_many(texts: Iterable[str]) -> list[list[str]]:
    """``analyze`` over many texts, memoizing per distinct token; the indexing hot path."""
    words = _token_re("words")
    cache = _TERMS
    out: list[list[str]] = []
    for text in texts:
        terms: list[str] = []
        append = terms.append
        text = _lower(text)
        pattern = _pattern_for(text)
        # Texts with kana, Han, Thai, emoji or astral characters are rare: tokenize() them.
        tokens = words.findall(text) if pattern is words else tokenize(text)
        for token in tokens:
            term = cache.get(token)
            if term is None:
                if len(token) > MAX_TOKEN_LENGTH // 2 and _utf16_len(token) > MAX_TOKEN_LENGTH:
                    # Lucene splits it; rare, so redo the whole text the careful way.
                    terms = _analyze_slow(text)
                    break
                term = cache[token] = _term(token)
            if term:
                append(term)
        out.append(terms)
    return out
