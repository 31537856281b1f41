"""How long, and how much memory, a server takes to refuse a body of many tiny messages (issue 24, item 4).

A 7.9 MB body of 493,000 messages (``{"role":"user"}``) is posted to ``POST /v1/sessions/s/messages``
(or the proxy's ``/v1/chat/completions``) of a live server (uvicorn in a thread of this
process, the default limits: at most 1,000 messages); the script prints the
answer's status, the wall time, and how much this process's peak resident
memory grew. Run it on any checkout (it uses only the public API)::

    PYTHONPATH=src python benchmarks/limits_refusal.py [--messages 493000] [--door v1|proxy]
"""

from __future__ import annotations

import argparse
import resource
import socket
import threading
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=493_000)
    parser.add_argument("--door", choices=("v1", "proxy"), default="v1",
                        help="v1: POST /v1/sessions/s/messages; proxy: POST /v1/chat/completions (its upstream is a "
                        "closed port: a request that is not refused gets a 502)")
    args = parser.parse_args()

    import httpx
    import uvicorn

    from rdmem.server import ServerSettings, create_app
    from rdmem.store import MemoryStore

    upstream = "http://127.0.0.1:9/v1" if args.door == "proxy" else None
    app = create_app(ServerSettings(policy="window", upstream=upstream), store=MemoryStore())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    messages = "[" + ",".join(['{"role":"user"}'] * args.messages) + "]"
    body = (messages if args.door == "v1" else '{"model":"m","messages":' + messages + "}").encode()
    path = "/v1/sessions/s/messages" if args.door == "v1" else "/v1/chat/completions"
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{path}"
    with httpx.Client(timeout=600) as client:
        client.get(url.replace(path, "/healthz"))  # warm: the first request's imports
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        r = client.post(url, content=body, headers={"content-type": "application/json"})
        took = time.perf_counter() - start
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    server.should_exit = True
    print(f"body {len(body) / 1e6:.1f} MB, {args.messages} messages: {r.status_code} in {took:.2f} s, "
          f"peak RSS +{grew / 1024:.0f} MB; {r.text[:90]}")


if __name__ == "__main__":
    main()
