"""A retrieval task the test suite makes itself: seeded, so every machine writes the same bytes.

SciFact lives outside the repository (``../shared/data/scifact``), so a test that needs real
BM25 runs over a few hundred queries would skip on a contributor's clone. `generate` builds
a stand-in of the same shape instead: 300 queries over 3,000 short documents in BEIR layout
(``_id``/``title``/``text``), with

- a Zipfian vocabulary: a few dozen function and generic words on top (stopwords included, so
  the analyzer has something to remove), then ~2,500 medical-ish words built from prefixes,
  roots and suffixes ("hyperhepatitis", "nephrocyte"), some in plural forms the Porter
  stemmer folds;
- topics: each document is written mostly in its topic's words, so a query's own document
  competes with its topic's other documents and BM25 is right only some of the time
  (nDCG@10 around 0.5, neither 0 nor 1);
- the text Lucene's analyzer has to get right: capitalised sentences, acronyms, possessives,
  hyphens, decimals, p-values, units, Greek letters and a few other symbols;
- exact duplicates (2%) and very short documents, so scores tie inside top-10s and at the
  rank-100 cut;
- graded qrels: each query's own document (grade 2, or 1), and for many queries one to three
  more documents of its topic (grade 1 or 2).

Document ids are random numbers, so corpus order, id order and reversed id order all differ
(trec_eval breaks ties by id; R2MED's stable sort by corpus order). Nothing iterates a set or
a hash-ordered mapping, so the output does not depend on PYTHONHASHSEED.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

SEED = 20250514  # R2MED's arXiv day; any fixed number would do
N_QUERIES = 300
N_DOCS = 3000
N_TOPICS = 150
TOPIC_WORDS = 12
P_TOPIC_WORD = 0.35  # the share of a document's words drawn from its topic
P_DUPLICATE = 0.02
ZIPF_S = 1.05

# The top of the frequency list: English function words (Lucene's stopwords among them) and
# the generic words every biomedical abstract uses.
COMMON = (
    "the of and in a to with was is for patients by as on were that this or at from be are "
    "an not treatment risk cells study clinical disease increased associated expression levels "
    "effect response therapy protein cancer blood analysis human gene activity results"
).split()
PREFIXES = ("", "", "", "", "hyper", "hypo", "peri", "endo", "micro", "poly", "anti", "neo",
            "intra", "sub", "pseudo")  # fmt: skip
ROOTS = ("cardi", "hepat", "neur", "nephr", "oste", "derm", "gastr", "pulmon", "myel", "angi",
         "arthr", "encephal", "lymph", "thromb", "glyc", "lip", "insul", "kerat", "leuk", "erythr",
         "fibr", "chondr", "cyt", "hem", "my", "ren", "thyr", "aden", "col", "pancreat", "splen",
         "vascul", "cortic", "mening", "retin", "bronch", "laryng", "ot", "rhin",
         "cholangi")  # fmt: skip
SUFFIXES = ("itis", "osis", "oma", "emia", "ectomy", "opathy", "algia", "ology", "ogenic", "ase",
            "in", "ocyte", "al", "ic", "otomy", "oplasty", "ostomy", "uria", "ation", "ism", "ide",
            "ogen", "ular", "ine")  # fmt: skip
GREEK = ("α", "β", "γ", "κ")
# Fragments put into sentences for the tokenizer: {n} a number, {d} a digit, {w} a word, {W}
# a capitalised word, {g} a Greek letter.
FRAGMENTS = (
    "({n} patients)", "p < 0.0{d}", "p<0.0{d}", "{n}.{d} mg/kg", "IL-{d}", "TNF-{g}", "CD{d}+",
    "{n}%", "{g}-{w}", "{W}'s", "well-known", "non-{w}", "type {d}", "e.g. {w}", "{n} °C",
    "{w}/{w}", "{n},{d}00", "U.S.", "{W}’s", "{w}-{w}", "µm", "{n}×{d}", "5'-{W}", "[{n}]",
)  # fmt: skip
QUESTIONS = (
    "what is the role of {} ?", "does {} ?", "{}", "{} in patients", "how does {} ?",
    "is {} associated with {} ?", "{}: a review", "which {} ?",
)  # fmt: skip


@dataclass(frozen=True)
class SyntheticTask:
    """A task in BEIR's shape: ``corpus`` maps a doc id to (title, text)."""

    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def texts(self) -> dict[str, str]:
        """Each document as load_folder reads it: title and text joined by a space (BEIR)."""
        return {d: f"{title} {text}".strip() for d, (title, text) in self.corpus.items()}


def vocabulary(rng: random.Random, size: int) -> list[str]:
    """COMMON, then ``size`` made-up medical words in a seeded order (most frequent first)."""
    words = sorted({p + r + s for p in PREFIXES for r in ROOTS for s in SUFFIXES})
    rng.shuffle(words)
    return COMMON + [w for w in words if w not in COMMON][:size]


