"""Transfer: one command evaluates models x libraries; `compare --matrix` draws the table with CIs."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from tests.helpers.trust_worlds import make_matrix, run_scripted_matrix
from tfgrpo.cli.app import app, main

pytestmark = pytest.mark.timeout(180)


def test_matrix_eval_and_compare_table(tmp_path):
    results = run_scripted_matrix(tmp_path)
    assert [r.metrics["label"] for r in results] == [
        "alpha / none",
        "alpha / alpha-lib",
        "beta / none",
        "beta / alpha-lib",
    ]
    report = CliRunner().invoke(
        app, ["compare", "--matrix", str(tmp_path / "matrix"), "--out", str(tmp_path / "report")]
    )
    assert report.exit_code == 0, report.output
    comparison = json.loads((tmp_path / "report" / "comparison.json").read_text())
    rows = {row["model"]: {c["library"]: c for c in row["cells"]} for row in comparison["matrix"]["rows"]}
    assert rows["alpha"]["none"]["mean"] == 0.5 and rows["alpha"]["alpha-lib"]["mean"] == 1.0
    assert rows["alpha"]["alpha-lib"]["gain"] == pytest.approx(0.5) and rows["alpha"]["alpha-lib"]["gain_ci95"][0] > 0
    assert rows["beta"]["alpha-lib"]["gain"] == 0.0  # learned on alpha: no transfer to beta
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Transfer: model x library" in markdown and "| beta |" in markdown


def test_a_bad_matrix_file_is_one_clear_error(tmp_path, capsys):
    spec = make_matrix(tmp_path)
    spec["models"][0]["name"] = "has space"
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--matrix", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "models.0.name" in err and "Traceback" not in err
