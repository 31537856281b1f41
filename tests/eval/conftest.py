"""Fixtures for the evaluation harness: an OpenAI-compatible test server and small data sets."""

from __future__ import annotations

import pytest

from .._fake_openai import Reply, completion


def _eval_reply(req: dict) -> Reply:
    """Answers like an OpenAI-compatible server; the prompt picks the behaviour.

    A prompt containing ``SLOW`` sleeps past the client's timeout, ``FAIL500``
    answers HTTP 500, ``GARBAGE`` returns a body that is not JSON, ``NOCHOICES``
    returns JSON without ``choices``, ``NOLABEL`` makes the judge answer without
    a label. Otherwise answers are ``gold:<text>`` echoes the test controls, and
    the judge says CORRECT when the generated answer contains the gold one.
    """
    request = req["body"]
    prompt = request["messages"][-1]["content"]
    if req["path"] != "/v1/chat/completions":
        return Reply(404, {"error": "not found"})
    delay = 1.5 if "SLOW" in prompt else 0.0
    if "FAIL500" in prompt:
        return Reply(500, {"error": "boom"}, delay=delay)
    if "GARBAGE" in prompt:
        return Reply(200, b"<html>not json</html>", "text/html", delay=delay)
    if "NOCHOICES" in prompt:
        return Reply(200, {"id": "x", "object": "chat.completion"}, delay=delay)
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
    return Reply(body=completion(text), delay=delay)


class _Flat(list):
    """The recorded requests, each with its JSON body's fields at the top (as these tests read them)."""

    def __init__(self, requests: list) -> None:
        super().__init__()
        self._requests = requests

    def __getitem__(self, i):  # type: ignore[override]
        req = self._requests[i]
        return {"path": req["path"], "auth": req["auth"], **req["body"]}

    def __len__(self) -> int:
        return len(self._requests)


@pytest.fixture
def llm_server(fake_openai):
    """Base URL (``http://127.0.0.1:PORT/v1``) of the fake OpenAI-compatible server, and its request log."""
    fake_openai.respond = _eval_reply
    return fake_openai.url, _Flat(fake_openai.requests)


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
