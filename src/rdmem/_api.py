"""``compact()``: the one-call front door (names resolved, messages encoded, the engine run)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .compaction import compact_units
from .contract import Policy
from .embed import Embedder
from .messages import check_query
from .policies import get_policy
from .reconstruct import MERGED, Markers, check_markers
from .result import Compaction
from .sessions import embedder_for
from .summarize import Summarizer
from .tokens import Tokenizer, check_budget, get_tokenizer
from .units import encode_units

__all__ = ["compact"]


def compact(
    messages: Sequence[Mapping[str, Any]],
    *,
    budget: int,
    policy: str | Policy = "rd",
    query: str | None = None,
    tokenizer: str | Tokenizer | Callable[[str], int] = "cl100k_base",
    message_overhead: int | None = None,
    embedder: Embedder | str | None = None,
    summarizer: Summarizer | None = None,
    markers: Markers = MERGED,
) -> Compaction:
    """Fit a chat history to ``budget`` tokens.

    Parameters
    ----------
    messages:
        OpenAI-style chat messages (``role``, ``content``, optional ``id``,
        ``name``, ``tool_calls``, ``tool_call_id``). Never modified.
    budget:
        Tokens the returned messages may use, per-message overhead included.
    policy:
        A name from :data:`rdmem.POLICIES` or a policy object.
    query:
        The next question, if known: makes the selection query-aware.
    tokenizer:
        A tiktoken encoding name, a ``tokenizer.json`` path, a callable
        ``str -> int`` or a :class:`~rdmem.tokens.Tokenizer`.
    message_overhead:
        Tokens per message on top of its content (default 4).
    embedder:
        ``None`` (default MiniLM), a sentence-transformers model name, or an
        object with ``embed(texts) -> array``. Only loaded if the policy needs it.
    summarizer:
        For policies that summarize (default: extractive, offline).
    markers:
        ``"merged"`` (default): one visible marker for every span left out,
        where the first was (``[N messages omitted]``, or ``[N messages
        omitted throughout]`` when there are several), which leaves the
        tokens of a marker per span to messages;
        ``True``: a ``[N messages omitted]`` where each span was; ``False``:
        none.

    >>> history = [{"role": "system", "content": "Be brief."}] + [
    ...     {"role": "user", "content": f"Message number {i} about apples."} for i in range(50)]
    >>> result = compact(history, budget=60, policy="window")
    >>> result.tokens <= 60, result.messages[0]["role"], result.kept_ids[-1]
    (True, 'system', 'm50')
    """
    budget = check_budget(budget)
    markers = check_markers(markers)
    check_query(query)
    pol = get_policy(policy)
    tok = get_tokenizer(tokenizer, message_overhead=message_overhead)
    units = encode_units(messages, tok)
    emb = embedder_for(pol, embedder)
    return compact_units(
        units, budget=budget, policy=pol, query=query, tokenizer=tok, embedder=emb,
        summarizer=summarizer, markers=markers,
    )
