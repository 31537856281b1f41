"""Scorers: ``score(ctx) -> one utility per unit`` (higher means keep); a registry by name."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidInput
from ._base import Scorer, ScoringContext, embed_text, message_embed_text
from .information import Information
from .informativeness import Informativeness, asks_the_session, query_specificity
from .lexical import Lexical
from .metadata import Metadata
from .recency import Recency
from .relevance import Relevance
from .seed import SeedMetadata, seed_scorer
from .uniqueness import Uniqueness
from .value import LearnedValue
from .weighted import Weighted

__all__ = [
    "SCORERS",
    "get_scorer",
    "Scorer",
    "ScoringContext",
    "embed_text",
    "message_embed_text",
    "Information",
    "Informativeness",
    "asks_the_session",
    "query_specificity",
    "Lexical",
    "Metadata",
    "Recency",
    "Relevance",
    "SeedMetadata",
    "Uniqueness",
    "Weighted",
    "LearnedValue",
    "seed_scorer",
]

SCORERS: dict[str, Callable[[], Scorer]] = {
    "recency": Recency,
    "relevance": Relevance,
    "lexical": Lexical,
    "uniqueness": Uniqueness,
    "information": Information,
    "metadata": Metadata,
    "seed": seed_scorer,
    "value": LearnedValue,
}


def get_scorer(name: str) -> Scorer:
    try:
        return SCORERS[name]()
    except KeyError:
        raise InvalidInput(f"unknown scorer {name!r}; choose one of {', '.join(sorted(SCORERS))}") from None
