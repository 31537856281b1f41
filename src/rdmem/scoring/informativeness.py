"""How informative a query is: how far its relevance should outweigh the prior (0 small talk, near 1 a pointed question)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidInput
from ..features import content_words, extract_features
from ..history import split_prefix
from ._base import ScoringContext

__all__ = ["Informativeness", "asks_the_session", "query_specificity"]

# A request for something said before, phrased as an order rather than a question ("Can you summarise it?" too).
_REQUEST = re.compile(
    r"(?:^|[.!?;:\uff1f]\s+)(?:(?:can|could|would|will)\s+you\s+)?(?:please\s+)?"
    r"(?:tell|remind|show|list|find|recall|summari[sz]e|explain|describe|look\s+up)\b",
    re.IGNORECASE,
)


_POSSESSIVE = re.compile(r"['\u2019]s$")
_SENTENCES = re.compile(r"(?<=[.!?\uff1f])\s+")
_APOSTROPHES = str.maketrans("\u2018\u2019\u02bc\uff07`", "'" * 5)  # as phones and other keyboards type them
_END = r"[?\uff1f][^\w?\uff1f]*$"  # "?" with nothing after it but "!", quotes, brackets or an emoji
_ASKED = re.compile(_END)
# The speaker in it ("…for me?", "Where did I park?") or what was said or done before: the session may hold it.
# (Wider than the prior's first-person feature, rdmem.features, which stays as the value model was fitted.)
_ME = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|we'd|we'll|us|our|ours|ourselves)\b",
                 re.IGNORECASE)
_BEFORE = re.compile(
    r"\b(?:say|said|tell|told|mention\w*|recommend\w*|suggest\w*|remember|recall|remind|forgot|forget"
    r"|again|earlier|before|last\s+time)\b"
    # what the assistant did or produced, asked of it: "Which file did you change?", "What were your findings?"
    r"|\b(?:did|have)\s+you\s+(?:change|modify|edit|run|fix|add|remove|delete|put|pin|install|update|revert|commit"
    r"|push|merge|book|order|find|decide|pick|choose|use|write|create|rename|move|set|configure|deploy|apply|save"
    r"|send|learn|go\s+with|end\s+up)\b"
    r"|\byou\s+(?:changed|modified|edited|ran|fixed|added|removed|deleted|pinned|installed|updated|reverted|committed"
    r"|pushed|merged|booked|ordered|found|decided|picked|chose|used|wrote|created|renamed|moved|configured|deployed"
    r"|applied|saved|sent|refactored|learned)\b"
    r"|\byour\s+(?:conclusion|findings?|answer|notes?|results?|search|analysis|summary|fix|changes?|diff|patch"
    r"|output|reply)\b", re.IGNORECASE)
# Otherwise, a question put to the listener about the listener ("How did your game go?", "What made you start?")
# asks for something new; so does one that leaves the listener out ("Got any tips?", "Any plans for the weekend?").
_YOU = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd)\b", re.IGNORECASE)
_TO_LISTENER = re.compile(
    r"^\W*(?:(?:wow|oh|hey|so|and|nice|cool|great|awesome)\W+)*"
    r"(?:got\b(?!\s+(?:the|that|those|it)\b)|any\b(?!\s+(?:idea|update|news|luck|progress|errors?|word)\b)"
    r"|anything\b(?!\s+(?:in|from|on|about)\b)|anyone|wanna|ever\b(?!\s+(?:figure|f[io]u?nd|fix|solve|resolve|hear)\w*)"
    r"|been\b(?!\s+able)|how\s+did\s+it\s+feel|how\s+was\s+it\s*(?=[?\uff1f,!]|$))", re.IGNORECASE)
# A tag on a statement ("…, isn't it?", "…, yeah?") or a pleasantry ("Hi John, how's it going?") asks nothing.
_CHAT = re.compile(
    r",\s*(?:isn't|aren't|wasn't|weren't|don't|doesn't|didn't|won't|wouldn't|can't|couldn't|right|yeah|huh"
    r"|ya\s+know|you\s+know)(?:\s+(?:it|he|she|they|you|we|i|that|there|this))?\s*" + _END
    + r"|^\W*(?:(?:hi|hey|hello|so|oh|wow|well)\b[^?\uff1f]{0,40}?[,!.]\s*)?"
    r"(?:how's\s+it\s+going|what's\s+up|how\s+are\s+you|how\s+have\s+you\s+been|how\s+(?:are|were)\s+things)"
    r"(?:\s+(?:doing|today|lately|these\s+days))?\s*" + _END, re.IGNORECASE)


def asks_the_session(body: str) -> bool:
    """Does a question ask for what the session holds? Not when every one of its question sentences is a
    tag or a pleasantry ("…, isn't it?", "How's it going?") or asks the listener about the listener ("How
    did your game go?", "Any plans for the weekend?": second person, said or left out), none names the
    speaker ("…for me?"), and nothing in the query speaks of what was said or done before ("…last time?",
    "I forgot the dosage you gave me") or of what the listener did or produced ("Which files did you change?").

    >>> asks_the_session("Wow! How did your game go?"), asks_the_session("What did you say the dosage was?")
    (False, True)
    >>> asks_the_session("Traveling is amazing, isn\u2019t it?"), asks_the_session("When did Melanie paint a sunrise?")
    (False, True)
    """
    body = body.strip().translate(_APOSTROPHES)
    asked = [s for s in _SENTENCES.split(body) if _ASKED.search(s)]
    return not asked or bool(_BEFORE.search(body)) or any(
        bool(_ME.search(s)) or not (_CHAT.search(s) or _YOU.search(s) or _TO_LISTENER.search(s)) for s in asked)


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
