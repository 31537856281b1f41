"""The evaluation runner: rate-distortion curves for every policy × budget × regime.

For each conversation, policy and budget, one :class:`~rdmem.MemoryManager`
is fed the messages one by one (the *streaming* regime: its working set after
the last message is what every question is answered from); then, in the
*query* regime, ``context(query=question)`` builds one context per question.
Only the public API is measured. The oracle (an exact knapsack that knows
every question's evidence) and the full history are computed alongside.

>>> cfg = EvalConfig(budgets=(200,), policies=("window",), regimes=("streaming",))
>>> cfg.budgets, cfg.policies
((200,), ('window',))
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import pickle
import platform
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..embed import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from ..manager import MemoryManager
from ..policies import POLICIES, get_policy
from ..scoring import embed_text
from ..tokens import Tokenizer, get_tokenizer
from ..units import encode_units
from ..datasets import Conversation, Probe
from .llm import LLMConfig, score_question
from .metrics import (
    all_evidence,
    answer_token_recall,
    context_text,
    context_words,
    embedding_coverage,
    evidence_recall,
    information_coverage,
    mean_ci,
    oracle_ids,
)

__all__ = ["EvalConfig", "EvalResult", "Row", "run_eval", "default_cache_dir", "cached_embedder", "REGIMES"]

from .defaults import DEFAULT_BUDGETS, DEFAULT_POLICIES, FULL, ORACLE, REGIMES  # noqa: E402


def default_cache_dir() -> Path:
    """``$RDMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/rdmem``, else ``~/.cache/rdmem``."""
    env = os.environ.get("RDMEM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rdmem"


def cached_embedder(cache_dir: str | os.PathLike[str] | None = None) -> CachedEmbedder:
    """The default MiniLM embedder with its vectors cached on disk under ``<cache_dir>/embeddings``."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return CachedEmbedder(SentenceTransformerEmbedder(), cache_dir=root / "embeddings")


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate.

    Parameters
    ----------
    budgets:
        Token budgets (ints > 0) of each :class:`~rdmem.MemoryManager`.
    policies:
        Names from :data:`rdmem.POLICIES`.
    regimes:
        ``"streaming"`` and/or ``"query"``.
    categories:
        Probe categories to keep (LoCoMo: 1 multi-hop, 2 temporal, 3
        open-domain, 4 single-hop, 5 adversarial); ``None`` keeps all.
    tokenizer:
        How budgets and context sizes are counted (see :func:`rdmem.get_tokenizer`).
    seed:
        Seeds the bootstrap (no global random state is touched).
    n_bootstrap:
        Resamples per confidence interval.
    workers:
        Processes (conversations × policies × budgets run in parallel).
    proxies:
        Compute the label-free proxies (information and embedding coverage).
    llm:
        An endpoint for LLM-judged QA (``None``: skipped).
    calibrate_embedding:
        Time the embedding model on single messages, to report compaction
        time per turn with embedding.
    """

    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    policies: tuple[str, ...] = DEFAULT_POLICIES
    regimes: tuple[str, ...] = REGIMES
    categories: tuple[int, ...] | None = (1, 2, 3, 4)
    tokenizer: str = "cl100k_base"
    seed: int = 0
    n_bootstrap: int = 1000
    workers: int = 1
    proxies: bool = False
    llm: LLMConfig | None = None
    calibrate_embedding: bool = True

    def __post_init__(self) -> None:
        budgets = tuple(self.budgets) if not isinstance(self.budgets, int) else (self.budgets,)
        if not budgets:
            raise ValueError("budgets must name at least one budget (tokens)")
        for b in budgets:
            if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b <= 0:
                raise ValueError(f"budgets must be ints > 0 tokens, got {b!r}")
        object.__setattr__(self, "budgets", tuple(sorted({int(b) for b in budgets})))
        policies = (self.policies,) if isinstance(self.policies, str) else tuple(self.policies)
        if not policies:
            raise ValueError("policies must name at least one policy")
        for p in policies:
            if p not in POLICIES:
                raise ValueError(f"unknown policy {p!r}; choose one of {', '.join(sorted(POLICIES))}")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(policies)))
        regimes = (self.regimes,) if isinstance(self.regimes, str) else tuple(self.regimes)
        if not regimes or any(r not in REGIMES for r in regimes):
            raise ValueError(f"regimes must be among {', '.join(REGIMES)}, got {list(regimes)}")
        object.__setattr__(self, "regimes", tuple(r for r in REGIMES if r in regimes))
        if self.categories is not None:
            cats = tuple(self.categories)
            if not cats or any(isinstance(c, bool) or not isinstance(c, int) for c in cats):
                raise ValueError(f"categories must be a non-empty list of ints or None, got {self.categories!r}")
            object.__setattr__(self, "categories", tuple(sorted(set(cats))))
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {self.workers!r}")
        if isinstance(self.n_bootstrap, bool) or not isinstance(self.n_bootstrap, int) or self.n_bootstrap < 1:
            raise ValueError(f"n_bootstrap must be an int >= 1, got {self.n_bootstrap!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {self.seed!r}")

    def describe(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["llm"] = self.llm.describe() if self.llm is not None else None
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


@dataclass(frozen=True)
class Row:
    """One point of a curve: metrics of one regime × policy × budget × category.

    ``budget`` is ``None`` for the full history. ``category`` is ``"all"`` (the
    selected categories together) or one category. Intervals are 95%
    bootstrap intervals over questions. NaN where a metric does not apply
    (no evidence, no gold answers, no LLM, ...). Times are milliseconds;
    ``ms_per_turn`` excludes embedding, ``ms_per_turn_with_embedding`` adds
    the measured cost of embedding one message with the model (for policies
    that need embeddings).
    """

    regime: str
    policy: str
    budget: int | None
    category: str
    n_questions: int
    n_contexts: int
    evidence_recall: float = math.nan
    evidence_recall_lo: float = math.nan
    evidence_recall_hi: float = math.nan
    all_evidence: float = math.nan
    all_evidence_lo: float = math.nan
    all_evidence_hi: float = math.nan
    answer_recall: float = math.nan
    answer_recall_lo: float = math.nan
    answer_recall_hi: float = math.nan
    tokens_mean: float = math.nan
    tokens_max: float = math.nan
    ms_per_turn: float = math.nan
    ms_per_turn_max: float = math.nan
    ms_per_turn_with_embedding: float = math.nan
    ms_per_query: float = math.nan
    information_coverage: float = math.nan
    embedding_coverage: float = math.nan
    qa_f1: float = math.nan
    judge_accuracy: float = math.nan
    llm_errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


@dataclass
class EvalResult:
    """Everything a run measured: aggregated :class:`Row` s, per-question and per-context records, metadata."""

    config: EvalConfig
    rows: list[Row]
    questions: list[dict[str, Any]]
    contexts: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def row(self, regime: str, policy: str, budget: int | None, category: str = "all") -> Row:
        """The row for one point (``KeyError`` if it was not run)."""
        for r in self.rows:
            if (r.regime, r.policy, r.budget, r.category) == (regime, policy, budget, category):
                return r
        raise KeyError((regime, policy, budget, category))

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "config": self.config.describe(), "rows": [r.as_dict() for r in self.rows]}


# -- worker side ---------------------------------------------------------------


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
    history: dict[int, list[str]] = field(default_factory=dict)


_W: _Worker | None = None


def _init_worker(conversations: list[Conversation], config: EvalConfig, embedder: Any) -> None:
    global _W
    warnings.simplefilter("ignore", RuntimeWarning)
    emb = embedder() if isinstance(embedder, _EmbedderFactory) else embedder
    _W = _Worker(conversations, config, emb, get_tokenizer(config.tokenizer))


@contextlib.contextmanager
def _one_thread_per_worker() -> Iterator[None]:
    """Start worker processes with single-threaded BLAS/OpenMP (unless the user set a count).

    The workers already use every core; a BLAS pool per worker only adds
    threads that spin between small matrix products and take CPU from them.
    """
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
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
    if _W is None:  # pragma: no cover - a bug, never user error
        raise RuntimeError("internal error: evaluation worker used before _init_worker")
    return _W


@dataclass(frozen=True)
class _EmbedderFactory:
    """A picklable recipe for a disk-cached sentence-transformers embedder (each worker opens the same cache)."""

    cache_dir: str
    model: str
    device: str

    def __call__(self) -> CachedEmbedder:
        return CachedEmbedder(SentenceTransformerEmbedder(model=self.model, device=self.device), cache_dir=self.cache_dir)


def _history_texts(conv: Conversation) -> list[str]:
    """The texts the manager embeds for the conversation's messages (so they are cached up front)."""
    return [embed_text(u) for u in encode_units(conv.messages, get_tokenizer(len))]


