"""Feature matrices for the value models, computed from a :class:`~rdmem.scoring.ScoringContext`.

``prior_matrix``: query-agnostic features of each unit (what kind of message
it is). ``query_matrix``: how each unit relates to a query, plus the prior.
Both are cheap (regexes, IDF sums, one matrix product).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..errors import InvalidInput
from ..features import _NUMBER, has_date
from ..history import speaker_of, split_prefix
from ._base import ScoringContext
from .lexical import Lexical

__all__ = [
    "PRIOR_FEATURES", "QUERY_FEATURES", "prior_matrix", "model_prior_matrix", "check_prior_model", "salience_of",
    "query_matrix", "model_query_matrix", "check_query_model", "message_body",
]

PRIOR_FEATURES = (
    "log_info",
    "info_density",
    "log_tokens",
    "entities",
    "number",
    "date",
    "directive",
    "is_user",
    "is_tool",
    "question",
    "first_person",
    "event",
    "greeting",
    "exclaim",
    "novelty",
    "salience",
    "proper_nouns",
    "first_person_events",
)
_SALIENCE = PRIOR_FEATURES.index("salience")

QUERY_FEATURES = (
    "cos",
    "cos_z",
    "cos_rank",
    "bm25",
    "bm25_rank",
    "nb_cos_z",
    "nb_bm25",
    "entity_overlap",
    "when_date",
    "prior_logit",
    "log_tokens",
    "bm25_stem",
    "speaker_match",
    "win5_cos_z",
    "win5_first",
)
#: Turns either side within which ``win5_cos_z`` takes a candidate's best query similarity (``nb_cos_z``: 1)
#: and ``win5_first`` its best first-pass score: the context of a strong hit is often asked about with it
#: (BENCHMARKS "Item 3, second round" and "fourth round").
WIN_REACH = 5

_GREETING = re.compile(
    r"^(?:hey|hi|hello|yo|good (?:morning|evening|afternoon|to see)|thanks|thank you|thx|bye|see you|take care|"
    r"congrats|congratulations|wow|haha|lol|aw+|omg|that'?s (?:great|awesome|amazing|so cool)|sounds (?:great|good)|"
    r"glad|nice|cool|awesome|great)\b",
    re.IGNORECASE,
)
# A statement of something the speaker did ("I went", "we finally adopted", "I got"): a first-person subject
# followed by a past-tense verb (regular, or one of the common irregular ones).
_FIRST_PERSON_EVENT = re.compile(
    r"\b(?:i|we)\s+(?:just\s+|finally\s+|recently\s+|also\s+)?(?:\w+ed|went|got|took|made|ran|bought|began|won|"
    r"met|saw|gave|did|had|found|left|read|wrote|built|came|started|joined|signed)\b",
    re.IGNORECASE,
)
# A capitalised word that does not start a sentence (names, places, titles), outside "[shares a photo of ...]".
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_SHARED = re.compile(r"\[shares? .*?\]")
_WHEN = re.compile(r"\b(?:when|what (?:year|month|day|date|time)|how long ago|since when)\b", re.IGNORECASE)
_QENT = re.compile(r"\b[A-Z][a-zA-Z'\-]+")


def message_body(text: str) -> str:
    """The text without a leading ``[date] Speaker:`` label (structure, not content)."""
    return split_prefix(text)[1]


def prior_matrix(ctx: ScoringContext, *, novelty: bool = True, salience: np.ndarray | None = None) -> np.ndarray:
    """Query-agnostic features, one row per unit (columns: :data:`PRIOR_FEATURES`).

    ``salience`` is a direction in embedding space learned with the prior
    model (see :func:`rdmem.learn.train.salience_direction`); the ``salience``
    column is each unit's vector projected on it, or 0 without one (or when
    the embedder's dimension differs from the direction's).
    """
    n = len(ctx)
    x = np.zeros((n, len(PRIOR_FEATURES)))
    if n:
        info = ctx.information
        tokens = ctx.token_costs
        x[:, 0] = np.log1p(info)
        x[:, 1] = info / np.maximum(tokens, 1.0)
        x[:, 2] = np.log1p(tokens)
        x[:, 3:14] = np.array(
            [
                _static_prior(u.text, u.role, min(len(u.features.entities), 6), u.features.directive,
                              u.features.first_person, u.features.event)
                for u in ctx.units
            ],
            dtype=np.float64,
        )
    if novelty and n > 1:
        sim = ctx.similarity.copy()
        np.fill_diagonal(sim, -1.0)
        x[:, 14] = 1.0 - sim.max(axis=1)
    if salience is not None and n and ctx.embeddings.shape[1] == len(salience):
        x[:, _SALIENCE] = salience_of(ctx.embeddings, salience)
    if n:
        x[:, _SALIENCE + 1:_SALIENCE + 3] = np.array([_body_counts(u.text) for u in ctx.units], dtype=np.float64)
    return x


def salience_of(embeddings: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """Each vector projected on the salience ``direction`` (float32, the same at training and serving)."""
    return np.asarray(embeddings, dtype=np.float32) @ np.asarray(direction, dtype=np.float32)


def model_prior_matrix(model: object, ctx: ScoringContext, *, novelty: bool = True) -> np.ndarray:
    """The prior features ``model`` was fitted on, in its order, with its salience direction (if it has one).

    The direction lives in the model's ``meta["salience"]``; a model saved
    before the feature existed simply does not list it.
    """
    features = tuple(model.features)  # type: ignore[attr-defined]
    x = prior_matrix(ctx, novelty=novelty, salience=_direction(model))
    if features == PRIOR_FEATURES:
        return x
    return x[:, check_prior_model(model)]


def check_prior_model(model: object) -> list[int]:
    """The columns of :func:`prior_matrix` that a prior ``model`` uses; a clear error if it cannot be served."""
    features = tuple(model.features)  # type: ignore[attr-defined]
    unknown = [f for f in features if f not in PRIOR_FEATURES]
    if unknown:
        raise InvalidInput(f"value model uses unknown prior features {unknown}; known: {', '.join(PRIOR_FEATURES)}")
    _direction(model)
    return [PRIOR_FEATURES.index(f) for f in features]


def _direction(model: object) -> np.ndarray | None:
    """The salience direction saved in a prior model's ``meta`` (``None`` without one)."""
    d = (getattr(model, "meta", None) or {}).get("salience")
    if d is None:
        return None
    try:
        vec = np.asarray(d, dtype=np.float32)
    except (TypeError, ValueError):
        vec = np.zeros(0, dtype=np.float32)
    if vec.ndim != 1 or not len(vec) or not np.isfinite(vec).all():
        raise InvalidInput("value model's salience direction (meta['salience']) must be a non-empty list of numbers")
    return vec


