"""Prompt files used by the agents; each prompt lives in a file under this folder.

A prompt is ``prompts/<name>/<variant>.txt``, where the variant is an R2MED task name, a query
kind (post, exam, case, similar-case) or ``default``. Lookup goes task -> kind -> default, so a
file exists only where the wording really differs. R2MED words its post prompts per domain
("Biology post", "Medical Science post", ...), so those exist per task and need ``task=``.

* `load_prompt`, `override_key`, `PromptBook`: a prompt for a task, and an agent's prompts,
  each one's hash recorded (`prompts.loader`).
* `parse_prompt_overrides`: ``--prompt NAME=path`` values, checked when given
  (`prompts.overrides`).
* `check_placeholders`, `placeholder_rules`, `prompt_family`, `MAIN_VARIANTS`: which fields a
  prompt may and must use (`prompts.placeholders`).
* `Prompt`, `PromptError`, `prompt_names`, `PROMPTS_DIR`: one file, its escape rule and hash
  (`prompts.files`).

LameR's ``{docs}`` is formatted beside its agent (`agents.graphs.generate_retrieve.format_docs`).
The names load on first use (PEP 562).
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "prompts.files": ("PROMPTS_DIR", "Prompt", "PromptError", "prompt_names"),
        "prompts.placeholders": (
            "MAIN_VARIANTS",
            "PlaceholderRule",
            "check_placeholders",
            "placeholder_rules",
            "prompt_family",
        ),
        "prompts.loader": ("PromptBook", "load_prompt", "override_key"),
        "prompts.overrides": ("parse_prompt_overrides",),
    },
)
