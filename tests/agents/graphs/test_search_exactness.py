"""search-o1 and search-r1 against their originals' own loops, to the last turn and token.

The originals (sunnynexus/Search-o1 at 6ced48f, PeterGriffinJin/Search-R1 at a14dc3a) need a
GPU, vLLM and web search, so the parts compared here are transcribed verbatim with their file
and line numbers, around scripted models: Search-o1's main loop for one sequence (its last
turn's search included), and Search-R1's rolling input (its token ids cut from the left). Each
case is built so that the difference from what the agents did before changes what they rank or
what the model reads; the replies' thinking, which litellm splits off, is read as the model
wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.graphs.combine import r2med_request
from agents.graphs.context import search_step
from agents.graphs.search_o1 import BEGIN_QUERY, BEGIN_RESULT, END_QUERY, END_RESULT
from agents.llm import scripted
from eval.datasets import load_tasks
from retrievers.config import RetrieverConfig
from retrievers.search import build_retriever
from tests.helpers import Server, chat, nodes, records
from tests.helpers import run_agent as run
from tests.tiny_models import qwen_tokenizer

ASPIRIN = "How does aspirin act on platelets?"


@pytest.fixture
def toy(tmp_path: Path, toy_dir: Path) -> dict:
    return {"data": toy_dir, "runs": tmp_path / "runs", "cache": tmp_path / "cache"}


def bm25_ranking(toy: dict, query: str, output: str) -> list[str]:
    """The final ranking of a Search-o1 output of a model outside R2MED's reasoning list, as
    the agent's "final" node searches it (agents.graphs.search_loop.final_ranking)."""
    task = load_tasks(str(toy["data"]), toy["cache"])[0]
    bm25 = build_retriever(RetrieverConfig("bm25"), task, toy["cache"], progress=False)
    ranking, _ = search_step(bm25, "final", r2med_request("search-o1", query, output), 10, "q")
    return list(ranking)


# --- Search-o1: its main loop, transcribed -----------------------------------------------------


# scripts/run_search_o1.py L412-417
def extract_between(text: str, start_tag: str, end_tag: str) -> str | None:
    pattern = re.escape(start_tag) + r"(.*?)" + re.escape(end_tag)
    matches = re.findall(pattern, text, flags=re.DOTALL)
    if matches:
        return matches[-1].strip()
    return None


# scripts/evaluate.py L20-29 (extract_answer, mode 'infogen')
def extract_infogen(output: str) -> str:
    pattern_info = "\n**Final Information**"
    pattern_step = "\n**Modified Reasoning Steps**"
    if pattern_info in output:
        extracted_text = output.split(pattern_info)[-1].replace("\n", "").strip("```").strip()  # noqa: B005
    elif pattern_step in output:
        extracted_text = output.split(pattern_step)[-1].strip("```").strip()  # noqa: B005
    else:
        extracted_text = "No helpful information found."
    return extracted_text


