#!/usr/bin/env bash
# The quickstart plus the comparison it is for, on the embedded SmolLM2-135M-Instruct, offline, on 2 CPU cores:
# Training-Free GRPO learns a library, LoRA-SFT trains on its successful rollouts, LoRA-GRPO on the same problems
# with the same reward, and base, library and both adapters are evaluated alike; one table, plus the library
# exported as the system prompt (tfgrpo/experiment/recipes/quickstart-baselines.yaml, docs/experiments.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false
TFGRPO=${TFGRPO:-.venv/bin/tfgrpo}
OUT=${OUT:-runs/quickstart-baselines}

# Prints its time estimate first (the local backends timed for a few seconds); a second run skips every finished step.
$TFGRPO experiment quickstart-baselines --out "$OUT" "$@"
echo "report: $OUT/report/report.md (and report.html); shipped prompt: $OUT/report/system_prompt-seed-42.txt"
