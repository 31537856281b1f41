"""Independent checks of compaction output, written without rdmem's own validators, and test data.

What a valid chat history is (for the OpenAI API), and every invariant a
compaction must keep, checked from the outside; a cheap deterministic
embedder (hashed bag of words) for tests that need vectors but no model;
and a small agent conversation with the cases that matter (a system prompt,
directives, tool calls with one and two results, a correction).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..reconstruct import marker_count
from ._assert import expect

__all__ = [
    "HashingEmbedder", "history_problems", "check_compaction", "clean", "ids_of", "marker_count", "tool_groups",
    "agent_history", "ALLOWED_KEYS", "TRUNCATED",
]

ALLOWED_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}
ROLES = {"system", "developer", "user", "assistant", "tool"}
TRUNCATED = "[rdmem: truncated,"


class HashingEmbedder:
    """Deterministic bag-of-words vectors (blake2b-hashed words), unit norm; implements ``Embedder``."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            if not out[row].any():
                out[row, 0] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def history_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why ``messages`` would be rejected by the OpenAI chat API (empty: valid).

    - only the known keys and roles; content is a string, a list of parts, or
      null on an assistant message with tool calls;
    - system/developer messages come before every other message;
    - a tool message answers a call of the nearest preceding assistant message,
      with only tool messages in between, each call answered exactly once, and
      every call answered before the next non-tool message or the end.
    """
    problems = []
    started = False
    open_calls: set[str] | None = None  # ids of the current assistant's calls still unanswered
    for i, m in enumerate(messages):
        extra = set(m) - ALLOWED_KEYS
        if extra:
            problems.append(f"{i}: extra keys {sorted(extra)}")
        role = m.get("role")
        if role not in ROLES:
            problems.append(f"{i}: bad role {role!r}")
        content = m.get("content")
        if content is None:
            if not (role == "assistant" and m.get("tool_calls")):
                problems.append(f"{i}: null content on a {role} message without tool calls")
        elif not isinstance(content, (str, list)):
            problems.append(f"{i}: content of type {type(content).__name__}")
        if role in ("system", "developer"):
            if started:
                problems.append(f"{i}: {role} message after the conversation started")
            continue
        started = True
        if role == "tool":
            tid = m.get("tool_call_id")
            if open_calls is None or tid not in open_calls:
                problems.append(f"{i}: tool message {tid!r} does not answer an open call")
            else:
                open_calls.discard(tid)
            continue
        if open_calls:
            problems.append(f"{i}: calls {sorted(open_calls)} left unanswered")
        open_calls = None
        if role == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            if len(set(ids)) != len(ids):
                problems.append(f"{i}: duplicate tool call ids")
            open_calls = set(ids)
    if open_calls:
        problems.append(f"end: calls {sorted(open_calls)} left unanswered")
    return problems


def clean(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as rdmem emits it verbatim: only the API's keys, none set to None but ``content``."""
    return {k: v for k, v in message.items() if k in ALLOWED_KEYS and (v is not None or k == "content")}


def ids_of(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(m["id"]) if m.get("id") is not None else f"m{i}" for i, m in enumerate(messages)]



