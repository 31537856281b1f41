"""A small conversation for the language model's tests (the ``smollm`` fixture is in tests/conftest.py)."""

from __future__ import annotations

from ..conftest import LM_CACHE  # noqa: F401 - the tests here import it from this module


# A short conversation with one fact worth keeping among pleasantries.
FACT = "[2:10 pm on 3 June, 2023] Caroline: I adopted a puppy last week, a beagle named Biscuit."
CHAT = [
    "[2:01 pm on 3 June, 2023] Melanie: Hey Caroline! How are you doing today?",
    "[2:02 pm on 3 June, 2023] Caroline: Hi Mel! I'm good, thanks, how about you?",
    "[2:03 pm on 3 June, 2023] Melanie: Pretty good, just a busy week, you know how it is.",
    "[2:04 pm on 3 June, 2023] Caroline: Oh totally, same here. It's been a lot.",
    "[2:05 pm on 3 June, 2023] Melanie: Haha yes. Anyway, it's nice to chat again!",
    "[2:06 pm on 3 June, 2023] Caroline: Yes, it's always nice. Thanks for reaching out.",
    "[2:07 pm on 3 June, 2023] Melanie: Anytime! Talk soon, take care.",
]


def conversation(with_fact: bool = True) -> list[dict]:
    lines = CHAT[:3] + ([FACT] if with_fact else []) + CHAT[3:]
    return [{"id": f"m{i}", "role": "user" if "Caroline" in t.split("]")[1][:12] else "assistant", "content": t}
            for i, t in enumerate(lines)]
