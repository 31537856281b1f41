"""``rdmem train``: fit the value models on labelled conversations."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ._common import CLIError

__all__ = ["register"]


def _cmd_train(args: argparse.Namespace) -> int:
    from ..embed import CachedEmbedder, MiniLMEmbedder
    from ..datasets import load_jsonl, load_locomo
    from ..tokens import get_tokenizer
    from ..learn.train import fit_models, save_models

    if not os.path.isfile(args.path):
        raise CLIError(f"{args.path}: no such file")
    convs = load_locomo(args.path) if args.format == "locomo" else load_jsonl(args.path)
    if args.format == "locomo":
        convs = [c.select([1, 2, 3, 4]) for c in convs]
    emb = CachedEmbedder(MiniLMEmbedder(), cache_dir=args.cache_dir)
    models = fit_models(convs, get_tokenizer(args.tokenizer), emb, l2=args.l2)
    emb.save()
    save_models(models, args.out)
    print(f"wrote {args.out}: value models fitted on {len(convs)} conversations")
    print(f"use it with: RDPolicy(value=LearnedValue.from_file({args.out!r}))  (from rdmem import RDPolicy, LearnedValue)")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="fit the value models on labelled conversations (LoCoMo or JSONL probes)")
    p.add_argument("path", help="LoCoMo JSON file, or JSONL conversations with probes")
    p.add_argument("--format", choices=("locomo", "jsonl"), default="locomo")
    p.add_argument("--out", required=True, help="where to write the models (JSON)")
    p.add_argument("--l2", type=float, default=1.0, help="L2 regularisation strength (default 1.0)")
    p.add_argument("--tokenizer", default="cl100k_base")
    p.add_argument(
        "--cache-dir",
        default=os.environ.get("RDMEM_CACHE_DIR", os.path.expanduser("~/.cache/rdmem")),
        help="embedding cache directory (delete it to clear the cache)",
    )
    p.set_defaults(func=_cmd_train)

