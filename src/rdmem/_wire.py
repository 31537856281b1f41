"""OpenAI chat messages as pydantic wire types: what the service's routes and the MCP server's tools take.

One home for both front doors (``rdmem.server`` and ``rdmem.mcp``): a message's fields are
checked further by :mod:`rdmem.messages`, so a bad one gets the library's error, with the path of the field.
Needs pydantic (both front doors' extras bring it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

__all__ = ["FunctionCall", "ToolCall", "TextPart", "OtherPart", "ContentPart", "PlainMessage", "AssistantMessage",
           "ToolMessage", "ChatMessage", "message_dict", "SessionSummary", "JsonPositiveInt", "STRICT_INT"]


def _no_coercion(value: Any) -> Any:
    if isinstance(value, (bool, str)):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


#: A JSON integer >= 1: ``5`` and ``5.0`` (JSON Schema's integers), never ``true`` or ``"5"`` (pydantic's lax mode
#: takes both; its strict mode refuses ``5.0``, which the schema allows). The bound sits inside, where the
#: OpenAPI document sees it.
JsonPositiveInt = Annotated[int, Field(ge=1), BeforeValidator(_no_coercion)]
#: The same refusal of ``true`` and ``"5"`` for an integer with other bounds: ``Annotated[int, Field(ge=1, le=200),
#: STRICT_INT]`` (a bound added outside ``JsonPositiveInt`` reached the JSON schema as ``le``, not ``maximum``).
STRICT_INT = BeforeValidator(_no_coercion)


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str = Field(description="the call's arguments as a JSON string")


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class OtherPart(BaseModel):
    """An image, audio, file or refusal part: stored and sent as given."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url", "input_audio", "file", "refusal"]


ContentPart = Annotated[TextPart | OtherPart, Field(discriminator="type")]


class _Message(BaseModel):
    """An OpenAI chat message. Fields the chat API does not know are stored and given back, never sent."""

    model_config = ConfigDict(extra="allow")
    content: str | list[ContentPart] | None = None
    name: str | None = None
    id: str | None = Field(None, min_length=1,
                           description="the message's id in the session (allocated by the store if absent)")


class PlainMessage(_Message):
    role: Literal["system", "developer", "user"]
    tool_calls: None = Field(None, description="only assistant messages carry tool calls")


class AssistantMessage(_Message):
    role: Literal["assistant"]
    tool_calls: list[ToolCall] | None = None


class ToolMessage(_Message):
    role: Literal["tool"]
    tool_call_id: str = Field(description="the id of the assistant's tool call this message answers")
    tool_calls: None = Field(None, description="only assistant messages carry tool calls")


ChatMessage = Annotated[PlainMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]


def message_dict(message: BaseModel) -> dict[str, Any]:
    """A message as the library takes it: the fields the client sent, and each tool call's ``type``."""
    out = message.model_dump(exclude_unset=True)
    for call in out.get("tool_calls") or ():
        call.setdefault("type", "function")
    return out


class SessionSummary(BaseModel):
    """A session as a listing shows it (the store's :class:`~rdmem.store.SessionInfo`)."""

    session: str
    units: int
    working: int
    archived: int
    created: float
    updated: float
