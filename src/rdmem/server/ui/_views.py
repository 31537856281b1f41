"""The inspector's pages: HTML rendered on the server from the memory API's own functions.

Every page reads through the functions the REST routes call
(:mod:`rdmem.server.routes_memory`), for the caller's tenant only; none
writes anything. A page works without JavaScript, except deleting (a JSON
request) and the curve's progress (a reload shows it too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.templating import Jinja2Templates

from ... import __version__
from ...messages import chat_fields
from ...policies import POLICIES
from ...tokens import content_text
from ...errors import StoreError
from ..errors import ERROR_ID_HEADER, ApiError, store_unavailable
from ..routes_memory import message_page, session_context, session_detail, session_list, session_search
from ..savings import session_savings, tenant_savings
from ..sessions import MAX_SESSION_CHARS, store_session
from . import _model
from ._auth import ui_tenant
from ._charts import line_chart
from ._curve import CURVE_MESSAGES, CurveJob, curve_budgets, session_curve

__all__ = ["router", "TEMPLATES"]

router = APIRouter(prefix="/ui", include_in_schema=False)
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
TEMPLATES.env.filters["when"] = lambda t: "-" if t is None else datetime.fromtimestamp(
    t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
TEMPLATES.env.filters["pct"] = lambda v: f"{100 * v:.1f}%"

#: Messages on a page of the timeline (the first screen of a long session is this many).
TIMELINE_PAGE = 100
SESSIONS_PAGE = 25
SEARCH_K = 20


def _state(request: Request) -> Any:
    return request.app.state.rdmem


def _base(request: Request) -> str:
    return request.scope.get("root_path", "") + "/ui"


def _number(raw: str | None, name: str, default: int | None, low: int, high: int) -> int | None:
    """A whole number from a query string (blank: ``default``), or a 400 that says what is allowed."""
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ApiError(400, f"{name} must be a whole number from {low} to {high}, got {raw!r}")
    return value


def _render(request: Request, template: str, build: Callable[[str], dict[str, Any]]) -> Response:
    """The page ``template`` with what ``build(tenant)`` returns; the sign-in page (401) without a valid key,
    an error page with the API's status and message when the API refuses."""
    common: dict[str, Any] = {"base": _base(request), "tenant": None, "keyed": _state(request).keyed(),
                              "version": __version__}
    try:
        try:
            common["tenant"] = ui_tenant(request)
        except ApiError as exc:
            if exc.status != 401:
                raise
            return login_page(request, exc.message, status=401)
        data = build(common["tenant"])
    except ApiError as exc:
        return _error_page(request, common, exc.status, exc.message)
    except StoreError as exc:  # a page, not the API's JSON: the browser's reader is told to try again
        error_id, message = store_unavailable(request, exc)
        response = _error_page(request, common, 503, message)
        response.headers.update({"Retry-After": "1", ERROR_ID_HEADER: error_id})
        return response
    return TEMPLATES.TemplateResponse(request, template, {**common, **data})


def _error_page(request: Request, common: dict[str, Any], status: int, message: str) -> Response:
    return TEMPLATES.TemplateResponse(request, "error.html", {**common, "title": f"Error {status}", "status": status,
                                                              "message": message}, status_code=status)


def login_page(request: Request, message: str = "", *, status: int = 200) -> Response:
    keyed = _state(request).keyed()
    return TEMPLATES.TemplateResponse(request, "login.html", {
        "title": "Sign in", "base": _base(request), "tenant": None, "keyed": keyed, "version": __version__,
        "message": message,
        "next": request.url.path + (f"?{request.url.query}" if request.url.query else "")}, status_code=status)


@router.get("/login")
def login(request: Request) -> Response:
    return login_page(request)


@router.get("")
@router.get("/")
def sessions(request: Request, q: str = "", offset: str = "", deleted: str = "") -> Response:
    """The caller's sessions, a page at a time, filtered by name."""
    state = _state(request)

    def build(tenant: str) -> dict[str, Any]:
        start = _number(offset, "offset", 0, 0, 10**9) or 0
        page = session_list(state, tenant, offset=start, limit=SESSIONS_PAGE, contains=q.strip() or None)
        rows = [session_detail(state, tenant, s.session, s) for s in page.sessions]
        link = {"q": q} if q else {}
        return {"title": "Sessions", "rows": rows, "q": q, "offset": start, "deleted": deleted,
                "prev": urlencode({**link, "offset": max(start - SESSIONS_PAGE, 0)}) if start else None,
                "next": urlencode({**link, "offset": page.next_offset}) if page.next_offset is not None else None}

    return _render(request, "sessions.html", build)


