"""One evaluation job (a conversation × policy × budget, or the full history) and the worker state it uses.

Jobs run in this process or in worker processes (``spawn``); a worker holds
the conversations, the config and an embedder (:func:`init_worker`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._threads import THREAD_VARIABLES
from ..datasets import Conversation, Probe
from ..embed import CachedEmbedder, Embedder
from ..manager import MemoryManager
from ..scoring import embed_text
from ..tokens import Tokenizer, get_tokenizer
from ..units import encode_units
from .config import EvalConfig
from .defaults import FULL, ORACLE
from .distortion import LMPlan
from .llm import LLMConfig, score_question
from .metrics import (
    all_evidence,
    answer_token_recall,
    context_text,
    context_words,
    embedding_coverage,
    evidence_recall,
    information_coverage,
    oracle_ids,
)

__all__ = ["init_worker", "release_worker", "run_job", "oracle_records", "history_texts", "one_thread_per_worker",
           "EmbedderFactory", "latest_points", "latest_query", "seen_probes"]


class _TimedEmbedder:
    """Passes calls through and counts the seconds spent in them (to subtract from compaction time)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - t0


@dataclass
class _Worker:
    conversations: list[Conversation]
    config: EvalConfig
    embedder: Embedder
    tokenizer: Tokenizer
    plans: list[LMPlan] | None = None
    history: dict[int, list[str]] = field(default_factory=dict)

    def plan(self, ci: int) -> LMPlan:
        """The language model's sample in conversation ``ci`` (empty without ``--lm``)."""
        return self.plans[ci] if self.plans is not None else LMPlan(frozenset(), ())


#: The worker state, per thread: a pool's process runs its jobs in the thread that initialised it, and two
#: evaluations in one process (the inspector's curve in a server thread, a caller's own) must not share one.
_LOCAL = threading.local()


def init_worker(
    conversations: list[Conversation], config: EvalConfig, embedder: Any, plans: list[LMPlan] | None = None
) -> None:
    warnings.simplefilter("ignore", RuntimeWarning)
    emb = embedder() if isinstance(embedder, EmbedderFactory) else embedder
    _LOCAL.worker = _Worker(conversations, config, emb, get_tokenizer(config.tokenizer), plans)


@contextlib.contextmanager
def one_thread_per_worker() -> Iterator[None]:
    """Start worker processes with single-threaded BLAS/OpenMP (unless the user set a count).

    The workers already use every core; a BLAS pool per worker only adds
    threads that spin between small matrix products and take CPU from them.
    """
    names = THREAD_VARIABLES
    saved = {n: os.environ.get(n) for n in names}
    if any(v is not None for v in saved.values()):
        yield
        return
    os.environ.update({n: "1" for n in names})
    try:
        yield
    finally:
        for n in names:
            os.environ.pop(n, None)


def _worker() -> _Worker:
    worker: _Worker | None = getattr(_LOCAL, "worker", None)
    if worker is None:  # pragma: no cover - a bug, never user error
        raise RuntimeError("internal error: evaluation worker used before init_worker")
    return worker


@dataclass(frozen=True)
class EmbedderFactory:
    """A picklable recipe for a disk-cached embedder (each worker opens the same cache)."""

    cache_dir: str
    inner: Embedder

    def __call__(self) -> CachedEmbedder:
        return CachedEmbedder(self.inner, cache_dir=self.cache_dir)


def history_texts(conv: Conversation) -> list[str]:
    """The texts the manager embeds for the conversation's messages (so they are cached up front)."""
    return [embed_text(u) for u in encode_units(conv.messages, get_tokenizer(len))]


