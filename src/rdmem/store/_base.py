"""What every backend shares: argument checks, id allocation, row encoding and decoding, the search cache.

A backend subclasses :class:`BaseStore` and implements the ``_``-prefixed
hooks; the public methods check their arguments the same way for all of
them, so a mistake gets the same error from the in-memory store as from
PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from .._threads import on_one_math_thread
from ..errors import InvalidInput, InvalidType
from ..tokens import message_payload
from ._embeddings import EmbeddingsMixin
from ._keys import check_name, check_tenant
from ._types import (SESSION_CACHES, TIERS, Bounded, Changes, DuplicateIdError, NewUnit, SessionInfo, StoredUnit,
                     StoreError, Tier, VersionConflict, Written, check_prefix, takes_prefix)

__all__ = [
    "BaseStore", "Encoded", "check_name", "check_session", "check_tenant", "searchable", "damaged_unit",
    "decode_unit", "dumps", "allocate_ids", "state_patch", "AUTO_PREFIX",
]

#: Automatic ids are ``m0``, ``m1``, ... (after every id of that form the session has had).
AUTO_PREFIX = "m"
_VALID_ROLES = ("system", "developer", "user", "assistant", "tool")
def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def check_session(session: object) -> None:
    """A session id is a non-empty string without NUL (see :func:`check_name`)."""
    if not isinstance(session, str) or not session:
        raise InvalidInput(f"session must be a non-empty string, got {session!r}")
    check_name(session, "session")


#: The characters of a message the full-text indexes read: PostgreSQL's word vector of one message holds at
#: most 1 MiB (a message of ~1.5 million characters of distinct words failed every write of its session), and
#: both stores index alike. 100,000 characters of the worst text measured take under 0.5 MiB there; the
#: message is stored whole (and its vector reads only its first 256 tokens anyway).
SEARCHABLE_CHARS = 100_000


def searchable(text: str) -> str:
    """A message's text as the full-text indexes read it: its first :data:`SEARCHABLE_CHARS` characters, a NUL
    as a space (the message itself keeps everything, a NUL escaped in its JSON)."""
    return text[:SEARCHABLE_CHARS].replace("\x00", " ")


def _check_tier(tier: object, *, optional: bool = False) -> None:
    if tier in TIERS or (optional and tier is None):
        return
    raise InvalidInput(f"tier must be one of {', '.join(TIERS)}{' or None' if optional else ''}, got {tier!r}")


def _check_ids(ids: object, what: str = "ids") -> list[str]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidType(f"{what} must be a list of message ids, got {type(ids).__name__}")
    bad = [i for i in ids if not isinstance(i, str)]
    if bad:
        raise InvalidType(f"{what} must be strings, got {bad[0]!r}")
    return [i for i in ids if "\x00" not in i]  # no unit has such an id (check_name): it is not in the session


def _check_expect(expect: object) -> None:
    if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int) or expect < 0):
        raise InvalidInput(f"expect must be a session version (an int >= 0) or None, got {expect!r}")


@dataclass(frozen=True)
class Encoded:
    """A new unit as a backend writes it: checked, its JSON made, its vector as float32, its searchable text."""

    id: str | None
    message: str
    tokens: int
    features: str
    embedding: np.ndarray | None
    tier: Tier
    text: str


def _encode(u: object, n: int) -> Encoded:
    where = f"unit {n}"
    if not isinstance(u, NewUnit):
        raise InvalidType(f"{where}: expected a NewUnit, got {type(u).__name__}")
    if u.id is not None and (not isinstance(u.id, str) or not u.id):
        raise InvalidInput(f"{where}: id must be a non-empty string or None (allocated by the store), got {u.id!r}")
    if u.id is not None:
        check_name(u.id, f"{where}: id")
    if not isinstance(u.message, dict) or u.message.get("role") not in _VALID_ROLES:
        raise InvalidInput(f"{where}: message must be a dict with a valid 'role' ({', '.join(_VALID_ROLES)})")
    if isinstance(u.tokens, bool) or not isinstance(u.tokens, (int, np.integer)) or u.tokens < 0:
        raise InvalidInput(f"{where}: tokens must be an int >= 0, got {u.tokens!r}")
    if not isinstance(u.features, dict):
        raise InvalidType(f"{where}: features must be a dict, got {type(u.features).__name__}")
    _check_tier(u.tier)
    emb = None
    if u.embedding is not None:
        emb = np.array(u.embedding, dtype=np.float32).reshape(-1)  # a copy: the caller's array may change
        if not emb.size or not np.isfinite(emb).all():
            raise InvalidInput(f"{where}: embedding must be a non-empty vector of finite numbers")
    message = {k: v for k, v in u.message.items() if k != "id"}
    try:
        text, feats = dumps(message), dumps(u.features)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}: message and features must be JSON ({exc})") from None
    return Encoded(u.id, text, int(u.tokens), feats, emb, u.tier, searchable(message_payload(message)))


def allocate_ids(
    session: str, wanted: Sequence[str | None], next_auto: int, taken: Callable[[list[str]], set[str]]
) -> tuple[list[str], int]:
    """Ids for units to append: explicit ones checked against ``taken``, automatic ones ``m<n>``.

    ``next_auto`` is the session's counter: every automatic id and every
    explicit id of the form ``m<n>`` moves it past ``n``, so an automatic id
    is never one the session has (no lookup needed for them). Runs inside the
    backend's write transaction, so two writers never get one id. Returns
    the ids and the counter's next value.

    >>> allocate_ids("s", [None, "m4", None], 0, lambda ids: set())
    (['m5', 'm4', 'm6'], 7)
    """
    explicit = [i for i in wanted if i is not None]
    seen: set[str] = set()
    for i in explicit:
        if i in seen:
            raise DuplicateIdError(f"session {session!r}: id {i!r} appears twice in one append; nothing was written")
        seen.add(i)
    used = taken(explicit) if explicit else set()
    if used:
        dup = next(i for i in explicit if i in used)
        raise DuplicateIdError(f"session {session!r} already has a message with id {dup!r}; nothing was written")
    for i in explicit:  # first: an automatic id of this append must not be one given in it
        n = auto_number(i)
        if n is not None and n >= next_auto:
            next_auto = n + 1
    out = []
    for uid in wanted:
        if uid is None:
            uid = f"{AUTO_PREFIX}{next_auto}"
            next_auto += 1
        out.append(uid)
    return out, next_auto


def auto_number(uid: str) -> int | None:
    """``n`` for an id of the automatic form ``m<n>`` (digits only, at most 18), else ``None``."""
    digits = uid[len(AUTO_PREFIX):]
    if uid.startswith(AUTO_PREFIX) and digits.isdigit() and digits.isascii() and len(digits) <= 18:
        return int(digits)
    return None


def damaged_unit(where: str, session: str, uid: str, what: str) -> StoreError:
    """The error for a stored unit that cannot be read back: which store, session and unit, and what is wrong."""
    return StoreError(f"{where}: session {session!r}, unit {uid!r}: {what}; the store is damaged (nothing was changed)")


def decode_unit(
    where: str, session: str, uid: str, seq: Any, message: Any, tokens: Any, features: Any,
    embedding: np.ndarray | None, tier: Any,
) -> StoredUnit:
    """A row read back from a database as a :class:`StoredUnit` (``message`` and ``features`` as JSON text).

    A damaged row (edited by hand, or a corrupt file that SQLite still
    opens) is a :class:`StoreError` naming the store, the session and the
    unit, not an exception from deep inside the manager.
    """
    def damaged(what: str) -> StoreError:
        return damaged_unit(where, session, uid, what)

    try:
        msg, feats = json.loads(message), json.loads(features)
    except (TypeError, ValueError) as exc:
        raise damaged(f"stored JSON does not parse ({exc})") from None
    if not isinstance(msg, dict) or msg.get("role") not in _VALID_ROLES:
        raise damaged("the stored message is not a chat message (a JSON object with a valid 'role')")
    if not isinstance(feats, dict):
        raise damaged("the stored features are not a JSON object")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise damaged(f"the stored token count {tokens!r} is not an int >= 0")
    if tier not in TIERS:
        raise damaged(f"the stored tier {tier!r} is not one of {', '.join(TIERS)}")
    return StoredUnit(uid, int(seq), msg, tokens, feats, embedding, tier)


def state_patch(state: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with ``patch`` applied: its keys replace the state's, a ``None`` value removes one."""
    out = dict(state)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