def _proxies(ci: int, messages: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    w = _worker()
    conv = w.conversations[ci]
    if ci not in w.history:
        w.history[ci] = _history_texts(conv)
    info = information_coverage([str(m.get("content") or "") for m in conv.messages], [context_text(messages)])
    # Markers and summary headers are rdmem's own words: context_text drops them, and a marker alone leaves nothing.
    texts = [t for t in (context_text([m]).strip() for m in messages) if t]
    ctx_vecs = w.embedder.embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
    hist_vecs = w.embedder.embed(w.history[ci])
    return {"information_coverage": info, "embedding_coverage": embedding_coverage(hist_vecs, ctx_vecs)}


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


def _run_job(job: tuple[str, int, str, int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """One job and the CPU seconds it took (a measure of cost that other load on the machine does not inflate)."""
    c0 = time.process_time()
    questions, contexts = _run_full(job[1]) if job[0] == FULL else _run_stream(*job[1:])
    return questions, contexts, time.process_time() - c0


def _run_stream(ci: int, policy: str, budget: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One conversation × policy × budget: stream, then (query regime) one context per probe."""
    w = _worker()
    conv, cfg = w.conversations[ci], w.config
    timed = _TimedEmbedder(w.embedder)
    mem = MemoryManager(budget=budget, policy=policy, tokenizer=w.tokenizer, embedder=timed)
    turn_ms = np.zeros(len(conv.messages))
    for k, message in enumerate(conv.messages):
        e0, t0 = timed.seconds, time.perf_counter()
        mem.add(message)
        turn_ms[k] = (time.perf_counter() - t0 - (timed.seconds - e0)) * 1000.0
    questions: list[dict[str, Any]] = []
    contexts: list[dict[str, Any]] = []
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
    if "query" in cfg.regimes:
        for probe in conv.probes:
            e0, t0 = timed.seconds, time.perf_counter()
            ctx = mem.context(query=probe.question)
            ms = (time.perf_counter() - t0 - (timed.seconds - e0)) * 1000.0
            kept = set(ctx.kept_ids)
            rec = _question_record(conv, probe, "query", policy, budget, kept, context_words(ctx.messages), ctx.tokens)
            _with_llm(rec, probe, ctx.messages, cfg.llm)
            questions.append(rec)
            crec = {"conversation": conv.id, "regime": "query", "policy": policy, "budget": budget,
                    "probe": probe.id, "tokens": ctx.tokens, "ms_per_query": ms}
            if cfg.proxies:
                crec.update(_proxies(ci, ctx.messages))
            contexts.append(crec)
    return questions, contexts


def _run_full(ci: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The full history as the context: the right end of every curve (and the LLM's reference)."""
    w = _worker()
    conv, cfg = w.conversations[ci], w.config
    messages = [{k: v for k, v in m.items() if k != "id"} for m in conv.messages]
    tokens = w.tokenizer.messages_tokens(messages)
    present, words = set(conv.ids), context_words(messages)
    questions, contexts = [], []
    llm_fields: dict[str, dict[str, Any]] = {}
    for regime in cfg.regimes:
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
    return questions, contexts


# -- main side -----------------------------------------------------------------


def _oracle_records(
    conversations: Sequence[Conversation], cfg: EvalConfig, tok: Tokenizer
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The oracle's points: streaming (one knapsack per conversation knowing every question) and
    query (one knapsack per question, knowing its evidence)."""
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
        needs_emb = policy in POLICIES and get_policy(policy).needs_embeddings
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
    convs = [c.select(cfg.categories) for c in conversations]
    if not convs:
        raise ValueError("conversations must hold at least one conversation")
    with warnings.catch_warnings():  # the offline copy of an encoding is identical; saying so once per run is noise
        warnings.simplefilter("ignore", RuntimeWarning)
        tok = get_tokenizer(cfg.tokenizer)
    own = embedder is None
    emb: Embedder = cached_embedder(cache_dir) if own else embedder  # type: ignore[assignment]

    # Embed everything once, up front (a warm cache makes this a lookup), so workers never load the model.
    texts = [t for c in convs for t in _history_texts(c)] + [p.question for c in convs for p in c.probes]
    t0 = time.perf_counter()
    if texts:
        emb.embed(texts)
    embed_seconds = time.perf_counter() - t0
    if isinstance(emb, CachedEmbedder):
        emb.save()
    needs_emb = any(get_policy(p).needs_embeddings for p in cfg.policies)
    embed_ms = _calibrate(emb, texts) if (cfg.calibrate_embedding and needs_emb) else math.nan

    jobs: list[tuple[str, int, str, int]] = [
        ("run", ci, p, b) for ci in range(len(convs)) for p in cfg.policies for b in cfg.budgets
    ]
    jobs += [(FULL, ci, FULL, 0) for ci in range(len(convs))]
    # Longest first (large conversations, large budgets), so the last job to finish is a short one.
    jobs.sort(key=lambda j: (-(len(convs[j[1]].messages)) * (j[3] + 500), j))
    questions, contexts = _oracle_records(convs, cfg, tok)
    done = 0
    cpu_seconds = 0.0
    bar = None
    if progress is True:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(jobs), desc="rdmem eval", unit="run", file=sys.stderr, dynamic_ncols=True)
        except ImportError:  # pragma: no cover - tqdm ships with the eval extra
            bar = None

    def tick() -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(1)
        elif callable(progress):
            progress(done, len(jobs))

    workers = min(cfg.workers, len(jobs))
    try:
        if workers <= 1:
            _init_worker(convs, cfg, emb)
            for job in jobs:
                qs, cs, cpu = _run_job(job)
                questions += qs
                contexts += cs
                cpu_seconds += cpu
                tick()
        else:
            shipped = _shippable(emb)
            ctx = multiprocessing.get_context("spawn")
            with _one_thread_per_worker(), ctx.Pool(
                workers, initializer=_init_worker, initargs=(convs, cfg, shipped)
            ) as pool:
                for qs, cs, cpu in pool.imap_unordered(_run_job, jobs):
                    questions += qs
                    contexts += cs
                    cpu_seconds += cpu
                    tick()
    finally:
        global _W
        _W = None  # the in-process worker state holds every conversation: let it go
        if bar is not None:
            bar.close()
    order = {j: i for i, j in enumerate(("streaming", "query"))}
    questions.sort(key=lambda q: (order[q["regime"]], q["policy"], q["budget"] or 0, q["conversation"], q["probe"]))
    rows = _aggregate(cfg, questions, contexts, embed_ms)
    notes = [n for c in convs for n in c.notes]
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
        "notes": notes,
    }
    return EvalResult(cfg, rows, questions, contexts, meta)


def _shippable(emb: Embedder) -> Any:
    """What to send to worker processes: a recipe for a disk-cached MiniLM, else the embedder itself."""
    if (
        isinstance(emb, CachedEmbedder)
        and emb.cache_dir is not None
        and isinstance(emb.inner, SentenceTransformerEmbedder)
    ):
        return _EmbedderFactory(str(emb.cache_dir), emb.inner.model, emb.inner.device)
    try:
        pickle.dumps(emb)
    except Exception as exc:
        raise ValueError(
            f"with workers > 1 the embedder is sent to other processes and must be picklable; "
            f"{type(emb).__name__} is not ({exc}). Use workers=1."
        ) from None
    return emb
