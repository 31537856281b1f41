"""The evaluation runner: rate-distortion curves for every policy × budget × regime.

For each conversation, policy and budget, one :class:`~rdmem.MemoryManager`
is fed the messages one by one (the *streaming* regime: its working set after
the last message is what every question is answered from); then, in the
*query* regime, ``context(query=question)`` builds one context per question.
Only the public API is measured. The oracle (an exact knapsack that knows
every question's evidence) and the full history are computed alongside; the
jobs themselves are in :mod:`._jobs`, the configuration in :mod:`.config`.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import pickle
import platform
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..datasets import Conversation
from ..embed import CachedEmbedder, Embedder
from ..errors import InvalidInput
from ..policies import POLICIES
from ..sessions import needs_embedder
from ..tokens import get_tokenizer
from ._jobs import (
    EmbedderFactory, history_texts, init_worker, one_thread_per_worker, oracle_records, release_worker, run_job,
)
from .config import EvalConfig, EvalResult, Row, cached_embedder, default_cache_dir
from .defaults import FULL, ORACLE, REGIMES
from .distortion import LMPlan, load_lm, lm_plan, lm_stats, score_items
from .metrics import mean_ci

__all__ = ["EvalConfig", "EvalResult", "Row", "run_eval", "default_cache_dir", "cached_embedder", "REGIMES",
           "ORACLE", "FULL"]


def _seed_for(seed: int, key: str) -> int:
    return int(np.random.SeedSequence([seed, zlib.crc32(key.encode())]).generate_state(1)[0])


def _nanmean(values: Iterable[Any]) -> float:
    v = np.array([x for x in values if x is not None], dtype=np.float64)
    v = v[~np.isnan(v)] if v.size else v
    return float(v.mean()) if v.size else math.nan


def _aggregate(
    cfg: EvalConfig,
    questions: list[dict[str, Any]],
    contexts: list[dict[str, Any]],
    embed_ms: float,
) -> list[Row]:
    by_q: dict[tuple[str, str, int | None], list[dict[str, Any]]] = {}
    for q in questions:
        by_q.setdefault((q["regime"], q["policy"], q["budget"]), []).append(q)
    by_c: dict[tuple[str, str, int | None], list[dict[str, Any]]] = {}
    for c in contexts:
        by_c.setdefault((c["regime"], c["policy"], c["budget"]), []).append(c)
    cats = sorted({q["category"] for q in questions if q["category"] is not None})
    policy_order = list(cfg.policies) + [ORACLE, FULL]
    keys = sorted(
        set(by_q) | set(by_c),
        key=lambda k: (REGIMES.index(k[0]), policy_order.index(k[1]), k[2] if k[2] is not None else 1 << 62),
    )
    rows: list[Row] = []
    for key in keys:
        regime, policy, budget = key
        qs, cs = by_q.get(key, []), by_c.get(key, [])
        needs_emb = policy in POLICIES and needs_embedder(policy)
        groups: list[tuple[str, list[dict[str, Any]]]] = [("all", qs)]
        groups += [(str(c), [q for q in qs if q["category"] == c]) for c in cats]
        for cat, group in groups:
            if cat != "all" and not group:
                continue
            tag = f"{regime}/{policy}/{budget}/{cat}"
            stats: dict[str, Any] = {}
            for name in ("evidence_recall", "all_evidence", "answer_recall"):
                m, lo, hi = mean_ci(
                    [q[name] for q in group], seed=_seed_for(cfg.seed, f"{tag}/{name}"), n_resamples=cfg.n_bootstrap
                )
                stats.update({name: m, f"{name}_lo": lo, f"{name}_hi": hi})
            # Context sizes: per context for "all" (one per conversation when streaming), per question in a category.
            sizes = [c["tokens"] for c in cs] if cat == "all" else [q["tokens"] for q in group]
            if sizes:
                stats["tokens_mean"] = float(np.mean(sizes))
                stats["tokens_max"] = float(np.max(sizes))
            if cat == "all":
                streams = [c for c in cs if "ms_per_turn" in c]
                if streams:
                    turns = sum(c["turns"] for c in streams)
                    stats["ms_per_turn"] = sum(c["ms_per_turn"] * c["turns"] for c in streams) / max(turns, 1)
                    stats["ms_per_turn_max"] = max(c["ms_per_turn_max"] for c in streams)
                    stats["ms_per_turn_with_embedding"] = stats["ms_per_turn"] + (embed_ms if needs_emb else 0.0)
                stats["ms_per_query"] = _nanmean(c.get("ms_per_query") for c in cs)
                stats["information_coverage"] = _nanmean(c.get("information_coverage") for c in cs)
                stats["embedding_coverage"] = _nanmean(c.get("embedding_coverage") for c in cs)
            if cfg.lm is not None:
                stats.update(lm_stats(group, cs if cat == "all" else [], _seed_for(cfg.seed, f"{tag}/lm"),
                                      cfg.n_bootstrap))
            if cfg.llm is not None:
                stats["qa_f1"] = _nanmean(q.get("qa_f1") for q in group)
                stats["judge_accuracy"] = _nanmean(q.get("judge") for q in group if q["category"] != 5)
                stats["llm_errors"] = sum(1 for q in group if q.get("llm_error"))
            rows.append(Row(regime, policy, budget, cat, len(group), len(cs) if cat == "all" else len(group), **stats))
    return rows


def _calibrate(embedder: Embedder, texts: Sequence[str], n: int = 6) -> float:
    """Milliseconds the embedding model takes for one message, as a streaming add() would call it.

    Timed on one thread: a multi-threaded model on a busy machine waits for its threads and can look
    ten times slower than it is; one thread gives a figure other load barely moves.
    """
    inner = getattr(embedder, "inner", embedder)
    sample = [t for t in texts if t][: n + 1]
    if not sample:
        return math.nan
    inner.embed(sample[:1])  # load the model, warm up
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    times = []
    try:
        if torch is not None:
            torch.set_num_threads(1)
        for t in sample[1:] or sample:
            t0 = time.perf_counter()
            inner.embed([t])
            times.append((time.perf_counter() - t0) * 1000.0)
    finally:
        if torch is not None:
            torch.set_num_threads(threads)
    return float(np.median(times))


def run_eval(
    conversations: Sequence[Conversation],
    config: EvalConfig | None = None,
    *,
    embedder: Embedder | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool | Callable[[int, int], None] = False,
    dataset: str = "",
) -> EvalResult:
    """Evaluate every policy × budget × regime of ``config`` on ``conversations``.

    Parameters
    ----------
    conversations:
        From :func:`~rdmem.eval.load_locomo` or :func:`~rdmem.eval.load_jsonl`.
    config:
        What to run (default: :class:`EvalConfig`).
    embedder:
        Passed to every :class:`~rdmem.MemoryManager` (default: MiniLM cached
        on disk under ``cache_dir``; see :func:`cached_embedder`). With
        ``workers > 1`` a custom embedder must be picklable.
    cache_dir:
        Where the default embedder keeps its vectors (default:
        :func:`default_cache_dir`).
    progress:
        ``True`` for a progress bar on stderr, or a callable ``(done, total)``.
    dataset:
        A label for the results (the input path).
    """
    cfg = config or EvalConfig()
    start = time.perf_counter()
    lm = load_lm(cfg.lm, cache_dir) if cfg.lm is not None else None
    convs = [c.select(cfg.categories) for c in conversations]
    if not convs:
        raise InvalidInput("conversations must hold at least one conversation")
    with warnings.catch_warnings():  # the offline copy of an encoding is identical; saying so once per run is noise
        warnings.simplefilter("ignore", RuntimeWarning)
        tok = get_tokenizer(cfg.tokenizer)
    emb: Embedder = cached_embedder(cache_dir) if embedder is None else embedder
    texts, embed_seconds = _embed_up_front(convs, emb)
    needs_emb = any(needs_embedder(p) for p in cfg.policies)
    embed_ms = _calibrate(emb, texts) if (cfg.calibrate_embedding and needs_emb) else math.nan
    questions, contexts = oracle_records(convs, cfg, tok)
    plans = None
    if cfg.lm is not None:  # coherence is a streaming metric
        plans = lm_plan(convs, cfg.lm if "streaming" in cfg.regimes else dataclasses.replace(cfg.lm, turns=0), cfg.seed)
    qs, cs, items, cpu_seconds, workers = _execute(_jobs_for(convs, cfg), convs, cfg, emb, progress, plans)
    questions += qs
    contexts += cs
    lm_meta = None
    if lm is not None and plans is not None:
        lm_meta = score_items(lm, items, questions, contexts, convs, plans, progress=progress is True)
    questions.sort(key=lambda q: (REGIMES.index(q["regime"]), q["policy"], q["budget"] or 0, q["conversation"],
                                  q.get("point", 0), q["probe"]))
    rows = _aggregate(cfg, questions, contexts, embed_ms)
    meta = {
        "dataset": dataset,
        "conversations": len(convs),
        "messages": sum(len(c.messages) for c in convs),
        "questions": sum(len(c.probes) for c in convs),
        "questions_with_evidence": sum(1 for c in convs for p in c.probes if p.evidence),
        "wall_seconds": round(time.perf_counter() - start, 2),
        "cpu_seconds": round(cpu_seconds, 1),
        "embedding_seconds": round(embed_seconds, 2),
        "embed_ms_per_message": None if math.isnan(embed_ms) else round(embed_ms, 3),
        "embedding_cache": str(emb.cache_dir) if isinstance(emb, CachedEmbedder) and emb.cache_dir else None,
        "workers": workers,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "notes": [n for c in convs for n in c.notes],
        "lm": lm_meta,
    }
    return EvalResult(cfg, rows, questions, contexts, meta)


def _embed_up_front(convs: Sequence[Conversation], emb: Embedder) -> tuple[list[str], float]:
    """Embed every text once, up front (a warm cache makes this a lookup), so workers never load the model."""
    texts = [t for c in convs for t in history_texts(c)] + [p.question for c in convs for p in c.probes]
    t0 = time.perf_counter()
    if texts:
        emb.embed(texts)
    seconds = time.perf_counter() - t0
    if isinstance(emb, CachedEmbedder):
        emb.save()
    return texts, seconds


def _jobs_for(convs: Sequence[Conversation], cfg: EvalConfig) -> list[tuple[str, int, str, int]]:
    """Every conversation × policy × budget, and each conversation's full history; longest first (large
    conversations, large budgets), so the last job to finish is a short one."""
    jobs = [("run", ci, p, b) for ci in range(len(convs)) for p in cfg.policies for b in cfg.budgets]
    jobs += [(FULL, ci, FULL, 0) for ci in range(len(convs))]
    jobs.sort(key=lambda j: (-(len(convs[j[1]].messages)) * (j[3] + 500), j))
    return jobs


def _execute(
    jobs: list[tuple[str, int, str, int]], convs: list[Conversation], cfg: EvalConfig, emb: Embedder,
    progress: bool | Callable[[int, int], None], plans: list[LMPlan] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], float, int]:
    """Run the jobs here or in ``cfg.workers`` processes; their records, the contexts the language model
    scores, CPU seconds, and the worker count."""
    questions: list[dict[str, Any]] = []
    contexts: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    cpu_seconds, done = 0.0, 0
    bar = None
    if progress is True:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(jobs), desc="rdmem eval", unit="run", file=sys.stderr, dynamic_ncols=True)
        except ImportError:  # pragma: no cover - tqdm ships with the eval extra
            bar = None

    def take(result: tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], float]) -> None:
        nonlocal cpu_seconds, done
        questions.extend(result[0])
        contexts.extend(result[1])
        items.extend(result[2])
        cpu_seconds += result[3]
        done += 1
        if bar is not None:
            bar.update(1)
        elif callable(progress):
            progress(done, len(jobs))

    workers = min(cfg.workers, len(jobs))
    try:
        if workers <= 1:
            init_worker(convs, cfg, emb, plans)
            for job in jobs:
                take(run_job(job))
        else:
            ctx = multiprocessing.get_context("spawn")
            with one_thread_per_worker(), ctx.Pool(
                workers, initializer=init_worker, initargs=(convs, cfg, _shippable(emb), plans)
            ) as pool:
                for result in pool.imap_unordered(run_job, jobs):
                    take(result)
    finally:
        release_worker()  # the in-process worker state holds every conversation: let it go
        if bar is not None:
            bar.close()
    return questions, contexts, items, cpu_seconds, workers


def _shippable(emb: Embedder) -> Any:
    """What to send to worker processes: a recipe for a disk-cached embedder (its vectors are read from
    disk there, not pickled), else the embedder itself."""
    if isinstance(emb, CachedEmbedder) and emb.cache_dir is not None:
        emb = EmbedderFactory(str(emb.cache_dir), emb.inner)  # type: ignore[assignment]
    try:
        pickle.dumps(emb)
    except Exception as exc:
        raise InvalidInput(
            f"with workers > 1 the embedder is sent to other processes and must be picklable; "
            f"{type(emb).__name__} is not ({exc}). Use workers=1."
        ) from None
    return emb