@dataclass(frozen=True)
class View:
    """What a session's pages are looking at: the session, and the context's budget, query and policy."""

    name: str
    budget: int | None
    query: str
    policy: str

    def link(self, **extra: Any) -> str:
        """The query string of this view (and ``extra``)."""
        params = {"name": self.name, "budget": self.budget or "", "query": self.query, "policy": self.policy, **extra}
        return urlencode({k: v for k, v in params.items() if v not in ("", None)})


def _view(request: Request, name: str, budget: str, query: str, policy: str) -> View:
    if not name or len(name) > MAX_SESSION_CHARS:
        raise ApiError(400, f"name the session: ?name= with 1 to {MAX_SESSION_CHARS} characters")
    if policy and policy not in POLICIES:
        raise ApiError(400, f"unknown policy {policy!r}; choose one of {', '.join(sorted(POLICIES))}")
    settings = _state(request).settings
    return View(name, _number(budget, "budget", None, 1, settings.max_budget), query.strip(), policy)


def _session_common(request: Request, tenant: str, view: View, tab: str) -> dict[str, Any]:
    state = _state(request)
    detail = session_detail(state, tenant, view.name)
    return {"title": f"{view.name}: {tab}", "tab": tab, "view": view, "detail": detail,
            "budget": view.budget or state.settings.budget, "policies": sorted(POLICIES),
            "policy": view.policy or state.settings.policy}


