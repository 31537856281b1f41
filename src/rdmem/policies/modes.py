"""Task modes: which messages a policy never drops (when they fit), and how much recency counts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..history import is_transcript_line
from ..units import MemoryUnit

__all__ = ["TaskMode", "TASK_MODES", "protected"]

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


def protected(units: Sequence[MemoryUnit], kinds: tuple[str, ...]) -> np.ndarray:
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
