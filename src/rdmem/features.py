"""Cheap, deterministic features of a message's text (no model calls).

Everything here is regular expressions and word lists, so it runs in
microseconds per message and the same text always gives the same features.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Features", "extract_features", "content_words", "STOPWORDS"]

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself
    him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't
    my myself no nor not of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was wasn't we we'd
    we'll we're we've were weren't what what's when when's where where's which while who who's whom why why's
    with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves yes yeah oh ok okay
    just really also so well like got get gets getting go going gone will shall may might must im ive dont cant
    thats thanks thank hey hi hello wow lol haha much many lot lots one thing things something anything
    know think see sure great good nice cool awesome totally definitely absolutely""".split()
)

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]|\d+(?:[.,:]\d+)*|[\u4e00-\u9fff]")
_CAP_WORD = re.compile(r"\b[A-Z][a-zA-Z'\-]+(?:\s+[A-Z][a-zA-Z'\-]+)*")
_SENT_START = re.compile(r"(?:^|[.!?]\s+|\n|:\s+)([A-Z][a-zA-Z'\-]+)")
_NUMBER = re.compile(r"(?<![\w.\-])[-+]?\$?\d+(?:[.,:/\-]\d+)*%?")
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_DATE = re.compile(
    r"\b(?:\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}(?:/\d{2,4})?|"
    rf"\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b\.?(?:,?\s+\d{{4}})?|"
    rf"(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?|"
    rf"(?:{_MONTHS})\s+\d{{4}}|"
    r"(?:19|20)\d{2}|"
    r"(?:yesterday|today|tomorrow|tonight|last\s+(?:week|month|year|night|weekend|summer|winter|spring|fall)|"
    r"next\s+(?:week|month|year|weekend)|this\s+(?:week|month|year|weekend)|"
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|\d+\s+(?:days?|weeks?|months?|years?)\s+ago))\b"
    r"|\d{1,2}:\d{2}\s*(?:am|pm)?|\d{4}年|\d{1,2}月\d{1,2}[日号]",
    re.IGNORECASE,
)
# The same pattern without IGNORECASE, matched on lower-cased text (it has no upper-case letter), and where
# one of its matches can begin there: any digit, or a word that starts one of its word alternatives. Trying
# it only at those places finds exactly _DATE's matches several times faster than _DATE itself, which tries
# its ~20 alternatives, each folding case, at every character (see date_spans).
_DATE_LOWER = re.compile(_DATE.pattern)
_DATE_START = re.compile(
    rf"\d|\b(?=[adfjlmnostwy])(?:{_MONTHS}|yesterday|today|tomorrow|tonight|last|next|this|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
)
# The only non-ASCII characters IGNORECASE matches to ASCII letters (İ ı ſ K): lower() cannot stand in for it.
_FOLDS_TO_ASCII = re.compile("[\u0130\u0131\u017f\u212a]")
# Imperatives only: "Remember to ..." and "Always reply in French" are instructions,
# "I remember when ..." and "I always loved painting" are not.
_DIRECTIVE = re.compile(
    r"(?:^|[.!?;:]\s+|\n)\s*(?:please\s+|and\s+|also\s+|oh,?\s+)?"
    r"(?:remember|always|never|make\s+sure|keep\s+in\s+mind|note\s+that|be\s+sure\s+to)\b"
    r"|\b(?:don'?t\s+forget|do\s+not\s+forget|never\s+forget|from\s+now\s+on|going\s+forward|"
    r"please\s+(?:remember|note|always|never)|(?:you|we)\s+(?:must|should)\s+(?:always|never)|"
    r"my\s+preference\s+is|important:)\b"
    r"|记住|别忘了|不要忘记|以后都|以后要|今后|务必|切记|永远不要"
    r"|n'oublie\s+pas|souviens-toi|recuerda|no\s+olvides|merk\s+dir|vergiss\s+nicht|覚えて|忘れないで",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"\b(?:actually|correction|i\s+meant|i\s+mean,|not\s+anymore|no\s+longer|changed\s+my\s+mind|"
    r"on\s+second\s+thought|scratch\s+that|instead|rather\s+than|but\s+not|update:|wait,|sorry,\s+i)\b"
    r"|其实|更正|改成|不再|算了",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(
    r"^(?:who|what|when|where|why|how|which|whose|whom|do|does|did|is|are|was|were|can|could|would|will|should|"
    r"have|has|had)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|my|mine|me|we|our|we're|we've)\b", re.IGNORECASE)
_EVENT = re.compile(
    r"\b(?:went|visited|started|joined|bought|moved|got|married|born|graduated|adopted|finished|won|lost|met|"
    r"signed|travel(?:l)?ed|attended|painted|ran|read|wrote|made|took|gave|received|celebrated|launched|"
    r"quit|hired|left|began|learned|created|built|planning|plan|decided|will)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Features:
    """What a message contains, as seen by scorers and selectors."""

    entities: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()
    dates: tuple[str, ...] = ()
    directive: bool = False
    question: bool = False
    correction: bool = False
    first_person: bool = False
    event: bool = False
    tool_call: bool = False
    tool_result: bool = False
    n_content_words: int = 0

    def as_dict(self) -> dict[str, object]:
        """The fields that differ from their defaults (what a store keeps; :meth:`from_dict` restores the rest).

        >>> Features(entities=("Ana",), directive=True).as_dict()
        {'entities': ['Ana'], 'directive': True}
        """
        out = {
            "entities": list(self.entities),
            "numbers": list(self.numbers),
            "dates": list(self.dates),
            "directive": self.directive,
            "question": self.question,
            "correction": self.correction,
            "first_person": self.first_person,
            "event": self.event,
            "tool_call": self.tool_call,
            "tool_result": self.tool_result,
            "n_content_words": self.n_content_words,
        }
        return {k: v for k, v in out.items() if v}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Features:
        return cls(
            entities=tuple(data.get("entities", ())),  # type: ignore[arg-type]
            numbers=tuple(data.get("numbers", ())),  # type: ignore[arg-type]
            dates=tuple(data.get("dates", ())),  # type: ignore[arg-type]
            directive=bool(data.get("directive", False)),
            question=bool(data.get("question", False)),
            correction=bool(data.get("correction", False)),
            first_person=bool(data.get("first_person", False)),
            event=bool(data.get("event", False)),
            tool_call=bool(data.get("tool_call", False)),
            tool_result=bool(data.get("tool_result", False)),
            n_content_words=int(data.get("n_content_words", 0)),  # type: ignore[call-overload]
        )


def tokenize_words(text: str) -> list[str]:
    """Lower-cased word tokens (Latin words, numbers, single CJK characters)."""
    words = _WORD.findall(text)  # no word holds a space: lower-cased in one call, then split again
    return " ".join(words).lower().split(" ") if words else []


def stem(word: str) -> str:
    """A light English suffix stripper ("painted", "painting", "paints" -> "paint"); keeps short words.

    >>> [stem(w) for w in ("painted", "painting", "paints", "stories", "classes", "glass", "sing")]
    ['paint', 'paint', 'paint', 'story', 'class', 'glass', 'sing']
    """
    if len(word) <= 4 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 5:
        return word[:-3] + "y"
    if word.endswith("ing") and len(word) > 6:
        base = word[:-3]
        return base[:-1] if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz" else base
    if word.endswith("ed") and len(word) > 5:
        base = word[:-2]
        return base[:-1] if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz" else base
    if word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@lru_cache(maxsize=262_144)
def text_words(text: str) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, int], dict[str, int]]:
    """Content words, their stems, and counts of each, cached per text (texts recur across calls)."""
    words = tuple(content_words(text))
    stems = tuple(stem(w) for w in words)
    word_counts: dict[str, int] = {}
    for w in words:
        word_counts[w] = word_counts.get(w, 0) + 1
    stem_counts: dict[str, int] = {}
    for w in stems:
        stem_counts[w] = stem_counts.get(w, 0) + 1
    return words, stems, word_counts, stem_counts


