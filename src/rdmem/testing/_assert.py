"""Failures that say what was wrong, and that ``python -O`` keeps (it strips ``assert`` statements)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["expect", "equal", "raises", "warns"]


def expect(condition: object, failure: str) -> None:
    """Fail with ``failure`` unless ``condition`` holds."""
    if not condition:
        raise AssertionError(failure)


def equal(got: object, want: object, what: str) -> None:
    """Fail unless ``got == want``, naming ``what`` and both values."""
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, expected {want!r}")


def raises(exc: type[BaseException] | tuple[type[BaseException], ...], match: str, call: Callable[[], Any],
           what: str) -> BaseException:
    """Fail unless ``call()`` raises ``exc`` with a message that ``re.search``-matches ``match``."""
    try:
        call()
    except exc as caught:
        if not re.search(match, str(caught)):
            raise AssertionError(f"{what}: raised {type(caught).__name__}({str(caught)!r}), "
                                 f"whose message does not match {match!r}") from caught
        return caught
    except Exception as other:
        raise AssertionError(f"{what}: raised {type(other).__name__}({str(other)!r}), expected "
                             f"{getattr(exc, '__name__', exc)} matching {match!r}") from other
    raise AssertionError(f"{what}: raised nothing, expected {getattr(exc, '__name__', exc)} matching {match!r}")


@contextmanager
def warns(category: type[Warning], match: str, what: str) -> Iterator[None]:
    """Fail unless the block warns ``category`` with a message matching ``match``."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    messages = [str(w.message) for w in seen if issubclass(w.category, category)]
    if not any(re.search(match, m) for m in messages):
        raise AssertionError(f"{what}: no {category.__name__} matching {match!r} (warned: {messages})")
