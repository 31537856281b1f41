"""What the proxy needs to know of a conversation: which messages of a request are new, and what the model
said in a streamed reply."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..manager import MemoryManager
from ..messages import chat_fields

__all__ = ["new_messages", "ReplyCollector"]


def _key(message: dict[str, Any]) -> str:
    return json.dumps(chat_fields(message), sort_keys=True, ensure_ascii=False)


def new_messages(mem: MemoryManager, chats: Sequence[dict[str, Any]]) -> list[int]:
    """Positions of the request's messages the session does not have yet.

    A client resends its history: the longest run at the start of the request
    that equals the end of what is stored is old (the whole history, or a
    client's sliding window of it); the rest is new. Linear: the overlap is
    the longest prefix of the request that is a suffix of the stored tail
    (Knuth-Morris-Pratt's failure function over both).
    """
    if not chats:
        return []
    total = len(mem)
    tail = [_key(m) for m in mem.history(offset=max(0, total - len(chats)))] if total else []
    request = [_key(m) for m in chats]
    seq = request + [None] + tail  # None never equals a key
    fail = [0] * len(seq)
    for i in range(1, len(seq)):
        k = fail[i - 1]
        while k and seq[i] != seq[k]:
            k = fail[k - 1]
        if seq[i] == seq[k]:
            k += 1
        fail[i] = k
    overlap = fail[-1] if tail else 0
    return list(range(overlap, len(chats)))


class ReplyCollector:
    """Reads the server-sent events of a streamed chat completion as they pass, and puts the assistant's
    message back together (its text and its tool calls)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.done = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                continue
            try:
                event = json.loads(data)
                delta = event["choices"][0].get("delta") or {}
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._merge_call(call)

    def _merge_call(self, call: dict[str, Any]) -> None:
        slot = self._calls.setdefault(int(call.get("index", len(self._calls))),
                                      {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        if call.get("id"):
            slot["id"] = call["id"]
        fn = call.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""

    def message(self) -> dict[str, Any] | None:
        if not self._content and not self._calls:
            return None
        out: dict[str, Any] = {"role": "assistant", "content": "".join(self._content) or None}
        if self._calls:
            out["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        return out
