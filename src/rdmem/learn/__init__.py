"""Learning the value models: fitting them on labelled conversations (:mod:`.train`).

Inference (the models, their features, the shipped weights) lives in
:mod:`rdmem.scoring`; these names are re-exported here for convenience.
"""

from ..scoring.logistic import LogisticModel, default_models
from ..scoring.value_features import PRIOR_FEATURES, QUERY_FEATURES, prior_matrix, query_matrix
from .online import Feedback

__all__ = [
    "Feedback", "LogisticModel", "default_models", "prior_matrix", "query_matrix", "PRIOR_FEATURES", "QUERY_FEATURES",
]
