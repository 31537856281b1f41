"""Online learning: MemoryManager.feedback tilts the value model, boundedly and reversibly."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem import MemoryManager

pytestmark = pytest.mark.slow  # the shipped value model on the real MiniLM vectors


def _history(seed: int) -> tuple[list[dict], set[str]]:
    """Long chatty messages, and short ones carrying numbers that a future task needs."""
    rng = np.random.default_rng(seed)
    chat = [
        "Honestly the weather has been lovely and we walked along the river talking about nothing much at all",
        "We watched a long documentary about penguins and then cooked pasta while chatting about old friends",
        "It was a relaxing weekend with music, some gardening and a lazy afternoon reading on the porch",
        "My neighbour told me a funny story about her cat climbing the curtains during a thunderstorm",
    ]
    msgs, needed = [], set()
    for i in range(40):
        if rng.random() < 0.3:
            text = f"Locker {rng.integers(10, 99)} code is {rng.integers(1000, 9999)}."
            needed.add(f"s{seed}-{i}")
        else:
            text = chat[int(rng.integers(len(chat)))] + f" ({i})"
        msgs.append({"id": f"s{seed}-{i}", "role": "user", "content": text})
    return msgs, needed


def _recall(mem: MemoryManager, needed: set[str]) -> float:
    kept = set(mem.context().kept_ids)
    return len(kept & needed) / len(needed)


def test_feedback_improves_a_synthetic_task_and_resets_exactly() -> None:
    # No streaming compaction; room for every needed message once they are ranked first. A marker per omitted
    # run takes room the ranking then has to earn (with one merged marker the prior alone keeps 10 of 11).
    mem = MemoryManager(budget=250, policy="rd", high=100.0, low=100.0, markers=True)
    train, needed_train = _history(1)
    for m in train:
        mem.add(m)
    before = _recall(mem, needed_train)
    for _ in range(15):
        mem.feedback(sorted(needed_train), 1.0)
        mem.feedback(sorted(set(m["id"] for m in train) - needed_train), 0.0)
    after = _recall(mem, needed_train)
    assert after > before
    assert np.all(np.abs(mem._learning.feedback.delta_) <= 2.0)  # bounded
    mem.reset_feedback()
    assert _recall(mem, needed_train) == pytest.approx(before)


def test_feedback_errors() -> None:
    mem = MemoryManager(budget=100, policy="rd")
    mem.add(role="user", content="hello there")
    with pytest.raises(ValueError, match=r"reward must be in \[0, 1\], got 2"):
        mem.feedback(["m0"], 2)
    with pytest.raises(ValueError, match="unknown ids in feedback"):
        mem.feedback(["nope"], 1.0)
    window = MemoryManager(budget=100, policy="window")
    window.add(role="user", content="hello")
    with pytest.raises(ValueError, match="feedback needs a policy with a learned value model"):
        window.feedback(["m0"], 1.0)


def test_an_id_given_many_times_counts_once() -> None:
    """``ids`` name the messages that were (not) needed: a repeated one is one message (600,000 copies of one
    id took 6.8 s through the API, each scored apart)."""
    shifts = []
    for ids in (["m0", "m1"], ["m0", "m1"] * 50_000):
        mem = MemoryManager(budget=100, policy="rd")
        mem.extend([{"role": "user", "content": "my locker code is 4711"}, {"role": "assistant", "content": "ok"}])
        mem.feedback(ids, 1.0)
        shifts.append(list(mem._learning.feedback.delta_))
    assert shifts[0] == shifts[1] and any(shifts[0])


def test_feedback_is_saved_with_the_session(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    train, needed = _history(2)
    with MemoryManager(budget=150, policy="rd", store=url, session="s", high=100.0, low=100.0) as mem:
        mem.extend(train)
        plain = mem.context().kept_ids
        for _ in range(10):
            mem.feedback(sorted(needed), 1.0)
        tuned, delta = mem.context().kept_ids, mem._learning.feedback.delta_.copy()
    assert tuned != plain
    with MemoryManager(budget=150, policy="rd", store=url, session="s", high=100.0, low=100.0) as mem:
        assert mem.context().kept_ids == tuned  # a reopened session keeps what it learned
        np.testing.assert_array_equal(mem._learning.feedback.delta_, delta)
        mem.reset_feedback()
        assert mem.context().kept_ids == plain
    with MemoryManager(budget=150, policy="rd", store=url, session="s", high=100.0, low=100.0) as mem:
        assert mem.context().kept_ids == plain  # and the reset is saved too
        assert not np.any(mem._learning.feedback.delta_)
    with MemoryManager(budget=150, policy="rd", store=url, session="other", high=100.0, low=100.0) as other:
        other.extend(train)
        assert other.context().kept_ids == plain  # feedback is per session


def test_feedback_given_through_one_manager_tilts_the_other_managers_of_the_session(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    train, needed = _history(3)
    kw = {"budget": 150, "policy": "rd", "store": url, "session": "s", "high": 100.0, "low": 100.0}
    with MemoryManager(**kw) as a, MemoryManager(**kw) as b:
        a.extend(train)
        plain = b.context().kept_ids
        for _ in range(10):
            a.feedback(sorted(needed), 1.0)
        assert b.context().kept_ids == a.context().kept_ids != plain  # b reads the shift from the store
        b.reset_feedback()
        assert a.context().kept_ids == plain


def test_the_ladder_learns_through_its_base() -> None:
    from rdmem.policies import LadderPolicy

    mem = MemoryManager(budget=250, policy=LadderPolicy(), high=100.0, low=100.0)
    train, needed = _history(4)
    mem.extend(train)
    mem.feedback(sorted(needed), 1.0)
    assert np.any(mem._learning.feedback.delta_)
    tuned = mem._learning.policy()
    assert isinstance(tuned, LadderPolicy) and tuned.base.value.prior is not None  # the shifted prior


def test_a_deleted_session_s_feedback_does_not_come_back_in_the_one_begun_under_its_name(tmp_path) -> None:
    """A manager that had given feedback kept its shift after another manager (another process, ``rdmem
    sessions delete``, the service's DELETE) deleted the session, applied it to the new user who wrote under
    the name, and wrote it into the new session's state at its next step (two reviews found it)."""
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    train, needed = _history(4)
    kw = {"budget": 150, "policy": "rd", "store": url, "session": "alice", "high": 100.0, "low": 100.0}
    with MemoryManager(**kw) as a, MemoryManager(**kw) as deleter:
        a.extend(train)
        plain = a.context().kept_ids
        for _ in range(10):
            a.feedback(sorted(needed), 1.0)
        assert a.context().kept_ids != plain
        deleter.clear()
        deleter.extend(train)  # a new user, the same messages
        assert a.context().kept_ids == plain and not np.any(a._learning.feedback.delta_)
        a.feedback([train[0]["id"]], 1.0, learning_rate=1e-9)
        with MemoryManager(**kw) as fresh:
            assert float(np.abs(fresh._learning.feedback.delta_).max()) < 1e-6  # not the old shift
        a.clear()  # its own clear too
        a.extend(train)
        assert not np.any(a._learning.feedback.delta_) and a.stats()["units"] == len(train)


def test_feedback_from_two_managers_at_once_all_counts_and_never_brings_a_deleted_session_back(tmp_path) -> None:
    """Two managers of one session stepping from two threads: a read, a step and a write with no version check
    lost 53 of 80 steps (27 saved); and a step saved after a delete brought the session back, with the feedback.
    Each step is now saved only if the session was not written since it was read (read again and retried)."""
    import threading

    url = f"sqlite:///{tmp_path / 'mem.db'}"
    train, needed = _history(5)
    kw = {"budget": 150, "policy": "rd", "store": url, "session": "s", "high": 100.0, "low": 100.0}
    with MemoryManager(**kw) as a, MemoryManager(**kw) as b:
        a.extend(train)

        def steps(mem: MemoryManager) -> None:
            for _ in range(20):
                mem.feedback(sorted(needed)[:2], 1.0, learning_rate=0.01)

        threads = [threading.Thread(target=steps, args=(m,)) for m in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        store = a._session().store
        assert sum("value_feedback" in r for r in store.compaction_log("s")) == 40
        # A delete between a step's read and its write: the write is refused, the retry finds the ids gone.
        real = store.update_state

        def deleted_first(session, patch, **kw):
            store.update_state = real
            store.delete_session(session)
            return real(session, patch, **kw)

        store.update_state = deleted_first
        with pytest.raises(ValueError, match="unknown ids"):
            a.feedback(sorted(needed)[:2], 1.0)
        assert store.version("s") == 0 and "s" not in [i.session for i in store.sessions()]


def test_feedback_rdmem_0_1_kept_in_the_log_holds_at_every_read_and_goes_with_a_delete(tmp_path) -> None:
    """The shift rdmem 0.1 saved in the session's log only was restored at the first read, then dropped at the
    next (the rule that a session which lost its feedback has none took the state's silence for a loss)."""
    from rdmem.store import open_store

    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    train, _ = _history(6)
    kw = {"budget": 150, "policy": "rd", "store": url, "session": "s", "high": 100.0, "low": 100.0}
    with MemoryManager(**kw) as mem:
        mem.extend(train)
        n = len(mem._learning.feedback.delta_)
    with open_store(url) as store:  # what rdmem 0.1 left: the shift in the log, none in the state
        store.log_compaction("s", {"value_feedback": [0.5] * n})
    with MemoryManager(**kw) as mem, MemoryManager(**kw) as other:
        for _ in range(3):
            mem.context()
            assert float(np.abs(mem._learning.feedback.delta_).max()) == 0.5
        other.clear()
        other.extend(train)
        mem.context()
        assert not np.any(mem._learning.feedback.delta_)
