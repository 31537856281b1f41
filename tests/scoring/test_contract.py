"""Every registered scorer (and a weighted sum of them) passes ``rdmem.testing.SCORER_CHECKS``."""

from __future__ import annotations

import pytest

from rdmem.scoring import SCORERS, Recency, Relevance, Weighted, get_scorer
from rdmem.testing import SCORER_CHECKS

SCORERS_CHECKED = {name: factory for name, factory in sorted(SCORERS.items())}
SCORERS_CHECKED["weighted"] = lambda: Weighted((("recency", 1.0, Recency()), ("relevance", 2.0, Relevance())),
                                               normalize="minmax")


@pytest.mark.parametrize("name", sorted(SCORERS_CHECKED))
@pytest.mark.parametrize("check", SCORER_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_contract(check, name, hashing_embedder):
    check(SCORERS_CHECKED[name](), hashing_embedder)


def test_every_registered_scorer_is_checked():
    assert set(SCORERS) <= set(SCORERS_CHECKED)
    assert all(get_scorer(name) is not None for name in SCORERS)
