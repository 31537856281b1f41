"""rdmem.lm.LanguageModel with the real SmolLM2-135M-Instruct: answer NLL after a context."""

from __future__ import annotations

import pytest

from rdmem.lm.model import LanguageModel, question_target, turn_target

from .conftest import LM_CACHE, conversation

pytestmark = pytest.mark.slow

DOG = question_target("What is the name of Caroline's dog?", "Biscuit")


def test_the_evidence_lowers_the_answer_nll(smollm):
    with_fact, without = smollm.nll(conversation(True), [DOG])[0], smollm.nll(conversation(False), [DOG])[0]
    nothing = smollm.nll([], [DOG])[0]
    assert with_fact < without - 1.0
    assert with_fact < nothing - 1.0


def test_shared_prefix_and_batches_give_the_plain_forward_pass(smollm):
    """Scoring several targets on one cached context, batched and padded, equals one forward pass each."""
    import torch

    ctx = conversation(True)
    targets = [DOG, question_target("How is Melanie's week?", "busy"), turn_target(ctx[-1])]
    got = smollm.nll(ctx, targets)
    one_by_one = LanguageModel(cache_dir=LM_CACHE, cache_scores=False, batch_size=1)
    one_by_one._loaded = smollm._loaded  # the same weights, another batch size
    assert one_by_one.nll(ctx, targets) == pytest.approx(got, abs=1e-4)
    enc = smollm.encode(ctx)
    for target, value in zip(targets, got, strict=True):
        prompt, text = smollm.target_ids(target)
        ids = torch.tensor([enc.ids + prompt + text])
        with torch.inference_mode():
            logp = torch.log_softmax(smollm.torch_model(input_ids=ids).logits[0].float(), dim=-1)
        start = len(enc.ids) + len(prompt)
        picked = logp[start - 1 : -1].gather(1, ids[0, start:].unsqueeze(1))
        assert float(-picked.mean()) == pytest.approx(value, abs=1e-4)


def test_scores_are_kept_on_disk(smollm, tmp_path, monkeypatch):
    lm = LanguageModel(cache_dir=LM_CACHE, cache_scores=tmp_path / "scores.sqlite")
    lm._loaded = smollm._loaded
    first = lm.nll(conversation(True), [DOG])
    again = LanguageModel(cache_dir=LM_CACHE, cache_scores=tmp_path / "scores.sqlite")
    again._loaded = smollm._loaded

    def no_model(*args, **kwargs):
        raise AssertionError("a cached score ran the model")

    monkeypatch.setattr(again, "prefill", no_model)
    assert again.nll(conversation(True), [DOG]) == first


def test_fit_keeps_the_newest_messages_that_fit_and_nll_refuses_a_longer_context(smollm):
    small = LanguageModel(cache_dir=LM_CACHE, cache_scores=False, max_tokens=256)
    small._loaded = smollm._loaded
    long = conversation(True) * 6
    fitted = small.fit(long, reserve=40)
    assert 0 < len(fitted) < len(long) and fitted == long[-len(fitted):]
    assert len(small.encode(fitted)) <= 256 - 40
    assert len(small.encode(long[-len(fitted) - 1:])) > 256 - 40  # one more would not fit
    with pytest.raises(ValueError, match=r"exceed the model's window of 256 tokens; fit the context first"):
        small.nll(long, [DOG])


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got 'gpu'"):
        LanguageModel(device="gpu")
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        LanguageModel(batch_size=0)
    with pytest.raises(ValueError, match="max_tokens must be an int >= 16 or None, got 8"):
        LanguageModel(max_tokens=8)
