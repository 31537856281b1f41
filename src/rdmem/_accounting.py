"""Exact token accounting of a render: blocks, elision markers and the summary, to the token.

:class:`RenderCost` knows what sending a set of blocks costs once rendered
(:func:`rdmem.reconstruct.render`): the blocks, one marker per run of
left-out messages (its size depends on the run's length), and the summary
message. The engine's repair, fill and fallback are built on it; each is a
method, and none walks the units in Python per try (that made query-time
compaction quadratic in the history).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import numpy as np

from ._layout import Layout
from .reconstruct import MERGED, Markers, elision_marker, summary_message
from .tokens import Tokenizer

__all__ = ["RenderCost", "gap_sizes", "fill"]

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


def gap_sizes(kept: np.ndarray, hidden: np.ndarray, open_: np.ndarray) -> list[int]:
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


def fill(
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


class RenderCost:
    """Tokens of the non-pinned part of a render of ``layout``'s blocks (mirroring ``render`` exactly).

    ``costs`` are the blocks' tokens as they will be sent (a compressed rung
    costs what its text does); after a summary is made, :meth:`summarized`
    says which units it stands for (they are not counted in marker runs).
    """

    def __init__(self, layout: Layout, tokenizer: Tokenizer, costs: np.ndarray, *, markers: Markers = True) -> None:
        self.layout = layout
        self.tok = tokenizer
        self.merged = markers == MERGED
        self.markers = markers is True  # one marker per run (``merged``: one for all, :meth:`merged_marker`)
        self.costs = costs
        self._memo = _marker_table(tokenizer)
        self._summary_memo: dict[tuple[str, int], int] = {}
        self.summarized_mask = np.zeros(len(layout.units), dtype=bool)
        self.n_summarized = 0

    def marker(self, gap: int) -> int:
        """Tokens of the elision marker for ``gap`` left-out messages (0 for none, or without markers)."""
        if not gap or not self.markers:
            return 0
        c = self._memo.get(gap)
        if c is None:
            c = self._memo[gap] = self.tok.message_tokens(elision_marker(gap))
        return c

    def merged_marker(self, gaps: Sequence[int]) -> int:
        """Tokens of the one marker a ``markers="merged"`` render sends for these gaps (0 if none, or in another
        mode)."""
        if not self.merged:
            return 0
        gaps = [g for g in gaps if g]
        if not gaps:
            return 0
        return self._merged_tokens(sum(gaps), len(gaps) > 1)

    def _merged_tokens(self, n: int, spread: bool) -> int:
        key = -n if spread else n  # the marker table holds plain markers at positive keys
        c = self._memo.get(key)
        if c is None:
            c = self._memo[key] = self.tok.message_tokens(elision_marker(n, merged=spread))
        return c

    def merged_reserve(self, *, spread: bool = True) -> int:
        """Tokens to set aside for a merged marker, whatever is left out (0 in another mode): its largest form,
        or (``spread=False``) the form for one gap, which a policy's plan is given room for (the repair makes
        a plan with more gaps fit, the fill uses what it did not need)."""
        if not self.merged:
            return 0
        return self._merged_tokens(int(self.layout.hidden.sum() + self.layout.open_.sum()), spread)

    def summarized(self, positions: Iterable[int]) -> None:
        """The units (positions in the layout) a summary stands for."""
        pos = list(positions)
        self.summarized_mask[:] = False
        self.summarized_mask[pos] = True
        self.n_summarized = len(pos)

    def open_mask(self, summary: str | None) -> np.ndarray:
        """The units a marker counts when left out (pinned and summarized ones do not count)."""
        return self.layout.open_ & ~self.summarized_mask if summary else self.layout.open_

    def kept_mask(self, chosen: Iterable[int]) -> np.ndarray:
        kept = np.zeros(len(self.layout.units), dtype=bool)
        chosen = list(chosen)
        if chosen:
            kept[np.concatenate([self.layout.blocks[b] for b in chosen])] = True
        return kept

    def mask_cost(self, kept: np.ndarray, used: int, summary: str | None) -> int:
        """The render's tokens when the units flagged in ``kept`` are sent and their blocks cost ``used``."""
        if self.markers:
            used += sum(map(self.marker, gap_sizes(kept, self.layout.hidden, self.open_mask(summary))))
        elif self.merged:
            used += self.merged_marker(gap_sizes(kept, self.layout.hidden, self.open_mask(summary)))
        if summary:
            key = (summary, self.n_summarized)
            if key not in self._summary_memo:
                self._summary_memo[key] = self.tok.message_tokens(summary_message(summary, self.n_summarized))
            used += self._summary_memo[key]
        return used

    def total(self, chosen: Iterable[int], summary: str | None = None) -> int:
        chosen = list(chosen)
        return self.mask_cost(self.kept_mask(chosen), int(self.costs[chosen].sum()) if chosen else 0, summary)

    def fits_whole(self, avail: int) -> bool:
        """Does every candidate fit, verbatim, with its markers?"""
        tokens = sum(u.tokens for u in self.layout.cand)
        if tokens > avail:  # markers only add: no need to count them
            return False
        everything = np.zeros(len(self.layout.units), dtype=bool)
        everything[self.layout.cand_arr] = True
        gaps = gap_sizes(everything, self.layout.hidden, self.layout.open_)
        return tokens + sum(map(self.marker, gaps)) + self.merged_marker(gaps) <= avail

    def repair(self, chosen: set[int], ratio: np.ndarray, partners: Mapping[int, tuple[int, ...]],
               summary: str | None, avail: int, keep: Collection[int] = ()) -> None:
        """Drop blocks from ``chosen`` (in place), least value per token first, until the render fits
        ``avail``: markers and summaries can push a plan over. The blocks in ``keep`` are never dropped."""
        if not chosen or self.total(chosen, summary) <= avail:
            return
        # ratio does not change while dropping, so "drop the worst, recount" walks one sorted order.
        kept, used = self.kept_mask(chosen), int(self.costs[list(chosen)].sum())
        for worst in sorted(chosen, key=lambda b: (ratio[b], -b)):
            if worst not in chosen or worst in keep:
                continue
            for b in partners.get(worst, (worst,)):
                if b in chosen and b not in keep:
                    chosen.discard(b)
                    kept[self.layout.blocks[b]] = False
                    used -= int(self.costs[b])
            if not chosen or self.mask_cost(kept, used, summary) <= avail:
                break

    def fill(self, chosen: set[int], values: np.ndarray, ratio: np.ndarray, partners: Mapping[int, tuple[int, ...]],
             summary: str | None, avail: int) -> None:
        """Add what still fits to ``chosen`` (in place), best value per token first (see :func:`fill`).

        A merged marker changes with what is added (its count shrinks, and a second gap makes it its longer
        form): the fill keeps room for its largest form and adds blocks at their own cost."""
        room = avail - self.total(chosen, summary)
        if self.merged:
            room -= self.merged_reserve() - self.merged_marker(
                gap_sizes(self.kept_mask(chosen), self.layout.hidden, self.open_mask(summary)))
        fill(chosen, values, self.costs, ratio, partners, self.layout.blocks, self.layout.hidden,
             self.open_mask(summary), room, self.marker)
