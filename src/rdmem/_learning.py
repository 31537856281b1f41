"""What a :class:`~rdmem.MemoryManager` learns online from feedback: an object the manager holds.

Its inputs are explicit: the policy and the session's name when it is made,
and on every call the session's view (brought up to date by the manager,
under its lock) and the embedder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .contract import Policy
from .errors import InvalidInput, StoreError
from .learn.online import STATE_KEY as FEEDBACK_KEY
from .learn.online import Feedback
from .store import UnknownIdError, VersionConflict

if TYPE_CHECKING:
    from ._session import SessionView
    from .embed import Embedder

__all__ = ["OnlineLearning"]

#: How often a step is read again and retried when the session was written between its read and its save.
_SAVES = 8


class OnlineLearning:
    """A session's shift of its policy's value model, learned from feedback and kept in the session's state
    in the store. ``feedback`` is ``None`` for a policy without a learned value model."""

    def __init__(self, policy: Policy, session: str) -> None:
        self.base = policy
        self.session = session
        self.feedback: Feedback | None = Feedback.of(policy)

    def policy(self) -> Policy:
        """The policy, with this session's feedback applied to its value model."""
        return self.feedback.policy() if self.feedback is not None else self.base

    def step(self, view: SessionView, ids: Sequence[str], reward: float, embedder: Embedder | None, *,
             learning_rate: float, max_shift: float) -> None:
        """One step of :meth:`rdmem.MemoryManager.feedback` on the session ``view`` shows, saved in its store."""
        if not 0.0 <= float(reward) <= 1.0:
            raise InvalidInput(f"reward must be in [0, 1], got {reward!r}")
        if not learning_rate > 0:
            raise InvalidInput(f"learning_rate must be > 0, got {learning_rate!r}")
        feedback = self._learner()
        ids = list(dict.fromkeys(ids))  # the messages that were (not) needed: each counts once
        view.fetch(ids=ids)  # older than the view holds: read them
        unknown = [i for i in ids if i not in view.by_id]
        if unknown:
            raise UnknownIdError(f"unknown ids in feedback: {unknown[:5]}")
        if not ids:
            return
        from .scoring import ScoringContext

        units = [view.by_id[i] for i in ids]
        ctx = ScoringContext(units, embedder=embedder, doc_freq=(view.df, view.df_n))
        before = feedback.delta_.copy()
        feedback.step(units, ctx, reward, learning_rate=learning_rate, max_shift=max_shift)
        self._save(view, feedback, before)

    def reset(self, view: SessionView) -> None:
        """Undo every step for this session (back to the shipped or given model), in the store too."""
        feedback = self._learner()
        before = feedback.delta_.copy()
        feedback.reset()
        self._save(view, feedback, before)

    def saved(self, read: Callable[[], SessionView], step: Callable[[SessionView], None]) -> None:
        """``step`` on the session as ``read()`` gives it now, saved only if no one wrote the session since (read
        again and retried): two managers' steps at once both count, and a step never brings back a session
        deleted meanwhile (its ids are unknown at the next read)."""
        for _ in range(_SAVES):
            try:
                return step(read())
            except VersionConflict:
                continue
        raise StoreError(f"session {self.session!r} was written {_SAVES} times while feedback was saved; nothing "
                         "was saved (try again)")

    def restore(self, view: SessionView) -> None:
        """The session's saved shift, when its policy learns (a reading of the session's state)."""
        if self.feedback is not None:
            self.feedback.restore(view.state, view.store, self.session, has_units=bool(view.size[0]))

    def _learner(self) -> Feedback:
        if self.feedback is None:
            raise InvalidInput(f"feedback needs a policy with a learned value model (rd); {self.base.name!r} has none")
        return self.feedback

    def _save(self, view: SessionView, feedback: Feedback, before: Any) -> None:
        """Save the shift made from the session as ``view`` read it, if no one wrote the session since (another
        manager's step would be lost, a delete undone: the caller reads it again and retries); else undo it."""
        try:
            written = feedback.save(view.store, self.session, expect=view.version)
        except BaseException:
            feedback._set(before)
            raise
        if view.written(written.prev, written.version):
            view.state[FEEDBACK_KEY] = feedback.values()
