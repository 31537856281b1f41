"""What the proxy reads of a streamed reply: the assistant's message, put back together."""

from __future__ import annotations

import json
from typing import Any


__all__ = ["ReplyCollector"]


class ReplyCollector:
    """Reads the server-sent events of a streamed chat completion as they pass, and puts the assistant's
    message back together (its text and its tool calls): the first choice's, as a reply that is not streamed
    stores ``choices[0]`` (with ``n > 1`` each event carries one choice, by its ``index``)."""

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
                delta = _first_choice_delta(event["choices"])
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue
            if delta is None:  # another choice's event (n > 1)
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


def _first_choice_delta(choices: Any) -> dict[str, Any] | None:
    """The delta of the first choice (``index`` 0, or without one) among an event's choices; ``None`` when the
    event carries only other choices."""
    for choice in choices:
        if choice.get("index", 0) == 0:
            return choice.get("delta") or {}
    return None
