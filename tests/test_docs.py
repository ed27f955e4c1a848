"""The README stays short and CI-runnable, its links resolve, and the docs' configuration reference is
generated from the config classes themselves (the full site is built by `mkdocs build --strict` in
scripts/test.sh)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from tfgrpo.eval.config import EvalConfig
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.config import LLMConfig

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def load_hook():
    spec = importlib.util.spec_from_file_location(
        "mkdocs_config_reference", ROOT / "scripts/mkdocs_config_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(markdown: str, heading: str) -> dict[str, list[str]]:
    """Rows of the table under `### heading`, keyed by the field name."""
    section = markdown.split(f"### {heading} ", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"^\| `(\w+)` \| (.*) \|$", line)
        if match:
            rows[match[1]] = split_cells(match[2])
    return rows


def split_cells(row: str) -> list[str]:
    """Cells of a table row: `|` separates cells except inside a code span or escaped."""
    cells, current, in_code, previous = [], "", False, ""
    for char in row:
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code and previous != "\\":
            cells.append(current.strip())
            current = ""
        else:
            current += char
        previous = char
    return cells + [current.strip()]


def test_readme_is_short_and_has_the_ci_test_line():
    assert len(README.read_bytes()) <= 10 * 1024
    ci_script = (ROOT / ".ci/run").read_text()
    pattern = re.search(r"grep -m1 -E '([^']+)' README.md", ci_script)[1]
    found = subprocess.run(["grep", "-m1", "-E", pattern, str(README)], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "bash scripts/install.sh && bash scripts/test.sh"
    test_script = (ROOT / "scripts/test.sh").read_text()
    assert "pytest" in test_script
    build = next(line for line in test_script.splitlines() if line.startswith(".venv/bin/mkdocs build"))
    # mkdocs 1.6 with -q/--quiet drops warnings before --strict counts them: a broken link would pass.
    assert "--strict" in build and " -q" not in build and "--quiet" not in build


def test_readme_links_point_to_existing_files():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    assert links, "the README links to the docs"
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not missing


def test_learn_reference_lists_every_field_with_its_default_and_description():
    hook = load_hook()
    markdown = hook.render_markers("<!-- config-reference: tfgrpo.learn.config.LearnConfig -->\n")
    rows = table_rows(markdown, "LearnConfig")
    assert list(rows) == list(LearnConfig.model_fields)
    assert rows["data"][1] == "required"
    assert rows["group_size"] == ["`int` ≥ 1", "`5`", LearnConfig.model_fields["group_size"].description]
    assert rows["on_consolidation_failure"][0] == "`'skip' | 'apply_proposed'`"
    assert rows["stage_sampling"][1] == "`{temperature: 0.0, top_p: 1.0, max_tokens: 2048, stop: null, seed: null}`"
    # Nested models link to their own tables, appended once although several fields use them.
    assert "[LLMConfig](#llmconfig)" in rows["llm"][2]
    for nested in ("LLMConfig", "SamplingParams", "StageTemplates", "AgentConfig"):
        assert markdown.count(f"### {nested} {{ #{nested.lower()} }}") == 1
    assert list(table_rows(markdown, "LLMConfig")) == list(LLMConfig.model_fields)


def test_a_model_placed_by_a_marker_is_not_appended_again():
    hook = load_hook()
    markdown = hook.render_markers(
        "<!-- config-reference: tfgrpo.eval.runner.EvalConfig -->\n\n"
        "## Backend\n\n"
        "<!-- config-reference: tfgrpo.llm.config.LLMConfig -->\n"
    )
    assert markdown.count("### LLMConfig ") == 1
    assert markdown.index("## Backend") < markdown.index("### LLMConfig ")
    assert list(table_rows(markdown, "EvalConfig")) == list(EvalConfig.model_fields)


def test_a_stale_marker_fails_the_build_in_one_line():
    hook = load_hook()
    with pytest.raises(hook.ConfigReferenceError, match="cannot import tfgrpo.core.config.NoSuchConfig"):
        hook.render_markers("<!-- config-reference: tfgrpo.core.config.NoSuchConfig -->")
    with pytest.raises(hook.ConfigReferenceError, match="neither a pydantic model nor a dataclass"):
        hook.render_markers("<!-- config-reference: tfgrpo.core.config.read_yaml -->")


def test_finetune_reference_lists_our_fields_and_the_trl_defaults_we_change():
    pytest.importorskip("trl")
    from tfgrpo.finetune.adapters import AdapterArguments

    hook = load_hook()
    markdown = hook.render_markers("<!-- config-reference: tfgrpo.finetune.grpo.GSPOFinetuneConfig -->")
    rows = table_rows(markdown, "GSPOFinetuneConfig")
    assert {"reward", "tools", "max_turns", "epsilon", "beta"} <= set(rows)
    assert len(rows) < 20, "TRL's inherited fields are referred to, not listed"
    assert rows["beta"][1] == "`0.04`" and "TRL's default: `0.0`" in rows["beta"][2]
    note = "Also accepted: the fields of [AdapterArguments](#adapterarguments) and every field of `trl.GRPOConfig`"
    assert note in markdown
    # The shared adapter settings get one table of their own, appended once.
    assert list(table_rows(markdown, "AdapterArguments")) == [f.name for f in dataclasses.fields(AdapterArguments)]
    assert "lora_r" not in rows


def test_cli_reference_lists_every_command_and_its_options():
    hook = load_hook()
    markdown = hook.cli_sections("tfgrpo.cli.app.app")
    commands = re.findall(r"^### `(tfgrpo[\w ]*)`$", markdown, re.MULTILINE)
    assert {"tfgrpo learn", "tfgrpo eval", "tfgrpo finetune", "tfgrpo library diff"} <= set(commands)
    assert "tfgrpo library" in commands and "Sub-commands: `tfgrpo library show`" in markdown
    learn = markdown.split("### `tfgrpo learn`", 1)[1].split("\n### ", 1)[0]
    # help and default come from LearnConfig.group_size, rich markup rendered to plain text as `--help` shows it
    assert (
        "| `-G, --group-size <int>` | G: rollouts per query (1 works, as an ablation: no group to compare). [default: 5] |"
        in learn
    )
    assert "transformers \\| llamacpp" in learn  # a `|` in help text is escaped, so the table keeps its columns
