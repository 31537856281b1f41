"""KV-cache presses on the real model: exact sizes, the uncut cache, and rdmem's values in the cache."""

from __future__ import annotations

import numpy as np
import pytest

from rdmem.lm.kv import press_nll, press_positions
from rdmem.lm.model import question_target
from rdmem.lm.presses import PRESSES, RdmemPress, get_press, message_values, token_values

from .conftest import conversation

pytestmark = pytest.mark.slow

DOG = question_target("What is the name of Caroline's dog?", "Biscuit")


def test_a_cache_that_keeps_every_position_gives_the_plain_nll(smollm):
    ctx = conversation(True)
    plain = smollm.nll(ctx, [DOG])[0]
    scores = press_nll(smollm, ctx, DOG, keep=(1.0,))
    assert scores.full == pytest.approx(plain, abs=1e-3)
    for name in PRESSES:
        assert scores.nll[(name, 1.0)] == pytest.approx(plain, abs=1e-3), name
        assert scores.kept[(name, 1.0)] == scores.n_context


@pytest.mark.parametrize("name", sorted(PRESSES))
def test_each_press_keeps_exactly_the_positions_asked_the_kvpress_way(smollm, name):
    import torch
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    ctx = conversation(True)
    enc = smollm.encode(ctx)
    press = get_press(name)
    press.compression_ratio = 0.6
    if isinstance(press, RdmemPress):
        press.token_values = token_values(enc.spans, message_values(ctx), len(enc))
    model = smollm.torch_model
    cache = DynamicCache()
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode(), press(model):
            model(input_ids=torch.tensor([enc.ids]), past_key_values=cache, output_attentions=True)
    finally:
        model.set_attn_implementation("sdpa")
    expected = compute_n_kept(len(enc), 0.6)
    assert {layer.keys.shape[2] for layer in cache.layers} == {expected}


@pytest.mark.parametrize("keep", [0.1, 0.3, 0.5])
def test_press_nll_and_press_positions_keep_the_share_asked(smollm, keep):
    ctx = conversation(True)
    n = len(smollm.encode(ctx))
    pos = press_positions(smollm, ctx, "h2o", keep)
    assert pos.shape == (smollm.torch_model.config.num_hidden_layers,
                         smollm.torch_model.config.num_key_value_heads, round(keep * n))
    assert (np.diff(pos, axis=-1) > 0).all() and pos.min() >= 0 and pos.max() < n
    scores = press_nll(smollm, ctx, DOG, presses=("streaming_llm",), keep=(keep,))
    assert scores.kept[("streaming_llm", keep)] == round(keep * n)


@pytest.mark.parametrize("keep", [0.25, 0.5])
def test_streaming_llm_keeps_the_sinks_and_the_newest_positions_at_any_share(smollm, keep):
    ctx = conversation(True)
    n = len(smollm.encode(ctx))
    k = round(keep * n)
    pos = press_positions(smollm, ctx, "streaming_llm", keep)
    expected = np.r_[0:4, n - (k - 4) : n]
    assert (pos == expected).all()


def test_the_rdmem_press_keeps_more_of_a_high_value_message_than_of_chit_chat(smollm):
    ctx = conversation(True)
    values = message_values(ctx)
    fact = 3
    newest_user = max(i for i, m in enumerate(ctx) if m["role"] == "user")  # rd protects it: it is the turn
    # the chit-chat before the three newest messages (which rd prices for the next turn's coherence: the
    # message of age a gains 2 e^-a times the best value, 0.27 of it at age 2)
    chat_ids = [i for i in range(len(ctx)) if i not in (fact, newest_user) and i < len(ctx) - 3]
    assert values[fact] > max(values[i] for i in chat_ids)  # rd (no query) values the fact above pleasantries
    enc = smollm.encode(ctx)
    pos = press_positions(smollm, ctx, "rdmem", 0.3, values=values)

    def share(i: int) -> float:
        a, b = enc.spans[i]
        return float(((pos >= a) & (pos < b)).sum() / (pos.shape[0] * pos.shape[1] * (b - a)))

    chat = [share(i) for i in chat_ids]
    assert share(fact) > max(chat)
    # Attention alone (no values: H2O's ranking) keeps less of it.
    plain = press_positions(smollm, ctx, "rdmem", 0.3, values=np.ones(len(ctx)))
    a, b = enc.spans[fact]
    assert ((plain >= a) & (plain < b)).sum() < ((pos >= a) & (pos < b)).sum()


def test_unknown_names_and_bad_shares_are_refused(smollm):
    with pytest.raises(ValueError, match="the context is [0-9]+ tokens; KV presses need at least 40"):
        press_nll(smollm, conversation(True)[:1], DOG)
    with pytest.raises(ValueError, match="unknown press 'lru'; choose one of h2o, rdmem, snapkv, streaming_llm"):
        press_nll(smollm, conversation(True), DOG, presses=("lru",))
    with pytest.raises(ValueError, match=r"keep must be shares of the context in \(0, 1\], got 0"):
        press_nll(smollm, conversation(True), DOG, keep=(0,))
    with pytest.raises(ValueError, match="needs a target with a prompt"):
        press_nll(smollm, conversation(True), question_target("q", "a").__class__("", "text"))
