"""What the inspector's pages compute, without a server: timeline entries, the budget's bar, charts, curves."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from rdmem import compact
from rdmem.server.errors import ApiError
from rdmem.server.ui import _model
from rdmem.server.ui._charts import line_chart, nice_ticks
from rdmem.server.ui._curve import Curve, Curves, curve_budgets
from rdmem.server.ui._views import _number
from rdmem.tokens import get_tokenizer

from ...integrations._scenario import conversation

UI = Path(__file__).resolve().parents[3] / "src" / "rdmem" / "server" / "ui"


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer("cl100k_base")


def _with_ids(history):
    return [{"id": f"m{i}", **m} for i, m in enumerate(history)]


def test_a_tool_result_is_drawn_under_its_call_and_every_message_gets_a_state(tok, hashing_embedder):
    history = _with_ids(conversation(40))
    ctx = compact(history, budget=300, policy="rd", embedder=hashing_embedder)
    entries = _model.timeline(history, ctx, tok, offset=10)
    flat = [e for top in entries for e in (top, *top.results)]
    assert [e.id for e in flat] == [m["id"] for m in history] and entries[0].index == 10
    call = next(e for e in entries if e.calls)
    assert call.calls[0][1] == "lookup" and [r.role for r in call.results] == ["tool"]
    assert call.results[0].call_id == call.calls[0][0]
    decided = {d.id: d for d in ctx.report}
    for e in flat:
        assert e.state == (decided[e.id].decision if e.id in decided else "archived")
        assert e.tokens == tok.message_tokens({k: v for k, v in history[e.index - 10].items() if k != "id"})
        assert (e.score is None) == (e.id not in decided)


def test_a_tool_result_without_its_call_on_the_page_stands_alone(tok, hashing_embedder):
    history = _with_ids(conversation(40))
    ctx = compact(history, budget=300, policy="rd", embedder=hashing_embedder)
    start = next(i for i, m in enumerate(history) if m["role"] == "tool")
    entries = _model.timeline(history[start:start + 3], ctx, tok, offset=start)
    assert entries[0].role == "tool" and entries[0].results == []


def test_the_directive_term_is_its_own_family_and_leads_the_headline(tok, hashing_embedder):
    history = _with_ids(conversation(40))
    ctx = compact(history, budget=300, policy="rd", embedder=hashing_embedder)
    m0 = _model.timeline(history[:1], ctx, tok)[0]
    assert m0.state == "kept" and m0.reason == "protected (qa mode)"
    assert {t.group for t in m0.headline} >= {"information", "directive", "recency", "value"}
    assert next(t for t in m0.terms if t.name == "prior.directive").group == "directive"
    assert [_model.term_group(n) for n in ("query.bm25", "prior.log_info", "recency", "prior.first_person", "score")] == \
        ["relevance", "information", "recency", "first person", "score"]


@pytest.mark.parametrize("policy", ["rd", "window", "summary_buffer", "importance"])
def test_the_budgets_bar_adds_up_to_the_context_and_the_budget(tok, hashing_embedder, policy):
    history = [{"role": "system", "content": "You are a travel assistant."}, *conversation(60)]
    ctx = compact(history, budget=500, policy=policy, embedder=hashing_embedder)
    bar = {s.kind: s for s in _model.budget_bar(ctx, tok)}
    assert sum(s.tokens for k, s in bar.items() if k != "free") == ctx.tokens
    assert bar["free"].tokens == 500 - ctx.tokens and abs(sum(s.share for s in bar.values()) - 1) < 1e-9
    assert bar["system"].tokens == tok.message_tokens(history[0])
    if policy == "summary_buffer":
        assert bar["summary"].tokens > 0
    else:
        assert "summary" not in bar and bar["markers"].tokens > 0


def test_long_text_is_shortened_and_says_how_much():
    assert _model.shorten("abc", 5) == ("abc", 0)
    assert _model.shorten("x" * 10, 4) == ("xxxx", 6)


def test_numbers_from_a_query_string_are_checked_with_the_allowed_range():
    assert _number("", "budget", None, 1, 10) is None and _number(" 7 ", "budget", None, 1, 10) == 7
    for raw in ("0", "11", "abc", "1.5"):
        with pytest.raises(ApiError, match=rf"budget must be a whole number from 1 to 10, got '{raw}'"):
            _number(raw, "budget", None, 1, 10)


def test_chart_geometry():
    assert nice_ticks(1.0) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert nice_ticks(21151) == [0, 5000, 10000, 15000, 20000, 25000] and nice_ticks(0) == [0.0, 1.0]
    chart = line_chart("t", {"a": [(500, 0.1), (1000, 0.5), (2000, 0.9)]}, xlabel="x", ylabel="y", log_x=True,
                       y_max=1.0, marker=(1000, "here"))
    (x0, y0), (x1, y1), (x2, y2) = chart.series[0].points
    assert x0 == chart.left and x2 == chart.left + chart.plot_width and abs((x1 - x0) - (x2 - x1)) < 1e-9
    assert y2 < y1 < y0 <= chart.bottom and chart.marker == (x1, "here")
    same = line_chart("t", {"a": [(5.0, 1.0)]}, xlabel="x", ylabel="y", x_label=lambda v: "same", x_ticks=[1, 2, 3])
    assert [label for _, label in same.xticks] == ["same"]


def test_curve_budgets_are_evals_below_the_sessions_size():
    assert curve_budgets(7094) == (500, 1000, 2000, 4000) and curve_budgets(300) == (150,)


def test_curves_run_one_at_a_time_keep_results_and_retry_failures():
    gate = threading.Event()
    calls = []

    def slow(job):
        calls.append("slow")
        gate.wait(10)
        return Curve({"rd": [(500, 0.5, 0.8, 480.0)]}, 1000.0, 0.1)

    def broken(job):
        calls.append("broken")
        raise RuntimeError("the store went away")

    curves = Curves(pending=1)
    first = curves.job("a", slow)
    assert curves.job("a", slow) is first  # the same key: the same job
    for _ in range(500):  # drawn, no longer waiting
        if first.started:
            break
        time.sleep(0.01)
    waiting = curves.job("b", broken)
    full = curves.job("c", slow)
    assert full.finished.is_set() and "curves are waiting to be computed already" in full.error
    gate.set()
    assert first.finished.wait(10) and waiting.finished.wait(10)
    assert first.curve.points["rd"][0][1] == 0.5 and waiting.error == "the curve could not be computed: " \
        "RuntimeError: the store went away"
    again = curves.job("b", broken)
    assert again is not waiting and again.finished.wait(10) and calls == ["slow", "broken", "broken"]


def test_one_tenant_cannot_hold_back_anothers_curve():
    """Found by the eighth review: one global queue of 4 let a tenant fill it (a tiny write makes a new version
    of a session, so a new job) and others got "try again in a minute" for many minutes."""
    gate = threading.Event()
    drawn = []

    def curve(name):
        def compute(job):
            drawn.append(name)
            gate.wait(10)
            return Curve({"rd": [(500, 0.5, 0.8, 480.0)]}, 1000.0, 0.1)
        return compute

    curves = Curves(pending=4)
    first = curves.job(("big", 1), curve("big v1"), owner="alpha", slot="big")
    for _ in range(100):
        if first.started:
            break
        time.sleep(0.01)
    v2 = curves.job(("big", 2), curve("big v2"), owner="alpha", slot="big")
    v3 = curves.job(("big", 3), curve("big v3"), owner="alpha", slot="big")  # the newer version replaces v2
    assert v2.finished.is_set() and v2.error == "a newer version of the session was asked for"
    other = curves.job(("big2", 1), curve("big2"), owner="alpha", slot="big2")
    assert other.finished.is_set() and "another of your sessions is waiting" in other.error
    beta = curves.job(("small", 1), curve("small"), owner="beta", slot="small")
    assert not beta.finished.is_set()  # queued: one curve of each other tenant at most before it
    gate.set()
    assert v3.finished.wait(10) and beta.finished.wait(10) and beta.curve is not None
    assert drawn == ["big v1", "big v3", "small"]


def test_no_asset_comes_from_elsewhere():
    """Every page loads only what the server serves from the package: no CDN, no font or script from outside."""
    for path in [*UI.glob("templates/*.html"), *UI.glob("static/*")]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), path
        assert "@import" not in text and "url(http" not in text, path
