"""How informative a query is: how far its relevance should outweigh the prior (0 small talk, near 1 a pointed question)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidInput
from ..features import FIRST_PERSON, content_words, extract_features
from ..history import split_prefix
from ._base import ScoringContext

__all__ = ["Informativeness", "asks_the_session", "query_specificity"]

# A request for something said before, phrased as an order rather than a question.
_REQUEST = re.compile(
    r"(?:^|[.!;:]\s+)(?:please\s+)?(?:tell|remind|show|list|find|recall|summari[sz]e|explain|describe|look\s+up)\b",
    re.IGNORECASE,
)


_POSSESSIVE = re.compile(r"['\u2019]s$")
_SENTENCES = re.compile(r"(?<=[.!?\uff1f])\s+")
# A question put to the listener about the listener ("How did your game go?", "What made you start?") asks for
# something new, not for what the session holds, unless it asks what was said or done before.
_YOU = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd)\b", re.IGNORECASE)
# ... and so is one that leaves the listener out: "Got any tips?", "Any plans for the weekend?", "Ever been?"
_TO_LISTENER = re.compile(
    r"^\W*(?:(?:wow|oh|hey|so|and|nice|cool|great|awesome)\W+)*"
    r"(?:got|any|anything|anyone|wanna|ever|been|how\s+did\s+it\s+feel|how\s+was\s+it)\b", re.IGNORECASE)
_BEFORE = re.compile(
    r"\b(?:say|said|tell|told|mention(?:ed)?|recommend(?:ed)?|suggest(?:ed)?|remember|recall|remind"
    r"|again|earlier|before|last\s+time)\b", re.IGNORECASE)
# A tag on a statement ("…, isn't it?", "…, yeah?") or a pleasantry ("How's it going?") asks nothing.
_CHAT = re.compile(
    r"(?:,\s*(?:isn't|aren't|wasn't|weren't|don't|doesn't|didn't|won't|wouldn't|can't|couldn't|right|yeah|huh|eh"
    r"|no|ya\s+know|you\s+know)(?:\s+(?:it|he|she|they|you|we|i|that|there|this))?\s*"
    r"|\b(?:how's\s+it\s+going|what's\s+up|how\s+are\s+you|how\s+have\s+you\s+been|how\s+(?:are|were)\s+things)"
    r"[^?\uff1f]*)[?\uff1f]\W*$", re.IGNORECASE)
_ASKED = re.compile(r"[?\uff1f]\W*$")  # a question sentence: "?" with nothing but "!", quotes or an emoji after it


def asks_the_session(body: str) -> bool:
    """Does a question ask for what the session holds? Not when every one of its question sentences is a
    tag or a pleasantry ("…, isn't it?", "How's it going?") or asks the listener about the listener ("How
    did your game go?", "Any plans for the weekend?": second person, said or left out; no first person;
    nothing said or done before).

    >>> asks_the_session("Wow! How did your game go?"), asks_the_session("What did you say the dosage was?")
    (False, True)
    >>> asks_the_session("Traveling is amazing, isn\u2019t it?"), asks_the_session("When did Melanie paint a sunrise?")
    (False, True)
    """
    asked = [s for s in _SENTENCES.split(body.strip().replace("\u2019", "'")) if _ASKED.search(s)]
    return not asked or any(
        not _CHAT.search(s)
        and (not (_YOU.search(s) or _TO_LISTENER.search(s)) or bool(FIRST_PERSON.search(s)) or bool(_BEFORE.search(s)))
        for s in asked)


def query_specificity(query: str, ctx: ScoringContext, *, rare_idf: float = 3.0) -> tuple[float, bool]:
    """``(specificity, asks)`` of a query against the session in ``ctx``.

    Specificity counts what the query names that the session can match:
    its content words that occur in the session yet are rare there (IDF at
    least ``rare_idf``), its names (twice: a person or a place picks out
    few messages), and one for a date or a number. ``asks``: the query is a
    request ("tell me…", "remind me…") or a question that asks for what the
    session holds (:func:`asks_the_session`: not a tag, a pleasantry, or a
    question to the listener about the listener). A transcript line's
    "[date] Speaker:" label is not part of what it asks.
    """
    body = split_prefix(query)[1]
    features = extract_features(body, "user")
    unseen = ctx.idf_of("\x00")  # a word the session never used can match nothing
    rare = {w for w in content_words(body) if rare_idf <= ctx.idf_of(w) < unseen}
    names = {n for n in (_POSSESSIVE.sub("", e).lower() for e in features.entities) if ctx.idf_of(n.split()[0]) < unseen}
    rare -= {n for name in names for n in name.split()}
    spec = len(rare) + 2 * len(names) + float(bool(features.dates)) + float(bool(features.numbers))
    return spec, (features.question and asks_the_session(body)) or bool(_REQUEST.search(body))


@dataclass(frozen=True)
class Informativeness:
    """The weight of a query's relevance against the prior, in ``[0, 1]``.

    ``min(1, specificity / full)`` (see :func:`query_specificity`), times
    ``statement`` when the query neither asks a question nor makes a request:
    "ok, thanks" and "go on" name nothing, so the prior decides; "When did
    Melanie paint a sunrise?" names a person and a thing the session
    mentions, so relevance decides alone (one name or one word the session
    rarely uses is enough for a question: ``full=1``); a statement ("I went hiking with Anna")
    is a weaker sign of what the next answer needs than a question, and so is a question that asks for
    nothing the session holds ("How did your game go?", "…, isn't it?": :func:`asks_the_session`).
    """

    full: float = 1.0
    statement: float = 0.25
    rare_idf: float = 3.0

    def __post_init__(self) -> None:
        if isinstance(self.full, bool) or not isinstance(self.full, (int, float)) or not self.full > 0:
            raise InvalidInput(f"full must be a number > 0, got {self.full!r}")
        if isinstance(self.statement, bool) or not isinstance(self.statement, (int, float)) or not 0 <= self.statement <= 1:
            raise InvalidInput(f"statement must be a number in [0, 1], got {self.statement!r}")

    def weight(self, ctx: ScoringContext) -> float:
        """The weight for ``ctx.query`` (0 without a query)."""
        if not ctx.query or not ctx.query.strip():
            return 0.0
        spec, asks = query_specificity(ctx.query, ctx, rare_idf=self.rare_idf)
        w = min(1.0, spec / self.full)
        return w if asks else w * self.statement
