"""A server with something to inspect: the adapters' 300-turn scenario stored through the REST API, then
continued through the proxy (so the savings page has real figures), for two tenants with keys."""

from __future__ import annotations

from typing import Any

import httpx

from ...integrations._scenario import BUDGET, conversation

SESSION = "trip-lisbon"
SYSTEM = {"role": "system", "content": "You are a travel assistant for Lisbon."}
QUESTIONS = ("Which tram goes to Belem?", "And the ferry across the river?",
             "What can I eat tonight near Alfama? Any restaurant that is safe for me?")
#: The proxy's model window in the site's server: the scenario (about 7,000 tokens) does not fit it.
WINDOW, RESERVE = BUDGET, 200


def settings(store: str, upstream: str) -> Any:
    from rdmem.server import ServerSettings

    # memory_timeout: the pages need the proxy to have compacted, even when a cold or busy CPU is slow (the bound
    # has its own tests in tests/server/test_proxy_hostile.py)
    return ServerSettings(store=store, budget=BUDGET, upstream=upstream, context_window=WINDOW, reply_reserve=RESERVE,
                          memory_timeout=60)


def populate(url: str, key: str, *, other: str | None = None) -> list[tuple[int, int]]:
    """Store the scenario as ``SESSION`` of ``key``'s tenant, continue it through the proxy, and add two small
    sessions; ``other`` (another tenant's key) gets a session of its own. The proxy's headers: tokens before
    and after, per request."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, timeout=300) as http:
        history = conversation()
        proxied = []
        http.post(f"/v1/sessions/{SESSION}/messages", json={"messages": history}, headers=headers).raise_for_status()
        for question in QUESTIONS:  # a client resends its whole history each time
            history.append({"role": "user", "content": question})
            reply = http.post("/v1/chat/completions", headers={"X-Rdmem-Key": key, "X-Rdmem-Session": SESSION,
                                                                "Authorization": "Bearer sk-upstream"},
                              json={"model": "fake-model", "messages": [SYSTEM, *history], "max_tokens": RESERVE})
            reply.raise_for_status()
            proxied.append((int(reply.headers["x-rdmem-tokens-before"]), int(reply.headers["x-rdmem-tokens-after"])))
            history.append(reply.json()["choices"][0]["message"])
        for name, texts in (("support-ticket-4411", ["My invoice shows two charges for March.",
                                                     "Sorry about that: the second charge is refunded."]),
                            ("notes", ["Remember: the team meeting moved to Thursdays at 10."])):
            msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
            http.post(f"/v1/sessions/{name}/messages", json={"messages": msgs}, headers=headers).raise_for_status()
        if other is not None:
            http.post("/v1/sessions/tenant-b-private/messages", headers={"Authorization": f"Bearer {other}"},
                      json={"messages": [{"role": "user", "content": "Tenant B's secret: the vault code is 7341."}]}
                      ).raise_for_status()
    return proxied
