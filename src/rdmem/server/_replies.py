"""What the proxy reads of a streamed reply: the assistant's message, put back together."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("rdmem.server")

__all__ = ["ReplyCollector", "collect", "whole_events"]


class ReplyCollector:
    """Reads the server-sent events of a streamed chat completion as they pass, and puts the assistant's
    message back together (its text and its tool calls): the first choice's (with ``n > 1`` each event carries
    one choice, by its ``index``; the proxy then stores none: the client's next request carries its choice).

    Events are read as the ``openai`` client reads them: an event ends at a blank line, its ``data:`` lines
    joined by newlines (an event never ended is never read). A reply is :attr:`done` once ``[DONE]`` came,
    or once the stream ended (:meth:`end`) after the first choice's ``finish_reason``; it is :attr:`failed`,
    and never stored, when the stream carried an error (an ``error`` event, or an event with an ``error``, as
    vLLM and SGLang end a stream that failed midway and OpenRouter says one) or an event the client cannot read
    (not JSON), or a choice that finished with ``finish_reason: "error"``: the client saw its stream fail
    there."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event = b""
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finished = False
        self.done = False
        self.failed = False

    def end(self) -> bool:
        """The stream ended (without an error of its own): whether the reply is whole, ``[DONE]`` or not (a
        stream may end after its last choice's ``finish_reason`` without one). ``done`` and ``failed`` never
        hold both: nothing is read after either."""
        if self._finished and not self.failed:
            self.done = True
        return self.done

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            line = line.rstrip(b"\r")
            if not line:  # a blank line ends the event
                self._dispatch()
            elif line.startswith(b"data:"):
                self._data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif line.startswith(b"event:"):
                self._event = line[6:].strip()

    def _dispatch(self) -> None:
        data, event = b"\n".join(self._data), self._event
        self._data, self._event = [], b""
        if not data or self.done or self.failed:
            return
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            parsed = json.loads(data)
        except ValueError:  # the client's stream fails on it
            self.failed = True
            return
        if event == b"error" or (isinstance(parsed, dict) and parsed.get("error")):  # as the openai client fails
            self.failed = True
            return
        try:
            choice = _first_choice(parsed["choices"])
        except (KeyError, IndexError, TypeError, AttributeError):
            return
        if choice is None:  # another choice's event (n > 1)
            return
        if choice.get("finish_reason") == "error":  # OpenRouter's mid-stream error
            self.failed = True
            return
        if choice.get("finish_reason"):
            self._finished = True
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self._content.append(delta["content"])
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._merge_call(call)

    def _merge_call(self, call: dict[str, Any]) -> None:
        index = int(call.get("index", len(self._calls)))
        if index not in self._calls:  # a function's call, or a custom tool's (its free-form input)
            custom = call.get("type") == "custom" or isinstance(call.get("custom"), dict)
            self._calls[index] = {"id": "", "type": "custom", "custom": {"name": "", "input": ""}} if custom else \
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        slot = self._calls[index]
        if call.get("id"):
            slot["id"] = call["id"]
        kind, text = ("custom", "input") if slot["type"] == "custom" else ("function", "arguments")
        part = call.get(kind) or {}
        slot[kind]["name"] += part.get("name") or ""
        slot[kind][text] += part.get(text) or ""

    def message(self) -> dict[str, Any] | None:
        if not self._content and not self._calls:
            return None
        out: dict[str, Any] = {"role": "assistant", "content": "".join(self._content) or None}
        if self._calls:
            out["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        return out


def _first_choice(choices: Any) -> dict[str, Any] | None:
    """The first choice (``index`` 0, or without one) among an event's choices; ``None`` when the event
    carries only other choices."""
    for choice in choices:
        if choice.get("index", 0) == 0:
            return choice
    return None


def whole_events(data: bytes) -> tuple[bytes, bytes]:
    r"""``data`` cut after its last complete server-sent event (a blank line ends one), and the rest.

    >>> whole_events(b"data: 1\n\ndata: 2\r\n\r\ndata: 3")
    (b'data: 1\n\ndata: 2\r\n\r\n', b'data: 3')
    >>> whole_events(b"data: half")
    (b'', b'data: half')
    """
    ends = [i + len(sep) for sep in (b"\n\n", b"\r\n\r\n") if (i := data.rfind(sep)) >= 0]
    end = max(ends, default=0)
    return data[:end], data[end:]


def collect(collector: ReplyCollector, chunk: bytes, where: Any) -> ReplyCollector | None:
    """Feed the collector; ``None`` once it cannot follow the stream (nothing is stored then, the relay goes on)."""
    try:
        collector.feed(chunk)
        return collector
    except Exception as exc:
        log.warning("rdmem proxy: cannot read the streamed reply of session %r (%s: %s); it is not stored",
                    where[1], type(exc).__name__, exc)
        return None
