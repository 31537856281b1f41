"""How much each query counts in ``rd`` (issue 25, item 4): the Informativeness weight of every LoCoMo dev question
and every user turn (the query a proxy would send), against the whole conversation.

    .venv/bin/python benchmarks/query_weights.py [LOCOMO_JSON]
"""

from __future__ import annotations

import sys
from collections import Counter

from rdmem.datasets import load_locomo
from rdmem.scoring import Informativeness, ScoringContext, query_specificity
from rdmem.tokens import get_tokenizer
from rdmem.units import encode_units


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/locomo/locomo_dev.json"
    weigh, tok = Informativeness(), get_tokenizer("cl100k_base")
    out: dict[str, list[tuple[float, bool, str]]] = {"questions": [], "user turns": []}
    for conv in load_locomo(path, categories=[1, 2, 3, 4]):
        units = encode_units(conv.messages, tok)
        ctx = ScoringContext(units)
        queries = [("questions", p.question) for p in conv.probes if p.evidence]
        queries += [("user turns", m["content"]) for m in conv.messages if m["role"] == "user"]
        for kind, q in queries:
            qctx = ScoringContext(units, query=q)
            qctx.__dict__["_idf_cache"] = ctx._idf_cache  # one session, one IDF table
            out[kind].append((weigh.weight(qctx), query_specificity(q, ctx)[1], q))
    for kind, rows in out.items():
        hist = Counter(round(w, 2) for w, _, _ in rows)
        asks = sum(a for _, a, _ in rows)
        print(f"{kind}: {len(rows)}, {asks} ({asks / len(rows):.1%}) questions or requests; weights: "
              + ", ".join(f"{w:g}: {n}" for w, n in sorted(hist.items())))
    print("questions weighed below 1:", [q for w, _, q in out["questions"] if w < 1])


if __name__ == "__main__":
    main()
