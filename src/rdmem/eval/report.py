"""Writing an :class:`~rdmem.eval.EvalResult` out: JSON, CSV, a Markdown report, per-question JSONL, the plot."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..datasets import LOCOMO_CATEGORIES
from .runner import FULL, ORACLE, REGIMES, EvalResult, Row

__all__ = ["to_json", "to_csv", "to_markdown", "write_outputs"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_json(result: EvalResult) -> str:
    """The aggregated rows, the configuration and the run's metadata (NaN written as ``null``)."""
    return json.dumps(_clean(result.to_dict()), indent=2, ensure_ascii=False) + "\n"


def to_csv(result: EvalResult) -> str:
    """One line per row (regime, policy, budget, category); empty cells where a metric does not apply."""
    buf = io.StringIO()
    names = [f.name for f in fields(Row)]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for r in result.rows:
        d = r.as_dict()
        writer.writerow(["" if d[n] is None else (f"{d[n]:.6g}" if isinstance(d[n], float) else d[n]) for n in names])
    return buf.getvalue()


def _num(v: float, digits: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _with_ci(r: Row, name: str) -> str:
    v, lo, hi = getattr(r, name), getattr(r, f"{name}_lo"), getattr(r, f"{name}_hi")
    if math.isnan(v):
        return "–"
    return f"{v:.3f} [{lo:.2f}, {hi:.2f}]"


def _table(result: EvalResult, regime: str, cell: Callable[[Row], str], *, oracle: bool = True) -> list[str]:
    budgets = result.config.budgets
    policies = list(result.config.policies) + ([ORACLE] if oracle else [])
    lines = ["| policy | " + " | ".join(f"{b:,}" for b in budgets) + " |", "|---" * (len(budgets) + 1) + "|"]
    for p in policies:
        cells = []
        for b in budgets:
            try:
                cells.append(cell(result.row(regime, p, b)))
            except KeyError:
                cells.append("–")
        if any(c != "–" for c in cells):
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _full_line(result: EvalResult, regime: str) -> str | None:
    try:
        r = result.row(regime, FULL, None)
    except KeyError:
        return None
    parts = []
    if not math.isnan(r.evidence_recall):
        parts.append(f"evidence recall {r.evidence_recall:.3f}")
    if not math.isnan(r.answer_recall):
        parts.append(f"answer-token recall {r.answer_recall:.3f}")
    if not math.isnan(r.qa_f1):
        parts.append(f"QA F1 {r.qa_f1:.3f}, judge accuracy {_num(r.judge_accuracy)}")
    size = f"{r.tokens_mean:,.0f} tokens on average (max {r.tokens_max:,.0f})"
    return f"Full history: {', '.join(parts) + ' at ' if parts else ''}{size}."


_TITLES = {
    "streaming": "Streaming regime (working set after the last message)",
    "query": "Query regime (context(query=question) per question)",
    "latest": "Latest-turn regime (context(query=the latest user turn) at {points} points through each conversation; "
              "every question scored on its evidence seen so far)",
}


def to_markdown(result: EvalResult) -> str:
    """A readable report: one section per regime, one table per metric (policies × budgets)."""
    cfg, meta = result.config, result.meta
    cats = "all" if cfg.categories is None else ", ".join(
        f"{c} ({LOCOMO_CATEGORIES[c]})" if c in LOCOMO_CATEGORIES else str(c) for c in cfg.categories
    )
    out = [
        f"# rdmem evaluation{': ' + str(meta.get('dataset')) if meta.get('dataset') else ''}",
        "",
        f"{meta.get('conversations', '?')} conversations, {meta.get('messages', '?'):,} messages, "
        f"{meta.get('questions', '?'):,} questions ({meta.get('questions_with_evidence', '?'):,} with evidence); "
        f"categories: {cats}; tokenizer {cfg.tokenizer}. "
        "Evidence recall: mean share of a question's evidence messages present verbatim in the context. "
        "Brackets: 95% bootstrap interval over questions "
        f"({cfg.n_bootstrap} resamples, seed {cfg.seed}). `oracle`: exact knapsack that knows every "
        "question's evidence (streaming: one memory for all questions; query: one per question; latest: one "
        "per point, for every question's evidence seen so far).",
        "",
    ]
    has_ev = any(not math.isnan(r.evidence_recall) for r in result.rows)
    has_ans = any(not math.isnan(r.answer_recall) for r in result.rows)
    for regime in REGIMES:
        if regime not in cfg.regimes or not any(r.regime == regime for r in result.rows):
            continue
        title = _TITLES[regime].format(points=cfg.latest_points)
        out += [f"## {title}", ""]
        if has_ev:
            out += ["### Evidence recall", ""] + _table(result, regime, lambda r: _with_ci(r, "evidence_recall")) + [""]
            full = _full_line(result, regime)
            if full:
                out += [full, ""]
            out += ["### All-evidence rate (every evidence message present)", ""]
            out += _table(result, regime, lambda r: _with_ci(r, "all_evidence")) + [""]
        if has_ans:
            out += ["### Answer-token recall (gold answer's content words in the rendered context)", ""]
            out += _table(result, regime, lambda r: _with_ci(r, "answer_recall")) + [""]
        out += ["### Context size (tokens, mean / max)", ""]
        out += _table(result, regime, lambda r: f"{r.tokens_mean:,.0f} / {r.tokens_max:,.0f}") + [""]
        if regime == "streaming":
            out += ["### Compaction time per message (ms: mean without embedding / with embedding / worst)", ""]
            out += _table(
                result, regime,
                lambda r: f"{_num(r.ms_per_turn, 2)} / {_num(r.ms_per_turn_with_embedding, 2)} / {_num(r.ms_per_turn_max, 0)}",
                oracle=False,
            ) + [""]
        else:
            out += ["### Time per query (ms, context(query) without embedding the query)", ""]
            out += _table(result, regime, lambda r: _num(r.ms_per_query, 1), oracle=False) + [""]
        if any(not math.isnan(r.information_coverage) for r in result.rows if r.regime == regime):
            out += ["### Label-free proxies (information coverage / embedding coverage)", ""]
            out += _table(
                result, regime, lambda r: f"{_num(r.information_coverage)} / {_num(r.embedding_coverage)}", oracle=False
            ) + [""]
        if cfg.llm is not None:
            out += ["### LLM QA (LoCoMo F1 / judge accuracy / errors)", ""]
            out += _table(
                result, regime, lambda r: f"{_num(r.qa_f1)} / {_num(r.judge_accuracy)} / {r.llm_errors}", oracle=False
            ) + [""]
        cats_seen = sorted({r.category for r in result.rows if r.regime == regime and r.category != "all"}, key=int)
        if has_ev and cats_seen:
            b = cfg.budgets[len(cfg.budgets) // 2]
            out += [f"### Evidence recall by category at {b:,} tokens", ""]
            out += ["| policy | " + " | ".join(
                f"{c} {LOCOMO_CATEGORIES.get(int(c), '')}".strip() for c in cats_seen) + " |"]
            out += ["|---" * (len(cats_seen) + 1) + "|"]
            for p in list(cfg.policies) + [ORACLE]:
                cells = []
                for c in cats_seen:
                    try:
                        r = result.row(regime, p, b, c)
                        cells.append(f"{_num(r.evidence_recall)} (n={r.n_questions})")
                    except KeyError:
                        cells.append("–")
                out.append(f"| {p} | " + " | ".join(cells) + " |")
            out.append("")
    out += _lm_section(result)
    notes = meta.get("notes") or []
    if notes:
        out += ["## Data notes", ""] + [f"- {n}" for n in notes] + [""]
    out += [
        "## Run",
        "",
        f"- wall time: {meta.get('wall_seconds')} s ({meta.get('workers')} worker processes; the runs "
        f"took {meta.get('cpu_seconds')} CPU seconds in all); "
        f"embedding pass: {meta.get('embedding_seconds')} s; one message embeds in "
        f"{meta.get('embed_ms_per_message')} ms (MiniLM on one thread)",
        f"- machine: {meta.get('machine')}",
        f"- embedding cache: {meta.get('embedding_cache')}",
        "",
    ]
    return "\n".join(out)


def _lm_section(result: EvalResult) -> list[str]:
    """Model-measured distortion: share of the full history's gain kept, ΔNLL, and coherence (``--lm``)."""
    lm = result.meta.get("lm")
    if not lm:
        return []
    out = [
        "## Model-measured distortion (language model)",
        "",
        f"{lm['model']} on {lm['device']} (window {lm['window']:,} tokens), {lm['questions']} questions "
        f"(stratified by category) and {lm['turns']} points of the stream; {lm['seconds']} s. "
        "Gain kept: `(NLL_none − NLL_policy) / (NLL_none − NLL_full)` of the gold answer, per token "
        "(1 = as good as the full history, 0 = as bad as no context); ΔNLL: the policy's answer NLL minus the "
        "full history's (nats per token, lower is better). The full history is as much as the window holds, "
        f"newest first ({lm['contexts_cut_to_window']} contexts were cut to the window). Brackets: 95% paired "
        "bootstrap intervals over questions.",
        "",
    ]
    for regime in REGIMES:
        if not any(r.regime == regime and r.lm_questions for r in result.rows):
            continue
        out += [f"### {regime}: gain kept", ""]
        out += _table(result, regime, lambda r: _with_ci(r, "lm_gain_kept"), oracle=False) + [""]
        out += [f"### {regime}: ΔNLL against the full history", ""]
        out += _table(result, regime, lambda r: _with_ci(r, "lm_delta_nll"), oracle=False) + [""]
        try:
            full = result.row(regime, FULL, None)
            out += [f"Answer NLL: full history {_num(full.lm_nll)}, no context {_num(lm.get('nll_none'))}.", ""]
        except KeyError:
            pass
        if regime == "streaming" and any(not math.isnan(r.lm_coherence_nll) for r in result.rows):
            out += ["### streaming: coherence (the next real turn's NLL; Δ against the full history)", ""]
            out += _table(result, regime, lambda r: f"{_num(r.lm_coherence_nll)} (Δ {_with_ci(r, 'lm_coherence_delta')})"
                          if not math.isnan(r.lm_coherence_nll) else "–", oracle=False) + [""]
    return out


def write_outputs(result: EvalResult, out_dir: str | Path, *, plot: bool = True) -> dict[str, Path]:
    """Write ``results.json``, ``results.csv``, ``results.md``, ``questions.jsonl`` and ``rd_curve.png``.

    Returns the paths written, by kind. The plot needs matplotlib (the
    ``eval`` extra); without it the other files are still written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "csv": out / "results.csv", "markdown": out / "results.md",
             "questions": out / "questions.jsonl"}
    paths["json"].write_text(to_json(result), encoding="utf-8")
    paths["csv"].write_text(to_csv(result), encoding="utf-8")
    paths["markdown"].write_text(to_markdown(result), encoding="utf-8")
    with paths["questions"].open("w", encoding="utf-8") as fh:
        for q in result.questions:
            fh.write(json.dumps(_clean(q), ensure_ascii=False) + "\n")
    if plot:
        from .plots import plot_rd_curve

        paths["plot"] = plot_rd_curve(result, out / "rd_curve.png")
        if any(not math.isnan(r.lm_delta_nll) for r in result.rows):
            paths["plot_lm"] = plot_rd_curve(result, out / "rd_curve_lm.png", metric="lm_delta_nll")
    return paths
