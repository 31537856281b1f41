"""``SQLiteStore.check()``: a full consistency check of a store file (slow: reads everything)."""

from __future__ import annotations

import sqlite3

__all__ = ["check_file"]


def check_file(db: sqlite3.Connection) -> list[str]:
    """Problems found (empty when sound): SQLite's integrity check, each session's full-text index holding
    exactly the session's units, and its size and places (0, 1, ...) as its row says; or why it is unreadable."""
    try:
        return _problems(db)
    except sqlite3.DatabaseError as exc:
        return [f"unreadable: {exc}"]


def _problems(db: sqlite3.Connection) -> list[str]:
    problems = [r[0] for r in db.execute("PRAGMA integrity_check") if r[0] != "ok"]
    orphans = db.execute(
        "SELECT count(DISTINCT session) FROM units WHERE session NOT IN (SELECT session FROM sessions)"
    ).fetchone()[0]
    if orphans:
        problems.append(f"{orphans} sessions have units but no sessions row")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE name GLOB 'fts_*'")}
    for session, fts in db.execute("SELECT session, fts FROM sessions").fetchall():
        if fts not in tables:
            problems.append(f"session {session!r}: full-text table {fts} is missing")
            continue
        try:
            db.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"session {session!r}: full-text index: {exc}")
        missing = db.execute(
            f"SELECT count(*) FROM units WHERE session = ? AND uid NOT IN (SELECT rowid FROM {fts})", (session,)
        ).fetchone()[0]
        extra = db.execute(
            f"SELECT count(*) FROM {fts} WHERE rowid NOT IN (SELECT uid FROM units WHERE session = ?)", (session,)
        ).fetchone()[0]
        if missing or extra:
            problems.append(
                f"session {session!r}: {missing} units not in the full-text index, {extra} index rows without a unit"
            )
    known = {r[0] for r in db.execute("SELECT fts FROM sessions")}
    stray = {"_".join(t.split("_")[:2]) for t in tables} - known
    if stray:
        problems.append(f"full-text tables without a session: {', '.join(sorted(stray))}")
    duplicates = db.execute(
        "SELECT count(*) FROM (SELECT 1 FROM units GROUP BY session, seq HAVING count(*) > 1)"
    ).fetchone()[0]
    if duplicates:
        problems.append(f"{duplicates} places (session, seq) are held by more than one unit")
    for session, n, tokens, next_seq, count, total, top in db.execute(
            "SELECT s.session, s.n_units, s.n_tokens, s.next_seq, count(u.uid), coalesce(sum(u.tokens), 0), "
            "coalesce(max(u.seq), -1) FROM sessions s LEFT JOIN units u ON u.session = s.session GROUP BY s.session"):
        if (n, tokens, next_seq, top + 1) != (count, total, count, count):
            problems.append(f"session {session!r}: its row says {n} units, {tokens} tokens, next place {next_seq}; "
                            f"it holds {count} units, {total} tokens, places up to {top}")
    return problems
