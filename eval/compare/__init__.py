"""Compare run folders: `python -m eval.compare runs/a runs/b ... [--baseline runs/a]`.

For the chosen metric (nDCG@10 by default) it prints and writes a leaderboard (one row per
run, R2MED's task order, then Avg), per-query deltas against a baseline run (wins / ties /
losses, paired p-values, the queries that moved most, with their text) and a cost table, draws
per-task bars and a cost-vs-metric scatter, and writes report.html, a page that holds all of
it plus every query's score and trajectory (`eval.compare.html`). See docs/experiments.md.

The package: `model` (the data: runs as read, deltas, costs, published rows) is computed by
`reading`, `measures`, `published` and `comparison` (`compare_runs`); the renderers -
`markdown`, `output` (the files), `plots` and `html` (report.html) - read the model, which
imports none of them. `__main__` is the command line. A run's label is the one its folder
stored (`eval.runs.RunFolder.info`), else the folder's name: nothing here reads a config's
shape beyond its dataset, limit, prompts and eval settings.

Decisions worth knowing:

* Scores come from each task's ``per_query.jsonl``; only a metric it lacks is recomputed
  from ``run.trec`` and the qrels (``eval.evaluate`` under the run's own ``missing`` and
  ``ties``). So a run's scores are the ones its own ``metrics.json`` averaged: every run's
  mean is checked against it, and a disagreement, or a reason the check cannot be made
  (damaged or absent metrics.json, a metric it lacks), is a note, never silence.
* Runs are compared on the tasks they all have and, per task, on the queries they all
  answered; whatever is dropped is listed in the notes. A query a run failed or ranked
  nothing for counts as its metrics.json counted it: 0 under ``missing=zero``, left out
  under ``missing=present`` (``eval.evaluate``'s one definition of a present query).
* Overall significance pools the per-query scores of every task (task-prefixed query ids),
  so a task with many queries weighs more there than in Avg, which is a mean of task means.
  Where a test has no answer (fewer than 2 paired queries; a t-test on differences that are
  all the same) the p cell is ``n/a`` with the reason (`eval.significance.PairedTest`).
* Every file read is checked as it is read (`eval.runs`, `eval.records`): a line that is not
  UTF-8, not JSON or of the wrong shape is refused naming the file, the line and the field;
  a task folder whose ``task.json`` says it was made under another config than its run's
  ``config.json`` (copied in from another run) is refused, naming the setting.
* A task whose ranking went through rerank stages is scored on its final stage (see
  ``eval.runs``); its usage is the sum over every stage up to that one.
* Usage is summed from the per-query records by ``Usage.add``, the runner's own rule, so a
  run's cost is unknown as soon as one call was unpriced; the priced part is then shown as a
  lower bound, and a model with no price at all (local, self-hosted, unknown) as ``n/a``
  (see ``Cost``).
* The charts mark a no-LLM baseline (`reference_run`): the baseline when no LLM had a part
  in its ranking, else the first such run. A run says so in its folder (``llm_free``); an
  older folder that does not counts as such when its records show no LLM call.
* ``--reference r2med:<row>`` (R2MED's repository), ``r2med-leaderboard:<row>`` (its
  leaderboard) or another shipped source's spec (``reasonembed-table3:<row>``, ReasonEmbed's
  Table 3) sets a published row (`eval.references`) beside the runs: its
  figure for the metric on each compared task R2MED reports, and each run's difference from
  it, per task and on the mean over those same tasks (never over tasks one side lacks). The
  paper's figures are over every query of a task, so a run with ``--limit`` is noted.
"""

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "eval.compare.comparison": ("DEFAULT_METRIC", "TOP_MOVERS", "compare_runs"),
        "eval.compare.markdown": ("comparison_markdown", "published_markdown"),
        "eval.compare.model": (
            "CompareError",
            "Comparison",
            "Cost",
            "Delta",
            "Mover",
            "Published",
            "RunData",
            "TaskFiles",
            "leaderboard_rows",
            "reference_run",
        ),
        "eval.compare.output": ("write_comparison",),
        "eval.compare.reading": ("load_run",),
    },
)
