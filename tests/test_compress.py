"""Compressed and one-line rungs: small talk goes, facts stay verbatim, the prefix stays intact."""

from __future__ import annotations

import re

import pytest

from rdmem.compress import compress, one_line, strip_fillers
from rdmem.history import split_prefix

PREFIX = "[1:56 pm on 8 May, 2023] Caroline:"

LONG = (
    "Wow, what a week. I moved to Porto on 2 May 2024 with my sister Ana. The new flat costs 950 EUR a month. "
    "It was a long drive. The weather was nice. We were tired but happy. Ana starts her job at Farfetch on 15 May. "
    "Anyway, it was fun. Honestly, I think it was a good idea."
)


def test_locomo_prefix_kept_and_greetings_removed(cl100k):
    text = f"{PREFIX} Hey Mel! Good to see you! I went to a LGBTQ support group yesterday and it was so powerful."
    assert compress(text, tokenizer=cl100k) == (
        f"{PREFIX} I went to a LGBTQ support group yesterday and it was so powerful."
    )


def test_fillers_and_thanks_removed_facts_verbatim(cl100k):
    text = "Haha, you know, I finally got the job at Acme Corp on 3 June 2024! Thanks so much!"
    assert compress(text, tokenizer=cl100k) == "I finally got the job at Acme Corp on 3 June 2024!"


def test_long_text_keeps_the_informative_sentences_verbatim(cl100k):
    out = compress(LONG, tokenizer=cl100k, max_ratio=0.6)
    for fact in ("Porto", "2 May 2024", "Ana", "950 EUR", "Farfetch", "15 May"):
        assert fact in out
    for chatter in ("Anyway", "Honestly", "The weather was nice", "long drive"):
        assert chatter not in out
    # Every kept sentence is a sentence of the input, unaltered.
    for sentence in re.split(r"(?<=[.!?])\s+", out):
        assert sentence in LONG or sentence.lower() in LONG.lower()
    assert cl100k.count(out) <= 0.65 * cl100k.count(LONG)


def test_max_ratio_controls_how_much_is_kept(cl100k):
    loose = compress(LONG, tokenizer=cl100k, max_ratio=0.7)
    tight = compress(LONG, tokenizer=cl100k, max_ratio=0.3)
    assert cl100k.count(tight) < cl100k.count(loose) < cl100k.count(LONG)


def test_a_sentence_that_leans_on_the_previous_one_travels_with_it(cl100k):
    text = "I like apples. But not green apples, you know."
    assert compress(text, tokenizer=cl100k) == "I like apples. But not green apples."


def test_original_returned_when_little_would_be_saved(cl100k):
    text = "My flight is LH 442 on 14 March."
    assert compress(text, tokenizer=cl100k) is text
    # Nothing but small talk: no compressed rung either (the caller may drop the unit instead).
    assert compress("Hey! Thanks! Sounds great!", tokenizer=cl100k) == "Hey! Thanks! Sounds great!"
    # The saving threshold is a parameter.
    text = "Haha, I moved to Porto in May."
    assert compress(text, tokenizer=cl100k, min_saving=0.15) == "I moved to Porto in May."
    assert compress(text, tokenizer=cl100k, min_saving=0.5) == text


@pytest.mark.parametrize("text", ["```python\nprint('hi')\n```", '{"greeting": "Hey there! thanks"}', "", "   "])
def test_structured_or_empty_text_unchanged(cl100k, text):
    assert compress(text, tokenizer=cl100k) == text


def test_idf_weights_decide_which_sentence_stays(cl100k):
    text = "I adopted a cat named Milo. I painted a sunset over the lake. I bought a red bicycle yesterday."
    cat = compress(text, tokenizer=cl100k, max_ratio=0.45, idf={"milo": 9.0, "cat": 5.0})
    lake = compress(text, tokenizer=cl100k, max_ratio=0.45, idf={"sunset": 9.0, "lake": 5.0})
    assert "Milo" in cat and "sunset" not in cat
    assert "sunset" in lake and "Milo" not in lake


