"""The rules of a chat history, each written once.

- **Tool calls travel with their results.** An assistant message with
  ``tool_calls`` and the tool messages answering them form one group: kept
  or dropped together (:class:`ToolGroups`, :func:`group_units`), sendable
  only when complete and contiguous (:func:`sendable_blocks`); the newest
  call may still be waiting for results (:func:`pending_call`).
- **A valid history** for the OpenAI chat API: system messages first, every
  tool result right after its call, every call answered
  (:func:`validate_history`).
- **Transcript lines.** A chat export labels each line "[1:56 pm on 8 May,
  2023] Caroline: ..."; that label is structure, not content
  (:func:`split_prefix`, :func:`speaker_of`, :func:`is_transcript_line`).

Functions take anything with a ``role`` and a ``message`` dict (memory
units) or plain message dicts, as their names say.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ToolGroups", "group_units", "sendable_blocks", "pending_call", "resend_key", "resent_overlap", "resend_alignment", "resend_with_gaps", "validate_history", "is_valid_history",
    "split_prefix", "speaker_of", "is_transcript_line",
]


class _Unit(Protocol):
    group: int

    @property
    def role(self) -> str: ...

    @property
    def message(self) -> Mapping[str, Any]: ...

    @property
    def pinned(self) -> bool: ...


# -- tool calls ------------------------------------------------------------------------------------
class ToolGroups:
    """Assigns groups incrementally: a unit appended later never changes an earlier unit's group.

    A tool result joins the group of the assistant message that called it;
    every other unit (and a result whose call is unknown) opens a group of
    its own.
    """

    def __init__(self) -> None:
        self._owner: dict[str, int] = {}
        self.count = 0

    def assign(self, unit: _Unit) -> int:
        owner = self._owner.get(str(unit.message.get("tool_call_id"))) if unit.role == "tool" else None
        if owner is None:
            owner = self.count
            self.count += 1
            for call in unit.message.get("tool_calls") or ():
                self._owner[call["id"]] = owner
        unit.group = owner
        return owner


def group_units(units: Sequence[_Unit]) -> None:
    """Set every unit's ``group`` (see :class:`ToolGroups`)."""
    groups = ToolGroups()
    for u in units:
        groups.assign(u)


def sendable_blocks(units: Sequence[_Unit], open_: np.ndarray) -> tuple[list[np.ndarray], dict[int, str]]:
    """Blocks of non-pinned units (flagged in ``open_``) that can be sent, as position arrays in order, and
    why the others cannot: a result without its call, a call without all its results, or results that
    do not follow their call directly."""
    if all(u.role != "tool" and not u.message.get("tool_calls") for u in units):
        # No tool calls: every message is a block of its own.
        return list(np.flatnonzero(open_).reshape(-1, 1)), {}
    by_group: dict[int, list[int]] = {}
    for pos, u in enumerate(units):
        if not u.pinned:
            by_group.setdefault(u.group, []).append(pos)
    blocks, bad = [], {}
    for positions in by_group.values():
        first = units[positions[0]]
        calls = {c["id"] for c in first.message.get("tool_calls") or ()}
        answered = {units[p].message.get("tool_call_id") for p in positions[1:]}
        if first.role == "tool":
            reason = "tool result without its call"
        elif calls and answered != calls:
            reason = "tool call without all of its results"
        elif positions != list(range(positions[0], positions[0] + len(positions))):
            reason = "tool results not directly after their call"
        else:
            blocks.append(np.array(positions, dtype=np.int64))
            continue
        for p in positions:
            bad[p] = reason
    return blocks, bad


def pending_call(units: Sequence[_Unit]) -> list[int]:
    """Positions of the newest assistant tool call and its results so far, when some results have not
    arrived (the call is still running: it must not be separated from what comes next); else ``[]``."""
    for pos in range(len(units) - 1, -1, -1):
        unit = units[pos]
        if unit.role == "tool":
            continue
        calls = {c["id"] for c in unit.message.get("tool_calls") or ()}
        answered = {w.message.get("tool_call_id") for w in units[pos + 1:]}
        return list(range(pos, len(units))) if calls - answered else []
    return []


