#!/usr/bin/env bash
# The main job on the embedded SmolLM2-135M-Instruct, offline, on 2 CPU cores:
# learn a library on a tiny easy set, evaluate with and without it, export it, compare the two.
# llama.cpp in process (the fastest local path: ~75 tokens/s vs ~29 for transformers); the stage replies
# are constrained to their JSON schema by llama.cpp's grammar, so none is lost to a parse error.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false
TFGRPO=${TFGRPO:-.venv/bin/tfgrpo}
OUT=${OUT:-runs/quickstart}
LLM=${LLM:---backend llamacpp}
SAMPLING="--max-tokens 128"
STAGES="--stage-max-tokens 192 --max-ops 2"  # summaries and operations: a 135M model rambles to the limit
EVAL_CACHE="--cache $OUT/eval-cache.sqlite"  # both evals share it: identical prompts are generated once

# A second run resumes the finished learn run: everything is replayed from the caches, for free.
RESUME=$([ -f "$OUT/learn/state.json" ] && echo --resume || true)

$TFGRPO learn $LLM --data easy --out "$OUT/learn" --group-size 4 --epochs 1 --batch-size 3 --limit 12 $SAMPLING $STAGES $RESUME
$TFGRPO eval $LLM --data easy --out "$OUT/eval-baseline" --samples 2 --label baseline $SAMPLING $EVAL_CACHE
$TFGRPO eval $LLM --data easy --out "$OUT/eval-library" --samples 2 --library "$OUT/learn/library.json" --label library $SAMPLING $EVAL_CACHE
$TFGRPO export "$OUT/learn/library.json" --format system-prompt --out "$OUT/system_prompt.txt"
$TFGRPO compare "$OUT/eval-baseline" "$OUT/eval-library" --learn-run "$OUT/learn" --out "$OUT/report"
echo "report: $OUT/report/report.md (and report.html); shipped prompt: $OUT/system_prompt.txt"
