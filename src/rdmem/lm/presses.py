"""KV-cache eviction (seed §3.2.4): which cached positions a model keeps when its context must shrink.

StreamingLLM, H2O (observed attention) and SnapKV are NVIDIA's ``kvpress``
presses, used as they are; :class:`RdmemPress` is rdmem's: it leans the KV
budget to messages by their rate-distortion value and, within them, to what
the model attends to, without knowing the question. Every press is a ``kvpress.ScorerPress``: one ``score`` method,
higher means keep, so each also works the kvpress way
(``with press(model): model(ids, past_key_values=cache)``).

>>> sorted(PRESSES)                                              # doctest: +SKIP
['h2o', 'rdmem', 'snapkv', 'streaming_llm']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compaction import unit_values
from ..errors import InvalidInput, MissingDependency
from ..policies import get_policy
from ..sessions import embedder_for
from ..tokens import get_tokenizer
from ..units import encode_units

try:
    import torch
    from kvpress import ObservedAttentionPress, ScorerPress, SnapKVPress, StreamingLLMPress
except ImportError as exc:  # pragma: no cover - the lm extra installs them
    raise MissingDependency(f"KV-cache presses need torch and kvpress: pip install 'rdmem[lm]' ({exc})") from None

__all__ = ["RdmemPress", "StreamingPress", "PRESSES", "QUESTION_AWARE", "get_press", "message_values", "token_values"]

@dataclass
class RdmemPress(ScorerPress):
    """rdmem's message values carried into the KV cache, without knowing the question.

    Each position's score adds two ranks, each scaled to [0, 1): the attention
    it received in its layer and head (H2O's observed attention, or the key
    norm when attention weights are not at hand) and, times ``value_weight``,
    the value of the message it belongs to (rd's value without a query, see
    :func:`message_values`). So the budget leans to valuable messages and,
    within a message, to the positions the model attends to; every head
    still keeps what it reads most. The first ``n_sink`` positions (the
    attention sinks) are always kept.

    Parameters
    ----------
    compression_ratio:
        Share of positions to drop, in [0, 1).
    token_values:
        One value per position of the context, its message's (see :func:`token_values`);
        ``None`` ranks by attention alone (H2O).
    value_weight:
        How much the message's value rank counts against the attention rank (>= 0).
    n_sink:
        Leading positions always kept.
    """

    compression_ratio: float = 0.0
    token_values: Any = None
    value_weight: float = 1.0
    n_sink: int = 4

    def score(self, module: Any, hidden_states: Any, keys: Any, values: Any, attentions: Any, kwargs: Any) -> Any:
        n = keys.shape[2]
        if attentions is not None:
            attn = ObservedAttentionPress.score(self, module, hidden_states, keys, values, attentions, kwargs)
        else:
            attn = -keys.norm(dim=-1)
        scores = attn.argsort(dim=-1).argsort(dim=-1).float() / n
        if self.token_values is not None:
            tv = torch.as_tensor(self.token_values, dtype=torch.float64)
            if tv.shape != (n,):
                raise ValueError(f"token_values has {tuple(tv.shape)} values for a context of {n} positions")
            distinct, rank = torch.unique(tv, return_inverse=True)
            scores = scores + self.value_weight * (rank.float() / len(distinct)).to(scores.device).view(1, 1, n)
        scores[..., : self.n_sink] = 2.0 + self.value_weight
        return scores


@dataclass
class StreamingPress(StreamingLLMPress):
    """kvpress's StreamingLLM (the first ``n_sink`` positions and the most recent ones), scored so that the
    ranking does not depend on ``compression_ratio``: any top-k of these scores is the sinks plus the
    newest ``k − n_sink`` positions, which is what kvpress keeps at that ratio. (kvpress's own ``score``
    is all ones when the ratio is 0, so a top-k taken later would keep an arbitrary block.)"""

    def score(self, module: Any, hidden_states: Any, keys: Any, values: Any, attentions: Any, kwargs: Any) -> Any:
        n = keys.shape[2]
        scores = torch.arange(n, dtype=torch.float32, device=keys.device).expand(keys.shape[0], keys.shape[1], n)
        scores = scores.clone()
        scores[..., : self.n_sink] = float(n)
        return scores


#: Question-aware presses see the question at the end of what they compress (SnapKV's observation window).
QUESTION_AWARE = frozenset({"snapkv"})
#: Fewer positions than this and some press cannot score (SnapKV's observation window, StreamingLLM's sinks).
MIN_POSITIONS = 40

PRESSES: dict[str, Callable[[], ScorerPress]] = {
    "streaming_llm": lambda: StreamingPress(n_sink=4),
    "h2o": ObservedAttentionPress,
    "snapkv": lambda: SnapKVPress(window_size=32),
    "rdmem": RdmemPress,
}


def get_press(name: str) -> ScorerPress:
    """A fresh press by name (``ValueError`` listing the names for an unknown one)."""
    if name not in PRESSES:
        raise InvalidInput(f"unknown press {name!r}; choose one of {', '.join(sorted(PRESSES))}")
    return PRESSES[name]()


def message_values(messages: Sequence[Mapping[str, Any]], *, policy: str = "rd", embedder: Any = None) -> np.ndarray:
    """Each message's value as ``policy`` values it without a query (its valuation, before any selection;
    0 for a pinned system message)."""
    if not messages:
        return np.zeros(0)
    pol = get_policy(policy)
    tok = get_tokenizer("cl100k_base")
    return unit_values(encode_units(list(messages), tok), policy=pol, tokenizer=tok, embedder=embedder_for(pol, embedder))


def token_values(spans: Sequence[tuple[int, int]], values: Sequence[float], n: int) -> np.ndarray:
    """Per position of a rendered context, its message's value (positions outside every message, the header,
    get the highest value)."""
    out = np.full(n, np.inf)
    for (a, b), v in zip(spans, values, strict=True):
        out[a:b] = float(v)
    top = out[np.isfinite(out)].max() if np.isfinite(out).any() else 0.0
    out[~np.isfinite(out)] = top + 1.0
    return out
