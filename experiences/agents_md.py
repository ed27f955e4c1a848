"""A library as a delimited section of an AGENTS.md file, written in place and read back.

AGENTS.md (https://agents.md) is a plain Markdown file that coding agents read as project instructions; its
owners write the rest of it. `tfgrpo export --format agents-md` therefore owns only the lines from BEGIN to
END: the first export appends the section (creating the file if there is none), every later one replaces
it, and every byte outside it stays as it was (line endings included: the section is written with the
file's own). A marker counts only on a line of its own. A file whose markers do not pair up (a BEGIN with no
END, an END first, a second BEGIN) is refused with one line naming the line, not guessed at; a lesson that
contains the marker text is refused too, as it would end the section early at the next export.
"""

from __future__ import annotations

import re
from pathlib import Path

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.core.textfile import read_text
from tfgrpo.experiences.errors import ImportFormatError
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.render import render

MARKER_PREFIX = "<!-- tfgrpo:"
BEGIN = f"{MARKER_PREFIX}begin experiences -->"
END = f"{MARKER_PREFIX}end experiences -->"
_MARKER_LINE = re.compile(rf"^[ \t]*(?P<marker>{re.escape(BEGIN)}|{re.escape(END)})[ \t]*(?=\r?$)", re.MULTILINE)


def section_lines(library: Library) -> list[str]:
    """The section, markers included, one list item per line."""
    facts = [f"version {library.version}", f"{len(library)} experiences"]
    facts += [
        f"{key} {' '.join(value.split())}"
        for key, value in (("task", library.task), ("model", library.model))
        if value
    ]
    body = render(library)
    return [
        BEGIN,
        "## Lessons learned (tfgrpo)",
        "",
        f"_{' · '.join(facts)}. Written by `tfgrpo export --format agents-md`: edits between these markers are "
        "replaced by the next export._",
        "",
        "Each line is one lesson learned from graded attempts at this task; apply those that fit.",
        *([""] + body.split("\n") if body else []),
        END,
    ]


def update_agents_md(path: str | Path, library: Library) -> Path:
    """Write the library's section into `path` (appended, or replacing the one there); the rest kept byte for byte."""
    path = Path(path)
    for experience in library:
        if MARKER_PREFIX in experience.text:
            raise ImportFormatError(
                f"experience {experience.id} contains {MARKER_PREFIX!r}, the AGENTS.md section marker: it would "
                "end the section early; edit that lesson first (tfgrpo library apply)"
            )
    text = read_text(path, error=ImportFormatError) if path.exists() else ""
    newline = "\r\n" if "\r\n" in text else "\n"
    section = newline.join(section_lines(library))
    span = _section_span(text, path)
    if span is None:
        joint = "" if not text else (newline if text.endswith("\n") else newline * 2)
        updated = f"{text}{joint}{section}{newline}"
    else:
        updated = text[: span[0]] + section + text[span[1] :]
    atomic_write_text(path, updated)
    return path


def read_agents_md(path: str | Path) -> list[str]:
    """The lines inside the section of `path` (markers excluded); ImportFormatError when it has none."""
    path = Path(path)
    text = read_text(path, error=ImportFormatError)
    span = _section_span(text, path)
    if span is None:
        raise ImportFormatError(f"{path}: no tfgrpo section in it (a line {BEGIN} ... a line {END})")
    return text[span[0] : span[1]].splitlines()[1:-1]


def _section_span(text: str, path: Path) -> tuple[int, int] | None:
    """(start of the BEGIN line's marker, end of the END marker), None when the file has neither marker."""
    markers = list(_MARKER_LINE.finditer(text))
    if not markers:
        return None
    kinds = [match.group("marker") for match in markers]
    if kinds == [BEGIN, END]:
        return markers[0].start(), markers[1].end()
    if kinds[0] == END:
        problem = f"{END} comes before any {BEGIN}"
        at = markers[0]
    elif kinds == [BEGIN]:
        problem, at = f"{BEGIN} has no {END} line after it", markers[0]
    else:
        at = markers[2] if len(markers) > 2 else markers[1]
        problem = f"a second tfgrpo marker ({at.group('marker')}); the file may hold one section"
    line = text.count("\n", 0, at.start()) + 1
    raise ImportFormatError(f"{path}: line {line}: {problem}; fix the markers by hand (nothing was changed)")


__all__ = ["BEGIN", "END", "MARKER_PREFIX", "read_agents_md", "section_lines", "update_agents_md"]
