"""Chat messages in and out: what a valid input message is, and the part of it the model is sent.

Every front door (``compact()``, :class:`~rdmem.MemoryManager`, the CLI, the
service) checks messages here, so a bad one gets the same error everywhere:
the message's index and the path of the bad field
(``message 2: content[0].text must be a string, got int``).

Fields the chat API does not know (``metadata``, ``timestamp``, whatever a
framework adds) are kept apart: a store keeps them and gives them back, the
model is never sent them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput, InvalidType

__all__ = ["Message", "parse_messages", "parse_message", "chat_fields", "check_query", "VALID_ROLES", "API_FIELDS"]

VALID_ROLES = ("system", "developer", "user", "assistant", "tool")
#: The fields of a message the OpenAI chat API accepts (and the only ones rdmem sends); the last two on an
#: assistant message only (another role's are kept as extra fields, never sent).
API_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "refusal", "audio")
_ASSISTANT_ONLY = ("refusal", "audio")


def _sent(role: object, field: str) -> bool:
    return field in API_FIELDS and (role == "assistant" or field not in _ASSISTANT_ONLY)


@dataclass(frozen=True, slots=True)
class Message:
    """One checked input message: its ``id`` (``None`` when it has none), the ``chat`` fields the model
    is sent (deep copies), and every ``extra`` field (deep copies, never sent)."""

    id: str | None
    chat: dict[str, Any]
    extra: dict[str, Any]

    def original(self) -> dict[str, Any]:
        """The message as given, without its id (what a store keeps)."""
        return {**self.chat, **self.extra}


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _check_text(value: str, where: str) -> None:
    """A string must be encodable (no lone surrogates, which JSON, tokenizers and databases reject)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{where} is not valid Unicode: a lone surrogate {value[exc.start]!r} at character {exc.start}"
        ) from None


def check_query(query: object, *, required: bool = False) -> str | None:
    """``query`` if it is one (a string, valid Unicode; non-blank if ``required``, else ``None`` allowed), else
    an error that says what is wrong (a lone surrogate reached the embedder's cache key: a 500 behind the API)."""
    if query is None and not required:
        return None
    if not isinstance(query, str):
        raise InvalidType(f"query must be a string{'' if required else ' or None'}, got {type(query).__name__}")
    if required and not query.strip():
        raise InvalidInput("query must be a non-empty string")
    _check_text(query, "query")
    return query


#: How deep a message's fields may nest (its content parts, tool-call arguments, extra fields): a store keeps
#: them and every reader must read them back (the API's responses give up a few hundred levels down).
MAX_FIELD_DEPTH = 64


def _check_json(value: object, where: str) -> None:
    """Every string in ``value`` (keys too) is valid Unicode, and it nests at most :data:`MAX_FIELD_DEPTH`
    levels (walked without recursion: a hostile body cannot exhaust the stack here)."""
    stack: list[tuple[object, int, str]] = [(value, 0, where)]
    while stack:
        v, depth, at = stack.pop()
        if isinstance(v, str):
            _check_text(v, at)
            continue
        if isinstance(v, Mapping):
            items: Iterable[tuple[Any, Any]] = v.items()
        elif isinstance(v, (list, tuple)):
            items = enumerate(v)
        else:
            continue
        if depth >= MAX_FIELD_DEPTH:
            raise InvalidInput(f"{where} nests more than {MAX_FIELD_DEPTH} levels deep")
        for k, x in items:
            if isinstance(k, str):
                _check_text(k, f"{at} (a key)")
            stack.append((x, depth + 1, f"{at}.{k}" if isinstance(v, Mapping) else f"{at}[{k}]"))


def _check_content(content: object, where: str) -> None:
    if content is None:
        return
    if isinstance(content, str):
        _check_text(content, f"{where}: content")
        return
    if not isinstance(content, list):
        raise InvalidInput(f"{where}: 'content' must be a string, a list of text parts or null, got {_kind(content)}")
    for j, part in enumerate(content):
        at = f"{where}: content[{j}]"
        if not isinstance(part, Mapping):
            raise InvalidInput(f"{at} must be a content part (a dict such as {{'type': 'text', 'text': ...}}), "
                             f"got {_kind(part)}")
        kind = part.get("type")
        if not isinstance(kind, str):
            raise InvalidInput(f"{at}.type must be a string such as 'text', got {_kind(kind)}")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidInput(f"{at}.text must be a string, got {_kind(text)}")
        _check_json(part, at)


def _check_tool_calls(calls: object, where: str) -> None:
    if not isinstance(calls, list):
        raise InvalidInput(f"{where}: 'tool_calls' must be a list of tool calls, got {_kind(calls)}")
    for j, call in enumerate(calls):
        at = f"{where}: tool_calls[{j}]"
        if not isinstance(call, Mapping):
            raise InvalidInput(f"{at} must be a dict with 'id', 'type' and 'function', got {_kind(call)}")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidInput(f"{at}.id must be a non-empty string, got {_kind(call.get('id'))}")
        if call.get("type") == "custom":  # a custom tool's call (free-form input): {"name": ..., "input": ...}
            body = call.get("custom")
            if not isinstance(body, Mapping) or not isinstance(body.get("name"), str) \
                    or not isinstance(body.get("input"), str):
                raise InvalidInput(f"{at}.custom must be a dict with the strings 'name' and 'input', got {_kind(body)}")
            _check_json(call, at)
            continue
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidInput(f"{at}.function must be a dict with 'name' and 'arguments', got {_kind(fn)}")
        if not isinstance(fn.get("name"), str):
            raise InvalidInput(f"{at}.function.name must be a string, got {_kind(fn.get('name'))}")
        args = fn.get("arguments")
        if not isinstance(args, (str, Mapping)):
            raise InvalidInput(f"{at}.function.arguments must be a JSON string, got {_kind(args)}")
        _check_text(fn["name"], f"{at}.function.name")
        _check_json(call, at)  # its arguments, as a string or an object, and any other field


