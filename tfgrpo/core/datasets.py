"""Problem sets: the bundled benchmarks by name, or any JSONL / JSON / CSV / parquet file.

Every loader returns `Problem` rows with string `id`, `problem` and `answer`; all other columns go to
`extra`. A malformed row fails at once with an error naming the file, the line (JSONL) or row (other
formats) and the key, because a silently skipped row changes what a benchmark number means.

CSV, JSON and parquet files are read with Hugging Face `datasets`, which keeps an Arrow copy of each file in
its cache: `~/.cache/huggingface/datasets` (or `$HF_DATASETS_CACHE`) unless `cache_dir` is given; the
`dataset_cache` setting of learn and eval (`dataset_cache_dir`) can put it in the run folder instead.

Rows without an id get a stable one from their position in the file (`row-0007` is the eighth row, counted
from 0 over all rows of the file, not only those kept by `limit`), so a rerun pairs samples with the same
problems.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from tfgrpo.core.atomic import removed_on_failure
from tfgrpo.core.errors import DatasetError
from tfgrpo.core.textfile import (
    MAX_ROW_BYTES,
    JSONValueError,
    find_duplicate_json_key,
    iter_lines,
    read_text,
    strict_json_loads,
)

DATA_DIR = Path(__file__).resolve().parent / "data"


class Problem(BaseModel):
    """One evaluation or training problem."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    id: str = Field(description="Unique within its dataset; samples and comparisons are keyed on it.")
    problem: str = Field(description="The problem text shown to the model.")
    answer: str | None = Field(
        description="The gold answer as a string (integers without leading zeros in bundled sets); None only in "
        "unlabelled data loaded with require_answer=False (ground-truth-free learning)."
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="Every other column of the source row.")


