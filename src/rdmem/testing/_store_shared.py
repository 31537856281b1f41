"""Store checks of what several sessions share: the embedding worker's claims, the ids of a session name
written again after its delete, and a listing of the sessions under a prefix (part of
:data:`rdmem.testing.STORE_CHECKS`)."""

from __future__ import annotations

from ..errors import InvalidInput
from ..store import NewUnit, Store, Tier
from ._assert import equal, expect, raises

__all__ = ["check_a_message_behind_another_sessions_backlog_is_claimed_at_the_next_claim",
           "check_a_session_written_again_after_its_delete_never_reuses_an_id",
           "check_sessions_under_a_prefix_are_listed_and_no_other", "plain"]


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



def check_sessions_under_a_prefix_are_listed_and_no_other(store: Store, session: str) -> None:
    """``sessions(prefix)``: a tenant's listing (its names share a prefix) holds its sessions, by name, and no
    other (not one whose name is the prefix's next string, nor the prefix itself), with their counts."""
    inside = [f"{session}/a", f"{session}/b", f"{session}/b/c", f"{session}/\U0010ffff"]
    for name in [f"{session}", f"{session}0", f"{session}.", *inside]:
        store.append(name, [plain("one"), plain("two", tier="archive")])
    got = store.sessions(f"{session}/")
    equal([i.session for i in got], sorted(inside), f"sessions({session + '/'!r})")
    equal([(i.units, i.working, i.archived) for i in got], [(2, 1, 1)] * len(inside), "the counts of the listed")
    every = [i.session for i in store.sessions()]
    expect(set(inside) | {session, f"{session}0"} <= set(every), "sessions() without a prefix lists them all")
    equal([i.session for i in store.sessions(f"{session}/zzz")], [], "an unused prefix")
    raises(InvalidInput, "prefix must be a string", lambda: store.sessions(7),  # type: ignore[arg-type]
           "a prefix that is not a string")