@lru_cache(maxsize=262_144)
def _static_prior(
    text: str, role: str, entities: int, directive: bool, first_person: bool, event: bool
) -> tuple[float, ...]:
    """The prior features that depend on the unit alone (columns ``entities`` to ``exclaim``; cached: a
    session's units are scored again on every query)."""
    number, date, question, greeting, exclaim = _body_flags(text)
    return (
        entities, number, date, directive, role == "user", role == "tool", question, first_person, event, greeting,
        exclaim,
    )


@lru_cache(maxsize=262_144)
def _body_flags(text: str) -> tuple[bool, bool, bool, bool, float]:
    """Number, date, question mark, greeting, "!" per word of the text without its label (cached: texts
    recur across calls, under any role)."""
    body = message_body(text)
    return (
        bool(_NUMBER.search(body)),
        has_date(body),
        "?" in body,
        bool(_GREETING.match(body)),
        body.count("!") / max(len(body.split()), 1),
    )


@lru_cache(maxsize=262_144)
def _body_counts(text: str) -> tuple[float, float]:
    """``log1p`` of the distinct proper nouns in the text without its label, and the number of first-person
    past-tense statements in it (cached like :func:`_body_flags`).

    >>> _body_counts("[8 May] Ana: We went to Paris with Tom. I bought a hat. Great!")
    (1.0986122886681098, 2.0)
    """
    body = message_body(text)
    proper = {w for w in _PROPER.findall(_SHARED.sub("", body)) if w not in ("I", "I'm")}
    return float(np.log1p(len(proper))), float(len(_FIRST_PERSON_EVENT.findall(body)))


def _rank_feature(score: np.ndarray) -> np.ndarray:
    """``-log1p(rank)`` with rank 0 for the best; units with score <= 0 get the worst rank."""
    order = np.lexsort((np.arange(len(score)), -score))
    rank = np.empty(len(score))
    rank[order] = np.arange(len(score))
    rank[score <= 0] = len(score)
    return -np.log1p(rank)


def _zscore(values: np.ndarray) -> np.ndarray:
    """``values`` less their mean, over their standard deviation (none: a constant stays 0)."""
    sd = values.std()
    return (values - values.mean()) / (sd if sd > 1e-6 else 1.0)


