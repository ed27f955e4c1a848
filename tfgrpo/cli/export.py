"""`tfgrpo export` / `tfgrpo import`: a library to prompt-ready files and back (same renderer as learning)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tfgrpo.cli.lazy import listed

FORMAT_HELP = (
    "md | txt | json | yaml | system-prompt | skill (an Agent Skill folder made inside --out) | agents-md (a "
    "section of the --out AGENTS.md, replaced in place) (default: from --out: a folder is skill, AGENTS.md is "
    "agents-md, else its suffix)."
)
CREDIT_FILTERS = {
    "all": ("helps", "hurts", "unclear", "untested"),
    "not-hurting": ("helps", "unclear", "untested"),
    "helps": ("helps",),
}
IMPORT_FORMAT_HELP = (
    "md | txt | json | yaml | system-prompt | skill | agents-md; txt also reads a plain list of lines (default: a "
    "folder or SKILL.md is skill, AGENTS.md is agents-md, else the source file's suffix)."
)


def register(app: typer.Typer) -> None:
    @listed(app, "export")
    def export(
        library_path: Annotated[Path, typer.Argument(help="Library JSON file.", show_default=False)],
        out: Annotated[
            Path, typer.Option("--out", "-o", help="File to write (skill: the folder to make the skill folder in).")
        ],
        fmt: Annotated[str | None, typer.Option("--format", "-f", help=FORMAT_HELP)] = None,
        template: Annotated[
            Path | None,
            typer.Option(
                "--template", help="Jinja template for the experience lines (sees `experiences`, `library`)."
            ),
        ] = None,
        system_template: Annotated[
            Path | None,
            typer.Option(
                "--system-template", help="Jinja template of the system prompt (sees `rendered`, `library`)."
            ),
        ] = None,
        credit: Annotated[
            str,
            typer.Option(
                "--credit",
                help="Which experiences to ship by their measured credit: all | not-hurting (leave out those "
                "whose interval lies below 0) | helps (only those whose interval lies above 0).",
            ),
        ] = "all",
    ) -> None:
        from tfgrpo.core.atomic import file_target, folder_target
        from tfgrpo.experiences import Library, export_library
        from tfgrpo.experiences.errors import ExperienceError

        if credit not in CREDIT_FILTERS:
            raise typer.BadParameter(f"--credit must be one of {', '.join(CREDIT_FILTERS)}, not {credit!r}")
        if fmt == "skill" or (fmt is None and out.is_dir()):
            folder_target(out, ExperienceError)
        else:
            file_target(out, ExperienceError)
        library = Library.load(library_path)
        kept = [e for e in library if e.credit.verdict() in CREDIT_FILTERS[credit]]
        left = len(library) - len(kept)
        library.experiences = kept
        path = export_library(library, out, fmt, template=template, system_template=system_template)
        typer.echo(
            f"wrote {path} ({len(library)} experiences, version {library.version})"
            + (f"; {left} left out by --credit {credit}" if left else "")
        )

    @listed(app, "import")
    def import_command(
        source: Annotated[
            Path,
            typer.Argument(
                help="An exported file or skill folder, an AGENTS.md, or a plain text file with one lesson per line.",
                show_default=False,
            ),
        ],
        out: Annotated[Path, typer.Option("--out", "-o", help="Library JSON file to write.")],
        fmt: Annotated[str | None, typer.Option("--format", "-f", help=IMPORT_FORMAT_HELP)] = None,
        force: Annotated[bool | None, typer.Option("--force", help="Overwrite --out if it exists.")] = None,
    ) -> None:
        from tfgrpo.core.atomic import file_target
        from tfgrpo.experiences import import_library
        from tfgrpo.experiences.errors import ExperienceError

        if file_target(out, ExperienceError).exists() and not force:
            raise ExperienceError(f"{out} exists; pass --force to overwrite it")
        library = import_library(source, fmt)
        library.save(out)
        typer.echo(f"wrote {out} ({len(library)} experiences)")
