from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    """The shared BEIR SciFact folder; it lives beside the repo and is never copied into it."""
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {SCIFACT} (the shared data folder beside the repo)")
    return SCIFACT
