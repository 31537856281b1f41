"""Rendering a selection back into chat messages (what makes a history valid: :mod:`rdmem.history`)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from .errors import InvalidInput
from .units import MemoryUnit

__all__ = [
    "render", "elision_marker", "marker_count", "MARKER", "Markers", "MERGED", "MARKER_MODES", "check_markers",
    "summary_message",
    "hidden_before",
]

#: How left-out messages are shown: ``True``, one marker per run of them where it was; ``"merged"``, one marker
#: for all of them, where the first run was; ``False``, none.
Markers = bool | Literal["merged"]
MERGED = "merged"
#: The modes by the names a command line or a server setting gives them.
MARKER_MODES: dict[str, Markers] = {"merged": MERGED, "runs": True, "none": False}
_WHERE = " throughout"

#: The content of an elision marker message; group 1 is the number of messages left out.
MARKER = re.compile(r"^\[(\d+) messages? omitted(?:" + re.escape(_WHERE) + r")?\]$")


def check_markers(markers: object) -> Markers:
    """``markers`` if it is one of :data:`Markers` (a clear error otherwise)."""
    if markers is True or markers is False or markers == MERGED:
        return markers  # type: ignore[return-value]
    raise InvalidInput(f"markers must be True (one marker per omitted run), {MERGED!r} (one marker for all) "
                       f"or False (none), got {markers!r}")


def elision_marker(n_messages: int, *, merged: bool = False) -> dict[str, Any]:
    """The visible stand-in for a span of ``n_messages`` left out of the context (``merged``: for all the
    spans left out, shown where the first one was, more of them further on).

    Short on purpose: every elided run pays for one, so its words are rate
    taken from the messages (9 tokens with cl100k's per-message overhead).

    >>> elision_marker(3)
    {'role': 'user', 'content': '[3 messages omitted]'}
    >>> elision_marker(40, merged=True)["content"]
    '[40 messages omitted throughout]'
    """
    noun = "message" if n_messages == 1 else "messages"
    return {"role": "user", "content": f"[{n_messages} {noun} omitted{_WHERE if merged else ''}]"}


def marker_count(message: Mapping[str, Any]) -> int | None:
    """N for an elision marker message (see :func:`elision_marker`), else ``None``.

    >>> marker_count({"role": "user", "content": "[12 messages omitted]"}), marker_count({"role": "user", "content": "hi"})
    (12, None)
    """
    content = message.get("content")
    m = MARKER.match(content) if isinstance(content, str) else None
    return int(m.group(1)) if m else None


def summary_message(summary: str, n_messages: int) -> dict[str, Any]:
    return {"role": "system", "content": f"[rdmem: summary of {n_messages} earlier messages]\n{summary}"}


def _merge_markers(body: list[dict[str, Any]], src: list[int | None]) -> tuple[list[dict[str, Any]], list[int | None]]:
    """One marker for all of ``body``'s, where the first one was (its count theirs in all)."""
    at = [k for k, s in enumerate(src) if s is None]
    if len(at) < 2:
        return body, src
    total = sum(int(MARKER.match(body[k]["content"]).group(1)) for k in at)  # type: ignore[union-attr]
    drop = set(at[1:])
    out = [elision_marker(total, merged=True) if k == at[0] else m for k, m in enumerate(body) if k not in drop]
    return out, [s for k, s in enumerate(src) if k not in drop]


def hidden_before(units: Sequence[MemoryUnit]) -> list[int]:
    """How many messages not in ``units`` at all (already archived) precede each unit.

    Units carry their position in the whole history (``index``), so a jump in
    indices is a span that left the context earlier.
    """
    index = np.fromiter((u.index for u in units), dtype=np.int64, count=len(units))
    return np.maximum(np.diff(index, prepend=-1) - 1, 0).tolist()


def render(
    units: Sequence[MemoryUnit],
    contents: Mapping[int, str | None],
    *,
    summary: str | None = None,
    summarized: Collection[int] = (),
    markers: Markers = True,
    hidden: Sequence[int] | None = None,
    sources: list[int | None] | None = None,
) -> list[dict[str, Any]]:
    """Messages for the chosen units, chronological, pinned system messages first.

    ``contents`` maps a unit's position in ``units`` to the content it is sent
    with (``None``: its original message, verbatim). Positions not in
    ``contents`` are left out; each maximal run of them becomes one elision
    marker when ``markers`` is true, except positions in ``summarized``, which
    the summary stands for (``"merged"``: one marker for every run, where the
    first was). The summary goes right after the pinned system
    messages. ``hidden`` is :func:`hidden_before` of ``units``, if the caller
    has it already. A ``sources`` list is filled with where each returned
    message comes from: its unit's position, or ``None`` for a marker or the
    summary.
    """
    head: list[dict[str, Any]] = []
    body: list[dict[str, Any]] = []
    head_src: list[int | None] = []
    body_src: list[int | None] = []
    gap = 0
    if hidden is None:
        hidden = hidden_before(units)
    for pos, u in enumerate(units):
        gap += hidden[pos]
        if pos not in contents:
            if not u.pinned and pos not in summarized:
                gap += 1
            continue
        msg = dict(u.message)
        if contents[pos] is not None:
            msg["content"] = contents[pos]
        if u.pinned:
            head.append(msg)
            head_src.append(pos)
            continue
        if gap and markers:
            body.append(elision_marker(gap))
            body_src.append(None)
        gap = 0
        body.append(msg)
        body_src.append(pos)
    if gap and markers and body:
        body.append(elision_marker(gap))
        body_src.append(None)
    if markers == MERGED:
        body, body_src = _merge_markers(body, body_src)
    if summary:
        head.append(summary_message(summary, len(summarized)))
        head_src.append(None)
    if sources is not None:
        sources[:] = head_src + body_src
    return head + body
