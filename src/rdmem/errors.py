"""One exception tree: whose fault an error is decides how it is reported.

- :class:`RdmemError` is the root of every error rdmem raises on purpose.
- :class:`InvalidInput` (also a ``ValueError``): the caller gave something
  it can fix; the message names the field, the value and what is allowed.
  :class:`InvalidType` is the same for a value of the wrong type (also a
  ``TypeError``, as it always was). The service answers these, and only
  these, with a 4xx.
- :class:`MissingDependency` (also an ``ImportError``): an optional part is
  not installed; the message says what to ``pip install``.
- :class:`StoreError` (also a ``RuntimeError``): the store cannot be used
  (unreachable, damaged, read-only, written by a newer rdmem). Its
  caller's-fault children are :class:`DuplicateIdError` and
  :class:`UnknownIdError`; :class:`VersionConflict` says another writer
  got there first.

Anything else that escapes rdmem is a bug: the service answers it with a 500
and an error id, and logs its traceback under that id.

>>> from rdmem.errors import InvalidInput
>>> from rdmem import check_budget
>>> try:
...     check_budget(0)
... except InvalidInput as exc:
...     print(exc, isinstance(exc, ValueError))
budget must be > 0 tokens, got 0 True
"""

from __future__ import annotations

__all__ = [
    "RdmemError", "InvalidInput", "InvalidType", "MissingDependency", "StoreError", "WriteOutcomeUnknown",
    "DuplicateIdError", "UnknownIdError", "VersionConflict",
]


class RdmemError(Exception):
    """The root of every error rdmem raises on purpose."""


class InvalidInput(RdmemError, ValueError):
    """Something the caller can fix: a bad argument, message, name or request field."""


class InvalidType(InvalidInput, TypeError):
    """An argument of the wrong type (an :class:`InvalidInput` that is also a ``TypeError``)."""


class MissingDependency(RdmemError, ImportError):
    """An optional part is not installed; the message says what to ``pip install``."""


class StoreError(RdmemError, RuntimeError):
    """The store cannot be used: unreachable, corrupt, read-only, or written by a newer rdmem."""


class WriteOutcomeUnknown(StoreError):
    """The store went away during a write, after it was sent: it may or may not have been stored (a commit
    whose answer was lost). Read before writing it again, or it may be stored twice."""


class DuplicateIdError(StoreError, InvalidInput):
    """A message id the session already has (nothing was written; the session is unchanged and usable)."""


class UnknownIdError(InvalidInput):
    """Message ids the session does not have (nothing was changed)."""


class VersionConflict(StoreError):
    """The session changed since the version a conditional write expected (nothing was written)."""
