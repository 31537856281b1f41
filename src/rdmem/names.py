"""What a session's name may be: the one rule of every front door (REST, mem0's ids, MCP, the CLI).

A name is 1 to :data:`MAX_SESSION_CHARS` characters, not only whitespace,
and holds no character a terminal or a log line would act on: no C0 or C1
control character (``\\x00``–``\\x1f``, DEL, ``\\x80``–``\\x9f``: NEL, the
terminal's CSI, ...) and no line or paragraph separator (U+2028, U+2029),
and it is valid Unicode: no lone surrogate (a JSON body can carry one; no
store, header or JSON encoder writes it) and no U+FFFD, the replacement
character, which is what a URL's or header's bytes that were not UTF-8 decode
to (``jos%E9`` and ``jos%FC``, Latin-1 escapes, were one name). :data:`SESSION_NAME_PATTERN` says
the rest as a regular expression (for the OpenAPI document);
:func:`printable` shows any text safely on a terminal.

>>> check_session_name("alice/trip-2025")
'alice/trip-2025'
>>> check_session_name("a\\x1b[31mb", "user_id")
Traceback (most recent call last):
...
rdmem.errors.InvalidInput: user_id 'a\\x1b[31mb': a session name may not hold control characters or line separators (found '\\x1b' at 1)
"""

from __future__ import annotations

import re

from .errors import InvalidInput, InvalidType

__all__ = ["MAX_SESSION_CHARS", "SESSION_NAME_PATTERN", "check_session_name", "printable"]

MAX_SESSION_CHARS = 256
_FORBIDDEN = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
#: The rule as a regular expression (Python ``re``, ECMA-262 and Rust's regex read it alike).
_NOT = f"{_FORBIDDEN}\\ufffd"  # and the replacement character (below)
SESSION_NAME_PATTERN = f"^[^{_NOT}]*[^\\s{_NOT}][^{_NOT}]*$"
_BAD = re.compile(f"[{_FORBIDDEN}]")


def _shown(name: str) -> str:
    return repr(name[:40] + "..." if len(name) > 40 else name)


def check_session_name(name: object, field: str = "session") -> str:
    """``name`` if it is a session name; else an ``InvalidInput`` naming ``field``, the value and the rule."""
    if not isinstance(name, str):
        raise InvalidType(f"{field} must be a string, got {type(name).__name__}")
    if not 1 <= len(name) <= MAX_SESSION_CHARS:
        raise InvalidInput(f"{field} {_shown(name)}: a session name is 1 to {MAX_SESSION_CHARS} characters, "
                         f"got {len(name)}")
    bad = _BAD.search(name)
    if bad is not None:
        raise InvalidInput(f"{field} {_shown(name)}: a session name may not hold control characters or line "
                         f"separators (found {bad.group()!r} at {bad.start()})")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:  # a JSON body can carry one ("\\ud800"); no regex flavour says so
        raise InvalidInput(f"{field} {_shown(name)}: a session name must be valid Unicode (found a lone surrogate "
                           f"{name[exc.start]!r} at {exc.start})") from None
    if "\ufffd" in name:  # what undecodable bytes became: two different names would be one
        raise InvalidInput(f"{field} {_shown(name)}: a session name must be valid Unicode (found U+FFFD, the "
                           f"replacement character, at {name.index(chr(0xFFFD))}: a %-escape or header byte that is "
                           f"not UTF-8? Encode names as UTF-8)")
    if not name.strip():
        raise InvalidInput(f"{field} {_shown(name)}: a session name may not be only whitespace")
    return name


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or hide shown as an escape (``\\x1b``,
    ``\\u2028``): names stored before the rule, or by another program, print as one safe line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