def parse_message(msg: object, index: int = 0, *, json_extras: bool = False) -> Message:
    """Check one message and split it into the fields sent to the model and the others.

    ``json_extras`` also checks that the extra fields are JSON (a store
    must keep them). Errors name ``message <index>`` and the bad field.

    >>> m = parse_message({"role": "user", "content": "hi", "id": "u1", "timestamp": 3})
    >>> m.id, m.chat, m.extra
    ('u1', {'role': 'user', 'content': 'hi'}, {'timestamp': 3})
    """
    where = f"message {index}"
    if not isinstance(msg, Mapping):
        raise InvalidType(f"{where} must be a dict with 'role' and 'content', got {_kind(msg)}")
    role = msg.get("role")
    if role not in VALID_ROLES:
        raise InvalidInput(f"{where}: invalid role {role!r}; expected one of {', '.join(VALID_ROLES)}")
    mid = msg.get("id")
    if mid is not None:
        if not isinstance(mid, str) or not mid:
            hint = f" (ids are strings: use {str(mid)!r})" if isinstance(mid, int) and not isinstance(mid, bool) else ""
            raise InvalidInput(f"{where}: 'id' must be a non-empty string, got {_kind(mid)} {mid!r}{hint}")
        _check_text(mid, f"{where}: id")
        if "\x00" in mid:  # an id is a key to find the message by; a store refuses a NUL in one
            raise InvalidInput(f"{where}: 'id' must not contain a NUL character, got {mid!r}")
    _check_content(msg.get("content"), where)
    name = msg.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise InvalidInput(f"{where}: 'name' must be a string, got {_kind(name)}")
        _check_text(name, f"{where}: name")
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise InvalidInput(f"{where}: a tool message needs a string 'tool_call_id'")
    for k, v in msg.items():  # the other fields, before they are copied
        if k not in ("content", "tool_calls", "name", "id"):
            _check_json(v, f"{where}: field {k!r}")
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise InvalidInput(f"{where}: only assistant messages may carry 'tool_calls'")
        _check_tool_calls(tool_calls, where)
    if role == "assistant":
        refusal, audio = msg.get("refusal"), msg.get("audio")
        if refusal is not None:
            if not isinstance(refusal, str):
                raise InvalidInput(f"{where}: 'refusal' must be a string, got {_kind(refusal)}")
            _check_text(refusal, f"{where}: refusal")
        if audio is not None and not (isinstance(audio, Mapping) and isinstance(audio.get("id"), str)):
            raise InvalidInput(f"{where}: 'audio' must be an object with a string 'id' (a reply's audio), got "
                               f"{_kind(audio)}")
    # An empty tool_calls list and null fields are dropped: the chat API rejects the first.
    chat = {
        k: _copied(msg[k])
        for k in API_FIELDS
        if k in msg and msg[k] is not None and not (k == "tool_calls" and not msg[k]) and _sent(role, k)
    }
    if "content" not in chat:
        chat["content"] = _no_content(chat)
    extra = {k: _copied(v) for k, v in msg.items() if not _sent(role, k) and k != "id"}
    for k in extra:
        if not isinstance(k, str):
            raise InvalidInput(f"{where}: field names must be strings, got {_kind(k)} {k!r}")
    if json_extras:
        for k, v in extra.items():
            try:
                json.dumps(v, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidInput(f"{where}: field {k!r} cannot be stored: it is not JSON ({exc})") from None
    return Message(mid, chat, extra)


def _copied(value: Any) -> Any:
    """``value``, deep-copied unless it cannot change (a string or a number: most message fields; the
    proxy parses every message of every request)."""
    return value if isinstance(value, (str, int, float, type(None))) else copy.deepcopy(value)


def parse_messages(messages: Iterable[Mapping[str, Any]], *, json_extras: bool = False) -> list[Message]:
    """Check a list of messages (:func:`parse_message` each); ids given must be unique.

    >>> [m.id for m in parse_messages([{"role": "user", "content": "a"}, {"role": "user", "content": "b", "id": "x"}])]
    [None, 'x']
    """
    if isinstance(messages, Mapping):
        raise InvalidType("messages must be a list of message dicts, got one dict (wrap a single message in a list)")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise InvalidType(f"messages must be a list of message dicts, got {_kind(messages)}")
    out: list[Message] = []
    seen: set[str] = set()
    for i, msg in enumerate(messages):
        m = parse_message(msg, i, json_extras=json_extras)
        if m.id is not None:
            if m.id in seen:
                raise InvalidInput(f"message {i}: duplicate id {m.id!r}")
            seen.add(m.id)
        out.append(m)
    return out


def chat_fields(message: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an already checked message that the model is sent (shallow; no copies)."""
    role = message.get("role")
    out = {k: message[k] for k in API_FIELDS if k in message and message[k] is not None and _sent(role, k)}
    if out.get("tool_calls") == []:
        del out["tool_calls"]
    if "content" not in out:
        out["content"] = _no_content(out)
    return out


def _no_content(chat: Mapping[str, Any]) -> str | None:
    """A message's content when it has none: ``None`` where the chat API takes that (an assistant's tool calls,
    refusal or audio say what it said), else ``""``."""
    return None if chat.get("tool_calls") or chat.get("refusal") is not None or chat.get("audio") else ""
