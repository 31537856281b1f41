"""The request limits of every front door (REST ``/v1``, the mem0 routes, the proxy, MCP), checked here only.

A request over a limit is refused whole, nothing written, with an
:class:`~rdmem.errors.InvalidInput` that names the limit and the field.
Every string of a message is limited, whatever its field: content, text
parts, ``name``, tool calls (names and arguments), ``tool_call_id``,
metadata (keys and values) and any other field.

:func:`load_json` parses a body without building more than the limits allow:
the ``messages`` list is read one message at a time, and the first message
past ``max_messages`` (or over ``max_message_chars``) stops the parse.

>>> load_json(b'{"messages": [{"role": "user", "content": "hi"}]}', Limits(max_messages=1))
{'messages': [{'role': 'user', 'content': 'hi'}]}
>>> load_json(b'[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]', Limits(max_messages=1))
Traceback (most recent call last):
...
rdmem.limits.LimitExceeded: messages: more than 1 messages in one request; the limit is 1 (max_messages)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import InvalidInput, RdmemError

__all__ = ["Limits", "LimitExceeded", "HasLimits", "check_messages", "check_text", "escapes_lone_surrogate",
           "largest_field", "load_json", "lone_surrogate", "read_chat_body", "read_body"]


class LimitExceeded(InvalidInput):
    """A request over one of the limits (the message names the limit and the field)."""


@dataclass(frozen=True)
class Limits:
    """The limits, with ``rdmem serve``'s defaults (its flags: ``--max-messages`` and so on)."""

    max_body_bytes: int = 8 * 1024 * 1024
    max_messages: int = 1000
    max_message_chars: int = 200_000
    max_budget: int = 1_000_000
    max_page: int = 1000


class HasLimits(Protocol):
    """What the checks read: :class:`Limits`, or a server's settings."""

    @property
    def max_messages(self) -> int: ...

    @property
    def max_message_chars(self) -> int: ...


#: The fields of content parts that carry a file's bytes (an image as a data URL, audio, a file, base64): bounded by
#: the body's size alone, as the model's API bounds them; they are neither counted as text nor embedded.
_PAYLOADS = re.compile(r"content\[\d+\]\.(?:image_url\.url|input_audio\.data|file\.file_data)")


