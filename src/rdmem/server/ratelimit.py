"""Per-tenant rate limits: requests per minute and stored tokens per minute, as token buckets.

A tenant's bucket holds at most a minute's allowance and refills evenly
(``limit / 60`` a second), so a burst of a whole minute's worth passes and
then the tenant gets its steady rate. A request over it is answered 429 with
``Retry-After`` (whole seconds until it would pass). Each server process
keeps its own buckets: with ``--workers N`` a tenant may get up to N times
the limit across processes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import ApiError

__all__ = ["RateLimiter"]

#: Above this many buckets, the full ones (tenants idle for a minute) are dropped.
_PRUNE_FROM = 10_000


class _Buckets:
    def __init__(self, per_minute: int, what: str, clock: Callable[[], float]) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.what = what
        self.clock = clock
        self.levels: dict[str, tuple[float, float]] = {}  # tenant -> (level, when)
        self.lock = threading.Lock()

    def take(self, tenant: str, cost: float) -> None:
        if cost > self.capacity:
            raise ApiError(413, f"tenant {tenant!r}: this request would store {cost:g} tokens, more than its limit "
                           f"of {self.capacity:g} {self.what} per minute allows at once; send it in parts")
        with self.lock:
            now = self.clock()
            level, when = self.levels.get(tenant, (self.capacity, now))
            level = min(self.capacity, level + (now - when) * self.rate)
            if level < cost:
                self.levels[tenant] = (level, now)
                wait = max(1, math.ceil((cost - level) / self.rate))
                raise ApiError(429, f"tenant {tenant!r} is over its limit of {self.capacity:g} {self.what} per "
                               f"minute; retry in {wait} s", headers={"Retry-After": str(wait)})
            self.levels[tenant] = (level - cost, now)
            if len(self.levels) > _PRUNE_FROM:
                self._prune(now)

    def give_back(self, tenant: str, cost: float) -> None:
        with self.lock:
            level, when = self.levels.get(tenant, (self.capacity, self.clock()))
            self.levels[tenant] = (min(self.capacity, level + cost), when)

    def _prune(self, now: float) -> None:
        full = [t for t, (level, when) in self.levels.items() if level + (now - when) * self.rate >= self.capacity]
        for tenant in full:
            del self.levels[tenant]


class RateLimiter:
    """Each tenant's requests per minute and stored tokens per minute (``None``: that limit is off)."""

    def __init__(self, requests_per_minute: int | None = None, tokens_per_minute: int | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._requests = _Buckets(requests_per_minute, "requests", clock) if requests_per_minute else None
        self._tokens = _Buckets(tokens_per_minute, "stored tokens", clock) if tokens_per_minute else None

    def request(self, tenant: str) -> None:
        """Count one request of ``tenant``; a 429 if it is over its rate."""
        if self._requests is not None:
            self._requests.take(tenant, 1)

    @contextmanager
    def storing(self, tenant: str, tokens: Callable[[], int]) -> Iterator[None]:
        """Charge ``tenant`` for a write of ``tokens()`` tokens (counted only when the limit is on); a 429 if
        it is over its rate, and the charge is given back if the write fails."""
        if self._tokens is None:
            yield
            return
        cost = tokens()
        self._tokens.take(tenant, cost)
        try:
            yield
        except BaseException:
            self._tokens.give_back(tenant, cost)
            raise
