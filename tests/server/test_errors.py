"""Whose fault an error is, over HTTP: only what the caller can fix is a 4xx; a bug is a 500 with an error id
whose traceback is in the server's log; a store that cannot be used is a 503 the client may retry."""

from __future__ import annotations

import logging

import httpx
import pytest

from rdmem.errors import StoreError, VersionConflict, WriteOutcomeUnknown
from rdmem.server import ServerSettings, create_app
from rdmem.store import MemoryStore

pytestmark = pytest.mark.slow  # starts a server

MESSAGE = {"messages": [{"role": "user", "content": "Remember that I'm allergic to peanuts."}]}


class _Broken:
    """An embedder with a bug: it raises an error the client has nothing to do with."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def embed(self, texts):
        raise self.exc


@pytest.mark.parametrize("exc", [
    ValueError("matrix shapes (3, 384) and (5,) not aligned: secret internals"),
    TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'"),
    KeyError("layer_3"),
    ImportError("cannot import name 'x' from partially initialized module 'y'"),
], ids=["ValueError", "TypeError", "KeyError", "ImportError"])
def test_a_bug_is_a_500_with_an_error_id_whose_traceback_is_logged(serve, tmp_path, caplog, exc):
    live = serve(create_app(ServerSettings(store=f"sqlite:///{tmp_path / 'm.db'}"), embedder=_Broken(exc)))
    # Storing does not embed (the background worker does, and logs its own failures); a search embeds its query.
    assert httpx.post(f"{live.url}/v1/sessions/alice/messages", json=MESSAGE, timeout=30).status_code == 201
    with caplog.at_level(logging.ERROR, logger="rdmem.server"):
        r = httpx.post(f"{live.url}/v1/sessions/alice/search", json={"query": "peanuts"}, timeout=30)
    assert r.status_code == 500, r.text
    error = r.json()["error"]
    assert error["code"] == "internal_error" and r.headers["X-Rdmem-Error-Id"] == error["id"]
    assert error["message"] == f"internal error {error['id']}; see the server's log"
    assert str(exc.args[0]) not in r.text  # nothing of the bug's message reaches the client
    logged = [rec for rec in caplog.records if error["id"] in rec.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None and logged[0].exc_info[1] is exc
    assert "POST /v1/sessions/alice/search" in logged[0].getMessage()
    # the server is still fine: a caller's mistake is still the caller's (400, the field named)
    bad = httpx.post(f"{live.url}/v1/sessions/alice/context", json={"budget": 0}, timeout=30)
    assert bad.status_code == 422 and "budget" in bad.json()["error"]["message"]


class _Unavailable(MemoryStore):
    """A store whose writes fail as a database that went away fails."""

    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def _append(self, session, units):
        raise self.exc


def test_a_store_that_cannot_be_used_is_a_503_to_retry_with_an_error_id(serve, hashing_embedder, caplog):
    live = serve(create_app(ServerSettings(), store=_Unavailable(StoreError("PostgreSQL store at db:5432/x: gone")),
                            embedder=hashing_embedder))
    with caplog.at_level(logging.ERROR, logger="rdmem.server"):
        r = httpx.post(f"{live.url}/v1/sessions/alice/messages", json=MESSAGE, timeout=30)
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    error = r.json()["error"]
    assert error["code"] == "store_unavailable" and "gone" not in r.text and "db:5432" not in r.text
    assert any(error["id"] in rec.getMessage() and "gone" in rec.getMessage() for rec in caplog.records)


def test_a_write_whose_outcome_is_unknown_is_not_a_503_to_retry(serve, hashing_embedder, caplog):
    """A commit whose answer was lost was a 503 with Retry-After: mem0 clients, REST adds without ids and MCP
    callers retried, and stored the memory twice. It says it may have been stored, and not to retry blindly."""
    lost = WriteOutcomeUnknown("PostgreSQL store at db:5432/x: the connection was lost during a write, which may "
                               "or may not have been stored: server closed the connection unexpectedly")
    live = serve(create_app(ServerSettings(), store=_Unavailable(lost), embedder=hashing_embedder))
    with caplog.at_level(logging.ERROR, logger="rdmem.server"):
        for path, body in (("/v1/sessions/alice/messages", MESSAGE),
                           ("/memories", {"messages": [{"role": "user", "content": "I like tea"}], "user_id": "al"})):
            r = httpx.post(f"{live.url}{path}", json=body, timeout=30)
            assert r.status_code == 503 and "Retry-After" not in r.headers, (path, r.text)
            error = r.json()["error"]
            assert error["code"] == "write_outcome_unknown" and "db:5432" not in r.text
            assert error["message"] == (f"the store went away during the write (error {error['id']}; see the "
                                        "server's log): it may have been stored; read before sending it again")


def test_a_write_conflict_that_escapes_is_a_409_not_a_store_outage(serve, hashing_embedder):
    live = serve(create_app(ServerSettings(), store=_Unavailable(VersionConflict("session 's' is at version 9, not 8")),
                            embedder=hashing_embedder))
    r = httpx.post(f"{live.url}/v1/sessions/alice/messages", json=MESSAGE, timeout=30)
    assert r.status_code == 409 and r.json()["error"] == {"code": "conflict",
                                                          "message": "session 's' is at version 9, not 8"}


def test_caller_errors_from_deep_in_the_library_are_400s_naming_the_field(serve, hashing_embedder):
    live = serve(create_app(ServerSettings(), store=MemoryStore(), embedder=hashing_embedder))
    r = httpx.post(f"{live.url}/v1/sessions/alice/messages", content=b'{"messages": [{"role": "user", '
                   b'"content": "a\\ud800"}]}', headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"] == {
        "code": "invalid_request",
        "message": "message 0: content is not valid Unicode: a lone surrogate '\\ud800' at character 1"}
    r = httpx.post(f"{live.url}/v1/sessions/alice/messages",
                   json={"messages": [{"role": "user", "content": "a", "id": "x"}]}, timeout=30)
    again = httpx.post(f"{live.url}/v1/sessions/alice/messages",
                       json={"messages": [{"role": "user", "content": "b", "id": "x"}]}, timeout=30)
    assert again.status_code == 409 and "already has a message with id 'x'" in again.json()["error"]["message"]


class _Flaky(MemoryStore):
    """A store that stops answering while ``down`` is set."""

    down = False

    def _version(self, session):
        if self.down:
            raise StoreError("PostgreSQL store at db:5432/x: no connection to the database within 5 s")
        return super()._version(session)


def test_healthz_says_whether_the_store_answers(serve, hashing_embedder):
    store = _Flaky()
    live = serve(create_app(ServerSettings(), store=store, embedder=hashing_embedder))
    ok = httpx.get(f"{live.url}/healthz", timeout=30)
    assert ok.status_code == 200 and ok.json()["status"] == "ok" and ok.json()["store"] == "ok"
    store.down = True
    down = httpx.get(f"{live.url}/healthz", timeout=30)
    assert down.status_code == 503 and down.headers["Retry-After"] == "1"
    assert down.json()["error"]["code"] == "store_unavailable" and down.json()["error"]["id"]
    store.down = False
    assert httpx.get(f"{live.url}/healthz", timeout=30).status_code == 200
