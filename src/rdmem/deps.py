"""Dependencies between units: corrections and the turn they correct, answers and their question.

:func:`find_links` finds the links; :func:`merge_blocks` turns the links of
chosen kinds into selection blocks (sets of positions kept or dropped
together), on top of the groups a chat history already imposes (an assistant
tool call and its results).

Link kinds:

- ``"correction"``: a unit whose features say it corrects something
  ("actually…", "not anymore", "I changed my mind", "but not …") depends on
  the earlier unit it most likely corrects: the most similar of the previous
  ``window`` units (cosine of embeddings when given, else shared content
  words), the same speaker preferred. Sent alone, "But not green apples."
  means little.
- ``"answer"``: a question (user or assistant) and the other party's next
  message; the reply depends on the question ("Yes, twice." needs "Have you
  been to Rome?").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np

from .errors import InvalidInput, InvalidType
from .history import split_prefix
from .features import content_words
from .units import MemoryUnit

__all__ = ["find_links", "merge_blocks", "LINK_KINDS"]

LINK_KINDS = ("correction", "answer")
_PARTIES = ("user", "assistant")


def _speaker(unit: MemoryUnit) -> tuple[str, str]:
    name = unit.message.get("name") if isinstance(unit.message, dict) else None
    return unit.role, str(name) if name else ""


def _check_embeddings(embeddings: object, n: int) -> np.ndarray | None:
    """``embeddings`` as an array, checked (one finite row per unit); rows are normalised where used."""
    if embeddings is None:
        return None
    e = np.asarray(embeddings)
    if e.dtype.kind not in "fiu":
        e = np.asarray(e, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != n:
        raise ValueError(f"embeddings must be an (n, d) array with one row per unit (n = {n}), got shape {e.shape}")
    if not np.isfinite(e).all():
        raise ValueError("embeddings must be finite")
    return e


def _unit_rows(e: np.ndarray, rows: list[int]) -> np.ndarray:
    """Rows of ``e`` scaled to length 1 (zero rows stay zero), in float64."""
    x = np.asarray(e[rows], dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def find_links(
    units: Sequence[MemoryUnit],
    embeddings: np.ndarray | None = None,
    *,
    window: int = 10,
    same_speaker_bonus: float = 0.1,
    kinds: Collection[str] = LINK_KINDS,
) -> list[tuple[int, int, str]]:
    """Links ``(dependent position, target position, kind)`` among ``units``, sorted.

    Parameters
    ----------
    units:
        Memory units in chronological order (positions are indices into this sequence).
    embeddings:
        Optional ``(n, d)`` array, one row per unit; cosine similarity then
        picks the corrected unit. Without it, shared content words do.
    window:
        How many previous units a correction may reach back to.
    same_speaker_bonus:
        Added to the similarity of candidates from the same speaker (role and
        name): people mostly correct themselves. With word overlap as the
        similarity it is scaled to words (a bonus of 0.1 is worth half a word).
    kinds:
        The link kinds to look for (default: all of :data:`LINK_KINDS`).

    When no candidate shares anything with the correction ("Actually, make it
    Tuesday." after "Let's meet Monday."), the nearest earlier unit of the
    same speaker is linked, or else the unit just before.

    >>> from rdmem.units import encode_units
    >>> from rdmem.tokens import get_tokenizer
    >>> units = encode_units([{"role": "user", "content": "I like apples."},
    ...                       {"role": "assistant", "content": "Noted."},
    ...                       {"role": "user", "content": "But not green apples."}], get_tokenizer(len))
    >>> find_links(units)
    [(2, 0, 'correction')]
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidInput(f"window must be an int >= 1 (units), got {window!r}")
    if isinstance(same_speaker_bonus, bool) or not isinstance(same_speaker_bonus, (int, float)) or same_speaker_bonus < 0:
        raise InvalidInput(f"same_speaker_bonus must be a number >= 0, got {same_speaker_bonus!r}")
    if isinstance(kinds, str) or not isinstance(kinds, Collection) or any(k not in LINK_KINDS for k in kinds):
        raise InvalidInput(f"kinds must be link kinds from {LINK_KINDS}, got {kinds!r}")
    n = len(units)
    emb = _check_embeddings(embeddings, n)
    words: list[frozenset[str]] | None = None
    links: list[tuple[int, int, str]] = []
    for i, u in enumerate(units if "correction" in kinds else ()):
        if not u.features.correction or i == 0:
            continue
        cands = [j for j in range(max(0, i - window), i) if units[j].text.strip() and units[j].role != "tool"]
        if not cands:
            continue
        me = _speaker(u)
        same = np.array([_speaker(units[j]) == me for j in cands], dtype=bool)
        if emb is not None:
            rows = _unit_rows(emb, [*cands, i])
            sim = rows[:-1] @ rows[-1]
            score = sim + same_speaker_bonus * same
            informative = True
        else:
            if words is None:
                # Without the "[date] Speaker:" prefix: words every turn shares say nothing.
                words = [frozenset(content_words(split_prefix(x.text)[1])) for x in units]
            sim = np.array([len(words[i] & words[j]) for j in cands], dtype=np.float64)
            score = sim + 5.0 * same_speaker_bonus * same
            informative = bool(sim.max() > 0)
        if informative:
            # Highest score; ties: the nearer unit.
            k = len(cands) - 1 - int(np.argmax(score[::-1]))
            target = cands[k]
        elif same.any():
            target = cands[int(np.flatnonzero(same)[-1])]
        else:
            target = cands[-1]
        links.append((i, target, "correction"))
    for i, u in enumerate(units if "answer" in kinds else ()):
        if not u.features.question or u.role not in _PARTIES:
            continue
        reply = _next_reply(units, i)
        if reply is not None and units[reply].role != u.role:
            links.append((reply, i, "answer"))
    return sorted(links)


def _next_reply(units: Sequence[MemoryUnit], i: int, reach: int = 4) -> int | None:
    """The next message with text from the user or the assistant, skipping tool traffic; None if none near."""
    for j in range(i + 1, min(len(units), i + 1 + reach)):
        u = units[j]
        if u.role == "tool" or (u.role == "assistant" and u.features.tool_call and not u.text.strip()):
            continue
        if u.role in _PARTIES and u.text.strip():
            return j
        return None
    return None


def merge_blocks(
    blocks: Sequence[np.ndarray],
    links: Iterable[tuple[int, int, str]],
    kinds: Sequence[str] = ("correction",),
) -> list[np.ndarray]:
    """Union the blocks joined by a link of one of ``kinds`` (union-find).

    ``blocks`` are disjoint arrays of positions (e.g. tool-call groups, or
    singletons); links whose ends are not both in a block are ignored. The
    result is sorted by first position and each block is sorted.

    >>> merge_blocks([np.array([0]), np.array([1, 2]), np.array([3])], [(3, 0, "correction"), (2, 1, "answer")])
    [array([0, 3]), array([1, 2])]
    >>> merge_blocks([np.array([0]), np.array([1])], [(1, 0, "answer")], kinds=("answer",))
    [array([0, 1])]
    """
    if isinstance(kinds, str):
        raise InvalidType(f"kinds must be a sequence of link kinds such as ('correction',), got the string {kinds!r}")
    unknown = [k for k in kinds if k not in LINK_KINDS]
    if unknown:
        raise InvalidInput(f"unknown link kind {unknown[0]!r}; choose from {', '.join(LINK_KINDS)}")
    arrays = [np.asarray(b, dtype=np.int64).ravel() for b in blocks]
    owner: dict[int, int] = {}
    for b, arr in enumerate(arrays):
        for pos in arr.tolist():
            if pos in owner:
                raise ValueError(f"blocks must be disjoint; position {pos} is in blocks {owner[pos]} and {b}")
            owner[pos] = b
    parent = list(range(len(arrays)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    wanted = set(kinds)
    for link in links:
        dep, target, kind = link
        if kind not in wanted:
            continue
        first, second = owner.get(int(dep)), owner.get(int(target))
        if first is None or second is None:
            continue
        ra, rb = find(first), find(second)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    merged: dict[int, list[np.ndarray]] = {}
    for b, arr in enumerate(arrays):
        if arr.size:
            merged.setdefault(find(b), []).append(arr)
    out = [np.unique(np.concatenate(parts)) for parts in merged.values()]
    out.sort(key=lambda a: int(a[0]))
    return out