def generate(
    seed: int = SEED, n_queries: int = N_QUERIES, n_docs: int = N_DOCS, n_topics: int = N_TOPICS
) -> SyntheticTask:
    """The task for ``seed``; the same arguments always give the same task."""
    rng = random.Random(seed)
    vocab = vocabulary(rng, 2500)
    cum = list(accumulate(1 / (rank + 1) ** ZIPF_S for rank in range(len(vocab))))
    content = vocab[len(COMMON) :]
    common = frozenset(COMMON)  # looked up, never iterated
    # Topic words come from the middle and tail of the list: frequent words identify nothing.
    topics = [rng.sample(content[150:], TOPIC_WORDS) for _ in range(n_topics)]
    topic_cum = list(accumulate(1 / (t + 5) for t in range(n_topics)))  # some topics are big

    def word(topic: int) -> str:
        w = (
            rng.choice(topics[topic])
            if rng.random() < P_TOPIC_WORD
            else rng.choices(vocab, cum_weights=cum)[0]
        )
        plural = rng.random() < 0.08 and w not in common and not w.endswith("s")
        return w + "s" if plural else w  # the stemmer folds it back

    def fragment(topic: int) -> str:
        template = rng.choice(FRAGMENTS)
        return template.format_map(_Fill(rng, lambda: word(topic)))

    def sentence(topic: int, n_words: int) -> str:
        words = [word(topic) for _ in range(n_words)]
        if rng.random() < 0.5:
            words.insert(rng.randrange(len(words) + 1), fragment(topic))
        if rng.random() < 0.1:
            i = rng.randrange(len(words))
            words[i] = words[i].upper()  # an acronym-like shout
        text = " ".join(words)
        return text[0].upper() + text[1:] + rng.choice(".....;")

    doc_ids = [str(i) for i in rng.sample(range(1, 10**7), n_docs)]
    corpus: dict[str, tuple[str, str]] = {}
    topic_of: dict[str, int] = {}
    by_topic: list[list[str]] = [[] for _ in range(n_topics)]
    originals: list[str] = []
    for doc_id in doc_ids:
        if originals and rng.random() < P_DUPLICATE:
            source = rng.choice(originals)  # an exact copy under another id: ties
            corpus[doc_id] = corpus[source]
            topic = topic_of[source]
        else:
            topic = rng.choices(range(n_topics), cum_weights=topic_cum)[0]
            n_sentences = 1 if rng.random() < 0.1 else rng.randint(2, 4)
            text = " ".join(sentence(topic, rng.randint(4, 13)) for _ in range(n_sentences))
            title = "" if rng.random() < 0.15 else sentence(topic, rng.randint(2, 6))[:-1]
            corpus[doc_id] = (title, text)
            originals.append(doc_id)
        topic_of[doc_id] = topic
        by_topic[topic].append(doc_id)

    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    seeds = rng.sample(originals, n_queries)
    for n, seed_doc in enumerate(seeds):
        topic = topic_of[seed_doc]
        title, text = corpus[seed_doc]
        own = [w.strip(".;,()").lower() for w in f"{title} {text}".split()]
        own = [w for w in own if w.isalpha() and w not in common]
        terms = []
        for _ in range(rng.randint(2, 6)):
            r = rng.random()
            if r < 0.6 and own:
                terms.append(rng.choice(own))  # from its own document
            elif r < 0.85:
                terms.append(rng.choice(topics[topic]))  # its topic's, maybe not in the doc
            else:
                terms.append(rng.choices(vocab, cum_weights=cum)[0])  # noise
        template = rng.choice(QUESTIONS)
        if template.count("{}") == 2:
            cut = max(1, len(terms) // 2)
            query = template.format(" ".join(terms[:cut]), " ".join(terms[cut:]) or terms[0])
        else:
            query = template.format(" ".join(terms))
        qid = f"q{n:03d}"
        queries[qid] = query[0].upper() + query[1:]
        judged = {seed_doc: 2 if rng.random() < 0.8 else 1}
        others = [d for d in by_topic[topic] if d != seed_doc]
        if others and rng.random() < 0.5:
            for d in rng.sample(others, min(len(others), rng.randint(1, 3))):
                judged[d] = 1 if rng.random() < 0.75 else 2
        qrels[qid] = judged
    return SyntheticTask(corpus, queries, qrels)


class _Fill(dict):
    """format_map's fields for FRAGMENTS, each drawn afresh."""

    def __init__(self, rng: random.Random, word) -> None:
        super().__init__()
        self.rng, self.word = rng, word

    def __missing__(self, key: str) -> str:
        rng = self.rng
        if key == "n":
            return str(rng.randint(2, 480))
        if key == "d":
            return str(rng.randint(1, 9))
        if key == "g":
            return rng.choice(GREEK)
        if key == "W":
            return self.word().capitalize()
        return self.word()


def write_task(folder: Path, task: SyntheticTask | None = None, layout: str = "beir") -> Path:
    """Write ``task`` (default: `generate()`) into ``folder`` in BEIR or R2MED layout."""
    task = task or generate()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def jsonl(name: str, rows) -> None:
        with open(folder / name, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    if layout == "beir":
        docs = task.corpus.items()
        jsonl("corpus.jsonl", ({"_id": d, "title": t, "text": x} for d, (t, x) in docs))
        jsonl("queries.jsonl", ({"_id": q, "text": t} for q, t in task.queries.items()))
        (folder / "qrels").mkdir(exist_ok=True)
        lines = ["query-id\tcorpus-id\tscore"] + [
            f"{q}\t{d}\t{g}" for q, docs in task.qrels.items() for d, g in docs.items()
        ]
        (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif layout == "r2med":
        jsonl("corpus.jsonl", ({"id": d, "text": x} for d, x in task.texts().items()))
        jsonl("query.jsonl", ({"id": q, "text": t} for q, t in task.queries.items()))
        pairs = [(q, d, g) for q, docs in task.qrels.items() for d, g in docs.items()]
        jsonl("qrels.jsonl", ({"q_id": q, "p_id": d, "score": g} for q, d, g in pairs))
    else:
        raise ValueError(f"layout must be 'beir' or 'r2med', got {layout!r}")
    return folder
