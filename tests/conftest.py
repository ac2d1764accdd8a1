import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

# before anything imports litellm: never fetch its model cost map from the network
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Every test's default cache (and every subprocess's that inherits the environment) is this
# session's own temporary folder, never the user's ~/.cache: the embedded model is joined
# there once per session (491 MB), indexes and answers never reach a real cache.
SESSION_CACHE = Path(tempfile.mkdtemp(prefix="r2med-agents-tests-"))
os.environ["R2MED_AGENTS_CACHE"] = str(SESSION_CACHE)
atexit.register(shutil.rmtree, SESSION_CACHE, ignore_errors=True)

import pytest  # noqa: E402 (after the environment every import below must see)

from tests.helpers import SCIFACT, SHARED_ABSENT, share_models, write_toy  # noqa: E402

# --- CI strictness -----------------------------------------------------------------------------
# Under CI=true (.ci/run exports it) a test that skips FAILS, naming what it skipped for: in CI a
# skip is nearly always a missing dependency or missing data, and a skipped test tests nothing.
# The exceptions are skips about the machine rather than something missing, listed here by the
# start of their reason.
CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
# A clone with no shared data beside it still tests everything on the synthetic task; the SciFact
# versions are extras, which .ci/run lets skip by exporting R2MED_SHARED_DATA=absent (and saying
# so) only when the folder is not there (SHARED_ABSENT starts the skip's reason).
NOT_MISSING = ("llama.cpp's instruction set is pinned for x86-64 builds", SHARED_ABSENT)


def _ci_failure(reason: str) -> str | None:
    """What a skip for ``reason`` fails with under CI=true, or None when it may skip."""
    if not CI or reason.startswith(NOT_MISSING):
        return None
    return f"CI=true: a test may not skip for something missing; missing: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    excinfo = call.excinfo
    if report.skipped and excinfo is not None and excinfo.errisinstance(pytest.skip.Exception):
        failure = _ci_failure(str(excinfo.value.msg))
        if failure:
            report.outcome, report.longrepr = "failed", failure
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield  # a module that skips itself (importorskip or skip at module level)
    if report.skipped and isinstance(report.longrepr, tuple):
        failure = _ci_failure(str(report.longrepr[2]).removeprefix("Skipped: "))
        if failure:
            report.outcome, report.longrepr = "failed", failure
    return report


@pytest.fixture
def models_cache(tmp_path: Path) -> Path:
    """A cache folder of the test's own (``tmp_path / "cache"``) with the session's joined
    embedded models hard-linked into its ``models/``: they are not joined again."""
    return share_models(tmp_path / "cache", SESSION_CACHE)


@pytest.fixture(autouse=True)
def restore_litellm_providers():
    """A test that installs a provider (agents.llm.scripted) leaves litellm's list as it was."""
    litellm = sys.modules.get("litellm")
    saved = list(litellm.custom_provider_map) if litellm is not None else None
    yield
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        litellm.custom_provider_map = saved if saved is not None else []


@pytest.fixture(autouse=True)
def no_retry_waits(monkeypatch):
    """Retries keep their count and order in tests, but never back off (eval.plumbing.retry)."""
    import eval.plumbing.retry

    monkeypatch.setattr(eval.plumbing.retry, "BACKOFF", False)


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    """The shared BEIR SciFact folder; it lives beside the repo and is never copied into it."""
    if not (SCIFACT / "corpus.jsonl").is_file():
        reason = f"SciFact not found at {SCIFACT} (the shared data folder beside the repo)"
        if os.environ.get("R2MED_SHARED_DATA") == "absent":  # said so by .ci/run, in its log
            pytest.skip(f"{SHARED_ABSENT}: {reason}")
        pytest.skip(reason)
    return SCIFACT


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory) -> Path:
    """tests/synthetic.py's task (300 queries, 3,000 documents, BEIR layout), written once."""
    from tests.synthetic import write_task

    return write_task(tmp_path_factory.mktemp("data") / "synthetic")


@pytest.fixture(scope="session")
def bm25_runs(tmp_path_factory):
    """``runs(dataset)``: `--agent none` runs of bm25q and lucene on a dataset folder, made once
    a session and shared by the tests that read them (tests/eval/compare/test_compare.py,
    tests/agents/commands/test_run_command.py):
    ``({"bm25q": folder, "lucene": folder}, cache dir)``. Copy a folder before changing it."""
    from agents.commands.run import main

    made: dict[Path, tuple[dict[str, Path], Path]] = {}

    def runs(dataset: Path) -> tuple[dict[str, Path], Path]:
        if dataset not in made:
            root = tmp_path_factory.mktemp(f"bm25-{dataset.name}")
            for method in ("bm25q", "lucene"):
                argv = ["--agent", "none", "--dataset", str(dataset), "--bm25-method", method,
                        "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"),
                        "--run-name", method, "--quiet"]  # fmt: skip
                assert main(argv) == 0, argv
            made[dataset] = {m: root / "runs" / m for m in ("bm25q", "lucene")}, root / "cache"
        return made[dataset]

    return runs


@pytest.fixture(
    scope="session",
    params=["synthetic", pytest.param("scifact", marks=[pytest.mark.scifact, pytest.mark.slow])],
)
def task_dir(request) -> Path:
    """A BEIR folder: the synthetic task, and SciFact as an extra where the shared data is."""
    return request.getfixturevalue(f"{request.param}_dir")


@pytest.fixture(scope="session")
def lucene_analyzer():
    """pyserini's Lucene analyzer (R2MED's), as a function of a text to its tokens.

    Skips (fails under CI=true) naming what is missing: pyserini itself, or Java >= 11. Any other
    ImportError, pyjnius missing included, is raised: a broken install is an error, not a skip.
    """
    import re
    import shutil
    import subprocess

    try:
        import pyserini  # noqa: F401  (the package alone: it loads no JVM)
    except ModuleNotFoundError as e:
        if e.name != "pyserini":
            raise
        pytest.skip("pyserini is not installed: pip install --no-deps pyserini==0.22.1 pyjnius")
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if java is None or not Path(java).is_file():
        where = f"JAVA_HOME={home} has no bin/java" if home else "java not on PATH, JAVA_HOME unset"
        pytest.skip(f"no Java ({where}): pyserini needs a JVM >= 11")
    shown = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    found = re.search(r'version "(?:1\.)?(\d+)', shown)
    if found is None or int(found.group(1)) < 11:
        pytest.skip(f"Java >= 11 needed by pyserini; {java} -version says {shown.strip()[:80]!r}")
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    analyzer = Analyzer(get_lucene_analyzer())
    return lambda text: list(analyzer.analyze(text))


@pytest.fixture
def toy_dir(tmp_path: Path) -> Path:
    """A five-document task in R2MED layout where each query has one clearly relevant doc."""
    return write_toy(tmp_path / "toy")
