"""Reading back what the experiment trackers wrote, through each one's own reader where it has one.

TensorBoard: its EventAccumulator. MLflow: MlflowClient on the store the test pointed MLflow at. trackio:
its SQLite database (`TRACKIO_DIR/<project>.db`, tables metrics and configs), read with sqlite3 so that
trackio, which fixes its folder when imported, is not imported by the test process. W&B: wandb 0.31 writes
an offline run only as `run-<id>.wandb` (its Python reader is gone with the move to wandb-core), a LevelDB
log of `wandb.proto` Records: 32 KiB blocks of chunks (crc32, length, type) after a 7-byte W&B header.
"""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path
from typing import Any

WANDB_HEADER = 7
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every event file under `logdir` (one folder: one run)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def tensorboard_texts(logdir: Path) -> dict[str, str]:
    """tag -> the last text logged under it (`add_text` writes tensors with the text plugin)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    accumulator.Reload()
    texts = {}
    for tag in accumulator.Tags()["tensors"]:
        event = accumulator.Tensors(tag)[-1]
        texts[tag.removesuffix("/text_summary")] = event.tensor_proto.string_val[0].decode("utf-8")
    return texts


def wandb_records(run_file: Path) -> list[Any]:
    """Every Record of an offline W&B run file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    records, pending, position = [], b"", WANDB_HEADER
    while position + CHUNK_HEADER <= len(data):
        room = BLOCK - position % BLOCK
        if room < CHUNK_HEADER:  # a block's tail too short for a chunk header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + CHUNK_HEADER])
        chunk = data[position + CHUNK_HEADER : position + CHUNK_HEADER + length]
        position += CHUNK_HEADER + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_history(run_file: Path) -> list[dict[str, Any]]:
    """The rows `run.log` wrote: key -> value (JSON-decoded), one dict per history record."""
    rows = []
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def wandb_config(run_file: Path) -> dict[str, Any]:
    """The run's config as W&B recorded it (the run record's, updated by config records)."""
    config: dict[str, Any] = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        items = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        for item in items:
            config["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return config


def trackio_rows(database: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(metric rows with run_name and step, {run_name: config}) of a trackio project database."""
    with sqlite3.connect(database) as connection:
        metrics = [
            {"run_name": run, "step": step, **json.loads(values)}
            for run, step, values in connection.execute("SELECT run_name, step, metrics FROM metrics ORDER BY id")
        ]
        configs = {
            run: json.loads(config) for run, config in connection.execute("SELECT run_name, config FROM configs")
        }
    return metrics, configs
