"""The experience library as data: `Experience` items with stable ids, and the versioned `Library` file.

Ids are stable: an experience keeps its id for life, a new lesson gets a new id from `next_id`, and ids
of deleted or merged experiences are never handed out again (lineage stays unambiguous). A hand-written
file with only `{"version": 0, "experiences": [{"id": "G0", "text": "..."}]}` loads; the other fields
get defaults. A file without `version` is refused (it is not a library; `tfgrpo import` reads other
shapes), and so is an experience longer than MAX_EXPERIENCE_CHARS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tfgrpo.core.answers import normalize_text
from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.core.textfile import loads_json, read_text
from tfgrpo.experiences.credit import Credit
from tfgrpo.experiences.errors import LibraryFileError

FORMAT = "tfgrpo.library/1"
DEFAULT_ID_PREFIX = "G"


class Provenance(BaseModel):
    """Where an experience (or its latest change) came from."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    run: str | None = Field(None, description="Run name or directory of the learn run.")
    epoch: int | None = Field(None, description="Epoch of the engine step.")
    step: int | None = Field(None, description="Engine step (global).")
    batch: int | None = Field(None, description="Batch index within the epoch.")
    query_ids: list[str] = Field(
        default_factory=list, description="Dataset ids of the queries whose rollouts produced it."
    )
    operation: str | None = Field(
        None, description="add | modify | merge | import | manual: what last produced or changed it."
    )