def test_strip_fillers():
    assert strip_fillers("Oh wow, I mean, that's amazing!") == ""
    assert strip_fillers("It was, like, 40 degrees.") == "It was 40 degrees."
    assert strip_fillers("Hi Melanie! I ran 5 km :)") == "I ran 5 km"
    assert strip_fillers("You know what I like? Jazz.") == "You know what I like? Jazz."  # not a filler here
    assert strip_fillers("No, I didn't go.") == "No, I didn't go."  # negations carry meaning


def test_split_prefix():
    assert split_prefix(f"{PREFIX} Hello!") == (PREFIX, "Hello!")
    assert split_prefix("Caroline: Hello!") == ("Caroline:", "Hello!")
    assert split_prefix("[8 May, 2023] Hello!") == ("[8 May, 2023]", "Hello!")
    assert split_prefix("hello: world") == ("", "hello: world")


def test_one_line_fits_and_keeps_the_prefix(cl100k):
    text = f"{PREFIX} Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful.\nThe stories were inspiring."
    for max_tokens in (18, 20, 25, 40):
        line = one_line(text, tokenizer=cl100k, max_tokens=max_tokens)
        assert cl100k.count(line) <= max_tokens
        assert "\n" not in line
        assert line.startswith(PREFIX + " ")
    assert one_line(text, tokenizer=cl100k, max_tokens=32) == (
        f"{PREFIX} I went to a LGBTQ support group yesterday and it was so powerful."
    )
    assert one_line(text, tokenizer=cl100k, max_tokens=26) == f"{PREFIX} I went to a LGBTQ support group yesterday"
    assert one_line(text, tokenizer=cl100k, max_tokens=20).endswith("…")


def test_one_line_picks_the_informative_sentence(cl100k):
    text = "That sounds amazing! Good luck with it. My sister Ana moves to Porto on 2 May. See you soon!"
    assert one_line(text, tokenizer=cl100k, max_tokens=15) == "My sister Ana moves to Porto on 2 May."


def test_one_line_cuts_at_a_word_with_an_ellipsis(cl100k):
    text = "I adopted a dog named Rex in the spring, after months of searching shelters across the whole region."
    line = one_line(text, tokenizer=cl100k, max_tokens=6)
    assert line.endswith("…") and cl100k.count(line) <= 6
    assert text.startswith(line[:-1])


def test_one_line_when_the_prefix_leaves_no_room(cl100k):
    line = one_line(f"{PREFIX} I adopted a dog.", tokenizer=cl100k, max_tokens=5)
    assert cl100k.count(line) <= 5 and PREFIX.startswith(line)


def test_deterministic(cl100k):
    assert compress(LONG, tokenizer=cl100k) == compress(LONG, tokenizer=cl100k)
    assert one_line(LONG, tokenizer=cl100k) == one_line(LONG, tokenizer=cl100k)


@pytest.mark.parametrize(
    ("fn", "kwargs", "error", "match"),
    [
        (compress, {"max_ratio": 0.0}, ValueError, r"max_ratio must be a number in \(0, 1\], got 0.0"),
        (compress, {"max_ratio": 1.5}, ValueError, "max_ratio must be a number"),
        (compress, {"min_saving": 1.0}, ValueError, r"min_saving must be a number in \[0, 1\)"),
        (compress, {"tokenizer": "cl100k_base"}, TypeError, "tokenizer must be a rdmem Tokenizer"),
        (one_line, {"max_tokens": 0}, ValueError, "max_tokens must be an int >= 1, got 0"),
        (one_line, {"tokenizer": len}, TypeError, "tokenizer must be a rdmem Tokenizer"),
    ],
)
def test_invalid_arguments(cl100k, fn, kwargs, error, match):
    args = {"tokenizer": cl100k, **kwargs}
    with pytest.raises(error, match=match):
        fn("Some text here.", **args)
    with pytest.raises(TypeError, match="text must be a string"):
        fn(42, tokenizer=cl100k)
