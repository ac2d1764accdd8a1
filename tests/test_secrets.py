"""Credentials reach no file: whatever the variable is called, and inside URLs too."""

from __future__ import annotations

import json
from pathlib import Path

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
