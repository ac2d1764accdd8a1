"""Each method as its original ran it: every rule here names the original's file and line.

Originals read: R2MED/R2MED at 62b7074 (src/base.py, src/eval_BM25.py, src/eval_retrieval.py,
src/utils.py, src/example.py, src/instrcution.py, src/generate_hypothetical_doc.py),
sunnynexus/Search-o1 at 6ced48f (scripts/run_search_o1.py, scripts/prompts.py,
scripts/evaluate.py), PeterGriffinJin/Search-R1 at a14dc3a (search_r1/llm_agent/generation.py,
scripts/nq_hotpotqa/evaluate.sh, scripts/data_process/nq_search.py, verl/), xlang-ai/BRIGHT at
d99e839 (reason.py),
sunnweiwei/RankGPT at 0d62bc3 (rank_gpt.py), orionw/rank1 at 30585c2 (rank1.py).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents.commands.run import main
from agents.graphs.combine import NO_TERM, falls_back, generated_request
from agents.graphs.search_o1 import BEGIN_QUERY, END_QUERY, Turn, read_turn
from agents.graphs.search_r1 import fit_context, search_r1_question
from agents.llm import scripted
from agents.llm.sampling import model_family, preset_options, resolve
from agents.llm.text import read_response, reasoning_parser
from agents.llm.tokens import Counter
from agents.shared.generations import Generations
from eval.records import unpack_record
from prompts import PromptBook
from retrievers.base import DenseRetriever
from tests.helpers import send_body

PASSAGE = "Metformin reduces hepatic glucose production in type 2 diabetes."
THOUGHT = "<think>The liver makes glucose.</think>\n\nAnswer: metformin.</think> tail"


def records(folder: Path, task: str = "toy") -> dict[str, dict]:
    lines = (folder / task / "queries.jsonl").read_text().splitlines()
    return {r["query_id"]: r for r in map(unpack_record, map(json.loads, lines))}


def run(toy_dir: Path, tmp_path: Path, agent: str, *extra: str, model="scripted/test") -> int:
    return main([
        "--agent", agent, "--dataset", str(toy_dir), "--model", model,
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "r", "--quiet", *extra,
    ])  # fmt: skip


# --- reading a reasoning model's text: R2MED src/base.py L5-36 --------------------------------


def test_reasoning_models_are_r2meds_list_by_short_and_served_name():
    # src/base.py L5-6 (r1_model_list) and the branch of split_response_for_r1 for each
    assert {
        m: reasoning_parser(m) for m in ("qwq-32b", "r1-llama-70b", "qwen3-8b")
    } == dict.fromkeys(("qwq-32b", "r1-llama-70b", "qwen3-8b"), "think")
    assert reasoning_parser("huatuo-o1-70b") == "huatuo-o1"
    assert reasoning_parser("sky-32b") == "sky-t1"
    assert reasoning_parser("qwen-7b-ins") == reasoning_parser("qwen-3b-ins") == "search-r1"
    for plain in ("gpt4", "o3-mini", "qwen-72b", "llama-70b", "qwen-7b"):
        assert reasoning_parser(plain) == "none"  # not in r1_model_list: the text as written
    served = {
        "hosted_vllm/deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": "think",
        "openai/Qwen/QwQ-32B": "think",
        "hosted_vllm/Qwen/Qwen3-32B": "think",
        "hosted_vllm/Qwen/Qwen3-30B-A3B-Instruct-2507": "none",  # never thinks
        "hosted_vllm/FreedomIntelligence/HuatuoGPT-o1-70B": "huatuo-o1",
        "hosted_vllm/NovaSky-AI/Sky-T1-32B-Preview": "sky-t1",
        "hosted_vllm/PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo": "search-r1",
        "hosted_vllm/Qwen/Qwen2.5-7B-Instruct": "none",
        "local/qwen2.5-coder-0.5b": "none",
    }
    assert {m: reasoning_parser(m) for m in served} == served


def test_the_response_is_read_as_split_response_for_r1_reads_it():
    # L8-13: the text after the FIRST </think>, stripped; without one, all of it, unstripped
    assert read_response(THOUGHT, "think") == "Answer: metformin.</think> tail"
    assert read_response("  no think here ", "think") == "  no think here "
    # L14-20: HuatuoGPT-o1, after the first "Final Response"
    huatuo = "## Thinking\nreasons\n\n## Final Response\n\nMetformin.\n## Final Response x"
    assert read_response(huatuo, "huatuo-o1") == "Metformin.\n## Final Response x"
    assert read_response("no heading", "huatuo-o1") == "no heading"
    # L21-27: Sky-T1, between the solution tags
    sky = "<|begin_of_thought|> t <|end_of_thought|><|begin_of_solution|>\n S \n<|end_of_solution|>"
    assert read_response(sky, "sky-t1") == "S"
    # L28-33: Search-R1, the FIRST <answer>
    r1 = "<think>a</think><answer> first </answer> <answer>second</answer>"
    assert read_response(r1, "search-r1") == "first"
    assert read_response("<think>x</think>", "search-r1") == "<think>x</think>"
    assert read_response(THOUGHT, "none") == THOUGHT


# --- how a text meets the query: src/eval_BM25.py L124-133, src/eval_retrieval.py L37-44 --------


@pytest.mark.parametrize(
    "method, sparse, dense, expansion",
    [
        # eval_BM25.py L133 / eval_retrieval.py L44: the text alone; [query, text] averaged
        ("hyde", "P", None, "P"),
        # L128-129: e["text"]*2+" "+e["hy_doc"] (no space between the copies); L41-42: one
        # string, query + "[SEP]" + text, behind the query instruction
        ("query2doc", "Q?Q? P", "Q?[SEP]P", ""),
        ("lamer", "Q? P", None, "P"),  # L130-131; L44
        ("search-o1", "P", None, "P"),  # R2MED stores Search-o1's output in the same layout
        ("search-r1", "P", None, "P"),
    ],
)
def test_plain_models_text_meets_the_query_as_r2med_combines_them(method, sparse, dense, expansion):
    request = generated_request(method, "Q?", "P")
    assert (request.sparse_text, request.dense_text, request.expansion) == (
        sparse,
        dense,
        expansion,
    )
    assert request.query == "Q?"


@pytest.mark.parametrize("method", ["hyde", "query2doc", "lamer", "search-o1"])
def test_a_reasoning_models_response_alone_is_searched_for_every_method(method):
    # eval_BM25.py L125-126: split_response_for_r1 alone, whatever the method (query2doc and
    # LameR included); eval_retrieval.py L38-39: [text, response], averaged
    request = generated_request(method, "Q?", THOUGHT, "think")
    assert request.sparse_text == "Answer: metformin.</think> tail"
    assert request.expansion == "Answer: metformin.</think> tail" and request.dense_text is None


class RecordingIndex:
    """A DenseIndex stand-in that records what it is asked to embed."""

    def __init__(self):
        self.calls = []

    def encode_requests(self, queries, expansions):
        self.calls.append((list(queries), list(expansions)))
        return [[0.0]] * len(queries)

    def search_vectors(self, vecs, k, query_ids=None):
        return [{} for _ in vecs]


def test_dense_retrievers_embed_what_the_rule_says():
    # src/utils.py L65-90: a str is embedded behind the query instruction; a [query, text] pair
    # is two embeddings averaged (the instruction on the query only)
    index = RecordingIndex()
    retriever = DenseRetriever(index)
    retriever.search(generated_request("query2doc", "Q?", "P"), 5)
    retriever.search(generated_request("hyde", "Q?", "P"), 5)
    retriever.search(generated_request("query2doc", "Q?", THOUGHT, "think"), 5)
    assert index.calls == [
        (["Q?[SEP]P"], [""]),
        (["Q?"], ["P"]),
        (["Q?"], ["Answer: metformin.</think> tail"]),
    ]


def test_live_and_replayed_texts_are_searched_alike(toy_dir, tmp_path):
    """The same text, written live by a reasoning model and replayed from R2MED's layout under
    its R2MED name, is searched the same way (response alone, query2doc included)."""
    scripted.install(lambda messages, params: THOUGHT)
    assert run(toy_dir, tmp_path / "live", "query2doc", "--reasoning", "think") == 0
    live = records(tmp_path / "live" / "runs" / "r")
    folder = tmp_path / "released" / "toy" / "query2doc" / "qwq-32b"
    folder.mkdir(parents=True)
    lines = [json.dumps({"id": q, "text": "x", "hy_doc": THOUGHT, "doc_id": ["d1"]}) for q in live]
    (folder / "query_with_hydoc.jsonl").write_text("\n".join(lines) + "\n")
    source = f"r2med:qwq-32b@{tmp_path / 'released'}"
    assert run(toy_dir, tmp_path / "replay", "query2doc", "--generations", source) == 0
    replay = records(tmp_path / "replay" / "runs" / "r")
    for qid in live:
        assert live[qid]["steps"][-1]["request"] == replay[qid]["steps"][-1]["request"]
        assert live[qid]["steps"][-1]["request"]["sparse_text"] == "Answer: metformin.</think> tail"
        assert replay[qid]["steps"][-1]["reasoning"] == "think"
    # a plain model's text (R2MED's gpt4) replayed: query*2 + " " + text
    folder = tmp_path / "released" / "toy" / "query2doc" / "gpt4"
    folder.mkdir(parents=True)
    (folder / "query_with_hydoc.jsonl").write_text(
        "\n".join(json.dumps({"id": q, "hy_doc": PASSAGE}) for q in live) + "\n"
    )
    assert run(toy_dir, tmp_path / "gpt4", "query2doc", "--generations",
               f"r2med:gpt4@{tmp_path / 'released'}") == 0  # fmt: skip
    rec = records(tmp_path / "gpt4" / "runs" / "r")["q3"]
    q = "What lowers cholesterol?"
    assert rec["steps"][-1]["request"]["sparse_text"] == q * 2 + " " + PASSAGE
    assert rec["steps"][-1]["request"]["dense_text"] == q + "[SEP]" + PASSAGE


@pytest.mark.parametrize("agent, llm", [("search-o1", "qwq-32b"), ("search-r1", "qwen-7b-ins")])
def test_search_agents_rebuild_r2meds_rows_from_its_layout(toy_dir, tmp_path, agent, llm):
    """R2MED's results/gar/search-o1 and search-r1 rows come from query_with_hydoc.jsonl files
    like the other methods': a replay reads them at zero cost, each by its model's rule."""
    scripted.install(lambda messages, params: AssertionError("no model may be called"))
    text = {
        "search-o1": "<|begin_search_query|>q<|end_search_query|>...</think>\n\nStatins lower it.",
        "search-r1": "<think>t</think><search>s</search><answer> statins </answer>"
        "<answer>x</answer>",
    }[agent]
    folder = tmp_path / "released" / "toy" / agent / llm
    folder.mkdir(parents=True)
    (folder / "query_with_hydoc.jsonl").write_text(
        "".join(json.dumps({"id": q, "hy_doc": text}) + "\n" for q in ("q1", "q2", "q3"))
    )
    source = f"r2med:{llm}@{tmp_path / 'released'}"
    assert run(toy_dir, tmp_path, agent, "--generations", source) == 0
    rec = records(tmp_path / "runs" / "r")["q3"]
    expected = {"search-o1": "Statins lower it.", "search-r1": "statins"}[agent]
    assert rec["steps"][-1]["request"]["sparse_text"] == expected
    assert rec["usage"]["calls"] == 0
    assert rec["ranking"][0][0] == "d4"


# --- query2doc's few-shot examples: R2MED src/example.py, src/instrcution.py L91-100 ----------

EXAMPLES = {  # task -> (example.py key, line, sha256 of the Python string's value, first 16)
    "Biology": ("Stack-Biology", 3, "774df256099faf9b"),
    "Bioinformatics": ("Stack-Bioinformatics", 19, "fbf92082ef3ea190"),
    "Medical-Sciences": ("Stack-Medical", 11, "e5a1cb267bf9f549"),
    "MedXpertQA-Exam": ("MedXpertQA-Exam", 27, "d8afd4d457496277"),
    "MedQA-Diag": ("MedQA-Diag", 35, "3b757d2b2fd6c350"),
    "PMC-Treatment": ("PMC-Treat", 43, "56b00dbce5d6b0b7"),
    "PMC-Clinical": ("PMCPatients", 51, "164b1526d453ad7e"),
    "IIYi-Clinical": ("IIYiPatients-EN", 59, "8367aee63bb041c7"),
}
# src/instrcution.py L92-99: the templates around {EXAMPLE}, per R2MED key
R2MED_Q2D = {
    "Biology": "Write a passage that help answer the Biology post.\n\n###Examples:###\n"
    "{EXAMPLE}\n\n###Real Test:###\nPost: {TEXT}\nPassage: ",
    "PMC-Clinical": "Write a similar case to help diagnose the Clinical Case.\n\n###Examples:###"
    "\n{EXAMPLE}\n\n###Real Test:###\nCase: {TEXT}\nSimilar Case: ",
    "MedQA-Diag": "Write a passage to help answer the Medical Exam.\n\n###Examples:###\n"
    "{EXAMPLE}\n\n###Real Test:###\nExam: {TEXT}\nPassage: ",
}


@pytest.mark.parametrize("task", list(EXAMPLES))
def test_each_r2med_task_gets_r2meds_own_examples(task):
    book = PromptBook({}, task)
    examples = book.get("query2doc-examples")
    assert examples.name == f"query2doc-examples/{task}"
    assert hashlib.sha256(examples.text.encode()).hexdigest()[:16] == EXAMPLES[task][2]
    label = "Post:" if task in ("Biology", "Bioinformatics", "Medical-Sciences") else (
        "Exam:" if task in ("MedXpertQA-Exam", "MedQA-Diag") else "Case:"
    )  # fmt: skip
    assert examples.text.startswith(label) and examples.text.endswith("\n")
    answer = "Similar Case:\n" if task in ("PMC-Clinical", "IIYi-Clinical") else "Passage:\n"
    # two pairs each with the task's own label; IIYi-Clinical's entry (L59-63) holds one
    assert examples.text.count(answer) == (1 if task == "IIYi-Clinical" else 2)


@pytest.mark.parametrize("task", list(R2MED_Q2D))
def test_query2doc_prompt_is_r2meds_formatted_twice(task):
    # instrcution.py L92: .format(EXAMPLE=Example[key], TEXT="{TEXT}"), then
    # generate_hypothetical_doc.py L188 (L86 for the API models): .format(TEXT=entry['text'])
    book = PromptBook({}, task)
    example = book.get("query2doc-examples").text
    query = "A 30-year-old\nwith {braces}? "
    ref = R2MED_Q2D[task].format(EXAMPLE=example, TEXT="{TEXT}").format(TEXT=query)
    assert book.get("query2doc").render(query=query, examples=example) == ref


def test_other_data_keeps_the_generic_examples():
    assert PromptBook({}, "scifact").get("query2doc-examples").name == "query2doc-examples/default"


# --- BRIGHT's reasoning rewrite: reason.py L89-91, L157 ------------------------------------


def test_reason_collapses_newlines_and_sends_brights_system_message(tmp_path):
    folder = tmp_path / "nl"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(json.dumps({"id": "d1", "text": "statins"}) + "\n")
    (folder / "query.jsonl").write_text(
        json.dumps({"id": "q1", "text": "line one\nline two"}) + "\n"
    )
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "d1", "score": 1}) + "\n")
    seen = []
    scripted.install(lambda messages, params: seen.append(messages) or "statins")
    assert run(folder, tmp_path, "reason") == 0
    system, user = seen[0]
    assert system == {"role": "system", "content": "You are a helpful assistant"}
    assert user["content"].startswith("line one line two\n\nInstructions:\n")


# --- sampling presets: the parameters a server receives ----------------------------------


class Capture(BaseHTTPRequestHandler):
    bodies: list[dict] = []
    reply = "Statins inhibit HMG-CoA reductase."

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        if self.path.endswith("/chat/completions"):
            out = json.dumps({
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": type(self).reply}}],
                "usage": usage,
            }).encode()  # fmt: skip
        else:  # llama.cpp's completions endpoint (--server llamacpp)
            out = json.dumps({
                "id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "text": type(self).reply,
                             "logprobs": None}],
                "usage": usage,
            }).encode()  # fmt: skip
        send_body(self, out)

    def log_message(self, *args):
        pass


@pytest.fixture
def server_url():
    """An OpenAI-compatible server on loopback that records every request body (the port is
    the server's own, bound before anyone calls it)."""
    Capture.bodies = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", Capture.bodies
    httpd.shutdown()
    httpd.server_close()


SAMPLING = ("temperature", "top_p", "top_k", "seed", "repetition_penalty", "max_tokens",
            "max_completion_tokens")  # fmt: skip


def sent(body: dict) -> dict:
    return {k: body[k] for k in SAMPLING if k in body}


@pytest.mark.parametrize(
    "model, expected",
    [
        # R2MED src/generate_hypothetical_doc.py L14, L90-98: API models at 0.8 / 0.8
        ("openai/gpt-4o-mini", {"temperature": 0.8, "top_p": 0.8}),
        # L230, L247: open models on vLLM at 0.7, seed 42, 10240 tokens
        (
            "hosted_vllm/Qwen/Qwen2.5-7B-Instruct",
            {"temperature": 0.7, "seed": 42, "max_tokens": 10240},
        ),
        # o3-mini takes no temperature or top_p; R2MED sets no budget for API models
        ("openai/o3-mini", {}),
    ],
)
def test_paper_preset_sends_each_family_r2meds_settings(
    toy_dir, tmp_path, server_url, model, expected
):
    url, bodies = server_url
    assert run(toy_dir, tmp_path, "hyde", "--preset", "paper", "--api-base", url, model=model) == 0
    assert len(bodies) == 3 and all(sent(b) == expected for b in bodies)
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    recorded = config["sampling"]["hyde/generate"]
    assert recorded["params"] == expected and recorded["preset"] == "paper"
    assert config["llm"]["preset"] == "paper"


def test_reasoning_api_models_work_without_a_preset(toy_dir, tmp_path, server_url, caplog):
    url, bodies = server_url
    assert run(toy_dir, tmp_path, "hyde", "--api-base", url, model="openai/o3-mini") == 0
    assert all(sent(b) == {"max_completion_tokens": 25000} for b in bodies)
    # an explicit budget is its completion budget; a temperature it refuses is not sent
    assert run(toy_dir, tmp_path, "hyde", "--api-base", url, "--max-tokens", "4000",
               "--temperature", "0", "--run-name", "t", model="openai/o3-mini") == 0  # fmt: skip
    assert sent(bodies[-1]) == {"max_completion_tokens": 4000}
    config = json.loads((tmp_path / "runs" / "t" / "config.json").read_text())
    assert "refuses temperature" in config["sampling"]["hyde/generate"]["not_sent"]["temperature"]
    assert "not sent: temperature" in caplog.text


def test_explicit_settings_win_over_the_preset(toy_dir, tmp_path, server_url):
    url, bodies = server_url
    assert run(toy_dir, tmp_path, "hyde", "--preset", "paper", "--temperature", "0.1",
               "--api-base", url, model="openai/gpt-4o-mini") == 0  # fmt: skip
    assert sent(bodies[-1]) == {"temperature": 0.1, "top_p": 0.8}


@pytest.mark.parametrize("server", ["vllm", "llamacpp"])
def test_open_model_servers_get_search_o1s_own_sampling_parameters(toy_dir, tmp_path, server_url,
                                                                    server):  # fmt: skip
    """vLLM takes top_k and repetition_penalty beside the OpenAI fields; llama.cpp's server
    calls the penalty repeat_penalty (and gets min_p 0, so only the asked-for samplers act)."""
    url, bodies = server_url
    args = ["--preset", "paper", "--api-base", url, "--server", server, "--max-turns", "1"]
    if server == "llamacpp":
        args += ["--chat-template", "chatml"]
    assert run(toy_dir, tmp_path, "search-o1", *args, model="openai/QwQ-32B") == 0
    body = bodies[-1]  # on llama.cpp's path a one-token reset request goes first
    common = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "max_tokens": 20480}
    assert {k: body[k] for k in common} == common
    if server == "vllm":
        assert body["repetition_penalty"] == 1.05 and "messages" in body
    else:
        assert body["repeat_penalty"] == 1.05 and body["min_p"] == 0.0 and "prompt" in body
        assert "repetition_penalty" not in body