class BaseStore(EmbeddingsMixin):
    """The public store methods, checked once for every backend (see :class:`~rdmem.store.Store`).

    A backend sets ``where`` (the store named in messages), ``_lock`` (an
    ``RLock``) and ``cache_size``, and implements the hooks. Search results
    are cached per session and query, and dropped when the session's version
    moves (also when another process wrote it).
    """

    where: str = "store"
    cache_size: int = 256
    _lock: threading.RLock

    def _init_base(self, cache_size: int) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidInput(f"cache_size must be an int >= 0, got {cache_size!r}")
        self.cache_size = cache_size
        self._lock = threading.RLock()
        self._results: dict[str, tuple[int, OrderedDict[tuple[Any, ...], list[Any]]]] = Bounded(SESSION_CACHES)

    # -- writes ------------------------------------------------------------------
    def append(self, session: str, units: Sequence[NewUnit], *, log: Mapping[str, Any] | None = None,
               expect: int | None = None) -> Written:
        """Add units at the end of ``session`` (created if new), atomically: all or nothing, with ``log``
        appended to the compaction log in the same transaction; with ``expect``, only if the session is at
        that version (else :class:`VersionConflict`, nothing written).

        Ids given are checked (:class:`DuplicateIdError` if the session has
        one already); ``None`` ids become ``m<n>``. Returns the stored units,
        in order, with their ids and places.
        """
        check_session(session)
        if isinstance(units, (str, bytes, Mapping)) or not isinstance(units, Sequence):
            raise InvalidType(f"units must be a list of NewUnit, got {type(units).__name__}")
        _check_expect(expect)
        encoded = [_encode(u, n) for n, u in enumerate(units)]
        record = None if log is None else self._record(log)
        if not encoded:
            v = self.version(session)
            if expect is not None and v != expect:
                raise VersionConflict(f"session {session!r} is at version {v}, not {expect}; nothing was written")
            if record is not None:
                self._log(session, record)
            return Written(v, v)
        if expect is not None:
            return self._append(session, encoded, record, expect)
        # A backend written before ``log`` existed takes two arguments: it is given two when there is no record.
        return self._append(session, encoded, record) if record is not None else self._append(session, encoded)

    def set_tier(
        self, session: str, ids: Sequence[str], tier: Tier, *, expect: int | None = None,
        log: Mapping[str, Any] | None = None,
    ) -> Written:
        """Move units to ``tier`` (ids the session does not have are ignored), with ``log`` appended to the
        compaction log in the same transaction. With ``expect``, only if the session is still at that
        version (else :class:`VersionConflict`, nothing written)."""
        check_session(session)
        _check_tier(tier)
        ids = _check_ids(ids)
        _check_expect(expect)
        record = None if log is None else self._record(log)
        return self._set_tier(session, ids, tier, expect, record)

    def delete(self, session: str, ids: Sequence[str]) -> Written:
        """Delete units of ``session`` for good (ids it does not have are ignored); ``deleted`` says which went."""
        check_session(session)
        return self._delete(session, _check_ids(ids))

    def update_state(self, session: str, patch: Mapping[str, Any], *, expect: int | None = None) -> Written:
        """Change the session's state record (JSON; a key set to ``None`` is removed), creating the session
        if needed. With ``expect``, only if the session is still at that version."""
        check_session(session)
        if not isinstance(patch, Mapping):
            raise InvalidType(f"patch must be a dict, got {type(patch).__name__}")
        _check_expect(expect)
        try:
            dumps(dict(patch))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"session state must be JSON ({exc})") from None
        return self._update_state(session, dict(patch), expect)

    def log_compaction(self, session: str, record: Mapping[str, Any]) -> None:
        """Append ``record`` (JSON) to the session's compaction log."""
        check_session(session)
        self._log(session, self._record(record))

    @staticmethod
    def _record(record: Mapping[str, Any]) -> str:
        if not isinstance(record, Mapping):
            raise InvalidType(f"a log record must be a dict, got {type(record).__name__}")
        try:
            return dumps(dict(record))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"a log record must be JSON ({exc})") from None

    def delete_session(self, session: str) -> None:
        """Delete ``session``: its units, their index entries, its state and its log. Irreversible."""
        check_session(session)
        self._delete_session(session)
        with self._lock:
            self._results.pop(session, None)

    # -- reads -------------------------------------------------------------------
    def load(self, session: str, *, offset: int = 0, limit: int | None = None) -> list[StoredUnit]:
        """Units of ``session`` in order, from the ``offset``-th on, at most ``limit`` of them."""
        check_session(session)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInput(f"offset must be an int >= 0, got {offset!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInput(f"limit must be an int >= 0 or None, got {limit!r}")
        return self._load(session, offset, limit)

    def changes(self, session: str, since: int = 0, *, rows: int | None = None) -> Changes:
        """What changed in ``session`` after version ``since`` (0: everything); see :class:`Changes`. A full
        read with ``rows`` holds the newest ``rows`` places and the working units before them (``start``)."""
        check_session(session)
        _check_expect(since)
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise InvalidInput(f"rows must be an int >= 1 or None, got {rows!r}")
        return self._changes(session, since, rows)

    def pick(self, session: str, *, ids: Sequence[str] = (), places: Sequence[int] = ()) -> list[StoredUnit]:
        """The units of ``session`` with one of ``ids`` or at one of ``places`` (``seq``), in order; those it
        does not have are left out. One read however far back they are (a view's units older than it holds)."""
        check_session(session)
        ids = _check_ids(ids)
        if isinstance(places, (str, bytes)) or not all(isinstance(p, int) and not isinstance(p, bool) for p in places):
            raise InvalidInput(f"places must be a list of ints, got {places!r}")
        if not ids and not places:
            return []
        return self._pick(session, ids, sorted(set(places)))

    def version(self, session: str) -> int:
        """The session's current version (0 if there is no such session)."""
        check_session(session)
        return self._version(session)

    def compaction_log(self, session: str) -> list[dict[str, Any]]:
        """The compaction log of ``session``, oldest first, each record with its ``time``."""
        check_session(session)
        return [dict(json.loads(rec), time=t) for t, rec in self._read_log(session)]

    @on_one_math_thread
    def search(
        self, session: str, query: str, query_embedding: np.ndarray | None, *, k: int, tier: Tier | None = None
    ) -> list[tuple[str, float]]:
        """Best ``k`` units of ``session`` (of ``tier``, or all) for the query: lexical and dense rankings
        fused by reciprocal rank. ``(id, score)`` pairs, best first; cached until the session changes."""
        check_session(session)
        if not isinstance(query, str):
            raise InvalidType(f"query must be a string, got {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise InvalidInput(f"k must be an int >= 0, got {k!r}")
        _check_tier(tier, optional=True)
        qvec = None
        if query_embedding is not None:
            qvec = np.asarray(query_embedding, dtype=np.float32).reshape(-1)
            if not qvec.size or not np.isfinite(qvec).all():
                raise InvalidInput("query_embedding must be a non-empty vector of finite numbers")
        if k == 0:
            return []
        version = self._version(session)
        if not version:
            return []
        key = (query, None if qvec is None else hashlib.blake2b(qvec.tobytes(), digest_size=16).digest(), int(k), tier)
        with self._lock:
            cached = self._results.get(session)
            if cached is not None and cached[0] == version and key in cached[1]:
                cached[1].move_to_end(key)
                return list(cached[1][key])
            result = self._search(session, query, qvec, int(k), tier)
            if self.cache_size:
                if cached is None or cached[0] != version:
                    cached = self._results[session] = (version, OrderedDict())
                cached[1][key] = result
                while len(cached[1]) > self.cache_size:
                    cached[1].popitem(last=False)
        return list(result)

    def sessions(self, prefix: str = "") -> list[SessionInfo]:  # a prefix: the store reads those sessions only
        prefix = check_prefix(prefix)
        found = self._sessions(prefix) if takes_prefix(type(self)) else self._sessions()
        return [i for i in found if i.session.startswith(prefix)]

    def close(self) -> None:
        with self._lock:
            self._close()
            self._results.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hooks ---------------------------------------------------------------------
    def _append(self, session: str, units: list[Encoded], log: str | None = None, expect: int | None = None) -> Written:
        raise NotImplementedError

    def _set_tier(self, session: str, ids: list[str], tier: Tier, expect: int | None, log: str | None) -> Written:
        raise NotImplementedError

    def _delete(self, session: str, ids: list[str]) -> Written:
        raise NotImplementedError

    def _update_state(self, session: str, patch: dict[str, Any], expect: int | None) -> Written:
        raise NotImplementedError

    def _log(self, session: str, record: str) -> None:
        raise NotImplementedError

    def _read_log(self, session: str) -> list[tuple[float, str]]:
        raise NotImplementedError

    def _delete_session(self, session: str) -> None:
        raise NotImplementedError

    def _load(self, session: str, offset: int, limit: int | None) -> list[StoredUnit]:
        raise NotImplementedError

    def _changes(self, session: str, since: int, rows: int | None) -> Changes:
        raise NotImplementedError

    def _pick(self, session: str, ids: list[str], places: list[int]) -> list[StoredUnit]:
        raise NotImplementedError

    def _version(self, session: str) -> int:
        raise NotImplementedError

    def _search(
        self, session: str, query: str, qvec: np.ndarray | None, k: int, tier: Tier | None
    ) -> list[tuple[str, float]]:
        raise NotImplementedError

    def _sessions(self, prefix: str = "") -> list[SessionInfo]:
        raise NotImplementedError

    def _close(self) -> None:
        pass

