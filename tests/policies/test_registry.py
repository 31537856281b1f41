"""The policy registry: names resolve, registering a name again takes effect, bad factories are refused."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from rdmem import POLICIES, Plan, Problem, compact, get_policy, register_policy


@dataclass(frozen=True)
class _Fixed:
    """Keeps the blocks listed in ``keep``."""

    name: str
    keep: tuple[int, ...]
    description: str = "fixed choice"
    needs_embeddings: bool = False

    def plan(self, problem: Problem) -> Plan:
        return Plan(chosen=[b for b in self.keep if b < len(problem.blocks)], scores=np.zeros(len(problem.units)))


@pytest.fixture
def registry():
    saved = dict(POLICIES)
    yield
    POLICIES.clear()
    POLICIES.update(saved)


HISTORY = [{"id": f"m{i}", "role": "assistant" if i % 2 else "user", "content": f"note number {i} " * 6}
           for i in range(8)]


def test_registering_a_name_again_takes_effect(registry):
    register_policy("fixed", lambda: _Fixed("fixed", (0,)))
    assert get_policy("fixed").keep == (0,)
    first = compact(HISTORY, budget=120, policy="fixed").kept_ids
    register_policy("fixed", lambda: _Fixed("fixed", (1,)))
    assert get_policy("fixed").keep == (1,)  # not the instance made for the first registration
    assert compact(HISTORY, budget=120, policy="fixed").kept_ids != first


def test_a_registered_policy_is_found_by_every_front_door(registry, capsys):
    from rdmem.cli import main

    register_policy("fixed", lambda: _Fixed("fixed", (0,)))
    assert main(["policies"]) == 0
    assert "fixed" in capsys.readouterr().out


def test_bad_registrations_are_refused(registry):
    with pytest.raises(ValueError, match="policy name must be a non-empty string"):
        register_policy("", lambda: _Fixed("x", ()))
    with pytest.raises(TypeError, match="factory must be a callable returning a policy, got str"):
        register_policy("x", "rd")  # type: ignore[arg-type]
    register_policy("not-a-policy", lambda: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="the factory registered as 'not-a-policy' returned int, not a policy"):
        get_policy("not-a-policy")
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose one of"):
        get_policy("nope")
