"""The experience library of Training-Free GRPO: data model, operations, tolerant parser, apply, history,
vector-store dedup, the one renderer, and export/import.

    from experiences import Library, parse_operations, apply_operations, render
    parsed = parse_operations(reply, library)             # never raises on a reply
    result = apply_operations(library, parsed.operations, step=3)
    prompt_block = render(result.library)                 # "[G0]. ..." lines

Importing this package is cheap: chromadb and sentence-transformers load only when a store or the
local embedder is used (`experiences.store.ExperienceStore`, also reachable as `experiences.ExperienceStore`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from experiences.apply import Applied, ApplyResult, Budget, Eviction, apply_operations, approximate_tokens
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
from experiences.render import Injection, render, render_system_prompt

if TYPE_CHECKING:
    from experiences.dedup import DedupReport, MergeCandidate, dedup_library, screen_adds
    from experiences.store import ExperienceStore

_LAZY = {
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
    # The store modules import chromadb lazily themselves; this only keeps names reachable from the package.
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
