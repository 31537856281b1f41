"""``rdmem eval`` with the variants of issue 25's marker and coherence measurements registered beside the
shipped policies, so that they run in the same evaluation (same questions, same LM sample) as ``rd``.

- ``rd-runs``: ``rd`` whose managers send a marker per omitted run (``MemoryManager(markers=True)``,
  the default before 2026-12-05);
- ``rd-c<C>r<R>``: ``RDPolicy(coherence=C / 100, coherence_reach=R / 10)``, e.g. ``rd-c200r10`` (the
  shipped setting), ``rd-c50r20`` (the one before), ``rd-c100r20``, ``rd-c200r20``, ``rd-c300r10``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_variants.py eval locomo ../shared/data/locomo/locomo_dev.json \\
        --budgets 500,1000,2000,4000,8000 --policies rd-runs,rd --regime all --categories 1,2,3,4 --seed 0 --no-plot
    ... --budgets 500,1000,2000 --policies window,rd,rd-runs --regime both --lm --lm-sample 24 --lm-turns 12 \\
        --lm-max-tokens 4096

Everything after the script's name is ``rdmem``'s command line. The variants are registered at import, so
the evaluation's worker processes (spawned) have them too.
"""

from __future__ import annotations

import sys
from typing import Any

import rdmem.eval._jobs as jobs
from rdmem.policies import register_policy
from rdmem.policies.rd import RDPolicy

register_policy("rd-runs", lambda: RDPolicy(name="rd-runs"))
for c in (50, 100, 150, 200, 300):
    for r in (10, 15, 20, 30):
        name = f"rd-c{c}r{r}"
        register_policy(name, lambda c=c, r=r, name=name: RDPolicy(name=name, coherence=c / 100,
                                                                   coherence_reach=r / 10))

_manager = jobs.MemoryManager


def _harness_manager(*args: Any, **kwargs: Any) -> Any:
    """The harness's manager, with a marker per omitted run for ``rd-runs``."""
    if kwargs.get("policy") == "rd-runs":
        kwargs["markers"] = True
    return _manager(*args, **kwargs)


jobs.MemoryManager = _harness_manager  # type: ignore[misc,assignment]

if __name__ == "__main__":
    from rdmem.cli import main

    sys.exit(main(sys.argv[1:]))
