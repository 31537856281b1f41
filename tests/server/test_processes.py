"""``rdmem serve`` as users run it: separate processes, ``--workers 2``, two servers on one PostgreSQL,
keys made and revoked with ``rdmem keys`` while a server runs, and a bounded load with an async client."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import httpx
import pytest

from rdmem.store import open_store

pytestmark = pytest.mark.slow  # real server processes, each loading the embedding model


def chat(n: int, tag: str = "") -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}turn {i}: note number {i}"}
            for i in range(n)]


def rdmem(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "rdmem.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_no_arguments_serves_an_sqlite_file_in_a_named_data_dir(rdmem_serve, tmp_path):
    server = rdmem_serve()
    assert httpx.post(f"{server.url}/v1/sessions/s/messages", json={"messages": chat(2)}).status_code == 201
    out = server.output()
    assert f"store sqlite:///{tmp_path / 'data' / 'memory.db'} (the default" in out
    assert "no API keys: anyone who can reach the server is tenant 'default'" in out
    assert "math thread" in out and "per worker (" in out  # its choice of threads, and how to change it
    assert f"listening on {server.url}" in out
    assert server.stop() == 0
    with open_store(f"sqlite:///{tmp_path / 'data' / 'memory.db'}") as store:
        assert [u.id for u in store.load("t/default/s")] == ["m0", "m1"]


def test_a_public_address_without_keys_is_refused(tmp_path):
    # it exits before binding anything (tests listen on loopback only)
    done = rdmem("serve", "--host", "0.0.0.0", "--store", f"sqlite:///{tmp_path / 'm.db'}")
    assert done.returncode == 2  # refused as a usage error
    assert "no API keys in this store: refusing to serve 0.0.0.0 without them" in done.stderr
    assert "Traceback" not in done.stderr


def test_keys_made_and_revoked_while_the_server_runs(rdmem_serve, tmp_path):
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    made = rdmem("keys", "create", "--tenant", "acme", "--name", "ci", "--store", url)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("rdmem_") and "shown once" in made.stderr
    listed = rdmem("keys", "list", "--store", url)
    assert listed.returncode == 0 and "acme" in listed.stdout and key not in listed.stdout  # only hashes are kept
    key_id = listed.stdout.splitlines()[1].split()[0]

    server = rdmem_serve("--store", url)
    assert "no API keys" not in server.output()
    assert httpx.get(f"{server.url}/v1/sessions").status_code == 401
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.post(f"{server.url}/v1/sessions/s/messages", json={"messages": chat(2)}, headers=auth).status_code == 201
    assert [s["session"] for s in httpx.get(f"{server.url}/v1/sessions", headers=auth).json()["sessions"]] == ["s"]

    revoked = rdmem("keys", "revoke", key_id, "--store", url)
    assert revoked.returncode == 0, revoked.stderr
    answer = httpx.get(f"{server.url}/v1/sessions", headers=auth)  # another process revoked it: at once
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"
    # With every key revoked the server still asks for one (it served anyone as tenant 'default' then).
    for anonymous in (httpx.get(f"{server.url}/v1/sessions"),
                      httpx.post(f"{server.url}/v1/sessions/s/messages", json={"messages": chat(1)})):
        assert anonymous.status_code == 401, anonymous.text
    refused = rdmem("keys", "create", "--tenant", "default", "--store", url)
    assert refused.returncode != 0 and "tenant 'default' is a server's without keys" in refused.stderr
    again = rdmem("keys", "revoke", key_id, "--store", url)
    assert again.returncode == 2 and "revoked already" in again.stderr


def test_two_servers_on_one_postgresql_share_sessions(rdmem_serve, pg_fresh_url):
    a = rdmem_serve("--store", pg_fresh_url)
    b = rdmem_serve("--store", pg_fresh_url)
    peanuts = {"role": "user", "content": "I'm allergic to peanuts."}
    ids = httpx.post(f"{a.url}/v1/sessions/shared/messages", json={"messages": [peanuts, *chat(6)]}).json()["ids"]
    page = httpx.get(f"{b.url}/v1/sessions/shared/messages").json()
    assert [m["id"] for m in page["messages"]] == ids
    ctx = httpx.post(f"{b.url}/v1/sessions/shared/context", json={"budget": 60, "query": "what am I allergic to?"})
    assert ctx.status_code == 200 and any("peanuts" in (m.get("content") or "") for m in ctx.json()["messages"])
    assert httpx.post(f"{b.url}/v1/sessions/shared/messages", json={"messages": chat(1, "from b ")}).status_code == 201
    assert httpx.get(f"{a.url}/v1/sessions/shared").json()["units"] == 8
    assert httpx.delete(f"{b.url}/v1/sessions/shared").status_code == 204
    assert httpx.get(f"{a.url}/v1/sessions/shared").status_code == 404


async def _load(url: str, sessions: int, adds: int) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """``sessions`` writers at once, each adding ``adds`` messages in order (and asking for a context every
    fifth); what each acknowledged, and every error."""
    acked: dict[str, list[tuple[str, str]]] = {}
    errors: list[str] = []

    async def writer(client: httpx.AsyncClient, session: str) -> None:
        acked[session] = []
        for i in range(adds):
            content = f"{session} message {i}: the value is {i * 7}"
            r = await client.post(f"/v1/sessions/{session}/messages", json={"messages": {"role": "user",
                                                                                         "content": content}})
            if r.status_code != 201:
                errors.append(f"add {session} {i}: {r.status_code} {r.text[:200]}")
                continue
            acked[session].append((r.json()["ids"][0], content))
            if i % 5 == 4:
                c = await client.post(f"/v1/sessions/{session}/context", json={"budget": 200, "query": f"value {i}"})
                if c.status_code != 200 or c.json()["tokens"] > 200:
                    errors.append(f"context {session} {i}: {c.status_code} {c.text[:200]}")

    limits = httpx.Limits(max_connections=sessions)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await asyncio.wait_for(asyncio.gather(*(writer(client, f"load{j}") for j in range(sessions))), timeout=240)
    return acked, errors


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_load_with_two_workers_loses_nothing(rdmem_serve, tmp_path, backend, request):
    url = f"sqlite:///{tmp_path / 'load.db'}" if backend == "sqlite" else request.getfixturevalue("pg_fresh_url")
    server = rdmem_serve("--store", url, "--workers", "2", "--budget", "300")
    acked, errors = asyncio.run(_load(server.url, sessions=8, adds=25))
    assert errors == []
    assert server.stop() == 0
    with open_store(url) as store:
        for session, written in acked.items():
            assert len(written) == 25
            stored = [(u.id, u.message["content"]) for u in store.load(f"t/default/{session}")]
            assert stored == written  # every acknowledged message, once, in the order it was acknowledged


def test_the_workers_sockets_are_tcp_sockets_on_one_port():
    """uvicorn's --workers socket has protocol 0, so asyncio left Nagle's algorithm on and every answer
    waited ~40 ms for a delayed ACK; and one socket shared by all workers let one take every connection
    opened at once. rdmem's workers have a socket each, on one port."""
    import socket

    from rdmem.server._workers import listen

    first = listen("127.0.0.1", 0, reuse_port=True)
    second = listen("127.0.0.1", first.getsockname()[1], reuse_port=True)
    try:
        for sock in (first, second):
            assert (sock.family, sock.type, sock.proto) == (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        first.listen()
        second.listen()  # as the workers do
        with pytest.raises(OSError):  # the port is taken: another server is refused
            listen("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()
        second.close()


def test_a_port_in_use_is_one_line(rdmem_serve, tmp_path):
    first = rdmem_serve("--store", f"sqlite:///{tmp_path / 'a.db'}")
    done = rdmem("serve", "--port", str(first.port), "--workers", "2", "--store", f"sqlite:///{tmp_path / 'b.db'}")
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{first.port}" in done.stderr
    assert "Traceback" not in done.stderr



def test_workers_stop_when_their_parent_is_killed(rdmem_serve, tmp_path):
    """``kill -9`` of ``rdmem serve --workers 2`` left its workers serving with nobody to restart them, holding
    the port: the same command then failed ("address in use") until someone found them by hand."""
    first = rdmem_serve("--store", f"sqlite:///{tmp_path / 'm.db'}", "--workers", "2", "--policy", "window")
    assert httpx.get(f"{first.url}/healthz").status_code == 200
    first.proc.kill()
    first.proc.wait(10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the workers drain and go within a second or so
        try:
            httpx.get(f"{first.url}/healthz", timeout=1)
        except httpx.TransportError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the workers still serve 30 s after their parent was killed")
    again = rdmem_serve("--store", f"sqlite:///{tmp_path / 'm.db'}", "--workers", "2", "--policy", "window",
                        port=first.port)
    assert httpx.get(f"{again.url}/healthz").status_code == 200


_CRASHING = """
import logging, os, signal, sys, threading
from rdmem.server._workers import bind, run_workers
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
threading.Timer(float(sys.argv[1]), lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
run_workers({"app": "rdmem_no_such_module:app", "log_level": "critical"}, bind("127.0.0.1", 0, 1))
"""


def test_a_worker_that_cannot_start_is_restarted_less_and_less_often():
    """A worker that exits as it starts (its app cannot load, its database is away) was started again every
    0.2 s, each start loading Python and the app: now after 0, 1, 2, 4 ... seconds (at most 30), and the log
    says so. The delays themselves: ``restart_delay``'s doctest."""
    import re

    out = subprocess.run([sys.executable, "-c", _CRASHING, "12"], capture_output=True, text=True, timeout=120)
    exits = re.findall(r"worker 0 \(pid \d+\) exited with \d+; starting another(?: in (\d+) s)?", out.stderr)
    assert len(exits) >= 3, out.stderr[-2000:]
    assert [int(w or 0) for w in exits[:3]] == [0, 1, 2]  # the second short life waits 1 s, the third 2 s


def test_a_worker_that_cannot_start_again_gives_its_connections_to_the_live_ones(rdmem_serve, tmp_path):
    """``--workers 2`` on PostgreSQL: a worker killed while the database is down cannot start again (it needs the
    database), and the parent kept its socket open: the kernel went on handing it new connections, which hung
    (5 of 8 health checks timed out at 8 s). Its socket is closed until a worker serves it again: every request
    is answered by the live worker (the API's description: it needs no store, so each answers at once)."""
    import os
    import signal

    from .._pg import OwnPostgres

    pg = OwnPostgres(tmp_path / "pg")
    try:
        server = rdmem_serve("--store", pg.url, "--workers", "2", "--policy", "window")
        workers = [pid for pid, cmd in _children(server.proc.pid) if "resource_tracker" not in cmd]
        assert len(workers) == 2
        port = int(server.url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60  # 'listening' is the parent's bind: each worker listens once started
        while not all(_listens(pid, port) for pid in workers):  # (a database stopped before then: both exit)
            assert time.monotonic() < deadline, "the workers did not start listening within 60 s"
            time.sleep(0.1)
        pg.stop()
        os.kill(workers[0], signal.SIGKILL)
        time.sleep(2)  # its replacement fails to start (exit 3) at least once meanwhile
        answers = []
        for _ in range(12):  # a new connection each: the kernel picks a socket for each (about half each before)
            try:
                answers.append(httpx.get(f"{server.url}/openapi.json", timeout=3, headers={"connection": "close"})
                               .status_code)
            except httpx.TimeoutException:
                answers.append("timed out")
        assert answers == [200] * 12, answers
        assert httpx.get(f"{server.url}/healthz", timeout=8).status_code == 503
        pg.start()
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.url}/healthz", timeout=8).status_code != 200:
            assert time.monotonic() < deadline, "not served again 30 s after the database came back"
            time.sleep(0.2)
        assert "exited with 3; starting another" in server.output()
    finally:
        pg.close()


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (from /proc)."""
    import os

    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    listening.add(f"socket:[{fields[9]}]")
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") in listening for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _children(pid: int) -> list[tuple[int, str]]:
    """The processes whose parent is ``pid``, with their command lines (from /proc)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append((int(entry), cmd))
    return found


def test_a_worker_started_again_after_every_key_was_revoked_still_asks_for_a_key(rdmem_serve, tmp_path):
    """A worker counted keys revoked since *its own* start: one started again after a crash (``kill -9``), every
    key revoked, found no key and served anyone as tenant 'default' (12 of 30 anonymous writes taken)."""
    import os
    import signal

    url = f"sqlite:///{tmp_path / 'keys.db'}"
    made = rdmem("keys", "create", "--tenant", "acme", "--store", url)
    assert made.returncode == 0, made.stderr
    key_id = rdmem("keys", "list", "--store", url).stdout.splitlines()[1].split()[0]
    server = rdmem_serve("--store", url, "--workers", "2", "--policy", "window")
    port = int(server.url.rsplit(":", 1)[1])
    workers = [pid for pid, cmd in _children(server.proc.pid) if "resource_tracker" not in cmd]
    deadline = time.monotonic() + 60
    while not all(_listens(pid, port) for pid in workers):
        assert time.monotonic() < deadline, "the workers did not start listening within 60 s"
        time.sleep(0.2)
    assert rdmem("keys", "revoke", key_id, "--store", url).returncode == 0
    time.sleep(1.1)  # the new worker starts a second or more after the revoke
    os.kill(workers[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while len(fresh := [p for p, c in _children(server.proc.pid) if "resource_tracker" not in c and p not in workers]) < 1 \
            or not _listens(fresh[0], port):
        assert time.monotonic() < deadline, "no worker was started again within 60 s"
        time.sleep(0.2)
    answers = []
    for i in range(30):  # a new connection each: spread over both workers
        with httpx.Client(timeout=30) as anonymous:
            answers.append(anonymous.post(f"{server.url}/v1/sessions/anon/messages",
                                          json={"messages": [{"role": "user", "content": f"write {i}"}]}).status_code)
    assert set(answers) == {401}, answers
