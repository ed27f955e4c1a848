"""The one renderer, injection specs, export/import in every format, and the `tfgrpo library` / `export` /
`import` commands end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tfgrpo.cli.app import app, main
from tfgrpo.experiences import (
    AddOp,
    ExperienceError,
    Injection,
    Library,
    apply_operations,
    export_text,
    import_library,
    render,
)
from tfgrpo.experiences.errors import ImportFormatError
from tfgrpo.experiences.export import library_from_lines

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def library() -> Library:
    lib = Library.from_texts(
        ["Check the domain.", "Simplify fractions.", "Verify roots."], task="math", model="smollm2"
    )
    return apply_operations(lib, [AddOp(experience="Draw a diagram.")], step=2).library


# -- render & injection ------------------------------------------------------------------------------
def test_default_render_is_id_text_lines(library: Library) -> None:
    assert (
        render(library)
        == "[G0]. Check the domain.\n[G1]. Simplify fractions.\n[G2]. Verify roots.\n[G3]. Draw a diagram."
    )
    assert render(Library()) == ""


def test_render_subset_and_custom_template(library: Library, tmp_path: Path) -> None:
    subset = [library.get("G2"), library.get("G0")]
    assert render(library, experiences=subset) == "[G2]. Verify roots.\n[G0]. Check the domain."
    template = tmp_path / "t.jinja"
    template.write_text("{% for e in experiences %}* {{ e.text }} ({{ e.id }}, v{{ library.version }})\n{% endfor %}")
    assert render(library, template=template).splitlines()[0] == "* Check the domain. (G0, v1)"
    assert render(library, template="{{ experiences | length }} lessons") == "4 lessons"


def test_bad_templates_are_clear_errors(library: Library, tmp_path: Path) -> None:
    with pytest.raises(ExperienceError, match="line 1"):
        render(library, template="{% for e in experiences %}")
    with pytest.raises(ExperienceError, match="not found"):
        render(library, template=tmp_path / "missing.jinja")


@pytest.mark.parametrize(
    ("spec", "mode", "k"),
    [
        ("all", "all", None),
        ("ALL", "all", None),
        (None, "all", None),
        ("none", "none", None),
        ("topk:8", "topk", 8),
        (" topk:1 ", "topk", 1),
    ],
)
def test_injection_specs(spec, mode, k) -> None:
    injection = Injection.parse(spec)
    assert (injection.mode, injection.k) == (mode, k)
    assert Injection.parse(str(injection)) == injection


@pytest.mark.parametrize("spec", ["topk", "topk:0", "topk:x", "top:3", "some", "topk:-2"])
def test_bad_injection_specs(spec) -> None:
    with pytest.raises(ExperienceError, match="topk:K"):
        Injection.parse(spec)


def test_injection_all_none_and_small_library(library: Library) -> None:
    assert Injection.parse("all").render(library) == render(library)
    assert Injection.parse("none").render(library) == ""
    assert Injection.parse("topk:10").render(library, query="anything") == render(library)  # fits: no store needed
    with pytest.raises(ExperienceError, match="vector store"):
        Injection.parse("topk:2").select(library, query="q")
    with pytest.raises(ExperienceError, match="needs K"):  # built directly, without K: one line, not a TypeError
        Injection(mode="topk").select(library, query="q", store=object())  # type: ignore[arg-type]


# -- export / import -------------------------------------------------------------------------------------
def test_text_exports_contain_exactly_the_rendered_library(library: Library) -> None:
    rendered = render(library)
    assert export_text(library, "txt") == rendered + "\n"
    md = export_text(library, "md")
    assert md.startswith("# Experience library") and rendered in md and "version 1" in md and "task math" in md
    system = export_text(library, "system-prompt")
    assert rendered in system and system.startswith("You are")


@pytest.mark.parametrize("fmt", ["md", "txt", "json", "yaml", "system-prompt"])
def test_round_trip_every_format(library: Library, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"lib.{ {'system-prompt': 'prompt.txt'}.get(fmt, fmt) }"
    path.write_text(export_text(library, fmt))
    back = import_library(path, fmt)
    assert [(e.id, e.text) for e in back] == [(e.id, e.text) for e in library]
    if fmt in ("json", "yaml"):
        assert back == library  # everything kept: steps, provenance, counters, version
    assert back.allocate_id() == "G4"


def test_yaml_export_is_plain_data(library: Library) -> None:
    data = yaml.safe_load(export_text(library, "yaml"))
    assert data["version"] == 1 and data["experiences"][3]["created_step"] == 2


def test_import_plain_line_lists(tmp_path: Path) -> None:
    path = tmp_path / "tips.txt"
    path.write_text("# My tips\n\n- Check the domain.\n* Simplify fractions.\n3. Verify roots.\nDraw a diagram.\n")
    lib = import_library(path)
    assert [(e.id, e.text) for e in lib] == [
        ("G0", "Check the domain."),
        ("G1", "Simplify fractions."),
        ("G2", "Verify roots."),
        ("G3", "Draw a diagram."),
    ]
    assert lib.get("G0").provenance.operation == "import"


def test_import_json_lists(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(["one", "two"]))
    assert import_library(tmp_path / "a.json").ids == ["G0", "G1"]
    (tmp_path / "b.json").write_text(json.dumps([{"id": "X1", "text": "one"}]))
    assert import_library(tmp_path / "b.json").ids == ["X1"]
    (tmp_path / "c.json").write_text("42")
    with pytest.raises(ImportFormatError, match="expected a library object"):
        import_library(tmp_path / "c.json")


def test_import_errors_name_the_line() -> None:
    with pytest.raises(ImportFormatError, match="line 3: id 'G0' already used on line 1"):
        library_from_lines(["[G0]. a", "prose", "[G0]. b"])
    with pytest.raises(ImportFormatError, match="no experiences found"):
        library_from_lines(["# heading only", ""])


# -- CLI ---------------------------------------------------------------------------------------------------
runner = CliRunner()


def _write_library(tmp_path: Path) -> Path:
    path = tmp_path / "library.json"
    path.write_text(
        json.dumps(
            {
                "version": 0,
                "experiences": [{"id": "G0", "text": "Check bounds."}, {"id": "G1", "text": "Simplify first."}],
            }
        )
    )
    return path


def test_cli_apply_history_diff_rollback(tmp_path: Path) -> None:
    lib_path = _write_library(tmp_path)
    reply = tmp_path / "reply.txt"
    reply.write_text(
        '<think>hmm</think>\n```json\n[{"operation": "ADD", "content": "Verify by substitution."},'
        ' {"option": "modify", "id": "G1", "experience": "Simplify fractions first."}, {"option": "delete", "id": "G7"}]\n```'
    )
    result = runner.invoke(app, ["library", "apply", str(lib_path), str(reply), "--step", "3"])
    assert result.exit_code == 0, result.output
    assert "applied" in result.output and "-> G2" in result.output
    assert "rejected item 3" in result.output and "unknown id 'G7'" in result.output
    lib = Library.load(lib_path)
    assert lib.version == 1 and lib.ids == ["G0", "G1", "G2"] and lib.get("G2").created_step == 3

    result = runner.invoke(app, ["library", "history", str(lib_path), "--ops"])
    assert result.exit_code == 0 and "baseline" in result.output and "rejected" in result.output

    result = runner.invoke(app, ["library", "diff", str(lib_path), "--from", "0", "--to", "1"])
    assert "+ [G2]. Verify by substitution." in result.output and "~ [G1]. Simplify first." in result.output

    result = runner.invoke(app, ["library", "rollback", str(lib_path), "--to", "0"])
    assert result.exit_code == 0 and "version 2" in result.output
    assert Library.load(lib_path).ids == ["G0", "G1"] and Library.load(lib_path).version == 2

    result = runner.invoke(app, ["library", "show", str(lib_path)])
    assert result.exit_code == 0 and "Check bounds." in result.output
    result = runner.invoke(app, ["library", "show", str(lib_path), "--rendered"])
    assert result.output.strip() == "[G0]. Check bounds.\n[G1]. Simplify first."


def test_cli_apply_budget_and_dry_run(tmp_path: Path) -> None:
    lib_path = _write_library(tmp_path)
    reply = tmp_path / "reply.txt"
    reply.write_text('[{"option": "add", "experience": "New one."}]')
    result = runner.invoke(app, ["library", "apply", str(lib_path), str(reply), "--dry-run"])
    assert "[dry run]" in result.output and Library.load(lib_path).version == 0
    result = runner.invoke(app, ["library", "apply", str(lib_path), str(reply), "--max-items", "2"])
    assert "evicted  [G0]" in result.output and Library.load(lib_path).ids == ["G1", "G2"]


def test_cli_apply_garbage_reply_changes_nothing(tmp_path: Path) -> None:
    lib_path = _write_library(tmp_path)
    reply = tmp_path / "reply.txt"
    reply.write_text("I have no suggestions.")
    result = runner.invoke(app, ["library", "apply", str(lib_path), str(reply)])
    assert result.exit_code == 0 and "no operations found" in result.output and "unchanged" in result.output
    assert not (tmp_path / "library.history").exists()


def test_cli_export_import(tmp_path: Path) -> None:
    lib_path = _write_library(tmp_path)
    out = tmp_path / "prompt.txt"
    result = runner.invoke(app, ["export", str(lib_path), "--format", "system-prompt", "--out", str(out)])
    assert result.exit_code == 0 and "[G1]. Simplify first." in out.read_text()
    result = runner.invoke(app, ["export", str(lib_path), "--out", str(tmp_path / "lib.yaml")])
    assert (
        result.exit_code == 0 and yaml.safe_load((tmp_path / "lib.yaml").read_text())["experiences"][0]["id"] == "G0"
    )
    back = tmp_path / "back.json"
    result = runner.invoke(app, ["import", str(out), "--out", str(back)])
    assert result.exit_code == 0 and Library.load(back).ids == ["G0", "G1"]
    result = runner.invoke(app, ["import", str(out), "--out", str(back)])
    assert result.exit_code != 0  # exists, no --force


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "experiences": [{"id": "G0"}]}')
    with pytest.raises(SystemExit) as info:
        main(["library", "show", str(bad)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "experiences[0].text: required key is missing" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["export", str(bad.with_name("none.json")), "--out", str(tmp_path / "x.md")])
    assert "library file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", str(_write_library(tmp_path)), "--out", str(tmp_path / "x.docx")])
    assert "pass --format" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"), [("--max-items", "0"), ("--step", "-5"), ("--max-words", "-1"), ("--max-prompt-tokens", "0")]
)
def test_cli_apply_refuses_meaningless_limits(tmp_path: Path, option: str, value: str) -> None:
    lib_path = _write_library(tmp_path)
    reply = tmp_path / "reply.txt"
    reply.write_text('[{"option": "add", "experience": "New one."}]')
    result = runner.invoke(app, ["library", "apply", str(lib_path), str(reply), option, value])
    assert result.exit_code == 2 and "Invalid value" in result.output
    assert Library.load(lib_path).version == 0 and not (tmp_path / "library.history").exists()


def test_cli_apply_exits_1_when_every_operation_is_rejected(tmp_path: Path) -> None:
    lib_path = _write_library(tmp_path)
    reply = tmp_path / "reply.txt"
    reply.write_text('[{"option": "delete", "id": "G7"}, {"option": "modify", "id": "G9", "experience": "Nope."}]')
    result = runner.invoke(app, ["library", "apply", str(lib_path), str(reply)])
    assert result.exit_code == 1 and "unknown id 'G7'" in result.output and "unchanged" in result.output
    assert Library.load(lib_path).version == 0
