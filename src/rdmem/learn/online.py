"""Online feedback: a session's bounded tilt of a policy's learned value model.

A :class:`~rdmem.MemoryManager` keeps one :class:`Feedback` per session and
asks it for the policy to use; the shift itself is kept in the session's
state in the store, so every manager of the session (and a reopened one)
uses it.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..contract import LearnsOnline, Policy
from ..errors import InvalidInput
from ..scoring import ScoringContext
from ..scoring.value_features import model_prior_matrix
from ..units import MemoryUnit

__all__ = ["Feedback", "STATE_KEY"]

#: Key of the session state that holds the shift (and, before schema 2, of the log records that did).
STATE_KEY = "value_feedback"


class Feedback:
    """A bounded shift of the prior value model's weights, learnt from rewards, for one policy.

    Each call to :meth:`step` takes one stochastic-gradient step on the
    logistic loss of the prior model, in standardised feature space::

        delta += learning_rate * (reward - p(unit)) * z(unit) / len(units)

    with every coordinate clipped to ``[-max_shift, max_shift]``: feedback can
    tilt the model, never replace it. :meth:`policy` is the policy with the
    shifted model (the policy itself while the shift is zero).
    """

    def __init__(self, policy: Policy) -> None:
        value = policy.value_model() if isinstance(policy, LearnsOnline) else None
        if value is None:
            raise InvalidInput(f"feedback needs a policy with a learned value model (rd); {policy.name!r} has none")
        self._policy = policy
        self._value = value
        self.base = value.prior_model()
        self.delta_ = np.zeros(len(self.base.weights_))
        self._tuned: Policy | None = None
        self._seen: object = None  # the shift last read from or written to the store
        self._legacy_checked = self._legacy = False  # the log was read for a shift rdmem 0.1 saved; it held one

    @classmethod
    def of(cls, policy: Policy) -> Feedback | None:
        """Feedback for ``policy``, or ``None`` when it has no learned value model."""
        if not isinstance(policy, LearnsOnline) or policy.value_model() is None:
            return None
        return cls(policy)

    def model(self) -> Any:
        """The prior model with the shift applied."""
        tuned = copy.copy(self.base)
        tuned.weights_ = self.base.weights_ + self.delta_
        return tuned

    def policy(self) -> Policy:
        """The policy scoring with the shifted model (the same object while there is no shift)."""
        if not np.any(self.delta_):
            return self._policy
        if self._tuned is None:
            self._tuned = self._policy.with_value_model(self._value.with_prior(self.model()))  # type: ignore[attr-defined]
        return self._tuned

    def step(self, units: Sequence[MemoryUnit], ctx: ScoringContext, reward: float, *, learning_rate: float,
             max_shift: float) -> None:
        """One gradient step towards ``reward`` (in [0, 1]) for ``units`` (their context: ``ctx``)."""
        x = model_prior_matrix(self.base, ctx, novelty=False)
        z = (x - self.base.mean_) / self.base.scale_
        p = self.model().predict(x)
        step = learning_rate * ((float(reward) - p)[:, None] * z).mean(axis=0)
        self._set(np.clip(self.delta_ + step, -max_shift, max_shift))

    def reset(self) -> None:
        self._set(np.zeros_like(self.delta_))

    def values(self) -> list[float]:
        """The shift, as stored."""
        return [float(x) for x in self.delta_]

    def load(self, values: Sequence[float], session: str) -> None:
        """A shift read back from the store (ignored, with a warning, if it was made for another model)."""
        if len(values) != len(self.base.weights_):
            warnings.warn(
                f"rdmem: session {session!r} has feedback saved for another value model "
                f"({len(values)} weights, this one has {len(self.base.weights_)}); ignored",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        self._set(np.asarray(values, dtype=np.float64))

    def save(self, store: Any, session: str, expect: int | None = None) -> Any:
        """Write the shift to the session's state (and its log: the history of the shifts); the write. ``expect``:
        the session's version the shift was made from (a write since, or a delete: ``VersionConflict``)."""
        values = self.values()
        written = store.update_state(session, {STATE_KEY: values}, expect=expect)
        store.log_compaction(session, {STATE_KEY: values})
        self._seen = values
        return written

    def restore(self, state: dict[str, Any], store: Any, session: str, *, has_units: bool) -> None:
        """Take the shift the session's state holds, when it changed since this object last saw it."""
        saved = state.get(STATE_KEY)
        if saved is None and has_units and (not self._legacy_checked or self._legacy):
            # Saved by rdmem 0.1, which kept it in the session's log only: read again whenever the state still
            # lacks it (a delete takes the log too: the shift goes with it).
            self._legacy_checked = True
            logged = [r[STATE_KEY] for r in store.compaction_log(session) if STATE_KEY in r]
            saved = logged[-1] if logged else None
            self._legacy = saved is not None
        if saved is None and self._seen is not None:  # the session lost it: deleted (and begun again), so no shift
            self._seen = None
            self._set(np.zeros_like(self.delta_))
        if saved is None or saved == self._seen:
            return
        self._seen = saved
        self.load(saved, session)

    def _set(self, delta: np.ndarray) -> None:
        self.delta_ = delta
        self._tuned = None
