"""schemathesis against the service on PostgreSQL: generated requests, positive and negative, on every
operation, with the same checks as on the in-memory store (tests/server/test_schema.py). No server error, no
answer that breaks the schema: PostgreSQL refuses what SQLite keeps (a NUL), and must not turn it into a 5xx.

(schemathesis's lazy pytest loader does not run on pytest 9, so the cases are drawn here, one hypothesis
run per operation and mode, inside one test that has the database as a fixture.)"""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

schemathesis = pytest.importorskip("schemathesis")

from schemathesis import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance  # noqa: E402

from rdmem.server import ServerSettings, create_app  # noqa: E402
from rdmem.store import KeyStore, open_store  # noqa: E402

from .._checks import HashingEmbedder  # noqa: E402
from .test_schema import negative_data_rejected, positive_data_accepted  # noqa: E402

pytestmark = pytest.mark.slow  # PostgreSQL, and hundreds of requests

EXAMPLES = int(os.environ.get("RDMEM_FUZZ_EXAMPLES", "15"))
FIXED = os.environ.get("RDMEM_FUZZ") != "random"


@pytest.fixture(scope="module")
def pg_schema(pg_server, pg_url):
    """The same keyed server as test_schema.py's, on a database of its own (its key would make every
    other test's keyless server on the shared database ask for one)."""
    import psycopg
    from fastapi.testclient import TestClient

    name = "rdmem_fuzz_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    store = open_store(pg_server.get_uri(name))
    _, key = KeyStore(store).create_key("fuzz")
    app = create_app(ServerSettings(budget=300, max_messages=20, max_message_chars=2000, max_budget=5000,
                                    allowed_hosts=("testserver",), metrics_tenant="fuzz"),
                     store=store, embedder=HashingEmbedder())
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.update(headers={"Authorization": f"Bearer {key}", "X-Rdmem-Key": key})
    with TestClient(app):  # opens the session pool, as a server would
        yield schema
    store.close()


def test_every_operation_on_postgres(pg_schema):
    ran: list[str] = []
    for result in pg_schema.get_all_operations():
        operation = result.ok()
        for mode in GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, derandomize=FIXED, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case):
                ran.append(operation.label)
                case.call_and_validate(excluded_checks=[negative_data_rejection, positive_data_acceptance],
                                       additional_checks=[negative_data_rejected, positive_data_accepted])

            try:
                check()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing to get wrong (no parameters)
    print(f"{len(ran)} generated cases on PostgreSQL, {len(set(ran))} operations")
    assert len(set(ran)) >= 15 and len(ran) >= 300, (len(ran), sorted(set(ran)))
