"""The session service: the one home of the rules every front door applies to a session.

REST, mem0's routes, the proxy, MCP, the CLI, the evaluation harness and
the adapters decide none of these themselves; they ask here:

- what a session's name may be: :func:`session_name` (the rule is
  :func:`rdmem.names.check_session_name`, in the bottom layer so that the
  wire types can state it too);
- which policy a task mode means: :func:`policy_for`, over :data:`MODES`;
- whether a policy needs an embedder, and which one a session gets:
  :func:`needs_embedder`, :func:`embedder_for`;
- the low watermark a session's working set is compacted down to unless told: :func:`default_low`;
- which messages of a resent history are new, and which stored ones it
  dropped: :meth:`rdmem.MemoryManager.resent` (the session's view aligns them
  against the store, :func:`rdmem.history.resend_alignment`); and where the
  new ones begin in a model call's input that starts with a context rdmem
  rendered (markers, cut messages): :func:`first_unseen`.

>>> policy_for(mode="task"), policy_for(mode="qa"), policy_for(policy="window"), policy_for()
('rd-task', 'rd', 'window', None)
>>> needs_embedder("window"), needs_embedder("rd")
(False, True)
>>> embedder_for("window") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from .contract import Composed, Policy
from .embed import Embedder, get_embedder
from .errors import DuplicateIdError, InvalidInput
from .history import resend_key
from .messages import chat_fields
from .names import check_session_name
from .policies import MODE_POLICIES, get_policy
from .reconstruct import MARKER, MERGED, Markers
from .store import check_tenant
from .tokens import content_text

__all__ = ["MODES", "session_name", "policy_for", "needs_embedder", "embedder_for", "default_low", "first_unseen",
           "stored_as_given", "add_once", "tenant_store_name", "tenant_session_infos", "as_tenant_sees"]

#: The task modes a front door may name instead of a policy (``qa`` is plain ``rd``).
MODES: tuple[str, ...] = tuple(MODE_POLICIES)

#: A session's name, or an ``InvalidInput`` naming the field, the value and the rule.
session_name = check_session_name


def policy_for(policy: str | None = None, mode: str | None = None) -> str | None:
    """The policy a caller asked for, by name or by task mode (not both); ``None`` if neither (the front
    door's default). An unknown name or mode is an ``InvalidInput`` listing the valid ones."""
    if policy is not None and mode is not None:
        raise InvalidInput("give a policy or a mode, not both")
    if mode is not None:
        if mode not in MODE_POLICIES:
            raise InvalidInput(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        return MODE_POLICIES[mode]
    if policy is not None:
        get_policy(policy)
    return policy


def needs_embedder(policy: str | Policy, embedder: Embedder | str | None = None) -> bool:
    """Whether a session under ``policy`` embeds its messages: when the policy scores by meaning, or when
    the caller chose an embedder (search then ranks by meaning too)."""
    return get_policy(policy).needs_embeddings or embedder is not None


def embedder_for(policy: str | Policy, embedder: Embedder | str | None = None) -> Embedder | None:
    """The embedder a session under ``policy`` uses: ``embedder`` resolved (``None``: the shared default
    MiniLM, loaded once per process) when :func:`needs_embedder`, else ``None`` (no model is loaded)."""
    return get_embedder(embedder) if needs_embedder(policy, embedder) else None


def default_low(policy: Policy, markers: Markers = MERGED) -> float:
    """The low watermark a manager compacts down to unless told (a fraction of its budget): the policy's
    own ``low_watermark`` when it has one (of its base, when composed), else 0.8, so the prompt prefix stays
    stable. ``rd``'s is 0.98: it compacts often and by little (room left free is room no kept message uses;
    BENCHMARKS "Issue 25, the value side" measures 0.8 to 1.0) with a marker per omitted run
    (``markers=True``). A manager without one (``"merged"``, the default, or ``False``) takes the policy's
    ``merged_low_watermark`` if it has one (``rd``: 0.96).

    >>> default_low(get_policy("rd"), True), default_low(get_policy("rd-ladder"), True), default_low(get_policy("window"))
    (0.98, 0.98, 0.8)
    >>> default_low(get_policy("rd")), default_low(get_policy("rd-ladder"))
    (0.96, 0.96)
    """
    base = policy.base if isinstance(policy, Composed) else policy
    name = "low_watermark" if markers is True or not hasattr(base, "merged_low_watermark") else "merged_low_watermark"
    low = getattr(base, name, 0.8)
    if isinstance(low, bool) or not isinstance(low, (int, float)) or not 0 < low <= 1:
        raise InvalidInput(f"policy {policy.name!r}: {name} must be a fraction of the budget in (0, 1], "
                           f"got {low!r}")
    return float(low)


def first_unseen(messages: Sequence[Mapping[str, Any]], newest: Mapping[str, Any] | None,
                 unseen: Callable[[list[dict[str, Any]]], list[int]], rendered: Collection[str] = ()) -> int:
    """Where the messages a session does not have begin in ``messages``, a model call's input that may start
    with a context rdmem rendered for the session (a framework's model-input filter sees it again).

    Right after the session's ``newest`` stored message when the input holds it verbatim (rdmem sends the
    newest messages as they are); else (it was cut, or the client dropped or edited it), after what rdmem
    rendered: the leading messages whose :func:`~rdmem.history.resend_key` is in ``rendered`` (the caller's
    last context) or that are markers, or without ``rendered`` after the input's last elision marker (a
    merged marker is the first of a scattered context: ``rendered`` is then what tells its old messages from
    new ones); less what the session has there (``unseen``: :meth:`rdmem.MemoryManager.unseen`, the
    resent-history rule).
    """
    last = resend_key(newest) if newest is not None else None
    keys = [resend_key(m) for m in messages]
    start = next((p for p in range(len(keys), 0, -1) if keys[p - 1] == last), None)
    if start is None:
        marker = [m["role"] in ("user", "system") and bool(MARKER.match(content_text(m.get("content")) or ""))
                  for m in messages]
        if rendered:
            start = next((i for i, k in enumerate(keys) if not (marker[i] or k in rendered)), len(keys))
        else:
            start = max((i + 1 for i, is_marker in enumerate(marker) if is_marker), default=0)
        start += (unseen([chat_fields(m) for m in messages[start:]]) or [len(messages) - start])[0]
    return start


def stored_as_given(originals: Callable[[list[str]], Mapping[str, Mapping[str, Any]]],
                    batch: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The ids of ``batch`` when each of its messages has an id and is stored under it as given (a retried write:
    a write is all or nothing, so a batch refused for a duplicate id either is stored whole or is not), by
    ``originals`` (:meth:`rdmem.MemoryManager.originals`); ``None`` otherwise. Values compare as JSON does, types
    included (``true`` is not ``1``)."""
    if not batch or not all(isinstance(m.get("id"), str) for m in batch):
        return None
    ids = [str(m["id"]) for m in batch]
    stored = originals(ids)
    return ids if all(i in stored and _same(stored[i], m) for i, m in zip(ids, batch, strict=True)) else None


def _same(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``==`` with ``True == 1`` and ``False == 0`` told apart."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def add_once(extend: Callable[[], list[str]], originals: Callable[[list[str]], Mapping[str, Mapping[str, Any]]],
             batch: Sequence[Mapping[str, Any]]) -> tuple[list[str], bool]:
    """``(ids, already_stored)``: ``batch`` written by ``extend()``, unless it is stored already under its own ids,
    as given (:func:`stored_as_given`: a retried write; looked for first, so a retry is neither charged to a rate
    limit nor refused by one, and again when the write is refused for a duplicate id, which a concurrent retry
    may have stored meanwhile)."""
    if (ids := stored_as_given(originals, batch)) is not None:
        return ids, True
    try:
        return extend(), False
    except DuplicateIdError:
        if (ids := stored_as_given(originals, batch)) is None:
            raise
        return ids, True


#: The service's name in the store for a tenant's session: ``t/<tenant>/<session>`` (REST, the proxy, mem0, ``/mcp``
#: and ``rdmem mcp --tenant`` name the same session alike).
TENANT_PREFIX = "t/"


def tenant_store_name(tenant: str, session: str, field: str = "session") -> str:
    """The store's name for ``tenant``'s session ``session`` (both checked: :class:`InvalidInput` naming
    ``field`` if one is not a name)."""
    check_tenant(tenant)
    session_name(session, field)
    return f"{TENANT_PREFIX}{tenant}/{session}"


def as_tenant_sees(text: str, tenant: str | None) -> str:
    """``text`` (an error of the store's) with the store's name of ``tenant``'s session written as the tenant
    names it: ``session 't/acme/notes' ...`` says ``session 'notes' ...`` to tenant ``acme`` (the caller's own
    name, not the service's layout). ``None``: ``text`` as it is."""
    if tenant is None:
        return text
    return re.sub("(session )(['\"])" + re.escape(f"{TENANT_PREFIX}{tenant}/"), r"\1\2", text)


def tenant_session_infos(store: Any, tenant: str, within: str = "") -> list[tuple[str, Any]]:
    """``(session name, info)`` of every session of ``tenant`` in ``store`` whose name starts with ``within``, by
    name: the store reads the tenant's sessions only (:meth:`~rdmem.store.Store.sessions`'s prefix)."""
    prefix = f"{TENANT_PREFIX}{check_tenant(tenant)}/"
    return [(i.session[len(prefix):], i) for i in store.sessions(prefix + within)]
