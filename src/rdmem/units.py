"""Memory units: one per input message, with cost and features.

Also the rules that make a chat history valid: which messages must travel
together (an assistant tool call and its results) and which are pinned
(system messages).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .features import Features, extract_features
from .tokens import Tokenizer, content_text

__all__ = ["MemoryUnit", "Rung", "normalize_messages", "encode_units", "group_units", "VALID_ROLES"]

VALID_ROLES = ("system", "developer", "user", "assistant", "tool")
_ALLOWED_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


class Rung(str, Enum):
    """A representation of a unit, from most to least faithful."""

    VERBATIM = "verbatim"
    COMPRESSED = "compressed"
    SUMMARY = "summary"
    ABSENT = "absent"


@dataclass(slots=True)
class MemoryUnit:
    """One message of the history, ready to be scored and selected.

    ``tokens`` is what the message costs when sent verbatim (overhead included).
    ``group`` is shared by units that must be kept or dropped together.
    """

    id: str
    index: int
    role: str
    message: dict[str, Any]
    text: str
    tokens: int
    features: Features
    group: int = -1
    digest: str = ""
    links: tuple[str, ...] = ()
    embedding: Any = field(default=None, repr=False)

    @property
    def pinned(self) -> bool:
        return self.role in ("system", "developer")


def _message_id(msg: Mapping[str, Any], index: int) -> str:
    mid = msg.get("id")
    if mid is None:
        return f"m{index}"
    if isinstance(mid, (str, int)) and not isinstance(mid, bool):
        return str(mid)
    raise ValueError(f"message {index}: 'id' must be a string or an int, got {type(mid).__name__}")


def normalize_messages(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Validate chat messages; return ``(id, clean copy)`` pairs.

    The copies carry only the keys the OpenAI chat API accepts; the caller's
    dicts are never touched. Errors name the message index and the problem.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise TypeError(f"message {i} must be a dict with 'role' and 'content', got {type(msg).__name__}")
        role = msg.get("role")
        if role not in VALID_ROLES:
            raise ValueError(f"message {i}: invalid role {role!r}; expected one of {', '.join(VALID_ROLES)}")
        content = msg.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(
                f"message {i}: 'content' must be a string, a list of text parts or null, got {type(content).__name__}"
            )
        if isinstance(content, list) and not all(isinstance(part, Mapping) for part in content):
            raise ValueError(f"message {i}: 'content' as a list must hold content parts (dicts such as "
                             "{'type': 'text', 'text': ...})")
        if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
            raise ValueError(f"message {i}: a tool message needs a string 'tool_call_id'")
        tool_calls = msg.get("tool_calls")
        if tool_calls is not None:
            if role != "assistant":
                raise ValueError(f"message {i}: only assistant messages may carry 'tool_calls'")
            if not isinstance(tool_calls, list) or not all(
                isinstance(c, Mapping) and isinstance(c.get("id"), str) for c in tool_calls
            ):
                raise ValueError(f"message {i}: 'tool_calls' must be a list of dicts, each with a string 'id'")
        mid = _message_id(msg, i)
        if mid in seen:
            raise ValueError(f"message {i}: duplicate id {mid!r}")
        seen.add(mid)
        # An empty tool_calls list is dropped: the chat API rejects it.
        clean = {
            k: copy.deepcopy(msg[k])
            for k in _ALLOWED_KEYS
            if k in msg and msg[k] is not None and not (k == "tool_calls" and not msg[k])
        }
        if "content" not in clean:
            clean["content"] = None if tool_calls else ""
        out.append((mid, clean))
    return out


def text_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def encode_units(messages: Iterable[Mapping[str, Any]], tokenizer: Tokenizer, *, start_index: int = 0) -> list[MemoryUnit]:
    """Turn chat messages into memory units (no embeddings yet; see :mod:`rdmem.embed`)."""
    units = []
    for offset, (mid, msg) in enumerate(normalize_messages(messages)):
        units.append(make_unit(mid, msg, start_index + offset, tokenizer))
    group_units(units)
    return units


def make_unit(
    mid: str, msg: dict[str, Any], index: int, tokenizer: Tokenizer, *, features: Features | None = None,
    tokens: int | None = None,
) -> MemoryUnit:
    """One unit from a clean message; ``features`` skips extraction and ``tokens`` counting (e.g. both read
    back from a store that counted with the same tokenizer)."""
    text = content_text(msg.get("content"))
    if features is None:
        features = extract_features(text, msg["role"], has_tool_calls=bool(msg.get("tool_calls")))
    return MemoryUnit(
        id=mid,
        index=index,
        role=msg["role"],
        message=msg,
        text=text,
        tokens=tokenizer.message_tokens(msg) if tokens is None else tokens,
        features=features,
        digest=text_digest(text),
    )


def group_units(units: Sequence[MemoryUnit]) -> None:
    """Assign ``group``: an assistant tool call and its tool results share one.

    A tool result whose call is not in ``units`` (or a call whose results are
    missing) still gets a group of its own; :func:`rdmem.reconstruct.is_valid_history`
    decides what can be emitted.
    """
    call_owner: dict[str, int] = {}
    next_group = 0
    for u in units:
        if u.role == "tool":
            owner = call_owner.get(str(u.message.get("tool_call_id")))
            if owner is not None:
                u.group = owner
                continue
        u.group = next_group
        for call in u.message.get("tool_calls") or ():
            call_owner[call["id"]] = next_group
        next_group += 1


def group_indices(units: Sequence[MemoryUnit]) -> list[list[int]]:
    """Positions of units per group, groups in order of first appearance."""
    by_group: dict[int, list[int]] = {}
    for i, u in enumerate(units):
        by_group.setdefault(u.group, []).append(i)
    return list(by_group.values())
