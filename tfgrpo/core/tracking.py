"""Experiment trackers: a command's settings, per-step scalars and tables, sent to TensorBoard, MLflow, W&B or trackio.

`report_to` (a field of learn's, eval's and experiment's configs, through `TrackingSettings`; finetune hands
the same choice to TRL) names the trackers, several allowed; `none` (the default) sends nothing and imports
nothing. Each tracker is an optional extra, its package imported only when it is chosen; one that is not
installed is refused before the command's first request, in one line naming the install command.

A command opens one `Trackers` for its run (`open_trackers`), which starts one run in each tracker with the
run's name and its settings as `config_dict` writes them (secrets masked: the only view of a config any
tracker gets), then logs scalars by step (`log_metrics`) and row tables (`log_table`), and closes the runs.

Where each one writes: TensorBoard event files in `<out>/tensorboard`; MLflow wherever MLflow's own settings
point (`MLFLOW_TRACKING_URI`, as TRL's callback does); W&B under `<out>/wandb` (online, or offline with
`WANDB_MODE=offline`); trackio in its local database (`TRACKIO_DIR`, default `~/.cache/huggingface/trackio`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError, field_validator

from tfgrpo.core.config import ConfigError, config_dict, format_validation_error

TrackerName = Literal["none", "tensorboard", "mlflow", "wandb", "trackio"]
#: the modules each tracker needs (the extra of the same name installs them)
TRACKER_MODULES: dict[str, tuple[str, ...]] = {
    "tensorboard": ("torch", "tensorboard"),
    "mlflow": ("mlflow",),
    "wandb": ("wandb",),
    "trackio": ("trackio",),
}
#: a table's text cells are cut to this many characters, and TensorBoard shows at most TEXT_TABLE_ROWS rows
MAX_CELL_CHARS = 2000
TEXT_TABLE_ROWS = 100
MLFLOW_PARAM_CHARS = 6000


class TrackingError(ConfigError):
    """A chosen tracker cannot be used (unknown, or its extra is missing); the message says what to do."""


class TrackingSettings(BaseModel):
    """The tracking fields a command's config inherits (learn, eval, experiment): `report_to` as TRL spells it."""

    report_to: list[TrackerName] = Field(
        default_factory=lambda: ["none"],
        description="Experiment trackers to log to: none | tensorboard | mlflow | wandb | trackio "
        "(repeatable or a,b; each an extra: pip install 'tfgrpo[NAME]').",
    )
    run_name: str | None = Field(None, description="The run's name in the trackers; default: the --out folder's name.")
    tracker_project: str = Field(
        "tfgrpo", min_length=1, description="The trackers' project: MLflow experiment, W&B and trackio project."
    )

    @field_validator("report_to", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            return value
        names = [part.strip().lower() for item in items for part in str(item).split(",") if part.strip()]
        if "none" in names and len(set(names)) > 1:
            raise ValueError(f"'none' cannot be combined with other trackers (got {', '.join(names)})")
        return list(dict.fromkeys(names)) or ["none"]

    @property
    def trackers(self) -> list[str]:
        return [name for name in self.report_to if name != "none"]


def parse_report_to(value: object) -> list[str]:
    """`report_to` as a command line or YAML gives it ("a,b", a list, None) -> the trackers chosen, checked
    (finetune's, which TRL receives); one line on a name that is not a tracker."""
    try:
        settings = TrackingSettings.model_validate({"report_to": ["none"] if value is None else value})
    except ValidationError as exc:
        raise TrackingError(format_validation_error(exc, source="--report-to")) from None
    return settings.trackers


def require_trackers(names: Sequence[str]) -> None:
    """Every chosen tracker's packages are installed (found, not imported), or one line naming the install."""
    for name in names:
        for module in TRACKER_MODULES[name]:
            if importlib.util.find_spec(module) is None:
                raise TrackingError(
                    f"--report-to {name}: {module} is not installed: pip install 'tfgrpo[{name}]' "
                    f"(scripts/install.sh installs every tracker)"
                )


@dataclass(frozen=True)
class RunInfo:
    """What every tracker's run is started with."""

    command: str  # learn | eval | experiment
    name: str
    project: str
    out: Path
    config: dict[str, Any]  # masked (config_dict)


class Tracker(Protocol):
    """One tracker's run: its adapter imports its package when it is built."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self, *, failed: bool) -> None: ...


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"llm": {"model": "x"}} -> {"llm.model": "x"}: the keys MLflow params and TensorBoard text show."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def table_columns(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns in first-seen order and the rows as cells: numbers and booleans kept, the rest as cut text."""
    columns = list(dict.fromkeys(key for row in rows for key in row))

    def cell(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"

    return columns, [[cell(row.get(column)) for column in columns] for row in rows]


class TensorBoardTracker:
    """Event files in `<out>/tensorboard` by torch's `SummaryWriter`, the writer TRL's TensorBoard callback uses."""

    def __init__(self, run: RunInfo):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run.out / "tensorboard"))
        self.writer.add_text("run", f"tfgrpo {run.command}: {run.name}")
        settings = json.dumps(run.config, indent=2, ensure_ascii=False, default=str)
        self.writer.add_text("config", "\n".join("    " + line for line in settings.splitlines()))
        self.writer.flush()

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, cells = table_columns(rows[:TEXT_TABLE_ROWS])

        def shown(value: Any) -> str:
            return str(value).replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(shown(v) for v in row) + " |" for row in cells]
        if len(rows) > TEXT_TABLE_ROWS:
            lines.append(f"\n(first {TEXT_TABLE_ROWS} of {len(rows)} rows)")
        self.writer.add_text(name, "\n".join(lines))
        self.writer.flush()

    def close(self, *, failed: bool) -> None:
        self.writer.close()


