"""What a :class:`~rdmem.MemoryManager` learns online from feedback: a mixin over its session and policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import InvalidInput
from .learn.online import STATE_KEY as FEEDBACK_KEY
from .learn.online import Feedback
from .store import UnknownIdError

if TYPE_CHECKING:
    from ._session import SessionView
    from .embed import Embedder

__all__ = ["OnlineLearning"]


class OnlineLearning:
    """``feedback()`` and ``reset_feedback()`` of a manager: its session's shift of the value model, kept in
    the session's state in the store. The manager provides ``_lock``, ``_sync()``, ``_embedder``,
    ``session``, ``policy`` and ``_feedback`` (``None`` for a policy without a learned value model)."""

    _feedback: Feedback | None
    _lock: Any
    session: str
    policy: Any

    if TYPE_CHECKING:  # what the manager provides
        def _sync(self) -> SessionView: ...

        @property
        def _embedder(self) -> Embedder | None: ...

    def feedback(self, ids: Sequence[str], reward: float, *, learning_rate: float = 0.5, max_shift: float = 2.0) -> None:
        """Tell the value model whether the units ``ids`` turned out to be needed (online learning).

        ``reward`` in [0, 1]: 1 means "these were needed" (an answer used them),
        0 means "not needed". Each call takes one stochastic-gradient step on
        the logistic loss of the prior value model, every weight's shift
        clipped to ``[-max_shift, max_shift]`` (see :class:`rdmem.learn.Feedback`).
        The shift applies to this session only, is saved in the session's
        state in the store (other managers of the session, and a reopened one,
        use it), and :meth:`reset_feedback` reverts it exactly. Needs a policy
        with a learned value model (``rd``).
        """
        if not 0.0 <= float(reward) <= 1.0:
            raise InvalidInput(f"reward must be in [0, 1], got {reward!r}")
        if not learning_rate > 0:
            raise InvalidInput(f"learning_rate must be > 0, got {learning_rate!r}")
        with self._lock:
            view = self._sync()
            feedback = self._learner()
            unknown = [i for i in ids if i not in view.by_id]
            if unknown:
                raise UnknownIdError(f"unknown ids in feedback: {unknown[:5]}")
            if not ids:
                return
            from .scoring import ScoringContext

            units = [view.by_id[i] for i in ids]
            ctx = ScoringContext(units, embedder=self._embedder, doc_freq=(view.df, len(view.units)))
            feedback.step(units, ctx, reward, learning_rate=learning_rate, max_shift=max_shift)
            self._save_feedback(view, feedback)

    def reset_feedback(self) -> None:
        """Undo all :meth:`feedback` for this session (back to the shipped or given model), in the store too."""
        with self._lock:
            view = self._sync()
            feedback = self._learner()
            feedback.reset()
            self._save_feedback(view, feedback)

    def _learner(self) -> Feedback:
        if self._feedback is None:
            raise InvalidInput(f"feedback needs a policy with a learned value model (rd); {self.policy.name!r} has none")
        return self._feedback

    def _save_feedback(self, view: SessionView, feedback: Feedback) -> None:
        written = feedback.save(view.store, self.session)
        if view.written(written.prev, written.version):
            view.state[FEEDBACK_KEY] = feedback.values()

    def _restore_feedback(self, view: SessionView) -> None:
        """The session's saved feedback shift, when its policy learns (a reading of the session's state)."""
        if self._feedback is not None:
            self._feedback.restore(view.state, view.store, self.session, has_units=bool(view.units))