def search_o1_output(
    generate: Callable[[int], str],
    reason_in_documents: Callable[[str], str],
    max_search_limit: int,
    max_turn: int,
) -> str:
    """scripts/run_search_o1.py L496-613, L653-685 and L701 for one sequence, line by line:
    ``generate(turn)`` is the turn's text with the stop string that ended it (L406, L522),
    ``reason_in_documents(query)`` the raw reply of Reason-in-Documents, read by
    ``extract_answer(raw, mode='infogen')`` (L316); the Bing search and page fetching
    (L535-563, L615-650) are left out: they only make the documents."""
    BEGIN_SEARCH_QUERY, END_SEARCH_QUERY = BEGIN_QUERY, END_QUERY
    BEGIN_SEARCH_RESULT, END_SEARCH_RESULT = BEGIN_RESULT, END_RESULT
    MAX_SEARCH_LIMIT, MAX_TURN = max_search_limit, max_turn
    seq = {"output": "", "finished": False, "search_count": 0, "executed_search_queries": set()}
    active_sequences = [seq]
    turn = 0
    while True:
        sequences_needing_generation = [seq for seq in active_sequences if not seq["finished"]]
        if sequences_needing_generation:
            turn += 1
            batch_search_queries, batch_sequences = [], []
            for seq in sequences_needing_generation:
                text = generate(turn)
                seq["output"] += text
                search_query = extract_between(text, BEGIN_SEARCH_QUERY, END_SEARCH_QUERY)
                if search_query and seq["output"].rstrip().endswith(END_SEARCH_QUERY):
                    if (seq["search_count"] < MAX_SEARCH_LIMIT
                            and search_query not in seq["executed_search_queries"]):  # fmt: skip
                        batch_search_queries.append(search_query)
                        batch_sequences.append(seq)
                        seq["search_count"] += 1
                        seq["executed_search_queries"].add(search_query)
                    elif seq["search_count"] >= MAX_SEARCH_LIMIT:
                        limit_message = (
                            f"\n{BEGIN_SEARCH_RESULT}\nThe maximum search limit is exceeded. "
                            f"You are not allowed to search.\n{END_SEARCH_RESULT}\n"
                        )
                        seq["output"] += limit_message
                    elif search_query in seq["executed_search_queries"]:
                        limit_message = (
                            f"\n{BEGIN_SEARCH_RESULT}\nYou have searched this query. Please "
                            f"refer to previous results.\n{END_SEARCH_RESULT}\n"
                        )
                        seq["output"] += limit_message
                else:
                    seq["finished"] = True
            if batch_sequences:
                webpage_analyses = [
                    extract_infogen(reason_in_documents(q)) for q in batch_search_queries
                ]
                for seq, analysis in zip(batch_sequences, webpage_analyses, strict=True):
                    if isinstance(analysis, str):
                        append_text = f"\n\n{BEGIN_SEARCH_RESULT}{analysis}{END_SEARCH_RESULT}\n\n"
                        seq["output"] += append_text
        unfinished = [seq for seq in active_sequences if not seq["finished"]]
        if not unfinished:
            break
        else:
            if turn >= MAX_TURN:
                break
    output_list = [seq["output"] for seq in active_sequences]
    return output_list[0]


LAST_QUERY = "warfarin"
FOUND = "Reading.\n**Final Information**\n" + (
    "Warfarin antagonises vitamin K dependent clotting factors. " * 4
)


def turn_text(n: int) -> str:
    """A model that searches on every turn: the first 14 for platelets, the 15th for warfarin."""
    query = LAST_QUERY if n == 15 else f"platelet {n}"
    return f"Step {n}: let me look this up.\n\n{BEGIN_QUERY}{query}"


def reading(messages: list[dict]) -> bool:
    return messages[0]["content"].startswith("**Task Instruction:**")


def o1_model(messages: list[dict], params: dict) -> str:
    if reading(messages):  # Reason-in-Documents finds something in the last search only
        last = f'current search query "{LAST_QUERY}"' in messages[0]["content"]
        return FOUND if last else "Nothing new."
    return turn_text(1 + sum(m["role"] == "assistant" for m in messages))  # chat mode


@pytest.mark.parametrize("max_searches", [5, 15])
def test_o1_runs_the_search_of_its_last_turn_as_search_o1_does(toy, max_searches):
    """run_search_o1.py L683-685: the loop stops after the 15th turn's search (or its canned
    refusal, L596-608) and Reason-in-Documents (L653-676) have joined the output (L701)."""
    scripted.install(o1_model)
    argv = ["--max-searches", str(max_searches), "--final-ranking", "answer"]
    assert run(toy, "search-o1", *argv) == 0
    rec = records(toy)["q2"]
    expected = search_o1_output(
        lambda n: turn_text(n) + END_QUERY,  # with the stop string that ended it (L406)
        lambda q: FOUND if q == LAST_QUERY else "Nothing new.",
        max_searches,
        15,
    )
    assert rec["generated"]["passage"] == expected
    assert nodes(rec).count("reason") == 15 and nodes(rec)[-2:] == ["limit", "final"]
    assert "that search was made or refused" in rec["steps"][-2]["reason"]
    if max_searches == 5:  # the 15th turn's search is refused: the canned message ends it
        assert nodes(rec)[-3] == "search_skipped" and nodes(rec).count("search") == 5
        return
    assert nodes(rec).count("search") == 15 and nodes(rec)[-4:-2] == ["search", "documents"]
    assert rec["steps"][-3]["information"] == extract_infogen(FOUND)
    # what the 15th search found moves warfarin's document to the top; the output without it
    # (where the agent stopped before) ranks aspirin's first
    before = expected[: expected.rindex(f"\n\n{BEGIN_RESULT}")]
    assert bm25_ranking(toy, ASPIRIN, before)[0] == "d3"
    assert rec["ranking"][0][0] == "d5" == bm25_ranking(toy, ASPIRIN, expected)[0]


