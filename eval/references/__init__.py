"""Published figures to set beside our runs: R2MED's per-task figures from both its sources,
from methods' authors, and from another paper's table of R2MED (ReasonEmbed's Table 3).

    from eval.references import reference, references_of

    ref = reference("r2med:hyde/qwen-7b/bm25")     # one source's row: a Reference
    ref.average() * 100, ref.figure("Biology")     # the 8-task Avg ×100, a task's nDCG@10

R2MED publishes its figures twice, and the two are not the same table: its repository's
``results/`` (`eval.references.repository`, ``r2med.json``) and its leaderboard, the table on
r2med.github.io (`eval.references.leaderboard`, ``r2med-leaderboard.json``). Methods' own
authors publish some (`eval.references.authors`, ``r2med-authors.json``), and ReasonEmbed's
Table 3 another table of R2MED (`eval.references.reasonembed`, ``reasonembed-table3.json``).
The JSON files ship in this folder.

The package: `model` (the tables' names, a row: `Reference`), one importer and reader per
source (above, sharing `datafile`), `reading` (the shipped tables loaded, a row found by its id
or ``<table>:<row>`` spec), `conflicts` (sources at odds, shown never resolved), `text` (the
``list`` and ``show`` outputs) and `__main__`, the command line (``python -m eval.references
list``, ``show <row>``, ``build ...``).

Nothing here knows about agents or run configurations (`agents.execution.published_row` maps a
run to its row); it imports nothing heavy, so ``--help`` is instant. The names load on first
use (PEP 562).
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "eval.references.model": (
            "Reference",
            "UnknownReference",
            "DEFAULT_TABLE",
            "LEADERBOARD_TABLE",
            "AUTHORS_TABLE",
            "REASONEMBED_TABLE",
            "TABLES",
            "SHOWN_TABLES",
        ),
        "eval.references.reading": (
            "DATA_DIR",
            "load_references",
            "normalise_row",
            "reference",
            "references_from",
            "references_of",
            "table_names",
        ),
        "eval.references.repository": ("build_table", "table_text"),
        "eval.references.leaderboard": (
            "build_leaderboard",
            "leaderboard_row_id",
            "leaderboard_text",
            "leaderboard_tsv",
        ),
        "eval.references.reasonembed": ("build_reasonembed", "paper_tsv"),
        "eval.references.conflicts": (
            "Conflict",
            "Inconsistency",
            "Repeat",
            "agrees",
            "conflict_of",
            "conflicts",
            "find_conflicts",
            "inconsistencies",
            "repeats_of",
        ),
        "eval.references.text": ("list_text", "paper_notes", "show_rows"),
    },
)
