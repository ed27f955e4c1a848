"""Local Hugging Face models (a model directory or a GGUF file), optionally with a LoRA adapter, with
batched generation so local rollouts are not one prompt at a time.

Concurrent `forward()` calls are queued and collected into micro-batches (`MicroBatcher`): requests with
identical sampling parameters and `n` share one `generate` call, padded on the left, up to `batch_size`
sequences (prompts x n) per call. Generation runs in one worker thread, so the event loop stays free.

Seeds: a batch holds only requests with the same sampling parameters, seed included; when the seed is
set, torch's RNG is seeded right before that batch's `generate` with `seed + sample_offset` of the
batch's first request. The same requests in the same batch composition therefore reproduce exactly;
in a different batch (other prompts, other padding) a sampled answer can differ.
The client's response cache is what makes reruns reproducible.

Threads: torch reads OMP_NUM_THREADS itself at start-up; `num_threads=` overrides it for the process.

Structured outputs: a request's `response_schema` is enforced by constrained decoding (`constrained.py`,
xgrammar by default) as a logits processor; requests with different schemas go to different batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.llm.backends.batching import DEFAULT_COLLECT_S, MicroBatcher
from tfgrpo.llm.backends.constrained import DEFAULT_ENGINE, build_engine, engine_installed
from tfgrpo.llm.backends.usage import share_usage, split_evenly
from tfgrpo.llm.base import Backend
from tfgrpo.llm.embedded import EMBEDDED_MODEL_NAME, embedded_model_dir
from tfgrpo.llm.errors import BackendUnavailableError, ContextWindowExceededError, LLMError, PermanentError
from tfgrpo.llm.types import ChatRequest, Completion

# Used when a tokenizer has no chat template (rare for instruct models; tiny test models may lack one).
_PLAIN_ROLE_FORMAT = "{role}: {content}\n"


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    device: Any
    eos_token_ids: set[int]
    max_positions: int | None
    constrained: Any = None  # the constrained-decoding engine, built on the first structured request


class TransformersBackend(Backend):
    """`transformers` generation on a local model, batched across concurrent requests."""

    supports_n = True
    supports_tools = False  # tools are passed to the chat template, but tool calls are not parsed

    def __init__(
        self,
        model: str | None = None,
        *,
        adapter: str | None = None,
        batch_size: int = 32,
        dtype: str = "float32",
        device: str | None = None,
        cache_dir: str | Path | None = None,
        num_threads: int | None = None,
        collect_s: float = DEFAULT_COLLECT_S,
        constrained_decoding: str | None = DEFAULT_ENGINE,
    ) -> None:
        self.model_path = model
        #: which library enforces JSON schemas (None: none; replies then rely on the tolerant parser)
        self.constrained_decoding = constrained_decoding
        self.supports_response_schema = constrained_decoding is not None and engine_installed(constrained_decoding)
        self.adapter = str(Path(adapter).resolve()) if adapter else None
        base_name = EMBEDDED_MODEL_NAME if model is None else model
        self.model_name = f"{base_name}+lora:{self.adapter}" if self.adapter else base_name
        self.endpoint = f"transformers:{self.model_name}"
        self.batch_size = batch_size
        self.dtype = dtype
        self.device = device
        self.cache_dir = cache_dir
        self.num_threads = num_threads
        #: number of `model.generate` calls so far (batching is observable, and tested)
        self.generate_calls = 0
        self._loaded: _Loaded | None = None
        self._batcher: MicroBatcher[ChatRequest, list[Completion]] = MicroBatcher(
            self._run_batch,
            max_batch=batch_size,
            group_key=_group_key,
            size_of=lambda request: request.n,
            collect_s=collect_s,
            thread_name="tfgrpo-transformers",
        )

    async def forward(self, request: ChatRequest) -> list[Completion]:
        return await self._batcher.submit(request)

    async def aclose(self) -> None:
        await self._batcher.aclose()
        self._loaded = None

    def load(self) -> None:
        """Load the model now (otherwise the first batch does). Not to be called while batches run."""
        self._ensure_loaded()

    # -- loading -----------------------------------------------------------------------------------

    def _ensure_loaded(self) -> _Loaded:
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> _Loaded:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        # A per-tensor "Loading weights" bar on every start buries the run's own progress display.
        hf_logging.disable_progress_bar()
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        dtype = _torch_dtype(self.dtype)
        source = embedded_model_dir(self.cache_dir) if self.model_path is None else Path(self.model_path)
        try:
            if source.suffix == ".gguf" and source.is_file():
                folder, name = str(source.parent), source.name
                tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
                model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
            else:
                tokenizer = AutoTokenizer.from_pretrained(str(source))
                model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype)
        except (OSError, ValueError) as exc:
            raise BackendUnavailableError(f"could not load model {str(source)!r} with transformers: {exc}") from exc
        if self.adapter:
            model = _with_adapter(model, self.adapter)
        device = torch.device(self.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model.to(device)  # type: ignore[arg-type]  # transformers' `to` wrapper is typed as taking the model
        model.eval()
        tokenizer.padding_side = "left"  # generation continues from the right edge of every row
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        return _Loaded(
            model=model,
            tokenizer=tokenizer,
            device=device,
            eos_token_ids=_eos_ids(model, tokenizer),
            max_positions=getattr(model.config, "max_position_embeddings", None),
        )

    # -- generation (worker thread) ----------------------------------------------------------------

    def _run_batch(self, requests: list[ChatRequest]) -> list[list[Completion] | BaseException]:
        loaded = self._ensure_loaded()
        tokenizer = loaded.tokenizer
        results: list[list[Completion] | BaseException | None] = [None] * len(requests)
        prompts: list[tuple[int, str]] = []
        for position, request in enumerate(requests):
            try:
                text = self._render(tokenizer, request)
            except LLMError as exc:
                results[position] = exc
                continue
            length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if loaded.max_positions is not None and length >= loaded.max_positions:
                results[position] = ContextWindowExceededError(
                    f"prompt of {length} tokens does not fit the model's context of {loaded.max_positions}"
                )
                continue
            prompts.append((position, text))
        if prompts:
            generated = self._generate(loaded, [requests[p] for p, _ in prompts], [t for _, t in prompts])
            for (position, _), completions in zip(prompts, generated, strict=True):
                results[position] = completions
        return [result if result is not None else PermanentError("no result") for result in results]

    def _render(self, tokenizer: Any, request: ChatRequest) -> str:
        messages = [{"role": m.role, "content": m.content or ""} for m in request.messages]
        if getattr(tokenizer, "chat_template", None):
            from jinja2 import TemplateError

            extra = {"tools": request.tools} if request.tools else {}
            try:
                return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
            except (TemplateError, ValueError, KeyError, TypeError) as exc:  # raise_exception() or bad fields
                raise PermanentError(f"the chat template could not render these messages: {exc}") from exc
        body = "".join(_PLAIN_ROLE_FORMAT.format(role=m["role"], content=m["content"]) for m in messages)
        return body + "assistant: "

    def _generate(self, loaded: _Loaded, requests: list[ChatRequest], texts: list[str]) -> list[list[Completion]]:
        import torch

        sampling, n = requests[0].sampling, requests[0].n  # identical across the batch (group key)
        tokenizer = loaded.tokenizer
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(loaded.device)
        greedy = sampling.temperature == 0.0
        rows_per_prompt = 1 if greedy else n  # greedy samples are identical: generate once, copy
        options: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": sorted(loaded.eos_token_ids) or None,
            "num_return_sequences": rows_per_prompt,
        }
        if greedy:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            # OpenAI semantics: temperature and top_p only (top_k=0 turns transformers' default 50 off)
            options.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        if sampling.stop:
            options.update(stop_strings=list(sampling.stop), tokenizer=tokenizer)
        if requests[0].response_schema is not None:  # one schema per batch (group key)
            options.update(self._constrained(loaded).generate_options(requests[0].response_schema.json_schema))
        if sampling.seed is not None:
            # + the first request's sample index: single-sample calls of one group, run in separate
            # batches, must not all replay the same random stream.
            torch.manual_seed(sampling.seed + requests[0].sample_offset)
        started = time.perf_counter()
        with torch.inference_mode():
            output = loaded.model.generate(**inputs, **options)
        self.generate_calls += 1
        latency = time.perf_counter() - started
        prompt_width = inputs["input_ids"].shape[1]
        new_tokens = output[:, prompt_width:].tolist()
        prompt_lengths = inputs["attention_mask"].sum(dim=1).tolist()
        batch: list[list[Completion]] = []
        for index, request in enumerate(requests):
            rows = new_tokens[index * rows_per_prompt : (index + 1) * rows_per_prompt]
            samples = [self._decode(loaded, row, sampling.max_tokens, sampling.stop) for row in rows]
            counts = [count for _, count, _ in samples]
            if greedy:  # one decode stands for all n samples; its tokens are shared, not counted n times
                samples, counts = samples * n, split_evenly(counts[0], n)
            usages = share_usage(int(prompt_lengths[index]), counts, n)
            batch.append(
                [
                    Completion(
                        text=text,
                        finish_reason=reason,
                        usage=usage,
                        latency_s=latency,
                        index=request.sample_offset + k,
                    )
                    for k, ((text, _, reason), usage) in enumerate(zip(samples, usages, strict=True))
                ]
            )
        return batch

    def _constrained(self, loaded: _Loaded) -> Any:
        if loaded.constrained is None:
            vocab_size = max(loaded.model.config.vocab_size, len(loaded.tokenizer))
            loaded.constrained = build_engine(
                self.constrained_decoding or DEFAULT_ENGINE,
                loaded.tokenizer,
                vocab_size=vocab_size,
                stop_token_ids=sorted(loaded.eos_token_ids),
            )
        return loaded.constrained

    @staticmethod
    def _decode(loaded: _Loaded, tokens: list[int], max_tokens: int, stop: list[str] | None) -> tuple[str, int, str]:
        """(text, completion tokens, finish reason) of one generated row."""
        pad = loaded.tokenizer.pad_token_id
        kept: list[int] = []
        reason = "length"
        for token in tokens:
            if token in loaded.eos_token_ids:
                kept.append(token)
                reason = "stop"
                break
            if token == pad:  # the row finished early (a stop string) while others went on
                reason = "stop"
                break
            kept.append(token)
        text = loaded.tokenizer.decode(kept, skip_special_tokens=True)
        if stop:
            cut = min((text.find(s) for s in stop if s and s in text), default=-1)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        if reason == "length" and len(kept) < max_tokens:
            reason = "stop"
        return text, len(kept), reason


def _group_key(request: ChatRequest) -> tuple[str, int, str]:
    schema = request.response_schema.model_dump_json(by_alias=True) if request.response_schema else ""
    return request.sampling.model_dump_json(), request.n, schema


def _torch_dtype(name: str) -> Any:
    import torch

    if name == "auto":
        return "auto"
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise BackendUnavailableError(f"unknown dtype {name!r}; use float32, bfloat16, float16 or auto")
    return dtype


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, list):
        ids.update(i for i in configured if isinstance(i, int))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _with_adapter(model: Any, adapter: str) -> Any:
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise BackendUnavailableError("a LoRA adapter needs peft: pip install 'tfgrpo[finetune]'") from exc
    if not Path(adapter).is_dir():
        raise BackendUnavailableError(f"adapter directory not found: {adapter}")
    if not (Path(adapter) / "adapter_config.json").is_file() and (Path(adapter) / "config.json").is_file():
        raise BackendUnavailableError(
            f"{adapter} is a full fine-tune (a whole model, no adapter_config.json): "
            f"evaluate it with --model {adapter} and no --adapter"
        )
    try:
        with_adapter = PeftModel.from_pretrained(model, adapter)
    except (OSError, ValueError, KeyError) as exc:
        raise BackendUnavailableError(f"could not load the adapter {adapter!r} onto the model: {exc}") from exc
    # Merged weights generate as fast as the base model; outputs are the adapter's.
    return with_adapter.merge_and_unload()


__all__ = ["TransformersBackend"]