def test_o1_fuses_the_list_of_its_last_turns_search(toy):
    """With --final-ranking fuse, every list the agent retrieved is fused: the 15th search's
    list is one of them."""
    scripted.install(o1_model)
    assert run(toy, "search-o1", "--max-searches", "15", "--final-ranking", "fuse") == 0
    final = records(toy)["q2"]["steps"][-1]
    assert final["fused_lists"] == 15 + 1  # every search's list and the answer's


# --- the reply as the model wrote it ---------------------------------------------------------


def test_o1_reads_a_search_query_written_while_thinking(toy):
    """Search-o1 reads vLLM's raw text (run_search_o1.py L522, L529): a query written inside
    the thinking, which a reasoning parser returns as reasoning_content (the text empty), is a
    search, and the trajectory goes on with the whole reply."""
    thought = f"I should check statins.\n\n{BEGIN_QUERY}statins cholesterol"

    def respond(messages, params):
        if reading(messages):
            return scripted.Reply("\n**Final Information**\nStatins lower cholesterol.",
                                  reasoning="The documents name HMG-CoA reductase.")  # fmt: skip
        if len(messages) == 1:
            return scripted.Reply("", reasoning=thought, stop_reason=END_QUERY)
        return "Statins inhibit HMG-CoA reductase and lower cholesterol."

    scripted.install(respond)
    assert run(toy, "search-o1") == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "search", "documents", "reason", "final"]
    assert rec["steps"][0]["search_query"] == "statins cholesterol"
    assert rec["steps"][0]["output"] == f"<think>{thought}"
    # the conversation goes on with the whole reply, its query closed by the stop string
    second = [s for s in rec["steps"] if s["node"] == "reason"][1]["messages"]
    assert second[1]["content"] == f"<think>{thought}{END_QUERY}"
    assert rec["steps"][2]["information"] == "Statins lower cholesterol."
    # the search changed the ranking: the query alone ranks aspirin's document first
    assert rec["ranking"][0][0] == "d4"


def r1_thinker(messages, params):
    """A Search-R1 model whose tags are inside its thinking: a search, then an answer."""
    shown = "".join(str(m["content"]) for m in messages)
    if "Doc 1(Title:" not in shown:
        return scripted.Reply("", reasoning="I need facts. <search> statins cholesterol",
                              stop_reason="</search>")  # fmt: skip
    return scripted.Reply("", reasoning="So: <answer> statins lower cholesterol",
                          stop_reason="</answer>")  # fmt: skip


def test_r1_reads_search_and_answer_written_while_thinking(toy):
    """Search-R1 reads the whole decoded response (generation.py L56-66, L422): tags inside
    the thinking a reasoning parser split off are the turn's action."""
    scripted.install(r1_thinker)
    assert run(toy, "search-r1") == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "search", "reason", "final"]
    assert rec["steps"][1]["request"]["query"] == "statins cholesterol"
    assert rec["steps"][2]["action"] == "answer"
    assert rec["generated"]["answer"] == "statins lower cholesterol"
    assert rec["generated"]["passage"].startswith(
        "<think>I need facts. <search> statins cholesterol</search>\n\n<information>"
    )  # fmt: skip
    assert rec["ranking"][0][0] == "d4"  # the answer's document, not the query's (d3)


