"""A library as an Agent Skill folder (`NAME/SKILL.md`), and back.

The format is the open Agent Skills specification, https://agentskills.io/specification (source:
github.com/agentskills/agentskills, docs/specification.mdx; its reference validator is `skills-ref`,
skills-ref/src/skills_ref/validator.py). What it requires, and `skill_problems` checks:

    frontmatter  YAML between `---` lines at the top of SKILL.md, keys only from FRONTMATTER_KEYS
    name         1-64 characters, lowercase letters, digits and hyphens, no leading, trailing or double
                 hyphen, equal to the name of the folder holding SKILL.md
    description  1-1024 characters, what the skill does and when to use it
    metadata     a map of string keys to string values
    compatibility  at most 500 characters

The name and description are derived from the library (its task, model, size and version; `skill_name`,
`skill_description`); the body is the rendered library (the lines the engine injected while learning,
`[G0]. text`), so `import` reads the ids back. The spec asks for a SKILL.md under 500 lines, loaded whole
when the skill is activated, and puts longer material in `references/`, loaded on demand: a library of
more than `BODY_EXPERIENCES` lessons keeps its first ones in SKILL.md and the rest in
`references/lessons-N.md` files, each linked from SKILL.md.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

import yaml

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.core.config import ConfigError, load_yaml_text, yaml_error_line
from tfgrpo.core.textfile import read_text
from tfgrpo.experiences.errors import ImportFormatError
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.render import render

SKILL_FILE = "SKILL.md"
NAME_MAX_CHARS = 64
DESCRIPTION_MAX_CHARS = 1024
COMPATIBILITY_MAX_CHARS = 500
FRONTMATTER_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
#: lessons kept in SKILL.md itself (one line each: far under the spec's 500-line guideline); the rest go to references/
BODY_EXPERIENCES = 200
NAME_SUFFIX = "-lessons"
#: the metadata keys tfgrpo writes (prefixed: the spec asks for names unlikely to clash with other tools')
META_TASK, META_MODEL, META_VERSION = "tfgrpo-task", "tfgrpo-model", "tfgrpo-library-version"
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_SEPARATOR = re.compile(r"-{3,}")
_LINKED = re.compile(r"\]\((references/[A-Za-z0-9._-]+\.md)\)")


def skill_name(library: Library) -> str:
    """`<task>-lessons` (`lessons` alone without a task), as a valid skill name: ASCII, lowercase, hyphens."""
    ascii_task = unicodedata.normalize("NFKD", library.task or "").encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_task.lower()).strip("-")
    slug = slug[: NAME_MAX_CHARS - len(NAME_SUFFIX)].rstrip("-")
    return f"{slug}{NAME_SUFFIX}" if slug else NAME_SUFFIX.lstrip("-")


def skill_description(library: Library) -> str:
    """What the skill holds and when to use it, at most DESCRIPTION_MAX_CHARS characters."""
    task = _frontmatter_value(library.task or "this task", 300)
    model = f" with {_frontmatter_value(library.model, 200)}" if library.model else ""
    text = (
        f"Lessons learned for {task} by Training-Free GRPO (tfgrpo){model}: {len(library)} experiences, "
        f"library version {library.version}. Use when working on {task}: read the lessons before answering "
        "and apply those that fit."
    )
    return text[:DESCRIPTION_MAX_CHARS]


def skill_problems(frontmatter: Any, folder_name: str | None) -> list[str]:
    """What in `frontmatter` breaks the spec (module docstring); [] when it is a valid skill."""
    if not isinstance(frontmatter, dict):
        return ["the frontmatter is not a YAML mapping"]
    problems = []
    unknown = sorted(str(key) for key in frontmatter if key not in FRONTMATTER_KEYS)
    if unknown:
        problems.append(
            f"frontmatter keys not in the spec: {', '.join(unknown)} (allowed: {', '.join(sorted(FRONTMATTER_KEYS))})"
        )
    name = frontmatter.get("name")
    if not isinstance(name, str) or not name:
        problems.append("name is missing or not a string")
    else:
        if len(name) > NAME_MAX_CHARS:
            problems.append(f"name is {len(name)} characters (at most {NAME_MAX_CHARS})")
        if not _valid_name(name):
            problems.append(
                f"name {name!r} must be lowercase letters, digits and single hyphens, no hyphen at either end"
            )
        if folder_name is not None and unicodedata.normalize("NFKC", folder_name) != name:
            problems.append(f"name {name!r} differs from its folder's name {folder_name!r}")
    description = frontmatter.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("description is missing or empty")
    elif len(description) > DESCRIPTION_MAX_CHARS:
        problems.append(f"description is {len(description)} characters (at most {DESCRIPTION_MAX_CHARS})")
    compatibility = frontmatter.get("compatibility")
    if compatibility is not None and (
        not isinstance(compatibility, str) or len(compatibility) > COMPATIBILITY_MAX_CHARS
    ):
        problems.append(f"compatibility must be a string of at most {COMPATIBILITY_MAX_CHARS} characters")
    if any("---" in value for value in _strings(frontmatter)):
        problems.append("a value holds '---', which ends the frontmatter for parsers that split on it")
    metadata = frontmatter.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        problems.append("metadata must map strings to strings")
    return problems


def write_skill(library: Library, skills_dir: str | Path) -> Path:
    """Write the skill folder `skills_dir/<skill_name>/` (SKILL.md, references/ for a large library); its path."""
    name = skill_name(library)
    folder = Path(skills_dir) / name
    frontmatter = {
        "name": name,
        "description": skill_description(library),
        "metadata": {
            key: value
            for key, value in (
                (META_TASK, _frontmatter_value(library.task or "", 1000)),
                (META_MODEL, _frontmatter_value(library.model or "", 1000)),
                (META_VERSION, str(library.version)),
            )
            if value
        },
    }
    problems = skill_problems(frontmatter, name)
    if problems:  # the derivations above make valid values; this guards them against a future edit
        raise ImportFormatError(f"the skill {name!r} would break the Agent Skills spec: {'; '.join(problems)}")
    head, rest = library.experiences[:BODY_EXPERIENCES], library.experiences[BODY_EXPERIENCES:]
    chunks = [rest[start : start + BODY_EXPERIENCES] for start in range(0, len(rest), BODY_EXPERIENCES)]
    references = [f"references/lessons-{number}.md" for number in range(2, len(chunks) + 2)]
    body = [f"# {_one_line(library.task or 'Task', 200)}: lessons learned", "", _usage_line(library), ""]
    if head:
        body += [render(library, experiences=head), ""]
    if references:
        body += ["More lessons, to read when those above do not cover the task:", ""]
        body += [f"- [{Path(path).stem}]({path})" for path in references] + [""]
    dumped = yaml.safe_dump(frontmatter, sort_keys=False, allow_unicode=True, width=10_000)
    atomic_write_text(folder / SKILL_FILE, f"---\n{dumped}---\n\n" + "\n".join(body))
    for path, chunk in zip(references, chunks, strict=True):
        atomic_write_text(folder / path, f"# {Path(path).stem}\n\n{render(library, experiences=chunk)}\n")
    for stale in sorted((folder / "references").glob("lessons-*.md")):
        if f"references/{stale.name}" not in references:  # left by an export of a larger version
            stale.unlink()
    return folder


def read_skill(path: str | Path) -> tuple[list[str], dict[str, str]]:
    """The lesson lines of a skill folder (or its SKILL.md; linked reference files included) and the library
    fields its metadata names (task, model); ImportFormatError, one line, for a file that is not a valid skill."""
    path = Path(path)
    skill_md = path / SKILL_FILE if path.is_dir() else path
    if not skill_md.is_file():
        raise ImportFormatError(f"{path}: no {SKILL_FILE} in it (an Agent Skill folder holds one)")
    text = read_text(skill_md, error=ImportFormatError)
    match = _FRONTMATTER.match(text)
    if match is None:
        raise ImportFormatError(
            f"{skill_md}: no YAML frontmatter between '---' lines at the top (an Agent Skill needs one)"
        )
    try:
        frontmatter = load_yaml_text(match.group(1))
    except ConfigError as exc:
        raise ImportFormatError(f"{skill_md}: frontmatter: {exc}") from None
    except yaml.YAMLError as exc:
        raise ImportFormatError(f"{skill_md}: frontmatter is {yaml_error_line(exc)}") from None
    problems = skill_problems(frontmatter, skill_md.parent.name)
    if problems:
        raise ImportFormatError(f"{skill_md}: not a valid Agent Skill: {'; '.join(problems)}")
    lines = text[match.end() :].splitlines()
    for linked in _LINKED.findall(text[match.end() :]):
        reference = skill_md.parent / linked
        if reference.is_file():
            lines += read_text(reference, error=ImportFormatError).splitlines()
    metadata = frontmatter.get("metadata") or {}
    fields = {"task": metadata.get(META_TASK), "model": metadata.get(META_MODEL)}
    return lines, {key: value for key, value in fields.items() if value}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _valid_name(name: str) -> bool:
    # the spec allows unicode lowercase letters; the validator's own test is `isalnum()` after NFKC
    normal = unicodedata.normalize("NFKC", name)
    if normal != normal.lower() or normal.startswith("-") or normal.endswith("-") or "--" in normal:
        return False
    return all(character.isalnum() or character == "-" for character in normal)


def _usage_line(library: Library) -> str:
    return (
        "Each line below is one lesson, learned from graded attempts at this task "
        f"(library version {library.version}); apply those that fit the problem at hand."
    )


def _one_line(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def _frontmatter_value(text: str, limit: int) -> str:
    """One line without '---': the reference parser (skills-ref) ends the frontmatter at the first '---'."""
    return _SEPARATOR.sub("--", _one_line(text, limit))


__all__ = [
    "BODY_EXPERIENCES",
    "FRONTMATTER_KEYS",
    "SKILL_FILE",
    "read_skill",
    "skill_description",
    "skill_name",
    "skill_problems",
    "write_skill",
]
