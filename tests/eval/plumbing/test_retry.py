"""The one retry policy (eval/plumbing/retry.py) as the embedding API and the retrieval server
client meet it: a real HTTP server that answers 429/503 with Retry-After, then answers; the wait is
the server's (the backoff is 0 in the tests), capped at RETRY_AFTER_MAX_S."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import eval.plumbing.retry
from retrievers import remote
from retrievers.api_embed import api_encoder
from tests.helpers import send_body


class Script(BaseHTTPRequestHandler):
    """Answers each request with the next (status, headers, body) of ``replies``."""

    replies: list[tuple[int, dict[str, str], dict]] = []
    seen: list[str] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.seen.append(self.path)
        status, headers, body = self.replies.pop(0)
        send_body(self, json.dumps(body).encode(), status, headers)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Script.replies, Script.seen = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Script)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait tenacity's default sleep is asked for, not slept."""
    import tenacity.nap

    waits: list[float] = []
    monkeypatch.setattr(tenacity.nap.time, "sleep", waits.append)
    return waits


HEALTH = {"tasks": {"demo": {"corpus": "c" * 64}}, "retriever": "bm25", "version": "1"}


def test_the_retrieval_server_client_waits_as_long_as_a_503_asks(server, slept):
    Script.replies = [(503, {"Retry-After": "4"}, {"detail": "warming up"}), (200, {}, HEALTH)]
    assert remote.health(server)["tasks"] == HEALTH["tasks"]
    assert slept == [4.0]
    assert Script.seen == ["/health", "/health"]


def test_a_retry_after_longer_than_the_cap_waits_the_cap(server, slept, monkeypatch):
    monkeypatch.setattr(eval.plumbing.retry, "RETRY_AFTER_MAX_S", 9.0)
    Script.replies = [(503, {"Retry-After": "3600"}, {}), (200, {}, HEALTH)]
    remote.health(server)
    assert slept == [9.0]


def test_a_4xx_is_not_retried_whatever_it_asks(server, slept):
    Script.replies = [(404, {"Retry-After": "4"}, {"detail": "no such path"})]
    with pytest.raises(remote.RemoteRefusal):
        remote.health(server)
    assert slept == [] and Script.seen == ["/health"]


def embedding(vectors: list[list[float]]) -> dict:
    return {
        "object": "list",
        "model": "m",
        "data": [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
        ],
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }


def test_the_embedding_api_waits_as_long_as_a_429_asks(server, slept):
    limited = {"error": {"message": "slow down", "type": "rate_limit"}}
    Script.replies = [(429, {"Retry-After": "5"}, limited), (200, {}, embedding([[3.0, 4.0]]))]
    encode = api_encoder(
        "openai/m", api_base=f"{server}/v1", transport={"api_key": "sk-test", "max_retries": 0}
    )
    rows = encode(["a text"], "", "query")
    assert rows.tolist() == [[pytest.approx(0.6), pytest.approx(0.8)]]
    # one wait, the server's: the OpenAI SDK's own retries are off, so this is the policy's
    assert slept == [5.0]
    assert Script.seen == ["/v1/embeddings", "/v1/embeddings"]
