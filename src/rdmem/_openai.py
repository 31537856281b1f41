"""One client for OpenAI-compatible ``/chat/completions`` endpoints (stdlib only), for the LLM summarizer
and the evaluation's LLM judge: a failure of any kind is one :class:`EndpointError` saying what went wrong."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

from .errors import RdmemError

__all__ = ["EndpointError", "chat_completion"]


class EndpointError(RdmemError, RuntimeError):
    """The endpoint gave no usable reply: unreachable, an HTTP error, a timeout, or a malformed reply."""


def chat_completion(base_url: str, body: dict, api_key: str | None, timeout: float) -> str:
    """POST a chat completion; return the first choice's text or raise :class:`EndpointError`."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"LLM endpoint answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, TimeoutError) as exc:
        raise EndpointError(f"LLM endpoint unreachable: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise EndpointError("LLM endpoint returned invalid JSON") from exc
    except (ValueError, OSError, http.client.HTTPException) as exc:
        # A body cut short, bytes that are not UTF-8, a connection reset mid-reply, ...
        raise EndpointError(f"LLM endpoint failed: {type(exc).__name__}: {exc}") from exc
    try:
        text = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError("LLM reply has no choices[0].message.content") from None
    if not isinstance(text, str) or not text.strip():
        raise EndpointError("LLM reply is empty")
    return text
