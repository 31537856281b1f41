"""Model-measured distortion (``rdmem eval --lm``): what a compaction costs the model, in its own terms.

For a stratified sample of questions, the gold answer's NLL per token given
each policy's rendered context, against the full history (as much as the
model's window holds, newest first) and against no context at all. Reported
per policy and budget: the NLL, ΔNLL against the full history, and the share
of the full history's gain the policy keeps, ``(NLL_none − NLL_policy) /
(NLL_none − NLL_full)``, with paired bootstrap intervals over questions. And
the seed's coherence metric (§5.5), label-free: at sampled points of each
conversation, the NLL of the next real turn given the streaming context.

The jobs (``_jobs``) capture the contexts for the sampled questions and
points; :func:`score_items` runs the model once, in the main process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..datasets import Conversation
from ..errors import InvalidInput
from ..lm.model import valid_device
from .defaults import FULL
from .metrics import gain_kept_ci, mean_ci

__all__ = ["LMEvalConfig", "LMPlan", "lm_plan", "load_lm", "score_items", "lm_stats", "LM_FIELDS"]

#: The Row fields this module fills.
LM_FIELDS = (
    "lm_questions", "lm_nll", "lm_nll_lo", "lm_nll_hi", "lm_delta_nll", "lm_delta_nll_lo", "lm_delta_nll_hi",
    "lm_gain_kept", "lm_gain_kept_lo", "lm_gain_kept_hi", "lm_coherence_nll", "lm_coherence_delta",
    "lm_coherence_delta_lo", "lm_coherence_delta_hi",
)


@dataclass(frozen=True)
class LMEvalConfig:
    """How the language model takes part in an evaluation.

    Parameters
    ----------
    model:
        A Hugging Face model id or directory (``None``: SmolLM2-135M-Instruct, packaged).
    sample:
        Questions to score (with evidence and a gold answer), stratified by
        category and conversation; ``None`` scores every one (on a GPU).
    turns:
        Points per run at which the coherence metric scores the next real turn (0: off).
    device:
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``.
    max_tokens:
        The model's window for this run (default: the model's own); the full
        history is cut to it, newest first, and so is any longer context.
    """

    model: str | None = None
    sample: int | None = 24
    turns: int = 12
    device: str = "cpu"
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.sample is not None and (isinstance(self.sample, bool) or not isinstance(self.sample, int)
                                        or self.sample < 1):
            raise InvalidInput(f"lm sample must be an int >= 1 or None (every question), got {self.sample!r}")
        if isinstance(self.turns, bool) or not isinstance(self.turns, int) or self.turns < 0:
            raise InvalidInput(f"lm turns must be an int >= 0, got {self.turns!r}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 256):
            raise InvalidInput(f"lm max_tokens must be an int >= 256 or None, got {self.max_tokens!r}")
        if not valid_device(self.device):
            raise InvalidInput(f"lm device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {self.device!r}")

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "sample": self.sample, "turns": self.turns, "device": self.device,
                "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class LMPlan:
    """One conversation's share of the sample: the probes to score and the coherence cut points (messages
    seen before the turn that is scored)."""

    probes: frozenset[str]
    cuts: tuple[int, ...]


def lm_plan(convs: Sequence[Conversation], cfg: LMEvalConfig, seed: int) -> list[LMPlan]:
    """The sample, drawn once per run (``seed``): categories take turns, and within one the conversations."""
    rng = np.random.default_rng(seed)
    by_cat: dict[Any, list[tuple[int, int, str]]] = {}
    for ci, conv in enumerate(convs):
        # Not adversarial questions (LoCoMo category 5): their "answer" is the misleading one.
        usable = [p for p in conv.probes if p.evidence and p.answer and p.answer.strip() and p.category != 5]
        for rank, k in enumerate(rng.permutation(len(usable))):
            by_cat.setdefault(usable[k].category, []).append((rank, ci, usable[k].id))
    queues = [sorted(v) for _, v in sorted(by_cat.items(), key=lambda kv: str(kv[0]))]
    chosen: dict[int, set[str]] = {}
    limit = cfg.sample if cfg.sample is not None else sum(len(q) for q in queues)
    taken = 0
    while taken < limit and any(queues):
        for q in queues:
            if q and taken < limit:
                _, ci, pid = q.pop(0)
                chosen.setdefault(ci, set()).add(pid)
                taken += 1
    per_conv = [cfg.turns // len(convs) + (1 if i < cfg.turns % len(convs) else 0) for i in range(len(convs))]
    plans = []
    for ci, conv in enumerate(convs):
        n, k = len(conv.messages), per_conv[ci]
        cuts = sorted({int(t) for t in np.linspace(n // 2, n - 1, k).round()}) if k and n >= 2 else []
        plans.append(LMPlan(frozenset(chosen.get(ci, ())), tuple(t for t in cuts if 0 < t < n)))
    return plans


def load_lm(cfg: LMEvalConfig, cache_dir: Any = None) -> Any:
    """The model, loaded now: a wrong name or device fails before the jobs, not after them."""
    from ..lm.model import LanguageModel, check_available

    check_available(cfg.model, cfg.device)
    lm = LanguageModel(cfg.model, device=cfg.device, max_tokens=cfg.max_tokens, cache_dir=cache_dir)
    lm.torch_model  # noqa: B018 - load
    return lm


def score_items(
    lm: Any, items: list[dict[str, Any]], questions: list[dict[str, Any]], contexts: list[dict[str, Any]],
    convs: Sequence[Conversation], plans: Sequence[LMPlan], *, progress: bool = False,
) -> dict[str, Any]:
    """Score every captured context with the model; the NLLs go into the question and context records.
    A target longer than the model's window is skipped and counted (``targets_too_long``)."""
    from ..lm.model import question_target, turn_target

    t0 = time.perf_counter()
    probes = {(c.id, p.id): p for c in convs for p in c.probes}
    conv_by_id = {c.id: c for c in convs}
    qa: dict[tuple[Any, ...], float] = {}
    turns: dict[tuple[Any, ...], float] = {}
    truncated = too_long = 0

    def run(messages: Sequence[Mapping[str, Any]], targets: list[Any]) -> list[float]:
        nonlocal truncated, too_long
        sizes = [sum(map(len, lm.target_ids(t))) for t in targets]
        room = lm.window - len(lm.encode([])) - 8
        ok = [i for i, n in enumerate(sizes) if n <= room]
        too_long += len(targets) - len(ok)
        if not ok:
            return [math.nan] * len(targets)
        fitted = lm.fit(messages, reserve=max(sizes[i] for i in ok) + 8)
        truncated += len(fitted) < len(messages)
        got = dict(zip(ok, lm.nll(fitted, [targets[i] for i in ok]), strict=True))
        return [got.get(i, math.nan) for i in range(len(targets))]

    bar = None
    if progress:
        try:
            import sys

            from tqdm import tqdm

            bar = tqdm(total=len(items), desc="rdmem eval: language model", unit="context", file=sys.stderr,
                       dynamic_ncols=True)
        except ImportError:  # pragma: no cover - tqdm ships with the eval extra
            bar = None
    for it in items:
        if bar is not None:
            bar.update(1)
        conv = conv_by_id[it["conversation"]]
        if it["kind"] == "qa":
            ps = [probes[(conv.id, pid)] for pid in it["probes"]]
            for p, v in zip(ps, run(it["messages"], [question_target(p.question, p.answer) for p in ps]), strict=True):
                qa[(it["regime"], it["policy"], it["budget"], conv.id, p.id)] = v
        else:
            cut = it["cut"]
            turns[(it["policy"], it["budget"], conv.id, cut)] = run(it["messages"], [turn_target(conv.messages[cut])])[0]
    if bar is not None:
        bar.close()
    for conv, plan in zip(convs, plans, strict=True):
        for pid in plan.probes:
            p = probes[(conv.id, pid)]
            qa[("none", conv.id, pid)] = run([], [question_target(p.question, p.answer)])[0]
    _attach(questions, contexts, qa, turns)
    nones = [v for k, v in qa.items() if k[0] == "none" and not math.isnan(v)]
    return {"model": lm.name, "device": str(lm.torch_model.device), "window": lm.window,
            "questions": len(nones), "turns": sum(len(p.cuts) for p in plans),
            "nll_none": float(np.mean(nones)) if nones else None, "contexts_cut_to_window": truncated,
            "targets_too_long": too_long, "seconds": round(time.perf_counter() - t0, 1)}


