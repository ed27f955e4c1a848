"""Prompt templates are Jinja files in this folder; any of them can be replaced by a user's file."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from tfgrpo.core.config import ConfigError

PROMPTS_DIR = Path(str(files("tfgrpo.prompts")))


@lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


def load_template(name_or_path: str):
    """A bundled template by name (`rollout_user`) or a user's template file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROMPTS_DIR / f"{name_or_path}.jinja"
    if not path.is_file():
        raise ConfigError(f"prompt template not found: {name_or_path}")
    # Compiling costs milliseconds and rollouts render thousands of prompts; an edited file recompiles.
    return _compiled(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=128)
def _compiled(path: str, mtime_ns: int):
    return _environment().from_string(Path(path).read_text(encoding="utf-8"))


def render_prompt(name_or_path: str, **variables) -> str:
    return load_template(name_or_path).render(**variables).strip()