def test_search_o1_paper_settings_follow_its_script_per_node_and_model():
    # run_search_o1.py L124-150, L210-212, L387-394 (reasoning), L304-313 (Reason-in-Documents)
    qwq = resolve("paper", "search-o1", "reason", "hosted_vllm/Qwen/QwQ-32B", "vllm")
    assert qwq.params == {"temperature": 0.7, "top_p": 0.8, "top_k": 20,
                          "repetition_penalty": 1.05, "max_tokens": 20480}  # fmt: skip
    other = resolve("paper", "search-o1", "reason", "hosted_vllm/Qwen/Qwen2.5-7B-Instruct", "vllm")
    assert other.params["repetition_penalty"] == 1.0 and other.params["max_tokens"] == 8192
    docs = resolve(
        "paper", "search-o1", "documents", "hosted_vllm/Qwen/Qwen2.5-7B-Instruct", "vllm"
    )
    assert docs.params["repetition_penalty"] == 1.05 and docs.params["max_tokens"] == 8192
    api = resolve("paper", "search-o1", "reason", "openai/gpt-4o-mini", "openai")
    assert api.params == {"temperature": 0.7, "top_p": 0.8, "max_tokens": 8192}
    assert set(api.not_sent) == set()  # the API rule asks for nothing it cannot take
    given = resolve("paper", "search-o1", "reason", "openai/gpt-4o-mini", "openai",
                    {"top_k": 5})  # fmt: skip
    assert "top_k" not in given.params and "open-model servers" in given.not_sent["top_k"]


