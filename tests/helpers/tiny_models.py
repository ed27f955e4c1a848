"""Tiny, random-init models and a locally trained tokenizer for tests (no hub access).

    from tests.helpers.tiny_models import build_tiny_tokenizer, build_tiny_model, tiny_model_dir

    tokenizer = build_tiny_tokenizer()                     # byte-level BPE, ~600 tokens, chat template
    model = build_tiny_model(tokenizer, arch="qwen2")      # hidden 64, 2 layers, random weights
    path = tiny_model_dir(tmp_path)                        # both saved; AutoModelForCausalLM/AutoTokenizer load it
    tokenizer = build_tiny_tokenizer(tools=True)           # Qwen2.5's tool-calling template instead (TRL parses it)

The BPE merges are trained once per process (`functools.lru_cache` on the serialised tokenizer);
every call returns a fresh tokenizer object, so a test may mutate its copy freely.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

Arch = Literal["qwen2", "llama", "mixtral", "qwen2_moe"]

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|im_end|>"
BOS_TOKEN = "<|im_start|>"
SPECIAL_TOKENS = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, "<|endoftext|>"]
VOCAB_SIZE = 640

# ChatML, with `{% generation %}` around assistant text so TRL's `assistant_only_loss` can mask the rest.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "the answer is a number we solve find compute let so then therefore step first second final "
    "problem triangle circle area sum product integer prime divisible remainder equation root value "
    "question assistant user system think reason check verify because since thus hence"
).split()
_LATEX = [
    r"\boxed{",
    r"\frac{",
    r"\sqrt{",
    r"\cdot",
    r"\times",
    r"\pi",
    r"\le",
    r"\ge",
    r"\neq",
    "^{2}",
    "_{n}",
    r"\left(",
    r"\right)",
    "$",
    "$$",
    "{",
    "}",
    "=",
    "+",
    "-",
    "*",
    "/",
    "(",
    ")",
    "<",
    ">",
]


def _training_corpus(lines: int = 400) -> list[str]:
    """Deterministic sentences mixing words, digits and LaTeX-ish symbols (no randomness to seed)."""
    corpus = []
    for i in range(lines):
        words = " ".join(_WORDS[(i * 7 + k * 3) % len(_WORDS)] for k in range(6))
        latex = " ".join(_LATEX[(i + k * 5) % len(_LATEX)] for k in range(4))
        corpus.append(f"{words} {i} + {i * 3 % 97} = {i + i * 3 % 97} {latex} \\boxed{{{i % 50}}} .")
    corpus += [str(n) for n in range(200)]
    return corpus


@functools.lru_cache(maxsize=1)
def _trained_tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes, nothing is <unk>
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(), trainer=trainer)
    return tok.to_str()


def tool_chat_template() -> str:
    """Qwen2.5's chat template as TRL ships it: renders `tools`, assistant `tool_calls` as `<tool_call>{json}
    </tool_call>` and `role: tool` messages, and TRL recognises it (response parsing, prefix-preserving copy)."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")


def build_tiny_tokenizer(save_dir: str | Path | None = None, *, tools: bool = False) -> Any:
    """A fresh `PreTrainedTokenizerFast` (pad, eos, bos, ChatML template with generation tags; with `tools=True`
    the tool-calling Qwen2.5 template of `tool_chat_template()` instead, for multi-turn GRPO)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer_json()),
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=BOS_TOKEN,
        unk_token=None,
        model_max_length=2048,
        padding_side="left",
    )
    tokenizer.chat_template = tool_chat_template() if tools else CHAT_TEMPLATE
    if save_dir is not None:
        tokenizer.save_pretrained(str(save_dir))
    return tokenizer


def tiny_config(tokenizer: Any, arch: Arch = "qwen2") -> Any:
    """A transformers config for `arch`: hidden 64, 2 layers, 4 heads (2 KV), vocab = tokenizer's."""
    from transformers import LlamaConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig

    common: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    if arch == "qwen2":
        return Qwen2Config(**common)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "mixtral":
        return MixtralConfig(
            **common, num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.02
        )
    if arch == "qwen2_moe":
        return Qwen2MoeConfig(
            **common,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            decoder_sparse_step=1,
            output_router_logits=True,
            router_aux_loss_coef=0.02,
        )
    raise ValueError(f"unknown tiny arch {arch!r}; choose qwen2, llama, mixtral or qwen2_moe")


def build_tiny_model(
    tokenizer: Any, arch: Arch = "qwen2", save_dir: str | Path | None = None, *, seed: int = 0
) -> Any:
    """A random-init causal LM (float32) matching `tokenizer`; saved to `save_dir` when given."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(tokenizer, arch), dtype=torch.float32)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id
    )
    if save_dir is not None:
        model.save_pretrained(str(save_dir))
    return model


def tiny_model_dir(tmp_path: str | Path, arch: Arch = "qwen2", *, tools: bool = False) -> Path:
    """Save a tiny tokenizer + model under `tmp_path/tiny-<arch>` (`-tools`: tool-calling template) and return it."""
    path = Path(tmp_path) / (f"tiny-{arch}-tools" if tools else f"tiny-{arch}")
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(save_dir=path, tools=tools)
    build_tiny_model(tokenizer, arch=arch, save_dir=path)
    return path
