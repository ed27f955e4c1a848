"""The experience library of Training-Free GRPO: data model, operations, tolerant parser, apply, history,
vector-store dedup, the one renderer, and export/import.

    from tfgrpo.experiences import Library, parse_operations, apply_operations, render
    parsed = parse_operations(reply, library)             # never raises on a reply
    result = apply_operations(library, parsed.operations, step=3)
    prompt_block = render(result.library)                 # "[G0]. ..." lines

Importing this package is cheap: every name loads its module on first use (`tfgrpo library show` needs
the model, not the renderer's jinja2 or the apply engine), and chromadb and sentence-transformers load
only when a store or the local embedder is used (`tfgrpo.experiences.store.ExperienceStore`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfgrpo.experiences.apply import Applied, ApplyResult, Budget, Eviction, apply_operations, approximate_tokens
    from tfgrpo.experiences.dedup import DedupReport, MergeCandidate, dedup_library, screen_adds
    from tfgrpo.experiences.errors import (
        EmbeddingError,
        ExperienceError,
        ImportFormatError,
        LibraryFileError,
        UnknownVersionError,
    )
    from tfgrpo.experiences.export import FORMATS, export_library, export_text, import_library
    from tfgrpo.experiences.history import History, LibraryDiff, diff_libraries
    from tfgrpo.experiences.model import FORMAT, Experience, Library, Provenance, Usage
    from tfgrpo.experiences.ops import AddOp, DeleteOp, MergeOp, ModifyOp, Operation, Rejection, operation_from_wire
    from tfgrpo.experiences.parse import DEFAULT_MAX_WORDS, ParseResult, parse_operations
    from tfgrpo.experiences.store import ExperienceStore

# `render` is also the name of its module: a lazy name would be shadowed by the module once imported
from tfgrpo.experiences.render import Injection, render, render_system_prompt  # noqa: E402

_LAZY = {
    "Applied": "tfgrpo.experiences.apply",
    "ApplyResult": "tfgrpo.experiences.apply",
    "Budget": "tfgrpo.experiences.apply",
    "Eviction": "tfgrpo.experiences.apply",
    "apply_operations": "tfgrpo.experiences.apply",
    "approximate_tokens": "tfgrpo.experiences.limits",
    "EmbeddingError": "tfgrpo.experiences.errors",
    "ExperienceError": "tfgrpo.experiences.errors",
    "ImportFormatError": "tfgrpo.experiences.errors",
    "LibraryFileError": "tfgrpo.experiences.errors",
    "UnknownVersionError": "tfgrpo.experiences.errors",
    "FORMATS": "tfgrpo.experiences.export",
    "export_library": "tfgrpo.experiences.export",
    "export_text": "tfgrpo.experiences.export",
    "import_library": "tfgrpo.experiences.export",
    "History": "tfgrpo.experiences.history",
    "LibraryDiff": "tfgrpo.experiences.history",
    "diff_libraries": "tfgrpo.experiences.history",
    "FORMAT": "tfgrpo.experiences.model",
    "Experience": "tfgrpo.experiences.model",
    "Library": "tfgrpo.experiences.model",
    "Provenance": "tfgrpo.experiences.model",
    "Usage": "tfgrpo.experiences.model",
    "AddOp": "tfgrpo.experiences.ops",
    "DeleteOp": "tfgrpo.experiences.ops",
    "MergeOp": "tfgrpo.experiences.ops",
    "ModifyOp": "tfgrpo.experiences.ops",
    "Operation": "tfgrpo.experiences.ops",
    "Rejection": "tfgrpo.experiences.ops",
    "operation_from_wire": "tfgrpo.experiences.ops",
    "DEFAULT_MAX_WORDS": "tfgrpo.experiences.parse",
    "ParseResult": "tfgrpo.experiences.parse",
    "parse_operations": "tfgrpo.experiences.parse",
    "ExperienceStore": "tfgrpo.experiences.store",
    "Match": "tfgrpo.experiences.store",
    "screen_adds": "tfgrpo.experiences.dedup",
    "dedup_library": "tfgrpo.experiences.dedup",
    "find_duplicate_groups": "tfgrpo.experiences.dedup",
    "MergeCandidate": "tfgrpo.experiences.dedup",
    "DedupReport": "tfgrpo.experiences.dedup",
    "LocalEmbedder": "tfgrpo.experiences.embedders",
    "OnnxMiniLMEmbedder": "tfgrpo.experiences.onnx_embedder",
    "OpenAIEmbedder": "tfgrpo.experiences.embedders",
    "build_embedder": "tfgrpo.experiences.embedders",
}


def __getattr__(name: str) -> Any:
    # Each name's module loads on first use; the store modules import chromadb lazily themselves.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tfgrpo.experiences' has no attribute {name!r}")


__all__ = [
    "DEFAULT_MAX_WORDS",
    "FORMAT",
    "FORMATS",
    "AddOp",
    "Applied",
    "ApplyResult",
    "Budget",
    "DedupReport",
    "DeleteOp",
    "EmbeddingError",
    "Eviction",
    "Experience",
    "ExperienceError",
    "ExperienceStore",
    "History",
    "ImportFormatError",
    "Injection",
    "Library",
    "LibraryDiff",
    "LibraryFileError",
    "MergeCandidate",
    "MergeOp",
    "ModifyOp",
    "Operation",
    "ParseResult",
    "Provenance",
    "Rejection",
    "UnknownVersionError",
    "Usage",
    "apply_operations",
    "approximate_tokens",
    "dedup_library",
    "diff_libraries",
    "export_library",
    "export_text",
    "import_library",
    "operation_from_wire",
    "parse_operations",
    "render",
    "render_system_prompt",
    "screen_adds",
]
