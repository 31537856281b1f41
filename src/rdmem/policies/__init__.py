"""Named policies: each turns a :class:`~rdmem.Problem` into a :class:`~rdmem.Plan` (one per file).

- :mod:`.scored`: score, add per block, select (``window``, ``importance``, ``seed``);
- :mod:`.summary_buffer`: a summary of the older part and the newest messages verbatim;
- :mod:`.rd`: the rate-distortion policy (``rd``, and ``rd-task``, ``rd-roleplay``,
  ``rd-creative`` with the presets of :mod:`.modes`);
- :mod:`.ladder`: ``rd-ladder``, rd's values with a representation ladder;
- :mod:`._registry`: the names (:data:`POLICIES`, :func:`get_policy`, :func:`register_policy`), and the
  policy each task mode names (:data:`MODE_POLICIES`).

A new policy is one small class (see :mod:`rdmem.contract`) and one
:func:`register_policy` call; the common tests pick it up from the registry.
"""

from ..contract import Plan, Policy, Problem
from ._registry import MODE_POLICIES, POLICIES, get_policy, register_policy
from .ladder import LadderPolicy
from .modes import TASK_MODES, TaskMode
from .rd import STREAM_ROOM_VALUE, RDPolicy, Valuation, for_working_set
from .scored import ScoredPolicy
from .summary_buffer import SummaryBuffer

__all__ = [
    "Policy", "Problem", "Plan", "ScoredPolicy", "SummaryBuffer", "RDPolicy", "Valuation", "LadderPolicy",
    "TaskMode", "TASK_MODES", "POLICIES", "MODE_POLICIES", "get_policy", "register_policy", "for_working_set",
    "STREAM_ROOM_VALUE",
]