def test_other_originals_settings():
    # Search-R1 evaluate.sh L21 + greedy validation (ray_trainer.py L508, vllm_rollout.py
    # L162-171: top_p 1.0, top_k -1; L105-121: repetition_penalty vLLM's 1.0, sent so that a
    # server does not apply generation_config.json's); BRIGHT reason.py L75-98; RankGPT
    # rank_gpt.py L186; rank1 rank1.py L35, L86-92
    vllm = "hosted_vllm/m"
    assert resolve("paper", "search-r1", "reason", vllm, "vllm").params == {
        "temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
        "max_tokens": 500,
    }  # fmt: skip
    assert resolve("paper", "search-r1", "reason", "openai/gpt-4o", "openai").params == {
        "temperature": 0.0, "max_tokens": 500,
    }  # fmt: skip
    assert resolve("paper", "reason", "generate", "openai/gpt-4o", "openai").params == {
        "temperature": 0.8, "top_p": 0.8, "max_tokens": 2048,
    }  # fmt: skip
    assert resolve("paper", "llm-listwise", "window", vllm, "vllm").params == {"temperature": 0.0}
    rank1 = resolve("paper", "llm-pointwise", "judge", vllm, "vllm", options={"reason": True})
    assert rank1.params == {"temperature": 0.0, "max_tokens": 8192}
    # what no original ran keeps the defaults
    assert resolve("paper", "tool-search", "reason", vllm, "vllm").params == {
        "temperature": 0.0, "max_tokens": 512,
    }  # fmt: skip


