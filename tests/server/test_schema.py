"""schemathesis against the ASGI app in-process: generated requests on every operation, and add -> context
sequences through the OpenAPI links. No server error, no answer that breaks the schema."""

from __future__ import annotations

import os

import hypothesis
import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")

from schemathesis.core.parameters import ParameterLocation  # noqa: E402
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance  # noqa: E402

from rdmem.server import ServerSettings, create_app  # noqa: E402
from rdmem.store import KeyStore, MemoryStore  # noqa: E402

from .._checks import HashingEmbedder  # noqa: E402

pytestmark = pytest.mark.slow  # generates hundreds of requests

STORE = MemoryStore()
_, KEY = KeyStore(STORE).create_key("fuzz")  # a keyed server, as deployed: schemathesis also checks that a missing or bad key is refused
# schemathesis's in-process client sends Host: testserver, which a loopback server answers only when told.
APP = create_app(ServerSettings(budget=300, max_messages=20, max_message_chars=2000, max_budget=5000,
                                allowed_hosts=("testserver",), metrics_tenant="fuzz"),
                 store=STORE, embedder=HashingEmbedder())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.update(headers={"Authorization": f"Bearer {KEY}", "X-Rdmem-Key": KEY})
CASES: list[str] = []
# The same cases on every run of the suite (CI stays green or red for a reason); RDMEM_FUZZ=random and
# RDMEM_FUZZ_EXAMPLES=300 go looking for new ones.
EXAMPLES = int(os.environ.get("RDMEM_FUZZ_EXAMPLES", "40"))
FIXED = os.environ.get("RDMEM_FUZZ") != "random"


@pytest.fixture(scope="module", autouse=True)
def _lifespan():
    from fastapi.testclient import TestClient

    with TestClient(APP):  # opens the store and the session pool, as a server would
        yield


DOC = APP.openapi()


def _body_is_valid(case) -> bool:
    """Whether the body sent matches the documented schema (jsonschema, which evaluates oneOf exactly)."""
    import jsonschema_rs
    from schemathesis.core import NOT_SET

    if case.body is NOT_SET or isinstance(case.body, (bytes, bytearray)):
        return False
    operation = DOC["paths"][case.operation.path][case.method.lower()]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.Draft202012Validator({**body, "components": DOC["components"]}).is_valid(case.body)


def negative_data_rejected(ctx, response, case):
    """schemathesis's ``negative_data_rejection``, less its known false positive: a "negative" body whose
    mutation landed in one branch of a oneOf (a content part, a message role) and so is valid after all."""
    from schemathesis.specs.openapi.checks import _has_other_negated_location
    from schemathesis.specs.openapi.checks import negative_data_rejection as check

    meta = case.meta
    if meta is not None and meta.is_negative_at(ParameterLocation.BODY) and \
            not _has_other_negated_location(case, ParameterLocation.BODY) and _body_is_valid(case):
        return None
    return check(ctx, response, case)


MEM0_SCOPE = "At least one identifier (user_id, agent_id, run_id) is required."


def positive_data_accepted(ctx, response, case):
    """schemathesis's ``positive_data_acceptance``, less mem0's own rule, which OpenAPI cannot state for
    query parameters: a call with none of user_id, agent_id, run_id is a 400 (as mem0's server answers)."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance as check

    if case.operation.tags == ["mem0"] and response.status_code == 400 and MEM0_SCOPE in response.text:
        given = {**(case.query or {}), **(case.body if isinstance(case.body, dict) else {})}
        given.update(given.get("filters") if isinstance(given.get("filters"), dict) else {})
        assert not any(isinstance(given.get(k), str) and given[k].strip() for k in ("user_id", "agent_id", "run_id"))
        return None
    return check(ctx, response, case)


@schema.parametrize()
@settings(max_examples=EXAMPLES, derandomize=FIXED, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation(case):
    CASES.append(case.operation.label)
    case.call_and_validate(excluded_checks=[negative_data_rejection, positive_data_acceptance],
                           additional_checks=[negative_data_rejected, positive_data_accepted])


LINKED: list[str] = []


class Workflow(schema.as_state_machine()):  # type: ignore[misc]
    def setup(self):
        """Every sequence starts from an empty store, so hypothesis can replay one exactly."""
        for info in STORE.sessions():
            STORE.delete_session(info.session)
        APP.state.rdmem.pool._managers.clear()

    def validate_response(self, response, case, additional_checks=(), **kwargs):
        case.validate_response(response, excluded_checks=[negative_data_rejection, positive_data_acceptance],
                               additional_checks=[negative_data_rejected, positive_data_accepted, *additional_checks])

    def after_call(self, response, case):
        LINKED.append(case.operation.label)
        super().after_call(response, case)


TestAddThenRead = Workflow.TestCase
TestAddThenRead.settings = settings(max_examples=EXAMPLES // 2, derandomize=FIXED, stateful_step_count=6, deadline=None,
                                    suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])


def test_enough_cases_ran():
    """Runs after the generated tests of this module (pytest keeps definition order)."""
    print(f"{len(CASES)} generated cases, {len(LINKED)} calls in linked sequences")
    assert len(CASES) >= 500, f"only {len(CASES)} generated cases ran"
    # the state machine followed add -> context links, not only single calls
    assert "POST /v1/sessions/{session}/context" in LINKED, sorted(set(LINKED))