def tool_groups(messages: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Ids of each assistant tool call message together with its tool results."""
    ids = ids_of(messages)
    owner: dict[str, int] = {}
    groups: dict[int, list[str]] = {}
    for i, m in enumerate(messages):
        if m.get("tool_calls"):
            groups[i] = [ids[i]]
            for c in m["tool_calls"]:
                owner[c["id"]] = i
        elif m.get("role") == "tool" and m.get("tool_call_id") in owner:
            groups[owner[m["tool_call_id"]]].append(ids[i])
    return list(groups.values())


def check_compaction(result: Any, messages: Sequence[Mapping[str, Any]], budget: int, tokenizer: Any) -> None:
    """Every invariant a compaction must keep, checked from the outside.

    ``tokenizer`` is a fresh tokenizer used only to re-count the output.
    """
    out = result.messages
    # Budget, re-counted.
    recount = tokenizer.messages_tokens(out)
    expect(recount == result.tokens, f"result.tokens is {result.tokens}, the output counts {recount}")
    expect(recount <= budget, f"{recount} tokens for a budget of {budget}")
    # A valid chat history.
    problems = history_problems(out)
    expect(not problems, f"not a valid chat history: {problems}")
    # The report covers every input message, in order.
    ids = ids_of(messages)
    expect([d.id for d in result.report] == ids, f"the report's ids {[d.id for d in result.report]} are not "
            f"the input's {ids}")
    decisions = {d.id: d.decision for d in result.report}
    # kept_ids ⊆ input ids, each kept message verbatim, in chronological order.
    expect(set(result.kept_ids) <= set(ids), f"kept_ids {result.kept_ids} has ids the input does not")
    expect(len(set(result.kept_ids)) == len(result.kept_ids), f"kept_ids {result.kept_ids} repeats an id")
    by_id = dict(zip(ids, messages, strict=True))
    # Matched in order, so identical messages each need their own copy, chronologically.
    start = {"head": 0, "body": 0}
    for kid in result.kept_ids:
        want = clean(by_id[kid])
        part = "head" if want["role"] in ("system", "developer") else "body"
        hits = [j for j in range(start[part], len(out)) if out[j] == want]
        expect(bool(hits), f"kept message {kid!r} not found verbatim (in chronological order) in the output")
        start[part] = hits[0] + 1
    # System messages pinned and first, when they fit.
    systems = [clean(m) for m in messages if m["role"] in ("system", "developer")]
    system_cost = tokenizer.messages_tokens(systems)
    if systems and system_cost <= budget:
        expect(out[: len(systems)] == systems, "system messages are not pinned first")
    # Tool-call groups kept or dropped together.
    present = {"kept", "truncated", "compressed"}
    for group in tool_groups(messages):
        states = {decisions[g] in present for g in group}
        expect(len(states) == 1, f"tool group {group} split: {[decisions[g] for g in group]}")
    # Every emitted message is an input message (verbatim or cut), a marker, or the summary.
    n_sent = sum(1 for d in result.report if d.decision in present)
    n_markers = sum(1 for m in out if marker_count(m) is not None)
    n_summary = int(bool(result.summary))
    expect(len(out) == n_sent + n_markers + n_summary, f"{len(out)} messages out, but {n_sent} sent, "
            f"{n_markers} markers and {n_summary} summary")
    # Elided spans are marked: the markers account for every archived conversation message.
    archived = [d for d in result.report if d.decision == "archived" and d.role not in ("system", "developer")]
    body = [m for m in out if m["role"] not in ("system", "developer") and marker_count(m) is None]
    if body:
        marked = sum(marker_count(m) or 0 for m in out)
        expect(marked == len(archived), f"markers count {marked} omitted messages, the report archives "
                f"{len(archived)}")
    # A truncated message carries a visible marker.
    for d in result.report:
        if d.decision == "truncated":
            expect(any(isinstance(m.get("content"), str) and TRUNCATED in m["content"] for m in out),
                    f"{d.id!r} is truncated but no output message carries the truncation note")


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


_AGENT_HISTORY = [
    {"id": "sys", "role": "system", "content": "You are a travel assistant. Answer briefly and cite prices in EUR."},
    {"id": "u1", "role": "user", "content": "Hi! I want to plan a weekend in Lisbon in May."},
    {"id": "a1", "role": "assistant", "content": "Great choice. Which dates, and how many people?"},
    {"id": "u2", "role": "user", "content": "Remember that I'm allergic to peanuts. Two people, 16-18 May 2025."},
    {"id": "a2", "role": "assistant", "content": None,
     "tool_calls": [_call("call_1", "search_hotels", {"city": "Lisbon", "from": "2025-05-16", "to": "2025-05-18"})]},
    {"id": "t1", "role": "tool", "tool_call_id": "call_1",
     "content": "Hotel Alfama 120 EUR/night; Baixa Suites 95 EUR/night; Belem Inn 80 EUR/night. Remember to book early."},
    {"id": "a3", "role": "assistant", "content": "Three options: Alfama 120, Baixa 95, Belem 80 EUR per night."},
    {"id": "u3", "role": "user", "content": "Baixa sounds good. What is the weather usually like?"},
    {"id": "a4", "role": "assistant", "content": None, "tool_calls": [
        _call("call_2", "weather", {"city": "Lisbon", "month": "May"}),
        _call("call_3", "sunset", {"city": "Lisbon", "date": "2025-05-17"}),
    ]},
    {"id": "t2", "role": "tool", "tool_call_id": "call_2", "content": "Average high 22 C, low 14 C, 6 rainy days."},
    {"id": "t3", "role": "tool", "tool_call_id": "call_3", "content": "Sunset 20:41."},
    {"id": "a5", "role": "assistant", "content": "Mild: about 22 C by day, sunset around 20:41."},
    {"id": "u4", "role": "user", "content": "From now on, always give walking times instead of taxi times."},
    {"id": "a6", "role": "assistant", "content": "Noted: walking times from now on."},
    {"id": "u5", "role": "user", "content": "Actually, make it three people, my sister Ana joins us."},
    {"id": "a7", "role": "assistant", "content": "Updated to three people; Baixa Suites has a triple room at 130 EUR."},
    {"id": "u6", "role": "user", "content": "lol ok, thanks"},
    {"id": "a8", "role": "assistant", "content": "You're welcome!"},
    {"id": "u7", "role": "user", "content": "Which restaurants near Baixa are safe for my allergy?"},
]


def agent_history() -> list[dict[str, Any]]:
    """A small agent conversation (a fresh copy): system prompt, directives, tool calls (one with two results),
    a correction, chit-chat, and a question at the end."""
    return json.loads(json.dumps(_AGENT_HISTORY))
