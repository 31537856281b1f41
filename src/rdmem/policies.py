"""Named policies: a scorer, a selector and a way to reconstruct.

A policy is a small frozen dataclass with one method, :meth:`plan`, that
turns a :class:`~rdmem.compaction.Problem` into a :class:`~rdmem.compaction.Plan`.
The engine (:func:`rdmem.compaction.compact_units`) does the rest: summaries,
markers, repair to the exact budget, the report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

from .contract import Plan, Problem
from .compress import compress, one_line
from .history import is_transcript_line, split_prefix
from .features import content_words
from .scoring import Information, LearnedValue, Metadata, Recency, Relevance, Scorer, Weighted, seed_scorer
from .select import get_selector, mckp
from .select.chain import gap_knapsack
from .deps import LINK_KINDS, find_links, merge_blocks
from .tokens import Tokenizer
from .units import Rung

#: Above this many (blocks x budget) cells the marker-aware DP falls back to a marker reserve.
_GAP_DP_CELLS = 40_000_000
#: Blocks the marker-aware DP considers, by value (the rest are left out).
_GAP_DP_MAX_BLOCKS = 160
#: Capacity cells of the marker-aware DP (costs are counted in quanta of budget // this).
_GAP_DP_WIDTH = 1000

__all__ = ["Policy", "ScoredPolicy", "SummaryBuffer", "RDPolicy", "TaskMode", "TASK_MODES", "POLICIES", "get_policy", "register_policy"]


@runtime_checkable
class Policy(Protocol):
    name: str
    description: str

    @property
    def needs_embeddings(self) -> bool: ...

    def plan(self, problem: Problem) -> Plan: ...


def _scores(scorer: Scorer, problem: Problem) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    explain_fn = getattr(scorer, "explain", None)
    if explain_fn is not None:
        return explain_fn(problem.ctx)
    breakdown_fn = getattr(scorer, "breakdown", None)
    if breakdown_fn is not None:
        parts = breakdown_fn(problem.ctx)
        total = sum(parts.values(), np.zeros(len(problem.units)))
        return np.asarray(total, dtype=np.float64), parts
    s = np.asarray(scorer.score(problem.ctx), dtype=np.float64)
    return s, {"score": s}


@dataclass(frozen=True)
class ScoredPolicy:
    """Score every unit, add scores per block (a tool call and its results), select under the budget.

    ``selector`` is a name from :data:`rdmem.select.SELECTORS`. One elision
    marker is reserved up front; the engine repairs any overflow, and with
    ``fill`` adds what still fits afterwards.
    """

    name: str
    description: str
    scorer: Scorer
    selector: str = "knapsack"
    fill: bool = False

    def __post_init__(self) -> None:
        get_selector(self.selector)

    @property
    def needs_embeddings(self) -> bool:
        return bool(self.scorer.needs_embeddings)

    def plan(self, problem: Problem) -> Plan:
        scores, parts = _scores(self.scorer, problem)
        select = get_selector(self.selector)
        budget = max(problem.budget - problem.marker_tokens, 0)
        chosen = select(problem.block_values(scores), problem.block_costs(), budget)
        return Plan(chosen=[int(b) for b in chosen], scores=scores, breakdown=parts, fill=self.fill)


@dataclass(frozen=True)
class SummaryBuffer:
    """A summary of the older part plus the most recent messages verbatim.

    Like LangChain's ``ConversationSummaryBufferMemory``: the newest messages
    that fit ``1 - summary_fraction`` of the budget stay verbatim; everything
    older is summarized into at most ``summary_fraction`` of the budget.
    """

    name: str = "summary_buffer"
    description: str = "summary of the older part (extractive by default) + the most recent messages verbatim"
    summary_fraction: float = 0.3
    needs_embeddings: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.summary_fraction < 1.0:
            raise ValueError(f"summary_fraction must be in (0, 1), got {self.summary_fraction!r}")

    def plan(self, problem: Problem) -> Plan:
        recency = Recency(decay=0.0).score(problem.ctx)
        costs = problem.block_costs()
        verbatim_budget = int(problem.budget * (1 - self.summary_fraction))
        chosen = get_selector("suffix")(np.zeros(len(costs)), costs, verbatim_budget)
        summarize = sorted(int(i) for b in range(int(chosen[0]) if len(chosen) else len(costs)) for i in problem.blocks[b])
        if not summarize:
            chosen = get_selector("suffix")(np.zeros(len(costs)), costs, problem.budget)
        spare = problem.budget - int(costs[chosen].sum()) if len(chosen) else problem.budget
        return Plan(
            chosen=[int(b) for b in chosen],
            scores=recency,
            breakdown={"recency": recency},
            summarize=summarize,
            summary_tokens=max(spare - problem.marker_tokens, 0) if summarize else 0,
        )


_PLAN_RE = re.compile(r"(?im)^\s*(?:\d+[.)]|[-*]\s+\[[ x]\]|step\s+\d+)|\b(?:plan|next steps?|todo|goal|objective)\b")
_PERSONA_RE = re.compile(r"(?i)\b(?:you are|your name is|you're playing|persona|character|in character|role ?play)\b")
_STYLE_RE = re.compile(r"(?i)\b(?:tone|style|voice|words? or (?:less|fewer)|in (?:the )?style of|rhyme|tense|point of view)\b")


@dataclass(frozen=True)
class TaskMode:
    """A documented preset: how much recency counts, and which units are never dropped.

    ``protect`` names unit types kept whenever they fit: ``latest`` (the newest
    user message: the one the model is about to answer), ``directive`` (user
    instructions, but not in a timestamped, speaker-labelled line of a chat
    transcript such as "[1:56 pm on 8 May, 2023] Jon: Make sure you …": that
    records people talking to each other, not an instruction to the model,
    and only the value model weighs it), ``goal`` (the first user message),
    ``plan`` (numbered or checklist steps, "plan", "next step"), ``state``
    (the latest tool result), ``persona`` ("you are …", character sheets),
    ``style`` (tone and style constraints), ``draft`` (the latest long
    assistant message).
    """

    name: str
    recency: float
    protect: tuple[str, ...]
    description: str


TASK_MODES: dict[str, TaskMode] = {
    "qa": TaskMode("qa", 0.05, ("latest", "directive"), "facts: names, dates, events, preferences; chit-chat goes first"),
    "task": TaskMode("task", 0.3, ("latest", "directive", "goal", "plan", "state"), "goal, plan and current state never dropped"),
    "roleplay": TaskMode("roleplay", 0.4, ("latest", "directive", "persona"), "persona and character facts never dropped"),
    "creative": TaskMode("creative", 0.4, ("latest", "directive", "style", "draft"), "style constraints and the latest draft kept"),
}


def _protected(units: list, kinds: tuple[str, ...]) -> np.ndarray:
    """Which units a mode protects (see :class:`TaskMode`)."""
    n = len(units)
    out = np.zeros(n, dtype=bool)
    if "latest" in kinds:
        last_user = next((i for i in range(n - 1, -1, -1) if units[i].role == "user"), None)
        if last_user is not None:
            out[last_user] = True
    if "directive" in kinds:
        out |= np.array([u.features.directive and not is_transcript_line(u.text) for u in units], dtype=bool)
    if "goal" in kinds:
        first_user = next((i for i, u in enumerate(units) if u.role == "user"), None)
        if first_user is not None:
            out[first_user] = True
    if "plan" in kinds:
        out |= np.array([u.role == "assistant" and bool(_PLAN_RE.search(u.text)) for u in units], dtype=bool)
    if "state" in kinds:
        last_tool = next((i for i in range(n - 1, -1, -1) if units[i].role == "tool"), None)
        if last_tool is not None:
            out[last_tool] = True
    if "persona" in kinds:
        out |= np.array([bool(_PERSONA_RE.search(u.text)) and u.role != "tool" for u in units], dtype=bool)
    if "style" in kinds:
        out |= np.array([u.role == "user" and bool(_STYLE_RE.search(u.text)) for u in units], dtype=bool)
    if "draft" in kinds:
        long_ones = [i for i, u in enumerate(units) if u.role == "assistant" and u.tokens >= 150]
        if long_ones:
            out[long_ones[-1]] = True
    return out


@dataclass(frozen=True)
class RDPolicy:
    """Rate-distortion compaction: expected distortion avoided per token, maximised exactly.

    Each unit's value is the probability that a future question needs it
    (:class:`~rdmem.scoring.LearnedValue`; query-aware when a query is given),
    plus a small recency term set by the task ``mode``; protected units get a
    value above everything else. Blocks (a tool call with its results; a
    correction with what it corrects) are chosen by an exact 0/1 knapsack on
    token costs, then the engine fills what the elision markers left over.
    Near-duplicates do not both take budget: messages whose vectors have
    cosine >= ``duplicates`` form a group; when the knapsack keeps several
    of one group, only the most valuable stays (the newest of equals), and
    the group's other members are worth nothing to the fill, which spends the
    room on other messages. (The knapsack itself still counts each copy, so
    this is a repair, not the optimum of a coverage objective:
    :func:`rdmem.select.coverage` is that, for plain budgets. The ``ladder``
    option chooses rungs without it.)
    """

    name: str = "rd"
    description: str = "rate-distortion: learned value per token (query-aware), exact knapsack, task-mode presets (default)"
    mode: str = "qa"
    value: Scorer = field(default_factory=LearnedValue)
    recency_decay: float = 0.02
    together: tuple[str, ...] = ("correction",)
    #: Where a :class:`~rdmem.MemoryManager` compacts down to, as a fraction of its budget (unless
    #: given ``low=``). Messages that arrived since the last compaction stay unjudged until the
    #: next one, so rd compacts often and by little: every ~5 % of the budget.
    low_watermark: float = 0.95
    #: Offer each message the rungs of the representation ladder (verbatim, compressed, one line)
    #: and choose one per message by a multiple-choice knapsack (:func:`rdmem.select.mckp`).
    ladder: bool = False
    #: Cosine similarity at or above which two messages are near-duplicates (``None``: never). High
    #: on purpose: with MiniLM, restatements and repeated pleasantries reach 0.97, while different
    #: facts on one topic from one speaker can reach 0.96.
    duplicates: float | None = 0.97

    def __post_init__(self) -> None:
        if self.duplicates is not None and (
            isinstance(self.duplicates, bool) or not isinstance(self.duplicates, (int, float))
            or not 0 < self.duplicates <= 1
        ):
            raise ValueError(f"duplicates must be a cosine similarity in (0, 1] or None, got {self.duplicates!r}")
        unknown = set(self.together) - set(LINK_KINDS)
        if unknown:
            raise ValueError(f"together must name link kinds from {LINK_KINDS}, got {sorted(unknown)}")
        if self.mode not in TASK_MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(TASK_MODES)}")
        if not 0 < self.low_watermark <= 1:
            raise ValueError(f"low_watermark must be in (0, 1], got {self.low_watermark!r}")

    @property
    def needs_embeddings(self) -> bool:
        return bool(self.value.needs_embeddings)

    def _dependency_groups(self, problem: Problem) -> list[np.ndarray] | None:
        """Groups of block indices that must travel together, or ``None`` when no link joins blocks."""
        units = problem.units
        if not self.together or ("correction" in self.together and len(self.together) == 1
                                 and not any(u.features.correction for u in units)):
            return None
        embeddings = problem.ctx.embeddings if self.value.needs_embeddings else None
        links = find_links(units, embeddings, kinds=self.together)
        if not links:
            return None
        block_of = problem.block_of.tolist()
        linked = sorted({block_of[i] for d, t, _ in links for i in (d, t) if block_of[i] >= 0})
        index = {b: k for k, b in enumerate(linked)}
        block_links = [
            (index[block_of[d]], index[block_of[t]], kind)
            for d, t, kind in links
            if block_of[d] >= 0 and block_of[t] >= 0
        ]
        merged = merge_blocks([np.array([k]) for k in range(len(linked))], block_links, kinds=self.together)
        if len(merged) == len(linked):
            return None
        in_group = set(linked)
        groups = [np.array([linked[k] for k in g]) for g in merged]
        groups += [np.array([b]) for b in range(len(problem.blocks)) if b not in in_group]
        return sorted(groups, key=lambda g: int(g[0]))

    def _near_duplicates(self, problem: Problem, eligible: np.ndarray) -> list[np.ndarray]:
        """Groups (of two or more) of the ``eligible`` units whose vectors are near-duplicates: the
        connected parts of the graph "cosine >= ``duplicates``" (a threshold is set: see :meth:`_one_copy`)."""
        if not eligible.any():
            return []
        close = problem.ctx.similarity >= self.duplicates
        np.fill_diagonal(close, False)
        close &= eligible[None, :]
        hot = np.flatnonzero(eligible & close.any(axis=1))
        if not len(hot):
            return []
        sub = close[hot][:, hot]
        # Connected parts by label propagation: each unit takes the smallest label among its
        # neighbours until nothing changes (as many rounds as the longest chain of duplicates).
        label = np.arange(len(hot))
        while True:
            spread = np.minimum(label, np.where(sub, label[None, :], len(hot)).min(axis=1))
            if np.array_equal(spread, label):
                break
            label = spread
        order = np.argsort(label, kind="stable")
        return np.split(hot[order], np.flatnonzero(np.diff(label[order])) + 1)

    def plan(self, problem: Problem) -> Plan:
        mode = TASK_MODES[self.mode]
        p, parts = _scores(self.value, problem)
        recency = Recency(decay=self.recency_decay).score(problem.ctx)
        values = p + mode.recency * recency * (float(p.mean()) if len(p) else 0.0)
        protected = _protected(problem.units, mode.protect)
        if protected.any():
            values = np.where(protected, values + float(values.sum()) + 1.0, values)
        parts = dict(parts)
        parts["value"] = p
        parts["recency"] = values - p - np.where(protected, values - p, 0.0)
        block_values, block_costs = problem.block_values(values), problem.block_costs()
        merged = self._dependency_groups(problem)
        reasons = {int(i): "protected (" + self.mode + " mode)" for i in np.flatnonzero(protected)}
        if self.ladder:
            groups = merged if merged is not None else [np.array([b]) for b in range(len(block_values))]
            return _ladder_plan(problem, groups, values, block_values, block_costs, parts, reasons)
        # Blocks with a span that cannot come back right before them, and blocks holding a protected unit.
        forced = problem.gap_before if problem.gap_before is not None else np.zeros(len(block_costs), bool)
        protected_blocks = problem.block_values(protected.astype(np.float64)) > 0
        if merged is not None:
            # Linked blocks (a correction and what it corrects) are one item of the knapsack.
            gv, gc = _group_totals(merged, block_values, block_costs)
            if problem.marker_tokens:
                # Each group sits where its first block does; the marker count is then an estimate
                # for groups that are not contiguous, and the engine's repair makes it exact.
                firsts = [int(g[0]) for g in merged]
                lasts = [int(g[-1]) for g in merged]
                gap_before = np.array(
                    [bool(forced[f]) or (k > 0 and f > lasts[k - 1] + 1) for k, f in enumerate(firsts)]
                )
                always = _group_totals(merged, protected_blocks.astype(np.float64), block_costs)[0] > 0
                picked = _marker_aware(gv, gc, problem, forced=gap_before, always=always)
            else:
                picked = get_selector("knapsack")(gv, gc, problem.budget)
            chosen = np.sort(np.concatenate([merged[k] for k in picked])) if len(picked) else np.zeros(0, int)
            for g in merged:
                if len(g) > 1:
                    for b in g:
                        for i in problem.blocks[b]:
                            reasons.setdefault(int(i), "travels with the message it corrects")
            together = [[int(b) for b in g] for g in merged if len(g) > 1]
            linked = {b for g in together for b in g}
            chosen = self._one_copy(problem, chosen, values, protected, reasons, linked)
            return Plan(
                chosen=[int(b) for b in chosen], scores=values, breakdown=parts, fill=True, reasons=reasons,
                together=together,
            )
        if problem.marker_tokens and len(block_costs) * (problem.budget + 1) <= _GAP_DP_CELLS:
            # Elision markers are rate too: choose knowing each skipped run costs one.
            chosen = _marker_aware(block_values, block_costs, problem, forced=forced, always=protected_blocks)
        else:
            budget = max(problem.budget - problem.marker_tokens, 0)
            chosen = get_selector("knapsack")(block_values, block_costs, budget)
        chosen = self._one_copy(problem, chosen, values, protected, reasons, set())
        return Plan(chosen=[int(b) for b in chosen], scores=values, breakdown=parts, fill=True, reasons=reasons)

    def _one_copy(
        self, problem: Problem, chosen: np.ndarray, values: np.ndarray, protected: np.ndarray,
        reasons: dict[int, str], linked: set[int],
    ) -> list[int]:
        """``chosen`` (block indices) with at most one message of each group of near-duplicates; the
        group's other members get value 0 in ``values`` (in place), so the fill does not add them back."""
        n = len(problem.units)
        if self.duplicates is None or n < 2 or not self.value.needs_embeddings:
            return [int(b) for b in chosen]
        # The block of each unit that is a block of its own (and not linked to another), else -1.
        block_of = problem.block_of.copy()
        if problem._single_units is None:
            several = np.array([len(blk) > 1 for blk in problem.blocks] + [False])  # [-1]: no block
            block_of[several[block_of]] = -1
        if linked:
            block_of[np.isin(block_of, list(linked))] = -1
        groups = self._near_duplicates(problem, ~protected & (block_of >= 0))
        if not groups:
            return [int(b) for b in chosen]
        is_chosen = np.zeros(len(problem.blocks), dtype=bool)
        is_chosen[np.asarray(chosen, dtype=np.int64)] = True
        for members in groups:
            picked = members[is_chosen[block_of[members]]]
            among = picked if len(picked) else members
            best = int(among[np.lexsort((among, values[among]))[-1]])  # the most valuable, then the newest
            dropped = members[members != best]
            is_chosen[block_of[dropped]] = False
            values[dropped] = 0.0
            twin = f"near-duplicate of {problem.units[best].id}"
            reasons.update(dict.fromkeys(dropped.tolist(), twin))
        return np.flatnonzero(is_chosen).tolist()


