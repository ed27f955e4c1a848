"""Where a CSV/JSON/parquet dataset's Arrow copy is cached (`dataset_cache`): Hugging Face's folder by default,
the run folder with `run`, or a folder of the user's, set from the command line or the YAML config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer
from tfgrpo.core.datasets import RUN_DATASET_CACHE, dataset_cache_dir

datasets = pytest.importorskip("datasets", reason="CSV files are read with Hugging Face datasets")

CSV = "id,problem,answer\na,What is 1+2?,3\nb,What is 3+4?,7\n"


def _arrow_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.arrow")) if folder.exists() else []


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """Hugging Face's default cache, moved into the test's folder (read by `datasets` at each load)."""
    folder = tmp_path / "hf-default"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", folder)
    return folder


def test_the_setting_resolves_to_a_folder(tmp_path):
    assert dataset_cache_dir("default", tmp_path / "run") is None
    assert dataset_cache_dir("run", tmp_path / "run") == tmp_path / "run" / RUN_DATASET_CACHE
    assert dataset_cache_dir(tmp_path / "mine", tmp_path / "run") == tmp_path / "mine"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["default", "run", "folder", "yaml"])
def test_eval_keeps_the_dataset_cache_where_asked(tmp_path, hf_cache, where):
    data = tmp_path / "d.csv"
    data.write_text(CSV)
    out, mine = tmp_path / "run", tmp_path / "my-cache"
    option = {
        "default": [],
        "run": ["--dataset-cache", "run"],
        "folder": ["--dataset-cache", str(mine)],
        "yaml": ["--config", str(tmp_path / "eval.yaml")],
    }[where]
    (tmp_path / "eval.yaml").write_text("dataset_cache: run\n")
    with WorldServer(World()) as server:
        llm = ["--backend", "openai", "--model", "m", "--base-url", server.base_url, "--api-key", "k"]
        assert run_cli("eval", "--data", data, "--out", out, "-k", "1", *llm, *option) == 0
    expected = {"default": hf_cache, "run": out / RUN_DATASET_CACHE, "folder": mine, "yaml": out / RUN_DATASET_CACHE}
    assert _arrow_files(expected[where]), f"no Arrow cache in {expected[where]}"
    others = {hf_cache, out / RUN_DATASET_CACHE, mine} - {expected[where]}
    assert not any(_arrow_files(folder) for folder in others)


@pytest.mark.timeout(120)
def test_a_learn_run_can_keep_its_dataset_cache(tmp_path, hf_cache):
    data = tmp_path / "d.csv"
    data.write_text(CSV)
    out = tmp_path / "run"
    with WorldServer(World()) as server:
        args = server.learn_args(data, out, "-G", "2", "--epochs", "1", "--dedup", "off", "--dataset-cache", "run")
        assert run_cli(*args) == 0
    assert _arrow_files(out / RUN_DATASET_CACHE) and not _arrow_files(hf_cache)
