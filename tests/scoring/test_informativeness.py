"""How informative a query is: small talk weighs nothing, a pointed question everything."""

from __future__ import annotations

import pytest

from rdmem.scoring import Informativeness, ScoringContext, query_specificity
from rdmem.tokens import get_tokenizer
from rdmem.units import encode_units

SESSION = [
    "[1:56 pm on 8 May, 2023] Caroline: I went to an LGBTQ support group yesterday and it was so powerful.",
    "[1:56 pm on 8 May, 2023] Melanie: Wow, that's great! I painted a sunrise at the lake last week.",
    "[1:56 pm on 8 May, 2023] Caroline: Thanks Mel! I'm researching adoption agencies now.",
    "[1:56 pm on 8 May, 2023] Melanie: That's awesome, Caroline! Thanks for sharing.",
] + [f"[2 pm on 9 May, 2023] {'Caroline' if i % 2 else 'Melanie'}: Thanks, that sounds great!" for i in range(40)]


@pytest.fixture(scope="module")
def session() -> ScoringContext:
    units = encode_units([{"role": "user", "content": t} for t in SESSION], get_tokenizer(len))
    return ScoringContext(units)


def _weight(session: ScoringContext, query: str, **kw: float) -> float:
    return Informativeness(**kw).weight(ScoringContext(session.units, query=query))


@pytest.mark.parametrize("query", ["ok, thanks", "go on", "Thanks, that sounds great!", "What's next?", "  "])
def test_small_talk_leaves_the_prior_in_charge(session: ScoringContext, query: str) -> None:
    assert _weight(session, query) == 0.0


@pytest.mark.parametrize("query", [
    "When did Melanie paint a sunrise?",
    "What is Caroline's relationship status?",  # a possessive still names her
    "Which adoption agencies did she look at?",
    "Please remind me what the support group was like.",
])
def test_a_question_that_names_what_the_session_holds_lets_relevance_decide(session: ScoringContext, query: str) -> None:
    assert _weight(session, query) == 1.0


def test_a_statement_counts_less_than_a_question(session: ScoringContext) -> None:
    statement = "[3 pm on 10 May, 2023] Caroline: I painted the lake again at sunrise."
    assert _weight(session, statement) == pytest.approx(0.25)
    assert _weight(session, statement, statement=0.5) == pytest.approx(0.5)


def test_specificity_counts_rare_words_names_and_dates_the_session_can_match(session: ScoringContext) -> None:
    # "sunrise" is rare here (one message), "Melanie" a name (2), "2023" a date and a number (1 + 1, though
    # every label has it); "zeppelin" and "paint" ("painted" is) are not in the session.
    spec, asks = query_specificity("Did Melanie paint a sunrise or a zeppelin in 2023?", session)
    assert (spec, asks) == (5.0, True)
    # The transcript label names a speaker and a date, but that is structure, not what the turn asks.
    spec, asks = query_specificity("[1:56 pm on 8 May, 2023] Caroline: ok", session)
    assert (spec, asks) == (0.0, False)


def test_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match=r"full must be a number > 0, got 0"):
        Informativeness(full=0)
    with pytest.raises(ValueError, match=r"statement must be a number in \[0, 1\], got 1.5"):
        Informativeness(statement=1.5)