def test_families():
    assert model_family("local/qwen2.5-coder-0.5b", "local") == "open"
    assert model_family("openai/Qwen2.5-7B", "vllm") == "open"
    assert model_family("openai/o4-mini", "openai") == "reasoning-api"
    assert model_family("openai/gpt-5-mini", "openai") == "reasoning-api"
    assert model_family("openai/gpt-4o-mini", "openai") == "api"
    assert model_family("anthropic/claude-3-7-sonnet-20250219", "openai") == "api"
    # the default gives an open reasoning model a budget its thinking fits
    assert resolve("default", "hyde", "generate", "hosted_vllm/Qwen/QwQ-32B", "vllm").params == {
        "temperature": 0.0, "max_tokens": 10240,
    }  # fmt: skip
    assert resolve("default", "hyde", "generate", "local/qwen2.5-coder-0.5b", "local").params == {
        "temperature": 0.0, "max_tokens": 512,
    }  # fmt: skip


def test_the_preset_is_one_setting_for_flags_sweeps_and_python(tmp_path):
    from agents.config.run_config import LLMConfig, RunConfig
    from agents.config.serialise import from_dict, to_dict
    from agents.config.settings import from_settings
    from agents.config.sweep_file import load_sweep
    from agents.config.sweep_grid import cells

    config = from_settings({"agent": "hyde", "preset": "paper", "seed": 7})
    assert config == RunConfig(agent="hyde", llm=LLMConfig(preset="paper", seed=7))
    assert from_dict(to_dict(config)) == config
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        f'output = "{tmp_path / "out"}"\nagents = ["hyde"]\n[options]\npreset = "paper"\n'
    )
    (cell,), _ = cells(load_sweep(sweep))
    assert cell.config.llm.preset == "paper"


