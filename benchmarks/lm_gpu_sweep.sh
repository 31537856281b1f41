#!/usr/bin/env bash
# Issue 19's full sweep on one GPU: model-measured distortion on every LoCoMo dev question (rdmem eval --lm,
# the model's whole 8,192-token window) and the text-vs-KV side by side on 200 questions.
#
#   bash benchmarks/lm_gpu_sweep.sh [LOCOMO_JSON] [OUT_DIR]        (DEVICE=cuda:1 to pick a GPU)
#
# The same commands run on CPU with DEVICE=cpu and smaller samples (see BENCHMARKS.md, "A language model
# in the loop"); nothing in rdmem needs a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/locomo/locomo_dev.json}
OUT=${2:-eval-out/lm_gpu}
BIN=${BIN:-.venv/bin}
DEVICE=${DEVICE:-cuda}
export HF_HUB_OFFLINE=1
start=$(date +%s)
"$BIN/rdmem" eval locomo "$DATA" \
    --budgets 500,1000,2000,4000 --policies window,importance,rd --regime both --categories 1,2,3,4 \
    --lm --lm-sample all --lm-turns 60 --lm-device "$DEVICE" --workers "$(nproc)" --no-progress \
    --out "$OUT/eval"
echo "eval: $(( $(date +%s) - start )) s" >&2
"$BIN/python" benchmarks/lm_side_by_side.py "$DATA" --sample 200 --device "$DEVICE" \
    --out "$OUT/lm_side_by_side.json" | tee "$OUT/lm_side_by_side.txt"
echo "wall time: $(( $(date +%s) - start )) s" >&2
