import os
from pathlib import Path

# before anything imports litellm: never fetch its model cost map from the network
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    """The shared BEIR SciFact folder; it lives beside the repo and is never copied into it."""
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {SCIFACT} (the shared data folder beside the repo)")
    return SCIFACT
