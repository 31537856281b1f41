"""What a compaction returns: the messages, their size, and one decision per input message, with why."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .units import Rung

__all__ = ["Compaction", "UnitDecision", "Decision", "Report", "Breakdown", "dumps"]

Decision = Literal["kept", "compressed", "summarized", "truncated", "archived"]


@dataclass(frozen=True)
class UnitDecision:
    """What happened to one input message, and why."""

    id: str
    role: str
    decision: Decision
    rung: Rung
    tokens: int
    sent_tokens: int
    score: float
    breakdown: Mapping[str, float]
    reason: str = ""
    #: ``False`` while the unit's vector has not landed (a background worker embeds it): it was ranked
    #: by its lexical and prior terms only.
    embedded: bool = True

    def to_dict(self, *, breakdown: bool = True) -> dict[str, Any]:
        """As JSON; ``breakdown=False`` leaves out the score's terms (most of the size)."""
        out = {
            "id": self.id,
            "role": self.role,
            "decision": self.decision,
            "rung": self.rung.value,
            "tokens": self.tokens,
            "sent_tokens": self.sent_tokens,
            "score": round(self.score, 6),
            "breakdown": {k: round(v, 6) for k, v in self.breakdown.items()} if breakdown else None,
            "reason": self.reason,
        }
        if not breakdown:
            del out["breakdown"]
        if not self.embedded:
            out["embedded"] = False
        return out


class Breakdown(Mapping[str, float]):
    """One unit's utility broken down by term: a read-only view of one column of the plan's terms.

    Built for every unit of every call but read only when someone looks, so
    it holds a reference to the shared array instead of a dict of its own.
    """

    __slots__ = ("_columns", "_terms", "_i")

    def __init__(self, columns: Mapping[str, int], terms: np.ndarray, i: int) -> None:
        self._columns, self._terms, self._i = columns, terms, i

    def __getitem__(self, key: str) -> float:
        return float(self._terms[self._columns[key], self._i])

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def __repr__(self) -> str:
        return repr(dict(self))


class Report(Sequence[UnitDecision]):
    """The per-unit report of a compaction, built the first time someone reads it.

    Most calls (a manager answering a query) never look at it; building one
    decision per unit would otherwise cost as much as rendering. Behaves as a
    read-only list; pickles as one.
    """

    __slots__ = ("_build", "_items")

    def __init__(self, build: Callable[[], list[UnitDecision]]) -> None:
        self._build: Callable[[], list[UnitDecision]] | None = build
        self._items: list[UnitDecision] = []

    def _list(self) -> list[UnitDecision]:
        if self._build is not None:
            self._items, self._build = self._build(), None
        return self._items

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._list()[index]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[UnitDecision]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(self._list())

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (self._list(),))


@dataclass(frozen=True)
class Compaction:
    """The result of fitting a history to a budget.

    ``messages`` are ready for the model (OpenAI chat format, no extra keys);
    ``tokens`` is their size with the same tokenizer; ``kept_ids`` are the ids
    of input messages present verbatim; ``report`` has one
    :class:`UnitDecision` per input message, in input order. ``sources`` says
    where each of ``messages`` comes from: the id of the input message it
    renders (verbatim if that id is in ``kept_ids``, else cut or compressed),
    or ``None`` for an elision marker or the summary; adapters use it to give
    a framework back its own message objects.
    """

    messages: list[dict[str, Any]]
    tokens: int
    kept_ids: list[str]
    report: Sequence[UnitDecision]
    budget: int
    policy: str
    summary: str | None = None
    warnings: list[str] = field(default_factory=list)
    sources: list[str | None] = field(default_factory=list)

    def ids(self, decision: Decision) -> list[str]:
        """Ids of the input messages that got ``decision``."""
        return [d.id for d in self.report if d.decision == decision]

    @property
    def compressed_ids(self) -> list[str]:
        return self.ids("compressed")

    @property
    def summarized_ids(self) -> list[str]:
        return self.ids("summarized")

    @property
    def archived_ids(self) -> list[str]:
        return self.ids("archived")

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "tokens": self.tokens,
            "budget": self.budget,
            "policy": self.policy,
            "kept_ids": self.kept_ids,
            "summary": self.summary,
            "warnings": self.warnings,
            "report": [d.to_dict() for d in self.report],
        }

    def explain(self) -> str:
        """A plain-text table: one line per input message with its decision and score breakdown."""
        lines = [f"policy={self.policy} budget={self.budget} tokens={self.tokens} kept={len(self.kept_ids)}"]
        for d in self.report:
            parts = " ".join(f"{k}={v:.3f}" for k, v in d.breakdown.items())
            why = f"  ({d.reason})" if d.reason else ""
            lines.append(
                f"{d.id:>12} {d.role:<9} {d.decision:<10} {d.tokens:>6}->{d.sent_tokens:<6} "
                f"score={d.score:.3f} {parts}{why}"
            )
        return "\n".join(lines)


def dumps(result: Compaction) -> str:
    """A compaction as indented JSON (what ``rdmem compact`` prints)."""
    return json.dumps(result.to_dict(), ensure_ascii=False, indent=2)
