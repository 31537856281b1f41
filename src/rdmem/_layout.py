"""The first steps of a compaction: which units are pinned, which can be sent, in which blocks.

:class:`Layout` partitions the units: pinned system messages, blocks of
units that travel together (an assistant tool call with all its results),
units that cannot be sent at all (a result whose call is gone), and the
spans already archived before each unit. :func:`fit_pinned` then sets the
pinned messages aside, cut only if they alone overflow the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ._images import image_parts, parts_tokens
from .history import sendable_blocks
from .reconstruct import hidden_before
from .tokens import Tokenizer
from .units import MemoryUnit

__all__ = ["Layout", "Head", "fit_pinned", "truncate_block", "truncation_suffix"]


def truncation_suffix(shown: int, total: int, images: int = 0) -> str:
    """The visible note at the end of a cut message (and how many of its images were left out)."""
    left_out = f"; {images} image{'s' if images > 1 else ''} left out" if images else ""
    return f"\n[rdmem: truncated, {shown} of {total} tokens shown{left_out}]"


def truncate_block(units: Sequence[MemoryUnit], budget: int, tok: Tokenizer) -> dict[int, str | None] | None:
    """Cut the contents of a block's messages so the whole block fits ``budget``; ``None`` if impossible.

    Only contents are cut (never tool-call arguments, which would stop being
    valid JSON); the largest are cut first, evenly. A list content that is cut
    becomes its text, cut: its images are left out (the note counts them among
    the tokens not shown). Returns the new content per position in ``units``
    (``None``: unchanged).
    """
    fixed = 0
    whole: dict[int, int] = {}  # the tokens of each cuttable content, images included
    for pos, u in enumerate(units):
        content = u.message.get("content")
        if (isinstance(content, str) and u.text) or isinstance(content, list):
            fixed += tok.message_tokens({**u.message, "content": ""})
            whole[pos] = tok.count(u.text) + parts_tokens(content)
        else:
            fixed += u.tokens
    room = budget - fixed
    if not whole or room <= 0:
        return None
    out: dict[int, str | None] = {pos: None for pos in range(len(units))}
    share = room // len(whole)
    for pos, full in whole.items():
        if full <= share:
            continue
        images = len(image_parts(units[pos].message.get("content")))
        suffix_cost = tok.count(truncation_suffix(full, full, images)) + 1
        keep = share - suffix_cost
        if keep <= 0:
            return None
        cut = tok.truncate(units[pos].text, keep)
        out[pos] = cut + truncation_suffix(tok.count(cut), full, images)
    total = fixed + sum(full if (text := out[p]) is None else tok.count(text) for p, full in whole.items())
    return out if total <= budget else None


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


class Layout:
    """How a compaction sees its units (positions index ``units``).

    ``open_`` flags the units a marker counts when they are left out (not
    pinned); ``hidden[p]`` counts the messages archived before unit ``p``;
    ``blocks`` are positions of units that travel together; ``bad`` says why
    a unit cannot be sent; ``cand_pos`` are the positions of the candidates
    (units of some block), ``cand`` the units, and ``local_blocks`` the blocks
    as positions in ``cand`` (what a policy sees).
    """

    def __init__(self, units: Sequence[MemoryUnit]) -> None:
        self.units = units
        self.open_ = np.fromiter((not u.pinned for u in units), dtype=bool, count=len(units))
        self.pinned = np.flatnonzero(~self.open_).tolist()
        self.hidden_list = hidden_before(units)
        self.hidden = np.asarray(self.hidden_list, dtype=np.int64)
        self.blocks, self.bad = sendable_blocks(units, self.open_)
        self.cand_arr = np.sort(np.concatenate(self.blocks)) if self.blocks else np.zeros(0, dtype=np.int64)
        self.cand_pos: list[int] = self.cand_arr.tolist()
        self.cand = [units[p] for p in self.cand_pos]
        self.local = {p: i for i, p in enumerate(self.cand_pos)}
        if all(len(b) == 1 for b in self.blocks):
            self.local_blocks = list(np.arange(len(self.blocks), dtype=np.int64).reshape(-1, 1))
        else:
            self.local_blocks = [np.searchsorted(self.cand_arr, b) for b in self.blocks]

    def forced_gaps(self) -> np.ndarray:
        return _forced_gaps(self.hidden, self.open_, self.blocks)

    def turn_in_progress(self, newest: int | None) -> list[int]:
        """The blocks after the newest user message, newest first, when the history ends with tool results:
        an agent in the middle of a turn (its calls and their results), about to read the last ones.
        A history that ends with the assistant's answer has no turn in progress."""
        if newest is None or not self.blocks or self.units[int(self.blocks[-1][-1])].role != "tool":
            return []
        return list(range(len(self.blocks) - 1, newest, -1))

    def newest_user_block(self) -> int | None:
        """The block of the newest user message among the candidates (the one the model answers next)."""
        for b in range(len(self.blocks) - 1, -1, -1):
            if any(self.units[int(p)].role == "user" for p in self.blocks[b]):
                return b
        return None


@dataclass
class Head:
    """The pinned messages as they will be sent, and what they leave of the budget."""

    contents: dict[int, str | None] = field(default_factory=dict)
    truncated: set[int] = field(default_factory=set)
    avail: int = 0
    notes: list[str] = field(default_factory=list)


def fit_pinned(layout: Layout, budget: int, tok: Tokenizer) -> Head:
    """Pinned system messages come first and are never dropped; cut them only if they alone overflow."""
    units, pinned = layout.units, layout.pinned
    head = Head()
    pinned_cost = sum(units[p].tokens for p in pinned)
    if pinned and pinned_cost > budget:
        cut = truncate_block([units[p] for p in pinned], budget, tok)
        if cut is None:
            head.notes.append(f"system messages ({pinned_cost} tokens) cannot fit a budget of {budget}; none sent")
        else:
            for i, p in enumerate(pinned):
                head.contents[p] = cut[i]
                if cut[i] is not None:
                    head.truncated.add(p)
            pinned_cost = sum(
                units[p].tokens if head.contents[p] is None
                else tok.message_tokens({**units[p].message, "content": head.contents[p]})
                for p in pinned
            )
    else:
        head.contents.update({p: None for p in pinned})
    head.avail = max(budget - pinned_cost, 0) if pinned_cost <= budget else 0
    return head
