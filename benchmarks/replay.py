"""Replay a fixed set of compactions and compare their selections with a recorded run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/replay.py --record /tmp/replay-before.json
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/replay.py --check /tmp/replay-before.json

A behaviour-preserving change (a refactor) must give the same selections:
for every call, the rendered messages, the kept ids, each message's decision,
rung, sent tokens, score, score breakdown and reason, and the warnings. The calls, deterministic and offline:

- ``compact()`` on slices of the LoCoMo dev conversations (the first 240 and
  the last 240 turns of each), every policy, budgets 500 and 2,000, without
  and with a query (the conversation's first question);
- ``compact()`` on the test suite's agent history (tool calls, a directive,
  a correction), every policy, budgets 40, 90 and 200, without and with a
  query;
- a ``MemoryManager`` streaming the first 300 turns of two conversations
  (every policy, budget 1,000): the working set after each 50 turns, then
  ``context(query)`` for five questions.

Vectors are the real MiniLM's, cached under ``.rdmem-cache/replay`` (the
first run computes them: about a minute on 2 cores). The output file holds
one digest per call, so it is small; ``--check`` prints the calls that differ.

``--markers runs`` passes ``markers=True`` (a marker per omitted run, the default before 2026-12-05)
to every call: against a recording of an older tree it shows the rest of a change.

``--embedding deferred`` runs the managers as ``rdmem serve`` does: messages
stored without vectors, an ``EmbeddingWorker`` landing them and
``maintain()`` trimming the working set then (after each message, so they
have landed before the next step); checked against a run recorded inline,
the selections must be the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = Path(os.environ.get("RDMEM_LOCOMO", ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"))
sys.path.insert(0, str(ROOT))


def _digest(result) -> str:
    report = [(d.id, d.decision, getattr(d.rung, "value", d.rung), d.sent_tokens, round(d.score, 9), d.reason,
               sorted((k, round(v, 9)) for k, v in d.breakdown.items())) for d in result.report]
    blob = json.dumps([result.messages, result.kept_ids, report, list(result.warnings)], sort_keys=True)
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()


def calls(embedder, embedding: str = "inline", markers: str = "default"):
    """``(name, thunk)`` pairs; each thunk runs one call and returns its digest."""
    mk = {"markers": True} if markers == "runs" else {}
    from rdmem import MemoryManager, compact
    from rdmem.testing import agent_history  # the test suite's agent conversation
    from rdmem.datasets import load_locomo
    from rdmem.policies import POLICIES

    policies = sorted(POLICIES)
    convs = load_locomo(LOCOMO)
    out = []
    for conv in convs:
        question = conv.probes[0].question
        for part, msgs in (("head", conv.messages[:240]), ("tail", conv.messages[-240:])):
            for policy in policies:
                for budget in (500, 2000):
                    for query in (None, question):
                        name = f"compact/{conv.id}/{part}/{policy}/{budget}/{'q' if query else '-'}"
                        out.append((name, lambda m=msgs, p=policy, b=budget, q=query: _digest(
                            compact(list(m), budget=b, policy=p, query=q, embedder=embedder, **mk))))
    for policy in policies:
        for budget in (40, 90, 200):
            for query in (None, "Which restaurants are safe for my allergy?"):
                name = f"compact/agent/{policy}/{budget}/{'q' if query else '-'}"
                out.append((name, lambda p=policy, b=budget, q=query: _digest(
                    compact(agent_history(), budget=b, policy=p, query=q, embedder=embedder, **mk))))
    for conv in convs[:2]:
        for policy in policies:
            def stream(conv=conv, policy=policy) -> str:
                kw = {"embedding": "deferred", **mk} if embedding == "deferred" else dict(mk)
                mem = MemoryManager(budget=1000, policy=policy, embedder=embedder, **kw)
                worker = None
                if embedding == "deferred":
                    from rdmem import EmbeddingWorker

                    worker = EmbeddingWorker(mem.store, embedder)
                seen = []
                for n, m in enumerate(conv.messages[:300], 1):
                    mem.add(m)
                    if worker is not None:
                        worker.drain()
                        mem.maintain()
                    if n % 50 == 0:
                        seen.append(mem.working_ids())
                for probe in conv.probes[:5]:
                    seen.append(_digest(mem.context(probe.question)))
                return hashlib.blake2b(json.dumps(seen).encode(), digest_size=12).hexdigest()

            out.append((f"manager/{conv.id}/{policy}", stream))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="FILE", help="run every call and write the digests to FILE")
    mode.add_argument("--check", metavar="FILE", help="run every call and compare with FILE")
    ap.add_argument("--only", default="", help="run only the calls whose name contains this")
    ap.add_argument("--embedding", choices=("inline", "deferred"), default="inline",
                    help="how the managers embed (deferred: stored first, a worker lands the vectors)")
    ap.add_argument("--markers", choices=("default", "runs"), default="default",
                    help="runs: markers=True (a marker per omitted run) in every call")
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    from rdmem.embed import CachedEmbedder, SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder(), cache_dir=ROOT / ".rdmem-cache" / "replay")
    todo = [(n, f) for n, f in calls(embedder, args.embedding, args.markers) if args.only in n]
    t0 = time.perf_counter()
    got = {}
    for name, fn in todo:
        got[name] = fn()
    embedder.save()
    wall = time.perf_counter() - t0
    if args.record:
        Path(args.record).write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
        print(f"recorded {len(got)} calls to {args.record} ({wall:.0f} s)")
        return 0
    want = json.loads(Path(args.check).read_text())
    differ = sorted(n for n in got if n in want and want[n] != got[n])
    missing = sorted(n for n in got if n not in want)
    for n in differ:
        print(f"DIFFERS  {n}")
    for n in missing:
        print(f"NEW      {n}")
    print(f"{len(got) - len(differ) - len(missing)} of {len(got)} calls give the same selections, "
          f"{len(differ)} differ, {len(missing)} not recorded ({wall:.0f} s)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