@pytest.fixture
def vllm_like() -> Iterator[Callable[[Callable[[dict], tuple[str, str]]], Server]]:
    """A chat endpoint that answers as vLLM with a reasoning parser does: the text of a reply
    that stopped while thinking is all ``reasoning_content``, its ``content`` null, and the
    stop string that ended it is the choice's ``stop_reason``."""
    made: list[Server] = []

    def start(answer: Callable[[dict], tuple[str, str]]) -> Server:
        def reply(path: str, body: dict) -> bytes:
            text, stop = answer(body)
            return chat(None, reasoning=text, stop_reason=stop)

        made.append(Server(reply))
        return made[-1]

    yield start
    for server in made:
        server.close()


def test_r1_on_a_vllm_server_continues_with_the_reasoning_it_was_sent(toy, vllm_like):
    """hosted_vllm/: litellm keeps the server's reasoning_content apart from the (null) text;
    the agent reads the search in it and continues the turn with the whole reply."""

    def answer(body):
        shown = "".join(str(m["content"]) for m in body["messages"])
        if "Doc 1(Title:" not in shown:
            return "I need facts. <search> statins cholesterol", "</search>"
        return "So: <answer> statins lower cholesterol", "</answer>"

    server = vllm_like(answer)
    argv = ["--model", "hosted_vllm/m", "--api-base", server.url]
    assert run(toy, "search-r1", *argv, "--limit", "1") == 0
    second = server.bodies[1]
    assert second["messages"][-1]["content"].startswith(
        "<think>I need facts. <search> statins cholesterol</search>\n\n<information>Doc 1"
    )  # fmt: skip
    assert second["continue_final_message"] is True
    rec = records(toy)["q1"]
    assert rec["generated"]["answer"] == "statins lower cholesterol"


# --- Search-R1: the rolling input, transcribed ---------------------------------------------

