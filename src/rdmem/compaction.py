"""The compaction engine: units + policy + budget -> a valid, budget-fitting history and a report."""

from __future__ import annotations

import bisect
import json
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .embed import Embedder
from .reconstruct import elision_marker, hidden_before, render, summary_message
from .scoring import ScoringContext
from .summarize import ExtractiveSummarizer, Summarizer, SummarizerError
from .tokens import Tokenizer, get_tokenizer
from .units import MemoryUnit, Rung, encode_units

if TYPE_CHECKING:
    from .policies import Policy

__all__ = ["Compaction", "UnitDecision", "Plan", "Problem", "compact", "compact_units"]

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "decision": self.decision,
            "rung": self.rung.value,
            "tokens": self.tokens,
            "sent_tokens": self.sent_tokens,
            "score": round(self.score, 6),
            "breakdown": {k: round(v, 6) for k, v in self.breakdown.items()},
            "reason": self.reason,
        }


class _Breakdown(Mapping[str, float]):
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


class _Report(Sequence[UnitDecision]):
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
    :class:`UnitDecision` per input message, in input order.
    """

    messages: list[dict[str, Any]]
    tokens: int
    kept_ids: list[str]
    report: Sequence[UnitDecision]
    budget: int
    policy: str
    summary: str | None = None
    warnings: list[str] = field(default_factory=list)

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


@dataclass
class Problem:
    """What a policy plans over: candidate units, their blocks, and the tokens available."""

    units: list[MemoryUnit]
    blocks: list[np.ndarray]
    budget: int
    ctx: ScoringContext
    tokenizer: Tokenizer
    marker_tokens: int
    #: Per block: whether a span that cannot come back (already archived, or not emittable)
    #: lies right before it, so an elision marker stands there whatever is chosen around it.
    gap_before: np.ndarray | None = None

    @cached_property
    def _single_units(self) -> np.ndarray | None:
        # Without tool calls every block is one unit, and per-block sums are plain lookups.
        if all(len(b) == 1 for b in self.blocks):
            return np.array([int(b[0]) for b in self.blocks], dtype=np.int64)
        return None

    @cached_property
    def block_of(self) -> np.ndarray:
        """The block of each unit (its index in ``blocks``), -1 for a unit in none; read-only."""
        out = np.full(len(self.units), -1, dtype=np.int64)
        if self._single_units is not None:
            out[self._single_units] = np.arange(len(self.blocks))
        else:
            for b, blk in enumerate(self.blocks):
                out[blk] = b
        out.flags.writeable = False
        return out

    @cached_property
    def _block_costs(self) -> np.ndarray:
        tokens = self.ctx.token_costs.astype(np.int64)
        if self._single_units is not None:
            return tokens[self._single_units]
        return np.array([int(tokens[b].sum()) for b in self.blocks], dtype=np.int64)

    def block_costs(self) -> np.ndarray:
        """Tokens of each block, verbatim (a new array: callers may change it)."""
        return self._block_costs.copy()

    def block_values(self, values: np.ndarray) -> np.ndarray:
        if self._single_units is not None:
            return np.asarray(values, dtype=np.float64)[self._single_units]
        return np.array([float(values[b].sum()) for b in self.blocks], dtype=np.float64)


@dataclass
class Plan:
    """A policy's answer: chosen blocks, per-unit contents, and what to summarize."""

    chosen: list[int]
    scores: np.ndarray
    breakdown: dict[str, np.ndarray] = field(default_factory=dict)
    contents: dict[int, str] = field(default_factory=dict)
    rungs: dict[int, Rung] = field(default_factory=dict)
    summarize: list[int] = field(default_factory=list)
    summary_tokens: int = 0
    fill: bool = False
    reasons: dict[int, str] = field(default_factory=dict)
    #: Groups of block indices kept or dropped together (a correction and what it corrects).
    together: list[list[int]] = field(default_factory=list)


def _marker_cost(tokenizer: Tokenizer, n: int) -> int:
    return tokenizer.message_tokens(elision_marker(n))


#: Per tokenizer, the tokens of the marker for each gap size seen (a gap is any count of messages up
#: to the history's length, so compactions keep meeting new ones; the table is shared between calls).
_MARKER_TABLES: dict[Tokenizer, dict[int, int]] = {}


