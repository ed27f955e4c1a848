"""`tfgrpo experiment --report-to`: the experiment's table (a row per system) and its spend, read back from
TensorBoard's event files; the recipe's API key is not among them."""

from __future__ import annotations

import json

import pytest

from tests.experiment.test_experiment import run, write_recipe
from tests.helpers.learn_world import World, WorldServer
from tests.helpers.tracker_files import tensorboard_scalars, tensorboard_texts

pytestmark = pytest.mark.timeout(180)


def test_experiment_logs_its_table_to_tensorboard(tmp_path):
    out = tmp_path / "exp"
    with WorldServer(World()) as server:
        recipe = write_recipe(tmp_path, server.base_url, seeds=(1,))
        result = run(recipe, "--out", out, "--report-to", "tensorboard")
        assert result.exit_code == 0, result.output
    table = json.loads((out / "report" / "table.json").read_text())
    texts = tensorboard_texts(out / "tensorboard")
    assert texts["run"] == "tfgrpo experiment: exp"
    shown = texts["table"].splitlines()
    assert shown[0] == "| " + " | ".join(table["headers"]) + " |"
    assert [line.split(" | ")[0].removeprefix("| ") for line in shown[2:]] == [row[0] for row in table["rows"]]
    scalars = tensorboard_scalars(out / "tensorboard")
    spent = json.loads((out / "experiment.json").read_text())
    assert scalars["steps/ran"] == [(0, 4.0)] and scalars["steps/failed"] == [(0, 0.0)]
    assert scalars["cost/spent_usd"][0][1] == pytest.approx(sum(s.get("cost_usd", 0) for s in spent["steps"].values()))
    event_files = list((out / "tensorboard").iterdir())
    assert event_files and all(b"sk-test-secret" not in path.read_bytes() for path in event_files)
