"""Side by side on one instrument (issue 19): text-level policies and KV-cache presses, same questions, same model.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/lm_side_by_side.py [PATH] [--sample 30] [--context 1500]
        [--keep 0.1,0.25,0.5] [--device cpu]        # about 20 minutes on 2 cores with the defaults

For each sampled LoCoMo question (stratified by category, evidence and a gold
answer), the context is an excerpt of its conversation: consecutive turns,
about ``--context`` of the model's tokens, holding every evidence turn at a
random place (so keeping only the newest turns is not a free win). Each
method then keeps 10/25/50% of the excerpt's tokens, and the instrument is
the model's NLL per token of the gold answer after the question (SmolLM2-
135M-Instruct by default), reported with the share of the full excerpt's
gain kept, ``(NLL_none − NLL_method) / (NLL_none − NLL_full)``, and 95%
paired bootstrap intervals over questions.

Text level (the model reads a shorter context; ``rdmem.compact`` with the
model's own tokenizer, one token per message for the line break): ``window``
(the newest turns), ``rd`` (no query), ``rd+query`` (the question known).
KV level (the model reads the whole excerpt once, then its cache keeps that
many positions per layer and head; ``rdmem.lm.press_nll``): StreamingLLM,
H2O, SnapKV (sees the question at the end of its window), and the rdmem press
(rd's message values, no query). Time: milliseconds per question for the
selection (text) or the scored prefill shared by the presses, and the scoring.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rdmem import compact  # noqa: E402
from rdmem.datasets import load_locomo  # noqa: E402
from rdmem.eval.distortion import LMEvalConfig, lm_plan  # noqa: E402
from rdmem.eval.metrics import gain_kept_ci, mean_ci  # noqa: E402
from rdmem.lm import LanguageModel, press_nll, question_target  # noqa: E402
from rdmem.lm.presses import PRESSES, message_values  # noqa: E402

TEXT = ("window", "rd", "rd+query")


def excerpt(conv, probe, lm, size: int, rng: np.random.Generator):
    """Consecutive turns of about ``size`` model tokens holding every evidence turn, at a random place."""
    msgs = conv.messages
    pos = {m["id"]: i for i, m in enumerate(msgs)}
    ev = sorted(pos[e] for e in probe.evidence if e in pos)
    if not ev:
        return None
    enc = lm.encode(msgs)
    lens = np.array([b - a for a, b in enc.spans])
    lo, hi = ev[0], ev[-1]
    if lens[lo : hi + 1].sum() > size:
        return None
    # The end: anywhere from the last evidence turn on, as long as the first one still fits.
    ends = [e for e in range(hi, len(msgs)) if lens[lo : e + 1].sum() <= size]
    end = int(rng.choice(ends))
    start = end
    while start > 0 and lens[start - 1 : end + 1].sum() <= size:
        start -= 1
    return msgs[start : end + 1]


def run(args: argparse.Namespace) -> dict:
    convs = load_locomo(args.path)
    lm = LanguageModel(device=args.device)
    hf = lm.tokenizer

    def tokenizer(text: str) -> int:  # budgets in the model's own tokens
        return len(hf(text, add_special_tokens=False)["input_ids"])

    plans = lm_plan(convs, LMEvalConfig(sample=args.sample * 2, turns=0), args.seed)  # spares: some do not fit
    rng = np.random.default_rng(args.seed)
    records = []
    for conv, plan in zip(convs, plans, strict=True):
        for probe in (p for p in conv.probes if p.id in plan.probes):
            if len(records) >= args.sample:
                break
            ctx = excerpt(conv, probe, lm, args.context, rng)
            if ctx is None:
                continue
            records.append(one_question(lm, tokenizer, ctx, probe, args.keep))
            r = records[-1]
            print(f"[{len(records)}/{args.sample}] {probe.id} n={r['n']} full={r['full']:.2f} none={r['none']:.2f} "
                  f"rd+q@25%={r['nll']['rd+query'][1]:.2f} rdmem@25%={r['nll']['rdmem'][1]:.2f}", file=sys.stderr)
    return {"records": records, "keep": list(args.keep), "model": lm.name, "device": str(lm.torch_model.device),
            "context": args.context, "seed": args.seed}


def one_question(lm, tokenizer, ctx, probe, keep) -> dict:
    target = question_target(probe.question, probe.answer)
    n = len(lm.encode(ctx))
    out = {"probe": probe.id, "category": probe.category, "n": n, "nll": {}, "tokens": {}, "ms": {}}
    out["full"] = lm.nll(ctx, [target])[0]
    out["none"] = lm.nll([], [target])[0]
    for method in TEXT:
        policy, query = ("window", None) if method == "window" else ("rd", probe.question if "query" in method else None)
        nlls, toks, ms = [], [], []
        for k in keep:
            t0 = time.perf_counter()
            res = compact(ctx, budget=max(1, round(k * n)), policy=policy, query=query, tokenizer=tokenizer,
                          message_overhead=1)
            ms.append((time.perf_counter() - t0) * 1000)
            toks.append(len(lm.encode(res.messages)))
            nlls.append(lm.nll(res.messages, [target])[0])
        out["nll"][method], out["tokens"][method], out["ms"][method] = nlls, toks, ms
    t0 = time.perf_counter()
    values = message_values(ctx)
    scores = press_nll(lm, ctx, target, keep=keep, values=values)
    ms = (time.perf_counter() - t0) * 1000
    for p in PRESSES:
        out["nll"][p] = [scores.nll[(p, k)] for k in keep]
        out["tokens"][p] = [scores.kept[(p, k)] for k in keep]
        out["ms"][p] = [ms / len(PRESSES)] * len(keep)
    out["full_through_cache"] = scores.full
    return out


def _paired(a: np.ndarray, b: np.ndarray, seed: int, n_boot: int) -> str:
    m, lo, hi = mean_ci(a - b, seed=seed, n_resamples=n_boot)
    return f"{m:+.3f} [{lo:+.2f}, {hi:+.2f}]"


def table(result: dict, n_boot: int = 2000) -> str:
    """Mean NLL, ΔNLL against the full excerpt (paired), gain kept, tokens and time per method and share;
    then paired differences for the issue's goals; then the questions whose answer the excerpt helps."""
    recs, keep = result["records"], result["keep"]
    none = np.array([r["none"] for r in recs])
    full = np.array([r["full"] for r in recs])
    nll = {m: np.array([[r["nll"][m][j] for r in recs] for j in range(len(keep))]) for m in TEXT + tuple(PRESSES)}
    lines = [
        f"{len(recs)} LoCoMo questions, excerpts of ~{result['context']} tokens (mean {np.mean([r['n'] for r in recs]):.0f}), "
        f"model {result['model']} on {result['device']}",
        f"answer NLL per token: full excerpt {full.mean():.3f}, no context {none.mean():.3f} "
        f"(the excerpt helps {int((none - full >= 0.5).sum())} of {len(recs)} questions by >= 0.5 nats)",
        "",
        "Mean answer NLL (nats/token) | ΔNLL against the full excerpt, paired 95% CI | gain kept [95% CI] | "
        "tokens kept | ms per question",
        "",
        "| method | " + " | ".join(f"{int(k * 100)}%" for k in keep) + " |",
        "|---" * (1 + len(keep)) + "|",
    ]
    for m in nll:
        cells = []
        for j, _ in enumerate(keep):
            v = nll[m][j]
            g, lo, hi = gain_kept_ci(none, v, full, seed=j, n_resamples=n_boot)
            toks = np.mean([r["tokens"][m][j] for r in recs])
            ms = np.mean([r["ms"][m][j] for r in recs])
            cells.append(f"{v.mean():.3f} \\| {_paired(v, full, j, n_boot)} \\| {g:.2f} [{lo:.2f}, {hi:.2f}] \\| "
                         f"{toks:.0f} \\| {ms:.0f}")
        lines.append(f"| {m} ({'text' if m in TEXT else 'KV'}) | " + " | ".join(cells) + " |")
    lines += ["", "Paired differences of answer NLL (negative: the first is better), 95% CI:", "",
              "| comparison | " + " | ".join(f"{int(k * 100)}%" for k in keep) + " |", "|---" * (1 + len(keep)) + "|"]
    pairs = [("rdmem", p) for p in ("streaming_llm", "h2o", "snapkv")] + [("rd+query", p) for p in PRESSES]
    pairs += [("rd", "rdmem")]
    for a, b in pairs:
        lines.append(f"| {a} − {b} | " + " | ".join(_paired(nll[a][j], nll[b][j], 7 + j, n_boot)
                                                    for j in range(len(keep))) + " |")
    helped = none - full >= 0.5
    if helped.sum() >= 5:
        lines += ["", f"The {int(helped.sum())} questions the excerpt helps by >= 0.5 nats: gain kept [95% CI]", "",
                  "| method | " + " | ".join(f"{int(k * 100)}%" for k in keep) + " |", "|---" * (1 + len(keep)) + "|"]
        for m in nll:
            cells = []
            for j in range(len(keep)):
                g, lo, hi = gain_kept_ci(none[helped], nll[m][j][helped], full[helped], seed=j, n_resamples=n_boot)
                cells.append(f"{g:.2f} [{lo:.2f}, {hi:.2f}]")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merged(paths: list[str]) -> dict:
    """Several runs' records as one (e.g. two seeds), with the first run's settings."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    seen, records = set(), []
    for run in runs:
        for r in run["records"]:
            if r["probe"] not in seen:
                seen.add(r["probe"])
                records.append(r)
    return {**runs[0], "records": records}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo_dev.json")
    ap.add_argument("--sample", type=int, default=30)
    ap.add_argument("--context", type=int, default=1500, help="excerpt size in the model's tokens")
    ap.add_argument("--keep", type=lambda s: tuple(float(x) for x in s.split(",")), default=(0.1, 0.25, 0.5))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/lm_side_by_side.json")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the tables of saved runs (merged), run nothing")
    args = ap.parse_args()
    if args.report:
        print(table(merged(args.report)))
        return
    t0 = time.perf_counter()
    result = run(args)
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(table(result))
    print(f"\nwall time {result['wall_seconds']} s; records in {args.out}")


if __name__ == "__main__":
    main()
