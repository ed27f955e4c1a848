"""Typed configuration from YAML and the command line."""

from __future__ import annotations

import pytest

from tfgrpo.core.config import ConfigError, build_config, dump_config
from tfgrpo.llm.chat import ChatConfig
from tfgrpo.llm.config import LLMConfig


def test_yaml_is_overridden_by_command_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "llm:\n  backend: openai\n  model: gpt-4o-mini\n  base_url: http://x/v1\nsampling:\n  temperature: 0.3\n"
    )
    config = build_config(
        ChatConfig, path, {"llm": {"model": "deepseek-chat", "api_key": None}, "sampling": {"temperature": None}}
    )
    assert config.llm.backend == "openai"
    assert config.llm.model == "deepseek-chat"
    assert config.llm.base_url == ["http://x/v1"]
    assert config.sampling.temperature == 0.3


def test_unknown_key_is_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("llm:\n  backnd: openai\n")
    with pytest.raises(ConfigError, match="unknown key 'llm.backnd'"):
        build_config(ChatConfig, path, {})


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match="llm.concurrency"):
        build_config(ChatConfig, None, {"llm": {"concurrency": 0}})
    with pytest.raises(ConfigError, match="llm.backend"):
        build_config(ChatConfig, None, {"llm": {"backend": "nope"}})


def test_missing_and_malformed_files_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        build_config(ChatConfig, tmp_path / "nope.yaml", {})
    bad = tmp_path / "bad.yaml"
    bad.write_text("llm: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        build_config(ChatConfig, bad, {})


def test_dump_hides_api_keys():
    text = dump_config(LLMConfig(backend="openai", model="m", api_key="sk-secret"))
    assert "sk-secret" not in text and "***" in text


def test_a_partial_section_keeps_the_fields_own_defaults(tmp_path):
    """`--max-tokens 16` on chat must not turn its greedy default (temperature 0) into 0.7."""
    config = build_config(ChatConfig, None, {"sampling": {"max_tokens": 16}})
    assert config.sampling.temperature == 0.0 and config.sampling.max_tokens == 16
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  top_p: 0.9\n")
    assert build_config(ChatConfig, path, {}).sampling.temperature == 0.0
    assert build_config(ChatConfig, path, {}).sampling.top_p == 0.9


def test_learn_stage_sampling_stays_greedy_when_only_its_length_changes():
    from tfgrpo.learn.config import LearnConfig

    config = build_config(
        LearnConfig,
        None,
        {"data": "easy", "stage_sampling": {"max_tokens": 256}, "rollout_sampling": {"max_tokens": 64}},
    )
    assert config.stage_sampling.temperature == 0.0 and config.stage_sampling.max_tokens == 256
    assert config.rollout_sampling.temperature == 0.7
