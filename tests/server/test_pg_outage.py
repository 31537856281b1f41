"""The fault suite's database half: ``rdmem serve --store postgresql://...`` under load while its database's
connections are terminated and the database is restarted. Nothing acknowledged is lost; the server serves
again within 5 s of the database's return (it answered 503 "the connection is closed" forever before)."""

from __future__ import annotations

import pytest

from rdmem.store import open_store

from .._outage import run_outage
from .._pg import OwnPostgres

pytestmark = pytest.mark.slow  # its own PostgreSQL, an rdmem serve process, the real MiniLM


@pytest.fixture(scope="module")
def own_pg(tmp_path_factory):
    pg = OwnPostgres(tmp_path_factory.mktemp("outage-pg"))
    yield pg
    pg.close()


def test_terminated_and_restarted_database_loses_nothing_and_is_served_again(own_pg, rdmem_serve):
    server = rdmem_serve("--store", own_pg.url, "--policy", "window", "--budget", "2000")
    outage = run_outage(server.url, own_pg, writers=4, warm=3, after_terminate=3, down=7, after_start=9)
    writes = outage.statuses(writes=True)
    assert writes[201] >= 12, writes  # the load was real

    # every acknowledged message is in the database, once, in the order it was acknowledged
    acked = outage.acknowledged()
    with open_store(own_pg.url) as store:
        for client, ids in acked.items():
            stored = [u.id for u in store.load(f"t/default/{client}")]
            assert [i for i in stored if i in set(ids)] == ids, client
            assert len(stored) == len(set(stored))

    # terminated connections are replaced: the server kept serving
    assert outage.first_ok_after("terminated") is not None and outage.first_ok_after("terminated") < 5
    # while the database was down (longer than a request waits for it, 5 s): 503s, never a 500; the probe too
    during = outage.statuses("stopping", "started")
    assert set(during) <= {201, 503}, during
    assert outage.statuses("stopping", "started", writes=False)[503] >= 1
    # back: a write and the health probe answer 2xx within 5 s of the database accepting connections
    back = outage.first_ok_after("started")
    assert back is not None and back < 5, f"first 2xx {back} s after the database returned"
    health = outage.first_ok_after("started", client="healthz")
    assert health is not None and health < 5
    # and from 5 s after its return on, every request succeeds: nothing stays broken
    late = [a for a in outage.answers if a.sent >= outage.marks["started"] + 5]
    assert late and all(a.status in (200, 201) for a in late), [a for a in late if a.status not in (200, 201)][:3]
    assert "Traceback" not in server.output()
    print(f"marks {outage.marks}; writes {dict(writes)}; during the outage {dict(during)}; "
          f"first 2xx {back:.2f} s after the return, healthz {health:.2f} s")
