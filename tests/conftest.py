import json
import os
from pathlib import Path

# before anything imports litellm: never fetch its model cost map from the network
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


@pytest.fixture(autouse=True)
def no_retry_waits(monkeypatch):
    """Retries keep their count and order in tests, but never sleep."""
    import agents.llm.client
    import retrievers.api_embed

    monkeypatch.setattr(agents.llm.client, "RETRY_MAX_WAIT_S", 0.0)
    monkeypatch.setattr(retrievers.api_embed, "RETRY_MIN_WAIT_S", 0.0)
    monkeypatch.setattr(retrievers.api_embed, "RETRY_MAX_WAIT_S", 0.0)


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    """The shared BEIR SciFact folder; it lives beside the repo and is never copied into it."""
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {SCIFACT} (the shared data folder beside the repo)")
    return SCIFACT


DOCS = {
    "d1": "Insulin resistance drives type 2 diabetes mellitus.",
    "d2": "Metformin lowers hepatic glucose production in diabetes.",
    "d3": "Aspirin irreversibly inhibits platelet cyclooxygenase.",
    "d4": "Statins inhibit HMG-CoA reductase and lower cholesterol.",
    "d5": "Warfarin antagonises vitamin K dependent clotting factors.",
}
QUERIES = {
    "q1": "Which drug lowers glucose production by the liver in diabetes?",
    "q2": "How does aspirin act on platelets?",
    "q3": "What lowers cholesterol?",
}
QRELS = [("q1", "d2", 1), ("q2", "d3", 2), ("q3", "d4", 1)]


@pytest.fixture
def toy_dir(tmp_path: Path) -> Path:
    """A five-document task in R2MED layout where each query has one clearly relevant doc."""
    folder = tmp_path / "toy"
    folder.mkdir()
    with open(folder / "corpus.jsonl", "w") as f:
        for i, t in DOCS.items():
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    with open(folder / "query.jsonl", "w") as f:
        for i, t in QUERIES.items():
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    with open(folder / "qrels.jsonl", "w") as f:
        for q, d, s in QRELS:
            f.write(json.dumps({"q_id": q, "p_id": d, "score": s}) + "\n")
    return folder
