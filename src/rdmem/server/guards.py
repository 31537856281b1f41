"""The server's edge: which ``Host`` it answers (DNS rebinding), JSON bodies only (cross-site posts), and no
page of it inside another site's frame (clickjacking).

A web page cannot set ``Host``: a page on ``evil.example`` that rebinds its
name to 127.0.0.1 still sends ``Host: evil.example``. So a server that
listens on loopback answers only loopback names (``localhost``,
``127.0.0.1``, ``::1``, the address it listens on) and those it is told
(``--allow-host``); a browser's ``Origin``, when sent, must name one of
them too. A server on another address needs API keys (or ``--insecure``),
and answers every ``Host`` unless ``--allow-host`` lists them. A page can
post a "simple" cross-site request (``text/plain``, a form) without asking
first, so a body that is not JSON is refused (415) before anything reads it.
A page can also show this server's pages in a frame and lure clicks onto
them (the inspector's delete, on a server without keys, where no sign-in
is needed): every answer says no browser may frame it.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import InvalidInput
from .errors import error_body

__all__ = ["HostRule", "HostGuardMiddleware", "JsonOnlyMiddleware", "NoFramingMiddleware", "is_loopback",
           "check_host_name"]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_UNSPECIFIED = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine only (``""`` is every interface: not loopback)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host_name(name: str) -> str:
    """An ``--allow-host`` value: a host name or IP address without a port, or ``*`` (any); lower-cased."""
    text = name.strip().lower()
    if text == "*":
        return text
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    labels = bare.split(".")
    if not bare or len(bare) > 253 or not all(
            label and len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum() and label.isascii()
            for label in labels):
        raise InvalidInput(f"allowed host {name!r}: give a host name or IP address without a port "
                         "(mem.example.com, 192.168.1.5), or * for any")
    return bare


def _hostname(value: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower-cased, an IP address in
    its canonical form; ``None`` if it is malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1:] if end >= 0 else None
        if rest is None or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        host = value[1:end]
    else:
        name, sep, port = value.rpartition(":")
        host = name if sep and port.isdigit() else value
        if ":" in host:
            return None
    return _canonical(host)


def _canonical(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


@dataclass(frozen=True)
class HostRule:
    """The ``Host`` values a server answers: ``names``, or any when ``any_host``."""

    names: frozenset[str]
    any_host: bool

    @classmethod
    def for_server(cls, bind: str, allowed: tuple[str, ...] = ()) -> HostRule:
        """The rule of a server listening on ``bind`` and told ``allowed`` (``--allow-host``)."""
        if "*" in allowed or (not is_loopback(bind) and not allowed):
            return cls(frozenset(), True)
        names = set(_LOOPBACK_NAMES) | set(allowed)
        if bind not in _UNSPECIFIED:
            names.add(check_host_name(bind))
        return cls(frozenset(names), False)

    def allows_host(self, header: str | None) -> bool:
        if self.any_host:
            return True
        host = _hostname(header) if header else None
        return host is not None and host in self.names

    def allows_origin(self, origin: str) -> bool:
        if self.any_host:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and parts.hostname is not None and \
            _canonical(parts.hostname) in self.names

    def mcp_patterns(self) -> tuple[list[str], list[str]]:
        """The same rule as the MCP SDK's ``allowed_hosts`` and ``allowed_origins`` patterns."""
        hosts, origins = [], []
        for name in sorted(self.names):
            shown = f"[{name}]" if ":" in name else name
            hosts += [shown, f"{shown}:*"]
            origins += [f"{scheme}://{shown}{port}" for scheme in ("http", "https") for port in ("", ":*")]
        return hosts, origins


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HostGuardMiddleware:
    """Answers only the ``Host`` (421) and browser ``Origin`` (403) values of its :class:`HostRule`."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.rule.any_host:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host, origin = headers.get("host"), headers.get("origin")
        if not self.rule.allows_host(host):
            shown = (host or "")[:100]
            await _refuse(send, 421, "misdirected_request",
                          f"this server does not answer Host {shown!r}: it listens on loopback and answers "
                          f"{', '.join(sorted(self.rule.names))}; to serve another name, start it with "
                          "--allow-host NAME")
            return
        if origin is not None and not self.rule.allows_origin(origin):
            await _refuse(send, 403, "forbidden", f"requests from the web page at {origin[:100]!r} are refused "
                          "(a browser's Origin must be a name this server answers; see --allow-host)")
            return
        await self.app(scope, receive, send)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class JsonOnlyMiddleware:
    """Refuses a request body that is not declared JSON (415), on every route (the proxy and /mcp too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            headers = Headers(scope=scope)
            has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
            if has_body and not _is_json(headers.get("content-type")):
                given = headers.get("content-type")
                await _refuse(send, 415, "unsupported_media_type",
                              "the body must be JSON, sent with Content-Type: application/json; got "
                              + (repr(given[:100]) if given else "no Content-Type"))
                return
        await self.app(scope, receive, send)


#: What every answer carries: no frame may show it (the old header and CSP's), nor may a browser guess its type.
NO_FRAMING = ((b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'"),
              (b"x-content-type-options", b"nosniff"))
#: The inspector's pages run only the server's own script file (none inline): should a stored message ever get
#: markup past the templates' escaping, it could still run nothing, load no plugin, and post no form elsewhere.
UI_POLICY = (b"frame-ancestors 'none'; script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'")


#: No answer of rdmem's is kept by a browser or a shared cache (a page of a tenant's memory must not come back
#: from the browser's history after its sign-out); the inspector's static files (no tenant's data) may be.
NO_STORE = (b"cache-control", b"no-store")


class NoFramingMiddleware:
    """Adds :data:`NO_FRAMING` and :data:`NO_STORE` to every HTTP answer (the inspector's static files but
    the latter): a page of another site cannot frame the inspector (or the API's docs) to lure a click onto
    it, and no page is kept; the inspector's answers say :data:`UI_POLICY`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        root = scope.get("root_path", "")
        ui = scope["path"].startswith(root + "/ui")
        extra = tuple((k, UI_POLICY if ui and k == b"content-security-policy" else v) for k, v in NO_FRAMING)
        if not scope["path"].startswith(root + "/ui/static/"):
            extra += (NO_STORE,)

        async def framed(message: Any) -> None:
            if message["type"] == "http.response.start":
                given = {k.lower() for k, _ in message.get("headers", ())}
                message = {**message, "headers": [*message.get("headers", ()),
                                                  *(h for h in extra if h[0] not in given)]}
            await send(message)

        await self.app(scope, receive, framed)
