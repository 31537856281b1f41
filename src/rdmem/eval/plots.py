"""The rate-distortion plot: evidence recall (or another metric) against budget, one panel per regime."""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import InvalidInput, MissingDependency
from .runner import FULL, ORACLE, REGIMES, EvalResult

__all__ = ["plot_rd_curve"]


def plot_rd_curve(
    result: EvalResult,
    path: str | Path,
    *,
    metric: str = "evidence_recall",
    category: str = "all",
    dpi: int = 110,
) -> Path:
    """Draw ``metric`` against budget (tokens, log scale): one line per policy with its 95% band,
    the oracle dashed, the full history as a star at its mean size; one panel per regime.

    ``metric`` is a :class:`~rdmem.eval.Row` field with ``_lo``/``_hi`` bounds
    (``evidence_recall``, ``all_evidence``, ``answer_recall``, or the model-measured curves of
    ``rdmem eval --lm``: ``lm_delta_nll``, the distortion, and ``lm_gain_kept``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - the eval extra installs it
        raise MissingDependency("plots need matplotlib: pip install 'rdmem[eval]'") from exc
    lm_metrics = ("lm_delta_nll", "lm_gain_kept")
    if metric not in ("evidence_recall", "all_evidence", "answer_recall") + lm_metrics:
        raise InvalidInput(
            f"metric must be evidence_recall, all_evidence, answer_recall, lm_delta_nll or lm_gain_kept, got {metric!r}"
        )
    regimes = [r for r in REGIMES if any(row.regime == r for row in result.rows)]
    fig, axes = plt.subplots(1, max(len(regimes), 1), figsize=(5.2 * max(len(regimes), 1), 4.2), sharey=True,
                             squeeze=False)
    budgets = list(result.config.budgets)
    label = {"lm_gain_kept": "share of the full history's gain kept (answer NLL)",
             "lm_delta_nll": "distortion: answer NLL − full history's (nats/token)"}.get(metric, metric.replace("_", " "))
    window = (result.meta.get("lm") or {}).get("window")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, regime in zip(axes[0], regimes, strict=False):
        for k, policy in enumerate(list(result.config.policies) + [ORACLE]):
            pts = []
            for b in budgets:
                try:
                    row = result.row(regime, policy, b, category)
                except KeyError:
                    continue
                v = getattr(row, metric)
                if not math.isnan(v):
                    pts.append((b, v, getattr(row, f"{metric}_lo"), getattr(row, f"{metric}_hi")))
            if not pts:
                continue
            xs, ys, lo, hi = zip(*pts, strict=True)
            if policy == ORACLE:
                ax.plot(xs, ys, "k--", lw=1.4, label="oracle")
            else:
                color = colors[k % len(colors)]
                ax.plot(xs, ys, "o-", color=color, lw=1.6, ms=4, label=policy)
                ax.fill_between(xs, lo, hi, color=color, alpha=0.12, lw=0)
        try:
            full = result.row(regime, FULL, None, category)
            if not math.isnan(getattr(full, metric)):
                # The model reads the full history only as far as its window holds.
                size = min(full.tokens_mean, window) if metric in lm_metrics and window else full.tokens_mean
                what = "as the model reads it, " if size < full.tokens_mean else ""
                ax.plot([size], [getattr(full, metric)], "k*", ms=11, label=f"full history ({what}{size:,.0f} tok)")
        except KeyError:
            pass
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets)
        ax.set_xticklabels([f"{b:,}" for b in budgets], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("budget (tokens)")
        ax.set_title(f"{regime} regime")
        if metric not in lm_metrics:  # a share of the gain can leave [0, 1]; ΔNLL has no bound
            ax.set_ylim(0, 1.02)
        else:
            ax.axhline(0.0, color="0.6", lw=0.8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(label)
    axes[0][0].legend(fontsize=8, loc="upper left")  # the streaming panel has room there
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