def _marker_table(tokenizer: Tokenizer) -> dict[int, int]:
    table = _MARKER_TABLES.get(tokenizer)
    if table is None or len(table) > 1 << 15:  # bounded: a few MB per tokenizer, at most 8 tokenizers
        if len(_MARKER_TABLES) >= 8:
            _MARKER_TABLES.clear()
        table = _MARKER_TABLES[tokenizer] = {}
    return table


def _truncation_suffix(shown: int, total: int) -> str:
    return f"\n[rdmem: truncated, {shown} of {total} tokens shown]"


def _truncate_block(units: Sequence[MemoryUnit], budget: int, tok: Tokenizer) -> dict[int, str | None] | None:
    """Cut the contents of a block's messages so the whole block fits ``budget``; ``None`` if impossible.

    Only plain text contents are cut (never tool-call arguments, which would
    stop being valid JSON); the largest are cut first, evenly.
    """
    fixed = 0
    cuttable = []
    for pos, u in enumerate(units):
        if isinstance(u.message.get("content"), str) and u.text:
            fixed += tok.message_tokens({**u.message, "content": ""})
            cuttable.append(pos)
        else:
            fixed += u.tokens
    room = budget - fixed
    if not cuttable or room <= 0:
        return None
    out: dict[int, str | None] = {pos: None for pos in range(len(units))}
    share = room // len(cuttable)
    for pos in cuttable:
        u = units[pos]
        full = tok.count(u.text)
        if full <= share:
            continue
        suffix_cost = tok.count(_truncation_suffix(full, full)) + 1
        keep = share - suffix_cost
        if keep <= 0:
            return None
        cut = tok.truncate(u.text, keep)
        out[pos] = cut + _truncation_suffix(tok.count(cut), full)
    total = fixed + sum(
        tok.count(out[p] if out[p] is not None else units[p].text) for p in cuttable  # type: ignore[arg-type]
    )
    return out if total <= budget else None


def _gap_sizes(kept: np.ndarray, hidden: np.ndarray, open_: np.ndarray) -> list[int]:
    """Sizes of the elision markers of a render that sends the units flagged in ``kept``.

    ``hidden[p]`` counts the messages archived before unit ``p``; ``open_`` flags
    the units that count in a run when left out (not pinned, not summarized).
    Each maximal run of left-out messages between, before or after the kept
    units is one marker; nothing kept, no marker. Zeros stand for no marker.
    """
    if not kept.any():
        return []
    running = np.cumsum(hidden + (open_ & ~kept))
    at = running[kept]
    gaps = np.diff(at, prepend=0).tolist()
    gaps.append(int(running[-1] - at[-1]))
    return gaps


def _complete_groups(units: Sequence[MemoryUnit], open_: np.ndarray) -> tuple[list[np.ndarray], dict[int, str]]:
    """Blocks of non-pinned units (flagged in ``open_``) that can be emitted, and reasons for those that cannot."""
    if all(u.role != "tool" and not u.message.get("tool_calls") for u in units):
        # No tool calls: every message is a block of its own.
        return list(np.flatnonzero(open_).reshape(-1, 1)), {}
    by_group: dict[int, list[int]] = {}
    for pos, u in enumerate(units):
        if not u.pinned:
            by_group.setdefault(u.group, []).append(pos)
    blocks, bad = [], {}
    for positions in by_group.values():
        first = units[positions[0]]
        calls = {c["id"] for c in first.message.get("tool_calls") or ()}
        answered = {units[p].message.get("tool_call_id") for p in positions[1:]}
        if first.role == "tool":
            reason = "tool result without its call"
        elif calls and answered != calls:
            reason = "tool call without all of its results"
        elif positions != list(range(positions[0], positions[0] + len(positions))):
            reason = "tool results not directly after their call"
        else:
            blocks.append(np.array(positions, dtype=np.int64))
            continue
        for p in positions:
            bad[p] = reason
    return blocks, bad