def resent_overlap(stored_tail: Sequence[Hashable], given: Sequence[Hashable]) -> int:
    """How many messages at the start of ``given`` repeat the end of ``stored_tail`` (a client that resends
    its history: the whole of it, or a sliding window): the longest prefix of ``given`` that is a suffix
    of ``stored_tail``, in linear time (Knuth-Morris-Pratt's failure function over both).

    >>> resent_overlap(["a", "b", "c"], ["b", "c", "d"]), resent_overlap(["a"], ["x"]), resent_overlap([], ["x"])
    (2, 0, 0)
    """
    if not stored_tail or not given:
        return 0
    seq: list[Hashable] = [*given, _NEVER, *stored_tail]
    fail = [0] * len(seq)
    for i in range(1, len(seq)):
        k = fail[i - 1]
        while k and seq[i] != seq[k]:
            k = fail[k - 1]
        if seq[i] == seq[k]:
            k += 1
        fail[i] = k
    return fail[-1]


_NEVER = object()  # equals nothing but itself: the separator of resent_overlap

#: How many starts of a diverged resend are tried (latest first): the tails compared are short.
_STARTS = 64


def resend_alignment(stored_tail: Sequence[Hashable], given: Sequence[Hashable]) -> tuple[int, int]:
    """How a resent history lines up with the end of what is stored: ``(m, d)``, the first ``m`` of
    ``given`` are stored already, as a run that ends ``d`` messages before the end of ``stored_tail``.

    ``d == 0``: the usual resend (the whole history or a sliding window of it, :func:`resent_overlap`).
    ``d > 0``: the client dropped the last ``d`` stored messages and went on from there: a regenerated or
    retried reply, an edited last question. The longest common run wins; of equal runs, the latest.

    >>> resend_alignment(["q1", "a1", "q2", "a2"], ["q1", "a1", "q2"])   # regenerate a2
    (3, 1)
    >>> resend_alignment(["q1", "a1"], ["q1", "a1", "q2"]), resend_alignment(["x"], ["y"])
    ((2, 0), (0, 0))
    """
    k = resent_overlap(stored_tail, given)
    if k or not given:
        return k, 0
    n, best = len(stored_tail), (0, 0)
    starts = [p for p in range(n - 1, -1, -1) if stored_tail[p] == given[0]][:_STARTS]
    for p in starts:
        m = 0
        while p + m < n and m < len(given) and stored_tail[p + m] == given[m]:
            m += 1
        if m > best[0]:
            best = (m, n - p - m)
    return best


def resend_with_gaps(stored_tail: Sequence[Hashable], given: Sequence[Hashable], anchor: int | None = None) -> int:
    """For a resend that does not line up with the end of what is stored (:func:`resend_alignment` found it
    diverged): how many messages at the start of ``given`` are stored in that order with other stored messages
    between them, as when one end user's chats interleave in one session, or a client deleted a message in
    the middle. Each run after a gap is at least two messages (a question and its answer, say), or the last
    stored message, or ``given[anchor]`` (a message known stored: the question a reply follows), so that a new
    message equal to a stored one of another chat ("ok") is not taken for it.

    >>> resend_with_gaps(["a1", "A1", "b1", "B1", "a2", "A2"], ["a1", "A1", "a2", "A2", "a3"])
    4
    >>> resend_with_gaps(["a1", "A1", "b1", "ok", "B1"], ["a1", "A1", "ok"])   # "ok" alone after the gap: new
    2
    """
    n, best = len(stored_tail), 0
    for p in [p for p in range(n - 1, -1, -1) if given and stored_tail[p] == given[0]][:_STARTS]:
        i, j = p, 0
        while j < len(given) and i < n:
            if stored_tail[i] != given[j]:  # a gap: the run goes on where the next two given messages are stored
                i = next((q for q in range(i + 1, n) if stored_tail[q] == given[j] and (
                    q + 1 == n or j == anchor or (j + 1 < len(given) and stored_tail[q + 1] == given[j + 1]))), n)
                if i == n:
                    break
            i, j = i + 1, j + 1
        best = max(best, j)
    return best


def resend_key(message: Mapping[str, Any]) -> str:
    """What identifies a resent message: the fields sent to the model, as canonical JSON (a framework's own
    extra fields, ids or timestamps may change between two sends of one message)."""
    from .messages import VALID_ROLES, chat_fields  # messages imports this module

    chat = chat_fields(message)
    if len(chat) == 2 and chat.get("role") in VALID_ROLES and isinstance(chat["content"], str):  # the common case, fast
        return f"{chat['role']}\x00{chat['content']}"  # never a JSON object's text, which starts with '{'
    calls = chat.get("tool_calls")
    if isinstance(calls, list):  # as the model sent them: a client's accumulation of a stream adds each call's
        chat = {**chat, "tool_calls": [_call_key(c) for c in calls]}  # "index", and may send "" for no content
        if chat.get("content") == "":
            chat["content"] = None
    return json.dumps(chat, sort_keys=True, ensure_ascii=False, default=str)


