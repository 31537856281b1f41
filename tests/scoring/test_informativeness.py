"""How informative a query is: small talk weighs nothing, a pointed question everything."""

from __future__ import annotations

import time

import pytest

from rdmem.scoring import Informativeness, ScoringContext, asks_the_session, query_specificity
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


@pytest.mark.parametrize("query", [
    "Wow, Melanie! How did your painting go?",  # the listener, about the listener: something new
    "That sunrise must have been lovely. Did you paint it at the lake?",
    "Adoption agencies are such a big step, aren't they?",  # a tag on a statement
    "Hey Melanie, how's it going?",  # a pleasantry that names her
])
def test_a_question_that_asks_for_nothing_the_session_holds_counts_as_a_statement(
    session: ScoringContext, query: str
) -> None:
    # Each names what the session holds (Melanie, sunrise, adoption agencies), so as a question it would decide
    # alone; the latest turn of a chat is mostly this, and relevance to it pushed out what the prior kept.
    assert query_specificity(query, session)[0] >= 1
    assert not query_specificity(query, session)[1]
    assert _weight(session, query) == pytest.approx(0.25)


@pytest.mark.parametrize("query", [
    "What did you say about the support group?",  # what was said before
    "Did you tell me which adoption agencies Caroline looked at?",  # the speaker in it
    "How did the support group go? Did you paint the sunrise again?",  # one question asks the session
    "Remind me, when did Melanie paint a sunrise?",
])
def test_a_question_about_what_was_said_or_done_still_decides(session: ScoringContext, query: str) -> None:
    assert query_specificity(query, session)[1]
    assert _weight(session, query) == 1.0


def test_which_questions_ask_the_session() -> None:
    assert asks_the_session("Which city have both Jean and John visited?")
    assert asks_the_session("Where should we go next?")  # first person: the speakers' own plans
    assert asks_the_session("What was the name of the hotel you booked for me?")
    assert asks_the_session("What did you recommend last time?")
    assert not asks_the_session("Got any plans for the weekend, yeah?")
    assert not asks_the_session("What made you start playing it?")
    assert not asks_the_session("Wow! Got any paintings to show?")  # the listener left out
    assert not asks_the_session("Any plans for the weekend?")
    assert asks_the_session("Any news on my refund?")
    assert not asks_the_session("Traveling is amazing, isn't it? Do you speak any other languages?")
    assert not asks_the_session("How\u2019s it going?")  # a curly apostrophe, as phones type it
    assert not asks_the_session("Wow! How did your game go?! \U0001f60a")
    assert not asks_the_session("Where did you park?!")  # "?!" ends a question
    assert asks_the_session("Which restaurant did you book for us?")
    assert asks_the_session("I told you my sister\u2019s name, didn\u2019t I?")  # a tag, but what was said before
    assert asks_the_session("How\u2019s it going? I forgot the dosage you gave me last week.")
    assert asks_the_session('Did I tell you what Anna said when I asked "how are you?"')  # a pleasantry quoted
    assert asks_the_session("Any idea what the dosage was?")
    assert asks_the_session("How's it going with the move?")
    assert not asks_the_session("Hi John, how\u2018s it going?")
    assert asks_the_session("No question here.")  # nothing asked with '?': the caller's question flag decides


@pytest.mark.parametrize("query", [
    "Which files did you change?", "What command did you run?", "Which hotel did you book?",
    "What was the name of the function you refactored?", "What were your findings?", "Any update on the ticket?",
    "Anything in the logs?", "Got the link to that doc?", "Ever figured out the memory leak?", "How was it resolved?",
    "La reuni\u00f3n es a las 3, no?",  # a tag in English only
])
def test_what_an_agent_did_or_found_is_asked_of_the_session(query: str) -> None:
    # An assistant's user asks it about its own work: a question to the listener about the listener, but about
    # what it did or produced, which the session holds (a review of the first version: all counted a quarter).
    assert asks_the_session(query)


def test_a_request_to_the_listener_is_a_request(session: ScoringContext) -> None:
    for query in ("Can you summarise the support group for me?", "How's it going? Remind me about the sunrise."):
        assert query_specificity(query, session)[1]
        assert _weight(session, query) == 1.0


def test_it_takes_time_in_proportion_to_the_query() -> None:
    # A long run of '?' (or of pleasantries) without a space is one sentence: a pattern that scanned to its end
    # from every '?' took minutes on a 200,000-character message. Linear: 4x the text, about 4x the time.
    def took(n: int) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for text in ("?" * n + "x", "?)" * (n // 2) + "x", "how are you " * (n // 12) + "?x?"):
                asks_the_session(text)
            best = min(best, time.perf_counter() - t0)
        return best

    assert took(16_000) < 10 * took(4_000)


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
