"""Store checks of what several sessions share: the embedding worker's claims, and the ids of a session name
written again after its delete (part of :data:`rdmem.testing.STORE_CHECKS`)."""

from __future__ import annotations

from ..store import NewUnit, Store, Tier
from ._assert import equal, expect

__all__ = ["check_a_message_behind_another_sessions_backlog_is_claimed_at_the_next_claim",
           "check_a_session_written_again_after_its_delete_never_reuses_an_id", "plain"]


def plain(text: str, uid: str | None = None, tier: Tier = "working") -> NewUnit:
    """A user message of 5 tokens, with its id (``None``: the store's)."""
    return NewUnit({"role": "user", "content": text}, 5, tier=tier, id=uid)


def check_a_session_written_again_after_its_delete_never_reuses_an_id(store: Store, session: str) -> None:
    """A client that kept an old id (a retried delete) must not reach the message written after the session
    was deleted whole and written again."""
    first = store.append(session, [plain("one"), plain("two")])
    store.delete_session(session)
    store.update_state(session, {"k": 1})  # a write that makes the session's row before any message
    again = store.append(session, [plain("three")])
    old = {u.id for u in first.units}
    expect(not old & {u.id for u in again.units},
           f"the session written again gave ids {sorted(u.id for u in again.units)}, which its deleted messages had")
    store.delete_session(session)
    expect(not (old | {u.id for u in again.units}) & {u.id for u in store.append(session, [plain("four")]).units},
           "a session deleted twice reused an id")


def check_a_message_behind_another_sessions_backlog_is_claimed_at_the_next_claim(store: Store, session: str) -> None:
    """One tenant's bulk import must not keep another's new messages from their vectors until it is done."""
    backlog = session + "-backlog"
    store.append(backlog, [plain(f"bulk note {i}", f"b{i}") for i in range(40)])
    store.append(session, [plain("a late note", "late")])
    got = store.claim_unembedded("fair", limit=2, lease=60.0)
    expect(("late" in [u.id for s, u in got if s == session]) and len(got) == 2,
           f"a claim of 2 behind a 40-unit backlog of another session took {[(s, u.id) for s, u in got]}, "
           "not the late note")
    rest = [u.id for s, u in store.claim_unembedded("fair", limit=10**6, lease=60.0) if s == backlog]
    equal(len(rest) + sum(s == backlog for s, _ in got), 40, "the backlog's units claimed in all (none lost)")