# --- Search-o1's prompts: scripts/prompts.py L110-129, L357-370; run_search_o1.py L332-370 -----

# sha256 of the original's text, get_singleqa_search_o1_instruction(5) +
# get_task_instruction_openqa(O1_QUESTION[, model_name='qwq']) (run_search_o1.py L334,
# L337-340, L368: one user message), computed from the snapshot at 6ced48f
O1_QUESTION = "A 30-year-old\nwith {braces}? "
O1_ORIGINALS = {
    "default": "5e738ba50fe14a0f9aaf0adf5594482ccf8a93a13bab3b1b868db2c65ff9c6e6",
    "qwq": "b737db2cc23b82c8aacf28962e80cea9b38d287e1ba1784097afece6e384d843",
}
# prompts/SOURCES.md's changes, (Search-o1's text, ours)
O1_CHANGES = (
    ("perform web searches", "perform searches in a collection of medical documents"),
    ("relevant web pages", "relevant documents"),
    ("request a web search", "request a search"),
)
O1_ANSWER = {  # prompts.py L367 and L361: how the final answer is asked for
    "default": "Provide your final answer",
    "qwq": "You should provide your final answer",
}
OURS_ANSWER = " at the end, as a short passage that answers the question."


@pytest.mark.parametrize("variant", ["default", "qwq"])
def test_search_o1_prompts_are_search_o1s_own_with_the_listed_changes(variant):
    text = PromptBook({}, "toy").get("search-o1", None if variant == "default" else variant).text
    answer = O1_ANSWER[variant]
    changes = (
        *O1_CHANGES,
        (f"{answer} in the format \\boxed{{YOUR_ANSWER}}.", answer + OURS_ANSWER),
    )
    for original, ours in changes:
        assert ours in text, ours
        text = text.replace(ours, original)
    # rendered by hand: the original holds braces a str.format template would need doubled
    original = text.replace("{max_searches}", "5").replace("{query}", O1_QUESTION)
    assert hashlib.sha256(original.encode()).hexdigest() == O1_ORIGINALS[variant]


