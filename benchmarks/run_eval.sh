#!/usr/bin/env bash
# The LoCoMo dev sweep recorded in BENCHMARKS.md ("Evaluation (issue 3)"):
# 6 conversations, budgets 500-8000 tokens, policies window, seed, importance, summary_buffer, rd,
# both regimes, question categories 1-4, plus the oracle and the full history.
#
#   bash benchmarks/run_eval.sh [LOCOMO_JSON] [OUT_DIR]      (or: make eval)
#
# Everything goes to OUT_DIR (default eval-out/locomo_dev, git-ignored): a run never changes a tracked
# file. With RECORD=1 (make eval-record) the small files (results.md/.csv/.json, rd_curve.png) are
# also copied to benchmarks/results/locomo_dev/, the figures BENCHMARKS.md records.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/locomo/locomo_dev.json}
OUT=${2:-eval-out/locomo_dev}
BIN=${BIN:-.venv/bin}
export HF_HUB_OFFLINE=1
start=$(date +%s)
"$BIN/rdmem" eval locomo "$DATA" \
    --budgets 500,1000,2000,4000,8000 \
    --policies window,seed,importance,summary_buffer,rd \
    --regime both --categories 1,2,3,4 --seed 0 \
    --out "$OUT"
echo "wall time: $(( $(date +%s) - start )) s" >&2
if [ "${RECORD:-0}" = 1 ]; then
    mkdir -p benchmarks/results/locomo_dev
    cp "$OUT"/results.md "$OUT"/results.csv "$OUT"/results.json "$OUT"/rd_curve.png benchmarks/results/locomo_dev/
    echo "recorded in benchmarks/results/locomo_dev/" >&2
else
    echo "results in $OUT/ (RECORD=1, or make eval-record, copies them to benchmarks/results/locomo_dev/)" >&2
fi