class Usage(BaseModel):
    """How often the experience was in context, and for how many correct vs wrong rollouts (engine-reported)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    in_context: int = Field(0, ge=0, description="Rollouts whose prompt contained this experience.")
    correct: int = Field(0, ge=0, description="... of which were rewarded as correct.")
    wrong: int = Field(0, ge=0, description="... of which were rewarded as wrong.")

    def success_rate(self) -> float:
        """Laplace-smoothed rate: 0.5 with no evidence, so an unused lesson is not judged as bad as a harmful one."""
        return (self.correct + 1) / (self.correct + self.wrong + 2)


MAX_ALIASES = 16  # phrasings of a lesson remembered for dedup (the most recent)
#: Longest experience, in characters. A lesson is a sentence or two (learn caps proposals at 32 words, about
#: 200 characters); past this it is a wrong file or a paste, and it would be sent in every prompt.
MAX_EXPERIENCE_CHARS = 4_000


class Experience(BaseModel):
    """One natural-language lesson."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(description="Stable id, e.g. 'G7'; never renumbered.")
    text: str = Field(description="The lesson itself, as injected into prompts.")
    created_step: int | None = Field(None, description="Engine step that created it.")
    updated_step: int | None = Field(None, description="Engine step that last changed it.")
    provenance: Provenance = Field(default_factory=Provenance)
    parents: list[str] = Field(default_factory=list, description="Ids it was merged from (lineage).")
    aliases: list[str] = Field(
        default_factory=list,
        description="Other phrasings of this lesson that dedup folded into it: new proposals are compared with "
        "them too; never injected.",
    )
    usage: Usage = Field(default_factory=Usage)
    credit: Credit = Field(
        default_factory=Credit,
        description="Its measured effect on the reward (learn's random leave-outs; tfgrpo.experiences.credit), for this text.",
    )

    @field_validator("id")
    @classmethod
    def _id_is_a_token(cls, value: str) -> str:
        value = value.strip()
        if not value or any(ch.isspace() for ch in value):
            raise ValueError("an id must be a non-empty string without spaces, like 'G3'")
        return value

    @field_validator("text")
    @classmethod
    def _text_not_empty(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("text must not be empty")
        if len(value) > MAX_EXPERIENCE_CHARS:
            raise ValueError(
                f"text is {len(value):,} characters; an experience is at most {MAX_EXPERIENCE_CHARS:,} "
                "(a lesson is a sentence or two, and every prompt carries it)"
            )
        return value

    @property
    def words(self) -> int:
        return count_words(self.text)


def count_words(text: str) -> int:
    return len(text.split())


MIN_LESSON_WORDS = 2
MIN_LETTER_SHARE = 0.5
_SENTENCE_END = re.compile(r"[.!?][)\]\"'$*_]*$")
_PLACEHOLDER = re.compile(r"^\s*<[^<>]*>\s*[.!?]?\s*$|<(?:text|the|your|new|lesson)\b[^<>]*>", re.IGNORECASE)


def sentence_problem(text: str) -> str | None:
    """Why `text` does not read as a lesson (a complete natural-language rule), or None when it does: at least
    two words, mostly letters, ending as a sentence ends, and not the prompt's placeholder. A reply cut by
    the token limit ("The correct process is to multiply the") or a digit string ("1.1.2.0.1") is a failed
    reply, not a lesson."""
    if _PLACEHOLDER.search(text):
        return "a copy of the prompt's placeholder, not a lesson"
    if count_words(text) < MIN_LESSON_WORDS:
        return f"not a sentence: fewer than {MIN_LESSON_WORDS} words"
    visible = [ch for ch in text if not ch.isspace()]
    if sum(ch.isalpha() for ch in visible) < MIN_LETTER_SHARE * len(visible):
        return "not a sentence: mostly digits and symbols"
    if not _SENTENCE_END.search(text.rstrip()):
        return "not a sentence: it does not end with '.', '!' or '?' (cut off?)"
    unknown = unknown_words(text)
    if unknown:
        return f"not a sentence: most of its words are not English words (e.g. {unknown[0]!r})"
    return None


_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")  # \binom, \frac: notation, not words
#: Least share of a lesson's words (of two letters or more) that are words of the language.
MIN_KNOWN_WORD_SHARE = 0.6


def unknown_words(text: str) -> list[str]:
    """The words of `text` that no English word list knows, when they are more than 1 - MIN_KNOWN_WORD_SHARE of
    its words: a decoding accident ("GZTDXGZGZZZZZZZZ by GZTDXGZZZZZZZZ") passes every shape check but this one.
    Symbols of mathematics (x, n, a^2) are one letter and LaTeX commands are notation: neither is counted; a term
    the list does not know is one word among many."""
    candidates = re.findall(r"[^\W\d_]{2,}", _LATEX_COMMAND.sub(" ", text))
    if not candidates:
        return []
    from wordfreq import zipf_frequency  # its English list loads on first use (~0.3 s)

    unknown = [w for w in candidates if zipf_frequency(w, "en") == 0]
    return unknown if len(candidates) - len(unknown) < MIN_KNOWN_WORD_SHARE * len(candidates) else []


class Retired(BaseModel):
    """An experience taken out because it was measured to hurt: a later proposal of the same text is refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str
    text: str
    step: int | None = Field(None, description="Engine step that retired it.")
    reason: str = Field("credit", description="credit: its effect's interval was below 0.")
    credit: Credit = Field(default_factory=Credit, description="The evidence it was retired on.")


class Library(BaseModel):
    """A versioned list of experiences plus metadata. `version` increases by one per applied change set."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: str = Field(FORMAT, description="File format tag, for future migrations.")
    version: int = Field(0, ge=0, description="Library version; +1 per applied change set.")
    task: str | None = Field(None, description="What the library was learned for (dataset / domain).")
    model: str | None = Field(None, description="The model it was learned with.")
    step: int | None = Field(None, description="Engine step that produced this version.")
    id_prefix: str = Field(DEFAULT_ID_PREFIX, description="Prefix of generated ids.")
    next_id: int = Field(0, ge=0, description="Number of the next generated id; only ever grows.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form metadata (run, dataset, notes).")
    experiences: list[Experience] = Field(default_factory=list)
    retired: list[Retired] = Field(
        default_factory=list,
        description="Experiences retired for hurting the reward; proposing one of their texts again is refused.",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value != FORMAT:
            raise ValueError(f"unsupported library format {value!r}; this version reads {FORMAT!r}")
        return value

    @model_validator(mode="after")
    def _ids_unique_and_counter_ahead(self) -> Library:
        seen: set[str] = set()
        for index, experience in enumerate(self.experiences):
            if experience.id in seen:
                raise ValueError(f"experiences[{index}]: duplicate id {experience.id!r}")
            seen.add(experience.id)
        # A hand-written file has no next_id: start after the largest generated-looking id.
        pattern = re.compile(rf"^{re.escape(self.id_prefix)}(\d+)$")
        numbers = [int(m.group(1)) for e in self.experiences if (m := pattern.match(e.id))]
        self.next_id = max([self.next_id, *(n + 1 for n in numbers)])
        return self

    # -- reading -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.experiences)

    def __iter__(self) -> Iterator[Experience]:  # type: ignore[override]  # iterate experiences, not fields
        return iter(self.experiences)

    def __contains__(self, experience_id: object) -> bool:
        return any(e.id == experience_id for e in self.experiences)

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.experiences]

    def get(self, experience_id: str) -> Experience | None:
        for experience in self.experiences:
            if experience.id == experience_id:
                return experience
        return None

    def find_text(self, text: str) -> Experience | None:
        """The experience with this exact text (whitespace- and case-insensitive), if any."""
        key = normalize_text(text)
        for experience in self.experiences:
            if normalize_text(experience.text) == key:
                return experience
        return None

    def find_retired(self, text: str) -> Retired | None:
        """The retired experience with this text (whitespace- and case-insensitive), if any."""
        key = normalize_text(text)
        return next((r for r in self.retired if normalize_text(r.text) == key), None)

    def retire(self, experience: Experience, *, step: int | None, reason: str = "credit") -> Retired:
        """Remember `experience` (already deleted from the library) as retired: its text is refused from now on."""
        retired = Retired(id=experience.id, text=experience.text, step=step, reason=reason, credit=experience.credit)
        self.retired.append(retired)
        return retired

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def from_texts(cls, texts: Iterable[str], *, source: str = "lessons", **fields: Any) -> Library:
        """A library with fresh ids G0, G1, ... for these lessons (empty lines skipped); a lesson that is not a
        valid experience (too long, a lone surrogate) is a `LibraryFileError` naming `source` and its number."""
        library = cls(**fields)
        for number, text in enumerate(texts, start=1):
            if text.strip():
                experience = experience_or_error(
                    source,
                    f"lesson {number}",
                    id=library.allocate_id(),
                    text=text,
                    provenance=Provenance(operation="import"),
                )
                library.experiences.append(experience)
        return library

    def allocate_id(self) -> str:
        """Reserve and return a new id; ids are never reused, even after deletes."""
        taken = set(self.ids)
        while True:
            candidate = f"{self.id_prefix}{self.next_id}"
            self.next_id += 1
            if candidate not in taken:
                return candidate

    def record_usage(self, ids: Iterable[str], *, correct: bool | None) -> None:
        """Count one rollout that had `ids` in context (`correct=None`: reward unknown)."""
        self.record_rollouts(ids, rollouts=1, correct=int(correct is True), wrong=int(correct is False))

    def record_rollouts(self, ids: Iterable[str], *, rollouts: int, correct: int, wrong: int) -> None:
        """Count `rollouts` rollouts that had `ids` in context, `correct` and `wrong` of them rewarded so (a
        group's samples at once: one pass over the library instead of one per sample)."""
        wanted = set(ids)
        for experience in self.experiences:
            if experience.id in wanted:
                experience.usage.in_context += rollouts
                experience.usage.correct += correct
                experience.usage.wrong += wrong

    # -- files -------------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n"

    def save(self, path: str | Path, *, text: str | None = None) -> Path:
        """Write atomically (temp file + rename): a crash leaves the old file intact. `text`: this library's
        `to_json()` already rendered (a learn step writes the same library to three files)."""
        path = Path(path)
        atomic_write_text(path, self.to_json() if text is None else text)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Library:
        path = Path(path)
        if path.is_dir():
            raise LibraryFileError(f"{path} is a folder; give the library's JSON file")
        if not path.is_file():
            raise LibraryFileError(f"library file not found: {path}")
        text = read_text(path, error=LibraryFileError)
        data = loads_json(text, source=str(path), error=LibraryFileError)
        library = cls.from_data(data, source=str(path))
        if "version" not in data:  # else any JSON object of experiences would silently read as version 0
            raise LibraryFileError(
                f"{path}: no 'version' key, so not a library file (a hand-written one starts "
                '{"version": 0, "experiences": [...]}; `tfgrpo import` reads other shapes)'
            )
        return library

    @classmethod
    def from_data(cls, data: Any, *, source: str = "library") -> Library:
        if not isinstance(data, dict):
            raise LibraryFileError(
                f"{source}: expected a JSON object with 'version' and 'experiences' (got {type(data).__name__})"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise LibraryFileError(_describe(exc, source)) from None


def experience_or_error(source: str, where: str, **fields: Any) -> Experience:
    """`Experience(**fields)`, or one `LibraryFileError` line naming `source` and `where` (e.g. "line 3")."""
    try:
        return Experience(**fields)
    except ValidationError as exc:
        raise LibraryFileError(f"{source}: {where}: {_problem(exc.errors()[0])}") from None


def _describe(error: ValidationError, source: str) -> str:
    problems = [_problem(item) for item in error.errors()]
    if len(problems) == 1:
        return f"{source}: not a valid experience library: {problems[0]}"
    return "\n".join([f"{source}: not a valid experience library:", *(f"  - {p}" for p in problems)])


def _problem(item: Any) -> str:
    parts: list[str] = []
    for part in item["loc"]:
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]}[{part}]"] if parts else [f"[{part}]"]
        else:
            parts.append(str(part))
    key = ".".join(parts) or "(top level)"
    if item["type"] == "extra_forbidden":
        return f"unknown key '{key}'"
    if item["type"] == "missing":
        return f"{key}: required key is missing"
    return f"{key}: {item['msg'].removeprefix('Value error, ')}"


__all__ = [
    "FORMAT",
    "MAX_EXPERIENCE_CHARS",
    "Experience",
    "Library",
    "Provenance",
    "Retired",
    "Usage",
    "count_words",
]