def test_a_qwq_model_reads_search_o1s_qwq_task_prompt(toy_dir, tmp_path):
    """run_search_o1.py L337-338: 'qwq' in model_path.lower() picks the QwQ task prompt
    (prompts.py L358-363); the run records which one it sent, in config.json and the trace."""
    for qwq in ("hosted_vllm/Qwen/QwQ-32B", "openai/qwq-32b-preview"):
        for preset in ("default", "paper"):
            assert preset_options(preset, "search-o1", qwq).values["qwq_prompt"] is True
    other = preset_options("default", "search-o1", "hosted_vllm/Qwen/Qwen2.5-7B-Instruct")
    assert other.values == {}
    assert "L337-338" in preset_options("default", "search-o1", "x/QwQ").sources["qwq_prompt"]
    scripted.install(lambda messages, params: "Statins lower it.")
    assert run(toy_dir, tmp_path, "search-o1", "--option", "qwq_prompt=true") == 0
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    qwq = PromptBook({}, "toy").get("search-o1", "qwq")
    assert config["prompts"]["search-o1/qwq"] == qwq.sha256
    assert "search-o1/default" not in config["prompts"]
    first = records(tmp_path / "runs" / "r")["q3"]["steps"][0]
    assert first["prompt"]["name"] == "search-o1/qwq"
    assert first["messages"][0]["content"].endswith(
        "Please answer the following question. You should provide your final answer at the "
        "end, as a short passage that answers the question.\n\nQuestion:\nWhat lowers "
        "cholesterol?\n\n"
    )


# --- a Search-o1 turn: run_search_o1.py L529-532, L412-417, L406, L610-613 -------------------


def test_a_search_o1_turn_is_a_search_only_when_it_ends_with_the_end_tag():
    b, e = BEGIN_QUERY, END_QUERY
    # L406: vLLM keeps the stop string; ours strip it, and the backends that say which one
    # ended the text get it back
    assert read_turn(f"x {b} q ", "stop", e, True) == Turn("q", f"x {b} q {e}")
    # L532: a turn that ended otherwise (the model's end of turn) is no search
    assert read_turn(f"x {b} q", "stop", None, True) == Turn(None, f"x {b} q")
    # a backend that does not say: the one stop string asked for is assumed, and said so
    assert read_turn(f"x {b} q", "stop", None, False) == Turn("q", f"x {b} q{e}", True)
    # text written past the closed query: the turn does not end with the tag
    assert read_turn(f"{b}q{e} more", "stop", None, False).query is None
    assert read_turn(f"{b} q", "length", None, False).query is None  # cut at max_tokens
    assert read_turn(f"{b}  ", "stop", e, True).query is None  # `if search_query`: empty
    # L412-417: re.findall of a non-greedy pair, the last match, stripped
    assert read_turn(f"{b}a{e} {b} b ", "stop", e, True).query == "b"
    assert read_turn(f"{b}a {b} b", "stop", e, True).query == f"a {b} b"


# --- an empty text: R2MED src/eval_BM25.py L124-133 (no fallback), L74-83 ---------------------


def test_an_empty_text_is_searched_as_r2med_searches_it(toy_dir, tmp_path):
    from eval.datasets import load_tasks
    from eval.evaluate import pad_run
    from retrievers.config import RetrieverConfig
    from retrievers.search import build_retriever

    # ours falls back to the query; R2MED searches the text as it is
    assert falls_back("", "none") and falls_back("<think>x</think>", "think")
    assert not falls_back("", "none", query_fallback=False)
    # R2MED's BM25 of a text without a corpus term: every document scores 0, and the stable
    # sort keeps the first 100 in corpus order (L76-83); ours ranks none, --pad gives that list
    task = load_tasks(str(toy_dir), tmp_path / "cache")[0]
    bm25 = build_retriever(RetrieverConfig("bm25"), task, tmp_path / "cache", progress=False)
    assert bm25.index.search("") == {} == bm25.index.search("More.")
    doc_ids = list(task.corpus)
    r2med = sorted(dict.fromkeys(doc_ids, 0.0).items(), key=lambda x: x[1], reverse=True)[:100]
    assert list(pad_run({"q": {}}, doc_ids, 100)["q"].items()) == r2med
    # R2MED's own released texts are searched by its rule
    assert Generations("r2med:qwq-32b", Path("x"), "", {}).r2med
    assert not Generations("file:mine", Path("x"), "", {}).r2med


