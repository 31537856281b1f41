"""Compressed and one-line representations of a message (offline, deterministic, no model).

Two rungs of the representation ladder between "verbatim" and "absent":

- :func:`compress` drops greetings, thanks, interjections and discourse
  fillers ("Hey Mel!", "haha", "you know,", "Sounds great!"), then, when the
  text is still long, keeps its most informative sentences (content words,
  names, numbers and dates) up to about ``max_ratio`` of the original tokens.
  Kept sentences are not paraphrased: their names, numbers and dates stay
  verbatim; a sentence that leans on the one before ("But not green
  apples.") is kept with it or not at all.
- :func:`one_line` gives a one-line gist: the most informative sentence, or
  clause, cut with "…" to ``max_tokens``.

A leading structural prefix — a bracketed date and/or a speaker label such as
``"[1:56 pm on 8 May, 2023] Caroline: "`` — is kept intact at the start of
both. Both are meant for conversational prose; text that looks like code or
structured data is returned unchanged by :func:`compress`.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Mapping

from .errors import InvalidInput, InvalidType
from .features import content_words, extract_features
from .history import split_prefix
from .summarize import split_sentences
from .tokens import Tokenizer

__all__ = ["compress", "one_line", "strip_fillers"]

_STRUCTURED = re.compile(r"```|^\s*[{<]|^\s*\[\s*[{\"\d]")

_NAME = r"(?:[A-Z][a-z]+(?:\s[A-Z][a-z]+)?)"
# Interjections and greetings at the start of a sentence, possibly with a vocative name ("Hey Mel!").
_LEAD = re.compile(
    r"^(?:(?i:hey|hi|hello|hiya|howdy|yo|oh|ohh|ooh|ah|ahh|aw+|aww+|wow|whoa|woah|haha\w*|hehe\w*|lol|lmao|rofl|"
    r"omg|oh my god|oh my gosh|gosh|geez|yay|woo+hoo+|um+|uh+|hmm+|er+m*|well|ok|okay|alright|so|anyway|anyways|"
    r"thanks|thank you|thanks a lot|thanks so much|thank you so much|cheers|dear|good morning|good evening|"
    r"good afternoon|good night)"
    r"(?:\s*,?\s*" + _NAME + r"|\s+(?i:there|guys|everyone|all))?(?=[\s,!.?…~:;]|$)[\s,!.?…~:;-]*)+"
)
_LAUGH = re.compile(r"(?i)\s*\b(?:ha(?:ha)+h?|he(?:he)+|lol|lmao|rofl|xd)\b[!.]*")
_EMOTICON = re.compile(r"(?<!\w)(?:[:;=]-?[)(DPp3]|<3|\^_\^)(?!\w)")
# Discourse fillers, only where they are fillers: "you know, ..." goes, "you know what I like" stays.
_FILLER_WORDS = r"(?:you know|i mean|like|basically|literally|honestly|to be honest|kind of|sort of)"
_FILLER_START = re.compile(r"(?i)^" + _FILLER_WORDS + r"\s*,\s*")
_FILLER_MID = re.compile(r"(?i),\s*" + _FILLER_WORDS + r"\s*,\s*")
_FILLER_END = re.compile(r"(?i),\s*(?:you know|i mean)\s*(?=[.!?]*$)")
_NEGATION = re.compile(r"(?i)\b(?:no|not|never|none|nothing|nobody|nowhere|neither|nor|cannot)\b|n't\b")
# Content words that, alone, make a sentence small talk ("Sounds great!", "Good luck!", "Keep it up!").
_SOCIAL = frozenset(
    """glad luck agree agreed sounds sound keep hope hoping doing lucky congrats congratulations welcome care
    amazing fantastic wonderful lovely sweet fun exciting excited happy proud bet guess means appreciate appreciated
    wish hear heard tell bit true right exactly same yay hugs aww omg haha hehe lmao nope yep cheers bye goodbye
    soon talk catch later chat ya awesome incredible beautiful stunning brilliant perfect fab fabulous
    impressive inspiring touching cute adorable super fine alright anyway anyways wonder wondering mean meant""".split()
)
# A sentence opening with one of these continues the one before and is not kept without it.
_LEANS = re.compile(
    r"(?i)^\W*(?:but|and|or|nor|yet|so|also|though|although|however|then|which|because|plus|instead|otherwise|"
    r"except|unless|still|actually|not)\b"
)
_SPACE = re.compile(r"[ \t]+")
_SPACE_PUNCT = re.compile(r"\s+([,.!?;:])")
_DOUBLE_PUNCT = re.compile(r",\s*([,.!?])")
_CLAUSE = re.compile(r"[,;:]\s+|\s+[—–-]\s+|\s+(?=(?:and|but|because|which|while|although|though)\s)")
_CONJ = re.compile(r"^(?:and|but|because|which|while|although|though)\s+", re.IGNORECASE)


def _tidy(sentence: str, changed: bool) -> str:
    s = _SPACE.sub(" ", sentence)
    s = _SPACE_PUNCT.sub(r"\1", s)
    s = _DOUBLE_PUNCT.sub(r"\1", s)
    s = s.strip().lstrip(",;:-–— ").strip()
    if changed and s and s[0].islower() and not s.startswith(("iPhone", "iPad", "eBay")):
        s = s[0].upper() + s[1:]
    return s


def strip_fillers(sentence: str) -> str:
    """One sentence without leading greetings/interjections, laughter, emoticons and discourse fillers.

    Returns ``""`` when nothing but small talk is left: no content word beyond
    small-talk words, no number or date, no negation.

    >>> strip_fillers("Haha, you know, I finally got the job at Acme on 3 June!")
    'I finally got the job at Acme on 3 June!'
    >>> strip_fillers("Thanks, Mel!"), strip_fillers("Sounds great, Caroline!")
    ('', '')
    >>> strip_fillers("No, I didn't go.")
    "No, I didn't go."
    """
    s = sentence.strip()
    out = _LEAD.sub("", s)
    out = _LAUGH.sub("", out)
    out = _EMOTICON.sub("", out)
    out = _FILLER_START.sub("", out.strip())
    out = _FILLER_MID.sub(" ", out)
    out = _FILLER_END.sub("", out)
    out = _tidy(out, out != s)
    if not out or not any(ch.isalnum() for ch in out):
        return ""
    if _NEGATION.search(out) or any(ch.isdigit() for ch in out):
        return out
    # A trailing vocative name ("..., Caroline!") does not make a sentence informative.
    probe = re.sub(r",\s*" + _NAME + r"\s*([.!?]*)$", r"\1", out)
    words = [w for w in content_words(probe) if w not in _SOCIAL]
    return out if words else ""


def _sentences(body: str) -> list[tuple[str, str]]:
    """``(original, stripped)`` per sentence of the body; stripped is "" for small talk."""
    return [(s, strip_fillers(s)) for s in split_sentences(body)]


def _units(pairs: list[tuple[str, str]]) -> list[str]:
    """Kept sentences, a sentence that leans on the one before ("But not green apples.") glued to it."""
    out: list[str] = []
    prev_kept = False
    for original, stripped in pairs:
        if not stripped:
            prev_kept = False
            continue
        if prev_kept and _LEANS.match(original):
            out[-1] = f"{out[-1]} {stripped}"
        else:
            out.append(stripped)
        prev_kept = True
    return out


def _info(sentence: str) -> tuple[frozenset[str], float]:
    """Content words (small-talk words left out) and the bonus for names, numbers and dates."""
    words = frozenset(w for w in content_words(sentence) if w not in _SOCIAL)
    f = extract_features(sentence, "user")
    # Names, numbers and dates are what questions ask about: a bonus on top of their words.
    return words, 1.0 * len(f.entities) + 1.0 * len(f.numbers) + 1.5 * len(f.dates)


def _weight(words: frozenset[str], bonus: float, idf: Mapping[str, float] | None) -> float:
    return (math.fsum(idf.get(x, 1.0) for x in words) if idf is not None else float(len(words))) + bonus


def _join(prefix: str, body: str) -> str:
    return f"{prefix} {body}".strip() if prefix else body


def _check_tokenizer(tokenizer: object) -> Tokenizer:
    if not isinstance(tokenizer, Tokenizer):
        raise InvalidType(f"tokenizer must be a rdmem Tokenizer (see rdmem.tokens.get_tokenizer), got {type(tokenizer).__name__}")
    return tokenizer


def compress(
    text: str,
    *,
    tokenizer: Tokenizer,
    max_ratio: float = 0.6,
    min_saving: float = 0.15,
    idf: Mapping[str, float] | None = None,
) -> str:
    """A shorter version of ``text``: small talk removed, then the most informative sentences.

    Parameters
    ----------
    text:
        One message's text.
    tokenizer:
        Counts tokens (a :class:`rdmem.tokens.Tokenizer`).
    max_ratio:
        When the body (the text after the prefix) without small talk is still
        above this share of its original tokens and has several sentences,
        keep the most informative sentences (greedy by new content per token)
        up to about this share.
    min_saving:
        Return ``text`` unchanged unless at least this share of its tokens is
        saved (also when nothing but small talk would be left).
    idf:
        Optional weights of content words (e.g. corpus IDF); missing words
        weigh 1.0. Without it every content word weighs 1.0. Names, numbers and
        dates get a bonus either way.

    The leading date/speaker prefix is kept intact; kept sentences keep
    their names, numbers and dates verbatim.

    >>> from rdmem.tokens import get_tokenizer
    >>> tok = get_tokenizer(len)   # characters as tokens keep the example exact
    >>> compress("[8 May, 2023] Mel: Hey Caroline! Good to see you! I'm swamped with the kids & work.", tokenizer=tok)
    "[8 May, 2023] Mel: I'm swamped with the kids & work."
    >>> compress("Sure.", tokenizer=tok)
    'Sure.'
    """
    tok = _check_tokenizer(tokenizer)
    if not isinstance(text, str):
        raise InvalidType(f"text must be a string, got {type(text).__name__}")
    if isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not 0.0 < max_ratio <= 1.0:
        raise InvalidInput(f"max_ratio must be a number in (0, 1], got {max_ratio!r}")
    if isinstance(min_saving, bool) or not isinstance(min_saving, (int, float)) or not 0.0 <= min_saving < 1.0:
        raise InvalidInput(f"min_saving must be a number in [0, 1), got {min_saving!r}")
    if not text.strip() or _STRUCTURED.search(split_prefix(text)[1]):
        return text
    total = tok.count(text)
    prefix, body = split_prefix(text)
    kept = _units(_sentences(body))
    if not kept:
        return text
    # The ratio applies to the body: the prefix is structure that every rung keeps.
    target = max(int(max_ratio * tok.count(body)), 1)
    out = " ".join(kept)
    if tok.count(out) > target and len(kept) > 1:
        out = _best_sentences(kept, tok, target, idf)
    out = _join(prefix, out)
    if tok.count(out) > (1.0 - min_saving) * total:
        return text
    return out


def _best_sentences(sentences: list[str], tok: Tokenizer, budget: int, idf: Mapping[str, float] | None) -> str:
    """The sentences with the most new content per token, in their order, within ``budget`` tokens.

    Lazy greedy on a coverage gain (a word counts once); the single most
    informative sentence is kept even when it alone exceeds the budget.
    """
    costs = [tok.count(s) + 1 for s in sentences]  # + 1 for the joining space
    info = [_info(s) for s in sentences]
    full = [_weight(w, b, idf) for w, b in info]
    heap = [(-full[i] / costs[i], i) for i in range(len(sentences))]
    heapq.heapify(heap)
    covered: set[str] = set()
    chosen: list[int] = []
    used = 0
    while heap:
        neg, i = heapq.heappop(heap)
        words, bonus = info[i]
        gain = _weight(words - covered, bonus, idf) / costs[i]
        if heap and gain < -heap[0][0] - 1e-12:
            heapq.heappush(heap, (-gain, i))
            continue
        if gain > 0 and used + costs[i] <= budget:
            chosen.append(i)
            used += costs[i]
            covered |= words
    if not chosen:
        chosen = [max(range(len(sentences)), key=lambda i: (full[i], -i))]
    return " ".join(sentences[i] for i in sorted(chosen))


def one_line(
    text: str,
    *,
    tokenizer: Tokenizer,
    max_tokens: int = 20,
    idf: Mapping[str, float] | None = None,
) -> str:
    """A one-line gist of ``text`` within ``max_tokens`` tokens (the prefix counts).

    The whole text without small talk if it fits; else its most informative
    sentence; else that sentence's most informative clause; cut with "…"
    when even that is too long. A leading date/speaker prefix is kept intact
    (for long prefixes, give a larger ``max_tokens``); when the prefix alone
    leaves no room, the line is the prefix cut to ``max_tokens``.

    >>> from rdmem.tokens import get_tokenizer
    >>> tok = get_tokenizer(len)
    >>> one_line("Hey! I adopted a dog named Rex in May. He is lovely.", tokenizer=tok, max_tokens=40)
    'I adopted a dog named Rex in May.'
    >>> one_line("I adopted a dog named Rex in May, after months of searching.", tokenizer=tok, max_tokens=26)
    'I adopted a dog named Rex…'
    """
    tok = _check_tokenizer(tokenizer)
    if not isinstance(text, str):
        raise InvalidType(f"text must be a string, got {type(text).__name__}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInput(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    flat = " ".join(text.split())
    if not flat:
        return ""
    prefix, body = split_prefix(flat)
    pairs = _sentences(body)
    sentences = _units(pairs) or [o for o, _ in pairs]
    if not sentences:
        return tok.truncate(flat, max_tokens)
    room = max_tokens - tok.count(_join(prefix, "x")) + tok.count("x")
    if room < 2:
        return tok.truncate(_join(prefix, ""), max_tokens)
    whole = " ".join(sentences)
    if tok.count(_join(prefix, whole)) <= max_tokens:
        return _join(prefix, whole)
    best = max(sentences, key=lambda s: (_gist_score(s, idf, tok), -sentences.index(s)))
    if tok.count(_join(prefix, best)) <= max_tokens:
        return _join(prefix, best)
    if best.startswith("["):
        return _cut(prefix, best, tok, max_tokens)  # a bracketed note (a photo caption) is not split
    clauses = [_CONJ.sub("", c.strip()) for c in _CLAUSE.split(best) if c and c.strip()]
    clauses = [c for c in clauses if c] or [best]
    clause = max(clauses, key=lambda c: (_gist_score(c, idf, tok), -clauses.index(c)))
    if tok.count(_join(prefix, clause)) <= max_tokens:
        return _join(prefix, clause)
    return _cut(prefix, clause, tok, max_tokens)


def _gist_score(text: str, idf: Mapping[str, float] | None, tok: Tokenizer) -> float:
    """Information with a mild preference for short pieces: a gist should be dense."""
    return _weight(*_info(text), idf) / max(tok.count(text), 1) ** 0.5


def _cut(prefix: str, text: str, tok: Tokenizer, max_tokens: int) -> str:
    """``prefix text…`` cut so that the line has at most ``max_tokens`` tokens."""
    n = max_tokens - tok.count(_join(prefix, "…")) + tok.count("…")
    while n > 0:
        cut = tok.truncate(text, n).rstrip(" ,;:-–—")
        # Cut at a word boundary when one is near, so the gist does not end in half a word.
        if cut != text and " " in cut and not text[len(cut):len(cut) + 1].isspace():
            cut = cut[: cut.rfind(" ")].rstrip(" ,;:-–—")
        line = _join(prefix, cut + "…") if cut else _join(prefix, "…")
        if tok.count(line) <= max_tokens:
            return line
        n -= 1
    return tok.truncate(_join(prefix, ""), max_tokens)
