"""Transfer: evaluate several models x libraries in one command, and the model x library table with CIs.

A matrix file (YAML) lists the models (each an `llm:` block) and the libraries (`library: null` is the
model without a library); `eval:` holds the settings shared by every cell (data, samples, sampling, ...):

    out: runs/transfer
    eval: {data: aime24, samples: 8}
    models:
      - {name: qwen-7b, llm: {backend: openai, model: qwen2.5-7b, base_url: [http://127.0.0.1:8000/v1]}}
      - {name: deepseek, llm: {backend: openai, model: deepseek-chat, base_url: [https://api.deepseek.com/v1]}}
    libraries:
      - {name: none, library: null}
      - {name: learned-on-qwen, library: runs/qwen/library.json}

`tfgrpo eval --matrix FILE` runs every cell into `out/<model>/<library>` (cached, resumable) and writes
`out/matrix.json`; `tfgrpo compare --matrix out` adds the model x library table: each cell's Mean@K with its
CI and the paired gain over the model's first library (usually `none`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tfgrpo.core.errors import RunDirError
from tfgrpo.core.stats import compare_paired
from tfgrpo.eval.runner import EvalConfig, EvalResult, evaluate
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.config import LLMConfig

MATRIX_FILE = "matrix.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _folder_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError("letters, digits, '.', '_' or '-' only (it names a folder)")
    return value


class MatrixModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(description="Row label and folder name.")
    llm: LLMConfig = Field(default_factory=LLMConfig)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _folder_name(value)


class MatrixLibrary(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(description="Column label and folder name.")
    library: str | None = Field(None, description="Library JSON; null = the model alone.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _folder_name(value)


class MatrixConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    out: str = Field("runs/matrix", description="One eval run per cell: OUT/<model>/<library>.")
    eval: dict[str, Any] = Field(
        default_factory=dict, description="EvalConfig settings shared by every cell (data, samples, ...)."
    )
    models: list[MatrixModel] = Field(min_length=1)
    libraries: list[MatrixLibrary] = Field(min_length=1)

    def cells(self) -> list[EvalConfig]:
        """Every cell's eval settings, row by row (validated: a bad cell fails before any call)."""
        return [self.cell(model, library) for model in self.models for library in self.libraries]

    def cell(self, model: MatrixModel, library: MatrixLibrary) -> EvalConfig:
        shared = {k: v for k, v in self.eval.items() if k not in {"out", "library", "label", "llm"}}
        return EvalConfig.model_validate(
            {
                **shared,
                "llm": model.llm.model_dump(),
                "library": library.library,
                "out": str(Path(self.out) / model.name / library.name),
                "label": f"{model.name} / {library.name}",
            }
        )


def run_matrix(
    config: MatrixConfig, *, client_for: Callable[[EvalConfig], LLMClient] | None = None, console: Any | None = None
) -> list[EvalResult]:
    """Every model x library cell, row by row; writes OUT/matrix.json first so a partial matrix can be inspected."""
    config.cells()
    cells = {m.name: {lib.name: f"{m.name}/{lib.name}" for lib in config.libraries} for m in config.models}
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "models": [m.name for m in config.models],
        "libraries": [lib.name for lib in config.libraries],
        "cells": cells,
    }
    (out / MATRIX_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return [
        evaluate(cell, client=client_for(cell) if client_for else None, console=console) for cell in config.cells()
    ]


def read_matrix(root: str | Path) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """The manifest and its cells as (run dir, 'model / library'), row by row."""
    root = Path(root)
    if not (root / MATRIX_FILE).is_file():
        raise RunDirError(
            f"{root}: not an eval matrix directory (no {MATRIX_FILE}; `tfgrpo eval --matrix` writes one)"
        )
    try:
        manifest = json.loads((root / MATRIX_FILE).read_text(encoding="utf-8"))
        cells = [
            (root / manifest["cells"][m][lib], f"{m} / {lib}")
            for m in manifest["models"]
            for lib in manifest["libraries"]
        ]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RunDirError(f"{root / MATRIX_FILE}: not a matrix manifest ({exc})") from None
    return manifest, cells


def matrix_rows(
    manifest: dict[str, Any],
    per_problem: dict[str, list[float]],
    names: list[str],
    ci95: dict[str, list[float]],
    *,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per model: per library, Mean@K with CI and the paired gain over the model's first library."""
    columns = {name: [scores[i] for scores in per_problem.values()] for i, name in enumerate(names)}
    rows = []
    for model in manifest["models"]:
        first = f"{model} / {manifest['libraries'][0]}"
        cells = []
        for library in manifest["libraries"]:
            name = f"{model} / {library}"
            values = columns[name]
            gain = None if name == first else compare_paired(columns[first], values, seed=seed)
            cells.append(
                {
                    "library": library,
                    "mean": sum(values) / len(values),
                    "ci95": ci95[name],
                    "gain": None if gain is None else gain.diff,
                    "gain_ci95": None if gain is None else gain.ci95,
                    "p_value": None if gain is None else gain.p_value,
                }
            )
        rows.append({"model": model, "cells": cells})
    return rows


__all__ = ["MATRIX_FILE", "MatrixConfig", "matrix_rows", "read_matrix", "run_matrix"]
