"""Fitting the value models on labelled conversations (LoCoMo evidence or JSONL probes)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..embed import Embedder
from ..eval.datasets import Conversation
from ..scoring import ScoringContext
from ..tokens import Tokenizer
from ..units import encode_units
from .features import PRIOR_FEATURES, QUERY_FEATURES, prior_matrix, query_matrix
from .model import LogisticModel

__all__ = ["training_rows", "fit_models", "save_models"]


def training_rows(
    conv: Conversation, tokenizer: Tokenizer, embedder: Embedder, prior: LogisticModel | None = None
) -> dict[str, np.ndarray]:
    """Feature rows and labels of one conversation: per unit (prior) and per probe × unit (query)."""
    units = encode_units(conv.messages, tokenizer)
    probes = [p for p in conv.probes if p.evidence]
    ctx = ScoringContext(units, embedder=embedder)
    xp = prior_matrix(ctx)
    pos = {u.id: i for i, u in enumerate(units)}
    # A unit's prior target: the share of probes' evidence it carries (what recall rewards).
    yp = np.zeros(len(units))
    for p in probes:
        for e in p.evidence:
            if e in pos:
                yp[pos[e]] = 1.0
    out: dict[str, Any] = {"xp": xp, "yp": yp}
    if prior is not None and probes:
        logit = prior.decision(xp)
        embedder.embed([p.question for p in probes])  # warm the cache in one batch
        xs, ys = [], []
        for p in probes:
            qctx = ScoringContext(units, query=p.question, embedder=embedder)
            qctx.__dict__["embeddings"] = ctx.embeddings
            xs.append(query_matrix(qctx, logit))
            y = np.zeros(len(units))
            for e in p.evidence:
                if e in pos:
                    y[pos[e]] = 1.0
            ys.append(y)
        out["xq"], out["yq"] = np.vstack(xs), np.concatenate(ys)
    return out


def fit_models(
    convs: Sequence[Conversation], tokenizer: Tokenizer, embedder: Embedder, *, l2: float = 1.0
) -> dict[str, LogisticModel]:
    """Fit the prior model, then the query model on top of it."""
    rows = [training_rows(c, tokenizer, embedder) for c in convs]
    prior = LogisticModel(PRIOR_FEATURES, l2=l2).fit(
        np.vstack([r["xp"] for r in rows]), np.concatenate([r["yp"] for r in rows])
    )
    rows = [training_rows(c, tokenizer, embedder, prior) for c in convs]
    rows = [r for r in rows if "xq" in r]
    if not rows:
        raise ValueError("no probe has evidence ids: the query model needs labelled questions")
    query = LogisticModel(QUERY_FEATURES, l2=l2).fit(
        np.vstack([r["xq"] for r in rows]), np.concatenate([r["yq"] for r in rows])
    )
    meta = {"conversations": [c.id for c in convs], "units": int(sum(len(c.messages) for c in convs))}
    prior.meta, query.meta = dict(meta), dict(meta)
    return {"prior": prior, "query": query}


def save_models(models: dict[str, LogisticModel], path: str | Path) -> None:
    Path(path).write_text(json.dumps({"models": {k: m.to_dict() for k, m in models.items()}}, indent=1))
