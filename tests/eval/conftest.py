"""Fixtures for the evaluation harness: an OpenAI-compatible test server and small data sets."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _Handler(BaseHTTPRequestHandler):
    """Answers ``POST /chat/completions`` like an OpenAI-compatible server; the prompt picks the behaviour.

    A prompt containing ``SLOW`` sleeps past the client's timeout, ``FAIL500``
    answers HTTP 500, ``GARBAGE`` returns a body that is not JSON, ``NOCHOICES``
    returns JSON without ``choices``, ``NOLABEL`` makes the judge answer without
    a label. Otherwise answers are ``gold:<text>`` echoes the test controls, and
    the judge says CORRECT when the generated answer contains the gold one.
    """

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _reply(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **request})
        prompt = request["messages"][-1]["content"]
        if self.path != "/v1/chat/completions":
            return self._reply(404, b'{"error": "not found"}')
        if "SLOW" in prompt:
            time.sleep(1.5)
        if "FAIL500" in prompt:
            return self._reply(500, b'{"error": "boom"}')
        if "GARBAGE" in prompt:
            return self._reply(200, b"<html>not json</html>", "text/html")
        if "NOCHOICES" in prompt:
            return self._reply(200, json.dumps({"id": "x", "object": "chat.completion"}).encode())
        if prompt.startswith("Label a generated answer"):
            gold = prompt.split("Gold answer: ", 1)[1].split("\n", 1)[0].strip().lower()
            generated = prompt.split("Generated answer: ", 1)[1].split("\n", 1)[0].strip().lower()
            if "NOLABEL" in prompt:
                text = "I am not sure what to say."
            else:
                label = "CORRECT" if gold and gold in generated else "WRONG"
                text = f'The answer matches the topic. {{"label": "{label}"}}'
        else:
            question = prompt.split("Question: ", 1)[1].split("\n", 1)[0]
            # The test's questions carry the answer to give after "->".
            text = question.split("->", 1)[1].strip() if "->" in question else "No information available"
        body = {"id": "cmpl-1", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        self._reply(200, json.dumps(body).encode())


@pytest.fixture(scope="session")
def llm_server():
    """Base URL (``http://127.0.0.1:PORT/v1``) of a local OpenAI-compatible server, and its request log."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1", server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


SMALL_CONVERSATIONS = [
    {
        "id": "trip",
        "messages": [
            {"id": "t1", "role": "user", "content": "I am planning a trip to Lisbon in May with my sister Ana."},
            {"id": "t2", "role": "assistant", "content": "Lovely. Do you need hotel suggestions near Alfama?"},
            {"id": "t3", "role": "user", "content": "Yes please. Also remember that I am allergic to peanuts."},
            {"id": "t4", "role": "assistant", "content": "Noted: no peanuts. Hotel Memmo Alfama costs 180 EUR a night."},
            {"id": "t5", "role": "user", "content": "Book it for 16 to 18 May. My budget is 600 EUR in total."},
            {"id": "t6", "role": "assistant", "content": "Booked: two nights at Memmo Alfama, 360 EUR, confirmation K7Q2."},
        ],
        "probes": [
            {"question": "What is the user allergic to?", "answer": "peanuts", "evidence": ["t3"]},
            {"question": "What is the booking confirmation code?", "answer": "K7Q2", "evidence": ["t6"]},
        ],
    },
    {
        "id": "garden",
        "messages": [
            {"role": "user", "content": "My tomatoes have yellow leaves since the heatwave in July."},
            {"role": "assistant", "content": "Water them deeply at dawn and add mulch around the stems."},
            {"role": "user", "content": "I also planted basil and three rows of carrots last weekend."},
        ],
    },
]
