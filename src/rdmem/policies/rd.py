"""rd: expected distortion avoided per token, maximised exactly (the default policy)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..contract import Plan, Policy, Problem, Valuation, scores_of
from ..deps import LINK_KINDS, find_links, merge_blocks
from ..errors import InvalidInput
from ..reconstruct import Markers
from ..scoring import Informativeness, LearnedValue, Recency, Scorer
from ..select import get_selector, group_totals, marker_aware, near_duplicate_groups
from .modes import TASK_MODES, protected

__all__ = ["RDPolicy", "Valuation", "STREAM_ROOM_VALUE", "for_working_set"]

#: Above this many (blocks x budget) cells the marker-aware DP falls back to a marker reserve.
_GAP_DP_CELLS = 40_000_000
#: ``room_value`` when a manager trims its working set (BENCHMARKS "Issue 25, streaming" measures 0 to 1.5).
STREAM_ROOM_VALUE = 1.0


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1.0 - 1e-12)
    return np.log(q) - np.log1p(-q)


@dataclass(frozen=True)
class RDPolicy:
    """Rate-distortion compaction: expected distortion avoided per token, maximised exactly.

    Each unit's value is the probability that a future question needs it
    (:class:`~rdmem.scoring.LearnedValue`; query-aware when a query is given),
    plus a small recency term set by the task ``mode`` and, as far as the
    query names nothing, a local-coherence term for the newest messages
    (``coherence``); protected units get a
    value above everything else. Blocks (a tool call with its results; a
    correction with what it corrects) are chosen by an exact 0/1 knapsack on
    token costs that also prices the elision markers, then the engine fills
    what they left over. Near-duplicates do not both take budget: messages
    whose vectors have cosine >= ``duplicates`` form a group; when the
    knapsack keeps several of one group, only the most valuable stays (the
    newest of equals), and the group's other members are worth nothing to the
    fill, which spends the room on other messages. (The knapsack itself still
    counts each copy, so this is a repair, not the optimum of a coverage
    objective: :func:`rdmem.select.coverage` is that, for plain budgets.)
    When messages keep arriving (a manager trimming its working set,
    :func:`for_working_set`), ``room_value`` prices the tokens it keeps.
    """

    name: str = "rd"
    description: str = "rate-distortion: learned value per token (query-aware), exact knapsack, task-mode presets (default)"
    mode: str = "qa"
    value: Scorer = field(default_factory=LearnedValue)
    recency_decay: float = 0.02
    together: tuple[str, ...] = ("correction",)
    #: Cosine similarity at or above which two messages are near-duplicates (``None``: never). High
    #: on purpose: with MiniLM, restatements and repeated pleasantries reach 0.97, while different
    #: facts on one topic from one speaker can reach 0.96.
    duplicates: float | None = 0.97
    #: How much a query's relevance counts against the prior: an :class:`~rdmem.scoring.Informativeness`
    #: (measured per query), or a fixed weight in [0, 1] (1: relevance alone, as before queries were weighed).
    query_weight: Informativeness | float = field(default_factory=Informativeness)
    #: What a token left free is worth, as a multiple of the marginal value per token (that of the first
    #: block a fill by value per token would leave out). 0 suits a one-off context, whose free room goes
    #: unused; when messages keep arriving (a manager trimming its working set) room freed now holds the
    #: next messages, so a long block of middling value should go before a short one worth nearly as much.
    #: ``None``: 0 for a context, :data:`STREAM_ROOM_VALUE` when a :class:`~rdmem.MemoryManager` without
    #: markers trims its working set (BENCHMARKS "Issue 25, item 2": the knapsack alone, with room worth
    #: nothing, filled the working set with long messages); see :func:`for_working_set`.
    room_value: float | None = None
    #: Local coherence: what the next turn needs of the newest messages, priced in the objective. The
    #: message of age ``a`` (0: the newest) is worth ``coherence * exp(-a / coherence_reach)`` times the best
    #: unit's value more, so the last exchange competes for tokens with the facts, scaled by ``1 - w`` where
    #: ``w`` is the query's weight (:attr:`query_weight`): in full without a query or with one that names
    #: nothing, not at all with one that says what it needs (0: off).
    #: 2 and 1 message, with one merged marker: BENCHMARKS "Issue 25, item 2: one marker for all" (the
    #: coherence gap to ``window`` 0.142 / 0.068 / 0.032 -> 0.047 / 0.028 / 0.031 at 500 / 1,000 / 2,000
    #: tokens, the answer's loss still below ``window``'s; recall: query regime within 0.001, streaming
    #: within 0.005). 0.5 and 2 were set with a marker per omitted run (BENCHMARKS "Issue 25, item 5").
    coherence: float = 2.0
    coherence_reach: float = 1.0
    #: The low watermark a :class:`~rdmem.MemoryManager` trims the working set down to unless told (a policy's
    #: optional ``low_watermark``, :func:`rdmem.sessions.default_low`): rd compacts often and by little.
    low_watermark: ClassVar[float] = 0.98
    #: The same for a manager without a marker per omitted run (``markers="merged"`` or ``False``): with one,
    #: the markers' tokens leave the working set's own a few percent under the mark, room for the next
    #: messages; without, 0.98 compacted about every second message (three times as often at 4,000 tokens)
    #: for the same recall as 0.96 (BENCHMARKS "Issue 25, item 2: one marker for all").
    merged_low_watermark: ClassVar[float] = 0.96

    def __post_init__(self) -> None:
        if not isinstance(self.query_weight, Informativeness) and (
            isinstance(self.query_weight, bool) or not isinstance(self.query_weight, (int, float))
            or not 0 <= self.query_weight <= 1
        ):
            raise InvalidInput(f"query_weight must be an Informativeness or a number in [0, 1], got {self.query_weight!r}")
        if self.duplicates is not None and (
            isinstance(self.duplicates, bool) or not isinstance(self.duplicates, (int, float))
            or not 0 < self.duplicates <= 1
        ):
            raise InvalidInput(f"duplicates must be a cosine similarity in (0, 1] or None, got {self.duplicates!r}")
        unknown = set(self.together) - set(LINK_KINDS)
        if unknown:
            raise InvalidInput(f"together must name link kinds from {LINK_KINDS}, got {sorted(unknown)}")
        if self.room_value is not None and (
            isinstance(self.room_value, bool) or not isinstance(self.room_value, (int, float))
            or not 0 <= self.room_value <= 10
        ):
            raise InvalidInput(f"room_value must be a number in [0, 10] or None, got {self.room_value!r}")
        for name, low, high in (("coherence", 0.0, 10.0), ("coherence_reach", 1e-3, 1000.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise InvalidInput(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
        if self.mode not in TASK_MODES:
            raise InvalidInput(f"unknown mode {self.mode!r}; choose one of {', '.join(TASK_MODES)}")

    @property
    def needs_embeddings(self) -> bool:
        return bool(self.value.needs_embeddings)

    # -- the learned value model (online feedback tilts it; see rdmem.learn.online) --------
    def value_model(self) -> LearnedValue | None:
        """The learned value model this policy scores with (``None`` for another scorer)."""
        return self.value if isinstance(self.value, LearnedValue) else None

    def with_value_model(self, value: LearnedValue) -> RDPolicy:
        """The same policy scoring with ``value``."""
        return dataclasses.replace(self, value=value)

    # -- planning ------------------------------------------------------------------------
    def valuation(self, problem: Problem) -> Valuation:
        """Each unit's value (learned probability, recency, protection), and the blocks that travel together."""
        mode = TASK_MODES[self.mode]
        p, parts = scores_of(self.value, problem)
        w = self._query_weight(problem.ctx) if problem.ctx.query else 0.0
        if w < 1.0 and problem.ctx.query:
            p, parts = self._blend(problem, p, parts, w)
        recency = Recency(decay=self.recency_decay).score(problem.ctx)
        recent = mode.recency * recency * (float(p.mean()) if len(p) else 0.0)
        coherent = None
        if self.coherence and w < 1.0 and len(p):  # what a query names comes first, as far as it names anything
            near = Recency(decay=1.0 / self.coherence_reach).score(problem.ctx)
            coherent = (1.0 - w) * self.coherence * near * float(p.max())
        values = p + recent + (coherent if coherent is not None else 0.0)
        keep = protected(problem.units, mode.protect)
        if keep.any():
            values = np.where(keep, values + float(values.sum()) + 1.0, values)
        parts = dict(parts)
        parts["value"] = p
        parts["recency"] = np.where(keep, 0.0, recent)
        if coherent is not None:
            parts["coherence"] = np.where(keep, 0.0, coherent)
        reasons = {int(i): "protected (" + self.mode + " mode)" for i in np.flatnonzero(keep)}
        return Valuation(values, parts, keep, reasons, self._dependency_groups(problem))

    def _query_weight(self, ctx: Any) -> float:
        """How much the query's relevance counts against the prior, in [0, 1] (:attr:`query_weight`)."""
        qw = self.query_weight
        return qw.weight(ctx) if isinstance(qw, Informativeness) else float(qw)

    def _blend(
        self, problem: Problem, p: np.ndarray, parts: dict[str, np.ndarray], w: float
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The query-aware values moved back towards the prior ones as far as the query is uninformative.

        The query is evidence about what is needed: with probabilities (the
        learned value model) its log-odds shift over the prior is scaled by
        the weight, so weight 1 is the query model and 0 the prior; other
        scorers' values are mixed linearly.
        """
        prior, _ = scores_of(self.value, dataclasses.replace(problem, ctx=problem.ctx.without_query()))
        if isinstance(self.value, LearnedValue):
            lq, lp = _logit(p), _logit(prior)
            blended = 1.0 / (1.0 + np.exp(-(lp + w * (lq - lp))))
        else:
            blended = w * p + (1.0 - w) * prior
        return blended, {**parts, "query_weight": np.full(len(p), w)}

    def plan(self, problem: Problem) -> Plan:
        v = self.valuation(problem)
        values, reasons = v.values, v.reasons
        block_values, block_costs = problem.block_values(values), problem.block_costs()
        # Blocks with a span that cannot come back right before them, and blocks holding a protected unit.
        forced = problem.gap_before if problem.gap_before is not None else np.zeros(len(block_costs), bool)
        protected_blocks = problem.block_values(v.protected.astype(np.float64)) > 0
        price = self._room_price(block_values, block_costs + problem.marker_tokens * forced, protected_blocks,
                                 problem.budget)
        if price:  # each token kept (a marker's too) gives up what the room would hold
            block_values = np.where(protected_blocks, block_values, block_values - price * block_costs)
        gap_value = price * problem.marker_tokens
        if v.merged is None:
            if problem.marker_tokens and len(block_costs) * (problem.budget + 1) <= _GAP_DP_CELLS:
                # Elision markers are rate too: choose knowing each skipped run costs one.
                chosen = marker_aware(block_values, block_costs, problem.budget, problem.marker_tokens,
                                      forced=forced, always=protected_blocks, gap_value=gap_value)
            else:
                budget = max(problem.budget - problem.marker_tokens, 0)
                chosen = get_selector("knapsack")(block_values, block_costs, budget)
            kept = self._one_copy(problem, chosen, values, v.protected, reasons, set())
            return Plan(chosen=kept, scores=values, breakdown=v.parts, fill=True, reasons=reasons)
        # Linked blocks (a correction and what it corrects) are one item of the knapsack.
        merged = v.merged
        gv, gc = group_totals(merged, block_values, block_costs)
        if problem.marker_tokens:
            # Each group sits where its first block does; the marker count is then an estimate
            # for groups that are not contiguous, and the engine's repair makes it exact.
            firsts = [int(g[0]) for g in merged]
            lasts = [int(g[-1]) for g in merged]
            gap_before = np.array([bool(forced[f]) or (k > 0 and f > lasts[k - 1] + 1) for k, f in enumerate(firsts)])
            always = group_totals(merged, protected_blocks.astype(np.float64), block_costs)[0] > 0
            picked = marker_aware(gv, gc, problem.budget, problem.marker_tokens, forced=gap_before, always=always,
                                  gap_value=gap_value)
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
        kept = self._one_copy(problem, chosen, values, v.protected, reasons, linked)
        return Plan(chosen=kept, scores=values, breakdown=v.parts, fill=True, reasons=reasons,
                    together=together)

    def _room_price(self, block_values: np.ndarray, block_costs: np.ndarray, protected_blocks: np.ndarray,
                    budget: int) -> float:
        """Value per token of free room: ``room_value`` times the value per token of the first block that a
        fill by value per token (protected blocks first) leaves out; 0 when everything fits."""
        if not self.room_value or not len(block_costs):
            return 0.0
        density = block_values / np.maximum(block_costs, 1)
        order = np.lexsort((-np.arange(len(density)), -density, ~protected_blocks))
        past = int(np.searchsorted(np.cumsum(block_costs[order]), budget, side="right"))
        if past >= len(order) or protected_blocks[order[past]]:
            return 0.0
        return float(self.room_value) * max(float(density[order[past]]), 0.0)

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

    def _one_copy(
        self, problem: Problem, chosen: np.ndarray, values: np.ndarray, keep: np.ndarray,
        reasons: dict[int, str], linked: set[int],
    ) -> list[int]:
        """``chosen`` (block indices) with at most one message of each group of near-duplicates; the
        group's other members get value 0 in ``values`` (in place), so the fill does not add them back."""
        n = len(problem.units)
        if self.duplicates is None or n < 2 or not self.value.needs_embeddings:
            return [int(b) for b in chosen]
        # The block of each unit that is a block of its own (and not linked to another), else -1.
        block_of = problem.block_of.copy()
        if not problem.single_units:
            several = np.array([len(blk) > 1 for blk in problem.blocks] + [False])  # [-1]: no block
            block_of[several[block_of]] = -1
        if linked:
            block_of[np.isin(block_of, list(linked))] = -1
        eligible = ~keep & (block_of >= 0)
        groups = near_duplicate_groups(problem.ctx.similarity, eligible, self.duplicates) if eligible.any() else []
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


def for_working_set(policy: Policy, *, markers: Markers = True) -> Policy:
    """The policy a :class:`~rdmem.MemoryManager` trims its working set with: ``policy`` itself, except that
    rd with ``room_value=None`` values free room at :data:`STREAM_ROOM_VALUE` (messages keep arriving) when
    the manager sends no marker per omitted run (``markers`` ``False`` or ``"merged"``). With one per run
    each kept message already carries a marker's tokens, and valuing the room measured within the noise
    (BENCHMARKS "Issue 25, item 2"): it stays 0 there."""
    if isinstance(policy, RDPolicy) and policy.room_value is None and markers is not True:
        return dataclasses.replace(policy, room_value=STREAM_ROOM_VALUE)
    return policy