def content_words(text: str) -> list[str]:
    """Word tokens that carry content: no stopwords, no one-letter words."""
    return [w for w in tokenize_words(text) if w not in STOPWORDS and (len(w) > 1 or "\u4e00" <= w <= "\u9fff")]


def _entities(text: str) -> tuple[str, ...]:
    sentence_initial = {m.group(1) for m in _SENT_START.finditer(text)}
    found: list[str] = []
    for m in _CAP_WORD.finditer(text):
        words = m.group(0).split()
        # A capitalised first word of a sentence is only part of an entity when it is not a
        # common word ("Remember", "Always", "Meet Ana" -> "Ana").
        if words[0] in sentence_initial and words[0].lower() in _COMMON_CAPS:
            words = words[1:]
        words = [w for w in words if w not in ("I", "I'm", "I've", "I'd", "I'll")] if len(words) == 1 else words
        if not words:
            continue
        phrase = " ".join(words)
        if phrase.lower() in STOPWORDS or (len(words) == 1 and phrase.lower() in _CALENDAR):
            continue
        if phrase not in found:
            found.append(phrase)
    return tuple(found)


_COMMON_CAPS = STOPWORDS | frozenset(
    "the this that these those it its my your our their his her we they you he she what when where why how which "
    "who yes no oh wow hey hi hello thanks thank sure great good nice cool awesome sounds that's it's i'm "
    "remember always never please meet let make keep note don't dont do does did can could would should will "
    "shall may might must maybe perhaps actually however nevertheless anyway and but or if then now today "
    "tomorrow yesterday tonight here there okay ok sorry just only still even after before since because although "
    "though once every each some any both many much more most few several another such also besides finally "
    "first second next last sounds looks seems guess btw lol haha".split()
)
_CALENDAR = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday".split()
)


