"""Constrained decoding for the transformers backend: a JSON schema becomes `generate()` options that
mask every token which would leave the schema, so the reply is valid JSON of that schema by construction.

Two maintained libraries are wired in, chosen by measurement (benchmarks/structured_outputs.py,
docs/structured-outputs.md): xgrammar (the default: compiled grammars, a C++ token-mask engine, its own
`transformers.LogitsProcessor`) and lm-format-enforcer (pure Python, `prefix_allowed_tokens_fn`).
Compiled grammars are cached per schema: the stage schemas repeat within a step (same library ids).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from typing import Any

from tfgrpo.llm.errors import BackendUnavailableError

DEFAULT_ENGINE = "xgrammar"
_PACKAGES = {"xgrammar": "xgrammar", "lm-format-enforcer": "lmformatenforcer"}
_CACHE_SIZE = 64


def engine_installed(name: str) -> bool:
    package = _PACKAGES.get(name)
    try:
        return package is not None and importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


class XGrammarEngine:
    """xgrammar: the schema compiled once to a grammar over the tokenizer's vocabulary."""

    name = "xgrammar"

    def __init__(self, tokenizer: Any, *, vocab_size: int, stop_token_ids: list[int]) -> None:
        import xgrammar

        self._xgrammar = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        self._compiler = xgrammar.GrammarCompiler(info)
        self._compiled: dict[str, Any] = {}
        self._lock = threading.Lock()

    def generate_options(self, schema: dict[str, Any]) -> dict[str, Any]:
        from transformers import LogitsProcessorList
        from xgrammar.contrib.hf import LogitsProcessor

        key = json.dumps(schema, sort_keys=True)
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                if len(self._compiled) >= _CACHE_SIZE:
                    self._compiled.clear()
                compiled = self._compiled[key] = self._compiler.compile_json_schema(key, any_whitespace=False)
        # One processor per generate() call: it keeps one matcher per row of that call.
        return {"logits_processor": LogitsProcessorList([LogitsProcessor(compiled)])}


class FormatEnforcerEngine:
    """lm-format-enforcer: a character-level JSON-schema parser walked over the token trie."""

    name = "lm-format-enforcer"

    def __init__(self, tokenizer: Any, *, vocab_size: int, stop_token_ids: list[int]) -> None:
        from lmformatenforcer.integrations.transformers import build_token_enforcer_tokenizer_data

        self._tokenizer_data = build_token_enforcer_tokenizer_data(tokenizer, vocab_size=vocab_size)

    def generate_options(self, schema: dict[str, Any]) -> dict[str, Any]:
        from lmformatenforcer import JsonSchemaParser
        from lmformatenforcer.integrations.transformers import build_transformers_prefix_allowed_tokens_fn

        function = build_transformers_prefix_allowed_tokens_fn(self._tokenizer_data, JsonSchemaParser(schema))
        return {"prefix_allowed_tokens_fn": function}


ENGINES = {"xgrammar": XGrammarEngine, "lm-format-enforcer": FormatEnforcerEngine}


def build_engine(name: str, tokenizer: Any, *, vocab_size: int, stop_token_ids: list[int]) -> Any:
    if name not in ENGINES:
        raise BackendUnavailableError(f"unknown constrained-decoding engine {name!r}; use {' or '.join(ENGINES)}")
    if not engine_installed(name):
        raise BackendUnavailableError(f"constrained decoding with {name} needs it installed: pip install {name}")
    return ENGINES[name](tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)


__all__ = ["DEFAULT_ENGINE", "ENGINES", "build_engine", "engine_installed"]