def largest_field(message: Any) -> tuple[str, int]:
    """The path of a message's longest string (``"content"``, ``"tool_calls[0].function.arguments"``,
    ``"metadata.note"``; a key below the message's own counts too) and its characters (``("", 0)``: none).
    A content part's file (an image's data URL, audio, a file's data) is not a string that counts."""
    where, largest = "", 0
    stack: list[tuple[Any, str]] = [(message, "")]
    while stack:  # iterative: a deeply nested field cannot exhaust the interpreter's stack
        value, path = stack.pop()
        if isinstance(value, str):
            if len(value) > largest and not _PAYLOADS.fullmatch(path):
                where, largest = path, len(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                key_text = str(key)
                if path and len(key_text) > largest:
                    where, largest = f"{path} (a key)", len(key_text)
                stack.append((item, f"{path}.{key_text}" if path else key_text))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
    return where, largest


def check_messages(messages: Iterable[Any], limits: HasLimits, *, field: str = "messages") -> None:
    """Refuse more than ``max_messages`` messages, or a message with a string (any field's) over
    ``max_message_chars``."""
    for i, message in enumerate(messages):
        if i >= limits.max_messages:
            _too_many(field, limits)
        _check_one(message, i, limits, field)


def _too_many(field: str, limits: HasLimits) -> None:
    raise LimitExceeded(f"{field}: more than {limits.max_messages} messages in one request; the limit is "
                        f"{limits.max_messages} (max_messages)")


def _check_one(message: Any, i: int, limits: HasLimits, field: str) -> None:
    where, size = largest_field(message)
    if size > limits.max_message_chars:
        raise LimitExceeded(f"{field}[{i}].{where}: {size} characters, over the limit of {limits.max_message_chars} "
                            "(max_message_chars)")


def check_text(text: str | None, field: str, limits: HasLimits) -> None:
    """Refuse a text field (a query) longer than ``max_message_chars``."""
    if text is not None and len(text) > limits.max_message_chars:
        raise LimitExceeded(f"{field}: {len(text)} characters, over the limit of {limits.max_message_chars} "
                            "(max_message_chars)")


# -- a bounded parse -----------------------------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")


def _no_constant(name: str) -> float:
    raise InvalidInput(f"the body holds {name}, which JSON does not have (a number must be finite)")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise InvalidInput(f"the body holds the number {text[:40]}, beyond what a float holds (about 1.8e308)")
    return value


#: Strict JSON: ``NaN``, ``Infinity`` and a number beyond a float's range are refused (Python reads them, but no
#: other JSON parser does, and the request would fail later, where it is sent on or stored).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def load_json(raw: bytes | str, limits: HasLimits, *, at: tuple[tuple[str, ...], ...] = ((), ("messages",))) -> Any:
    """``raw`` parsed as JSON, the message lists at the paths ``at`` (``()``: the body itself, when it is a
    list) checked one message at a time as they are read: the first over a limit stops the parse.

    Raises :class:`LimitExceeded`, :class:`json.JSONDecodeError` for a body that is not JSON, and
    :class:`~rdmem.errors.InvalidInput` for one nested too deeply.
    """
    text = raw.decode("utf-8-sig") if isinstance(raw, (bytes, bytearray)) else raw
    try:
        if len(text) <= limits.max_message_chars:  # no string in it can be over the limit: parsed in one go
            return _counted(_DECODER.decode(text), at, limits)
        value, end = _value(text, _skip(text, 0), (), at, limits)
    except RecursionError:
        raise InvalidInput("the body is nested too deeply to parse") from None
    except (json.JSONDecodeError, RdmemError):  # not JSON; over a limit
        raise
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise InvalidInput(f"the body holds a number that cannot be read: {exc}") from None
    end = _skip(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _counted(value: Any, at: tuple[tuple[str, ...], ...], limits: HasLimits) -> Any:
    """``value`` (parsed whole) if none of its message lists at the paths ``at`` is over ``max_messages``."""
    for path in at:
        found: Any = value
        for key in path:
            found = found.get(key) if isinstance(found, dict) else None
        if isinstance(found, list) and len(found) > limits.max_messages:
            _too_many(".".join(path) or "messages", limits)
    return value


def _skip(text: str, i: int) -> int:
    """The index of the first character from ``i`` that is not JSON whitespace."""
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _after_item(text: str, i: int, close: str) -> tuple[bool, int]:
    """After an object's member or an array's element: ``(True, past close)`` at its end, else ``(False, the
    next item's start)`` past the comma."""
    i = _skip(text, i)
    char = text[i:i + 1]
    if char == close:
        return True, i + 1
    if char != ",":
        raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
    return False, _skip(text, i + 1)


def _value(text: str, i: int, path: tuple[str, ...], at: tuple[tuple[str, ...], ...], limits: HasLimits) -> tuple[Any, int]:
    char = text[i:i + 1]
    if char == "[" and path in at:
        return _messages(text, i, path, limits)
    if char == "{" and any(len(p) > len(path) and p[:len(path)] == path for p in at):
        return _object(text, i, path, at, limits)
    return _DECODER.raw_decode(text, i)


def _object(text: str, i: int, path: tuple[str, ...], at: tuple[tuple[str, ...], ...],
            limits: HasLimits) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text[i:i + 1] == "}":
        return out, i + 1
    while True:
        if text[i:i + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
        key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        i = _skip(text, i)
        if text[i:i + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
        i = _skip(text, i + 1)
        out[key], i = _value(text, i, (*path, key), at, limits)
        done, i = _after_item(text, i, "}")
        if done:
            return out, i


def _messages(text: str, i: int, path: tuple[str, ...], limits: HasLimits) -> tuple[list[Any], int]:
    field = ".".join(path) or "messages"
    out: list[Any] = []
    i = _skip(text, i + 1)
    if text[i:i + 1] == "]":
        return out, i + 1
    while True:
        if len(out) >= limits.max_messages:  # refused before the next message is parsed
            _too_many(field, limits)
        message, i = _DECODER.raw_decode(text, i)
        _check_one(message, len(out), limits, field)
        out.append(message)
        done, i = _after_item(text, i, "]")
        if done:
            return out, i


def read_chat_body(raw: bytes, limits: HasLimits) -> dict[str, Any]:
    """A chat-completions request body (the proxy's), parsed within the limits: a JSON object with a
    ``messages`` list, each message within them. Anything else is an :class:`~rdmem.errors.InvalidInput`."""
    try:
        body = load_json(raw, limits, at=(("messages",),))
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise InvalidInput("the body must be a JSON object with a 'messages' list")
    return body


async def read_body(receive: Any) -> tuple[bytes, Any]:
    """An ASGI request's whole body, and a ``receive`` that hands it on again (to check a body, then pass it)."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body, sent = b"".join(chunks), False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


# -- lone surrogates (a JSON body can escape one; nothing can send or store it) ---------------------------------
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# JSON's escapes read left to right (so an escaped backslash is one escape, never the start of another): a pair
# of surrogates (an emoji), a lone surrogate (group 1), or any other escape.
_ESCAPE = re.compile(rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)",
                     re.DOTALL)


def escapes_lone_surrogate(raw: bytes) -> bool:
    """Whether ``raw`` escapes a surrogate that is not half of a pair (the only way strict decoding lets one in)."""
    return bool(_SURROGATE_ESCAPE.search(raw)) and any(m.group(1) for m in _ESCAPE.finditer(raw))


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """The path of the first string in ``value`` that is not valid Unicode (it cannot be sent on), or ``None``."""
    stack = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return at or "body"
        elif isinstance(item, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in reversed(list(item.items())))
            stack.extend((k, f"{at} (a field name)") for k in item if isinstance(k, str))
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None
