"""Constrained decoding for the transformers backend: a JSON schema becomes `generate()` options that
mask every token which would leave the schema, so the reply is valid JSON of that schema by construction.

Two maintained libraries are wired in, chosen by measurement (benchmarks/structured_outputs.py,
docs/structured-outputs.md): xgrammar (the default: grammars compiled ahead, a C++ token-mask engine,
its own `transformers.LogitsProcessor`) and llguidance (Rust, masks computed lazily per step).
lm-format-enforcer 0.11.3 was a third candidate: its transformers integration does not import under
transformers 5 (`transformers.tokenization_utils` is gone).
Compiled grammars are cached per schema: the stage schemas repeat within a step (same library ids).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from typing import Any

from tfgrpo.llm.errors import BackendUnavailableError

DEFAULT_ENGINE = "xgrammar"
_PACKAGES = {"xgrammar": "xgrammar", "llguidance": "llguidance"}
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
                # The schema's own key order, not the sorted cache key: properties are generated in that order.
                compiled = self._compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
                self._compiled[key] = compiled
        # One processor per generate() call: it keeps one matcher per row of that call.
        return {"logits_processor": LogitsProcessorList([LogitsProcessor(compiled)])}


class GuidanceEngine:
    """llguidance: an Earley parser over a lazily built token trie; no ahead-of-time grammar compile.

    llguidance ships matchers and token-mask kernels but no `transformers` processor: `_GuidanceProcessor`
    is the glue (one matcher per row, fed the row's last token, its mask applied to the logits).
    """

    name = "llguidance"

    def __init__(self, tokenizer: Any, *, vocab_size: int, stop_token_ids: list[int]) -> None:
        import llguidance.hf

        self._llguidance = llguidance
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=stop_token_ids[0])
        self._vocab_size = vocab_size

    def generate_options(self, schema: dict[str, Any]) -> dict[str, Any]:
        from transformers import LogitsProcessorList

        grammar = self._llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False}
        )
        processor = _guidance_processor(self._llguidance, self._tokenizer, grammar, self._vocab_size)
        return {"logits_processor": LogitsProcessorList([processor])}


def _guidance_processor(llguidance: Any, tokenizer: Any, grammar: str, vocab_size: int) -> Any:
    import llguidance.torch as masks
    from transformers import LogitsProcessor

    class _GuidanceProcessor(LogitsProcessor):
        def __init__(self) -> None:
            self.matchers: list[Any] = []
            self.bitmask: Any = None

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            if not self.matchers:  # first step: nothing generated yet
                self.matchers = [llguidance.LLMatcher(tokenizer, grammar) for _ in range(input_ids.shape[0])]
                self.bitmask = masks.allocate_token_bitmask(input_ids.shape[0], vocab_size)
            else:
                for row, matcher in enumerate(self.matchers):
                    if not matcher.is_stopped():
                        matcher.consume_token(int(input_ids[row, -1]))
            for row, matcher in enumerate(self.matchers):
                masks.fill_next_token_bitmask(matcher, self.bitmask, row)
            masks.apply_token_bitmask_inplace(scores[:, :vocab_size], self.bitmask)
            return scores

    return _GuidanceProcessor()


ENGINES = {"xgrammar": XGrammarEngine, "llguidance": GuidanceEngine}


def build_engine(name: str, tokenizer: Any, *, vocab_size: int, stop_token_ids: list[int]) -> Any:
    if name not in ENGINES:
        raise BackendUnavailableError(f"unknown constrained-decoding engine {name!r}; use {' or '.join(ENGINES)}")
    if not engine_installed(name):
        raise BackendUnavailableError(f"constrained decoding with {name} needs it installed: pip install {name}")
    return ENGINES[name](tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)


__all__ = ["DEFAULT_ENGINE", "ENGINES", "build_engine", "engine_installed"]
