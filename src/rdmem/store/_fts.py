"""Full-text ranking with SQLite's FTS5: one lexical ranking for the SQLite store and the in-memory store.

The two stores used to rank differently (FTS5's BM25 with Porter stemming on
disk, a Python BM25 without stemming in memory), so one history gave other
selections in-process than through the service. Both now ask an FTS5 index
the same question: :func:`ranked_match` picks the words to rank, ``ORDER BY
bm25(...), rowid`` ranks them. The in-memory store keeps its index in an
in-memory SQLite database (:class:`MemoryIndex`).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Iterable

from ..errors import InvalidInput
from ._search import query_terms, rarest_terms

__all__ = ["FTS_CREATE", "FTS_TOKENIZE", "LEXICAL_ROWS", "check_lexical_rows", "fts_table", "ranked_match", "ranked_rows", "MemoryIndex"]

FTS_CREATE = "CREATE VIRTUAL TABLE IF NOT EXISTS {} USING fts5(body, content='', tokenize='{}')"
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
#: The default for ``lexical_rows``: at most this many full-text matches are ranked per search.
LEXICAL_ROWS = 1000
_WORD = re.compile(r"\w+")


def check_lexical_rows(lexical_rows: object) -> None:
    if isinstance(lexical_rows, bool) or not isinstance(lexical_rows, int) or lexical_rows < 1:
        raise InvalidInput(f"lexical_rows must be an int >= 1, got {lexical_rows!r}")


def fts_table(session: str) -> str:
    """The name of a session's FTS5 table (session names may contain anything; this is plain hex)."""
    return "fts_" + hashlib.blake2b(session.encode("utf-8"), digest_size=10).hexdigest()


def ranked_match(
    db: sqlite3.Connection, fts: str, query: str, cap: int, matches: dict[str, int]
) -> tuple[str, tuple[int, ...]] | None:
    """The ``MATCH`` expression to rank for ``query`` in table ``fts``, and the lowest rowid to rank
    (``()``: all), or ``None`` when no query word matches.

    Ranking costs a few microseconds per matching row, and a common word
    ("Caroline" in Caroline's chats) can match a third of 100,000 units.
    So, like Lucene's common-terms query, the rarest query words are kept
    while their matches add up to at most ``cap`` (the rarest is always
    kept); the words left out carry the least BM25 weight. If even the
    rarest word is that common, only its most recent ``cap`` matches are
    ranked. ``matches`` memoises each word's (capped) match count; the caller
    clears it when the table changes.
    """
    words = list(dict.fromkeys(w for t in query_terms(query) for w in _WORD.findall(t)))
    if not words:
        return None
    count_sql = f"SELECT count(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT {cap + 1})"
    for w in words:
        if w not in matches:
            matches[w] = int(db.execute(count_sql, (f'"{w}"',)).fetchone()[0])
    kept, total = rarest_terms({w: matches[w] for w in words}, cap)
    if not kept:
        return None
    match = " OR ".join(f'"{w}"' for w in kept)
    if total <= cap:
        return match, ()
    row = db.execute(
        f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET {cap - 1}", (match,)
    ).fetchone()
    return match, (int(row[0]),) if row else ()


def ranked_rows(db: sqlite3.Connection, fts: str, match: str, since: tuple[int, ...], limit: int) -> list[int]:
    """Rowids of the best ``limit`` rows for a :func:`ranked_match` result: BM25, then rowid."""
    sql = f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? " + ("AND rowid >= ? " if since else "")
    sql += f"ORDER BY bm25({fts}), rowid LIMIT ?"
    return [int(r[0]) for r in db.execute(sql, (match, *since, limit))]


class MemoryIndex:
    """One FTS5 table per session in an in-memory SQLite database, for :class:`~.memory.MemoryStore`.

    Not locked: the store calls it under its own lock.
    """

    def __init__(self, lexical_rows: int = LEXICAL_ROWS) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._tables: set[str] = set()
        self._matches: dict[str, dict[str, int]] = {}
        self.lexical_rows = lexical_rows

    def add(self, session: str, rows: Iterable[tuple[int, str]]) -> None:
        """Index ``(rowid, text)`` rows of ``session``; rowids grow with insertion."""
        fts = self._table(session, create=True)
        self._db.executemany(f"INSERT INTO {fts} (rowid, body) VALUES (?, ?)", rows)
        self._matches.pop(session, None)

    def remove(self, session: str, rows: Iterable[tuple[int, str]]) -> None:
        """Take ``(rowid, text)`` rows out of ``session``'s index (the texts they were added with)."""
        fts = self._table(session)
        if fts is not None:
            self._db.executemany(f"INSERT INTO {fts} ({fts}, rowid, body) VALUES ('delete', ?, ?)", rows)
            self._matches.pop(session, None)

    def drop(self, session: str) -> None:
        fts = self._table(session)
        if fts is not None:
            self._db.execute(f"DROP TABLE {fts}")
            self._tables.discard(fts)
            self._matches.pop(session, None)

    def rank(self, session: str, query: str, limit: int) -> list[int]:
        """Rowids of ``session``'s best ``limit`` matches for ``query``, best first (as the SQLite store ranks)."""
        fts = self._table(session)
        if fts is None or limit <= 0:
            return []
        found = ranked_match(self._db, fts, query, self.lexical_rows, self._matches.setdefault(session, {}))
        return [] if found is None else ranked_rows(self._db, fts, *found, limit)

    def _table(self, session: str, *, create: bool = False) -> str | None:
        fts = fts_table(session)
        if fts not in self._tables:
            if not create:
                return None
            self._db.execute(FTS_CREATE.format(fts, FTS_TOKENIZE))
            self._tables.add(fts)
        return fts
