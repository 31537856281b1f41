"""Per-tenant token buckets, on a clock the test moves (the live 429s are in test_edges.py)."""

from __future__ import annotations

import pytest

from rdmem.server.errors import ApiError
from rdmem.server.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused(call) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    return info.value


def test_a_minute_of_requests_passes_at_once_then_the_steady_rate():
    clock = Clock()
    limiter = RateLimiter(requests_per_minute=6, clock=clock)
    for _ in range(6):
        limiter.request("acme")
    over = refused(lambda: limiter.request("acme"))
    assert over.status == 429 and over.headers == {"Retry-After": "10"}  # 6 a minute: one every 10 s
    assert over.message == "tenant 'acme' is over its limit of 6 requests per minute; retry in 10 s"
    limiter.request("globex")  # another tenant's bucket
    clock.now += 9.0
    assert refused(lambda: limiter.request("acme")).headers == {"Retry-After": "1"}
    clock.now += 1.0
    limiter.request("acme")  # refilled one
    clock.now += 3600
    for _ in range(6):  # never more than a minute's worth banked
        limiter.request("acme")
    assert refused(lambda: limiter.request("acme")).status == 429


def test_stored_tokens_are_charged_and_given_back_when_the_write_fails():
    clock = Clock()
    limiter = RateLimiter(tokens_per_minute=100, clock=clock)
    with limiter.storing("acme", lambda: 60):
        pass
    with pytest.raises(RuntimeError), limiter.storing("acme", lambda: 40):
        raise RuntimeError("the store failed")  # not charged
    with limiter.storing("acme", lambda: 40):
        pass
    over = refused(lambda: limiter.storing("acme", lambda: 30).__enter__())
    assert over.status == 429 and over.headers == {"Retry-After": "18"}  # 30 tokens at 100/60 a second
    too_big = refused(lambda: limiter.storing("globex", lambda: 101).__enter__())
    assert too_big.status == 413 and "send it in parts" in too_big.message and too_big.headers is None


def test_no_limit_counts_nothing():
    limiter = RateLimiter()
    calls = []
    for _ in range(1000):
        limiter.request("acme")
    with limiter.storing("acme", lambda: calls.append(1) or 10**9):
        pass
    assert calls == []  # the tokens are not even counted
