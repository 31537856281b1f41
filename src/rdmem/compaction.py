"""The compaction engine: units + policy + budget -> a valid, budget-fitting history and a report.

:func:`compact_units` is a short sequence of named steps: lay the units out
(pinned, blocks, what cannot be sent), fit the pinned messages, plan (only
when everything does not fit anyway), settle the plan to the exact budget
(summary, repair, fill, fallback), render, report.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ._accounting import RenderCost
from ._layout import Head, Layout, fit_pinned, truncate_block
from ._threads import on_one_math_thread
from .contract import Plan, Problem
from .embed import Embedder
from .reconstruct import MERGED, Markers, render, summary_message
from .result import Breakdown, Compaction, Decision, Report, UnitDecision, dumps
from .scoring import ScoringContext
from .summarize import ExtractiveSummarizer, Summarizer, SummarizerError
from .tokens import Tokenizer
from .units import MemoryUnit, Rung

if TYPE_CHECKING:
    from .contract import Policy

#: What the report says of a unit whose vector has not landed yet (a background worker embeds it).
NOT_EMBEDDED = "not yet embedded: ranked by its lexical and prior terms"

__all__ = ["NOT_EMBEDDED", "Compaction", "UnitDecision", "Plan", "Problem", "compact_units", "unit_values", "dumps"]


@dataclass
class _Settled:
    """A plan brought to the exact budget: the chosen blocks, per-unit contents, and the summary."""

    chosen: set[int]
    contents: dict[int, str]  # candidate position -> text sent instead of the original
    summary: str | None = None
    summarized: list[int] = field(default_factory=list)  # candidate positions the summary stands for
    truncated: set[int] = field(default_factory=set)  # unit positions cut to fit
    notes: list[str] = field(default_factory=list)


@on_one_math_thread
def compact_units(
    units: Sequence[MemoryUnit],
    *,
    budget: int,
    policy: Policy,
    query: str | None = None,
    tokenizer: Tokenizer,
    embedder: Embedder | None = None,
    summarizer: Summarizer | None = None,
    markers: Markers = MERGED,
    now: int | None = None,
    doc_freq: tuple[Counter[str], int] | None = None,
    warn: bool = True,
    embed_missing: bool = True,
) -> Compaction:
    """Fit already-encoded units to ``budget`` tokens with ``policy`` (see :func:`compact`).

    ``warn=False`` keeps the notes in ``warnings`` of the result without raising Python warnings
    (a manager's own working-set compactions). ``embed_missing=False``: units without a vector are not
    embedded here (a background worker will); they are ranked by their lexical and prior terms, and the
    report says so (``embedded=False``)."""
    tok = tokenizer
    layout, head, cost, problem = _problem(units, budget, query, tok, embedder, now, doc_freq, embed_missing, markers)
    pending = frozenset() if embed_missing or not policy.needs_embeddings else \
        frozenset(p for p, u in enumerate(units) if u.embedding is None)
    newest = layout.newest_user_block()
    plan, planned = _plan(problem, policy, cost, head.avail, newest)
    settled = _settle(plan, problem, layout, cost, head, budget, summarizer, newest)
    # The report shows the policy's scores and reasons; when it was not asked (everything fits), it is
    # asked only if someone reads the report.
    explained = plan if planned else _Lazy(lambda: policy.plan(problem))
    return _result(units, layout, head, settled, tok, budget, policy, markers, explained, warn, pending)


def _problem(
    units: Sequence[MemoryUnit], budget: int, query: str | None, tok: Tokenizer, embedder: Embedder | None,
    now: int | None, doc_freq: tuple[Counter[str], int] | None, embed_missing: bool, markers: Markers,
) -> tuple[Layout, Head, RenderCost, Problem]:
    """What a policy is given for ``units`` under ``budget``: the layout, the pinned head, the render's costs
    and the problem over the candidates."""
    layout = Layout(units)
    head = fit_pinned(layout, budget, tok)
    ctx = ScoringContext(layout.cand, query=query, embedder=embedder, now=now, doc_freq=doc_freq,
                         embed_missing=embed_missing)
    cost = RenderCost(layout, tok, np.zeros(len(layout.blocks), dtype=np.int64), markers=markers)
    # Per-run markers are priced by the policy (a marker's tokens per gap); a merged one is set aside.
    room = max(head.avail - cost.merged_reserve(spread=False), 0)
    problem = Problem(layout.cand, layout.local_blocks, room, ctx, tok, cost.marker(10), layout.forced_gaps())
    cost.costs = problem.block_costs()
    return layout, head, cost, problem


def unit_values(
    units: Sequence[MemoryUnit], *, policy: Policy, tokenizer: Tokenizer, query: str | None = None,
    embedder: Embedder | None = None,
) -> np.ndarray:
    """Each unit's value under ``policy`` when there is room for every unit: the scores of its plan (a
    :class:`~rdmem.contract.Valued` policy's valuation, after its own rules: rd's near-duplicate of a kept
    message is worth nothing); 0 for a unit no policy sees (a pinned system message, one that cannot be
    sent). Nothing is rendered."""
    room = sum(u.tokens for u in units) + 16 * len(units) + 1  # every unit, and a marker before each
    layout, _, _, problem = _problem(units, room, query, tokenizer, embedder, None, None, True, True)
    values = np.zeros(len(units))
    if problem.units:
        values[layout.cand_arr] = policy.plan(problem).scores
    return values


class _Lazy:
    """A plan computed on first use."""

    def __init__(self, make: Callable[[], Plan]) -> None:
        self._make: Callable[[], Plan] | None = make
        self._plan: Plan | None = None

    def get(self) -> Plan:
        if self._plan is None:
            assert self._make is not None
            self._plan, self._make = self._make(), None
        return self._plan


def _plan(problem: Problem, policy: Policy, cost: RenderCost, avail: int, newest: int | None) -> tuple[Plan, bool]:
    """The policy's plan (and ``True``), or, without asking the policy (and ``False``): every block when
    they all fit verbatim with their markers, none when the newest user message alone does not fit."""
    if not problem.units:
        return Plan(chosen=[], scores=np.zeros(0)), True
    if cost.fits_whole(avail):
        # Everything fits: whatever the policy, the whole history goes out verbatim, unsummarized
        # (a policy's reserve for markers must not cost a message when no marker is needed).
        return Plan(chosen=list(range(len(problem.blocks))), scores=np.zeros(len(problem.units))), False
    if newest is not None and cost.total({newest}) > avail:
        return Plan(chosen=[], scores=np.zeros(len(problem.units))), False  # _settle cuts it to fit
    return policy.plan(problem), True


def _summarize(plan: Plan, problem: Problem, summarizer: Summarizer | None, notes: list[str]) -> str | None:
    """The summary a plan asked for (``None`` if none, or if the summarizer failed: the span stays archived)."""
    if not (plan.summarize and plan.summary_tokens > 0):
        return None
    try:
        text = (summarizer or ExtractiveSummarizer()).summarize(
            [problem.units[i] for i in plan.summarize], plan.summary_tokens, problem.tokenizer
        )
    except SummarizerError as exc:
        notes.append(f"summarizer failed, span kept as archived: {exc}")
        return None
    return text or None


def _settle(
    plan: Plan, problem: Problem, layout: Layout, cost: RenderCost, head: Head, budget: int,
    summarizer: Summarizer | None, newest: int | None,
) -> _Settled:
    """Bring a plan to the exact budget: keep the newest user message (and the turn in progress), make the
    summary, repair overflows, fill, and never send nothing."""
    tok, avail = problem.tokenizer, head.avail
    out = _Settled(chosen=set(plan.chosen), contents={})
    _content_costs(out, problem, cost, plan.contents)  # the shorter forms a policy chose, counted as sent
    keep: set[int] = set()
    if newest is not None:
        _content_costs(out, problem, cost, {i: None for i in problem.blocks[newest]})
        if newest not in out.chosen and cost.total({newest}) > avail:
            _cut_newest(out, problem, layout, cost, newest, avail, budget)
            if out.chosen:
                return out
        else:
            # Whatever the policy chose, the message the model is about to answer goes out, verbatim,
            # with the turn in progress (the tool calls and results since) as far as it fits beside it.
            keep = {newest}
            for b in layout.turn_in_progress(newest):
                if cost.total(keep | {b}) > avail:  # cut from the whole messages, not from a policy's shorter form
                    _content_costs(out, problem, cost, {i: None for i in problem.blocks[b]})
                if cost.total(keep | {b}) <= avail or _cut_turn_block(out, problem, layout, cost, keep, b, avail):
                    keep.add(b)
                else:  # said: a model that does not see its own call may make it again
                    ids = [problem.units[int(i)].id for i in problem.blocks[b]]
                    out.notes.append(f"messages {ids} of the turn in progress ({int(cost.costs[b])} tokens) cannot "
                                     f"fit beside the newest user message in the {avail} tokens left, even cut "
                                     f"(tool-call arguments are never cut): left out")
            out.chosen |= keep
            mine = {int(i) for b in keep for i in problem.blocks[b]}
            plan.summarize = [i for i in plan.summarize if i not in mine]
    out.summary = _summarize(plan, problem, summarizer, out.notes)
    if out.summary:
        out.summarized = list(plan.summarize)
    cost.summarized(layout.cand_pos[i] for i in out.summarized)
    values = problem.block_values(plan.scores) if len(plan.scores) else np.zeros(len(problem.blocks))
    ratio = values / np.maximum(cost.costs, 1)
    partners = {b: tuple(group) for group in plan.together if len(group) > 1 for b in group}
    cost.repair(out.chosen, ratio, partners, out.summary, avail, keep=keep)
    if out.summary and cost.total(out.chosen, out.summary) > avail:
        room = avail - cost.total(out.chosen) - tok.message_tokens(summary_message("", len(out.summarized)))
        out.summary = tok.truncate(out.summary, room) if room > 0 else None
        if out.summary is None or cost.total(out.chosen, out.summary) > avail:
            out.summary, out.summarized = None, []
    # A cut in the turn in progress freed room the plan counted as taken: fill it, whatever the policy.
    if plan.fill or out.truncated:
        cost.fill(out.chosen, values, ratio, partners, out.summary, avail)
    if not out.chosen and not out.summary and problem.blocks and avail > 0:
        _fallback(out, problem, layout, cost, values, avail, budget)
    return out


def _content_costs(out: _Settled, problem: Problem, cost: RenderCost, contents: Mapping[int, str | None]) -> None:
    """Send each unit ``i`` of ``contents`` as ``contents[i]`` (``None``: verbatim), its block's cost counted
    as sent: a shorter form a policy chose, or the policy's form taken back (the message the model is about to
    answer goes out verbatim or cut; a block of the turn in progress too large is cut from its whole messages)."""
    tok = problem.tokenizer
    for i, text in contents.items():
        i = int(i)
        u = problem.units[i]
        before = out.contents.get(i)
        was = u.tokens if before is None else tok.message_tokens({**u.message, "content": before})
        now = u.tokens if text is None else tok.message_tokens({**u.message, "content": text})
        if text is None:
            out.contents.pop(i, None)
        else:
            out.contents[i] = text
        cost.costs[problem.block_of[i]] += now - was


def _cut_newest(out: _Settled, problem: Problem, layout: Layout, cost: RenderCost, newest: int, avail: int,
                budget: int) -> None:
    """The newest user message alone does not fit what is left: cut it (with the visible truncation note)
    and leave the older messages out. What came after it (the assistant's reply, tool calls and their
    results: the turn in progress) stays, newest first, in up to half of the budget."""
    tok = problem.tokenizer
    (i,) = (int(x) for x in problem.blocks[newest])
    u = problem.units[i]
    after: set[int] = set()
    for b in range(len(problem.blocks) - 1, newest, -1):
        if cost.total(after | {b}) <= avail // 2:
            after.add(b)
    for keep in (after, set()):  # if the cut does not fit beside them, alone
        chosen = keep | {newest}
        room = avail - (cost.total(chosen) - int(cost.costs[newest]))  # what the others and the markers leave
        cut = truncate_block([u], room, tok) if room > 0 else None
        if cut is not None and cut[0] is not None:
            break
    else:
        out.notes.append(f"the newest user message {u.id!r} ({u.tokens} tokens) cannot be cut to fit the {avail} "
                         f"tokens left of a budget of {budget}")
        return
    out.chosen = chosen
    out.contents[i] = cut[0]
    out.truncated.add(layout.cand_pos[i])
    shown = tok.message_tokens({**u.message, "content": cut[0]})
    out.notes.append(f"the newest user message {u.id!r} ({u.tokens} tokens) does not fit the {avail} tokens left "
                     f"of a budget of {budget}: it was cut to {shown} tokens, and older messages were left out")


def _cut_turn_block(out: _Settled, problem: Problem, layout: Layout, cost: RenderCost, keep: set[int], b: int,
                    avail: int) -> bool:
    """A block of the turn in progress (a tool call and its results) too large for what is left beside
    ``keep``: cut its results (the visible truncation note) so that the model reads what its call returned
    instead of calling it again, in at most half of the budget (the rest stays for the conversation: the
    directives, what the question refers to); ``False`` if even cut it does not fit."""
    tok = problem.tokenizer
    block = [int(i) for i in problem.blocks[b]]
    # What the others and the markers leave, and no more than half of what there is.
    room = min(avail - (cost.total(keep | {b}) - int(cost.costs[b])), avail // 2)
    cut = truncate_block([problem.units[i] for i in block], room, tok) if room > 0 else None
    if cut is None or all(c is None for c in cut.values()):
        return False
    new_cost = 0
    for k, i in enumerate(block):
        u = problem.units[i]
        if cut[k] is not None:
            out.contents[i] = cut[k]  # type: ignore[assignment]
            out.truncated.add(layout.cand_pos[i])
            shown = tok.message_tokens({**u.message, "content": cut[k]})
            out.notes.append(f"the {u.role} message {u.id!r} of the turn in progress ({u.tokens} tokens) was cut to "
                             f"{shown} tokens to fit beside the newest user message")
            new_cost += shown
        else:
            new_cost += u.tokens
    cost.costs[b] = new_cost
    return True


def _fallback(out: _Settled, problem: Problem, layout: Layout, cost: RenderCost, values: np.ndarray, avail: int,
              budget: int) -> None:
    """Nothing survived (the plan's blocks did not fit beside their markers, or no block fits at all):
    send the most valuable block that fits whole, else cut one, rather than send nothing."""
    whole = [b for b in range(len(problem.blocks)) if cost.total({b}) <= avail]
    if whole:
        out.chosen.add(max(whole, key=lambda b: (values[b], b)))
        return
    best = max(range(len(problem.blocks)), key=lambda b: (values[b], b))
    room = avail - (cost.total({best}) - int(cost.costs[best]))  # what its markers leave
    block = [int(i) for i in problem.blocks[best]]
    cut = truncate_block([problem.units[i] for i in block], room, problem.tokenizer) if room > 0 else None
    if cut is None:
        out.notes.append(f"no message fits in the {avail} tokens left of a budget of {budget}, even cut; "
                         f"{len(problem.units)} messages archived")
        return
    out.chosen.add(best)
    for k, i in enumerate(block):
        if cut[k] is not None:
            out.contents[i] = cut[k]  # type: ignore[assignment]
            out.truncated.add(layout.cand_pos[i])


def _unsendable_note(bad: Mapping[int, str]) -> list[str]:
    """Say what was left out because the chat API would refuse it, even where everything fits (an orphaned
    tool result, a call without all of its results): sending them would make the request invalid."""
    if not bad:
        return []
    counts = Counter(bad.values())
    return [f"{len(bad)} message(s) left out: the chat API refuses them ("
            + ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items())) + ")"]


def _result(
    units: Sequence[MemoryUnit], layout: Layout, head: Head, settled: _Settled, tok: Tokenizer, budget: int,
    policy: Policy, markers: Markers, explained: Plan | _Lazy, warn: bool, pending: frozenset[int] = frozenset(),
) -> Compaction:
    """Render the settled plan and build the result (its report is built when first read)."""
    contents = dict(head.contents)
    for b in sorted(settled.chosen):
        for i in layout.local_blocks[b]:
            contents[layout.cand_pos[int(i)]] = settled.contents.get(int(i))
    truncated = head.truncated | settled.truncated
    summarized = {layout.cand_pos[i] for i in settled.summarized} if settled.summary else set()
    sources: list[int | None] = []
    messages = render(list(units), contents, summary=settled.summary, summarized=summarized, markers=markers,
                      hidden=layout.hidden_list, sources=sources)
    # A message sent verbatim costs what its unit was counted at; markers, the summary and cut or
    # compressed contents are counted as rendered.
    n_tokens = sum(
        units[p].tokens if p is not None and contents[p] is None else tok.message_tokens(m)
        for m, p in zip(messages, sources, strict=True)
    )
    if n_tokens > budget:  # pragma: no cover - a bug, never user error
        raise RuntimeError(f"internal error: rendered {n_tokens} tokens for a budget of {budget}")
    notes = head.notes + settled.notes + _unsendable_note(layout.bad)
    for n in notes if warn else ():
        warnings.warn(f"rdmem: {n}", RuntimeWarning, stacklevel=4)
    # The same rule as the report's "kept": sent verbatim, not cut.
    kept_ids = [u.id for p, u in enumerate(units) if p in contents and contents[p] is None and p not in truncated]
    report = Report(lambda: _decisions(units, layout, explained if isinstance(explained, Plan) else explained.get(),
                                       contents, truncated, summarized, tok, pending))
    return Compaction(messages, n_tokens, kept_ids, report, budget, policy.name, settled.summary, notes,
                      [units[p].id if p is not None else None for p in sources])


def _decisions(
    units: Sequence[MemoryUnit], layout: Layout, plan: Plan, contents: Mapping[int, str | None], truncated: set[int],
    summarized: set[int], tok: Tokenizer, pending: frozenset[int] = frozenset(),
) -> list[UnitDecision]:
    report = []
    # Python floats once, not one numpy scalar conversion per unit and term.
    columns = {k: j for j, k in enumerate(plan.breakdown)}
    terms = np.array([np.asarray(v, dtype=np.float64) for v in plan.breakdown.values()]) if columns else None
    scores = np.asarray(plan.scores, dtype=np.float64).tolist()
    for p, u in enumerate(units):
        i = layout.local.get(p)
        score = scores[i] if i is not None and scores else 0.0
        parts: Mapping[str, float] = Breakdown(columns, terms, i) if i is not None and terms is not None else {}
        decision: Decision
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
        elif p in summarized:
            decision, rung, sent = "summarized", Rung.SUMMARY, 0
        else:
            decision, rung, sent = "archived", Rung.ABSENT, 0
        reason = layout.bad.get(p, "") or (plan.reasons.get(i, "") if i is not None else "")
        if u.pinned:
            reason = reason or "system message (pinned)"
        if p in pending:
            reason = f"{reason}; {NOT_EMBEDDED}" if reason else NOT_EMBEDDED
        report.append(UnitDecision(u.id, u.role, decision, rung, u.tokens, sent, score, parts, reason,
                                   embedded=p not in pending))
    return report
