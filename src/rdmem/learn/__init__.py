"""Learned value models: the probability that a future question needs a unit."""

from .features import PRIOR_FEATURES, QUERY_FEATURES, prior_matrix, query_matrix
from .model import LogisticModel, default_models

__all__ = ["LogisticModel", "default_models", "prior_matrix", "query_matrix", "PRIOR_FEATURES", "QUERY_FEATURES"]
