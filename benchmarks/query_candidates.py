"""What the query regime's knapsack gets to choose from (issue 25, item 3), and speaker-conditioned retrieval.

For each LoCoMo dev conversation and budget, a ``MemoryManager`` (``rd``) is
fed every message; then for each question (categories 1-4): the share of its
evidence in the working set, among the candidates ``context(query)`` ranks
(working set + the store's ``archive_candidates`` best hybrid hits; also with
twice as many hits), and in the context it returns. ``--speaker`` changes how
the archived candidates are chosen (the same search, ``2 x archive_candidates``
deep, when the question names a speaker of the session):

  none     the store's best ``archive_candidates`` hits (what rdmem does)
  replace  the named speaker's hits first, then the others, ``archive_candidates`` in all
  widen    the best ``archive_candidates`` hits plus the named speaker's hits below them (at most half as many)

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/query_candidates.py [--data PATH] [--speaker none|replace|widen]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore")

from rdmem import MemoryManager  # noqa: E402
from rdmem.datasets import load_locomo  # noqa: E402
from rdmem.eval.config import cached_embedder  # noqa: E402
from rdmem.scoring.value_features import _speaker_of, query_entities  # noqa: E402
from rdmem.tokens import get_tokenizer  # noqa: E402

BUDGETS = (1000, 2000, 4000)
CATS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_ARGS: argparse.Namespace | None = None


def _archived(mem: MemoryManager, query: str, how: str) -> tuple[list[str], dict[str, int]]:
    """The archived ids ``context(query)`` would rank under ``how``, and every archived id's search rank."""
    view = mem._sync()
    k = mem.archive_candidates
    qvec = mem._embedder.embed([query])[0]
    # The store fuses its lexical and dense rankings cut at k, so each depth is its own search.
    top, deep = ([i for i, _ in view.store.search(mem.session, query, qvec, k=d, tier="archive")] for d in (k, 2 * k))
    rank = {i: r for r, i in enumerate(deep)}
    ents = query_entities(query)
    named = {i for i in deep if ents and _speaker_of(view.by_id[i]) in ents}
    if how == "replace" and named:
        return ([i for i in deep if i in named] + [i for i in deep if i not in named])[:k], rank
    if how == "widen":
        return top + [i for i in deep if i in named and i not in set(top)][: k // 2], rank
    return top, rank


def _context(mem: MemoryManager, query: str, hits: list[str]):  # type: ignore[no-untyped-def]
    """``mem.context(query)`` with ``hits`` as the archived candidates (the manager's own steps otherwise)."""
    view = mem._sync()
    extra = {view.by_id[i].index for i in hits if view.tier[i] == "archive"}
    cands = sorted(view.working_units() + [view.units[j] for j in extra], key=lambda u: u.index)
    cands = view.with_turn_in_progress(view.whole_groups(cands))
    return mem._compact(cands, mem.budget, mem._learning.policy(), query, warn=False)


def _job(job: tuple[int, int]) -> list[dict]:
    ci, budget = job
    assert _ARGS is not None
    conv = [c.select([1, 2, 3, 4]) for c in load_locomo(_ARGS.data)][ci]
    mem = MemoryManager(budget=budget, policy="rd", tokenizer=get_tokenizer("cl100k_base"), embedder=cached_embedder())
    for m in conv.messages:  # one by one, as rdmem eval streams them (extend() would compact once)
        mem.add(m)
    working = set(mem.working_ids())
    out = []
    for p in conv.probes:
        if not p.evidence:
            continue
        hits, rank = _archived(mem, p.question, _ARGS.speaker)
        t0 = time.perf_counter()
        kept = set(_context(mem, p.question, hits).kept_ids)
        ms = (time.perf_counter() - t0) * 1000.0
        ev, chosen = p.evidence, set(hits)
        out.append({
            "budget": budget, "category": p.category, "ms": ms,
            "working": np.mean([e in working for e in ev]),
            "candidates": np.mean([e in working or e in chosen for e in ev]),
            "candidates_2k": np.mean([e in working or e in rank for e in ev]),
            "recall": np.mean([e in kept for e in ev]),
        })
    return out


def _init(args: argparse.Namespace) -> None:
    global _ARGS
    _ARGS = args


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--speaker", choices=("none", "replace", "widen"), default="none")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    n = len(load_locomo(args.data))
    jobs = [(ci, b) for ci in range(n) for b in BUDGETS]
    t0 = time.time()
    os.environ.update({v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    with multiprocessing.get_context("spawn").Pool(args.workers, initializer=_init, initargs=(args,)) as pool:
        recs = [r for rs in pool.map(_job, jobs) for r in rs]
    print(f"LoCoMo dev, rd, archived candidates: {args.speaker} ({time.time() - t0:.0f} s; "
          f"{np.mean([r['ms'] for r in recs]):.1f} ms per context on average)")
    for key, what in (("working", "evidence in the working set"), ("candidates", "evidence among the candidates"),
                      ("candidates_2k", "evidence among the candidates with twice as many hits"),
                      ("recall", "evidence recall of the context")):
        print(what)
        for b in BUDGETS:
            rs = [r for r in recs if r["budget"] == b]
            per = "  ".join(f"{CATS[c]} {np.mean([r[key] for r in rs if r['category'] == c]):.3f}" for c in CATS)
            print(f"  {b:>5}: all {np.mean([r[key] for r in rs]):.3f}  {per}")


if __name__ == "__main__":
    main()