@router.get("/session")
def timeline(request: Request, name: str = "", budget: str = "", query: str = "", policy: str = "",
             offset: str = "") -> Response:
    """A session's messages in order, each with its state in the context for the chosen budget and query."""
    state = _state(request)

    def build(tenant: str) -> dict[str, Any]:
        view = _view(request, name, budget, query, policy)
        data = _session_common(request, tenant, view, "timeline")
        start = _number(offset, "offset", 0, 0, 10**9) or 0
        ctx, _ = session_context(state, tenant, name, budget=view.budget, query=view.query or None,
                                    policy=view.policy or None)
        page = message_page(state, tenant, name, offset=start, limit=TIMELINE_PAGE)
        tok = state.pool.manager(tenant, name).tokenizer
        entries = _model.timeline(page.messages, ctx, tok, start)
        total = data["detail"].units
        counts = {s: 0 for s in _model.STATES}
        for d in ctx.report:
            counts[d.decision] = counts.get(d.decision, 0) + 1
        counts["archived"] = total - sum(v for k, v in counts.items() if k != "archived")
        return {**data, "entries": entries, "ctx": ctx, "states": _model.STATES, "counts": counts,
                "offset": start, "page": TIMELINE_PAGE, "total": total,
                "prev": view.link(offset=max(start - TIMELINE_PAGE, 0)) if start else None,
                "next": view.link(offset=page.next_offset) if page.next_offset is not None else None,
                "last": view.link(offset=max(total - 1, 0) // TIMELINE_PAGE * TIMELINE_PAGE)}

    return _render(request, "timeline.html", build)


@router.get("/budget")
def budget_page(request: Request, name: str = "", budget: str = "", query: str = "", policy: str = "") -> Response:
    """Where the context's tokens go, and the session's rate-distortion curve."""
    state = _state(request)

    def build(tenant: str) -> dict[str, Any]:
        view = _view(request, name, budget, query, policy)
        data = _session_common(request, tenant, view, "budget")
        ctx, used = session_context(state, tenant, name, budget=view.budget, query=view.query or None,
                                    policy=view.policy or None)
        bar = _model.budget_bar(ctx, state.pool.manager(tenant, name).tokenizer)
        return {**data, "ctx": ctx, "bar": bar, **_curve_data(request, tenant, view, data["detail"].tokens, used)}

    return _render(request, "budget.html", build)


@router.get("/curve")
def curve_fragment(request: Request, name: str = "", budget: str = "") -> Response:
    """The curve's part of the budget page (202 while it is being computed), for the page's script."""
    def build(tenant: str) -> dict[str, Any]:
        view = _view(request, name, budget, "", "")
        detail = session_detail(_state(request), tenant, name)
        return {"view": view, **_curve_data(request, tenant, view, detail.tokens,
                                            view.budget or _state(request).settings.budget)}

    response = _render(request, "curve.html", build)
    pending = getattr(response, "context", {}).get("job")
    if isinstance(pending, CurveJob) and not pending.finished.is_set():
        response.status_code = 202
    return response


def _curve_data(request: Request, tenant: str, view: View, tokens: int, budget: int) -> dict[str, Any]:
    state = _state(request)
    policies = tuple(dict.fromkeys((state.settings.policy, "window")))
    budgets = curve_budgets(tokens)
    name = store_session(tenant, view.name)
    version = state.store.version(name)

    def compute(job: CurveJob) -> Any:
        total = session_detail(state, tenant, view.name).units
        messages, start = [], max(total - CURVE_MESSAGES, 0)  # the newest: a curve replays every message
        if start:
            job.note = f"of the newest {CURVE_MESSAGES:,} of the session's {total:,} messages"
        while True:
            page = message_page(state, tenant, view.name, offset=start, limit=state.settings.max_page)
            messages += page.messages
            if page.next_offset is None:
                break
            start = page.next_offset

        def progress(done: int, total: int) -> None:
            job.done, job.total = done, total

        return session_curve(messages, view.name, policies=policies, budgets=budgets,
                             embedder=state.pool.embedder_for(tenant), progress=progress)

    job = request.app.state.rdmem_curves.job((name, version, policies, budgets), compute, owner=tenant, slot=name)
    job.finished.wait(0.05)  # a curve computed before is there at once
    charts = []
    if job.curve is not None:
        for metric, k in (("information coverage", 1), ("embedding coverage", 2)):
            series = {p: [(pt[0], pt[k]) for pt in pts] for p, pts in job.curve.points.items()}
            series[f"full history ({job.curve.full_tokens:,.0f} tokens)"] = [(job.curve.full_tokens, 1.0)]
            charts.append(line_chart(f"{metric.capitalize()} kept against budget", series, xlabel="budget (tokens)",
                                     ylabel=metric, log_x=True, y_max=1.0, y_label=lambda v: f"{v:.2f}",
                                     x_ticks=[*budgets, job.curve.full_tokens], x_label=lambda v: f"{v:,.0f}",
                                     marker=(budget, f"this view: {budget:,}")))
    return {"job": job, "charts": charts, "curve_budgets": budgets, "curve_link": view.link()}


@router.get("/search")
def search(request: Request, name: str = "", q: str = "", k: str = "") -> Response:
    """The session's best matches for a query (archive and working set), with their scores."""
    state = _state(request)

    def build(tenant: str) -> dict[str, Any]:
        view = _view(request, name, "", "", "")
        data = _session_common(request, tenant, view, "search")
        count = _number(k, "k", SEARCH_K, 1, state.settings.max_page) or SEARCH_K
        hits = session_search(state, tenant, name, q.strip(), k=count) if q.strip() else []
        tok = state.pool.manager(tenant, name).tokenizer
        rows = [(h, _model.shorten(content_text(h.message.get("content")))[0], tok.message_tokens(chat_fields(h.message)))
                for h in hits]
        return {**data, "q": q, "k": count, "hits": rows}

    return _render(request, "search.html", build)


@router.get("/savings")
def savings(request: Request, name: str = "") -> Response:
    """Tokens clients sent to the proxy against tokens it forwarded, per session and overall, over time."""
    state = _state(request)

    def build(tenant: str) -> dict[str, Any]:
        if name:
            view = _view(request, name, "", "", "")
            data = _session_common(request, tenant, view, "savings")
            rows = session_savings(state.store, tenant, name)
            per = {name: rows} if rows else {}
        else:
            data = {"title": "Proxy savings", "tab": None}
            per = tenant_savings(state.store, tenant)
            rows = sorted((r for rs in per.values() for r in rs), key=lambda r: r.time)
        return {**data, "overall": not name, "totals": _model.totals(rows),
                "per": sorted(((s, _model.totals(rs)) for s, rs in per.items()), key=lambda x: -x[1].saved),
                "chart": _savings_chart(rows, cumulative=not name), "recent": rows[-50:][::-1]}

    return _render(request, "savings.html", build)


def _savings_chart(rows: list[Any], *, cumulative: bool) -> Any:
    if not rows:
        return None
    sent, forwarded, s, f = [], [], 0, 0
    for r in rows:
        s, f = (s + r.sent, f + r.forwarded) if cumulative else (r.sent, r.forwarded)
        sent.append((r.time, s))
        forwarded.append((r.time, f))
    span = rows[-1].time - rows[0].time
    fmt = "%H:%M:%S" if span < 86400 else "%m-%d %H:%M"
    ticks = [rows[0].time + span * i / 4 for i in range(5)] if span > 0 else [rows[0].time]
    what = "tokens, summed over time" if cumulative else "tokens per request"
    return line_chart("Tokens sent by clients and forwarded by the proxy", {"sent by the client": sent,
                      "forwarded to the model": forwarded}, xlabel="time (UTC)", ylabel=what, x_ticks=ticks,
                      x_label=lambda t: datetime.fromtimestamp(t, tz=timezone.utc).strftime(fmt),
                      y_label=lambda v: f"{v:,.0f}")