def date_spans(text: str) -> Iterator[tuple[int, int]]:
    """Where ``text`` mentions dates and times: ``(start, end)`` of each match of the date pattern, left to
    right, without overlap (exactly its ``finditer``).

    >>> t = "Back on 12 May, 2023 at 10:30 pm; moved in 2019, not 123:45."
    >>> [t[a:b] for a, b in date_spans(t)]
    ['12 May, 2023', '10:30 pm', '2019', '23:45']
    """
    if _FOLDS_TO_ASCII.search(text):
        yield from (m.span() for m in _DATE.finditer(text))
        return
    low = text.lower()  # as long as text, with the same word, digit and space characters
    end = 0
    for start in _DATE_START.finditer(low):
        pos = start.start()
        if pos < end:
            continue
        m = _DATE_LOWER.match(low, pos)
        if m is not None:
            end = m.end()
            yield pos, end


def has_date(text: str) -> bool:
    """Does ``text`` mention a date or time (see :func:`date_spans`)?"""
    return next(date_spans(text), None) is not None


def extract_features(text: str, role: str, *, has_tool_calls: bool = False) -> Features:
    """Features of one message.

    Directives count only in ``user`` and ``system`` messages: a tool result
    saying "remember to ..." is not the user's instruction.

    >>> f = extract_features("Remember: my sister Ana visits on 12 May.", "user")
    >>> f.directive, f.entities, f.dates
    (True, ('Ana',), ('12 May',))
    >>> extract_features("Remember to rotate the keys.", "tool").directive
    False
    """
    stripped = text.strip()
    is_directive = role in ("user", "system") and bool(_DIRECTIVE.search(text))
    sentences = re.split(r"(?<=[.!?])\s+", stripped)
    question = "?" in text or "？" in text or any(_QUESTION_START.match(s) for s in sentences if s)
    dates = tuple(dict.fromkeys(text[a:b].strip() for a, b in date_spans(text)))
    numbers = tuple(dict.fromkeys(m.group(0) for m in _NUMBER.finditer(text)))
    return Features(
        entities=_entities(text),
        numbers=numbers,
        dates=dates,
        directive=is_directive,
        question=question,
        correction=bool(_CORRECTION.search(text)) and role in ("user", "system", "assistant"),
        first_person=bool(_FIRST_PERSON.search(text)),
        event=bool(_EVENT.search(text)),
        tool_call=has_tool_calls,
        tool_result=role == "tool",
        n_content_words=len(set(content_words(text))),
    )
