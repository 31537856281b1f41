"""rd's ``coherence``: the newest messages, which the next turn follows, priced in the objective."""

from __future__ import annotations

import pytest

from rdmem import compact
from rdmem.errors import InvalidInput
from rdmem.policies import RDPolicy

from .test_room_value import Fixed, _words

# Four assistant messages of 10 tokens each (no per-message overhead), the older ones worth more: a budget of
# 20 keeps two. Assistant messages only, so the qa mode protects none of them.
MESSAGES = [{"id": f"m{i}", "role": "assistant", "content": _words(10, f"w{i}_")} for i in range(4)]
VALUES = (0.5, 0.4, 0.1, 0.1)


def _kept(**coherence: float) -> list[str]:
    policy = RDPolicy(value=Fixed(VALUES), duplicates=None, recency_decay=0.0, **{"coherence": 0.0, **coherence})
    return compact(MESSAGES, budget=20, policy=policy, tokenizer=lambda s: len(s.split()), message_overhead=0,
                   markers=False).kept_ids


def test_without_it_the_most_valuable_facts_are_kept() -> None:
    assert _kept() == _kept(coherence=0.0) == ["m0", "m1"]


def test_its_weight_and_reach_set_how_much_the_newest_messages_count() -> None:
    # A message of age a gains coherence * exp(-a / reach) * 0.5 (the best value); ages 3, 2, 1, 0.
    assert _kept(coherence=0.5, coherence_reach=1.0) == ["m0", "m1"]  # the newest: 0.1 + 0.25 < 0.4
    assert _kept(coherence=1.0, coherence_reach=1.0) == ["m0", "m3"]  # 0.1 + 0.5 > 0.4 + 0.07
    # a longer reach lifts the older ones too: 0.97, 1.01, 0.88, 1.1
    assert _kept(coherence=2.0, coherence_reach=4.0) == ["m1", "m3"]


def test_coherence_is_checked() -> None:
    for name, bad in (("coherence", -0.1), ("coherence", 11), ("coherence", True), ("coherence_reach", 0),
                      ("coherence_reach", "2")):
        with pytest.raises(InvalidInput, match=f"{name} must be a number in"):
            RDPolicy(**{name: bad})  # type: ignore[arg-type]
