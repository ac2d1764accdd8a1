"""Credentials reach no file: whatever the variable is called, and inside URLs too."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import litellm
import pytest

from agents.commands.run import main
from agents.commands.sweep import main as sweep_main
from agents.commands.trace import main as trace_main
from agents.config.serialise import to_dict
from agents.config.settings import from_settings
from agents.llm import scripted
from eval.compare.__main__ import main as compare_main
from eval.compare.html import embed_json
from eval.plumbing.files import safe_name
from eval.plumbing.secrets.redaction import public_url, redact
from tests.helpers import send_body

URL_PASSWORD = "hunter2-url-password"
URL_TOKEN = "tok-0123456789abcdef"


def test_any_credential_named_variable_is_masked(monkeypatch):
    monkeypatch.setenv("MY_LLM_CREDS", "value-of-a-credential")
    monkeypatch.setenv("GATEWAY_PASSWD", "another-secret-value")
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnop")
    text = "got value-of-a-credential, another-secret-value and hf_abcdefghijklmnop back"
    assert redact(text) == "got <MY_LLM_CREDS>, <GATEWAY_PASSWD> and <HF_TOKEN> back"


@pytest.mark.parametrize(
    "text, hidden",
    [
        (f"POST http://bob:{URL_PASSWORD}@127.0.0.1:8000/v1 failed", URL_PASSWORD),
        (f"GET https://h/v1/chat?api_key={URL_TOKEN}&x=1", URL_TOKEN),
        (f"headers: Authorization: Bearer {URL_TOKEN}", URL_TOKEN),
        (f"token={URL_TOKEN}", URL_TOKEN),
        (f'{{"x-api-key": "{URL_TOKEN}"}}', URL_TOKEN),
    ],
)
def test_credentials_in_free_text_are_masked(text, hidden):
    assert hidden not in redact(text)


def test_ordinary_words_are_left_alone():
    text = "max_tokens: 512, passage: statins lower LDL, keyword=aspirin"
    assert redact(text) == text


def test_public_url_masks_the_password_and_credential_parameters():
    url = f"http://bob:{URL_PASSWORD}@127.0.0.1:8000/v1?api_key={URL_TOKEN}&model=q"
    assert public_url(url) == "http://bob:***@127.0.0.1:8000/v1?api_key=***&model=q"
    assert public_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_a_password_in_the_api_base_reaches_no_file(tmp_path: Path, toy_dir: Path, capsys):
    scripted.install(lambda m, p: "Statins inhibit HMG-CoA reductase.")
    url = f"http://bob:{URL_PASSWORD}@127.0.0.1:9/v1?api_key={URL_TOKEN}"
    argv = [
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--api-base", url, "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", "r", "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert config["llm"]["api_base"] == "http://bob:***@127.0.0.1:9/v1?api_key=***"
    out = capsys.readouterr()
    for secret in (URL_PASSWORD, URL_TOKEN):
        assert secret not in out.out + out.err
        leaks = [
            p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()
        ]
        assert leaks == []
    assert main(argv) == 0  # and the masked config still binds the same run


# --- what is not a credential --------------------------------------------------------------

SECRETS = {  # variable -> value, each a credential however its provider names it
    "OPENAI_API_KEY": "sk-proj-FAKEopenai-0123456789abcdef",
    "HF_TOKEN": "hf_FAKEhuggingfaceTOKEN0123",
    "HUGGING_FACE_HUB_TOKEN": "hf_FAKEhubTOKEN-9876543210",
    "ANTHROPIC_API_KEY": "sk-ant-api03-FAKEanthropic-0123",
    "AZURE_OPENAI_API_KEY": "FAKEazure0123456789abcdef0123",
    "AWS_SECRET_ACCESS_KEY": "FAKEawsSECRETaccessKEY/0123456789",
    "AWS_SESSION_TOKEN": "FAKEawsSESSIONtoken+abcdefghij",
    "DB_PASSWORD": "correct-horse-battery-staple",
    "MY_SERVICE_PASSWD": "FAKE-service-passwd-42",
    "GITHUB_PAT": "github_pat_FAKE0123456789abcdef",
    "GITHUBTOKEN": "ghp_FAKEglued0123456789abc",
    "PGPASSWORD": "FAKE-postgres-pw-0123",
    "MYSQL_PWD": "FAKE-mysql-pwd-0123",
    "LLM_API_KEY_2": "FAKE-second-replica-key-0123",
    "WEBHOOK_SECRET": "whsec_FAKE0123456789",
    "GOOGLE_CREDENTIALS": '{"private_key": "FAKE-google-key-0123"}',
    # holds OPENAI_API_KEY's value: it must be masked whole, not as <OPENAI_API_KEY>-tail
    "GATEWAY_TOKEN": "sk-proj-FAKEopenai-0123456789abcdef-gateway-77",
}


def login_shell(cwd: Path, home: Path) -> dict[str, str]:
    """A realistic desktop login shell's variables: many names hold KEY, PWD, AUTH, SESSION,
    and none is a credential."""
    run_user = "/run/user/1000"
    return {
        "PWD": str(cwd),
        "OLDPWD": str(home),
        "HOME": str(home),
        "SHELL": "/usr/bin/zsh",
        "USER": "alice-researcher",
        "LOGNAME": "alice-researcher",
        "LANG": "en_US.UTF-8",
        "TERM": "xterm-256color",
        "HISTFILE": str(home / ".zsh_history"),
        "KEYTIMEOUT": "1",
        "XDG_SESSION_ID": "c2a9f31b7e",
        "XDG_SESSION_TYPE": "wayland",
        "XDG_SESSION_CLASS": "user",
        "XDG_SESSION_DESKTOP": "ubuntu-wayland",
        "XDG_RUNTIME_DIR": run_user,
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DESKTOP_SESSION": "ubuntu-wayland",
        "GDMSESSION": "ubuntu-wayland",
        "SSH_AUTH_SOCK": f"{run_user}/keyring/ssh",
        "SSH_AGENT_PID": "123456789",
        "GPG_AGENT_INFO": f"{run_user}/gnupg/S.gpg-agent:0:1",
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={run_user}/bus",
        "SESSION_MANAGER": "local/host:@/tmp/.ICE-unix/2345,unix/host:/tmp/.ICE-unix/2345",
        "XAUTHORITY": f"{run_user}/.mutter-Xwaylandauth.4DXJ71",
        "SSH_ASKPASS": "/usr/lib/openssh/gnome-ssh-askpass",
        "GNOME_KEYRING_CONTROL": f"{run_user}/keyring",
        "TOKENIZERS_PARALLELISM": "false",
        "GIT_AUTHOR_NAME": "Alice Researcher",
        "LESSKEY": str(home / ".less"),
        "SSH_CONNECTION": "10.0.0.7 53122 10.0.0.2 22",
    }


# Named like a credential, but pointing at one or describing it: a path, a socket, a number.
DESCRIBED = {
    "HF_TOKEN_PATH": "/run/secrets/hf-token",
    "AWS_SHARED_CREDENTIALS_FILE": "/home/alice/.aws/credentials",
    "PASSWORD_STORE_DIR": "/home/alice/.password-store",
    "API_KEY_TIMEOUT": "3600000000",
    "AUTH_METHOD": "password",
    "TOKEN_URL": "https://login.example.org/oauth/token",
    "SECRET_NAME": "prod-llm-gateway",
}


@pytest.mark.parametrize("name", list(SECRETS))
def test_each_real_credential_is_masked_by_its_name(monkeypatch, name):
    for other in SECRETS:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, SECRETS[name])
    assert redact(f"echo: [{SECRETS[name]}]") == f"echo: [<{name}>]"


def test_a_secret_holding_another_is_masked_whole(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRETS["OPENAI_API_KEY"])
    monkeypatch.setenv("GATEWAY_TOKEN", SECRETS["GATEWAY_TOKEN"])
    text = f"{SECRETS['GATEWAY_TOKEN']} then {SECRETS['OPENAI_API_KEY']}"
    assert redact(text) == "<GATEWAY_TOKEN> then <OPENAI_API_KEY>"
    assert redact("x", extra=("abc-secret", "abc-secret-longer")) == "x"
    assert redact("abc-secret-longer", extra=("abc-secret", "abc-secret-longer")) == "***"


def test_login_shell_variables_are_left_alone(monkeypatch, tmp_path):
    shell = login_shell(tmp_path / "work" / "project", tmp_path / "home")
    for name, value in {**shell, **DESCRIBED}.items():
        monkeypatch.setenv(name, value)
    for name, value in {**shell, **DESCRIBED}.items():
        text = f"{name} is {value}/queries.jsonl"
        assert redact(text) == text, name


def test_a_credential_named_variable_holding_a_path_or_number_is_left_alone(monkeypatch, tmp_path):
    creds = tmp_path / "gcloud" / "application_default_credentials.json"
    creds.parent.mkdir()
    creds.write_text("{}")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(creds))
    monkeypatch.setenv("MY_TOKEN_HOME", str(tmp_path))
    monkeypatch.setenv("AUTH_RETRIES", "1000000000")
    text = f"read {creds} under {tmp_path}, doc 1000000000"
    assert redact(text) == text


def test_a_folder_after_pwd_in_free_text_is_left_alone(tmp_path):
    assert redact(f"pwd: {tmp_path}, PWD={tmp_path}") == f"pwd: {tmp_path}, PWD={tmp_path}"
    assert redact("pwd=hunter2hunter2") == "pwd=***"


def test_public_url_keeps_ordinary_parameters():
    url = "http://h:1/v1?keyword=aspirin&passage=x&session=3&max_tokens=9&apiKey=k&sig=s"
    assert public_url(url) == (
        "http://h:1/v1?keyword=aspirin&passage=x&session=3&max_tokens=9&apiKey=***&sig=***"
    )


def test_a_login_shell_run_masks_its_secrets_and_no_path(
    tmp_path: Path, toy_dir: Path, monkeypatch, capsys
):
    """End to end under a real login shell, the run folder under the working directory."""
    cwd, home = tmp_path, tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(cwd)
    shell = login_shell(cwd, home)
    for name, value in {**shell, **SECRETS}.items():
        monkeypatch.setenv(name, value)
    quoted = (
        f"cannot read {cwd}/prompts/hyde.txt from {home}; keys {SECRETS['GATEWAY_TOKEN']}, "
        f"{SECRETS['OPENAI_API_KEY']}, {SECRETS['HF_TOKEN']}, {SECRETS['AWS_SESSION_TOKEN']}"
    )

    def respond(messages, params):
        if "aspirin" in messages[-1]["content"]:
            # a provider's error quoting paths and keys back (not retried: fails at once)
            return litellm.BadRequestError(message=quoted, model="test", llm_provider="scripted")
        return "Statins inhibit HMG-CoA reductase."

    scripted.install(respond)
    runs, cache = cwd / "runs", cwd / "cache"
    argv = [
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/test",
        "--runs-dir", str(runs), "--cache-dir", str(cache), "--run-name", "r", "--quiet",
    ]  # fmt: skip
    assert main(argv) == 1  # one query failed, and its error is recorded
    config = json.loads((runs / "r" / "config.json").read_text())
    assert (config["runs_dir"], config["cache_dir"]) == (str(runs), str(cache))
    assert config["dataset"] == str(toy_dir)
    task = json.loads((runs / "r" / "toy" / "task.json").read_text())
    assert task["path"] == str(toy_dir)
    lines = (runs / "r" / "toy" / "queries.jsonl").read_text().splitlines()
    error = {r["query_id"]: r["error"] for r in map(json.loads, lines)}["q2"]
    masked = (
        f"cannot read {cwd}/prompts/hyde.txt from {home}; keys <GATEWAY_TOKEN>, "
        "<OPENAI_API_KEY>, <HF_TOKEN>, <AWS_SESSION_TOKEN>"
    )
    assert masked in error
    err = capsys.readouterr().err
    assert masked in err  # the log line of the failed query
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent != toy_dir]
    texts = {p: p.read_bytes().decode("utf-8", "replace") for p in written}
    assert [p for p, t in texts.items() for n in shell if f"<{n}>" in t] == []
    assert [n for n in shell if f"<{n}>" in err] == []
    assert [p for p, t in texts.items() for v in SECRETS.values() if v in t] == []


# --- every URL and key, exactly as each file, line and output shows it ---------------------
# Each field that holds a URL or a key, checked by its exact masked text wherever a run, a
# sweep, a dry run, agents.trace or eval.compare writes or prints it.

OPENAI = SECRETS["OPENAI_API_KEY"]
GATEWAY = SECRETS["GATEWAY_TOKEN"]  # holds OPENAI's value: masked whole, no tail left behind
LLM_URL = f"http://bob:{URL_PASSWORD}@127.0.0.1:9/v1?api_key={URL_TOKEN}"
LLM_MASKED = "http://bob:***@127.0.0.1:9/v1?api_key=***"
REPLICAS = (
    "http://ann:replica-one-pw@10.0.0.1:8000/v1?api_key=replica-key-1111,"
    "http://bea:replica-two-pw@10.0.0.2:8001/v1?token=replica-key-2222&model=q"
)
REPLICAS_MASKED = (
    "http://ann:***@10.0.0.1:8000/v1?api_key=***,http://bea:***@10.0.0.2:8001/v1?token=***&model=q"
)
STAGE_URL = "http://u:stage-pw-5678@host/v1?api_key=stage-key-5678"
STAGE_MASKED = "http://u:***@host/v1?api_key=***"
STAGE = f"llm-listwise,model=scripted/other,api_base={STAGE_URL}"
EMBED_PASSWORD, EMBED_KEY = "embed-pw-24680", "embed-key-13579"
PLAIN = {  # every secret above in the clear, and the tail a shortest-first masking leaves
    URL_PASSWORD, URL_TOKEN, "replica-one-pw", "replica-key-1111", "replica-two-pw",
    "replica-key-2222", "stage-pw-5678", "stage-key-5678", EMBED_PASSWORD, EMBED_KEY, OPENAI,
    GATEWAY, GATEWAY.removeprefix(OPENAI),
}  # fmt: skip


def embed_url(port: int) -> str:
    return f"http://eve:{EMBED_PASSWORD}@127.0.0.1:{port}/v1?api_key={EMBED_KEY}"


def embed_masked(port: int) -> str:
    return f"http://eve:***@127.0.0.1:{port}/v1?api_key=***"


class _Embeddings(BaseHTTPRequestHandler):
    """An OpenAI-compatible embedding server: a deterministic vector per text."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        # the OpenAI SDK appends "embeddings" to the base URL as it is, query and all:
        # /v1/embeddings, or /v1/?api_key=...embeddings when the URL holds a key
        if not self.path.endswith("embeddings"):
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i,
             "embedding": [b / 255 for b in hashlib.sha256(str(t).encode()).digest()[:16]]}
            for i, t in enumerate(texts)
        ]  # fmt: skip
        reply = json.dumps({
            "object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
        }).encode()  # fmt: skip
        send_body(self, reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def embed_port():
    """The port of a local embedding server, bound (port 0: a free one) before it is used."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def env_secrets(monkeypatch):
    for name in SECRETS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI)
    monkeypatch.setenv("GATEWAY_TOKEN", GATEWAY)


def plain_in_files(root: Path, skip: tuple[Path, ...] = ()) -> list[tuple[str, str]]:
    """(file, secret) for each secret in the clear in a file's bytes or in its path."""
    found = []
    for path in root.rglob("*"):
        if any(path == s or s in path.parents for s in skip):
            continue
        data = path.read_bytes() if path.is_file() else b""
        found += [(str(path), s) for s in PLAIN if s.encode() in data or s in str(path)]
    return found


def plain_in(text: str) -> list[str]:
    return sorted(s for s in PLAIN if s in text)


def test_to_dict_masks_every_url_and_key_exactly(env_secrets):
    config = from_settings({
        "agent": "hyde", "model": "scripted/test", "api_base": REPLICAS, "rerank": [STAGE],
        "retriever": "api:openai/emb", "embed_api_base": embed_url(8001),
        "embed_option": [f"user={GATEWAY}", "dimensions=16"],
    })  # fmt: skip
    data = to_dict(config)
    assert data["llm"]["api_base"] == REPLICAS_MASKED
    assert data["rerank"][0]["options"]["api_base"] == STAGE_MASKED
    assert data["retriever"]["api"]["api_base"] == embed_masked(8001)
    assert data["retriever"]["api"]["params"] == {"user": "<GATEWAY_TOKEN>", "dimensions": "16"}
    assert plain_in(json.dumps(data)) == []
    assert config.llm.api_base == REPLICAS  # the run itself calls the URLs as given
    assert config.rerank[0].options["api_base"] == STAGE_URL
    assert config.retriever.api.api_base == embed_url(8001)
    single = to_dict(from_settings({"agent": "hyde", "model": "scripted/t", "api_base": LLM_URL}))
    assert single["llm"]["api_base"] == LLM_MASKED


def test_replicas_are_masked_part_by_part():
    assert public_url(REPLICAS) == REPLICAS_MASKED
    assert public_url(f"{LLM_URL},http://127.0.0.1:8002/v1") == (
        f"{LLM_MASKED},http://127.0.0.1:8002/v1"
    )


def test_a_secret_holding_another_leaves_no_tail_anywhere(env_secrets):
    text = f"a {GATEWAY} b {OPENAI} c http://x:{GATEWAY}@h/v1?token={OPENAI}"
    assert redact(text) == "a <GATEWAY_TOKEN> b <OPENAI_API_KEY> c http://x:***@h/v1?token=***"
    assert redact(f"[{GATEWAY}]", extra=(OPENAI, GATEWAY)) == "[<GATEWAY_TOKEN>]"
    assert redact("[tok-a-longer] [tok-a]", extra=("tok-a", "tok-a-longer")) == "[***] [***]"


def test_an_embedding_option_named_like_a_key_is_refused_unechoed(tmp_path, toy_dir, capsys):
    argv = [
        "--agent", "none", "--dataset", str(toy_dir), "--retriever", "api:openai/emb",
        "--embed-option", f"api_key={EMBED_KEY}", "--runs-dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.err == (
        "error: retriever.api.params: 'api_key' looks like a credential; keys come from the "
        "environment, never from a config (it is written to config.json)\n"
    )
    assert out.out == "" and not (tmp_path / "runs").exists()


def test_an_embedding_option_holding_a_key_reaches_no_cache_file(
    tmp_path, toy_dir, embed_port, env_secrets
):
    argv = [
        "--agent", "none", "--dataset", str(toy_dir), "--retriever", "api:openai/emb",
        "--embed-api-base", embed_url(embed_port), "--embed-option", f"user={GATEWAY}",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    (meta,) = (tmp_path / "cache" / "dense").glob("*/meta.json")
    assert plain_in(meta.read_text()) == []


def run_argv(toy_dir: Path, tmp_path: Path, port: int) -> list[str]:
    """A run whose every URL field holds a password and a key: replicas, a rerank stage's
    own server, the embedding server, and an environment secret as an embedding option."""
    return [
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/test",
        "--api-base", REPLICAS, "--rerank", STAGE, "--retriever", "api:openai/emb",
        "--embed-api-base", embed_url(port), "--embed-option", f"user={GATEWAY}",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--quiet",
    ]  # fmt: skip


def test_a_run_writes_and_prints_every_url_and_key_masked(
    tmp_path, toy_dir, embed_port, env_secrets, capsys, caplog
):
    caplog.set_level(logging.INFO)
    scripted.install(lambda m, p: "Statins inhibit HMG-CoA reductase.")
    argv = run_argv(toy_dir, tmp_path, embed_port)
    # the run folder is named after the stage's server, masked: a path holds no password
    name = safe_name(
        f"hyde-api:openai/emb-test-toy-rerank=llm-listwise,model=other,api_base={STAGE_MASKED}"
    )
    run_dir = tmp_path / "runs" / name

    assert main([*argv, "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert dry.out.splitlines()[0] == f"dry run (no model called): {run_dir}"
    assert plain_in(dry.out + dry.err) == [] and not run_dir.exists()

    assert main(argv) == 0
    out = capsys.readouterr()
    assert f"run folder: {run_dir}\n" in out.out
    text = (run_dir / "config.json").read_text()
    assert f'"api_base": "{REPLICAS_MASKED}"' in text
    assert f'"api_base": "{STAGE_MASKED}"' in text
    assert f'"api_base": "{embed_masked(embed_port)}"' in text
    assert '"user": "<GATEWAY_TOKEN>"' in text
    config = json.loads(text)
    assert config["llm"]["api_base"] == REPLICAS_MASKED
    assert config["rerank"][0]["options"]["api_base"] == STAGE_MASKED
    assert config["retriever"]["api"] == {
        "api_base": embed_masked(embed_port),
        "batch_size": 64,
        "params": {"user": "<GATEWAY_TOKEN>"},
    }
    assert main(argv) == 0  # the masked config.json still binds the same run: resumed
    out2 = capsys.readouterr()
    assert [r.getMessage() for r in caplog.records if r.name == "agents.execution.whole_run"] == [
        f"toy: already finished, reading {run_dir / 'toy' / 'metrics.json'}"
    ]
    assert trace_main([str(run_dir), "q1", "--no-qrels"]) == 0
    traced = capsys.readouterr()
    assert "\nstage rerank-1-llm-listwise: " in traced.out

    compared = tmp_path / "compared"
    assert compare_main([str(run_dir), "--out", str(compared), "--no-plots"]) == 0
    shown = capsys.readouterr()
    summary = json.loads((compared / "comparison.json").read_text())
    assert list(summary["runs"].values()) == [str(run_dir)]
    assert f"| {run_dir} |" in (compared / "report.md").read_text()
    assert embed_json(str(run_dir))[1:-1] in (compared / "report.html").read_text()

    printed = [out, out2, traced, shown]
    assert plain_in("".join(o.out + o.err for o in printed)) == []
    assert [r.getMessage() for r in caplog.records if plain_in(r.getMessage())] == []
    assert plain_in_files(tmp_path, skip=(toy_dir,)) == []


def test_an_error_quoting_urls_and_keys_is_recorded_and_shown_masked(
    tmp_path, toy_dir, env_secrets, capsys, caplog
):
    caplog.set_level(logging.INFO)
    quoted = f"POST {LLM_URL} refused {GATEWAY}; embeddings at {embed_url(8001)}, key {OPENAI}"

    def respond(messages, params):
        if "aspirin" in messages[-1]["content"]:  # not retried: fails the query at once
            return litellm.BadRequestError(message=quoted, model="test", llm_provider="scripted")
        return "Statins inhibit HMG-CoA reductase."

    scripted.install(respond)
    run_dir = tmp_path / "runs" / "r"
    argv = [
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/test",
        "--api-base", LLM_URL, "--runs-dir", str(run_dir.parent),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", "r", "--quiet",
    ]  # fmt: skip
    assert main(argv) == 1
    masked = (
        f"BadRequestError: litellm.BadRequestError: POST {LLM_MASKED} refused <GATEWAY_TOKEN>; "
        f"embeddings at {embed_masked(8001)}, key <OPENAI_API_KEY>"
    )
    records = [json.loads(line) for line in (run_dir / "toy" / "queries.jsonl").open()]
    assert {r["query_id"]: r["error"] for r in records} == {"q1": None, "q2": masked, "q3": None}
    assert json.loads((run_dir / "config.json").read_text())["llm"]["api_base"] == LLM_MASKED
    out = capsys.readouterr()
    assert f"toy [hyde]: query q2 failed: {masked}\n" in out.err

    assert trace_main([str(run_dir), "q2", "--no-qrels"]) == 0
    traced = capsys.readouterr()
    assert f"\nFAILED: {masked}\n" in traced.out

    compared = tmp_path / "compared"
    assert compare_main([str(run_dir), "--out", str(compared), "--no-plots"]) == 0
    shown = capsys.readouterr()
    assert embed_json(masked)[1:-1] in (compared / "report.html").read_text()

    printed = out.out + out.err + traced.out + traced.err + shown.out + shown.err
    assert plain_in(printed) == []
    assert [r.getMessage() for r in caplog.records if plain_in(r.getMessage())] == []
    assert plain_in_files(tmp_path, skip=(toy_dir,)) == []


@pytest.mark.slow
def test_a_sweep_writes_every_url_and_key_masked(
    tmp_path, toy_dir, embed_port, env_secrets, capsys, caplog
):
    caplog.set_level(logging.INFO)
    scripted.install(lambda m, p: "Statins inhibit HMG-CoA reductase.")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f"""
output = "out"
cache_dir = "cache"
agents = ["hyde"]
models = ["scripted/test"]
retrievers = ["api:openai/emb"]
datasets = ["{toy_dir}"]
reranks = [[], ["{STAGE}"]]

[options]
quiet = true
api_base = "{REPLICAS}"
embed_api_base = "{embed_url(embed_port)}"
embed_option = {{ user = "{GATEWAY}" }}
"""
    )
    assert sweep_main([str(sweep)]) == 0
    printed = capsys.readouterr()
    names = [
        "hyde-api_openai_emb-test-base-toy",
        safe_name(
            "hyde-api:openai/emb-test-base-toy-rerank=llm-listwise,model=other,"
            f"api_base={STAGE_MASKED}"
        ),
    ]
    assert [line for line in printed.out.splitlines() if line.startswith("[")] == [
        f"[1/2] {names[0]}",
        f"[2/2] {names[1]}",
    ]
    out = tmp_path / "out"
    cells_json = (out / "cells.json").read_text()
    assert cells_json.count(f'"api_base": "{REPLICAS_MASKED}"') == 2
    assert cells_json.count(f'"api_base": "{embed_masked(embed_port)}"') == 2
    assert cells_json.count(f'"api_base": "{STAGE_MASKED}"') == 1
    cells = json.loads(cells_json)
    assert [c["name"] for c in cells] == names
    for cell in cells:
        cell_config = json.loads((out / "runs" / cell["name"] / "config.json").read_text())
        for config in (cell["config"], cell_config):
            assert config["llm"]["api_base"] == REPLICAS_MASKED
            assert config["retriever"]["api"]["api_base"] == embed_masked(embed_port)
            assert config["retriever"]["api"]["params"] == {"user": "<GATEWAY_TOKEN>"}
            assert [s["options"]["api_base"] for s in config["rerank"]] == (
                [STAGE_MASKED] if config["rerank"] else []
            )

    comparison = out / "comparison"
    summary = json.loads((comparison / "comparison.json").read_text())
    assert sorted(summary["runs"].values()) == [str(out / "runs" / n) for n in names]
    report = (comparison / "report.md").read_text()
    assert all(f"| {out / 'runs' / n} |" in report for n in names)
    html = (comparison / "report.html").read_text()
    assert all(embed_json(str(out / "runs" / n))[1:-1] in html for n in names)

    assert sweep_main([str(sweep)]) == 0  # resumed: each cell read back from its folder
    again = capsys.readouterr()
    assert [r.getMessage() for r in caplog.records if r.name == "agents.execution.whole_run"] == [
        f"toy: already finished, reading {out / 'runs' / n / 'toy' / 'metrics.json'}" for n in names
    ]
    assert plain_in(printed.out + printed.err + again.out + again.err) == []
    assert [r.getMessage() for r in caplog.records if plain_in(r.getMessage())] == []
    assert plain_in_files(tmp_path, skip=(toy_dir, sweep)) == []


# --- one URL rule for every URL the user gives (eval/plumbing/secrets/credentials.py) -------------
# A lone userinfo is a token; a query or fragment parameter is a credential by its name
# (`is_credential_name`, plus `code`). Each form, then each place a run or a sweep puts it.

LONE = "lone-userinfo-tok-0123456789"  # http://TOKEN@host: the whole userinfo is the secret
CODE = "code-param-0123456789"
APIKEY = "apikey-param-0123456789"
SIG = "signature-param-0123456789"
ACCESS = "access-token-param-0123456789"
TOKEN_LLM_URL = (
    f"http://{LONE}@127.0.0.1:9/v1?code={CODE},http://127.0.0.1:8/v1#access_token={ACCESS}"
)
TOKEN_LLM_MASKED = "http://***@127.0.0.1:9/v1?code=***,http://127.0.0.1:8/v1#access_token=***"
TOKEN_STAGE_URL = f"http://stage-only-tok-13579@host/v1?apikey={APIKEY}&signature={SIG}&m=q"
TOKEN_STAGE_MASKED = "http://***@host/v1?apikey=***&signature=***&m=q"
TOKEN_STAGE = f"llm-listwise,model=scripted/other,api_base={TOKEN_STAGE_URL}"
TOKEN_PLAIN = {LONE, CODE, APIKEY, SIG, ACCESS, "stage-only-tok-13579"}


# fmt: off
@pytest.mark.parametrize(
    "url, masked",
    [
        ("http://bob:pw-0123456789@h/v1", "http://bob:***@h/v1"),  # password userinfo
        (f"http://{LONE}@h:8000/v1", "http://***@h:8000/v1"),  # username-only userinfo
        ("http://:pw-0123456789@h/v1", "http://:***@h/v1"),
        *[
            (f"https://h/v1?model=q&{name}=s3cr3t-value&n=1", f"https://h/v1?model=q&{name}=***&n=1")
            for name in (
                "key", "token", "secret", "password", "passwd", "code", "sig", "signature",
                "auth", "access_token", "api_key", "apikey", "api-key", "apiKey",
                "client_secret", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
                "jwt", "refresh_token", "subscription-key",
            )
        ],
        ("http://h/cb#access_token=abcdef0123&token_type=bearer",
         "http://h/cb#access_token=***&token_type=bearer"),
        (f"http://a:pw-0123456789@h1/v1,http://{LONE}@h2/v1?token=t-0123456789,http://h3/v1",
         "http://a:***@h1/v1,http://***@h2/v1?token=***,http://h3/v1"),
        # described, not held: left alone, byte for byte (no re-encoding)
        ("http://h/v1?token_type=bearer&key_file=/k&max_tokens=9&session=3&q=a%20b+c",
         "http://h/v1?token_type=bearer&key_file=/k&max_tokens=9&session=3&q=a%20b+c"),
    ],
)
# fmt: on
def test_public_url_masks_each_form(url, masked):
    assert public_url(url) == masked
    assert redact(f"POST {url}") == f"POST {masked}"


def test_ordinary_codes_in_free_text_are_left_alone():
    text = "status code: 404, exit code=1, keyword=aspirin, token_type: bearer"
    assert redact(text) == text


def test_one_credential_rule_serves_every_layer():
    import eval.plumbing.secrets.credentials
    import eval.plumbing.secrets.model_keys
    import eval.plumbing.secrets.redaction
    import retrievers.settings

    rule = eval.plumbing.secrets.credentials.is_credential_name
    users = (eval.plumbing.secrets.redaction, eval.plumbing.secrets.model_keys, retrievers.settings)
    for module in users:
        assert module.is_credential_name is rule
    assert (
        eval.plumbing.secrets.redaction.public_url is eval.plumbing.secrets.credentials.public_url
    )
    # no regex of its own
    for module in users:
        assert not [n for n in vars(module) if n.startswith(("_CREDENTIAL", "_USERINFO"))]


# Whether a name holds a credential, as eval.plumbing.secrets.credentials' rule intends: a
# credential's word (KEY, TOKEN, SECRET, PASSWORD, AUTH) or a glued ending (GITHUBTOKEN, PGPASSWORD)
# does; a name that only contains one (TOKENIZERS), describes one (API_KEY_FILE) or is a shell's
# does not.
CREDENTIAL_NAMES = {
    "OPENAI_API_KEY": True, "HF_TOKEN": True, "MY_SECRET": True, "DB_PASSWORD": True,
    "AUTH": True, "X_API_KEY": True, "GITHUBTOKEN": True, "PGPASSWORD": True, "DB_PASS": True,
    "PATH": False, "TOKENIZERS_PARALLELISM": False, "API_KEY_FILE": False, "EXIT_CODE": False,
    "OPENAI_API_BASE": False, "OLDPWD": False, "SSH_ASKPASS": False,
}  # fmt: skip


def test_every_call_site_of_the_credential_rule_gives_the_same_answer(monkeypatch):
    """eval.plumbing.secrets.redaction (masking), model_keys (which missing variables are keys)
    and retrievers.settings (an embedding option named like a key) all answer as the one rule."""
    import eval.plumbing.secrets.model_keys
    from eval.plumbing.secrets.credentials import is_credential_name
    from retrievers.settings import ApiEmbedConfig

    names = list(CREDENTIAL_NAMES)
    assert {n: is_credential_name(n) for n in names} == CREDENTIAL_NAMES
    value = "v-0123456789abcdef"
    masked = {n: value not in redact(f"{n}={value}") for n in names}
    assert masked == CREDENTIAL_NAMES

    monkeypatch.setattr(litellm, "validate_environment", lambda model: {"missing_keys": names})
    kept = eval.plumbing.secrets.model_keys.missing_key_variables("openai/gpt-4o-mini")
    assert kept == [n for n in names if CREDENTIAL_NAMES[n]]

    def refused(name: str) -> bool:
        try:
            ApiEmbedConfig(params={name: "x"})
        except ValueError as e:
            return "looks like a credential" in str(e)
        return False

    assert {n: refused(n) for n in names} == CREDENTIAL_NAMES


# fmt: off
@pytest.mark.parametrize(
    "spec, secret, where",
    [
        (f"remote:http://{LONE}@127.0.0.1:8000", LONE, "userinfo"),
        ("remote:http://ann:remote-pw-0123456789@127.0.0.1:8000", "remote-pw-0123456789",
         "userinfo"),
        ("remote:http://127.0.0.1:8000/?token=remote-tok-0123456789", "remote-tok-0123456789",
         "parameter 'token'"),
        ("bm25+remote:http://127.0.0.1:8000/?api_key=remote-key-0123456789",
         "remote-key-0123456789", "parameter 'api_key'"),
    ],
)
# fmt: on
def test_a_credential_in_a_remote_retriever_url_is_refused_unechoed(
    tmp_path, toy_dir, capsys, spec, secret, where
):
    """A remote:<url> names the run's folder and is written to config.json and cells.json, so
    a credential in it is refused in one line; the server's token comes from the environment."""
    argv = [
        "--agent", "none", "--dataset", str(toy_dir), "--retriever", spec,
        "--runs-dir", str(tmp_path / "runs"),
    ]
    assert main(argv) == 2
    out = capsys.readouterr()
    shown = public_url(spec.partition("remote:")[2])
    assert out.err == (
        f"error: retriever.spec: 'remote:{shown}': the URL holds a credential ({where}), which "
        "would be written to config.json and the run's name; set R2MED_SERVE_TOKEN instead\n"
    )
    assert out.out == "" and not (tmp_path / "runs").exists()

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'agents = ["none"]\nretrievers = ["{spec}"]\ndatasets = ["{toy_dir}"]\n')
    assert sweep_main([str(sweep)]) == 2
    out = capsys.readouterr()
    assert secret not in out.out + out.err and "R2MED_SERVE_TOKEN" in out.err
    assert len(out.err.splitlines()) == 1 and not (tmp_path / "sweep").exists()


def test_a_remote_url_without_a_credential_is_kept():
    config = from_settings({"agent": "none", "retriever": "remote:http://127.0.0.1:8000/?k=3"})
    assert to_dict(config)["retriever"]["spec"] == "remote:http://127.0.0.1:8000/?k=3"


def token_run_argv(toy_dir: Path, tmp_path: Path) -> list[str]:
    return [
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/test",
        "--api-base", TOKEN_LLM_URL, "--rerank", TOKEN_STAGE,
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
    ]


def test_token_forms_reach_no_file_name_or_line_of_a_run(tmp_path, toy_dir, capsys, caplog):
    """A lone-userinfo token, `code=`, `apikey=`, `signature=` and a fragment `access_token`:
    masked in config.json, the run folder's name, every printed line, the trace,
    run.json and metrics.json, and comparison.json."""
    caplog.set_level(logging.INFO)
    scripted.install(lambda m, p: "Statins inhibit HMG-CoA reductase.")
    argv = token_run_argv(toy_dir, tmp_path)
    name = safe_name(
        f"hyde-bm25q-test-toy-rerank=llm-listwise,model=other,api_base={TOKEN_STAGE_MASKED}"
    )
    run_dir = tmp_path / "runs" / name
    assert main([*argv, "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert dry.out.splitlines()[0] == f"dry run (no model called): {run_dir}"
    assert main(argv) == 0
    out = capsys.readouterr()
    assert f"run folder: {run_dir}\n" in out.out

    config = json.loads((run_dir / "config.json").read_text())
    assert config["llm"]["api_base"] == TOKEN_LLM_MASKED
    assert config["rerank"][0]["options"]["api_base"] == TOKEN_STAGE_MASKED
    for written in (run_dir / "run.json", run_dir / "toy" / "metrics.json"):
        assert [s for s in TOKEN_PLAIN if s in written.read_text()] == []
    assert trace_main([str(run_dir), "q1", "--no-qrels"]) == 0
    traced = capsys.readouterr()
    compared = tmp_path / "compared"
    assert compare_main([str(run_dir), "--out", str(compared), "--no-plots"]) == 0
    shown = capsys.readouterr()
    summary = json.loads((compared / "comparison.json").read_text())
    assert list(summary["runs"].values()) == [str(run_dir)]

    printed = "".join(o.out + o.err for o in (dry, out, traced, shown))
    printed += "".join(r.getMessage() for r in caplog.records)
    assert [s for s in TOKEN_PLAIN if s in printed] == []
    leaks = [
        (str(p), s)
        for p in tmp_path.rglob("*")
        if toy_dir not in p.parents
        for s in TOKEN_PLAIN
        if s in str(p) or (p.is_file() and s.encode() in p.read_bytes())
    ]
    assert leaks == []


def test_token_forms_reach_no_file_name_or_line_of_a_sweep(tmp_path, toy_dir, capsys, caplog):
    """The same forms from a sweep TOML: cell names, cells.json, comparison.json, printed lines."""
    caplog.set_level(logging.INFO)
    scripted.install(lambda m, p: "Statins inhibit HMG-CoA reductase.")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f"""
output = "out"
cache_dir = "cache"
agents = ["hyde"]
models = ["scripted/test"]
datasets = ["{toy_dir}"]
reranks = [["{TOKEN_STAGE}"]]

[options]
quiet = true
api_base = "{TOKEN_LLM_URL}"
"""
    )
    assert sweep_main([str(sweep)]) == 0
    printed = capsys.readouterr()
    name = safe_name(
        f"hyde-bm25q-test-base-toy-rerank=llm-listwise,model=other,api_base={TOKEN_STAGE_MASKED}"
    )
    assert f"[1/1] {name}" in printed.out.splitlines()
    out = tmp_path / "out"
    (cell,) = json.loads((out / "cells.json").read_text())
    assert cell["name"] == name
    assert cell["config"]["llm"]["api_base"] == TOKEN_LLM_MASKED
    assert cell["config"]["rerank"][0]["options"]["api_base"] == TOKEN_STAGE_MASKED
    summary = json.loads((out / "comparison" / "comparison.json").read_text())
    assert list(summary["runs"].values()) == [str(out / "runs" / name)]

    text = printed.out + printed.err + "".join(r.getMessage() for r in caplog.records)
    assert [s for s in TOKEN_PLAIN if s in text] == []
    leaks = [
        (str(p), s)
        for p in tmp_path.rglob("*")
        if p != sweep and toy_dir not in p.parents
        for s in TOKEN_PLAIN
        if s in str(p) or (p.is_file() and s.encode() in p.read_bytes())
    ]
    assert leaks == []


def test_an_embedding_cache_key_holds_no_secret_of_its_url():
    """The API embedder's cache identity (written to the cache's meta.json) hashes the masked
    URL: a token in it cannot be guessed back from the hash, and a renewed token keeps the
    corpus's embeddings."""
    from retrievers.api_embed import encoder_id

    plain = encoder_id("m", "http://127.0.0.1:8/v1", {})
    one = encoder_id("m", "http://TOKEN-ONE-123456@127.0.0.1:8/v1?api_key=abcdefgh1", {})
    two = encoder_id("m", "http://TOKEN-TWO-654321@127.0.0.1:8/v1?api_key=zyxwvuts2", {})
    assert one == two != plain
    assert encoder_id("m", "http://127.0.0.1:9/v1", {}) != plain


# --- the retrieval server's token (retrievers/bearer_token.py), on both sides ------------------

# values a bearer token cannot be; each secret's own characters are unusual enough that no
# message could hold one by chance
BAD_SERVE_TOKENS = {
    "non-ASCII": "ÖÄÜ§ßéèñ-serve-token",
    "trailing newline": "Qz9Wk7Xv2Lp4Nj8Rt6Ym3Hs\n",
    "CRLF": "Qz9Wk7Xv2Lp4Nj8Rt6Ym3Hs\r\n",
    "whitespace only": "   ",
    "inner space": "Qz9Wk7Xv2 Lp4Nj8Rt6Ym3Hs",
}


def secret_marks(value: str) -> list[str]:
    """What of ``value`` must not show: its stripped whole, and each non-ASCII character."""
    return [m for m in {value.strip(), *(c for c in value if not c.isascii())} if m.strip()]


class CountingHandler(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        CountingHandler.seen.append(self.path)
        send_body(self, 200, b'{"tasks": {}}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("kind", list(BAD_SERVE_TOKENS))
def test_a_serve_token_that_cannot_be_a_header_stops_a_remote_run_before_any_request(
    tmp_path, toy_dir, capsys, caplog, monkeypatch, kind
):
    """`remote:` with a token no HTTP header can carry: one line naming the variable and the
    fault, no character of the secret, no request sent, no run folder (once retried 4 times as
    'no answer', or printed as an 'ascii' codec error quoting the character)."""
    value = BAD_SERVE_TOKENS[kind]
    monkeypatch.setenv("R2MED_SERVE_TOKEN", value)
    caplog.set_level(logging.DEBUG)
    CountingHandler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), CountingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        argv = ["--agent", "none", "--dataset", str(toy_dir), "--retriever",
                f"remote:http://127.0.0.1:{server.server_port}", "--runs-dir",
                str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
        assert main(argv) == 2
    finally:
        server.shutdown()
        server.server_close()
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert line.startswith("error: $R2MED_SERVE_TOKEN ")
    assert line.endswith(": a bearer token is printable ASCII with no space or line end; "
                         "set it again")  # fmt: skip
    printed = out.out + out.err + "".join(r.getMessage() for r in caplog.records)
    assert [m for m in secret_marks(value) if m in printed] == []
    assert CountingHandler.seen == [] and not (tmp_path / "runs").exists()


SERVE_MODES = {
    "http loopback": [],
    "http off loopback": ["--host", "0.0.0.0"],
    "mcp http off loopback": ["--host", "0.0.0.0", "--mcp", "--transport", "http"],
}


@pytest.mark.parametrize("mode", list(SERVE_MODES))
@pytest.mark.parametrize("kind", list(BAD_SERVE_TOKENS))
def test_a_serve_token_that_cannot_be_a_header_stops_the_server_at_start(
    capsys, caplog, monkeypatch, kind, mode
):
    from retrievers.serve.__main__ import main as serve_main

    value = BAD_SERVE_TOKENS[kind]
    monkeypatch.setenv("R2MED_SERVE_TOKEN", value)
    caplog.set_level(logging.DEBUG)
    argv = ["--dataset", "demo", "--retriever", "bm25", "--port", "0", "--quiet",
            *SERVE_MODES[mode]]  # fmt: skip
    assert serve_main(argv) == 2
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert line.startswith("error: $R2MED_SERVE_TOKEN ") and "set it again" in line
    printed = out.out + out.err + "".join(r.getMessage() for r in caplog.records)
    assert [m for m in secret_marks(value) if m in printed] == []


@pytest.mark.parametrize("mode", ["http off loopback", "mcp http off loopback"])
@pytest.mark.parametrize("weak", ["x", "Qz9Wk7Xv2Lp4Nj8", "!"])
def test_a_weak_token_does_not_guard_an_address_off_loopback(capsys, monkeypatch, mode, weak):
    """At least 16 printable ASCII characters guard --host 0.0.0.0 (refused before it binds)."""
    from retrievers.serve.__main__ import main as serve_main

    monkeypatch.setenv("R2MED_SERVE_TOKEN", weak)
    argv = ["--dataset", "demo", "--retriever", "bm25", "--port", "0", "--quiet",
            *SERVE_MODES[mode]]  # fmt: skip
    assert serve_main(argv) == 2
    out = capsys.readouterr()
    assert out.err == (
        "error: $R2MED_SERVE_TOKEN is too short to guard --host 0.0.0.0 (reachable from other "
        "machines): a token there is at least 16 characters of printable ASCII with no space or "
        "line end; make one with python -c 'import secrets; print(secrets.token_urlsafe(32))'\n"
    )


def test_masking_a_long_text_takes_linear_time():
    """Tried from every "_" of a long run of name characters, the pair pattern took 74 s on
    80 KB of "a_a_..."; an error text quoting a long reply must not stall a run."""
    import time

    from eval.plumbing.secrets.redaction import redact

    started = time.monotonic()
    for text in ("a_" * 400_000, "x-" * 400_000 + "=v", "9" * 1_000_000 + "x"):
        redact(text)
    assert time.monotonic() - started < 5
    assert redact("--api-key=sk-abc123456789 x_token: abcdefgh12345") == (
        "--api-key=*** x_token: ***"
    )
