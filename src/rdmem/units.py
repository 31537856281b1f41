"""Memory units: one per input message, with cost and features (tool-call groups: :mod:`rdmem.history`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .errors import InvalidInput
from .features import Features, extract_features
from .history import group_units
from .messages import VALID_ROLES, parse_messages
from .tokens import Tokenizer, content_text

__all__ = ["MemoryUnit", "Rung", "normalize_messages", "encode_units", "group_units", "VALID_ROLES"]


class Rung(str, Enum):
    """A representation of a unit, from most to least faithful."""

    VERBATIM = "verbatim"
    COMPRESSED = "compressed"
    SUMMARY = "summary"
    ABSENT = "absent"


@dataclass(slots=True)
class MemoryUnit:
    """One message of the history, ready to be scored and selected.

    ``message`` holds the fields the model is sent; ``tokens`` is what the
    message costs when sent verbatim (overhead included). ``group`` is shared
    by units that must be kept or dropped together.
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


def normalize_messages(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Validate chat messages; return ``(id, clean copy)`` pairs (see :mod:`rdmem.messages`).

    A message without an id gets its position, ``m<index>``. The copies
    carry only the fields the OpenAI chat API accepts; the caller's dicts are
    never touched. Errors name the message index and the bad field.
    """
    parsed = parse_messages(messages)
    given = {m.id for m in parsed if m.id is not None}
    out = []
    for i, m in enumerate(parsed):
        mid = m.id if m.id is not None else f"m{i}"
        if m.id is None and mid in given:
            raise InvalidInput(f"message {i}: has no id, and its default id {mid!r} is another message's id")
        out.append((mid, m.chat))
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


def group_indices(units: Sequence[MemoryUnit]) -> list[list[int]]:
    """Positions of units per group, groups in order of first appearance."""
    by_group: dict[int, list[int]] = {}
    for i, u in enumerate(units):
        by_group.setdefault(u.group, []).append(i)
    return list(by_group.values())
