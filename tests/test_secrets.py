"""Credentials reach no file: whatever the variable is called, and inside URLs too."""

from __future__ import annotations

import json
from pathlib import Path

import litellm
import pytest

from agents.llm import scripted
from agents.run import main
from agents.secrets import public_url, redact

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
