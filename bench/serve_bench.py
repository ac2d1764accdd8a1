"""The retrieval server under concurrent clients: throughput, latency, batching, and faults.

    python bench/serve_bench.py [--queries 480] [--clients 1,4,16] [--k 100] [--smoke]

On loopback only. Builds the bundled demo's BM25 and dense (the bundled MiniLM, cpu) retrievers
in-process with `retrievers.search.build_retriever`, from the same settings `agents.run` and
the server make of the same flags, and starts three servers as subprocesses with ``--port 0``,
each once its index is in the cache (the in-process build fills it; a server loads it from
there): BM25, dense with ``--max-batch 64`` (the default) and dense with ``--max-batch 1``.
For each retriever and each client count N, N threads (one keep-alive httpx client each)
send the demo's queries to ``POST /search``, one query per request as ``--retriever remote:``
sends them, and the script prints queries per second and p50/p99 latency beside the same
queries searched in-process one at a time, in the same run; then the batching gain of dense
(max-batch 64 vs 1 at N clients).

Every served ranking is checked against the in-process one: BM25 and dense at max-batch 1 must
be identical (ids and scores); dense at max-batch 64 is searched in batches of whatever arrived
together, and its agreement is printed (a bf16 encoder's vectors change with the batch they are
encoded in, see docs/serving.md).

Faults, each asserted while 4 ordinary clients keep searching the BM25 server: garbage JSON
and bytes that are not text (422 with a one-line ``{"error"}``), a query over
``--max-query-chars`` to /search and /retrieve (413), a body over ``--max-body-bytes`` (413),
a client that closes its socket right after sending a request (orderly, and with a reset), and
one that closes it halfway through the body. The ordinary clients' results must all be
identical to the in-process ranking and none may fail; the server must still answer after.
Every server is stopped with SIGTERM and must exit 0.

Hostile clients: one normal client searches the BM25 server, alone and then beside each of a
client sending a huge chunked body (refused past ``--max-body-bytes`` while it arrives), one
holding many idle and half-open connections (closed by ``--header-timeout`` and
``--max-connections``), and one asking for 1,000 queries x k 1,000 (refused by ``--max-hits``
before any search). The normal client's p50/p99 latency is printed beside each, with the
hostile client's one-line refusal; the normal client must not fail.

``--smoke`` runs every step with 24 queries per measurement and N = 1 and 4, in about half a
minute; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.config.settings import from_settings  # noqa: E402
from eval.datasets import default_cache_dir, load_tasks  # noqa: E402
from retrievers.base import SearchRequest  # noqa: E402
from retrievers.search import build_retriever  # noqa: E402

HOST = "127.0.0.1"
MAX_QUERY_CHARS = 20_000  # the BM25 server's --max-query-chars: the huge query is over it
MAX_BODY_BYTES = 2_000_000  # and its --max-body-bytes
HEADER_TIMEOUT_S = 1.0  # and its --header-timeout: the idle connections are closed in the run
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30


# --- a server as a subprocess ----------------------------------------------------------------


@dataclass
class Server:
    label: str
    flags: list[str]
    proc: subprocess.Popen | None = None
    url: str = ""
    stderr: list[str] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _terminated: bool = False

    def start(self, env: dict[str, str]) -> None:
        argv = [sys.executable, "-m", "retrievers.serve", "--dataset", "demo", "--host", HOST,
                "--port", "0", "--quiet", *self.flags]  # fmt: skip
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:  # reads stderr to its end, so the pipe never fills
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n").split("\r")[-1])  # a progress bar's last
            found = re.search(r"^serving .* at (http://\S+)$", line.strip())
            if found and not self.url:
                self.url = found.group(1)
                self._ready.set()
        self._ready.set()  # the process ended (or closed stderr): wait() sees no url

    def wait_ready(self) -> None:
        assert self.proc is not None
        if not self._ready.wait(START_TIMEOUT_S) or not self.url:
            self.proc.kill()
            tail = "\n".join(self.stderr[-20:])
            raise SystemExit(
                f"server {self.label} did not start (exit {self.proc.poll()}):\n{tail}"
            )

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None and not self._terminated:
            self.proc.send_signal(signal.SIGTERM)
            self._terminated = True

    def stop(self) -> int:
        """SIGTERM (unless sent already), then wait: its exit status."""
        if self.proc is None:
            return 0
        self.terminate()
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise SystemExit(
                f"server {self.label} ignored SIGTERM for {STOP_TIMEOUT_S} s"
            ) from None

    def health(self) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/health", timeout=30, trust_env=False)
        response.raise_for_status()
        return response.json()


# --- load -------------------------------------------------------------------------------------


Ranking = dict[str, float]


@dataclass
class Load:
    qps: float
    p50_ms: float
    p99_ms: float
    results: list[tuple[str, Ranking]]  # (query id, ranking) for every request sent
    errors: list[str]


def percentiles(latencies: list[float]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.asarray(latencies) * 1000, [50, 99])
    return float(p50), float(p99)


def in_process(search: Callable[[str], Ranking], order: list[str], texts: dict[str, str]) -> Load:
    """The same queries searched one at a time in this process: what a worker's local index
    does for each search."""
    latencies, results = [], []
    started = time.perf_counter()
    for qid in order:
        t = time.perf_counter()
        results.append((qid, search(texts[qid])))
        latencies.append(time.perf_counter() - t)
    seconds = time.perf_counter() - started
    return Load(len(order) / seconds, *percentiles(latencies), results, [])


def post_search(client: httpx.Client, url: str, text: str, k: int) -> Ranking:
    body = {"k": k, "requests": [{"query": text}]}
    response = client.post(f"{url}/search", json=body)
    response.raise_for_status()
    [result] = response.json()["results"]
    return dict(zip(result["ids"], result["scores"], strict=True))


def served(url: str, clients: int, per_client: list[list[str]], texts: dict[str, str], k: int,
           keep_going: threading.Event | None = None) -> Load:  # fmt: skip
    """``clients`` threads, each sending its list of queries one request at a time; with
    ``keep_going``, each goes on cycling through its list while that event is set."""
    barrier = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    results: list[list[tuple[str, Ranking]]] = [[] for _ in range(clients)]
    errors: list[str] = []

    def client(i: int) -> None:
        with httpx.Client(timeout=60, trust_env=False) as http:
            post_search(http, url, texts[per_client[i][0]], k)  # the connection, opened
            barrier.wait()
            n = 0
            while n < len(per_client[i]) or (keep_going is not None and keep_going.is_set()):
                qid = per_client[i][n % len(per_client[i])]
                t = time.perf_counter()
                try:
                    ranking = post_search(http, url, texts[qid], k)
                except Exception as e:  # noqa: BLE001 (counted and reported)
                    errors.append(f"client {i}, {qid}: {type(e).__name__}: {e}")
                    ranking = {}
                latencies[i].append(time.perf_counter() - t)
                results[i].append((qid, ranking))
                n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    flat = [x for lat in latencies for x in lat]
    return Load(len(flat) / seconds, *percentiles(flat), [r for rs in results for r in rs],
                errors)  # fmt: skip


def n_clients(n: int) -> str:
    return f"{n} client" if n == 1 else f"{n} clients"


def split(order: list[str], clients: int) -> list[list[str]]:
    """``order`` dealt round-robin to the clients: each starts on a different query."""
    return [order[i::clients] for i in range(clients)]


def mismatches(load: Load, expected: dict[str, Ranking]) -> list[str]:
    return [qid for qid, ranking in load.results if ranking != expected[qid]]


def agreement(load: Load, expected: dict[str, Ranking]) -> tuple[int, int, int, float]:
    """(requests, with the same top 10, with the same whole list, largest score difference)."""
    same10 = same_all = 0
    largest = 0.0
    for qid, ranking in load.results:
        want = expected[qid]
        same10 += list(ranking)[:10] == list(want)[:10]
        same_all += list(ranking) == list(want)
        common = set(ranking) & set(want)
        largest = max([largest, *(abs(ranking[d] - want[d]) for d in common)])
    return len(load.results), same10, same_all, largest


# --- faults -----------------------------------------------------------------------------------


def raw_request(url: str, body: bytes, send: int | None = None, reset: bool = False) -> None:
    """A POST /search sent on a bare socket, closed right after writing ``send`` bytes of the
    body (all of it by default) without reading a byte of the answer; ``reset``: closed with
    a TCP reset instead of an orderly close."""
    host, port = url.removeprefix("http://").split(":")
    head = (f"POST /search HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + body[: len(body) if send is None else send])
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def assert_refused(response: httpx.Response, status: int, what: str) -> str:
    assert response.status_code == status, f"{what}: HTTP {response.status_code}, not {status}"
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str), f"{what}: body {body}"
    assert body["error"] and "\n" not in body["error"], f"{what}: not one line: {body['error']!r}"
    return body["error"]


def faults(url: str, text: str, rounds: int) -> dict[str, str]:
    """Each fault ``rounds`` times; the one-line reason each refusal gave."""
    reasons: dict[str, str] = {}
    good = json.dumps({"k": 100, "requests": [{"query": text}]}).encode()
    with httpx.Client(timeout=60, trust_env=False) as http:
        for _ in range(rounds):
            garbage = {"garbage JSON": b'{"k": 100, "requests": [{"query": ',
                       "bytes that are not text": b"\xff\xfe\x00garbage"}  # fmt: skip
            for label, content in garbage.items():
                r = http.post(f"{url}/search", content=content,
                              headers={"content-type": "application/json"})  # fmt: skip
                reasons[label] = assert_refused(r, 422, label)
            huge = "fever " * (MAX_QUERY_CHARS // 6 + 1000)
            r = http.post(f"{url}/search", json={"k": 10, "requests": [{"query": huge}]})
            reasons[f"query of {len(huge):,} characters"] = assert_refused(r, 413, "huge query")
            r = http.post(f"{url}/retrieve", json={"queries": [huge]})
            reasons["the same query to /retrieve"] = assert_refused(r, 413, "huge /retrieve")
            big = b'{"k": 10, "requests": [{"query": "' + b"a" * MAX_BODY_BYTES + b'"}]}'
            r = http.post(
                f"{url}/search", content=big, headers={"content-type": "application/json"}
            )
            reasons[f"body of {len(big):,} bytes"] = assert_refused(r, 413, "huge body")
            raw_request(url, good)  # gone right after sending
            raw_request(url, good, reset=True)  # the same, with a reset
            raw_request(url, good, send=len(good) // 2)  # gone halfway through its body
    return reasons


# --- hostile clients ----------------------------------------------------------------------------


def huge_chunked_body(url: str, megabytes: int) -> str:
    """A chunked POST offering ``megabytes`` MB; the server's answer (it should not wait for
    the end)."""

    def chunks():
        for _ in range(megabytes * 16):
            yield b"x" * 65536

    with httpx.Client(timeout=30, trust_env=False) as http:
        r = http.post(f"{url}/search", content=chunks())
    return assert_refused(r, 413, "huge chunked body")


def idle_connections(url: str, n: int, seconds: float) -> str:
    """``n`` connections opened and held ``seconds``, every other one with half a request
    head; how many the server had closed by then."""
    host, port = url.removeprefix("http://").split(":")
    held = []
    for i in range(n):
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            break
        if i % 2:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        held.append(sock)
    time.sleep(seconds)
    closed = 0
    for sock in held:
        sock.settimeout(0.5)
        try:
            closed += sock.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        except TimeoutError:
            pass
        sock.close()
    return f"{closed} of {len(held)} closed by the server"


def heavy_query(url: str) -> str:
    body = {"k": 1000, "requests": [{"query": "fever"}] * 1000}
    with httpx.Client(timeout=30, trust_env=False) as http:
        return assert_refused(http.post(f"{url}/search", json=body), 413, "queries x k")


def beside(url: str, order: list[str], texts: dict[str, str], k: int, seconds: float,
           hostile: Callable[[], str] | None) -> tuple[Load, str]:  # fmt: skip
    """A normal client searching for ``seconds`` (at least its list once) while ``hostile``
    runs again and again; its load and the hostile client's last answer."""
    keep_going = threading.Event()
    keep_going.set()
    loads: list[Load] = []
    thread = threading.Thread(
        target=lambda: loads.append(served(url, 1, [order], texts, k, keep_going))
    )
    thread.start()
    what = ""
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            what = hostile() if hostile is not None else "-"
            if hostile is None:
                time.sleep(0.05)
    finally:
        keep_going.clear()
        thread.join()
    return loads[0], what