class BundledDataset(BaseModel):
    """A problem set shipped inside the package, addressable by `name` (e.g. `--data aime24`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    filename: str
    size: int
    limit: int | None = None
    description: str

    @property
    def path(self) -> Path:
        return DATA_DIR / self.filename


_BUNDLED = (
    BundledDataset(name="aime24", filename="aime24.jsonl", size=30, description="AIME 2024 I and II (30 problems)."),
    BundledDataset(name="aime25", filename="aime25.jsonl", size=30, description="AIME 2025 I and II (30 problems)."),
    BundledDataset(name="amc23", filename="amc23.jsonl", size=40, description="AMC 2023 (40 problems), held-out set."),
    BundledDataset(
        name="dapo100",
        filename="dapo_math_17k_first110.jsonl",
        size=100,
        limit=100,
        description="First 100 problems of DAPO-Math-17k in file order (a training set; not youtu-agent's DAPO-100).",
    ),
    BundledDataset(
        name="math_l5_train200",
        filename="math_l5_int_train200.jsonl",
        size=200,
        description="200 MATH Level-5 test problems outside MATH-500 with integer answers (a training set).",
    ),
    BundledDataset(
        name="easy",
        filename="easy_arith.jsonl",
        size=16,
        description="16 one-step arithmetic word problems for the embedded 135M model's quickstart.",
    ),
    BundledDataset(
        name="easy_train",
        filename="easy_arith_train.jsonl",
        size=24,
        description="24 one-step arithmetic word problems, none in `easy`: the quickstart learns on these.",
    ),
)

BUNDLED: Mapping[str, BundledDataset] = MappingProxyType({d.name: d for d in _BUNDLED})


def _cache_folder(value: str | Path) -> str | Path:
    if isinstance(value, Path) and value.expanduser().exists() and not value.expanduser().is_dir():
        raise ValueError(f"{value} is a file; the dataset cache is a folder (or 'default' or 'run')")
    return value


DatasetCache = Annotated[Literal["default", "run"] | Path, AfterValidator(_cache_folder)]
DATASET_CACHE_HELP = (
    "Where CSV/JSON/parquet data files are cached as Arrow files by Hugging Face datasets: default "
    "(~/.cache/huggingface/datasets, or $HF_DATASETS_CACHE), run (OUT/datasets_cache, removed with the run), "
    "or a folder. JSONL and bundled sets are read directly, never cached."
)
RUN_DATASET_CACHE = "datasets_cache"


def dataset_cache_dir(setting: DatasetCache, out: str | Path) -> Path | None:
    """The `cache_dir` for `load_dataset_rows`: None (the `datasets` default), OUT/datasets_cache, or a folder."""
    if setting == "default":
        return None
    if setting == "run":
        return Path(out) / RUN_DATASET_CACHE
    return Path(setting).expanduser()


def list_bundled() -> list[BundledDataset]:
    """The bundled datasets, in a stable order (name, size, description, file)."""
    return list(_BUNDLED)


def resolve_dataset(spec: str | Path) -> tuple[Path, int | None]:
    """A bundled name or a path → (file, the bundled row limit or None)."""
    if isinstance(spec, str) and spec in BUNDLED:
        bundled = BUNDLED[spec]
        return bundled.path, bundled.limit
    path = Path(spec).expanduser()
    if path.is_file():
        return path, None
    names = ", ".join(BUNDLED)
    raise DatasetError(f"unknown dataset {str(spec)!r}: not a bundled name ({names}) and no such file")


#: What a dataset may hold in memory, by default: its rows are counted as they stream in, at their text plus
#: ROW_MEMORY_BYTES each, and refused past the budget before they are all held (200,000 short rows without
#: --limit took a learn run to 1.65 GB in 40 s: ~8 KB a row of objects, indexes and caches besides the text).
DATASET_MEMORY_MB = 512
ROW_MEMORY_BYTES = 8 * 1024


def load_dataset_rows(
    spec: str | Path,
    *,
    problem_key: str = "problem",
    answer_key: str = "answer",
    id_key: str = "id",
    limit: int | None = None,
    require_answer: bool = True,
    max_row_bytes: int = MAX_ROW_BYTES,
    cache_dir: Path | None = None,
    memory_mb: int = DATASET_MEMORY_MB,
) -> list[Problem]:
    """Load problems from a bundled name or a file; `limit` keeps the first N rows; `cache_dir`: where
    `datasets` caches a CSV/JSON/parquet file (None: its own default); past `memory_mb` (see
    DATASET_MEMORY_MB) the load stops with one line."""
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be at least 1 (got {limit})")
    path, bundled_limit = resolve_dataset(spec)
    if bundled_limit is not None:
        limit = bundled_limit if limit is None else min(limit, bundled_limit)

    suffix = "".join(path.suffixes[-1:]).lower()
    rows = _iter_jsonl(path, max_row_bytes) if suffix == ".jsonl" else _iter_with_hf_datasets(path, suffix, cache_dir)

    problems: list[Problem] = []
    first_seen: dict[str, str] = {}
    held, budget = 0, memory_mb * 1024 * 1024
    for index, (where, row) in enumerate(rows):
        if limit is not None and len(problems) >= limit:
            break
        problem = _row_to_problem(
            row,
            index=index,
            where=where,
            problem_key=problem_key,
            answer_key=answer_key,
            id_key=id_key,
            require_answer=require_answer,
        )
        if problem.id in first_seen:
            raise DatasetError(f"{where}: duplicate id {problem.id!r} (first seen at {first_seen[problem.id]})")
        first_seen[problem.id] = where
        held += ROW_MEMORY_BYTES + len(problem.problem) + len(problem.answer or "") + len(problem.id)
        if held > budget:
            raise DatasetError(
                f"{where}: {path.name} needs more than its memory budget of {memory_mb:,} MB by this row "
                f"({len(problems):,} rows held, ~{ROW_MEMORY_BYTES // 1024} KB each besides their text); "
                "use --limit N for the first N rows, or raise --max-dataset-mb"
            )
        problems.append(problem)
    if not problems:
        raise DatasetError(f"{path}: no rows")
    return problems


def iter_jsonl_objects(
    path: Path, *, error: type[Exception] = DatasetError, max_row_bytes: int = MAX_ROW_BYTES
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-empty line; a line that is not a JSON object raises `error`
    naming the file and line (eval, compare and finetune read their JSONL through this)."""
    for line_number, line in iter_lines(path, error=error, max_row_bytes=max_row_bytes):
        if not line.strip():
            continue
        where = f"{path}:{line_number}"
        try:
            row = strict_json_loads(line)
        except JSONValueError as exc:
            raise error(f"{where}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise error(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise error(f"{where}: JSON nested too deeply to read") from None
        if not isinstance(row, dict):
            raise error(f"{where}: expected a JSON object, got {type(row).__name__}")
        yield line_number, row


def _iter_jsonl(path: Path, max_row_bytes: int) -> Iterator[tuple[str, dict[str, Any]]]:
    for line_number, row in iter_jsonl_objects(path, max_row_bytes=max_row_bytes):
        yield f"{path}:{line_number}", row


_HF_FORMATS = {".json": "json", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
#: a .json dataset is read whole to check its keys, as Arrow's reader reads it whole; a bigger set is JSONL
MAX_JSON_DATASET_BYTES = 1024 * 1024 * 1024


def _refuse_duplicate_json_keys(path: Path) -> None:
    """Arrow keeps the last of a key given twice in a JSON array's rows, silently: refuse it as JSONL does."""
    found = find_duplicate_json_key(read_text(path, error=DatasetError, max_bytes=MAX_JSON_DATASET_BYTES))
    if found:
        key, line = found
        raise DatasetError(f"{path}:{line}: duplicate key {key!r} (a JSON object names each key once)")


def _refuse_duplicate_csv_columns(path: Path) -> None:
    """pandas renames a second `answer` column `answer.1`, so the first wins silently: refuse it instead."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        try:
            header = next(csv.reader(handle), [])
        except csv.Error:  # a header the csv module cannot read: pandas' own error says more
            return
    seen: set[str] = set()
    for name in header:
        if name in seen and name.strip():
            raise DatasetError(f"{path}: line 1: column {name!r} twice in the header; give each column one name")
        seen.add(name)


def _iter_with_hf_datasets(path: Path, suffix: str, cache_dir: Path | None) -> Iterator[tuple[str, dict[str, Any]]]:
    builder = _HF_FORMATS.get(suffix)
    if builder is None:
        formats = ", ".join([".jsonl", *_HF_FORMATS])
        raise DatasetError(f"{path}: unsupported file type {suffix or '(none)'!r}; use one of {formats}")
    if builder == "json":
        _refuse_duplicate_json_keys(path)
    elif builder == "csv":
        _refuse_duplicate_csv_columns(path)
    try:
        import datasets  # heavy; only for non-JSONL files
    except ImportError as exc:
        raise DatasetError(f"{path}: reading {suffix} files needs the `datasets` package ({exc})") from None

    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a local file loads in milliseconds; its bars would only be noise
    try:
        # a file that cannot be read leaves no cache folder behind (with dataset_cache: run, no run folder)
        with removed_on_failure(cache_dir) if cache_dir else contextlib.nullcontext():
            table = datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=str(cache_dir) if cache_dir else None
            )
    except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as exc:
        reason = exc.__cause__ or exc  # the generation error wraps the parser's own message
        raise DatasetError(f"{path}: cannot read as {builder}: {reason}") from None
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
    for row_number, row in enumerate(table, start=1):
        yield f"{path}: row {row_number}", row


def _row_to_problem(
    row: dict[str, Any],
    *,
    index: int,
    where: str,
    problem_key: str,
    answer_key: str,
    id_key: str,
    require_answer: bool = True,
) -> Problem:
    if problem_key not in row:
        raise DatasetError(f"{where}: missing key {problem_key!r} (keys: {', '.join(map(str, row)) or 'none'})")
    problem = row[problem_key]
    if not isinstance(problem, str) or not problem.strip():
        raise DatasetError(f"{where}: key {problem_key!r} must be a non-empty string (got {problem!r:.60})")

    if row.get(answer_key) is None and not require_answer:
        answer = None
    elif answer_key not in row:
        raise DatasetError(f"{where}: missing key {answer_key!r} (keys: {', '.join(map(str, row))})")
    elif row[answer_key] is None:
        raise DatasetError(f"{where}: key {answer_key!r} is empty")
    else:
        answer = _scalar_to_text(row[answer_key], key=answer_key, where=where)

    raw_id = row.get(id_key)
    problem_id = f"row-{index:04d}" if raw_id is None else _scalar_to_text(raw_id, key=id_key, where=where)
    extra = {key: value for key, value in row.items() if key not in {problem_key, answer_key, id_key}}
    return Problem(id=problem_id, problem=problem, answer=answer, extra=extra)


def _scalar_to_text(value: Any, *, key: str, where: str) -> str:
    """Strings stay as they are; integers and integral floats (27.0, from CSV/parquet) become '27'."""
    if isinstance(value, bool):
        raise DatasetError(f"{where}: key {key!r} must be a string or a number (got {value!r})")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DatasetError(f"{where}: key {key!r} is {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        if not value.strip():
            raise DatasetError(f"{where}: key {key!r} is empty")
        return value.strip()
    raise DatasetError(f"{where}: key {key!r} must be a string or a number (got {type(value).__name__})")


__all__ = [
    "BUNDLED",
    "DATASET_CACHE_HELP",
    "DATA_DIR",
    "BundledDataset",
    "DatasetCache",
    "Problem",
    "dataset_cache_dir",
    "list_bundled",
    "load_dataset_rows",
    "resolve_dataset",
]
