"""Embeddings off the request path: a worker that embeds stored messages that have no vector yet, in batches.

A :class:`~rdmem.MemoryManager` with ``embedding="deferred"`` (what
``rdmem serve`` uses) stores a message without waiting for its vector. An
:class:`EmbeddingWorker` then claims such units in the store (a lease: a
unit claimed by one worker is not handed to another while the lease lives,
whichever process or machine it runs on), embeds them in batches through
the embedder's batch path, and writes the vectors back with
:meth:`~rdmem.store.Store.set_embeddings`. Readers pick them up through
:meth:`~rdmem.store.Store.changes` like any other write. Until then a unit
is ranked by its lexical and prior terms, and a report says so
(``UnitDecision.embedded``). Nothing is lost if no worker ever runs: the
memory works without vectors.

At start a worker finds what earlier processes left unembedded (the store
holds it), so restarts lose nothing; a worker that dies holding claims
delays those units by one lease, then another worker takes them.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Self

import numpy as np

from .embed import Embedder
from .errors import InvalidInput, StoreError
from .scoring import message_embed_text
from .store import Store

__all__ = ["EmbeddingWorker"]

log = logging.getLogger("rdmem.embedding")


class EmbeddingWorker:
    """Embeds a store's unembedded units in the background (or on demand, with :meth:`run_once`/:meth:`drain`).

    Parameters
    ----------
    store, embedder:
        Where the units are, and the model that embeds them (its batch path: one call per batch).
    batch:
        Units claimed and embedded per round.
    lease:
        Seconds a claim lives: a worker that dies mid-batch delays its units by this much.
    idle:
        Seconds between looks at the store when there was nothing to do (:meth:`wake` looks at once).
    name:
        The claimant's name in the store (default: host, process and a random part).
    on_landed:
        Called with each session whose vectors this worker wrote (e.g. to run the working-set upkeep
        that a deferred manager leaves until then: :meth:`~rdmem.MemoryManager.maintain`).
    """

    def __init__(self, store: Store, embedder: Embedder, *, batch: int = 64, lease: float = 120.0,
                 idle: float = 1.0, name: str | None = None,
                 on_landed: Callable[[str], object] | None = None) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidInput(f"batch must be an int >= 1, got {batch!r}")
        if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle > 0:
            raise InvalidInput(f"idle must be a number of seconds > 0, got {idle!r}")
        self.store, self.embedder = store, embedder
        self.batch, self.lease, self.idle = batch, float(lease), float(idle)
        self.name = name or f"{os.uname().nodename}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.on_landed = on_landed
        self.embedded = 0  # units whose vector this worker wrote
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unwritten: dict[str, dict[str, np.ndarray]] = {}  # vectors whose write failed, by session

    def run_once(self) -> int:
        """Claim one batch, embed it and write the vectors back; how many units it claimed (0: none left).

        Vectors whose write failed (the database went away between the claim and the write) are written first
        at the next call, not left to wait for their lease (120 s by default: the worker that holds their
        claim would not claim them again) and be embedded again."""
        if self._unwritten:
            left = self._unwritten
            self._unwritten = {}
            self._write(left)
        claimed = self.store.claim_unembedded(self.name, limit=self.batch, lease=self.lease)
        if not claimed:
            return 0
        texts = [message_embed_text(u.message) for _, u in claimed]
        try:
            vectors: list[np.ndarray | None] = list(self.embedder.embed(texts))
        except Exception:
            if len(claimed) == 1:
                raise
            # One text the embedder refuses (an API's limits, say) must not hold back the rest of its batch on
            # every retry: each alone; those that fail stay unembedded (ranked by their words) until their lease
            # lapses and they are tried again.
            vectors = [self._alone(session, unit.id, text) for (session, unit), text in zip(claimed, texts)]
        by_session: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
        for (session, unit), vec in zip(claimed, vectors, strict=True):
            if vec is not None:
                by_session[session][unit.id] = vec
        self._write(dict(by_session))
        return len(claimed)

    def _write(self, by_session: dict[str, dict[str, np.ndarray]]) -> None:
        """Write the vectors, session by session; on a failure, those not written are kept for the next round."""
        for k, (session, vecs) in enumerate(list(by_session.items())):
            try:
                self.store.set_embeddings(session, vecs, claimed_by=self.name)
            except StoreError:
                self._unwritten = dict(list(by_session.items())[k:])
                raise
            self.embedded += len(vecs)
            if self.on_landed is not None:
                self.on_landed(session)

    def _alone(self, session: str, uid: str, text: str) -> np.ndarray | None:
        try:
            return np.asarray(self.embedder.embed([text]))[0]
        except Exception as exc:
            log.warning("embedding worker %s: message %r of session %r could not be embedded (%s: %s); it is "
                        "ranked by its words until it is tried again", self.name, uid, session, type(exc).__name__, exc)
            return None

    def drain(self) -> int:
        """:meth:`run_once` until nothing is left to claim; how many units were embedded."""
        total = 0
        while n := self.run_once():
            total += n
        return total

    # -- in the background ------------------------------------------------------------------
    def start(self) -> Self:
        """Run in a daemon thread until :meth:`stop` (it begins with what the store has left unembedded)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="rdmem-embedding", daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Look at the store now (new messages were stored)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after its current batch (claims it did not finish expire with their lease)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        try:  # this thread (and the math threads it starts) yields the cores to requests: nice 10, on Linux
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        try:  # load the model now, not in the first request that embeds a query
            self.embedder.embed(["rdmem"])
        except Exception as exc:  # reported by the first batch that fails the same way
            log.debug("embedding worker %s: warming the model failed: %s", self.name, exc)
        failures = 0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                busy = self.run_once()
                failures = 0
            except Exception as exc:  # a store or model failure must not end the worker: try again later, less often
                failures += 1
                wait = min(self.idle * 2 ** failures, 30.0)
                if isinstance(exc, StoreError):  # a database away is not a bug: one line, no traceback
                    log.warning("embedding worker %s: the store is unavailable (%d in a row: %s); retrying in %.0f s",
                                self.name, failures, exc, wait)
                else:
                    log.exception("embedding worker %s: a batch failed (%d in a row); retrying in %.0f s",
                                  self.name, failures, wait)
                self._stop.wait(wait)
                continue
            if not busy:
                self._wake.wait(self.idle)
