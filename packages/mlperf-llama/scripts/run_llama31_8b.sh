#!/usr/bin/env bash
# The closed-division llama31_8b submission: 10 runs (fresh seed each) in the MLPerf folder layout.
#   DATA=/raid/c4 TOKENIZER=/raid/c4/tokenizer.model SYSTEM=8xH200 DEVICE=CUDA DP=8 scripts/run_llama31_8b.sh
# Hyperparameters: the GBS-32 RCP (lr 8e-4, 4096 warmup samples), bf16 weights with fp32 master copies, eval every
# 12288 samples on 1024 sequences of 8192 tokens, stop at log-perplexity 3.3 or after 400k samples.
# Then check it: python -m mlperf_logging.package_checker "$OUT" training 6.1.0
set -euo pipefail
: "${DATA:?set DATA to the folder with the C4 .bin/.idx files}"
: "${TOKENIZER:?set TOKENIZER to the Llama 3.1 tokenizer file}"
SYSTEM=${SYSTEM:-$(hostname -s)}
OUT=${OUT:-submission/ember}
DP=${DP:-1}
BS=${BS:-$((32 / ${GRADIENT_ACC_STEPS:-1}))}
echo "run_llama31_8b: $SYSTEM, dp $DP, micro-batch $BS x ${GRADIENT_ACC_STEPS:-1} -> $OUT" >&2
exec ember-llama submission --output "$OUT" --system "$SYSTEM" --runs "${RUNS:-10}" \
    --preset 8B --data-dir "$DATA" --tokenizer "$TOKENIZER" --device "${DEVICE:-CPU}" --dp "$DP" \
    --batch-size "$BS" --grad-acc-steps "${GRADIENT_ACC_STEPS:-1}" --seq-len 8192 --dtype bfloat16 --master-weights \
    --lr 8e-4 --warmup-samples 4096 --eval-every 12288 --eval-samples 1024 --eval-batch-size "${EVAL_BS:-$BS}" \
    --eval-target 3.3 --train-samples "${TRAIN_SAMPLES:-400000}" --beam "${BEAM_WIDTH:-0}" \
    --submission-org "${SUBMISSION_ORG:-ember}" --submission-platform "$SYSTEM" "$@"