TOY_DOCS = ("d1", "d2", "d3", "d4", "d5")


def padded_run(folder: Path, query_id: str) -> dict[str, float]:
    """A query's list in run.trec, as pytrec_eval reads it (a dict: run.trec's order is
    trec_eval's tie order)."""
    lines = (folder / "toy" / "run.trec").read_text().splitlines()
    return {r[2]: float(r[4]) for r in map(str.split, lines) if r[0] == query_id}


@pytest.mark.parametrize(
    "agent, empty, more",
    [
        ("search-o1", "", "More."),
        ("search-r1", "<answer> </answer>", "<answer>More.</answer>"),
    ],
)
def test_search_agents_without_the_fallback_search_the_text_as_it_is(
    toy_dir, tmp_path, agent, empty, more
):
    """eval_BM25.py L124-133: the output searched as it is, an empty one too; nothing ranked,
    which --pad makes R2MED's list, every document at 0 in corpus order (L74-83)."""
    for reply, folder in ((empty, tmp_path / "empty"), (more, tmp_path / "more")):
        scripted.install(lambda messages, params, reply=reply: reply)
        assert run(toy_dir, folder, agent, "--option", "query_fallback=false", "--pad") == 0
        rec = records(folder / "runs" / "r")["q2"]
        final = rec["steps"][-1]
        assert rec["ranking"] == [] and "nothing ranked, as R2MED" in final["note"]
        assert padded_run(folder / "runs" / "r", "q2") == dict.fromkeys(TOY_DOCS, 0.0)
        # the empty text goes to BM25 as a text without a term, not as "" (the query)
        assert final["request"]["sparse_text"] == (NO_TERM if reply == empty else "More.")


# --- Search-R1's question and context: nq_search.py L61-63, generation.py L107-115 ------------


def test_search_r1_question_ends_with_a_question_mark():
    # scripts/data_process/nq_search.py L61-63 (and infer.py L13-15): strip, then add "?"
    assert search_r1_question(" Which drug lowers glucose\n") == "Which drug lowers glucose?"
    assert search_r1_question("What lowers cholesterol? ") == "What lowers cholesterol?"


class WordCounter(Counter):
    """One token a word, two a message (a chat template's own)."""

    described = "words"

    def _count(self, messages):
        return sum(len(m["content"].split()) + 2 for m in messages)

    def _encode(self, text):
        return text.split()

    def _decode(self, ids):
        return " ".join(ids)


def test_search_r1_keeps_its_input_to_its_last_tokens():
    # generation.py L107-115: input_ids[:, -min(max_prompt_length, effective_len):]
    messages = [{"role": "user", "content": "a b c d"}, {"role": "assistant", "content": "e f g"}]
    assert fit_context(messages, 11, WordCounter()) == (messages, None)
    fitted, cut = fit_context(messages, 8, WordCounter())  # 11 tokens: the first 3 go
    assert [m["content"] for m in fitted] == ["d", "e f g"]
    assert cut == {"limit": 8, "tokens": 11, "cut": 3, "counted_by": "words"}
    fitted, _ = fit_context(messages, 6, WordCounter())  # the first message all, then "e"
    assert [m["content"] for m in fitted] == ["", "f g"]


def test_search_r1_paper_options(tmp_path):
    """The paper preset's options (agents.llm.sampling.OPTION_RULES) as the run takes them:
    the question ended with "?" (nq_search.py L61-63) and every turn's input cut to its last
    context_tokens tokens (generation.py L107-115; evaluate.sh L20: 4096)."""
    assert preset_options("paper", "search-r1", None).values == {
        "context_tokens": 4096, "question_mark": True, "query_fallback": False,
    }  # fmt: skip
    assert preset_options("default", "search-r1", "hosted_vllm/m").values == {}
    assert preset_options("paper", "search-o1", None).values == {"query_fallback": False}
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": f"d{i}", "text": f"aspirin platelets {i} " * 40}) + "\n"
                for i in range(3))
    )  # fmt: skip
    (folder / "query.jsonl").write_text(json.dumps({"id": "q1", "text": "aspirin action"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "d1", "score": 1}) + "\n")
    scripted.install(lambda messages, params: "<search> aspirin platelets </search>")
    options = ["--option", "question_mark=true", "--option", "context_tokens=300"]
    assert run(folder, tmp_path, "search-r1", *options) == 0
    steps = [s for s in records(tmp_path / "runs" / "r", "data")["q1"]["steps"]
             if s["node"] == "reason"]  # fmt: skip
    assert "Question: aspirin action?\n" in steps[0]["messages"][0]["content"]
    assert "context_cut" not in steps[0] and steps[-1]["context_cut"]["limit"] == 300
    cut = steps[-1]["context_cut"]
    assert cut["tokens"] > 300 and "litellm" in cut["counted_by"]
    assert not steps[-1]["messages"][0]["content"].startswith("Answer the given question.")


# --- the preset's options as runs take them (agents.config.run_config:
# agents.llm.sampling.OPTION_RULES) --


