"""What the MCP server's tools answer: their structured results (each tool's output schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .._wire import SessionSummary

__all__ = ["Remembered", "Hit", "Recalled", "ModelContext", "Forgotten", "Decision", "Explanation", "SessionList"]


class Remembered(BaseModel):
    session: str
    ids: list[str] = Field(description="the stored messages' ids, in order (for forget)")
    already_stored: bool = Field(False, description="true when these messages were stored already under their "
                                                    "ids, as given (a retry): nothing was stored again")


class Hit(BaseModel):
    id: str
    score: float
    tier: str = Field(description="working (in the context now) or archive")
    role: str
    content: str | None
    message: dict[str, Any] = Field(description="the message as it was stored")


class Recalled(BaseModel):
    session: str
    query: str
    results: list[Hit]


class ModelContext(BaseModel):
    session: str
    messages: list[dict[str, Any]] = Field(description="OpenAI chat messages for the next model call")
    tokens: int = Field(description="their size in tokens (cl100k, per-message overhead included)")
    budget: int
    policy: str
    kept_ids: list[str] = Field(description="ids of the stored messages sent verbatim")
    sources: list[str | None] = Field(description="for each output message, the id it renders (None: a marker "
                                      "or summary)")
    warnings: list[str]


class Forgotten(BaseModel):
    session: str
    deleted: list[str] = Field(description="ids deleted for good")
    session_deleted: bool = Field(description="the whole session was deleted")


class Decision(BaseModel):
    id: str
    role: str
    decision: str = Field(description="kept, truncated, compressed, summarized or archived")
    tokens: int
    sent_tokens: int
    score: float
    reason: str


class Explanation(BaseModel):
    session: str
    text: str = Field(description="one line per message: decision, tokens, score and its terms")
    decisions: list[Decision]
    tokens: int
    budget: int
    policy: str


class SessionList(BaseModel):
    sessions: list[SessionSummary]