def _proxies(ci: int, messages: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    w = _worker()
    conv = w.conversations[ci]
    if ci not in w.history:
        w.history[ci] = history_texts(conv)
    info = information_coverage([str(m.get("content") or "") for m in conv.messages], [context_text(messages)])
    # Markers and summary headers are rdmem's own words: context_text drops them, and a marker alone leaves nothing.
    texts = [t for t in (context_text([m]).strip() for m in messages) if t]
    ctx_vecs = w.embedder.embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
    hist_vecs = w.embedder.embed(w.history[ci])
    return {"information_coverage": info, "embedding_coverage": embedding_coverage(hist_vecs, ctx_vecs)}


def latest_points(n: int, count: int) -> list[int]:
    """The message counts (1..``n``, the last one ``n``) at which the latest-turn regime builds a context.

    >>> latest_points(100, 4), latest_points(3, 10)
    ([25, 50, 75, 100], [1, 2, 3])
    """
    return sorted({max(1, round(n * j / count)) for j in range(1, count + 1)}) if n else []


def latest_query(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the latest user message (what the proxy and the adapters take as the query), else ``None``."""
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"].strip():
            return str(m["content"])
    return None


def seen_probes(conv: Conversation, seen: int) -> list[Probe]:
    """The probes with evidence among the first ``seen`` messages, each with only that evidence: what a
    question asked after that point can be answered from."""
    before = set(conv.ids[:seen])
    out = []
    for p in conv.probes:
        ev = tuple(e for e in p.evidence if e in before)
        if ev:
            out.append(dataclasses.replace(p, evidence=ev))
    return out


def _question_record(
    conv: Conversation, probe: Probe, regime: str, policy: str, budget: int | None,
    present: set[str], words: frozenset[str], tokens: int,
) -> dict[str, Any]:
    return {
        "conversation": conv.id,
        "probe": probe.id,
        "category": probe.category,
        "regime": regime,
        "policy": policy,
        "budget": budget,
        "evidence_recall": evidence_recall(probe.evidence, present),
        "all_evidence": all_evidence(probe.evidence, present),
        "answer_recall": answer_token_recall(probe.answer, words),
        "tokens": tokens,
    }


def _with_llm(rec: dict[str, Any], probe: Probe, messages: Sequence[Mapping[str, Any]], llm: LLMConfig | None) -> None:
    if llm is not None:
        rec.update(score_question(llm, probe.question, probe.answer, probe.category, messages).as_dict())


Records = list[dict[str, Any]]


def _lm_item(kind: str, conv: Conversation, regime: str, policy: str, budget: int | None,
             messages: Sequence[Mapping[str, Any]], **where: Any) -> dict[str, Any]:
    """A context for the language model to score (``qa``: sampled probes' answers; ``turn``: the next turn)."""
    return {"kind": kind, "conversation": conv.id, "regime": regime, "policy": policy, "budget": budget,
            "messages": list(messages), **where}


def run_job(job: tuple[str, int, str, int]) -> tuple[Records, Records, Records, float]:
    """One job: question records, context records, contexts for the language model, and the CPU seconds
    it took (a measure of cost that other load on the machine does not inflate)."""
    c0 = time.process_time()
    questions, contexts, items = _run_full(job[1]) if job[0] == FULL else _run_stream(*job[1:])
    return questions, contexts, items, time.process_time() - c0


def _run_stream(ci: int, policy: str, budget: int) -> tuple[Records, Records, Records]:
    """One conversation × policy × budget: stream, then (query regime) one context per probe."""
    w = _worker()
    conv, cfg, plan = w.conversations[ci], w.config, w.plan(ci)
    timed = _TimedEmbedder(w.embedder)
    mem = MemoryManager(budget=budget, policy=policy, tokenizer=w.tokenizer, embedder=timed)
    turn_ms = np.zeros(len(conv.messages))
    items: Records = []
    cuts = set(plan.cuts) if "streaming" in cfg.regimes else set()
    points = set(latest_points(len(conv.messages), cfg.latest_points)) if "latest" in cfg.regimes else set()
    questions: Records = []
    contexts: Records = []
    for k, message in enumerate(conv.messages):
        e0, t0 = timed.seconds, time.perf_counter()
        mem.add(message)
        turn_ms[k] = (time.perf_counter() - t0 - (timed.seconds - e0)) * 1000.0
        if k + 1 in cuts:
            items.append(_lm_item("turn", conv, "streaming", policy, budget, mem.context().messages, cut=k + 1))
        if k + 1 in points:
            _latest_point(mem, timed, conv, policy, budget, k + 1, questions, contexts)
    if "streaming" in cfg.regimes:
        working = set(mem.working_ids())
        ctx = mem.context()
        words = context_words(ctx.messages)
        crec: dict[str, Any] = {
            "conversation": conv.id, "regime": "streaming", "policy": policy, "budget": budget,
            "tokens": ctx.tokens, "working": len(working), "ms_per_turn": float(turn_ms.mean()) if len(turn_ms) else 0.0,
            "ms_per_turn_max": float(turn_ms.max()) if len(turn_ms) else 0.0, "turns": len(turn_ms),
        }
        if cfg.proxies:
            crec.update(_proxies(ci, ctx.messages))
        contexts.append(crec)
        for probe in conv.probes:
            rec = _question_record(conv, probe, "streaming", policy, budget, working, words, ctx.tokens)
            _with_llm(rec, probe, ctx.messages, cfg.llm)
            questions.append(rec)
        if plan.probes:
            items.append(_lm_item("qa", conv, "streaming", policy, budget, ctx.messages, probes=sorted(plan.probes)))
    if "query" in cfg.regimes:
        for probe in conv.probes:
            e0, t0 = timed.seconds, time.perf_counter()
            ctx = mem.context(query=probe.question)
            ms = (time.perf_counter() - t0 - (timed.seconds - e0)) * 1000.0
            kept = set(ctx.kept_ids)
            rec = _question_record(conv, probe, "query", policy, budget, kept, context_words(ctx.messages), ctx.tokens)
            _with_llm(rec, probe, ctx.messages, cfg.llm)
            questions.append(rec)
            if probe.id in plan.probes:
                items.append(_lm_item("qa", conv, "query", policy, budget, ctx.messages, probes=[probe.id]))
            crec = {"conversation": conv.id, "regime": "query", "policy": policy, "budget": budget,
                    "probe": probe.id, "tokens": ctx.tokens, "ms_per_query": ms}
            if cfg.proxies:
                crec.update(_proxies(ci, ctx.messages))
            contexts.append(crec)
    return questions, contexts, items


def _latest_point(
    mem: MemoryManager, timed: _TimedEmbedder, conv: Conversation, policy: str, budget: int, seen: int,
    questions: Records, contexts: Records,
) -> None:
    """The latest-turn regime at one point: the context with the latest user turn as its query, scored on
    every question's evidence seen so far."""
    query = latest_query(conv.messages[:seen])
    probes = seen_probes(conv, seen)
    if query is None or not probes:
        return
    e0, t0 = timed.seconds, time.perf_counter()
    ctx = mem.context(query=query, warn=False)
    ms = (time.perf_counter() - t0 - (timed.seconds - e0)) * 1000.0
    kept, words = set(ctx.kept_ids), context_words(ctx.messages)
    for probe in probes:
        rec = _question_record(conv, probe, "latest", policy, budget, kept, words, ctx.tokens)
        questions.append({**rec, "point": seen})
    contexts.append({"conversation": conv.id, "regime": "latest", "policy": policy, "budget": budget,
                     "point": seen, "tokens": ctx.tokens, "ms_per_query": ms})


def _run_full(ci: int) -> tuple[Records, Records, Records]:
    """The full history as the context: the right end of every curve (and the LLM's reference)."""
    w = _worker()
    conv, cfg, plan = w.conversations[ci], w.config, w.plan(ci)
    messages = [{k: v for k, v in m.items() if k != "id"} for m in conv.messages]
    tokens = w.tokenizer.messages_tokens(messages)
    present, words = set(conv.ids), context_words(messages)
    questions: Records = []
    contexts: Records = []
    items: Records = []
    llm_fields: dict[str, dict[str, Any]] = {}
    for regime in (r for r in cfg.regimes if r != "latest"):
        if plan.probes:  # the language model reads as much of it as its window holds, newest first
            items.append(_lm_item("qa", conv, regime, FULL, None, messages, probes=sorted(plan.probes)))
        contexts.append({"conversation": conv.id, "regime": regime, "policy": FULL, "budget": None, "tokens": tokens})
        if cfg.proxies:
            contexts[-1].update({"information_coverage": 1.0, "embedding_coverage": 1.0})
        for probe in conv.probes:
            rec = _question_record(conv, probe, regime, FULL, None, present, words, tokens)
            if cfg.llm is not None:
                if probe.id not in llm_fields:
                    llm_fields[probe.id] = score_question(
                        cfg.llm, probe.question, probe.answer, probe.category, messages
                    ).as_dict()
                rec.update(llm_fields[probe.id])
            questions.append(rec)
    if "streaming" in cfg.regimes:
        items += [_lm_item("turn", conv, "streaming", FULL, None, messages[:cut], cut=cut) for cut in plan.cuts]
    if "latest" in cfg.regimes:
        for seen in latest_points(len(messages), cfg.latest_points):
            if latest_query(messages[:seen]) is None:
                continue
            head = messages[:seen]
            size, head_words = w.tokenizer.messages_tokens(head), context_words(head)
            contexts.append({"conversation": conv.id, "regime": "latest", "policy": FULL, "budget": None,
                             "point": seen, "tokens": size})
            for probe in seen_probes(conv, seen):
                rec = _question_record(conv, probe, "latest", FULL, None, set(conv.ids[:seen]), head_words, size)
                questions.append({**rec, "point": seen})
    return questions, contexts, items


# -- main side -----------------------------------------------------------------


def oracle_records(
    conversations: Sequence[Conversation], cfg: EvalConfig, tok: Tokenizer
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The oracle's points: streaming (one knapsack per conversation knowing every question), query (one
    knapsack per question, knowing its evidence) and latest (one knapsack per point, knowing every question's
    evidence seen so far)."""
    questions, contexts = [], []
    for conv in conversations:
        ids = conv.ids
        costs = [tok.message_tokens({k: v for k, v in m.items() if k != "id"}) for m in conv.messages]
        cost_of = dict(zip(ids, costs, strict=True))
        text_of = {m["id"]: m for m in conv.messages}
        labelled = [p for p in conv.probes if p.evidence]
        for budget in cfg.budgets:
            if "streaming" in cfg.regimes and labelled:
                kept = oracle_ids(ids, costs, [p.evidence for p in labelled], budget)
                kept_set = set(kept)
                words = context_words(text_of[i] for i in kept)
                tokens = sum(cost_of[i] for i in kept)
                contexts.append({"conversation": conv.id, "regime": "streaming", "policy": ORACLE,
                                 "budget": budget, "tokens": tokens})
                for p in conv.probes:
                    questions.append(_question_record(conv, p, "streaming", ORACLE, budget, kept_set, words, tokens))
            if "latest" in cfg.regimes:
                _latest_oracle(conv, ids, costs, cost_of, text_of, budget, cfg.latest_points, questions, contexts)
            if "query" in cfg.regimes:
                for p in labelled:
                    ev = list(p.evidence)
                    kept = oracle_ids(ev, [cost_of[e] for e in ev], [ev], budget)
                    tokens = sum(cost_of[i] for i in kept)
                    words = context_words(text_of[i] for i in kept)
                    questions.append(_question_record(conv, p, "query", ORACLE, budget, set(kept), words, tokens))
                    contexts.append({"conversation": conv.id, "regime": "query", "policy": ORACLE,
                                     "budget": budget, "probe": p.id, "tokens": tokens})
    return questions, contexts


def _latest_oracle(
    conv: Conversation, ids: list[str], costs: list[int], cost_of: dict[str, int], text_of: dict[str, Any],
    budget: int, count: int, questions: Records, contexts: Records,
) -> None:
    """The latest-turn regime's oracle: at each point, one knapsack over the messages so far that knows the
    evidence seen so far of every question."""
    for seen in latest_points(len(ids), count):
        probes = seen_probes(conv, seen)
        if latest_query(conv.messages[:seen]) is None or not probes:
            continue
        kept = oracle_ids(ids[:seen], costs[:seen], [p.evidence for p in probes], budget)
        tokens, words = sum(cost_of[i] for i in kept), context_words(text_of[i] for i in kept)
        contexts.append({"conversation": conv.id, "regime": "latest", "policy": ORACLE, "budget": budget,
                         "point": seen, "tokens": tokens})
        for p in probes:
            rec = _question_record(conv, p, "latest", ORACLE, budget, set(kept), words, tokens)
            questions.append({**rec, "point": seen})


def release_worker() -> None:
    """Drop this thread's worker state (it holds every conversation)."""
    _LOCAL.worker = None