def test_a_qwq_model_is_given_search_o1s_qwq_prompt(toy_dir, tmp_path):
    # run_search_o1.py L337-338, under every preset; an option given wins
    scripted.install(lambda messages, params: "Statins lower it.")
    assert run(toy_dir, tmp_path, "search-o1", model="scripted/QwQ-test") == 0
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert config["options"]["qwq_prompt"] is True and "search-o1/qwq" in config["prompts"]
    assert run(toy_dir, tmp_path, "search-o1", "--option", "qwq_prompt=false", "--run-name",
               "plain", model="scripted/QwQ-test") == 0  # fmt: skip
    config = json.loads((tmp_path / "runs" / "plain" / "config.json").read_text())
    assert "search-o1/default" in config["prompts"]


def test_the_paper_preset_gives_search_r1_its_originals_options(toy_dir, tmp_path):
    scripted.install(lambda messages, params: "<answer> statins </answer>")
    assert run(toy_dir, tmp_path, "search-r1", "--preset", "paper") == 0
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    options = config["options"]
    assert (options["context_tokens"], options["question_mark"], options["query_fallback"]) == (
        4096, True, False,
    )  # fmt: skip
    assert run(toy_dir, tmp_path, "search-r1", "--run-name", "d") == 0
    options = json.loads((tmp_path / "runs" / "d" / "config.json").read_text())["options"]
    assert (options["context_tokens"], options["question_mark"]) == (0, False)


@pytest.mark.parametrize("source", ["r2med", "file"])
def test_an_empty_released_text_is_searched_as_r2med_searched_it(toy_dir, tmp_path, source):
    """R2MED src/eval_BM25.py L124-133: R2MED's own texts are searched as they are; an empty
    one ranks nothing, which --pad makes R2MED's list (L74-83). Other sources keep ours."""
    lines = "".join(json.dumps({"id": q, "hy_doc": ""}) + "\n" for q in ("q1", "q2", "q3"))
    if source == "r2med":
        folder = tmp_path / "released" / "toy" / "hyde" / "gpt4"
        folder.mkdir(parents=True)
        (folder / "query_with_hydoc.jsonl").write_text(lines)
        given = f"r2med:gpt4@{tmp_path / 'released'}"
    else:
        (tmp_path / "texts.jsonl").write_text(lines)
        given = str(tmp_path / "texts.jsonl")
    assert run(toy_dir, tmp_path, "hyde", "--generations", given, "--pad") == 0
    rec = records(tmp_path / "runs" / "r")["q2"]
    if source == "file":
        assert rec["steps"][-1]["note"].startswith("empty generation; searched with the query")
        return
    assert rec["steps"][-1]["request"]["sparse_text"] == NO_TERM and rec["ranking"] == []
    assert padded_run(tmp_path / "runs" / "r", "q2") == dict.fromkeys(TOY_DOCS, 0.0)


# --- R2MED's reranker rows: src/eval_reranker.py L112-119 ------------------------------------


@pytest.mark.parametrize(
    "model",
    ["BAAI/bge-reranker-v2-m3", "castorini/monobert-large-msmarco",
     "castorini/rankllama-v1-7b-lora-passage"],
)  # fmt: skip
def test_the_paper_preset_keeps_only_an_r2med_rerankers_top_k(model):
    from agents.config.run_config import LLMConfig, RunConfig
    from agents.config.serialise import to_dict
    from agents.config.stages import parse_stage

    def stage(spec: str, preset: str) -> dict:
        config = RunConfig(rerank=(parse_stage(spec),), llm=LLMConfig(preset=preset))
        return to_dict(config)["rerank"][0]["options"]  # as config.json records it

    # eval_reranker.py L118: each query's list is the reranked top_k alone
    assert stage(f"cross:{model},depth=10", "paper")["keep_rest"] is False
    assert stage(f"cross:{model},depth=10", "default")["keep_rest"] is True
    assert stage(f"cross:{model},depth=10,keep_rest=true", "paper")["keep_rest"] is True  # given
    assert stage("cross:my-org/my-reranker,depth=10", "paper")["keep_rest"] is True  # not R2MED's
    from agents.rerank.cross import R2MED_TOP_K

    assert "src/eval_reranker.py" in R2MED_TOP_K and "L118" in R2MED_TOP_K


def test_an_r2med_reranker_row_under_the_paper_preset_ends_its_list_at_depth(toy_dir, tmp_path):
    from tests import tiny_models

    model = tiny_models.bert(tmp_path / "castorini" / "monobert-large-msmarco", num_labels=2)

    def lists(*extra: str, name: str) -> dict[str, list[str]]:
        assert main([
            "--agent", "none", "--dataset", str(toy_dir),
            "--rerank", f"cross:{model},depth=2,device=cpu", *extra,
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
            "--run-name", name, "--quiet",
        ]) == 0  # fmt: skip
        stage = tmp_path / "runs" / name / "toy" / "rerank-1-cross"
        out: dict[str, list[str]] = {}
        for line in (stage / "run.trec").read_text().splitlines():
            qid, _, doc, *_ = line.split()
            out.setdefault(qid, []).append(doc)
        return out

    paper, default = lists("--preset", "paper", name="p"), lists(name="d")
    assert paper == {q: docs[:2] for q, docs in default.items()}  # the same top, nothing under
    assert sum(len(docs) for docs in default.values()) > sum(len(d) for d in paper.values())
    config = json.loads((tmp_path / "runs" / "p" / "config.json").read_text())
    assert config["rerank"][0]["options"]["keep_rest"] is False
