"""Done-when contract on real data: every LoCoMo conversation, budgets 1000/2000/4000, every policy.

Each turn becomes a message (``dia_id`` as id; content ``"[date] speaker: text"``), speaker A as the
user and speaker B as the assistant. The context must fit the budget (re-counted with cl100k), keep
only input ids, and carry every kept message verbatim.
"""

from __future__ import annotations

import json
import warnings

import pytest

import rdmem
from rdmem import compact

from ._checks import check_compaction

pytestmark = pytest.mark.slow

BUDGETS = (1000, 2000, 4000)


def locomo_messages(sample: dict) -> list[dict]:
    conv = sample["conversation"]
    roles = {conv["speaker_a"]: "user", conv["speaker_b"]: "assistant"}
    sessions = sorted((int(k.split("_")[1]) for k in conv if k.startswith("session_") and k.count("_") == 1))
    messages = []
    for n in sessions:
        date = conv.get(f"session_{n}_date_time", "")
        for turn in conv[f"session_{n}"]:
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            messages.append({"id": turn["dia_id"], "role": roles.get(turn["speaker"], "user"),
                             "content": f"[{date}] {turn['speaker']}: {text}"})
    return messages


@pytest.fixture(scope="session")
def locomo_conversations(locomo_path):
    samples = json.loads(locomo_path.read_text(encoding="utf-8"))
    return {s["sample_id"]: locomo_messages(s) for s in samples}


@pytest.fixture(scope="session")
def locomo_embedder(locomo_conversations, minilm):
    """The real MiniLM, every turn embedded once for the whole session (batched, then cached by content)."""
    minilm.embed([m["content"] for msgs in locomo_conversations.values() for m in msgs])
    return minilm


def test_loader_shape(locomo_conversations):
    assert len(locomo_conversations) >= 1
    for messages in locomo_conversations.values():
        ids = [m["id"] for m in messages]
        assert len(ids) == len(set(ids)) and ids[0] == "D1:1"
        assert {m["role"] for m in messages} == {"user", "assistant"}


@pytest.mark.parametrize("policy", sorted(rdmem.POLICIES))
def test_every_conversation_every_budget(policy, locomo_conversations, locomo_embedder, cl100k):
    for sample_id, messages in locomo_conversations.items():
        whole = cl100k.messages_tokens([{"role": m["role"], "content": m["content"]} for m in messages])
        for budget in BUDGETS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                result = compact(messages, budget=budget, policy=policy, embedder=locomo_embedder)
            try:
                check_compaction(result, messages, budget, cl100k)
            except AssertionError as exc:
                raise AssertionError(f"{sample_id} at {budget} tokens with {policy}: {exc}") from None
            assert whole > budget and result.kept_ids, f"{sample_id} at {budget}: nothing kept"
            # Budgets are used, not wasted: at least half of the budget goes to real turns.
            assert sum(d.sent_tokens for d in result.report) >= budget // 2, (sample_id, budget, policy)