def _group_totals(groups: list[np.ndarray], values: np.ndarray, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value and token cost of each group of blocks (the groups partition the blocks)."""
    group_of = np.empty(len(values), dtype=np.int64)
    for k, g in enumerate(groups):
        group_of[g] = k
    return (
        np.bincount(group_of, weights=values, minlength=len(groups)),
        np.bincount(group_of, weights=costs, minlength=len(groups)).astype(np.int64),
    )


def _ladder_plan(
    problem: Problem,
    groups: list[np.ndarray],
    values: np.ndarray,
    block_values: np.ndarray,
    block_costs: np.ndarray,
    parts: dict[str, np.ndarray],
    reasons: dict[int, str],
) -> Plan:
    """One rung per block (verbatim, compressed, one line or absent) by a multiple-choice knapsack.

    Items are ``groups`` of blocks that travel together. A rung is worth the
    unit's value times the share of its information content (IDF-weighted
    content words) that the rung keeps. Groups of several messages (a tool
    call with its results, a correction with what it corrects) and messages
    without prose go verbatim or not at all. Elision markers are rate too:
    the knapsack is re-run on a budget reduced by the markers its answer
    needs until that answer fits with them.
    """
    ctx, tok = problem.ctx, problem.tokenizer
    n = len(groups)
    v = np.full((n, 3), np.nan)
    c = np.full((n, 3), -1, dtype=np.int64)
    v[:, 0], c[:, 0] = _group_totals(groups, block_values, block_costs)
    texts: dict[tuple[int, int], str] = {}
    info = ctx.information
    for b, group in enumerate(groups):
        if len(group) != 1 or len(problem.blocks[int(group[0])]) != 1:
            continue
        i = int(problem.blocks[int(group[0])][0])
        u = problem.units[i]
        if not u.text or u.message.get("tool_calls") or u.role not in ("user", "assistant") or info[i] <= 0:
            continue
        for k, text in ((1, _compressed(u.text, tok)), (2, _gist(u.text, tok))):
            if text == u.text:
                continue
            cost = tok.message_tokens({**u.message, "content": text})
            if cost >= c[b, 0] or (k == 2 and c[b, 1] >= 0 and cost >= c[b, 1]):
                continue
            kept = math.fsum(max(ctx.idf_of(w), 0.0) for w in set(content_words(text)))
            v[b, k], c[b, k] = values[i] * min(kept / info[i], 1.0), cost
            texts[(b, k)] = text
    budget = problem.budget
    for _ in range(4):
        choice = mckp(v, c, budget)
        sent = choice >= 0
        runs = int(np.count_nonzero(sent[1:] & ~sent[:-1])) + int(bool(sent.any() and not sent[0]))
        runs += int(bool(sent.any() and not sent[-1]))
        need = int(c[np.flatnonzero(sent), choice[sent]].sum()) + runs * problem.marker_tokens
        if need <= problem.budget or budget == 0:
            break
        budget = max(budget - (need - problem.budget), 0)
    contents: dict[int, str] = {}
    rungs: dict[int, Rung] = {}
    for b in np.flatnonzero(choice > 0):
        i = int(problem.blocks[int(groups[b][0])][0])
        contents[i] = texts[(int(b), int(choice[b]))]
        rungs[i] = Rung.COMPRESSED if choice[b] == 1 else Rung.SUMMARY
        reasons.setdefault(i, "compressed to fit" if choice[b] == 1 else "one line to fit")
    chosen = sorted(int(x) for b in np.flatnonzero(choice >= 0) for x in groups[b])
    together = [[int(x) for x in g] for g in groups if len(g) > 1]
    return Plan(
        chosen=chosen, scores=values, breakdown=parts, contents=contents, rungs=rungs, fill=True,
        reasons=reasons, together=together,
    )


@lru_cache(maxsize=65_536)
def _compressed(text: str, tok: Tokenizer) -> str:
    return compress(text, tokenizer=tok)


@lru_cache(maxsize=65_536)
def _gist(text: str, tok: Tokenizer) -> str:
    return one_line(text, tokenizer=tok, max_tokens=max(20, tok.count(split_prefix(text)[0]) + 12))


def _marker_aware(
    values: np.ndarray, costs: np.ndarray, problem: Problem, *, forced: np.ndarray, always: np.ndarray
) -> np.ndarray:
    """:func:`gap_knapsack` over the most valuable items (the rest become forced gaps).

    Items are blocks, or groups of blocks that travel together, in order;
    ``forced`` flags those with a span that cannot come back right before
    them, ``always`` those that are never left out of the programme
    (protected). Items far down the value order are almost never worth their
    tokens; leaving them out of the dynamic programme keeps it fast on large
    candidate sets (the engine's fill still offers them what is left).
    """
    n = len(values)
    if n > _GAP_DP_MAX_BLOCKS:
        order = np.lexsort((-np.arange(n), -values))
        keep = np.zeros(n, dtype=bool)
        keep[order[:_GAP_DP_MAX_BLOCKS]] = True
        keep |= always
    else:
        keep = np.ones(n, dtype=bool)
    idx = np.flatnonzero(keep)
    # A kept block has a forced gap before it when a left-out block lies between it and the previous
    # kept one, or when any block in between (itself included) had one.
    prev = np.concatenate([[-1], idx[:-1]])
    seen = np.concatenate([[0], np.cumsum(forced)])
    sub_forced = (idx > prev + 1) | (seen[idx + 1] > seen[prev + 1])
    return idx[_quantized_gap_knapsack(values[idx], costs[idx], problem, sub_forced)]


def _quantized_gap_knapsack(values: np.ndarray, costs: np.ndarray, problem: Problem, gap_before: np.ndarray) -> np.ndarray:
    """:func:`gap_knapsack` with costs rounded up to a quantum of tokens.

    The table stays near ``_GAP_DP_WIDTH`` cells wide: any choice feasible in
    quanta is feasible in tokens, and the engine's fill spends what rounding left.
    """
    q = max(1, problem.budget // _GAP_DP_WIDTH)
    return gap_knapsack(values, -(-costs // q), problem.budget // q, -(-problem.marker_tokens // q), gap_before=gap_before)


def _builtin() -> dict[str, Callable[[], Policy]]:
    return {
        "window": lambda: ScoredPolicy(
            "window",
            "the most recent messages that fit, like LangChain trim_messages(strategy='last')",
            Recency(decay=0.0),
            selector="suffix",
        ),
        "summary_buffer": SummaryBuffer,
        "importance": lambda: ScoredPolicy(
            "importance",
            "highest utility first (recency, information, bonuses, query relevance) until the budget is full",
            Weighted(
                terms=(
                    ("recency", 1.0, Recency(decay=0.05)),
                    ("information", 1.0, Information()),
                    ("metadata", 0.5, Metadata()),
                    ("relevance", 1.5, Relevance()),
                ),
                normalize="minmax",
            ),
            selector="by_value",
            fill=True,
        ),
        "seed": lambda: ScoredPolicy(
            "seed",
            "the seed design's scorer (recency, relevance, uniqueness, bonuses) with an exact knapsack",
            seed_scorer(),
            selector="knapsack",
            fill=True,
        ),
        "rd": RDPolicy,
        "rd-ladder": lambda: RDPolicy(
            name="rd-ladder",
            description="rd with the representation ladder: each message verbatim, compressed, one line or absent",
            ladder=True,
        ),
        **{
            f"rd-{mode}": (
                lambda mode=mode: RDPolicy(
                    name=f"rd-{mode}", description=f"rd in {mode} mode: {TASK_MODES[mode].description}", mode=mode
                )
            )
            for mode in ("task", "roleplay", "creative")
        },
    }


POLICIES: dict[str, Callable[[], Policy]] = _builtin()


def register_policy(name: str, factory: Callable[[], Policy]) -> None:
    """Add a policy under ``name`` (the CLI, the service and the evaluation harness find it there)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"policy name must be a non-empty string, got {name!r}")
    POLICIES[name] = factory


_INSTANCES: dict[str, Policy] = {}


def get_policy(policy: str | Policy) -> Policy:
    """A policy by name (or the object itself); unknown names list the valid ones."""
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(sorted(POLICIES))}")
        if policy not in _INSTANCES:
            _INSTANCES[policy] = POLICIES[policy]()
        return _INSTANCES[policy]
    if isinstance(policy, Policy):
        return policy
    raise TypeError(f"policy must be a name or a policy object, got {type(policy).__name__}")