class MlflowTracker:
    """A run in the experiment `project` of the store MLflow's own settings name; the config as params and
    `config.json`, tables as MLflow tables (artifacts `<name>.json`)."""

    def __init__(self, run: RunInfo):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        experiment = self.client.get_experiment_by_name(run.project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(run.project)
        self.run_id = self.client.create_run(
            experiment_id, run_name=run.name, tags={"tfgrpo.command": run.command}
        ).info.run_id
        params = [Param(key, str(value)[:MLFLOW_PARAM_CHARS]) for key, value in flatten(run.config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=params[start : start + 100])
        self.client.log_dict(self.run_id, run.config, "config.json")

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, cells = table_columns(rows)
        data = {column: [row[i] for row in cells] for i, column in enumerate(columns)}
        self.client.log_table(self.run_id, data, f"{name}.json")

    def close(self, *, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


class WandbTracker:
    """A W&B run under `<out>/wandb`, without the command line or code in its metadata (an --api-key given
    there would be copied into it)."""

    def __init__(self, run: RunInfo):
        import wandb

        self.wandb = wandb
        (run.out / "wandb").mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", save_code=False, silent=True, x_disable_meta=True)
        self.run = wandb.init(
            project=run.project,
            name=run.name,
            dir=str(run.out),
            config=run.config,
            job_type=run.command,
            settings=settings,
            reinit="create_new",
        )

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, cells = table_columns(rows)
        self.run.log({name: self.wandb.Table(columns=columns, data=cells)})

    def close(self, *, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class TrackioTracker:
    """A trackio run in its local database; its notices go to stderr, not the command's output."""

    def __init__(self, run: RunInfo):
        import trackio

        self.trackio = trackio
        with contextlib.redirect_stdout(sys.stderr):
            self.run = trackio.init(project=run.project, name=run.name, config=run.config, resume="never")
        self.step = 0

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.step = max(self.step, step)
        self.run.log(dict(metrics), step=step)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, cells = table_columns(rows)
        self.step += 1  # trackio keeps one row per step: a table at a step of its own
        self.run.log({name: self.trackio.Table(columns=columns, data=cells)}, step=self.step)

    def close(self, *, failed: bool) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self.run.finish()


ADAPTERS: dict[str, type] = {
    "tensorboard": TensorBoardTracker,
    "mlflow": MlflowTracker,
    "wandb": WandbTracker,
    "trackio": TrackioTracker,
}


class Trackers:
    """The trackers of one run, logged to together; with none chosen every call does nothing."""

    def __init__(self, trackers: Sequence[Tracker] = ()):
        self.trackers = list(trackers)

    def log_metrics(self, metrics: Mapping[str, float | int | bool | None], step: int) -> None:
        """Scalars at `step`; None and non-finite values are left out (nothing was measured)."""
        finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        if finite:
            for tracker in self.trackers:
                tracker.log_metrics(finite, step)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            for tracker in self.trackers:
                tracker.log_table(name, rows)

    def close(self, *, failed: bool = False) -> None:
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close(failed=failed)

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        self.close(failed=error is not None)


def open_trackers(config: TrackingSettings, *, command: str, out: str | Path) -> Trackers:
    """One run in each tracker `config.report_to` names, started with the command's whole config as
    `config_dict` writes it (secrets masked)."""
    names = config.trackers
    if not names:
        return Trackers()
    require_trackers(names)
    out = Path(out)
    run = RunInfo(command, config.run_name or out.resolve().name, config.tracker_project, out, config_dict(config))
    opened: list[Tracker] = []
    try:
        for name in names:
            opened.append(ADAPTERS[name](run))
    except BaseException:
        Trackers(opened).close(failed=True)
        raise
    return Trackers(opened)


def scalars(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics dict, nested keys joined by '/' (booleans as 0/1; text, lists and None left out)."""
    found: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found.update(scalars(value, f"{name}/"))
        elif isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            found[name] = float(value)
    return found


__all__ = [
    "TRACKER_MODULES",
    "RunInfo",
    "Tracker",
    "TrackerName",
    "Trackers",
    "TrackingError",
    "TrackingSettings",
    "flatten",
    "open_trackers",
    "parse_report_to",
    "require_trackers",
    "scalars",
]
