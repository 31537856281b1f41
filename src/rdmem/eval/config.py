"""What an evaluation runs (:class:`EvalConfig`) and what it returns (:class:`Row`, :class:`EvalResult`).

>>> cfg = EvalConfig(budgets=(200,), policies=("window",), regimes=("streaming",))
>>> cfg.budgets, cfg.policies
((200,), ('window',))
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..embed import CachedEmbedder, MiniLMEmbedder, default_cache_dir
from ..errors import InvalidInput
from ..policies import POLICIES
from .defaults import DEFAULT_BUDGETS, DEFAULT_LATEST_POINTS, DEFAULT_POLICIES, DEFAULT_REGIMES, REGIMES
from .distortion import LMEvalConfig
from .llm import LLMConfig

__all__ = ["EvalConfig", "EvalResult", "Row", "default_cache_dir", "cached_embedder"]


def cached_embedder(cache_dir: str | os.PathLike[str] | None = None) -> CachedEmbedder:
    """The default MiniLM embedder with its vectors cached on disk under ``<cache_dir>/embeddings``."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return CachedEmbedder(MiniLMEmbedder(), cache_dir=root / "embeddings")


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate.

    Parameters
    ----------
    budgets:
        Token budgets (ints > 0) of each :class:`~rdmem.MemoryManager`.
    policies:
        Names from :data:`rdmem.POLICIES`.
    regimes:
        Any of ``"streaming"`` (the working set after the last message),
        ``"query"`` (``context(query=question)`` per question) and ``"latest"``
        (``context(query=<the latest user turn>)`` at ``latest_points`` points
        through the conversation, as a proxy or an adapter asks it; each
        question is scored there on its evidence seen so far).
    categories:
        Probe categories to keep (LoCoMo: 1 multi-hop, 2 temporal, 3
        open-domain, 4 single-hop, 5 adversarial); ``None`` keeps all.
    tokenizer:
        How budgets and context sizes are counted (see :func:`rdmem.get_tokenizer`).
    seed:
        Seeds the bootstrap (no global random state is touched).
    n_bootstrap:
        Resamples per confidence interval.
    workers:
        Processes (conversations × policies × budgets run in parallel).
    proxies:
        Compute the label-free proxies (information and embedding coverage).
    llm:
        An endpoint for LLM-judged QA (``None``: skipped).
    lm:
        A language model that measures distortion in its own terms (answer
        NLL, share of the full history's gain kept, coherence; ``None``:
        skipped). See :class:`~rdmem.eval.distortion.LMEvalConfig`.
    latest_points:
        Points (evenly spaced message counts, the last one the whole
        conversation) at which the ``"latest"`` regime builds its contexts.
    calibrate_embedding:
        Time the embedding model on single messages, to report compaction
        time per turn with embedding.
    """

    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    policies: tuple[str, ...] = DEFAULT_POLICIES
    regimes: tuple[str, ...] = DEFAULT_REGIMES
    categories: tuple[int, ...] | None = (1, 2, 3, 4)
    tokenizer: str = "cl100k_base"
    seed: int = 0
    n_bootstrap: int = 1000
    workers: int = 1
    proxies: bool = False
    llm: LLMConfig | None = None
    calibrate_embedding: bool = True
    lm: LMEvalConfig | None = None
    latest_points: int = DEFAULT_LATEST_POINTS

    def __post_init__(self) -> None:
        budgets = tuple(self.budgets) if not isinstance(self.budgets, int) else (self.budgets,)
        if not budgets:
            raise InvalidInput("budgets must name at least one budget (tokens)")
        for b in budgets:
            if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b <= 0:
                raise InvalidInput(f"budgets must be ints > 0 tokens, got {b!r}")
        object.__setattr__(self, "budgets", tuple(sorted({int(b) for b in budgets})))
        policies = (self.policies,) if isinstance(self.policies, str) else tuple(self.policies)
        if not policies:
            raise InvalidInput("policies must name at least one policy")
        for p in policies:
            if p not in POLICIES:
                raise InvalidInput(f"unknown policy {p!r}; choose one of {', '.join(sorted(POLICIES))}")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(policies)))
        regimes = (self.regimes,) if isinstance(self.regimes, str) else tuple(self.regimes)
        if not regimes or any(r not in REGIMES for r in regimes):
            raise InvalidInput(f"regimes must be among {', '.join(REGIMES)}, got {list(regimes)}")
        object.__setattr__(self, "regimes", tuple(r for r in REGIMES if r in regimes))
        if self.categories is not None:
            cats = tuple(self.categories)
            if not cats or any(isinstance(c, bool) or not isinstance(c, int) for c in cats):
                raise InvalidInput(f"categories must be a non-empty list of ints or None, got {self.categories!r}")
            object.__setattr__(self, "categories", tuple(sorted(set(cats))))
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise InvalidInput(f"workers must be an int >= 1, got {self.workers!r}")
        if isinstance(self.n_bootstrap, bool) or not isinstance(self.n_bootstrap, int) or self.n_bootstrap < 1:
            raise InvalidInput(f"n_bootstrap must be an int >= 1, got {self.n_bootstrap!r}")
        if isinstance(self.latest_points, bool) or not isinstance(self.latest_points, int) or self.latest_points < 1:
            raise InvalidInput(f"latest_points must be an int >= 1, got {self.latest_points!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InvalidInput(f"seed must be an int, got {self.seed!r}")

    def describe(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["llm"] = self.llm.describe() if self.llm is not None else None
        d["lm"] = self.lm.describe() if self.lm is not None else None
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


@dataclass(frozen=True)
class Row:
    """One point of a curve: metrics of one regime × policy × budget × category.

    ``budget`` is ``None`` for the full history. ``category`` is ``"all"`` (the
    selected categories together) or one category. Intervals are 95%
    bootstrap intervals over questions. NaN where a metric does not apply
    (no evidence, no gold answers, no LLM, ...). Times are milliseconds;
    ``ms_per_turn`` excludes embedding, ``ms_per_turn_with_embedding`` adds
    the measured cost of embedding one message with the model (for policies
    that need embeddings). ``lm_*``: model-measured distortion (``EvalConfig.lm``):
    the gold answer's NLL per token (nats) given the context, its difference
    from the full history's (``lm_delta_nll``), the share of the full
    history's gain kept (``lm_gain_kept``: 1 as good as the full history, 0 as
    bad as no context), and the next turn's NLL at sampled points of the
    stream (``lm_coherence_*``, streaming rows).
    """

    regime: str
    policy: str
    budget: int | None
    category: str
    n_questions: int
    n_contexts: int
    evidence_recall: float = math.nan
    evidence_recall_lo: float = math.nan
    evidence_recall_hi: float = math.nan
    all_evidence: float = math.nan
    all_evidence_lo: float = math.nan
    all_evidence_hi: float = math.nan
    answer_recall: float = math.nan
    answer_recall_lo: float = math.nan
    answer_recall_hi: float = math.nan
    tokens_mean: float = math.nan
    tokens_max: float = math.nan
    ms_per_turn: float = math.nan
    ms_per_turn_max: float = math.nan
    ms_per_turn_with_embedding: float = math.nan
    ms_per_query: float = math.nan
    information_coverage: float = math.nan
    embedding_coverage: float = math.nan
    qa_f1: float = math.nan
    judge_accuracy: float = math.nan
    llm_errors: int = 0
    lm_questions: int = 0
    lm_nll: float = math.nan
    lm_nll_lo: float = math.nan
    lm_nll_hi: float = math.nan
    lm_delta_nll: float = math.nan
    lm_delta_nll_lo: float = math.nan
    lm_delta_nll_hi: float = math.nan
    lm_gain_kept: float = math.nan
    lm_gain_kept_lo: float = math.nan
    lm_gain_kept_hi: float = math.nan
    lm_coherence_nll: float = math.nan
    lm_coherence_delta: float = math.nan
    lm_coherence_delta_lo: float = math.nan
    lm_coherence_delta_hi: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


@dataclass
class EvalResult:
    """Everything a run measured: aggregated :class:`Row` s, per-question and per-context records, metadata."""

    config: EvalConfig
    rows: list[Row]
    questions: list[dict[str, Any]]
    contexts: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def row(self, regime: str, policy: str, budget: int | None, category: str = "all") -> Row:
        """The row for one point (``KeyError`` if it was not run)."""
        for r in self.rows:
            if (r.regime, r.policy, r.budget, r.category) == (regime, policy, budget, category):
                return r
        raise KeyError((regime, policy, budget, category))

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "config": self.config.describe(), "rows": [r.as_dict() for r in self.rows]}