def _attach(questions: list[dict[str, Any]], contexts: list[dict[str, Any]], qa: dict[tuple[Any, ...], float],
            turns: dict[tuple[Any, ...], float]) -> None:
    for q in questions:
        cid, pid = q["conversation"], q["probe"]
        key = (q["regime"], q["policy"], q["budget"], cid, pid)
        if key in qa and not math.isnan(qa[key]):
            q["lm_nll"] = qa[key]
            q["lm_nll_full"] = qa.get((q["regime"], FULL, None, cid, pid), math.nan)
            q["lm_nll_none"] = qa.get(("none", cid, pid), math.nan)
    for c in contexts:
        if c["regime"] != "streaming":
            continue
        got = sorted((k[3], v) for k, v in turns.items() if k[:3] == (c["policy"], c["budget"], c["conversation"]))
        pairs = [(v, turns.get((FULL, None, c["conversation"], cut), math.nan)) for cut, v in got]
        pairs = [(v, f) for v, f in pairs if not (math.isnan(v) or math.isnan(f))]
        if pairs:
            c["lm_coherence"] = [v for v, _ in pairs]
            c["lm_coherence_full"] = [f for _, f in pairs]


def lm_stats(group: Sequence[Mapping[str, Any]], cs: Sequence[Mapping[str, Any]], seed: int,
             n_bootstrap: int) -> dict[str, Any]:
    """The LM fields of one row: over the group's scored questions and (streaming) its contexts' turns."""
    scored = [q for q in group if q.get("lm_nll") is not None]
    out: dict[str, Any] = {}
    if scored:
        nll = np.array([q["lm_nll"] for q in scored])
        full = np.array([q["lm_nll_full"] for q in scored])
        none = np.array([q["lm_nll_none"] for q in scored])
        m, lo, hi = mean_ci(nll, seed=seed, n_resamples=n_bootstrap)
        d, dlo, dhi = mean_ci(nll - full, seed=seed + 1, n_resamples=n_bootstrap)
        g, glo, ghi = gain_kept_ci(none, nll, full, seed=seed + 2, n_resamples=n_bootstrap)
        out.update(lm_questions=len(scored), lm_nll=m, lm_nll_lo=lo, lm_nll_hi=hi, lm_delta_nll=d,
                   lm_delta_nll_lo=dlo, lm_delta_nll_hi=dhi, lm_gain_kept=g, lm_gain_kept_lo=glo, lm_gain_kept_hi=ghi)
    pol = [v for c in cs for v in c.get("lm_coherence", ())]
    ref = [v for c in cs for v in c.get("lm_coherence_full", ())]
    if pol:
        delta = np.array(pol) - np.array(ref)
        _, clo, chi = mean_ci(delta, seed=seed + 3, n_resamples=n_bootstrap)
        out.update(lm_coherence_nll=float(np.mean(pol)), lm_coherence_delta=float(delta.mean()),
                   lm_coherence_delta_lo=clo, lm_coherence_delta_hi=chi)
    return out
