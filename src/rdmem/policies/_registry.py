"""Policies by name: the registry the CLI, the service and the evaluation harness resolve names through."""

from __future__ import annotations

from collections.abc import Callable

from ..contract import Policy
from ..errors import InvalidInput, InvalidType
from ..scoring import Information, Metadata, Recency, Relevance, Weighted, seed_scorer
from .ladder import LadderPolicy
from .modes import TASK_MODES
from .rd import RDPolicy
from .scored import ScoredPolicy
from .summary_buffer import SummaryBuffer

__all__ = ["POLICIES", "MODE_POLICIES", "get_policy", "register_policy"]

#: The policy each of rd's task modes names (``qa``, rd's default mode, is plain ``rd``); front doors read it
#: through :func:`rdmem.sessions.policy_for`.
MODE_POLICIES: dict[str, str] = {mode: "rd" if mode == "qa" else f"rd-{mode}" for mode in TASK_MODES}


def _rd_in_mode(mode: str) -> Callable[[], Policy]:
    return lambda: RDPolicy(name=MODE_POLICIES[mode], description=f"rd in {mode} mode: {TASK_MODES[mode].description}",
                            mode=mode)


def _builtin() -> dict[str, Callable[[], Policy]]:
    return {
        "window": lambda: ScoredPolicy(
            "window",
            "the most recent messages that fit, like LangChain trim_messages(strategy='last')",
            Recency(decay=0.0),
            selector="suffix",
        ),
        "summary_buffer": SummaryBuffer,
        "importance": lambda: ScoredPolicy(
            "importance",
            "highest utility first (recency, information, bonuses, query relevance) until the budget is full",
            Weighted(
                terms=(
                    ("recency", 1.0, Recency(decay=0.05)),
                    ("information", 1.0, Information()),
                    ("metadata", 0.5, Metadata()),
                    ("relevance", 1.5, Relevance()),
                ),
                normalize="minmax",
            ),
            selector="by_value",
            fill=True,
        ),
        "seed": lambda: ScoredPolicy(
            "seed",
            "the seed design's scorer (recency, relevance, uniqueness, bonuses) with an exact knapsack",
            seed_scorer(),
            selector="knapsack",
            fill=True,
        ),
        "rd": RDPolicy,
        "rd-ladder": LadderPolicy,
        **{name: _rd_in_mode(mode) for mode, name in MODE_POLICIES.items() if mode != "qa"},
    }


#: Policy factories by name. Add one with :func:`register_policy` (not by editing this dict: the
#: instances :func:`get_policy` keeps would not see the change).
POLICIES: dict[str, Callable[[], Policy]] = _builtin()
_INSTANCES: dict[str, Policy] = {}


def register_policy(name: str, factory: Callable[[], Policy]) -> None:
    """Add (or replace) the policy ``name``; the CLI, the service and the evaluation harness find it there.

    >>> from rdmem.policies import RDPolicy
    >>> register_policy("rd-strict", lambda: RDPolicy(name="rd-strict", duplicates=0.99))
    >>> get_policy("rd-strict").duplicates
    0.99
    >>> del POLICIES["rd-strict"]  # gone again (get_policy looks it up in POLICIES first)
    """
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"policy name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise InvalidType(f"factory must be a callable returning a policy, got {type(factory).__name__}")
    POLICIES[name] = factory
    _INSTANCES.pop(name, None)  # a name registered again gives the new policy from now on


def get_policy(policy: str | Policy) -> Policy:
    """A policy by name (or the object itself); unknown names list the valid ones."""
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise InvalidInput(f"unknown policy {policy!r}; choose one of {', '.join(sorted(POLICIES))}")
        if policy not in _INSTANCES:
            made = POLICIES[policy]()
            if not isinstance(made, Policy):
                raise InvalidType(f"the factory registered as {policy!r} returned {type(made).__name__}, not a policy")
            _INSTANCES[policy] = made
        return _INSTANCES[policy]
    if isinstance(policy, Policy):
        return policy
    raise InvalidType(f"policy must be a name or a policy object, got {type(policy).__name__}")