def _call_key(call: Any) -> Any:
    """A tool call's fields that say what was called (``id``, ``type``, the function's or custom tool's name and
    input), without what a client adds while it accumulates a stream."""
    if not isinstance(call, Mapping):
        return call
    out: dict[str, Any] = {k: call[k] for k in ("id", "type") if k in call}
    for kind, fields in (("function", ("name", "arguments")), ("custom", ("name", "input"))):
        body = call.get(kind)
        if isinstance(body, Mapping):
            out[kind] = {k: body[k] for k in fields if k in body}
    args = out.get("function", {}).get("arguments")
    if isinstance(args, str):  # by what they say: a client may write them back re-serialised (LangChain's
        try:  # ChatOpenAI resends '{"city":"Lisbon"}' as '{"city": "Lisbon"}')
            out["function"]["arguments"] = {"json": json.loads(args)}
        except (ValueError, RecursionError):
            pass
    return out


def validate_history(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems that make a history invalid for the OpenAI chat API (empty list: valid).

    System/developer messages come first; every tool message answers a call of
    the assistant message right before its run of tool messages; every call is
    answered.

    >>> validate_history([{"role": "tool", "tool_call_id": "c1", "content": "12 C"}])
    ["message 0: tool result 'c1' without its call"]
    """
    problems: list[str] = []
    seen_other = False
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role in ("system", "developer"):
            if seen_other:
                problems.append(f"message {i}: {role} message after the conversation started")
            continue
        seen_other = True
        if role == "tool":
            tid = m.get("tool_call_id")
            if tid not in pending:
                problems.append(f"message {i}: tool result {tid!r} without its call")
            pending.discard(tid)
            continue
        if pending:
            problems.append(f"message {i}: tool call(s) {sorted(pending)} not answered")
            pending = set()
        if role == "assistant" and m.get("tool_calls"):
            pending = {c.get("id") for c in m["tool_calls"]}
    if pending:
        problems.append(f"end: tool call(s) {sorted(pending)} not answered")
    return problems


def is_valid_history(messages: Sequence[Mapping[str, Any]]) -> bool:
    return not validate_history(messages)


# -- transcript lines ------------------------------------------------------------------------------
# "[<stamp>] Name Name:" or "Name:" (up to three capitalised words, then a colon and a space).
_PREFIX = re.compile(
    r"^\s*(?P<p>(?:\[[^\[\]\n]{1,80}\]\s*(?P<s1>[A-Z][\w.'\-]*(?:\s[A-Z][\w.'\-]*){0,2}:(?=\s))?"
    r"|(?P<s2>[A-Z][\w.'\-]*(?:\s[A-Z][\w.'\-]*){0,2}:(?=\s))))\s*"
)


@lru_cache(maxsize=262_144)
def _parse(text: str) -> tuple[str, str, str]:
    m = _PREFIX.match(text)
    if not m:
        return "", text.strip(), ""
    label = m.group("s1") or m.group("s2") or ""
    return m.group("p").strip(), text[m.end():].strip(), label[:-1].split()[0].lower() if label else ""


def split_prefix(text: str) -> tuple[str, str]:
    """``(prefix, body)``: a leading bracketed date and/or speaker label, then the rest (both stripped).

    >>> split_prefix("[1:56 pm on 8 May, 2023] Caroline: Hey Mel! I went to a support group.")
    ('[1:56 pm on 8 May, 2023] Caroline:', 'Hey Mel! I went to a support group.')
    >>> split_prefix("I went to a support group.")
    ('', 'I went to a support group.')
    """
    prefix, body, _ = _parse(text)
    return prefix, body


def speaker_of(text: str) -> str:
    """The first word of a line's speaker label, lower-cased ("" when it has none).

    >>> speaker_of("[8 May, 2023] Caroline Smith: hi"), speaker_of("hi there")
    ('caroline', '')
    """
    return _parse(text)[2]


def is_transcript_line(text: str) -> bool:
    """Is ``text`` a line of a chat export: a bracketed time or date, then a speaker label ("[…] Name: …")?"""
    prefix, _, speaker = _parse(text)
    return prefix.startswith("[") and bool(speaker)
