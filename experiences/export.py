"""Export a library to prompt-ready files, and import experiences back from them or from plain lists.

Every text format goes through the one renderer (`tfgrpo.experiences.render`), so the file holds exactly what
the engine injected while learning:

    txt            the rendered lines, nothing else ([G0]. ... one per line by default)
    md             a heading, a metadata line, then the rendered lines
    system-prompt  a ready chat system message (templates/system_prompt.jinja) with the rendered lines
    json           the library file itself (ids, steps, provenance, counters)
    yaml           the same data as YAML
    skill          an Agent Skill folder, NAME/SKILL.md, for agent hosts that load skills (`skill.py`)
    agents-md      a delimited section of an AGENTS.md file, written in place (`agents_md.py`)

Import reads any of these back. Text formats: lines shaped `[id]. text` keep their ids; when there are
none, every non-empty line (bullets and "1." numbering stripped, markdown headings skipped) becomes
a new experience with a fresh id. JSON/YAML: a library object, a list of strings, or a list of
`{"id", "text"}` objects. A folder, or a file named SKILL.md, is read as a skill; a file named AGENTS.md as
its tfgrpo section.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.core.config import ConfigError, load_yaml_text, yaml_error_line
from tfgrpo.core.textfile import loads_json, read_text
from tfgrpo.experiences.agents_md import read_agents_md, update_agents_md
from tfgrpo.experiences.errors import ImportFormatError, LibraryFileError
from tfgrpo.experiences.model import Library, Provenance, experience_or_error
from tfgrpo.experiences.render import render, render_system_prompt
from tfgrpo.experiences.skill import SKILL_FILE, read_skill, write_skill

ExportFormat = Literal["md", "txt", "json", "yaml", "system-prompt", "skill", "agents-md"]
FORMATS: tuple[str, ...] = ("md", "txt", "json", "yaml", "system-prompt", "skill", "agents-md")
#: the formats written to a place of their own (a folder, a section of a file) rather than as one text
PLACED_FORMATS = ("skill", "agents-md")
_SUFFIXES = {".md": "md", ".markdown": "md", ".txt": "txt", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}
_RENDERED_LINE = re.compile(r"^\s*(?:[-*+]\s+)?\[([^\]\s]+)\]\.?\s+(.+?)\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


def format_from_suffix(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ImportFormatError(
            f"cannot tell the format of {path} from its suffix; pass --format ({', '.join(FORMATS)})"
        )
    return _SUFFIXES[suffix]


def export_text(
    library: Library, fmt: str, *, template: str | Path | None = None, system_template: str | Path | None = None
) -> str:
    """The library in format `fmt` (see the module docstring); `template` overrides the line renderer."""
    if fmt in PLACED_FORMATS:
        raise ImportFormatError(f"{fmt} is written as a folder or into a file, not as one text: use export_library")
    if fmt == "json":
        return library.to_json()
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(library.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=1000)
    rendered = render(library, template=template)
    if fmt == "txt":
        return rendered + "\n"
    if fmt == "md":
        facts = [f"version {library.version}", f"{len(library)} experiences"]
        facts += [f"{key} {value}" for key, value in (("task", library.task), ("model", library.model)) if value]
        return f"# Experience library\n\n_{' · '.join(facts)}_\n\n{rendered}\n"
    if fmt == "system-prompt":
        if not len(library):
            return ""  # what an empty library sends: no system message (tfgrpo.rollout.sampling.PromptSpec)
        return render_system_prompt(library, template=template, system_template=system_template) + "\n"
    raise ImportFormatError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")


def export_library(library: Library, path: str | Path, fmt: str | None = None, **kwargs: Any) -> Path:
    """Write `library` to `path` in `fmt`; the path written (for skill: the skill folder made inside `path`)."""
    path = Path(path)
    fmt = fmt or _placed_format(path) or format_from_suffix(path)
    if fmt == "skill":
        return write_skill(library, path)
    if fmt == "agents-md":
        return update_agents_md(path, library)
    atomic_write_text(path, export_text(library, fmt, **kwargs))
    return path


def import_library(path: str | Path, fmt: str | None = None) -> Library:
    """Read experiences from an exported file or a plain list of lines (format from the suffix by default)."""
    path = Path(path)
    fmt = fmt or _placed_format(path)
    if fmt == "skill":
        lines, fields = read_skill(path)
        library = library_from_lines(lines, source=str(path))
        return library.model_copy(update=fields)
    if not path.is_file():
        raise ImportFormatError(f"file not found: {path}")
    if fmt == "agents-md":
        return library_from_lines(read_agents_md(path), source=str(path))
    if fmt is None:
        fmt = _SUFFIXES.get(path.suffix.lower(), "txt")
    text = read_text(path, error=ImportFormatError)
    if fmt == "json":
        return library_from_data(loads_json(text, source=str(path), error=ImportFormatError), source=str(path))
    if fmt == "yaml":
        import yaml

        try:
            data = load_yaml_text(text)  # the configs' loader: no alias bomb, no silent duplicate key
        except ConfigError as exc:
            raise ImportFormatError(f"{path}: {exc}") from None
        except yaml.YAMLError as exc:
            raise ImportFormatError(f"{path}: {yaml_error_line(exc)}") from None
        return library_from_data(data, source=str(path))
    if fmt in ("md", "txt", "system-prompt"):
        return library_from_lines(text.splitlines(), source=str(path))
    raise ImportFormatError(f"unknown import format {fmt!r}: use one of {', '.join(FORMATS)}")


def _placed_format(path: Path) -> str | None:
    """skill for a folder or a SKILL.md, agents-md for an AGENTS.md; None for the suffix to decide."""
    if path.is_dir() or path.name == SKILL_FILE:
        return "skill"
    return "agents-md" if path.name.lower() == "agents.md" else None


def library_from_data(data: Any, *, source: str = "data") -> Library:
    if isinstance(data, dict):
        return Library.from_data(data, source=source)
    if isinstance(data, list):
        if all(isinstance(item, str) for item in data):
            return Library.from_texts(data, source=source)
        if all(isinstance(item, dict) for item in data):
            return Library.from_data({"experiences": data}, source=source)
    raise ImportFormatError(
        f"{source}: expected a library object, a list of strings, or a list of {{id, text}} objects"
    )


def library_from_lines(lines: list[str], *, source: str = "text") -> Library:
    """`[id]. text` lines if there are any (other lines are prose around them); else one lesson per line."""
    rendered = [(number, match) for number, line in enumerate(lines, start=1) if (match := _RENDERED_LINE.match(line))]
    library = Library()
    if rendered:
        seen: dict[str, int] = {}
        for number, match in rendered:
            experience_id, text = match.group(1), match.group(2)
            if experience_id in seen:
                raise ImportFormatError(
                    f"{source}: line {number}: id {experience_id!r} already used on line {seen[experience_id]}"
                )
            seen[experience_id] = number
            library.experiences.append(
                experience_or_error(
                    source, f"line {number}", id=experience_id, text=text, provenance=Provenance(operation="import")
                )
            )
        try:
            return Library.model_validate(library.model_dump())  # recomputes next_id from the ids read
        except ValueError as exc:
            raise LibraryFileError(f"{source}: {exc}") from None
    texts = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("```"):
            continue
        texts.append(_BULLET.sub("", stripped))
    if not texts:
        raise ImportFormatError(f"{source}: no experiences found (expected '[G0]. text' lines or one lesson per line)")
    return Library.from_texts(texts, source=source)


__all__ = [
    "FORMATS",
    "PLACED_FORMATS",
    "ExportFormat",
    "export_library",
    "export_text",
    "format_from_suffix",
    "import_library",
    "library_from_data",
    "library_from_lines",
]
