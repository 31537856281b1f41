"""One context, several KV presses, several budgets: the answer's NLL through each pruned cache, from one prefill.

The context and the question are run once with every press's scorer hooked
into the attention layers; each press then keeps its top ``keep × n``
positions of the context per layer and head, and the target is scored on
that pruned cache with positions that continue the original ones. A
question-agnostic press is scored on the context alone (causal attention:
the context's states do not depend on what follows) and reads the question
after pruning; a question-aware one (SnapKV) compresses with the question at
the end of its observation window, as it is used in practice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInput
from .model import LanguageModel, Target
from .presses import MIN_POSITIONS, PRESSES, QUESTION_AWARE, RdmemPress, get_press, message_values, token_values

__all__ = ["press_nll", "press_positions", "PressScores"]


@dataclass(frozen=True)
class PressScores:
    """The target's NLL per token (nats) through each press at each share kept, and through the whole cache.

    ``nll[(press, keep)]``; ``kept[(press, keep)]`` is the number of context positions each layer and head kept.
    """

    n_context: int
    full: float
    nll: dict[tuple[str, float], float] = field(default_factory=dict)
    kept: dict[tuple[str, float], int] = field(default_factory=dict)


def _check(presses: Sequence[str], keep: Sequence[float]) -> None:
    for name in presses:
        if name not in PRESSES:
            raise InvalidInput(f"unknown press {name!r}; choose one of {', '.join(sorted(PRESSES))}")
    for k in keep:
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1:
            raise InvalidInput(f"keep must be shares of the context in (0, 1], got {k!r}")


def _check_size(n: int, lm: LanguageModel) -> None:
    if n < MIN_POSITIONS:
        raise InvalidInput(f"the context is {n} tokens; KV presses need at least {MIN_POSITIONS} (SnapKV observes "
                         "the last 32)")
    if n > lm.window:
        raise InvalidInput(f"the context is {n} tokens, more than the model's window of {lm.window}")


def _n_kept(keep: float, n: int) -> int:
    return max(1, min(n, round(keep * n)))


def press_nll(
    lm: LanguageModel,
    messages: Sequence[Mapping[str, Any]],
    target: Target,
    *,
    presses: Sequence[str] = tuple(PRESSES),
    keep: Sequence[float] = (0.1, 0.25, 0.5),
    values: Sequence[float] | None = None,
) -> PressScores:
    """Score ``target`` after ``messages`` through each press at each share ``keep`` of the context's positions.

    ``values`` are the messages' values for the ``rdmem`` press (default: :func:`message_values`, rd without
    a query). The target needs a prompt (the question): its first scored token must come after the cache.
    """
    _check(presses, keep)
    enc = lm.encode(messages)
    prompt, text = lm.target_ids(target)
    if not prompt:
        raise InvalidInput("press_nll needs a target with a prompt (the question), read after the pruned cache")
    n = len(enc)
    _check_size(n, lm)
    if n + len(prompt) + len(text) > lm.window:
        raise InvalidInput(f"context ({n} tokens) and target exceed the model's window of {lm.window} tokens")
    if "rdmem" in presses and values is None:
        values = message_values(messages)
    tv = token_values(enc.spans, values, n) if values is not None else None
    keys = {(p, k): lm.key("press-v2", enc.ids, prompt, text, p, k, tv.round(9).tobytes().hex() if p == "rdmem" else "")
            for p in presses for k in keep}
    full_key = lm.key("nll", enc.ids, prompt, text)
    known = lm.cached(list(keys.values()) + [full_key])
    if all(k in known for k in keys.values()) and full_key in known:
        return PressScores(n, known[full_key], {pk: known[k] for pk, k in keys.items()},
                           {(p, k): _n_kept(k, n) for p, k in keys})
    # The question's last token stays out of the prefill: the first answer token is then predicted through
    # the pruned cache for every press (SnapKV reads the rest of the question before pruning, as it is used).
    scores, layers, last = _prefill_scored(lm, enc.ids + prompt[:-1], n, presses, tv)
    ctx_layers = [(k[:, :, :n], v[:, :, :n]) for k, v in layers]
    full = lm.continue_nll(ctx_layers, n, last, [(prompt, text)])[0]
    nll: dict[tuple[str, float], float] = {}
    for p in presses:
        for k in keep:
            pruned = _prune(layers, scores[p], n, _n_kept(k, n), keep_tail=p in QUESTION_AWARE)
            if p in QUESTION_AWARE:  # the question but its last token is in the cache already
                nll[(p, k)] = lm.continue_nll(pruned, n + len(prompt) - 1, last, [(prompt[-1:], text)])[0]
            else:
                nll[(p, k)] = lm.continue_nll(pruned, n, last, [(prompt, text)])[0]
    lm.remember({keys[pk]: v for pk, v in nll.items()} | {full_key: full})
    return PressScores(n, full, nll, {(p, k): _n_kept(k, n) for p, k in keys})


def press_positions(
    lm: LanguageModel,
    messages: Sequence[Mapping[str, Any]],
    press: str,
    keep: float,
    *,
    values: Sequence[float] | None = None,
) -> np.ndarray:
    """The context positions ``press`` keeps at share ``keep``: an int array ``(layers, kv_heads, kept)``,
    sorted, over the rendered context (see :meth:`LanguageModel.encode` for each message's span)."""
    _check([press], [keep])
    enc = lm.encode(messages)
    n = len(enc)
    _check_size(n, lm)
    if press == "rdmem" and values is None:
        values = message_values(messages)
    tv = token_values(enc.spans, values, n) if values is not None else None
    scores, _, _ = _prefill_scored(lm, enc.ids, n, [press], tv)
    k = _n_kept(keep, n)
    return np.stack([s[0].topk(k, dim=-1).indices.sort(dim=-1).values.cpu().numpy() for s in scores[press]])


def _prefill_scored(
    lm: LanguageModel, ids: list[int], n: int, presses: Sequence[str], tv: np.ndarray | None
) -> tuple[dict[str, list[Any]], list[tuple[Any, Any]], Any]:
    """Run ``ids`` once with eager attention, each press scoring every layer's first ``n`` positions."""
    model = lm.torch_model
    objs = {p: get_press(p) for p in presses}
    for press in objs.values():
        if isinstance(press, RdmemPress):
            press.token_values = tv
    layers_mod = model.model.layers
    scores: dict[str, list[Any]] = {p: [None] * len(layers_mod) for p in presses}

    def hook(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        i = module.layer_idx
        hs, attn = kwargs["hidden_states"], output[1]
        layer = kwargs["past_key_values"].layers[i]
        k_all, v_all = layer.keys, layer.values
        cos, sin = kwargs["position_embeddings"]
        ctx_kwargs = dict(kwargs, position_embeddings=(cos[:, :n], sin[:, :n]))
        for p, press in objs.items():
            if p in QUESTION_AWARE:
                s = press.score(module, hs, k_all, v_all, attn, kwargs)[..., :n]
            else:
                s = press.score(module, hs[:, :n], k_all[:, :, :n], v_all[:, :, :n],
                                None if attn is None else attn[..., :n, :n], ctx_kwargs)
            scores[p][i] = s.float()
        return output

    handles = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in layers_mod]
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")  # H2O reads the attention weights
    try:
        cache, last = lm.prefill(ids)  # eager attention hands each layer's weights to the hooks
    finally:
        model.set_attn_implementation(previous)
        for h in handles:
            h.remove()
    return scores, [(layer.keys, layer.values) for layer in cache.layers], last


def _prune(layers: list[tuple[Any, Any]], scores: list[Any], n: int, k: int, *, keep_tail: bool) -> list[tuple[Any, Any]]:
    """Each layer's top-``k`` context positions per head (in their order), and the rest of the cache if asked."""
    import torch

    out = []
    for (keys, values), s in zip(layers, scores, strict=True):
        idx = s.topk(k, dim=-1).indices.sort(dim=-1).values
        idx = idx.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
        pk, pv = keys[:, :, :n].gather(2, idx), values[:, :, :n].gather(2, idx)
        if keep_tail:
            pk, pv = torch.cat([pk, keys[:, :, n:]], dim=2), torch.cat([pv, values[:, :, n:]], dim=2)
        out.append((pk, pv))
    return out