def _neighbour_max(values: np.ndarray, index: np.ndarray, reach: int = 1) -> np.ndarray:
    """For each unit, the largest value among the units up to ``reach`` turns before and after it in the history.

    Only units present in ``index`` count (the candidates, not the whole history), so the cost is
    bounded by ``2 * reach`` look-ups per unit whatever the history's length.
    """
    out = np.full(len(values), values.min() if len(values) else 0.0)
    if len(values) < 2:
        return out
    order = np.argsort(index, kind="stable")
    ordered = index[order]
    for step in (s for r in range(1, reach + 1) for s in (-r, r)):
        want = index + step
        pos = np.minimum(np.searchsorted(ordered, want), len(ordered) - 1)
        found = ordered[pos] == want
        out[found] = np.maximum(out[found], values[order[pos[found]]])
    return out


def model_query_matrix(model: object, ctx: ScoringContext, prior_logit: np.ndarray) -> np.ndarray:
    """The query features ``model`` was fitted on, in its order (a model saved before a column existed does
    not list it, and is served as it was fitted)."""
    x = query_matrix(ctx, prior_logit)
    return x if tuple(model.features) == QUERY_FEATURES else x[:, check_query_model(model)]  # type: ignore[attr-defined]


def check_query_model(model: object) -> list[int]:
    """The columns of :func:`query_matrix` that a query ``model`` uses; a clear error if it cannot be served."""
    features = tuple(model.features)  # type: ignore[attr-defined]
    unknown = [f for f in features if f not in QUERY_FEATURES]
    if unknown:
        raise InvalidInput(f"value model uses unknown query features {unknown}; known: {', '.join(QUERY_FEATURES)}")
    return [QUERY_FEATURES.index(f) for f in features]


def query_entities(query: str) -> set[str]:
    words = _QENT.findall(query)
    # The first word of a question is capitalised by grammar, not because it is a name.
    if words and query.strip().startswith(words[0]):
        words = words[1:]
    return {w.lower() for w in words if w.lower() not in _STOP_CAPS}


_STOP_CAPS = frozenset("what when where who why how which did does do is are was were can could would i".split())


def query_matrix(ctx: ScoringContext, prior_logit: np.ndarray) -> np.ndarray:
    """Query-aware features, one row per unit (columns: :data:`QUERY_FEATURES`)."""
    n = len(ctx)
    x = np.zeros((n, len(QUERY_FEATURES)))
    if n == 0 or not ctx.query:
        return x
    cos = ctx.embeddings @ ctx.query_embedding
    cos_z = _zscore(cos)
    bm = Lexical().score(ctx)
    bm_n = bm / bm.max() if bm.max() > 0 else bm
    index = ctx.indices
    ents = query_entities(ctx.query)
    if ents:
        lows = [_lower(u.text) for u in ctx.units]
        x[:, 7] = sum(np.fromiter((e in low for low in lows), dtype=np.float64, count=n) for e in ents) / len(ents)
        x[:, 12] = np.fromiter((_speaker_of(u) in ents for u in ctx.units), dtype=bool, count=n)
    if _WHEN.search(ctx.query):
        x[:, 8] = [_body_flags(u.text)[1] for u in ctx.units]
    x[:, 10] = np.log1p(ctx.token_costs)
    x[:, 0] = cos
    x[:, 1] = cos_z
    x[:, 2] = _rank_feature(cos)
    x[:, 3] = bm_n
    x[:, 4] = _rank_feature(bm)
    x[:, 5] = _neighbour_max(cos_z, index)
    x[:, 6] = _neighbour_max(bm_n, index)
    x[:, 13] = _neighbour_max(cos_z, index, reach=WIN_REACH)
    # The first pass (meaning and words, each z-scored over the candidates): the best within reach, the
    # candidate itself included, so a strong hit keeps its own score and lends it to its neighbours.
    first = cos_z + _zscore(bm_n)
    x[:, 14] = np.maximum(first, _neighbour_max(first, index, reach=WIN_REACH))
    x[:, 9] = prior_logit
    bs = Lexical(stem=True).score(ctx)
    x[:, 11] = bs / bs.max() if bs.max() > 0 else bs
    return x


def _speaker_of(unit: object) -> str:
    """The unit's speaker, lower-cased: its ``name`` field, or a leading "[date] Name:" label ("" when neither)."""
    name = unit.message.get("name")  # type: ignore[attr-defined]
    if isinstance(name, str) and name:
        return name.split()[0].lower()
    return speaker_of(unit.text)  # type: ignore[attr-defined]


@lru_cache(maxsize=262_144)
def _lower(text: str) -> str:
    return text.lower()


