"""The learned value model as a scorer: P(a future question needs this unit)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import InvalidInput
from ._base import ScoringContext

__all__ = ["LearnedValue"]


@dataclass(frozen=True)
class LearnedValue:
    """Probability that a future question needs each unit, from two logistic models.

    Without a query the ``prior`` model rates what kind of message a unit is
    (facts, events, names, dates vs. greetings and chit-chat, and where its
    vector lies along a learned "salience" direction). With a query the
    ``query`` model adds how the unit relates to it (dense and lexical
    relevance, their ranks, the neighbours' relevance, shared names, dates for
    "when" questions). ``None`` uses the models shipped with rdmem;
    ``rdmem train`` fits new ones; online feedback tilts the prior
    (:class:`rdmem.learn.Feedback`, through :meth:`with_prior`).
    """

    prior: object | None = None
    query: object | None = None
    novelty: bool = True
    needs_embeddings: bool = True

    @classmethod
    def from_file(cls, path: str) -> LearnedValue:
        """Models written by ``rdmem train --out PATH``."""
        import json

        from .logistic import LogisticModel
        from .value_features import check_prior_model, check_query_model

        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)["models"]
            prior = LogisticModel.from_dict(data["prior"])
            query = LogisticModel.from_dict(data["query"])
            check_prior_model(prior)
            check_query_model(query)
            return cls(prior=prior, query=query)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"cannot read value models from {path!r}: {exc}") from None

    def prior_model(self):  # type: ignore[no-untyped-def]
        """The prior (query-agnostic) model in use: the given one, or the shipped one."""
        return self._models()[0]

    def with_prior(self, prior: object) -> LearnedValue:
        """The same scorer with another prior model (the query model keeps its own)."""
        return replace(self, prior=prior)

    def _models(self):  # type: ignore[no-untyped-def]
        from .logistic import default_models

        d = default_models()
        return (self.prior or d["prior"]), (self.query or d["query"])

    def explain(self, ctx: ScoringContext) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Probabilities and each feature's share of the logit (for reports)."""
        from .value_features import model_prior_matrix, model_query_matrix

        if not len(ctx):
            return np.zeros(0), {}
        prior, query = self._models()
        xp = model_prior_matrix(prior, ctx, novelty=self.novelty)
        logit = prior.decision(xp)
        parts = {f"prior.{k}": v for k, v in prior.contributions(xp).items()}
        if ctx.query:
            xq = model_query_matrix(query, ctx, logit)
            logit = query.decision(xq)
            parts = {f"query.{k}": v for k, v in query.contributions(xq).items()}
        return 1.0 / (1.0 + np.exp(-np.clip(logit, -35, 35))), parts

    def score(self, ctx: ScoringContext) -> np.ndarray:
        return self.explain(ctx)[0]
