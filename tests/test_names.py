"""The one session-name rule (``rdmem.names``) and its regular expression say the same thing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdmem.names import MAX_SESSION_CHARS, SESSION_NAME_PATTERN, check_session_name, printable


@pytest.mark.parametrize("name", ["alice", "a b", "mem0:user_id=alice&agent_id=x", "t/acme/trip", "é日本語🙂",
                                  " padded ", "x" * MAX_SESSION_CHARS, "zero\u200bwidth"])
def test_names_that_are_names(name):
    assert check_session_name(name) == name


@pytest.mark.parametrize(("name", "message"), [
    ("", "session '': a session name is 1 to 256 characters, got 0"),
    ("x" * 257, "session 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...': a session name is 1 to 256 characters, got 257"),
    ("a\x00b", "session 'a\\x00b': a session name may not hold control characters or line separators (found '\\x00' at 1)"),
    ("tab\there", "found '\\t' at 3"),
    ("del\x7f", "found '\\x7f' at 3"),
    ("nel\x85", "found '\\x85' at 3"),
    ("csi\x9b", "found '\\x9b' at 3"),
    ("ls\u2028", "found '\\u2028' at 2"),
    ("ps\u2029", "found '\\u2029' at 2"),
    (" ", "session ' ': a session name may not be only whitespace"),
    ("\u3000\u00a0", "may not be only whitespace"),
    ("a\ud800b", "session 'a\\ud800b': a session name must be valid Unicode (found a lone surrogate '\\ud800' at 1)"),
    # what "jos%E9" (Latin-1, not UTF-8) decodes to: "jos%FC" was the same name
    ("jos\ufffd", "session 'jos\ufffd': a session name must be valid Unicode (found U+FFFD, the replacement character, "
                  "at 3: a %-escape or header byte that is not UTF-8? Encode names as UTF-8)"),
])
def test_names_that_are_not_say_why(name, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_session_name(name)


def test_the_field_is_named_and_a_non_string_is_refused():
    with pytest.raises(ValueError, match=r"^user_id ' ': a session name may not be only whitespace$"):
        check_session_name(" ", "user_id")
    with pytest.raises(ValueError, match=r"^session must be a string, got int$"):
        check_session_name(5)


@given(st.text(max_size=300))
def test_the_pattern_and_the_check_agree(text):
    text = text.replace("\x01", "\ufffd")  # now and then the replacement character too
    try:
        check_session_name(text)
        ok = True
    except ValueError:
        ok = False
    matches = re.fullmatch(SESSION_NAME_PATTERN, text) is not None and len(text) <= MAX_SESSION_CHARS
    assert ok == matches


def test_printable_escapes_what_a_terminal_would_act_on():
    assert printable("plain name é") == "plain name é"
    assert printable("a\x1b[31mb\x9b\u2028c\td") == "a\\x1b[31mb\\x9b\\u2028c\\td"
