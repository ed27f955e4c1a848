"""The run directory of `tfgrpo learn`, and the state that lets an interrupted run resume.

    RUN/config.yaml            resolved settings (API keys hidden)
    RUN/library.json           the library to use: the best epoch's with --val-data, else the latest
    RUN/steps/NNNN/library.json  the library after step NNNN (0000 = the starting library)
    RUN/rollouts.jsonl         every rollout (append-only)
    RUN/stages/*.jsonl         raw replies and parsed operations of summaries, group analyses, consolidations
    RUN/metrics.json           per step, per epoch and total metrics (rewritten atomically after each step)
    RUN/cache.sqlite           every LLM sample, so a resumed run pays for nothing twice
    RUN/events.log             a human-readable log of what happened
    RUN/state.json             resume state: last completed step and the size of every log at that moment
    RUN/run.lock               held (filelock) by the one process working on the run: a second `learn`
                               on the same --out (with or without --resume) is refused with one line

Logs are appended once per completed step. If a run dies in the middle of a step, `--resume` cuts every
log back to the size recorded at the last completed step before redoing that step, so no row is written
twice and the files read as if the run had never stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout
from pydantic import BaseModel, Field

from tfgrpo.core.atomic import append_lines, atomic_write_text, folder_target, remove_stale_temps
from tfgrpo.core.config import ConfigError, config_dict, dump_config, read_yaml
from tfgrpo.experiences.history import History
from tfgrpo.experiences.model import Library
from tfgrpo.learn.config import RESUME_LOCKED_KEYS, LearnConfig

if TYPE_CHECKING:
    from tfgrpo.learn.groups import Group
    from tfgrpo.rollout.sampling import Rollout

STAGE_LOGS = ("summaries", "group_ops", "consolidation")


class RunState(BaseModel):
    """What a resumed run needs to carry on exactly where the last completed step left off."""

    completed_step: int = Field(0, description="Global step number of the last completed step (0 = none).")
    offsets: dict[str, int] = Field(default_factory=dict, description="Byte size of each log at that step.")
    steps: list[dict[str, Any]] = Field(default_factory=list, description="Metrics of every completed step.")
    epoch_end_step: dict[int, int] = Field(default_factory=dict, description="Epoch → step after which it ended.")
    validation: dict[int, dict[str, Any]] = Field(default_factory=dict, description="Epoch → validation result.")
    step_validation: dict[int, dict[str, Any]] = Field(
        default_factory=dict,
        description="Step → validation of its candidate library (select_by: step, or gate); 0 = the start.",
    )
    sessions: list[dict[str, Any]] = Field(
        default_factory=list, description="One entry per process that worked on the run."
    )
    status: str = Field("running", description="running | completed | interrupted | budget_exceeded | failed.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The locked settings (RESUME_LOCKED_KEYS) the steps ran with: what --resume compares against, "
        "so an edit of RUN/config.yaml is seen too.",
    )
    config_changes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Locked settings changed on a resume with --allow-config-change: from which step, old and new.",
    )


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config_path = self.root / "config.yaml"
        self.library_path = self.root / "library.json"
        self.steps_dir = self.root / "steps"
        self.rollouts_path = self.root / "rollouts.jsonl"
        self.stages_dir = self.root / "stages"
        self.metrics_path = self.root / "metrics.json"
        self.cache_path = self.root / "cache.sqlite"
        self.events_path = self.root / "events.log"
        self.state_path = self.root / "state.json"
        self.store_dir = self.root / "store"
        self.lock_path = self.root / "run.lock"
        self._lock: FileLock | None = None
        # `tfgrpo library history|diff|rollback runs/X/library.json` work on a learn run's library.
        self.history = History.for_library(self.library_path)

    # -- paths --------------------------------------------------------------------------------------
    def step_library_path(self, step: int) -> Path:
        return self.steps_dir / f"{step:04d}" / "library.json"

    def stage_path(self, name: str) -> Path:
        return self.stages_dir / f"{name}.jsonl"

    def _logs(self) -> dict[str, Path]:
        logs = {"rollouts.jsonl": self.rollouts_path}
        logs.update({f"stages/{name}.jsonl": self.stage_path(name) for name in STAGE_LOGS})
        logs["library.history/ops.jsonl"] = self.history.ops_path
        return logs

    # -- opening ------------------------------------------------------------------------------------
    def start(self, config: LearnConfig) -> RunState:
        """A fresh run (refusing to overwrite a finished or started one) or, with `resume`, the saved state."""
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"--out {self.root} is a file; a learn run needs a directory (choose another --out)")
        folder_target(self.root, ConfigError)  # a file above --out (`f/run`): one line, not NotADirectoryError
        if config.resume:
            if self.root.is_dir():
                self._acquire()
            return self._reopen(config)
        if self.state_path.exists():
            raise ConfigError(
                f"{self.root} already holds a learn run; pass --resume to continue it, or choose another --out"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self._acquire()
        atomic_write_text(self.config_path, dump_config(config))
        state = RunState(offsets={name: 0 for name in self._logs()}, settings=locked_settings(config))
        for path in self._logs().values():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        self.save_state(state)
        return state

    def _acquire(self) -> None:
        """Become the run's one writer, or refuse at once: two processes would duplicate rows and lose state."""
        lock = FileLock(str(self.lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ConfigError(
                f"{self.root} is in use by another live `tfgrpo learn` process ({self.lock_path} is held); "
                "wait for it to finish (or stop it) before resuming, or choose another --out"
            ) from None
        self._lock = lock

    def release(self) -> None:
        """Let another process open the run (called when learn returns, however it ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _reopen(self, config: LearnConfig) -> RunState:
        if not self.state_path.is_file():
            raise ConfigError(f"nothing to resume in {self.root}: no state.json (start the run without --resume)")
        state = RunState.model_validate_json(self.state_path.read_text(encoding="utf-8"))
        self._check_settings(state, config)
        self._truncate_logs(state.offsets)
        self._remove_stale_temps()
        # Saved without the permission: the next resume compares again rather than inheriting it.
        atomic_write_text(self.config_path, dump_config(config.model_copy(update={"allow_config_change": False})))
        return state

    def _check_settings(self, state: RunState, config: LearnConfig) -> None:
        """Refuse (unless allowed) locked settings that differ from those the completed steps ran with: the
        ones in state.json, which an edit of config.yaml does not touch (runs from before: config.yaml's)."""
        current = locked_settings(config)
        saved = state.settings or (
            locked_settings_of(read_yaml(self.config_path)) if self.config_path.is_file() else {}
        )
        changed = [key for key in RESUME_LOCKED_KEYS if saved and saved.get(key) != current.get(key)]
        if changed and not config.allow_config_change:
            what = ", ".join(_change(key, saved.get(key), current.get(key)) for key in changed)
            raise ConfigError(
                f"cannot resume {self.root}: settings differ from those its {state.completed_step} completed steps "
                f"ran with (RUN/config.yaml edited, or options given now): {what}; undo them, start a new run, "
                "or pass --allow-config-change to mix them (recorded in state.json)"
            )
        if changed:
            changes = {key: {"old": saved.get(key), "new": current.get(key)} for key in changed}
            state.config_changes.append({"from_step": state.completed_step + 1, "changes": changes})
        state.settings = current

    def _remove_stale_temps(self) -> None:
        """Temp files of atomic writes a killed process left (we hold the run lock: none is in flight)."""
        for target in (self.state_path, self.metrics_path, self.config_path, self.library_path):
            remove_stale_temps(target)
        # a step library's (steps/NNNN/.library.json.*.tmp) and a snapshot's (.v0003.json.*.tmp)
        for temp in [*self.steps_dir.glob("*/.library.json.*.tmp"), *self.history.snapshot_dir.glob(".v*.json.*.tmp")]:
            temp.unlink(missing_ok=True)

    def _truncate_logs(self, offsets: dict[str, int]) -> None:
        # Rows written by a step that did not complete are dropped; that step is redone from the cache.
        for name, path in self._logs().items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            size = offsets.get(name, 0)
            if path.stat().st_size > size:
                with path.open("r+b") as handle:
                    handle.truncate(size)

    # -- writing ------------------------------------------------------------------------------------
    def save_state(self, state: RunState) -> None:
        atomic_write_text(self.state_path, state.model_dump_json(indent=1) + "\n")

    def write_step(
        self,
        state: RunState,
        *,
        step: int,
        library: Library,
        rollout_rows: list[dict[str, Any]],
        stage_rows: dict[str, list[dict[str, Any]]],
        step_metrics: dict[str, Any],
        library_records: list[dict[str, Any]] = (),
    ) -> None:
        """Append the step's logs, commit its library to the history, then (last, atomically) mark it completed.

        `library_records` (applied / rejected / evicted operations) go to the library's op log, and the
        library version gets its snapshot there.
        """
        append_lines(self.rollouts_path, [_json_line(r) for r in rollout_rows])
        for name in STAGE_LOGS:
            append_lines(self.stage_path(name), [_json_line(r) for r in stage_rows.get(name, [])])
        text = library.to_json()  # rendered once for its three files
        self.history.commit(library, records=library_records, step=step, text=text)
        library.save(self.step_library_path(step), text=text)
        library.save(self.library_path, text=text)
        state.completed_step = step
        state.offsets = {name: path.stat().st_size for name, path in self._logs().items()}
        state.steps.append(step_metrics)
        self.save_state(state)

    def save_initial_library(self, library: Library, state: RunState) -> None:
        self.history.ensure_baseline(library)
        # The baseline record belongs to step 0: a resume must not cut it from the op log.
        state.offsets["library.history/ops.jsonl"] = self.history.ops_path.stat().st_size
        self.save_state(state)
        library.save(self.step_library_path(0))
        library.save(self.library_path)

    def load_step_library(self, step: int) -> Library:
        return Library.load(self.step_library_path(step))

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        atomic_write_text(self.metrics_path, json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")

    def log(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        append_lines(self.events_path, [f"{stamp} {message}"])


def rollout_row(
    run: RunDir, group: Group, rollout: Rollout, library: Library, context: dict[str, int]
) -> dict[str, Any]:
    """One line of rollouts.jsonl: the rollout, its problem and group, the library it was sampled with."""
    return {
        "run": run.root.name,
        **context,
        "problem": group.problem.problem,
        "answer": group.problem.answer,
        **rollout.to_row(),
        "library_version": library.version,
        "group_mean": group.mean,
        "group_std": group.std,
        "group_status": group.status,
        "pseudo_label": group.gold if group.gold_is_pseudo else None,
    }


def changed_keys(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Locked settings (see RESUME_LOCKED_KEYS) that differ between the saved and the current config."""
    changed = []
    for dotted in RESUME_LOCKED_KEYS:
        if _lookup(saved, dotted) != _lookup(current, dotted):
            changed.append(dotted)
    return changed


def locked_settings(config: LearnConfig) -> dict[str, Any]:
    """The config's locked settings, dotted key -> JSON value, as config.yaml writes them (`config_dict`: a
    secret, or a URL's query string, masked), so state.json holds no credential either."""
    return locked_settings_of(json.loads(json.dumps(config_dict(config), default=str)))


def locked_settings_of(data: dict[str, Any]) -> dict[str, Any]:
    return {dotted: _lookup(data, dotted) for dotted in RESUME_LOCKED_KEYS}


def _change(key: str, old: Any, new: Any) -> str:
    shown = json.dumps(old), json.dumps(new)
    return f"{key} {shown[0]} -> {shown[1]}" if max(map(len, shown)) <= 40 else key


def _lookup(data: dict[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _json_line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False)


__all__ = ["RunDir", "RunState", "STAGE_LOGS", "changed_keys", "rollout_row"]
