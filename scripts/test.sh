#!/usr/bin/env bash
# CI's test command (README's second line runs it after scripts/install.sh): ruff lint and format, the
# whole pytest suite, the import-layer contract, mypy on the lower layers, then the docs site built with
# --strict, so a broken link or a stale config reference fails the run.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false} NO_MKDOCS_2_WARNING=1
# Lint and format first: seconds, and they fail fast.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q "$@"
# The layers (docs/architecture.md): an import that points up fails the run.
.venv/bin/lint-imports --no-cache
# Type check of the lower layers (the [tool.mypy] files in pyproject.toml); zero findings expected.
.venv/bin/mypy
# No -q: mkdocs 1.6 then drops warnings before --strict counts them, and a broken link would pass.
.venv/bin/mkdocs build --strict --site-dir "${DOCS_SITE_DIR:-site}"
