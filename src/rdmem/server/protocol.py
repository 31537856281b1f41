"""The service's wire types (pydantic), apart from the routes: what each request carries and each answer says.

Messages travel as OpenAI chat messages (dicts); their fields are checked by
:mod:`rdmem.messages`, so a bad one gets the same error, with the path of the
bad field, as from the library.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, field_validator, model_validator

from pydantic_core import PydanticCustomError

from ..errors import InvalidInput
from .._wire import (  # the chat messages: one home for the service and MCP
    AssistantMessage, ChatMessage, FunctionCall, JsonPositiveInt, PlainMessage, SessionSummary, TextPart, ToolCall,
    ToolMessage, message_dict,
)
from ..names import SESSION_NAME_PATTERN
from ..sessions import MODES, policy_for

__all__ = [
    "ChatMessage", "AddRequest", "AddResponse", "ContextRequest", "ContextResponse", "SearchRequest", "SearchHit",
    "SearchResponse", "FeedbackRequest", "OkResponse", "ExplainRequest", "ExplainResponse", "SessionSummary",
    "SessionList", "SessionDetail", "MessagePage", "ErrorBody", "ErrorResponse", "Mem0Add", "Mem0Filters", "Mem0Search",
    "Mem0Item", "Mem0Results", "ToolCall", "FunctionCall", "TextPart", "PlainMessage", "AssistantMessage",
    "ToolMessage", "message_dict",
]



class _Strict(BaseModel):
    """A request body: unknown fields are refused, and numbers and booleans are never coerced (``true`` is
    not 1, ``"100"`` is not 100: those fields are ``JsonPositiveInt``, ``StrictFloat``, ``StrictBool``)."""

    model_config = ConfigDict(extra="forbid")


class AddRequest(_Strict):
    """``{"messages": ...}``, or the bare message or list (the body is then taken as ``messages``)."""

    messages: ChatMessage | list[ChatMessage] = Field(description="one message or a list, stored in one write")

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data: Any) -> Any:
        if isinstance(data, list) or (isinstance(data, dict) and "role" in data):
            return {"messages": data}
        return data


class AddResponse(BaseModel):
    session: str
    ids: list[str]
    already_stored: bool = Field(False, description="true (and only then given) when these messages were stored "
                                                    "already under their ids, as given (a retry): nothing was "
                                                    "stored again")


class ContextRequest(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {  # a policy or a mode, not both
        "required": ["policy", "mode"], "properties": {"policy": {"type": "string"}, "mode": {"type": "string"}}}})
    budget: JsonPositiveInt | None = Field(None, description="tokens (default: the server's budget)")
    query: str | None = Field(None, description="the next question: archived messages that match it compete too")
    policy: str | None = Field(None, description="a policy name (see GET /v1/policies)")
    # The modes are the session service's (rdmem.sessions.MODES): Literal of the tuple lists each one.
    mode: Literal[MODES] | None = Field(  # type: ignore[valid-type]
        None, description="rd's task mode (instead of policy): " + ", ".join(str(policy_for(mode=m)) for m in MODES))
    breakdown: StrictBool = Field(False, description="each report entry's score broken down by term, as explain gives "
                            "(several times the size of the answer)")


class ContextResponse(BaseModel):
    messages: list[dict[str, Any]]
    tokens: int
    kept_ids: list[str]
    report: list[dict[str, Any]]
    warnings: list[str]
    policy: str
    budget: int


class SearchRequest(_Strict):
    query: str = Field(min_length=1)
    k: JsonPositiveInt = Field(10, description="how many results (at most the server's page size)")


class SearchHit(BaseModel):
    id: str
    score: float
    tier: str
    message: dict[str, Any]


class SearchResponse(BaseModel):
    results: list[SearchHit]


class FeedbackRequest(_Strict):
    ids: list[str] = Field(min_length=1, max_length=10_000)
    reward: StrictFloat = Field(ge=0.0, le=1.0, description="1: these messages were needed; 0: they were not")


class OkResponse(BaseModel):
    ok: bool = True


class ExplainRequest(_Strict):
    budget: JsonPositiveInt | None = None
    query: str | None = None
    policy: str | None = None


class ExplainResponse(BaseModel):
    text: str
    report: list[dict[str, Any]]
    warnings: list[str]


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next_offset: int | None = None


class SessionDetail(SessionSummary):
    tokens: int
    working_tokens: int
    working_ids: list[str]


class MessagePage(BaseModel):
    messages: list[dict[str, Any]]
    next_offset: int | None = None


class ErrorBody(BaseModel):
    code: str
    message: str
    id: str | None = Field(None, description="a 500's or 503's error id: the server's log has its line")


class ErrorResponse(BaseModel):
    error: ErrorBody
    detail: str


# -- the mem0-compatible subset -------------------------------------------------------------------
# A scope id names a session: the session-name rule, documented here and enforced by the routes (a 400 that
# names the field); "" is taken as absent, as mem0 takes it.
_ScopeId = Annotated[str | None, Field(json_schema_extra={"pattern": f"^$|{SESSION_NAME_PATTERN}"})]


class Mem0Add(_Strict):
    """mem0's add; a field rdmem does not implement is refused (422), never ignored."""

    messages: list[ChatMessage] = Field(min_length=1)
    user_id: _ScopeId = None
    agent_id: _ScopeId = None
    run_id: _ScopeId = None
    metadata: dict[str, Any] | None = None
    infer: Literal[False] | None = Field(None, description="rdmem stores each message as given and extracts no "
                                         "facts: mem0's infer=false (true is refused)")

    @field_validator("infer", mode="before")
    @classmethod
    def _no_inference(cls, value: Any) -> Any:
        if value is True:
            raise InvalidInput("rdmem stores each message as given and extracts no facts with an LLM (mem0's "
                             "infer=false): leave infer out or send false")
        if value is not None and not isinstance(value, bool):  # 0 is not false
            raise PydanticCustomError("bool_type", "Input should be a valid boolean")
        return value


class Mem0Filters(_Strict):
    """The scope to search (mem0's metadata filters and logical operators are not supported: a request
    with them is refused, rather than answered as if they were not there)."""

    user_id: _ScopeId = None
    agent_id: _ScopeId = None
    run_id: _ScopeId = None


class Mem0Search(_Strict):
    """mem0's search; a field rdmem does not implement is refused (422), never ignored."""

    query: str = Field(min_length=1)
    user_id: _ScopeId = None
    agent_id: _ScopeId = None
    run_id: _ScopeId = None
    filters: Mem0Filters | None = None
    top_k: JsonPositiveInt | None = None
    limit: JsonPositiveInt | None = Field(None, description="older mem0 clients' name for top_k")
    threshold: StrictFloat | None = Field(
        None, ge=-1.0, le=1.0, description="the lowest score kept: the cosine similarity of the query and the "
        "memory under the server's embedding model (-1 to 1; related texts score about 0.3 and above)")


class Mem0Item(BaseModel):
    id: str
    memory: str
    hash: str | None = None
    metadata: dict[str, Any] | None = None
    score: float | None = Field(None, description="search: the cosine similarity of the query and the memory "
                                "(-1 to 1, the server's embedding model)")
    created_at: str | None = None
    updated_at: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    role: str | None = None
    event: str | None = None


class Mem0Results(BaseModel):
    results: list[Mem0Item]
