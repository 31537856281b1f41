"""rd's ``room_value``: when messages keep arriving, room freed now is worth what the next messages bring."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from rdmem import MemoryManager, compact
from rdmem.errors import InvalidInput
from rdmem.policies import RDPolicy
from rdmem.policies import STREAM_ROOM_VALUE
from rdmem.scoring import ScoringContext


@dataclass(frozen=True)
class Fixed:
    """Values given by hand, one per message (no model)."""

    values: tuple[float, ...]
    needs_embeddings: bool = False

    def score(self, ctx: ScoringContext) -> np.ndarray:
        return np.array(self.values[: len(ctx)], dtype=np.float64)


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# One word, one token, no per-message overhead: a long message of middling value per token and two
# short dense ones. Assistant messages only, so the qa mode protects none of them.
MESSAGES = [
    {"id": "long", "role": "assistant", "content": _words(40, "l")},
    {"id": "s1", "role": "assistant", "content": _words(10, "a")},
    {"id": "s2", "role": "assistant", "content": _words(10, "b")},
]


def _kept(room_value: float | None) -> list[str]:
    policy = RDPolicy(value=Fixed((0.5, 0.2, 0.2)), duplicates=None, recency_decay=0.0, room_value=room_value,
                      coherence=0.0)
    return compact(MESSAGES, budget=50, policy=policy, tokenizer=lambda s: len(s.split()), message_overhead=0,
                   markers=False).kept_ids


def test_a_one_off_context_fills_the_budget_with_the_most_value() -> None:
    assert _kept(None) == _kept(0.0) == ["long", "s1"]  # 0.7 in 50 tokens


def test_with_room_valued_the_long_middling_message_goes_first() -> None:
    # The long message is worth 0.0125 a token, the short ones 0.02: with the room worth what the
    # marginal block brings, keeping the long one gives up more than it is worth.
    assert _kept(1.0) == ["s1", "s2"]


def test_room_value_is_checked() -> None:
    for bad in (-0.1, 11, True, "1"):
        with pytest.raises(InvalidInput, match="room_value must be a number in"):
            RDPolicy(room_value=bad)  # type: ignore[arg-type]


def test_a_manager_without_markers_trims_its_working_set_with_room_valued() -> None:
    mem = MemoryManager(budget=100, policy=RDPolicy(value=Fixed(()), duplicates=None), markers=False)
    working, active = mem._working_policy, mem._learning.policy()
    assert isinstance(working, RDPolicy) and isinstance(active, RDPolicy)
    assert working.room_value == STREAM_ROOM_VALUE
    assert active.room_value is None  # a context is one-off: its free room goes unused
    # With a marker per omitted run valuing the room measured within the noise: the policy is left as it is.
    marked = MemoryManager(budget=100, policy=RDPolicy(value=Fixed(()), duplicates=None), markers=True)._working_policy
    assert isinstance(marked, RDPolicy) and marked.room_value is None
    # One merged marker (the default) leaves the tokens of a marker per run to messages, as none does.
    merged = MemoryManager(budget=100, policy=RDPolicy(value=Fixed(()), duplicates=None))._working_policy
    assert isinstance(merged, RDPolicy) and merged.room_value == STREAM_ROOM_VALUE
    own = MemoryManager(budget=100, policy=RDPolicy(room_value=0.25))._working_policy
    assert isinstance(own, RDPolicy) and own.room_value == 0.25  # a policy's own setting stands
