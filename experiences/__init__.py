"""The experience library of Training-Free GRPO: data model, operations, tolerant parser, apply, history,
vector-store dedup, the one renderer, and export/import.

    from experiences import Library, parse_operations, apply_operations, render
    parsed = parse_operations(reply, library)             # never raises on a reply
    result = apply_operations(library, parsed.operations, step=3)
    prompt_block = render(result.library)                 # "[G0]. ..." lines

Importing this package is cheap: every name loads its module on first use (`tfgrpo library show` needs
the model, not the renderer's jinja2 or the apply engine), and chromadb and sentence-transformers load
only when a store or the local embedder is used (`experiences.store.ExperienceStore`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from experiences.apply import Applied, ApplyResult, Budget, Eviction, apply_operations, approximate_tokens
    from experiences.dedup import DedupReport, MergeCandidate, dedup_library, screen_adds
    from experiences.errors import (
        EmbeddingError,
        ExperienceError,
        ImportFormatError,
        LibraryFileError,
        UnknownVersionError,
    )
    from experiences.export import FORMATS, export_library, export_text, import_library
    from experiences.history import History, LibraryDiff, diff_libraries
    from experiences.model import FORMAT, Experience, Library, Provenance, Usage
    from experiences.ops import AddOp, DeleteOp, MergeOp, ModifyOp, Operation, Rejection, operation_from_wire
    from experiences.parse import DEFAULT_MAX_WORDS, ParseResult, parse_operations
    from experiences.store import ExperienceStore

# `render` is also the name of its module: a lazy name would be shadowed by the module once imported
from experiences.render import Injection, render, render_system_prompt  # noqa: E402

_LAZY = {
    "Applied": "experiences.apply",
    "ApplyResult": "experiences.apply",
    "Budget": "experiences.apply",
    "Eviction": "experiences.apply",
    "apply_operations": "experiences.apply",
    "approximate_tokens": "experiences.limits",
    "EmbeddingError": "experiences.errors",
    "ExperienceError": "experiences.errors",
    "ImportFormatError": "experiences.errors",
    "LibraryFileError": "experiences.errors",
    "UnknownVersionError": "experiences.errors",
    "FORMATS": "experiences.export",
    "export_library": "experiences.export",
    "export_text": "experiences.export",
    "import_library": "experiences.export",
    "History": "experiences.history",
    "LibraryDiff": "experiences.history",
    "diff_libraries": "experiences.history",
    "FORMAT": "experiences.model",
    "Experience": "experiences.model",
    "Library": "experiences.model",
    "Provenance": "experiences.model",
    "Usage": "experiences.model",
    "AddOp": "experiences.ops",
    "DeleteOp": "experiences.ops",
    "MergeOp": "experiences.ops",
    "ModifyOp": "experiences.ops",
    "Operation": "experiences.ops",
    "Rejection": "experiences.ops",
    "operation_from_wire": "experiences.ops",
    "DEFAULT_MAX_WORDS": "experiences.parse",
    "ParseResult": "experiences.parse",
    "parse_operations": "experiences.parse",
    "ExperienceStore": "experiences.store",
    "Match": "experiences.store",
    "screen_adds": "experiences.dedup",
    "dedup_library": "experiences.dedup",
    "find_duplicate_groups": "experiences.dedup",
    "MergeCandidate": "experiences.dedup",
    "DedupReport": "experiences.dedup",
    "LocalEmbedder": "experiences.embedders",
    "OnnxMiniLMEmbedder": "experiences.onnx_embedder",
    "OpenAIEmbedder": "experiences.embedders",
    "build_embedder": "experiences.embedders",
}


def __getattr__(name: str) -> Any:
    # Each name's module loads on first use; the store modules import chromadb lazily themselves.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'experiences' has no attribute {name!r}")


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
