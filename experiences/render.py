"""The one renderer: how a library (or a subset of it) looks inside a prompt, for learning, eval and export.

Default: one `[id]. text` line per experience, from `templates/library.jinja`. Pass `template=` (Jinja
source text or a path to a file) to change it; the template sees `experiences` (the list to show) and
`library`. `Injection` says which experiences a prompt gets: all of them, none, or the K nearest to
the query in the vector store (`topk:8`), for libraries that have outgrown the prompt.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from tfgrpo.core.textfile import read_text
from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.model import Experience, Library

if TYPE_CHECKING:
    from tfgrpo.experiences.store import ExperienceStore


def render(
    library: Library, *, template: str | Path | None = None, experiences: list[Experience] | None = None
) -> str:
    """The library (or `experiences`, a subset in the order given) as prompt text; '' when there is none."""
    shown = list(library.experiences) if experiences is None else list(experiences)
    if not shown:
        return ""
    text = _render(template, "library.jinja", experiences=shown, library=library)
    return text.strip("\n")


def render_system_prompt(
    library: Library, *, template: str | Path | None = None, system_template: str | Path | None = None
) -> str:
    """A ready chat system message with the rendered library (templates/system_prompt.jinja; sees `rendered`, `library`)."""
    return render_system_text(render(library, template=template), library=library, system_template=system_template)


def render_system_text(
    rendered: str, *, library: Library | None = None, system_template: str | Path | None = None
) -> str:
    """The system message around already rendered experiences: what rollouts send and what export ships."""
    return _render(system_template, "system_prompt.jinja", rendered=rendered, library=library).strip()


@lru_cache(maxsize=8)
def bundled_template(name: str) -> str:
    """Source of a template shipped in experiences/templates/ (library.jinja, system_prompt.jinja); read once,
    as package data does not change while the process runs (every prompt of a run renders one)."""
    return resources.files("tfgrpo.experiences").joinpath("templates", name).read_text(encoding="utf-8")


def _render(template: str | Path | None, bundled: str, **variables: object) -> str:
    """`template` (source text, a file, or None: the bundled one) rendered; its mistakes (a syntax error, an
    unknown variable) are one line that names the template."""
    import jinja2

    name = str(template) if isinstance(template, Path) else "experience template" if template else bundled
    try:
        return _compile(_template_source(template, bundled), name).render(**variables)
    except jinja2.TemplateError as exc:  # StrictUndefined: a misspelt variable fails here, not silently
        raise ExperienceError(f"bad template {name}: {exc.message or type(exc).__name__}") from None


def _template_source(template: str | Path | None, bundled: str) -> str:
    if template is None:
        return bundled_template(bundled)
    if isinstance(template, Path):
        if not template.is_file():
            raise ExperienceError(f"template file not found: {template}")
        return read_text(template, error=ExperienceError)
    return template


@lru_cache(maxsize=32)
def _compile(source: str, name: str):  # -> jinja2.Template; cached because engines render once per prompt
    import jinja2

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        return environment.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ExperienceError(f"bad template {name} (line {exc.lineno}): {exc.message}") from None


class Injection(BaseModel):
    """Which experiences a prompt gets: `all`, `none`, or `topk:K` (the K nearest to the query)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    mode: Literal["all", "none", "topk"] = "all"
    k: int | None = Field(None, ge=1, description="How many experiences `topk` injects.")

    @classmethod
    def parse(cls, spec: str | Injection | None) -> Injection:
        """'all' | 'none' | 'topk:8' (as given to `--inject`)."""
        if isinstance(spec, Injection):
            return spec
        text = (spec or "all").strip().lower()
        if text in ("all", "none"):
            return cls(mode=text)
        name, _, number = text.partition(":")
        if name == "topk" and number.strip().isdigit() and int(number) >= 1:
            return cls(mode="topk", k=int(number))
        raise ExperienceError(f"bad injection {spec!r}: use 'all', 'none' or 'topk:K' with K >= 1 (e.g. topk:8)")

    def __str__(self) -> str:
        return f"topk:{self.k}" if self.mode == "topk" else self.mode

    def select(
        self, library: Library, *, query: str | None = None, store: ExperienceStore | None = None
    ) -> list[Experience]:
        """The experiences to inject, in library order (stable prompts, whatever the similarity ranking)."""
        if self.mode == "none":
            return []
        if self.mode == "all" or len(library) <= (self.k or 0):
            return list(library.experiences)
        if store is None or query is None:
            raise ExperienceError("topk injection needs a vector store and the query text")
        if self.k is None:
            raise ExperienceError("topk injection needs K (e.g. topk:8)")
        store.sync(library)
        wanted = {match.id for match in store.query(query, k=self.k)}
        return [e for e in library.experiences if e.id in wanted]

    def render(
        self,
        library: Library,
        *,
        query: str | None = None,
        store: ExperienceStore | None = None,
        template: str | Path | None = None,
    ) -> str:
        return render(library, template=template, experiences=self.select(library, query=query, store=store))


__all__ = ["Injection", "bundled_template", "render", "render_system_prompt", "render_system_text"]
