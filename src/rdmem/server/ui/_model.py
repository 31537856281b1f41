"""What the inspector's pages show, computed from what the memory API returns (pure functions, no HTTP).

A page of a session's messages and a context's report become timeline
entries (a tool call carries its results); a context becomes the budget's
bar by kind; proxy records become sums and a series over time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...messages import chat_fields
from ...result import Compaction, UnitDecision
from ...tokens import Tokenizer, content_text
from ..savings import Saving

__all__ = ["Entry", "Term", "Segment", "Totals", "timeline", "budget_bar", "term_group", "totals", "STATES",
           "shorten"]

#: A message's state in a context, as a word (the pages show it as a word and as a colour, never colour alone).
STATES = {
    "kept": "kept: in the context verbatim",
    "compressed": "compressed: in the context, shortened",
    "summarized": "summarized: in the context's summary",
    "truncated": "truncated: in the context, cut to fit",
    "archived": "archived: not in this context",
}
#: Characters of a message shown on the timeline (the rest is one click away in the API).
MAX_TEXT = 4000


@dataclass(frozen=True)
class Term:
    """One term of a score's breakdown: the family it belongs to, its own name and its value."""

    group: str
    name: str
    value: float


@dataclass
class Entry:
    """One message on the timeline, with its state in the context and why."""

    index: int
    id: str
    role: str
    text: str
    more: int  # characters not shown
    tokens: int
    state: str
    sent_tokens: int | None = None
    score: float | None = None
    terms: list[Term] = field(default_factory=list)
    reason: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)
    call_id: str | None = None
    results: list[Entry] = field(default_factory=list)

    @property
    def headline(self) -> list[Term]:
        """The terms worth a glance (information, relevance, directive, recency, value): one per family, the
        largest in size."""
        best: dict[str, Term] = {}
        for t in self.terms:
            if t.group in ("information", "relevance", "directive", "recency", "value", "score") and \
                    (t.group not in best or abs(t.value) > abs(best[t.group].value)):
                best[t.group] = t
        return list(best.values())


_GROUPS = {"prior.log_info": "information", "prior.info_density": "information", "information": "information",
           "prior.directive": "directive", "recency": "recency", "value": "value", "score": "score",
           "relevance": "relevance", "query.prior_logit": "prior"}


def term_group(name: str) -> str:
    """The family of a score term (``query.bm25`` -> relevance, ``prior.directive`` -> directive)."""
    if name in _GROUPS:
        return _GROUPS[name]
    if name.startswith("query."):
        return "relevance"
    return name.split(".", 1)[-1].replace("_", " ")


def shorten(text: str, limit: int = MAX_TEXT) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, and how many were left out."""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def _entry(index: int, message: Mapping[str, Any], decision: UnitDecision | None, tok: Tokenizer) -> Entry:
    text, more = shorten(content_text(message.get("content")))
    calls = [(str(c.get("id", "")), str(c.get("function", {}).get("name", "")),
              str(c.get("function", {}).get("arguments", "")))
             for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
    entry = Entry(index=index, id=str(message["id"]), role=str(message.get("role", "")), text=text, more=more,
                  tokens=decision.tokens if decision else tok.message_tokens(chat_fields(message)),
                  state=decision.decision if decision else "archived", calls=calls,
                  call_id=message.get("tool_call_id"))
    if decision is not None:
        entry.sent_tokens, entry.score, entry.reason = decision.sent_tokens, decision.score, decision.reason
        entry.terms = [Term(term_group(k), k, v) for k, v in decision.breakdown.items()]
    return entry


def timeline(messages: Sequence[Mapping[str, Any]], ctx: Compaction, tok: Tokenizer, offset: int = 0) -> list[Entry]:
    """Timeline entries for a page of messages (``offset``: the first one's place in the session); a tool
    result goes under the call that asked for it when both are on the page."""
    decided = {d.id: d for d in ctx.report}
    out: list[Entry] = []
    calls: dict[str, Entry] = {}
    for i, message in enumerate(messages):
        entry = _entry(offset + i, message, decided.get(str(message["id"])), tok)
        owner = calls.get(entry.call_id) if entry.role == "tool" and entry.call_id else None
        if owner is not None:
            owner.results.append(entry)
            continue
        for cid, _, _ in entry.calls:
            calls[cid] = entry
        out.append(entry)
    return out


@dataclass(frozen=True)
class Segment:
    """One kind of tokens in a context: its name, tokens and share of the budget."""

    kind: str
    tokens: int
    share: float


_KINDS = ("system", "kept", "compressed", "summary", "markers")


def budget_bar(ctx: Compaction, tok: Tokenizer) -> list[Segment]:
    """The context's tokens by kind (system prompt, kept verbatim, compressed or cut, summary, elision
    markers), then what the budget leaves free; shares of the budget."""
    kept = set(ctx.kept_ids)
    sums = dict.fromkeys(_KINDS, 0)
    for message, source in zip(ctx.messages, ctx.sources or [None] * len(ctx.messages), strict=True):
        n = tok.message_tokens(message)
        if source is None and ctx.summary and ctx.summary in content_text(message.get("content")):
            sums["summary"] += n  # a system message of rdmem's own
        elif message.get("role") in ("system", "developer"):
            sums["system"] += n
        elif source is not None:
            sums["kept" if source in kept else "compressed"] += n
        else:
            sums["markers"] += n
    budget = max(ctx.budget, 1)
    out = [Segment(k, v, v / budget) for k, v in sums.items() if v or k in ("system", "kept")]
    free = max(ctx.budget - ctx.tokens, 0)
    return [*out, Segment("free", free, free / budget)]


@dataclass(frozen=True)
class Totals:
    """A run of proxy requests summed: how many, tokens the clients sent and tokens forwarded."""

    requests: int
    compacted: int
    sent: int
    forwarded: int

    @property
    def saved(self) -> int:
        return self.sent - self.forwarded

    @property
    def share_saved(self) -> float:
        return self.saved / self.sent if self.sent else 0.0


def totals(rows: Sequence[Saving]) -> Totals:
    return Totals(len(rows), sum(r.compacted for r in rows), sum(r.sent for r in rows),
                  sum(r.forwarded for r in rows))


def arguments(text: str) -> str:
    """A tool call's arguments, indented when they are JSON."""
    try:
        return json.dumps(json.loads(text), indent=1, ensure_ascii=False)
    except (ValueError, TypeError):
        return text
