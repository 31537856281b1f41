"""The session service: the rules every front door asks instead of deciding (rdmem.sessions)."""

from __future__ import annotations

import pytest

from rdmem import MemoryManager
from rdmem.errors import InvalidInput
from rdmem.policies import get_policy
from rdmem.history import resend_key
from rdmem.sessions import MODES, embedder_for, first_unseen, needs_embedder, policy_for, session_name

from ._checks import HashingEmbedder


def test_a_mode_names_a_registered_policy_and_a_caller_gives_a_policy_or_a_mode_not_both():
    assert {m: policy_for(mode=m) for m in MODES} == {"qa": "rd", "task": "rd-task", "roleplay": "rd-roleplay",
                                                      "creative": "rd-creative"}
    assert all(get_policy(policy_for(mode=m)).name == policy_for(mode=m) for m in MODES)
    with pytest.raises(InvalidInput, match="give a policy or a mode, not both"):
        policy_for("rd", "task")
    with pytest.raises(InvalidInput, match="unknown mode 'poetry'; choose one of qa, task, roleplay, creative"):
        policy_for(mode="poetry")
    with pytest.raises(InvalidInput, match="unknown policy 'nope'"):
        policy_for("nope")


def test_the_wire_types_offer_exactly_the_services_modes():
    from typing import get_args

    from rdmem.server.protocol import ContextRequest

    offered = [a for a in get_args(ContextRequest.model_fields["mode"].annotation) if a is not type(None)]
    assert tuple(get_args(offered[0])) == MODES


def test_an_embedder_is_loaded_only_when_the_policy_needs_one_or_the_caller_chose_one():
    emb = HashingEmbedder()
    assert not needs_embedder("window") and embedder_for("window") is None
    assert needs_embedder("window", emb) and embedder_for("window", emb) is emb  # chosen: search ranks by meaning
    assert needs_embedder("rd") and embedder_for("rd", emb) is emb
    with pytest.raises(InvalidInput, match="unknown policy"):
        needs_embedder("nope", emb)
    assert session_name("alice/trip") == "alice/trip"
    with pytest.raises(InvalidInput, match="may not hold control characters"):
        session_name("a\x1bb", "user_id")


def test_the_first_unseen_message_of_an_input_that_starts_with_a_rendered_context():
    mem = MemoryManager(budget=100, policy="window")
    mem.extend([{"role": "user", "content": f"old {i}"} for i in range(4)])
    newest = mem.history()[-1]
    new = [{"role": "user", "content": "new question"}]
    # The newest stored message is in the input verbatim: what follows it is new.
    assert first_unseen([{"role": "user", "content": "old 3"}, *new], newest, mem.unseen) == 1
    # It is not there (it was cut): what follows the last marker, less what the session has there ("old 2",
    # the session's newest but one: the client dropped the newest, as a retry does).
    resent = [{"role": "user", "content": "[2 messages omitted]"}, {"role": "user", "content": "old 2"}, *new]
    assert first_unseen(resent, newest, mem.unseen) == 2
    other = [{"role": "user", "content": "[3 messages omitted]"}, {"role": "user", "content": "old 3 (cut)"}, *new]
    assert first_unseen(other, newest, mem.unseen) == 1  # a text the session does not have is new
    assert first_unseen(new, None, mem.unseen) == 0


def test_a_merged_marker_s_scattered_context_is_not_taken_for_new_messages():
    mem = MemoryManager(budget=100, policy="window")
    mem.extend([{"role": "user", "content": f"old {i}"} for i in range(8)])
    newest = mem.history()[-1]
    new = [{"role": "user", "content": "new question"}]
    # The newest stored message is not in the input as stored (edited here); the context kept two older ones,
    # far apart, after one merged marker.
    rendered = [{"role": "user", "content": "[5 messages omitted throughout]"}, {"role": "user", "content": "old 1"},
                {"role": "user", "content": "old 4"}, {"role": "user", "content": "old 7, edited"}]
    # After the marker, "old 4" (stored, but not the session's newest) would be taken for new and stored again.
    assert first_unseen([*rendered, *new], newest, mem.unseen) == 2
    # Told what it rendered, the adapter finds where the new messages begin.
    keys = {resend_key(m) for m in rendered}
    assert first_unseen([*rendered, *new], newest, mem.unseen, keys) == 4
    assert first_unseen([*rendered[:3], *new], newest, mem.unseen, keys) == 3  # the edited one not sent back
