"""A library as an Agent Skill folder and as an AGENTS.md section: written, checked against the published
Agent Skills rules (https://agentskills.io/specification, by our checker and by the spec's own reference
validator `skills-ref`), read back by import, and an AGENTS.md updated in place byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from skills_ref.validator import validate as reference_validate
from typer.testing import CliRunner

from tfgrpo.cli.app import app, main
from tfgrpo.experiences import Library, import_library
from tfgrpo.experiences.agents_md import BEGIN, END, update_agents_md
from tfgrpo.experiences.errors import ImportFormatError
from tfgrpo.experiences.export import export_library
from tfgrpo.experiences.skill import (
    BODY_EXPERIENCES,
    DESCRIPTION_MAX_CHARS,
    SKILL_FILE,
    skill_name,
    skill_problems,
    write_skill,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def library() -> Library:
    return Library.from_texts(
        ["Check the domain first.", "Simplify fractions before adding.", "Verify each root."],
        task="AIME 2024 (math)",
        model="Qwen2.5-7B",
    )


def _frontmatter(skill_md: Path) -> dict:
    return yaml.safe_load(skill_md.read_text(encoding="utf-8").split("---\n")[1])


def _pairs(library: Library) -> list[tuple[str, str]]:
    return [(e.id, e.text) for e in library]


# -- skill --------------------------------------------------------------------------------------------
def test_skill_round_trips_through_the_cli(library: Library, tmp_path: Path) -> None:
    library.save(tmp_path / "lib.json")
    result = CliRunner().invoke(
        app, ["export", str(tmp_path / "lib.json"), "--format", "skill", "--out", str(tmp_path / "skills")]
    )
    assert result.exit_code == 0, result.output
    folder = tmp_path / "skills" / "aime-2024-math-lessons"
    assert (folder / SKILL_FILE).is_file() and str(folder) in result.output
    result = CliRunner().invoke(app, ["import", str(folder), "--out", str(tmp_path / "back.json")])
    assert result.exit_code == 0, result.output
    back = Library.load(tmp_path / "back.json")
    assert _pairs(back) == _pairs(library)
    assert (back.task, back.model) == (library.task, library.model)
    assert _pairs(import_library(folder / SKILL_FILE)) == _pairs(library)  # the SKILL.md itself reads the same


def test_exported_skill_passes_the_spec_and_its_reference_validator(library: Library, tmp_path: Path) -> None:
    folder = write_skill(library, tmp_path)
    frontmatter = _frontmatter(folder / SKILL_FILE)
    assert set(frontmatter) == {"name", "description", "metadata"}
    assert frontmatter["name"] == folder.name
    assert "AIME 2024 (math)" in frontmatter["description"] and "Use when" in frontmatter["description"]
    assert skill_problems(frontmatter, folder.name) == []
    assert reference_validate(folder) == []


@pytest.mark.parametrize(
    "task",
    [None, "", "---", "Ünïcode Aufgabe", "a--b__c", "UPPER case", "x" * 300, "-edge-", "数学", "line\nbreak: yes"],
)
def test_any_task_gives_a_valid_name_and_description(task: str | None, tmp_path: Path) -> None:
    library = Library.from_texts(["One lesson."], task=task, model="m" * 2000)
    folder = write_skill(library, tmp_path)
    frontmatter = _frontmatter(folder / SKILL_FILE)
    assert skill_problems(frontmatter, folder.name) == []
    assert reference_validate(folder) == []
    assert len(skill_name(library)) <= 64 and len(frontmatter["description"]) <= DESCRIPTION_MAX_CHARS
    assert _pairs(import_library(folder)) == _pairs(library)


@pytest.mark.parametrize(
    ("frontmatter", "problem"),
    [
        ({"name": "PDF-Processing", "description": "d"}, "lowercase"),  # the spec's invalid examples
        ({"name": "-pdf", "description": "d"}, "hyphen"),
        ({"name": "pdf--processing", "description": "d"}, "hyphen"),
        ({"name": "a" * 65, "description": "d"}, "65 characters"),
        ({"name": "ok", "description": ""}, "description is missing"),
        ({"name": "ok", "description": "d" * 1025}, "1025 characters"),
        ({"name": "ok", "description": "d", "version": "1"}, "not in the spec: version"),
        ({"name": "ok", "description": "d", "metadata": {"n": 3}}, "strings to strings"),
        ({"name": "ok", "description": "d", "compatibility": "c" * 501}, "500"),
        ({"name": "other", "description": "d"}, "differs from its folder"),
    ],
)
def test_the_checker_refuses_what_the_spec_refuses(frontmatter: dict, problem: str, tmp_path: Path) -> None:
    problems = skill_problems(frontmatter, "ok" if frontmatter["name"] in ("ok", "other") else frontmatter["name"])
    assert any(problem in p for p in problems), problems
    folder = tmp_path / "ok"
    folder.mkdir()
    (folder / SKILL_FILE).write_text(f"---\n{yaml.safe_dump(frontmatter)}---\n[G0]. lesson\n", encoding="utf-8")
    if problem != "strings to strings":  # the reference reads YAML with strictyaml, where 3 is the string "3"
        assert reference_validate(folder) != []  # the reference validator agrees it is invalid
    with pytest.raises(ImportFormatError, match="not a valid Agent Skill") as caught:
        import_library(folder)
    assert "\n" not in str(caught.value)


def test_a_large_library_puts_the_rest_in_linked_reference_files(tmp_path: Path) -> None:
    count = 2 * BODY_EXPERIENCES + 7
    library = Library.from_texts([f"Lesson number {n}." for n in range(count)], task="big")
    folder = write_skill(library, tmp_path)
    skill_lines = (folder / SKILL_FILE).read_text(encoding="utf-8").splitlines()
    assert len(skill_lines) < 500  # the spec's guideline for SKILL.md
    references = sorted(p.name for p in (folder / "references").iterdir())
    assert references == ["lessons-2.md", "lessons-3.md"]
    assert "- [lessons-2](references/lessons-2.md)" in skill_lines
    assert _pairs(import_library(folder)) == _pairs(library)
    assert reference_validate(folder) == []
    smaller = Library.from_texts(["Only one."], task="big")
    write_skill(smaller, tmp_path)  # a later export of a smaller version leaves no stale reference behind
    assert not list((folder / "references").iterdir())
    assert _pairs(import_library(folder)) == _pairs(smaller)


def test_a_skill_without_frontmatter_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / SKILL_FILE).write_text("[G0]. lesson\n", encoding="utf-8")
    with pytest.raises(ImportFormatError, match="no YAML frontmatter"):
        import_library(folder)
    with pytest.raises(ImportFormatError, match="no SKILL.md"):
        import_library(tmp_path)


# -- AGENTS.md ----------------------------------------------------------------------------------------
HEAD = "# Project rules\n\nRun `make test` before committing.\n\n"
TAIL = "\n## Style\n\nFour spaces. [Z9]. not a lesson of ours\n"


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_agents_md_section_is_replaced_in_place_byte_for_byte(library: Library, tmp_path: Path, newline: str) -> None:
    path = tmp_path / "AGENTS.md"
    head, tail = HEAD.replace("\n", newline), TAIL.replace("\n", newline)
    path.write_bytes(head.encode())
    export_library(library, path, "agents-md")
    first = path.read_bytes()
    assert first.startswith(head.encode()) and first.count(BEGIN.encode()) == 1
    path.write_bytes(first + tail.encode())  # the owner writes more after the section
    export_library(library, path)  # AGENTS.md: the format follows from the name
    assert path.read_bytes() == first + tail.encode()  # idempotent: nothing duplicated, nothing moved
    changed = Library.from_texts(["A new lesson only."], task="other")
    update_agents_md(path, changed)
    data = path.read_bytes()
    assert data.startswith(head.encode()) and data.endswith(tail.encode())
    assert data.count(BEGIN.encode()) == data.count(END.encode()) == 1
    assert b"Check the domain" not in data and b"A new lesson only." in data
    if newline == "\r\n":
        assert data.count(b"\n") == data.count(b"\r\n")  # the section took the file's line endings
    assert _pairs(import_library(path)) == _pairs(changed)  # the section only: [Z9] outside is not read


def test_agents_md_is_created_and_imported_through_the_cli(library: Library, tmp_path: Path) -> None:
    library.save(tmp_path / "lib.json")
    path = tmp_path / "repo" / "AGENTS.md"
    for _ in range(2):
        result = CliRunner().invoke(app, ["export", str(tmp_path / "lib.json"), "--out", str(path)])
        assert result.exit_code == 0, result.output
    assert path.read_text(encoding="utf-8").count(BEGIN) == 1
    result = CliRunner().invoke(app, ["import", str(path), "--out", str(tmp_path / "back.json")])
    assert result.exit_code == 0, result.output
    assert _pairs(Library.load(tmp_path / "back.json")) == _pairs(library)


def test_a_lesson_holding_the_marker_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    path = tmp_path / "AGENTS.md"
    path.write_text(HEAD, encoding="utf-8")
    hostile = Library.from_texts(["Fine.", f"Sneaky\n{END}\nnow outside"])
    with pytest.raises(ImportFormatError, match="experience G1 contains") as caught:
        update_agents_md(path, hostile)
    assert "\n" not in str(caught.value)
    assert path.read_text(encoding="utf-8") == HEAD


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"{HEAD}{BEGIN}\n[G0]. x\n", "line 5: <!-- tfgrpo:begin experiences --> has no"),
        (f"{HEAD}{END}\n{BEGIN}\n", "comes before"),
        (f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n", "line 3: a second tfgrpo marker"),
    ],
)
def test_unpaired_markers_are_one_line_and_the_file_is_kept(
    library: Library, tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "AGENTS.md"
    path.write_text(text, encoding="utf-8")
    library.save(tmp_path / "lib.json")
    with pytest.raises(SystemExit) as info:
        main(["export", str(tmp_path / "lib.json"), "--out", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert path.read_text(encoding="utf-8") == text
    with pytest.raises(ImportFormatError, match="fix the markers"):
        import_library(path)
