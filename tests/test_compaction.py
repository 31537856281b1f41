"""compact(): parameters, the Compaction result and its report."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from ._checks import HashingEmbedder as _HashEmbedder

from rdmem import Compaction, UnitDecision, compact


def test_doctest_example_holds():
    history = [{"role": "system", "content": "Be brief."}] + [
        {"role": "user", "content": f"Message number {i} about apples."} for i in range(50)]
    result = compact(history, budget=60, policy="window")
    assert result.tokens <= 60 and result.messages[0]["role"] == "system" and result.kept_ids[-1] == "m50"


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"budget": 0}, ValueError, "budget must be > 0 tokens, got 0"),
        ({"budget": -5}, ValueError, "budget must be > 0 tokens, got -5"),
        ({"budget": 10.5}, TypeError, "budget must be an int number of tokens, got float"),
        ({"budget": "100"}, TypeError, "budget must be an int number of tokens, got str"),
        ({"budget": True}, TypeError, "budget must be an int number of tokens, got bool"),
        ({"budget": 100, "policy": "magic"}, ValueError,
         r"unknown policy 'magic'; choose one of importance, rd, rd-creative, rd-ladder, rd-roleplay, rd-task, seed, summary_buffer, window"),
        ({"budget": 100, "policy": 3}, TypeError, "policy must be a name or a policy object, got int"),
        ({"budget": 100, "query": 3}, TypeError, "query must be a string or None, got int"),
        ({"budget": 100, "tokenizer": "klingon"}, ValueError, "unknown tokenizer 'klingon'"),
        ({"budget": 100, "message_overhead": -1}, ValueError, "message_overhead must be an int >= 0, got -1"),
        ({"budget": 100, "embedder": 5}, TypeError, "embedder must be None, a model name or an object"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        compact([{"role": "user", "content": "hi"}], **kwargs)


def test_numpy_int_budget_is_accepted():
    assert compact([{"role": "user", "content": "hi"}], budget=np.int64(50), policy="window").tokens == 5


def test_window_keeps_the_most_recent(agent_history, cl100k):
    result = compact(agent_history, budget=80, policy="window")
    kept = [m["id"] for m in agent_history if m["id"] in result.kept_ids]
    assert kept[0] == "sys" and kept[-1] == "u7"
    # A contiguous recent run: nothing between the first kept conversation message and the end is missing.
    order = [m["id"] for m in agent_history]
    tail = order[order.index(kept[1]):]
    assert kept[1:] == tail


def test_report(agent_history, hashing_embedder):
    result = compact(agent_history, budget=150, policy="rd", query="peanut allergy", embedder=hashing_embedder)
    assert isinstance(result, Compaction)
    assert all(isinstance(d, UnitDecision) for d in result.report)
    by_id = {d.id: d for d in result.report}
    assert by_id["sys"].decision == "kept" and by_id["sys"].reason == "system message (pinned)"
    assert by_id["u2"].breakdown and all(isinstance(v, float) for v in by_id["u2"].breakdown.values())
    for d in result.report:
        assert d.decision in {"kept", "compressed", "summarized", "truncated", "archived"}
        assert (d.sent_tokens == d.tokens) if d.decision == "kept" else (d.sent_tokens <= d.tokens)
    assert result.archived_ids == result.ids("archived")
    assert set(result.kept_ids) | set(result.archived_ids) == {m["id"] for m in agent_history}
    data = json.loads(json.dumps(result.to_dict()))
    assert data["kept_ids"] == result.kept_ids and len(data["report"]) == len(agent_history)
    text = result.explain()
    assert text.splitlines()[0].startswith("policy=rd budget=150") and "u2" in text


def test_rd_keeps_the_directive_under_a_tight_budget(agent_history, hashing_embedder):
    """The rd policy values what the user asked to remember."""
    result = compact(agent_history, budget=120, policy="rd", embedder=hashing_embedder)
    assert "u2" in result.kept_ids


def test_query_aware_selection_with_the_real_model(agent_history, minilm, cl100k):
    from rdmem.policies import ScoredPolicy
    from rdmem.scoring import Relevance

    by_relevance = ScoredPolicy("relevance", "query relevance only", Relevance(), selector="knapsack", fill=True)
    weather = compact(agent_history, budget=120, policy=by_relevance,
                      query="How warm will it be, and when is sunset?", embedder=minilm)
    hotels = compact(agent_history, budget=120, policy=by_relevance,
                     query="How much do the hotels cost per night?", embedder=minilm)
    assert weather.policy == "relevance"
    assert {"a4", "t2", "t3"} <= set(weather.kept_ids) or "a5" in weather.kept_ids
    assert {"a2", "t1"} <= set(hotels.kept_ids) or "a3" in hotels.kept_ids
    assert weather.kept_ids != hotels.kept_ids
    assert weather.tokens == cl100k.messages_tokens(weather.messages) <= 120


def test_policies_without_embeddings_never_load_a_model(agent_history):
    class Boom:
        def embed(self, texts):
            raise AssertionError("the window policy must not embed anything")

    from rdmem.policies import get_policy

    assert not get_policy("window").needs_embeddings
    # The exploding embedder is handed in: the test fails if the window policy ever embeds.
    assert compact(agent_history, budget=100, policy="window", embedder=Boom()).kept_ids


def test_a_history_that_fits_is_sent_without_asking_the_policy(agent_history, cl100k):
    """Everything fits: no planning (rd would embed, build the similarity matrix and run its value model)."""
    from dataclasses import dataclass

    from rdmem.policies import RDPolicy

    calls = []

    class Boom:
        def embed(self, texts):
            raise AssertionError("nothing needs a vector when everything fits")

    @dataclass(frozen=True)
    class Counting(RDPolicy):
        def plan(self, problem):
            calls.append(len(problem.units))
            return super().plan(problem)

    result = compact(agent_history, budget=10_000, policy=Counting(), embedder=Boom())
    assert calls == [] and result.kept_ids == [m["id"] for m in agent_history]
    assert cl100k.messages_tokens(result.messages) == result.tokens
    tight = compact(agent_history, budget=150, policy=Counting(), embedder=_HashEmbedder())
    assert calls == [len(agent_history) - 1] and tight.tokens <= 150  # planned once when it does not fit


def test_policy_object_is_accepted(agent_history):
    from rdmem.policies import get_policy

    result = compact(agent_history, budget=100, policy=get_policy("window"))
    assert result.policy == "window"


def test_system_prompt_too_big_is_cut_then_reported(cl100k):
    system = {"role": "system", "content": "Rules. " + "Always be kind and precise. " * 60}
    history = [system, {"role": "user", "content": "hi"}]
    with pytest.warns(RuntimeWarning, match="no message fits in the 1 tokens left of a budget of 80"):
        result = compact(history, budget=80, policy="window")
    assert result.tokens <= 80 and result.warnings
    assert result.messages[0]["role"] == "system" and "[rdmem: truncated," in result.messages[0]["content"]
    assert result.report[0].decision == "truncated"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny = compact(history, budget=6, policy="window")
    assert tiny.messages == [] and tiny.warnings
    assert any("cannot fit a budget of 6" in str(w.message) for w in caught)


def test_report_is_a_read_only_list_that_pickles_as_one():
    import pickle

    history = [{"role": "user", "content": f"Message number {i} about apples."} for i in range(20)]
    result = compact(history, budget=60, policy="window")
    assert len(result.report) == 20 and result.report[-1].decision == "kept"
    assert [d.id for d in result.report if d.decision == "kept"] == result.kept_ids
    copy = pickle.loads(pickle.dumps(result))
    assert isinstance(copy.report, list) and copy.report == result.report and copy == result


def test_what_the_chat_api_would_refuse_is_left_out_with_a_warning_even_when_all_fits():
    """An orphaned tool result and a parallel call still missing a result cannot be sent (the API refuses the
    request); everything fits, yet they are left out, and a warning says so."""
    call = lambda cid: {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}  # noqa: E731
    history = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "gone", "content": "orphan"},
               {"role": "user", "content": "q"},
               {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
               {"role": "tool", "tool_call_id": "a", "content": "ra"}]
    with pytest.warns(RuntimeWarning, match=r"3 message\(s\) left out: the chat API refuses them \(tool call without "
                      r"all of its results: 2, tool result without its call: 1\)"):
        result = compact(history, budget=10_000)
    assert [m["content"] for m in result.messages if m["role"] != "user" or "omitted" not in m["content"]] == ["hi", "q"]
    assert len(result.warnings) == 1


@pytest.mark.parametrize("policy", ["window", "rd"])
def test_a_newest_message_whose_image_does_not_fit_is_sent_as_its_text_with_a_note(cl100k, policy):
    """An image of unknown size counts 1,445 tokens: a question about it under a budget of 1,000 is sent as its
    text, cut, with a note that says the image was left out, never dropped (the model would get no question)."""
    photo = {"type": "image_url", "image_url": {"url": "https://example.com/receipt.jpg"}}
    history = [{"role": "user", "content": "hello " * 50}, {"role": "assistant", "content": "Hi!"},
               {"role": "user", "content": [{"type": "text", "text": "What is the total on this receipt?"}, photo]}]
    with pytest.warns(RuntimeWarning, match="newest user message 'm2' .* was cut"):
        out = compact(history, budget=1000, tokenizer=cl100k, policy=policy)
    assert out.tokens == cl100k.messages_tokens(out.messages) <= 1000
    last = out.messages[-1]["content"]
    assert last.startswith("What is the total on this receipt?") and last.endswith("; 1 image left out]")
    # with room, the message is sent as it came, image and all
    roomy = compact(history, budget=2000, tokenizer=cl100k, policy=policy)
    assert roomy.messages[-1] == history[-1] and roomy.tokens <= 2000
