"""Feature extraction: directives (several languages, user/system only), entities, numbers, dates, questions."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmem.features import _DATE, content_words, date_spans, extract_features, has_date


@pytest.mark.parametrize(
    "text",
    [
        "Remember that I'm allergic to peanuts.",
        "remember this: the door code is 4411",
        "Don't forget the charger.",
        "dont forget to water the plants",
        "Do not forget my sister's birthday.",
        "From now on, answer in French.",
        "Always use metric units.",
        "Never book flights before 8am.",
        "Please keep in mind I'm vegan.",
        "记住我对花生过敏。",
        "别忘了带护照",
        "以后都用中文回答",
        "N'oublie pas le pain.",
        "Recuerda que soy vegetariano.",
        "Vergiss nicht, dass ich Montag frei habe.",
    ],
)
@pytest.mark.parametrize("role", ["user", "system"])
def test_directives_from_user_and_system(text, role):
    assert extract_features(text, role).directive


@pytest.mark.parametrize("role", ["tool", "assistant", "developer"])
def test_directives_only_count_when_the_user_says_them(role):
    assert not extract_features("Remember to rotate the API keys. From now on, always retry.", role).directive


@pytest.mark.parametrize("text", ["I remembered the keys.", "The forgetful cat sat.", "Nevertheless it works.", ""])
def test_not_directives(text):
    assert not extract_features(text, "user").directive


def test_entities_skip_common_sentence_starters():
    f = extract_features("Remember: meet Ana Silva in New York. Always bring the Lisbon map.", "user")
    assert f.entities == ("Ana Silva", "New York", "Lisbon")
    assert extract_features("Never book Ryanair again.", "user").entities == ("Ryanair",)
    assert extract_features("Hey Mel! Good to see you!", "user").entities == ("Mel",)
    assert extract_features("See you on Monday in May.", "user").entities == ()  # dates, not entities
    assert extract_features("i have no capitals", "user").entities == ()


def test_numbers_and_dates():
    f = extract_features("On 2024-05-01 pay $1,200 (15% off) at 10:30 am; call 555-1234.", "user")
    assert f.numbers == ("2024-05-01", "$1,200", "15%", "10:30", "555-1234")
    assert f.dates == ("2024-05-01", "10:30 am")
    g = extract_features("We met yesterday, 3 days ago, and again on March 3rd, 2024 and 7 May.", "user")
    assert g.dates == ("yesterday", "3 days ago", "March 3rd, 2024", "7 May")
    assert extract_features("我们2023年5月4日见", "user").dates == ("2023年", "5月4日")


def _dates_by_regex(text):
    return [(m.start(), m.group(0)) for m in _DATE.finditer(text)]


def _dates_found(text):
    return [(a, text[a:b]) for a, b in date_spans(text)]


_DATE_EDGES = [
    "123:45 and 1:2:3", "2023年5月4日と12月25日", "ſep 5", "SEPT 9th, 2021", "Mayday, may 5", "this  week", "thisweek",
    "last\nsummer", "marshmallow March", "x2019 2019x 2019", "12/25/2023/1", "0th of june", "3 of may", "tonight!",
    "MONDAY", "TONİGHT", "Today ſep 5 and 6 May", "\u212aX", "since 1999-12-31T10:30pm", "４月", "٣ days ago", "", "no date here",
]


def test_the_date_pattern_has_no_upper_case_letter():
    # date_spans matches it case-sensitively on lower-cased text: an upper-case letter would never match.
    assert not re.search(r"[A-Z]", re.sub(r"\\[A-Za-z]", "", _DATE.pattern))


@pytest.mark.parametrize("text", _DATE_EDGES)
def test_date_spans_are_the_date_pattern(text):
    assert _dates_found(text) == _dates_by_regex(text)
    assert has_date(text) == bool(_DATE.search(text))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(
    ["May", "may", "sept", "Sep", "june", "th", "st", " of ", ", ", " ", "\n", ".", ":", "/", "-", "年", "月", "日",
     "1", "12", "2023", "19", "am", "PM", "days", " ago", "Last", "next", "THIS", "week", "monday", "today", "x", "ſ",
     "İ", "ı", "Ab"]
), max_size=14).map("".join))
def test_date_spans_agree_with_the_pattern_on_generated_text(text):
    assert _dates_found(text) == _dates_by_regex(text)


def test_date_spans_agree_with_the_pattern_on_locomo(locomo_path):
    turns = []
    for sample in json.loads(locomo_path.read_text()):
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns += [t["text"] for t in value]
            elif key.endswith("_date_time"):
                turns.append(value)  # "1:56 pm on 8 May, 2023"
    assert len(turns) > 1000
    assert sum(has_date(t) for t in turns) > 50  # the corpus has dates to find
    for text in turns:
        assert _dates_found(text) == _dates_by_regex(text), text


@pytest.mark.parametrize(
    ("text", "question"),
    [("Is it raining?", True), ("what time is it", True), ("Where do we meet? At noon.", True),
     ("你去哪里？", True), ("It is raining.", False), ("Doing well, thanks.", False)],
)
def test_questions(text, question):
    assert extract_features(text, "user").question is question


def test_corrections_tool_results_and_counts():
    assert extract_features("Actually, make it three people.", "user").correction
    assert not extract_features("Actually, the API returned 3 rows.", "tool").correction
    f = extract_features("rows: 3", "tool")
    assert f.tool_result and not f.tool_call
    assert extract_features("", "assistant", has_tool_calls=True).tool_call
    assert extract_features("the the cat cat sat", "user").n_content_words == 2


def test_content_words_drop_stopwords_and_keep_cjk():
    assert content_words("The cat and I went to Lisbon in 2024") == ["cat", "went", "lisbon", "2024"]
    assert content_words("记住花生") == ["记", "住", "花", "生"]


def test_features_round_trip_through_dicts():
    from rdmem.features import Features

    f = extract_features("Remember: Ana lands at 9:15 on 12 May?", "user")
    assert Features.from_dict(f.as_dict()) == f