def _forced_gaps(hidden: np.ndarray, open_: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    """For each block: is there an archived span or a non-emittable message right before it?

    That is, since the end of the previous block: an archived span before any
    unit up to the block's first, or an unpinned unit that no block holds.
    """
    if not blocks:
        return np.zeros(0, dtype=bool)
    firsts = np.array([int(b[0]) for b in blocks], dtype=np.int64)
    prev_last = np.array([-1] + [int(b[-1]) for b in blocks[:-1]], dtype=np.int64)
    spans = np.concatenate([[0], np.cumsum(hidden > 0)])  # spans[p + 1]: archived spans up to p
    loose = np.concatenate([[0], np.cumsum(open_)])  # loose[p + 1]: unpinned units up to p
    return (spans[firsts + 1] > spans[prev_last + 1]) | (loose[firsts] > loose[prev_last + 1])


def _fill(
    chosen: set[int],
    values: np.ndarray,
    costs: np.ndarray,
    ratio: np.ndarray,
    partners: Mapping[int, tuple[int, ...]],
    block_pos: Sequence[np.ndarray],
    hidden: np.ndarray,
    open_: np.ndarray,
    room: int,
    marker: Callable[[int], int],
) -> None:
    """Add unchosen blocks to ``chosen`` (in place), best value per token first, while the render fits.

    ``room`` is what the render of ``chosen`` leaves of the budget; ``hidden``
    counts the archived messages before each unit and ``open_`` flags the units
    a marker counts when they are left out. Adding a block (a contiguous run of
    units) only splits the gap it sits in into the gaps before and after it, so
    each try is a bisection and a few lookups, exact to the token.
    """
    kept = np.zeros(len(hidden), dtype=bool)
    for b in chosen:
        kept[block_pos[b]] = True
    # With nothing kept, the gap between units a < c would be base[c] - base[a]; every kept unit
    # that a marker counts when left out (open) lowers the count at and after it by one.
    base = np.cumsum(hidden + open_).tolist()
    kept_at = np.flatnonzero(kept).tolist()
    kept_open = np.flatnonzero(kept & open_).tolist()
    end = base[-1] - len(kept_open) if base else 0
    is_open, spans, cost_of = open_.tolist(), hidden.tolist(), costs.tolist()
    order = np.lexsort((-np.arange(len(costs)), -ratio))  # best value per token first, later first on ties
    for b in order[values[order] > 0].tolist():
        if b in chosen or b in partners:
            continue
        cost = cost_of[b]
        p0, p1 = int(block_pos[b][0]), int(block_pos[b][-1])
        k = bisect.bisect_left(kept_at, p0)
        before = base[kept_at[k - 1]] - bisect.bisect_right(kept_open, kept_at[k - 1]) if k else 0
        after = base[kept_at[k]] - bisect.bisect_right(kept_open, kept_at[k]) if k < len(kept_at) else end
        delta = cost - (marker(after - before) if kept_at else 0)  # no marker at all while nothing is kept
        if delta > room:  # the markers it leaves only add: skip counting them
            continue
        # The block's own units are not kept, so the counts at p0 and p1 are base less the kept before p0.
        shift = bisect.bisect_left(kept_open, p0)
        delta += (
            marker(base[p0] - shift - before - is_open[p0])
            + marker(after - (base[p1] - shift))
            + (sum(marker(h) for h in spans[p0 + 1 : p1 + 1] if h) if p1 > p0 else 0)  # spans inside it
        )
        if delta > room:
            continue
        chosen.add(b)
        room -= delta
        kept_at[k:k] = range(p0, p1 + 1)
        now_kept = [p for p in range(p0, p1 + 1) if is_open[p]]
        kept_open[shift:shift] = now_kept
        end -= len(now_kept)


def compact_units(
    units: Sequence[MemoryUnit],
    *,
    budget: int,
    policy: Policy,
    query: str | None = None,
    tokenizer: Tokenizer,
    embedder: Embedder | None = None,
    summarizer: Summarizer | None = None,
    markers: bool = True,
    now: int | None = None,
    doc_freq: tuple[Counter[str], int] | None = None,
) -> Compaction:
    """Fit already-encoded units to ``budget`` tokens with ``policy`` (see :func:`compact`)."""
    tok = tokenizer
    notes: list[str] = []
    marker_memo = _marker_table(tok)

    def marker(gap: int) -> int:
        """Tokens of the elision marker for ``gap`` left-out messages (0 for none, or without markers)."""
        if not gap or not markers:
            return 0
        c = marker_memo.get(gap)
        if c is None:
            c = marker_memo[gap] = _marker_cost(tok, gap)
        return c

    open_base = np.fromiter((not u.pinned for u in units), dtype=bool, count=len(units))
    pinned = np.flatnonzero(~open_base).tolist()
    hidden = hidden_before(units)
    hidden_arr = np.asarray(hidden, dtype=np.int64)
    blocks, bad = _complete_groups(units, open_base)
    cand_arr = np.sort(np.concatenate(blocks)) if blocks else np.zeros(0, dtype=np.int64)
    cand_pos = cand_arr.tolist()
    cand = [units[p] for p in cand_pos]
    local = {p: i for i, p in enumerate(cand_pos)}
    if all(len(b) == 1 for b in blocks):
        local_blocks = list(np.arange(len(blocks), dtype=np.int64).reshape(-1, 1))
    else:
        local_blocks = [np.searchsorted(cand_arr, b) for b in blocks]

    # Pinned system messages come first and are never dropped; cut them only if they alone overflow.
    contents: dict[int, str | None] = {}
    truncated: set[int] = set()
    pinned_cost = sum(units[p].tokens for p in pinned)
    if pinned and pinned_cost > budget:
        cut = _truncate_block([units[p] for p in pinned], budget, tok)
        if cut is None:
            notes.append(f"system messages ({pinned_cost} tokens) cannot fit a budget of {budget}; none sent")
        else:
            for i, p in enumerate(pinned):
                contents[p] = cut[i]
                if cut[i] is not None:
                    truncated.add(p)
            pinned_cost = sum(
                units[p].tokens if contents[p] is None else tok.message_tokens({**units[p].message, "content": contents[p]})
                for p in pinned
            )
    else:
        contents.update({p: None for p in pinned})
    avail = max(budget - pinned_cost, 0) if pinned_cost <= budget else 0

    ctx = ScoringContext(cand, query=query, embedder=embedder, now=now, doc_freq=doc_freq)
    problem = Problem(
        cand, local_blocks, avail, ctx, tok, marker(10), _forced_gaps(hidden_arr, open_base, blocks)
    )
    plan = policy.plan(problem) if cand else Plan(chosen=[], scores=np.zeros(0))
    def fits_whole() -> bool:
        """Does every candidate fit, verbatim, with its markers?"""
        tokens = sum(u.tokens for u in cand)
        if tokens > avail:  # markers only add: no need to count them
            return False
        everything = np.zeros(len(units), dtype=bool)
        everything[cand_arr] = True
        return tokens + sum(map(marker, _gap_sizes(everything, hidden_arr, open_base))) <= avail

    if cand and fits_whole():
        # Everything fits: whatever the policy, the whole history goes out verbatim, unsummarized
        # (a policy's reserve for markers must not cost a message when no marker is needed).
        plan.chosen, plan.summarize, plan.contents = list(range(len(local_blocks))), [], {}

    # Summary (if the policy asked for one); failures keep the span as it was.
    summary_text: str | None = None
    summarized: list[int] = []
    if plan.summarize and plan.summary_tokens > 0:
        try:
            summary_text = (summarizer or ExtractiveSummarizer()).summarize(
                [cand[i] for i in plan.summarize], plan.summary_tokens, tok
            ) or None
        except SummarizerError as exc:
            notes.append(f"summarizer failed, span kept as archived: {exc}")
        if summary_text:
            summarized = list(plan.summarize)
    summarized_mask = np.zeros(len(units), dtype=bool)
    summarized_mask[[cand_pos[i] for i in summarized]] = True

    costs = problem.block_costs()
    if plan.contents:
        block_of = {int(i): b for b, block in enumerate(local_blocks) for i in block}
        for i, text in plan.contents.items():
            costs[block_of[i]] += tok.message_tokens({**cand[i].message, "content": text}) - cand[i].tokens
    values = problem.block_values(plan.scores) if len(plan.scores) else np.zeros(len(local_blocks))

    # Precomputed once: total() runs for every block the fill loop tries, so it must not walk
    # the units in Python (that made query-time compaction quadratic in the history).
    block_pos = blocks  # the blocks' positions in ``units``
    summary_memo: dict[tuple[str, int], int] = {}

    def kept_mask(chosen: Iterable[int]) -> np.ndarray:
        kept = np.zeros(len(units), dtype=bool)
        chosen = list(chosen)
        if chosen:
            kept[np.concatenate([block_pos[b] for b in chosen])] = True
        return kept

    def mask_cost(kept: np.ndarray, used: int, summary: str | None) -> int:
        """Tokens of the non-pinned part of the render (mirroring :func:`render` exactly) when the
        units flagged in ``kept`` are sent and their blocks cost ``used`` tokens."""
        if markers:
            # Pinned and summarized units are not counted in a run of left-out units.
            open_ = open_base & ~summarized_mask if summary else open_base
            used += sum(map(marker, _gap_sizes(kept, hidden_arr, open_)))
        if summary:
            key = (summary, len(summarized))
            if key not in summary_memo:
                summary_memo[key] = tok.message_tokens(summary_message(summary, len(summarized)))
            used += summary_memo[key]
        return used

    def total(chosen: Iterable[int], summary: str | None) -> int:
        chosen = list(chosen)
        return mask_cost(kept_mask(chosen), int(costs[chosen].sum()) if chosen else 0, summary)

    chosen = set(plan.chosen)
    ratio = values / np.maximum(costs, 1)
    partners = {b: tuple(group) for group in plan.together if len(group) > 1 for b in group}
    # Repair: markers and summaries can push a plan over; drop the least valuable per token first.
    if chosen and total(chosen, summary_text) > avail:
        # ratio does not change while dropping, so "drop the worst, recount" walks one sorted order.
        kept, used = kept_mask(chosen), int(costs[list(chosen)].sum())
        for worst in sorted(chosen, key=lambda b: (ratio[b], -b)):
            if worst not in chosen:
                continue
            for b in partners.get(worst, (worst,)):
                if b in chosen:
                    chosen.discard(b)
                    kept[block_pos[b]] = False
                    used -= int(costs[b])
            if not chosen or mask_cost(kept, used, summary_text) <= avail:
                break
    if summary_text and total(chosen, summary_text) > avail:
        room = avail - total(chosen, None) - tok.message_tokens(summary_message("", len(summarized)))
        summary_text = tok.truncate(summary_text, room) if room > 0 else None
        if summary_text is None or total(chosen, summary_text) > avail:
            summary_text, summarized = None, []
    if plan.fill:
        room = avail - total(chosen, summary_text)
        open_ = open_base & ~summarized_mask if summary_text else open_base
        _fill(chosen, values, costs, ratio, partners, block_pos, hidden_arr, open_, room, marker)

    # Nothing survived (the plan's blocks did not fit beside their markers, or no block fits at
    # all): send the most valuable block that fits whole, else cut one, rather than send nothing.
    if not chosen and not summary_text and local_blocks and avail > 0:
        whole = [b for b in range(len(local_blocks)) if total({b}, None) <= avail]
        if whole:
            chosen.add(max(whole, key=lambda b: (values[b], b)))
        else:
            best = max(range(len(local_blocks)), key=lambda b: (values[b], b))
            room = avail - (total({best}, None) - int(costs[best]))  # what its markers leave
            cut = _truncate_block([cand[int(i)] for i in local_blocks[best]], room, tok) if room > 0 else None
            if cut is not None:
                chosen.add(best)
                for k, i in enumerate(local_blocks[best]):
                    if cut[k] is not None:
                        plan.contents[int(i)] = cut[k]  # type: ignore[assignment]
                        truncated.add(cand_pos[int(i)])
            else:
                notes.append(
                    f"no message fits in the {avail} tokens left of a budget of {budget}, even cut; "
                    f"{len(cand)} messages archived"
                )

    for b in sorted(chosen):
        for i in local_blocks[b]:
            contents[cand_pos[int(i)]] = plan.contents.get(int(i))
    summarized_global = {cand_pos[i] for i in summarized} if summary_text else set()
    sources: list[int | None] = []
    messages = render(
        list(units), contents, summary=summary_text, summarized=summarized_global, markers=markers, hidden=hidden,
        sources=sources,
    )
    # A message sent verbatim costs what its unit was counted at; markers, the summary and cut or
    # compressed contents are counted as rendered.
    n_tokens = sum(
        units[p].tokens if p is not None and contents[p] is None else tok.message_tokens(m)
        for m, p in zip(messages, sources, strict=True)
    )
    if n_tokens > budget:  # pragma: no cover - a bug, never user error
        raise RuntimeError(f"internal error: rendered {n_tokens} tokens for a budget of {budget}")

    def decisions() -> list[UnitDecision]:
        report = []
        # Python floats once, not one numpy scalar conversion per unit and term.
        columns = {k: j for j, k in enumerate(plan.breakdown)}
        terms = np.array([np.asarray(v, dtype=np.float64) for v in plan.breakdown.values()]) if columns else None
        scores = np.asarray(plan.scores, dtype=np.float64).tolist()
        for p, u in enumerate(units):
            i = local.get(p)
            score = scores[i] if i is not None and scores else 0.0
            parts: Mapping[str, float] = _Breakdown(columns, terms, i) if i is not None and terms is not None else {}
            if p in contents:
                content = contents[p]
                if p in truncated:
                    decision, rung = "truncated", Rung.COMPRESSED
                elif content is None:
                    decision, rung = "kept", Rung.VERBATIM
                else:
                    rung = plan.rungs.get(i, Rung.COMPRESSED) if i is not None else Rung.COMPRESSED
                    decision = "compressed"
                sent = u.tokens if content is None else tok.message_tokens({**u.message, "content": content})
            elif p in summarized_global:
                decision, rung, sent = "summarized", Rung.SUMMARY, 0
            else:
                decision, rung, sent = "archived", Rung.ABSENT, 0
            reason = bad.get(p, "") or (plan.reasons.get(i, "") if i is not None else "")
            if u.pinned:
                reason = reason or "system message (pinned)"
            report.append(UnitDecision(u.id, u.role, decision, rung, u.tokens, sent, score, parts, reason))
        return report

    # The same rule as decisions() gives "kept": sent verbatim, not cut.
    kept_ids = [u.id for p, u in enumerate(units) if p in contents and contents[p] is None and p not in truncated]
    for n in notes:
        warnings.warn(f"rdmem: {n}", RuntimeWarning, stacklevel=3)
    report = _Report(decisions)
    return Compaction(messages, n_tokens, kept_ids, report, budget, policy.name, summary_text, notes)


def compact(
    messages: Sequence[Mapping[str, Any]],
    *,
    budget: int,
    policy: str | Policy = "rd",
    query: str | None = None,
    tokenizer: str | Tokenizer | Callable[[str], int] = "cl100k_base",
    message_overhead: int | None = None,
    embedder: Embedder | str | None = None,
    summarizer: Summarizer | None = None,
    markers: bool = True,
) -> Compaction:
    """Fit a chat history to ``budget`` tokens.

    Parameters
    ----------
    messages:
        OpenAI-style chat messages (``role``, ``content``, optional ``id``,
        ``name``, ``tool_calls``, ``tool_call_id``). Never modified.
    budget:
        Tokens the returned messages may use, per-message overhead included.
    policy:
        A name from :data:`rdmem.POLICIES` or a policy object.
    query:
        The next question, if known: makes the selection query-aware.
    tokenizer:
        A tiktoken encoding name, a ``tokenizer.json`` path, a callable
        ``str -> int`` or a :class:`~rdmem.tokens.Tokenizer`.
    message_overhead:
        Tokens per message on top of its content (default 4).
    embedder:
        ``None`` (default MiniLM), a sentence-transformers model name, or an
        object with ``embed(texts) -> array``. Only loaded if the policy needs it.
    summarizer:
        For policies that summarize (default: extractive, offline).
    markers:
        Put a visible ``[N messages omitted]`` where a span was left out.

    >>> history = [{"role": "system", "content": "Be brief."}] + [
    ...     {"role": "user", "content": f"Message number {i} about apples."} for i in range(50)]
    >>> result = compact(history, budget=60, policy="window")
    >>> result.tokens <= 60, result.messages[0]["role"], result.kept_ids[-1]
    (True, 'system', 'm50')
    """
    from .embed import get_embedder
    from .policies import get_policy

    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget must be an int number of tokens, got {type(budget).__name__}")
    if budget <= 0:
        raise ValueError(f"budget must be > 0 tokens, got {budget}")
    if query is not None and not isinstance(query, str):
        raise TypeError(f"query must be a string or None, got {type(query).__name__}")
    pol = get_policy(policy)
    tok = get_tokenizer(tokenizer, message_overhead=message_overhead)
    units = encode_units(messages, tok)
    emb = get_embedder(embedder) if (pol.needs_embeddings or embedder is not None) else None
    return compact_units(
        units, budget=int(budget), policy=pol, query=query, tokenizer=tok, embedder=emb,
        summarizer=summarizer, markers=markers,
    )


def dumps(result: Compaction) -> str:
    return json.dumps(result.to_dict(), ensure_ascii=False, indent=2)