# A Qwen2.5-style chat template: the default system message when none is given.
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def search_r1_inputs(
    tokenizer: Any,
    prompt_with_chat_template: str,
    responses: list[str],
    observations: list[str],
    max_prompt_length: int,
) -> list[list[int]]:
    """The token ids the model is given before each turn, as Search-R1's rollout gives them,
    for one sequence: the prompt tokenized and left-padded (rl_dataset.py L134-139,
    verl/utils/torch_functional.py L209-265), each turn's response and observation tokenized
    (generation.py L45-52, L74, L77-91) and the rolling state updated and cut (L93-118,
    tensor_helper.py L16-48) before the next turn (L237-240), the left padding removed as
    vLLM's rollout removes it (vllm_rollout.py L49-54, L160)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    pad_token_id = tokenizer.pad_token_id

    def pad_sequence_to_length(tensors, max_seq_len, pad_token_id, left_pad=False):
        if tensors.shape[-1] >= max_seq_len:
            return tensors
        pad_tuple = (
            (max_seq_len - tensors.shape[-1], 0)
            if left_pad
            else (0, max_seq_len - tensors.shape[-1])
        )
        return F.pad(tensors, pad_tuple, "constant", pad_token_id)

    input_data = tokenizer(prompt_with_chat_template, return_tensors="pt", add_special_tokens=False)
    input_ids = input_data["input_ids"]
    assert input_ids.shape[-1] <= max_prompt_length  # truncation='error'
    input_ids = pad_sequence_to_length(input_ids, max_seq_len=max_prompt_length,
                                       pad_token_id=pad_token_id, left_pad=True)  # fmt: skip

    def create_attention_mask(input_ids):
        return torch.where(input_ids != pad_token_id, 1, 0)

    def cut_to_effective_len(input_ids):
        effective_len = create_attention_mask(input_ids).sum(dim=1).max()
        return input_ids[:, -effective_len:]

    def concatenate_with_padding(tensors, pad_to_left=True):
        concatenated = torch.cat(tensors, dim=1)
        mask = concatenated != pad_token_id if pad_to_left else concatenated == pad_token_id
        sorted_indices = mask.to(torch.int64).argsort(dim=1, stable=True)
        return concatenated.gather(1, sorted_indices)

    def pre_process_inputs(prompt_token_ids):
        non_pad_index = torch.nonzero(prompt_token_ids != pad_token_id, as_tuple=False)[0][0]
        return prompt_token_ids[non_pad_index:].tolist()

    def tokenize(texts):
        return tokenizer(texts, add_special_tokens=False, return_tensors="pt",
                         padding="longest")["input_ids"]  # fmt: skip

    rollings, inputs = input_ids, []
    for step in range(len(responses) + 1):
        rollings = cut_to_effective_len(rollings)
        inputs.append(pre_process_inputs(rollings[0]))
        if step == len(responses):
            break
        new_input_ids = concatenate_with_padding(
            [rollings, tokenize([responses[step]]), tokenize([observations[step]])]
        )
        effective_len = create_attention_mask(new_input_ids).sum(dim=1).max()
        max_len = min(max_prompt_length, effective_len)
        rollings = new_input_ids[:, -max_len:]
    return inputs


@pytest.fixture
def qwen_tok(tmp_path: Path) -> Path:
    folder = tmp_path / "qwen-tok"
    qwen_tokenizer(folder, False, "left", chat_template=QWEN_TEMPLATE,
                   clean_up_tokenization_spaces=False)  # fmt: skip
    return folder


THINKING = "Aspirin irreversibly inhibits cyclooxygenase and platelet aggregation. " * 40


def r1_long_model(sent: list[dict]) -> Callable:
    """Four searches after long thinking, then an answer; records each raw prompt."""

    def respond(messages, params):
        sent.append({"prompt": messages[0]["content"], "params": params})
        if len(sent) <= 4:
            return f"<think>{THINKING}</think>\n<search> aspirin platelets {len(sent)} "
        return "<think>done</think>\n<answer> statins </answer>"

    return respond


def test_r1_cuts_the_whole_rendered_input_to_its_last_tokens_as_search_r1_does(toy, qwen_tok):
    """generation.py L107-115: the rolling input's ids, chat template included, are cut to
    their last max_prompt_length (4,096 under --preset paper); the model reads that text."""
    from transformers import AutoTokenizer

    sent: list[dict] = []
    scripted.install(r1_long_model(sent))
    argv = ["--preset", "paper", "--option", "llm_mode=continue",
            "--option", f"tokenizer={qwen_tok}", "--limit", "1"]  # fmt: skip
    assert run(toy, "search-r1", *argv) == 0
    rec = records(toy)["q1"]
    steps = [s for s in rec["steps"] if s["node"] == "reason"]
    assert len(steps) == 5 and steps[-1]["action"] == "answer"
    tok = AutoTokenizer.from_pretrained(qwen_tok)
    user = tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    assert user.startswith("<|im_start|>system\nYou are Qwen")
    # the pieces Search-R1 tokenizes one by one: each turn's response and observation
    passage = rec["generated"]["passage"]
    responses = [s["output"].split("</search>")[0] + "</search>" for s in steps[:4]]
    observations, rest = [], passage
    for i, response in enumerate(responses):
        rest = rest.removeprefix(response)
        following = responses[i + 1] if i + 1 < len(responses) else "<think>done</think>"
        observations.append(rest[: rest.index(following)])
        rest = rest[len(observations[-1]) :]
    first = steps[0]["prompt"]  # the rendered prompt, not cut: it is the first input
    expected = search_r1_inputs(tok, first, responses, observations, 4096)
    assert [len(ids) for ids in expected][-1] == 4096  # the last turns are cut
    for step, ids in zip(steps, expected, strict=True):
        assert step["prompt"] == tok.decode(ids)
        assert step["rendered_by"] == f"the chat template of {qwen_tok}"
    cut = steps[-1]["context_cut"]
    assert cut["limit"] == 4096 and cut["tokens"] > 4096 and "exact" in cut["counted_by"]
    # the chat template's own tokens were the first to go, as in Search-R1; the message-text
    # cut before kept "<|im_start|>system" and "<|im_start|>user" at the front
    assert not steps[-1]["prompt"].startswith("<|im_start|>")
    assert "<|im_start|>system" not in steps[-1]["prompt"]
    assert steps[-1]["prompt_file"]["name"] == "search-r1/default"
    # every sampling value the preset gives is sent with the raw prompt too
    assert {k: sent[-1]["params"].get(k) for k in ("temperature", "max_tokens")} == {
        "temperature": 0.0, "max_tokens": 500,
    }  # fmt: skip


@pytest.mark.slow
def test_the_embedded_model_reads_the_last_tokens_of_its_whole_chatml_prompt(
    tmp_path, toy_dir, models_cache
):
    """An embedded model (its ChatML with its default system message, its own tokenizer):
    what it is sent is the end of the whole rendered input, cut at its context_tokens."""
    from agents.commands.run import main
    from agents.llm.embedded.chatml import render_chatml
    from agents.llm.embedded.names import local_name
    from agents.llm.embedded.pool import tokenizer
    from agents.llm.embedded.weights import LOCAL_MODELS
    from eval.records import read_records
    from prompts import PromptBook

    model, window = "local/smollm2-135m", 120
    assert main([
        "--agent", "search-r1", "--dataset", str(toy_dir), "--model", model,
        "--option", f"context_tokens={window}", "--max-turns", "1", "--max-tokens", "16",
        "--limit", "1", "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(models_cache),
        "--run-name", "e", "--quiet",
    ]) == 0  # fmt: skip
    rec = next(iter(read_records(tmp_path / "runs" / "e" / "toy" / "queries.jsonl").values()))
    steps = [s for s in rec["steps"] if s["node"] == "reason"]
    tok = tokenizer(local_name(model), models_cache)
    for step in steps:
        assert step["llm_mode"] == "continue" and step["rendered_by"] == f"{model}'s ChatML"
        cut = step["context_cut"]  # the prompt alone is longer than the window
        assert cut["limit"] == window and "own tokenizer" in cut["counted_by"]
        assert abs(len(tok.tokenize(step["prompt"])) - window) <= 2  # joined again, as sent
        assert not step["prompt"].startswith("<|im_start|>")
    # each is the end of the whole input: the prompt through the model's ChatML, then the
    # trajectory so far
    user = PromptBook({}, "toy").get("search-r1").render(query=rec["query"])
    rendered = render_chatml([{"role": "user", "content": user}],
                             LOCAL_MODELS[local_name(model)].default_system)  # fmt: skip
    assert rendered.endswith(steps[0]["prompt"])
    assert steps[1]["prompt"] in rendered + rec["generated"]["passage"]


def test_a_tokenizer_that_does_not_load_stops_the_run_before_any_call(toy, capsys):
    provider = scripted.install(r1_long_model([]))
    missing = toy["cache"].parent / "no-such-tokenizer"
    argv = ["--option", "context_tokens=4096", "--option", f"tokenizer={missing}"]
    assert run(toy, "search-r1", *argv) == 2
    err = capsys.readouterr().err
    assert provider.calls == 0 and f"option tokenizer={missing}: no tokenizer loads" in err
    assert "Traceback" not in err


def test_where_the_rolling_input_is_rendered_here():
    """The chat template the raw cut renders with: a llama.cpp server's (its prompts are
    rendered here anyway), none for a vLLM server or a chat API (their templates are on the
    server: the messages are cut instead, unless tokenizer= names the checkpoint's)."""
    from agents.graphs.search_r1 import model_window
    from agents.llm import LLM
    from agents.llm.embedded.chatml import render_chatml

    served = LLM("openai/m", api_base="http://127.0.0.1:9/v1", server="llamacpp",
                 chat_template="chatml")  # fmt: skip
    window = model_window(served)
    assert window is not None and window.rendered_by == "the chat template chatml"
    assert window.render("Q?") == render_chatml([{"role": "user", "content": "Q?"}])
    assert "approximate" in window.counter.described  # litellm's tokens, not the model's
    assert model_window(LLM("hosted_vllm/m", api_base="http://127.0.0.1:9/v1")) is None
    assert model_window(LLM("openai/gpt-4o-mini")) is None