def hostile_clients(url: str, order: list[str], texts: dict[str, str], k: int,
                    smoke: bool) -> None:  # fmt: skip
    seconds = 1.0 if smoke else 5.0
    idle_n = 200 if smoke else 2000
    modes: dict[str, Callable[[], str] | None] = {
        "none": None,
        f"huge chunked body ({50 if smoke else 300} MB offered)":
            lambda: huge_chunked_body(url, 50 if smoke else 300),
        f"{idle_n:,} idle and half-open connections":
            lambda: idle_connections(url, idle_n, HEADER_TIMEOUT_S + 0.5),
        "1,000 queries x k 1,000": lambda: heavy_query(url),
    }  # fmt: skip
    for label, hostile in modes.items():
        load, what = beside(url, order, texts, k, seconds, hostile)
        assert not load.errors, f"the normal client failed beside {label}: {load.errors[:3]}"
        print(
            f"  hostile {label}: normal client p50 {load.p50_ms:.2f} ms, p99 "
            f"{load.p99_ms:.2f} ms over {len(load.results)} searches; hostile: {what}"
        )


# --- the run ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=480, help="queries per measurement")
    p.add_argument("--clients", default="1,4,16", help="client counts, comma-separated")
    p.add_argument("--k", type=int, default=100, help="depth of each search")
    p.add_argument("--smoke", action="store_true", help="every step, tiny sizes: checks it runs")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.clients.split(",")]
    if args.smoke:
        args.queries, counts = 24, [1, 4]
        print("smoke run: every step at tiny sizes; the figures are not a measurement")
    started = time.perf_counter()

    cache_dir = default_cache_dir()
    [task] = load_tasks("demo", cache_dir)
    texts = dict(task.queries)
    ids = list(texts)
    order = [ids[i % len(ids)] for i in range(args.queries)]

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    servers = {
        "bm25": Server("bm25", ["--retriever", "bm25", "--max-query-chars",
                                str(MAX_QUERY_CHARS), "--max-body-bytes", str(MAX_BODY_BYTES),
                                "--header-timeout", str(HEADER_TIMEOUT_S)]),
        "dense": Server("dense", ["--retriever", "dense", "--device", "cpu", "--max-batch", "64"]),
        "dense-1": Server("dense-1", ["--retriever", "dense", "--device", "cpu",
                                      "--max-batch", "1"]),
    }  # fmt: skip
    try:
        # In-process, from the settings agents.run and the server make of the same flags. Each
        # index is built here first, into the cache its servers then load it from.
        specs = {"bm25": {"retriever": "bm25"}, "dense": {"retriever": "dense", "device": "cpu"}}
        retrievers = {}
        for name, settings in specs.items():
            config = from_settings({"dataset": "demo", **settings}).retriever
            retrievers[name] = build_retriever(config, task, cache_dir, progress=False)
            for server in servers.values():
                if server.flags[1] == name:  # started while the next index builds
                    server.start(env)
        for server in servers.values():
            server.wait_ready()

        def searcher(name: str) -> Callable[[str], Ranking]:
            return lambda text: retrievers[name].search(SearchRequest(text), args.k)

        # measured with the servers up and idle
        expected = {name: {q: searcher(name)(texts[q]) for q in ids} for name in retrievers}
        local = {name: in_process(searcher(name), order, texts) for name in retrievers}
        print(f"demo: {len(task.corpus)} documents, {len(ids)} queries, {args.queries} searches "
              f"of depth {args.k} per measurement, one query per request; 3 servers on {HOST}, "
              f"load average {os.getloadavg()[0]:.2f} at start")  # fmt: skip
        for name, load in local.items():
            print(f"  {name} in-process, one at a time: {load.qps:.0f} q/s, "
                  f"p50 {load.p50_ms:.2f} ms, p99 {load.p99_ms:.2f} ms")  # fmt: skip

        loads: dict[tuple[str, int], Load] = {}
        for label, name in (("bm25", "bm25"), ("dense", "dense"), ("dense-1", "dense")):
            for n in counts:
                load = served(servers[label].url, n, split(order, n), texts, args.k)
                assert not load.errors, f"{label} at {n} clients: {load.errors[:3]}"
                loads[label, n] = load
                if label != "dense":  # exact: batches of BM25 and of one query change nothing
                    bad = mismatches(load, expected[name])
                    assert not bad, f"{label} at {n} clients: rankings differ for {bad[:5]}"
                tag = "dense --max-batch 1" if label == "dense-1" else label
                print(
                    f"  {tag} /search {n_clients(n)}: {load.qps:.0f} q/s, p50 {load.p50_ms:.2f} ms,"
                    f" p99 {load.p99_ms:.2f} ms, {load.qps / local[name].qps:.2f}x in-process"
                )

        for n in counts:
            gain = loads["dense", n].qps / loads["dense-1", n].qps
            print(f"  dense batching gain at {n_clients(n)}: {gain:.2f}x (max-batch 64 vs 1)")
        info = servers["dense"].health()["served"]
        print(f"  dense --max-batch 64 served {info['queries']} queries in {info['batches']} "
              f"batches, the largest {info['largest_batch']}")  # fmt: skip
        total = same10 = same_all = 0
        largest = 0.0
        for n in counts:
            a, b, c, d = agreement(loads["dense", n], expected["dense"])
            total, same10, same_all, largest = total + a, same10 + b, same_all + c, max(largest, d)
        print(f"  dense --max-batch 64 vs in-process: same top 10 for {same10} of {total} "
              f"searches, same top {args.k} for {same_all}, largest score difference "
              f"{largest:.2g} (max-batch 1 and bm25: identical, asserted)")  # fmt: skip
        assert same10 >= 0.5 * total, "dense at max-batch 64 is far from the in-process ranking"

        # Faults while 4 ordinary clients keep searching.
        server = servers["bm25"]
        before = server.health()["served"]["queries"]
        keep_going = threading.Event()
        keep_going.set()
        ordinary: list[Load] = []
        minimum = max(8, args.queries // 4)
        load_thread = threading.Thread(
            target=lambda: ordinary.append(
                served(server.url, 4, split(order[: minimum * 4], 4), texts, args.k, keep_going)
            )
        )
        load_thread.start()
        time.sleep(0.2)
        try:
            reasons = faults(server.url, texts[ids[0]], rounds=2 if args.smoke else 5)
        finally:
            keep_going.clear()
            load_thread.join()
        [load] = ordinary
        assert not load.errors, f"ordinary clients failed during the faults: {load.errors[:3]}"
        bad = mismatches(load, expected["bm25"])
        assert not bad, f"rankings changed during the faults for {bad[:5]}"
        after = server.health()
        assert after["status"] == "ok"
        with httpx.Client(timeout=30, trust_env=False) as http:
            for qid in ids:
                assert post_search(http, server.url, texts[qid], args.k) == expected["bm25"][qid]
        for label, reason in reasons.items():
            print(f"  fault {label}: refused, {reason}")
        gone = after["served"]["queries"] - before - len(load.results) - 4  # 4: warm-ups
        print(
            f"  faults: {len(load.results)} searches of 4 other clients during them, all "
            f"identical to in-process (asserted), p99 {load.p99_ms:.2f} ms; {gone} queries of "
            "the clients that disconnected were searched anyway; the server answers after"
        )
        hostile_clients(server.url, order[: max(8, args.queries // 4)], texts, args.k,
                        args.smoke)  # fmt: skip
    finally:
        for server in servers.values():  # all at once, then each waited for
            server.terminate()
        codes = {label: server.stop() for label, server in servers.items()}
    assert all(code == 0 for code in codes.values()), f"exit status after SIGTERM: {codes}"
    for label, server in servers.items():  # nothing but the line saying it serves (and
        # transformers' "Loading weights" bar, which --quiet does not silence): no traceback
        other = [
            x for x in server.stderr if x.strip() and not x.startswith(("serving ", "Loading "))
        ]
        assert not other, f"server {label} wrote to stderr:\n" + "\n".join(other[-20:])
    print(f"  SIGTERM: every server exited 0 ({', '.join(codes)}); whole run "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
