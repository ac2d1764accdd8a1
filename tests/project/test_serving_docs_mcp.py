"""docs/serving.md's MCP section, run as written: each Python example is executed against a real
server on 127.0.0.1 started with a token (the HTTP one; the stdio one starts its own), and its
output must be the lines the doc prints under it. The start line and the JSON client configs
are held to the doc too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import stop_process

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "serving.md"
HEADING = "### MCP: the index as tools `search` and `read`"
DOC_URL = "http://127.0.0.1:8001/mcp"  # what the doc names; the test server's port replaces it
TOKEN = "docs-mcp-token-0123456789abcdef"


def section() -> str:
    text = DOC.read_text()
    start = text.index(HEADING)
    end = text.find("\n### ", start + len(HEADING))
    return text[start : end if end != -1 else len(text)]


def examples() -> list[tuple[str, str]]:
    """(code, the output the doc prints under it) of each Python block of the section."""
    found = re.findall(r"```python\n(.*?)```\n\nprints\n\n```\n(.*?)```", section(), re.S)
    assert len(found) == len(re.findall(r"```python\n", section())), "a block without output"
    return found


def test_the_section_has_an_http_and_a_stdio_example():
    codes = [code for code, _ in examples()]
    assert len(codes) == 2
    assert DOC_URL in codes[0] and "Authorization" in codes[0] and "R2MED_SERVE_TOKEN" in codes[0]
    assert "StdioServerParameters" in codes[1] and "--mcp" in codes[1]


def test_the_json_client_configs_parse_and_name_the_path_and_the_header():
    configs = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", section(), re.S)]
    assert len(configs) == 3
    http_ones = [c for c in configs if DOC_URL in json.dumps(c)]
    assert len(http_ones) == 2
    for config in http_ones:
        (server,) = config.get("mcpServers", config).values()
        assert server["url"] == DOC_URL
        assert server["headers"]["Authorization"].startswith("Bearer ")
    (stdio,) = [c for c in configs if c not in http_ones]
    (server,) = stdio["mcpServers"].values()
    assert server["args"][:2] == ["-m", "retrievers.serve"] and "--mcp" in server["args"]


def start_http(cache: Path) -> tuple[subprocess.Popen, str, str]:
    cmd = [sys.executable, "-m", "retrievers.serve", "--dataset", "demo", "--retriever", "bm25",
           "--mcp", "--transport", "http", "--port", "0", "--cache-dir", str(cache),
           "--quiet"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "R2MED_SERVE_TOKEN": TOKEN}
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    for line in proc.stderr:
        found = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1), line.strip()
        assert time.monotonic() < deadline, line
    raise AssertionError(f"the server exited {proc.wait()} before serving")


def run_example(code: str, token: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "R2MED_SERVE_TOKEN": token, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=180)  # fmt: skip


@pytest.mark.slow
def test_each_python_example_prints_what_the_doc_says(tmp_path):
    proc, url, line = start_http(tmp_path)
    try:
        # the start line as the section quotes it, at this server's port
        assert f"... read at {DOC_URL} (every endpoint requires the bearer token in " \
            "$R2MED_SERVE_TOKEN)" in " ".join(section().split())  # fmt: skip
        assert line.endswith(f"read at {url} (every endpoint requires the bearer token in "
                             "$R2MED_SERVE_TOKEN)")  # fmt: skip
        for code, expected in examples():
            done = run_example(code.replace(DOC_URL, url), TOKEN)
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout == expected, done.stdout
        # the HTTP example with another token is refused: the token in it is what opens it
        (http_code, _), _ = examples()
        refused = run_example(http_code.replace(DOC_URL, url), TOKEN[:-1] + "X")
        assert refused.returncode != 0 and refused.stdout == ""
    finally:
        stop_process(proc)
