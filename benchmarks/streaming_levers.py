"""Streaming ``rd`` against the offline prior (issue 25, item 2): where the recall goes, lever by lever.

Streams each LoCoMo dev conversation (categories 1-4) through a
``MemoryManager(policy="rd")`` and measures the evidence recall of its working
set after the last message, two ways: pooled over questions (what ``rdmem
eval`` reports) and as the mean of the conversations' means (what
``benchmarks/loco_value_model.py`` reports for the prior). With ``--offline``
it also compacts each whole conversation at once with the same rd policy
(``compact_units`` over every unit, with and without elision markers): the
offline references the streaming figure is held against.

A single budget is a noisy point (one token more or less changes a
compaction, and the path after it): ``--spread`` averages over the budgets
0.90, 0.95, 1.00, 1.05 and 1.10 times each one.

Levers, for the tables in BENCHMARKS "Issue 25, item 2":

- ``--no-markers``: ``MemoryManager(markers=False)`` (the marker-free ceiling);
- ``--merged``: ``MemoryManager(markers="merged")`` (one marker for every omitted run);
- ``--room X``: rd's ``room_value`` for working-set trimming, markers or not (default: the shipped rule);
- ``--marker-text T``: a simulation of a cheaper marker, ``T`` with ``N`` for the count (e.g. ``"[…]"``,
  5 tokens with cl100k's overhead, against 9 for ``[N messages omitted]``); it is a measurement only
  (other parts of rdmem parse the shipped format).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/streaming_levers.py [LOCOMO_JSON] --budgets 1000,2000,4000 \
        [--spread] [--offline] [--no-markers | --merged] [--room X] [--marker-text T]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import rdmem._accounting as accounting  # noqa: E402
import rdmem.policies.rd as rd  # noqa: E402
import rdmem.manager as manager  # noqa: E402
import rdmem.reconstruct as reconstruct  # noqa: E402
from rdmem import MemoryManager  # noqa: E402
from rdmem.compaction import compact_units  # noqa: E402
from rdmem.datasets import Conversation, load_locomo  # noqa: E402
from rdmem.eval import cached_embedder, default_cache_dir  # noqa: E402
from rdmem.policies import get_policy  # noqa: E402

SPREAD = (0.90, 0.95, 1.00, 1.05, 1.10)


def recalls(conv: Conversation, ids: list[str]) -> list[float]:
    have = set(ids)
    return [sum(e in have for e in p.evidence) / len(p.evidence) for p in conv.probes if p.evidence]


def run(convs: list[Conversation], budget: int, markers: bool | str, offline: bool, emb: object,
        low: float | None = None) -> dict[str, list[list[float]]]:
    """Per figure ("stream", and with ``offline`` "offline" / "offline+markers"), per conversation, the recalls."""
    out: dict[str, list[list[float]]] = {}
    cpu = 0.0
    for conv in convs:
        t0 = time.process_time()
        mem = MemoryManager(budget=budget, policy="rd", embedder=emb, markers=markers, low=low)  # type: ignore[arg-type]
        for m in conv.messages:
            mem.add(m)
        cpu += time.process_time() - t0
        out.setdefault("stream", []).append(recalls(conv, mem.working_ids()))
        if offline:
            view = mem._sync()
            for mk, name in ((False, "offline"), (True, "offline+markers")):
                r = compact_units(view.units, budget=budget, policy=get_policy("rd"), tokenizer=view.tokenizer,
                                  embedder=emb, markers=mk, now=len(view.units), doc_freq=(view.df, len(view.units)),
                                  warn=False)  # type: ignore[arg-type]
                out.setdefault(name, []).append(recalls(conv, r.kept_ids))
    out["_cpu"] = [[cpu]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--budgets", default="1000,2000,4000")
    ap.add_argument("--spread", action="store_true", help="average over 0.9-1.1 x each budget")
    ap.add_argument("--offline", action="store_true", help="also the offline references (whole conversation at once)")
    ap.add_argument("--no-markers", action="store_true")
    ap.add_argument("--merged", action="store_true", help='markers="merged"')
    ap.add_argument("--low", type=float, default=None, help="the manager's low watermark (default: rd's)")
    ap.add_argument("--room", type=float, default=None, help="rd's room_value for working-set trimming")
    ap.add_argument("--marker-text", default=None, help="simulate a cheaper marker (N: the count)")
    args = ap.parse_args()
    if args.room is not None:  # with or without markers (the shipped default values room only without)
        room = args.room

        def working(policy: object, *, markers: bool = True) -> object:
            return dataclasses.replace(policy, room_value=room) if isinstance(policy, rd.RDPolicy) else policy

        manager.for_working_set = working  # type: ignore[assignment]
    if args.marker_text is not None:
        text = args.marker_text

        def marker(n: int) -> dict[str, str]:
            return {"role": "user", "content": text.replace("N", str(n))}

        reconstruct.elision_marker = marker  # type: ignore[assignment]
        accounting.elision_marker = marker  # type: ignore[assignment]
    convs = load_locomo(args.path, categories=(1, 2, 3, 4))
    emb = cached_embedder(default_cache_dir())
    for budget in (int(b) for b in args.budgets.split(",")):
        points = [int(budget * f) for f in SPREAD] if args.spread else [budget]
        per: dict[str, list[tuple[float, float]]] = {}
        cpus = []
        for b in points:
            res = run(convs, b, "merged" if args.merged else not args.no_markers, args.offline, emb, args.low)
            cpus.append(res.pop("_cpu")[0][0])
            for name, rows in res.items():
                pooled = float(np.mean([x for r in rows for x in r]))
                per.setdefault(name, []).append((pooled, float(np.mean([np.mean(r) for r in rows]))))
        for name, vals in per.items():
            pts = " ".join(f"{p:.3f}" for p, _ in vals)
            print(f"@{budget} {name:16s} pooled {np.mean([p for p, _ in vals]):.4f} "
                  f"conversation-mean {np.mean([c for _, c in vals]):.4f}  ({pts})", flush=True)
        print(f"@{budget} streaming CPU {' '.join(f'{c:.1f}' for c in cpus)} s", flush=True)


if __name__ == "__main__":
    main()
