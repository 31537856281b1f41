"""``rdmem compact``, ``rdmem explain`` and ``rdmem policies``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ._common import positive_int, read_messages

__all__ = ["register"]

#: Above this many messages, embedding them is reported on stderr as it goes.
_PROGRESS_FROM = 200


def _embed_with_progress(messages: list[dict[str, Any]], policy: str) -> Any:
    """The default embedder, with the messages' vectors computed first, in chunks, showing progress on
    stderr (a long history takes a while to embed; the rest of the compaction is fast)."""
    from ..embed import get_embedder
    from ..scoring import embed_text
    from ..sessions import needs_embedder
    from ..tokens import get_tokenizer
    from ..units import encode_units

    if len(messages) < _PROGRESS_FROM or not needs_embedder(policy):
        return None
    emb = get_embedder()
    texts = [embed_text(u) for u in encode_units(messages, get_tokenizer(len))]
    tty, t0, step = sys.stderr.isatty(), time.perf_counter(), 256
    for start in range(0, len(texts), step):
        emb.embed(texts[start:start + step])
        done = min(start + step, len(texts))
        if tty:
            print(f"\rrdmem: embedding messages {done:,}/{len(texts):,}", end="", file=sys.stderr, flush=True)
        elif start == 0:
            print(f"rdmem: embedding {len(texts):,} messages...", file=sys.stderr, flush=True)
    print(f"{chr(13) if tty else ''}rdmem: embedded {len(texts):,} messages in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr, flush=True)
    return emb


def _compact(args: argparse.Namespace) -> Any:
    from .._api import compact
    from ..reconstruct import MARKER_MODES

    messages = read_messages(args.file)
    emb = _embed_with_progress(messages, args.policy)
    # compact() warns of each of result.warnings: main() prints each as one line.
    return compact(messages, budget=args.budget, policy=args.policy, query=args.query, tokenizer=args.tokenizer,
                   embedder=emb, markers=MARKER_MODES[args.markers])


def _cmd_compact(args: argparse.Namespace) -> int:
    result = _compact(args)
    json.dump(
        {"messages": result.messages, "tokens": result.tokens, "kept_ids": result.kept_ids,
         "report": [d.to_dict() for d in result.report], "warnings": result.warnings},
        sys.stdout, ensure_ascii=False, indent=None if args.compact_json else 2,
    )
    sys.stdout.write("\n")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    result = _compact(args)
    print(result.explain())
    for w in result.warnings:
        print(f"warning: {w}")
    return 0


def _cmd_policies(args: argparse.Namespace) -> int:
    from ..policies import POLICIES, get_policy

    width = max(len(n) for n in POLICIES)
    for name in sorted(POLICIES):
        print(f"{name:<{width}}  {get_policy(name).description}")
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSON list or JSONL of chat messages, or an object with a \"messages\" list; '-' for stdin")
    p.add_argument("--budget", type=positive_int, required=True, help="token budget (per-message overhead included)")
    p.add_argument("--policy", default="rd", help="policy name (see 'rdmem policies'); default rd")
    p.add_argument("--query", default=None, help="the next question, for query-aware selection")
    p.add_argument("--tokenizer", default="cl100k_base", help="tiktoken encoding, tokenizer.json path; default cl100k_base")
    p.add_argument("--markers", choices=("merged", "runs", "none"), default="merged",
                   help="how left-out messages are shown: one marker for all (merged, the default), one per "
                        "omitted run (runs), or none")


def register(sub: Any) -> None:
    p = sub.add_parser("compact", help="fit a chat history to a token budget (JSON out)")
    _add_common(p)
    p.add_argument("--compact-json", action="store_true", help="print JSON on one line")
    p.set_defaults(func=_cmd_compact)

    p = sub.add_parser("explain", help="why each message was kept, compressed or archived")
    _add_common(p)
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("policies", help="list the policies")
    p.set_defaults(func=_cmd_policies)
