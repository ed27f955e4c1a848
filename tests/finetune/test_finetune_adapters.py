"""LoRA variants, QLoRA quantisation, and LongLoRA's shifted sparse attention."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_models import build_tiny_model, build_tiny_tokenizer, tiny_model_dir
from tfgrpo.finetune.adapters import (
    LONGLORA_TRAINABLE_MODULES,
    AdapterArguments,
    bnb_quantization_config,
    build_peft_config,
    choose_quantization,
)
from tfgrpo.finetune.longlora import disable_s2_attention, enable_s2_attention, s2_attention_forward


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.mark.parametrize(
    ("peft", "expected"),
    [
        ("lora", {"use_rslora": False, "use_dora": False, "init_lora_weights": True}),
        ("rslora", {"use_rslora": True}),
        ("dora", {"use_dora": True}),
        ("pissa", {"init_lora_weights": "pissa_niter_4"}),
        ("qlora", {"use_dora": False}),
    ],
)
def test_lora_variants_build_the_right_adapter_config(tokenizer, peft, expected):
    from peft import get_peft_model

    config = build_peft_config(AdapterArguments(peft=peft, lora_r=8, lora_alpha=16))
    for key, value in expected.items():
        assert getattr(config, key) == value
    model = get_peft_model(build_tiny_model(tokenizer, "llama"), config)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert model.peft_config["default"].r == 8


def test_rslora_scales_by_alpha_over_sqrt_r(tokenizer):
    from peft import get_peft_model

    model = get_peft_model(
        build_tiny_model(tokenizer), build_peft_config(AdapterArguments(peft="rslora", lora_r=16, lora_alpha=32))
    )
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    assert layer.scaling["default"] == pytest.approx(32 / 16**0.5)


def test_longlora_trains_embeddings_and_norms(tokenizer):
    from peft import get_peft_model

    config = build_peft_config(AdapterArguments(peft="longlora"))
    assert config.modules_to_save == LONGLORA_TRAINABLE_MODULES
    model = get_peft_model(build_tiny_model(tokenizer, "qwen2"), config)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("embed_tokens" in n for n in trainable)
    assert any("input_layernorm" in n for n in trainable) and any("model.norm" in n for n in trainable)


def test_full_finetuning_has_no_adapter():
    assert build_peft_config(AdapterArguments(peft="none")) is None


@pytest.mark.parametrize(
    "bad",
    [
        dict(peft="lorax"),
        dict(lora_r=0),
        dict(peft="pissa", lora_dropout=0.1),
        dict(peft="lora", quantization="4bit"),
        dict(s2_group_size_ratio=0),
    ],
)
def test_adapter_arguments_reject_bad_values(bad):
    with pytest.raises(ValueError):
        AdapterArguments(**bad).check_adapter_arguments()


def test_quantization_rule():
    gib = 1024**3
    assert choose_quantization(135_000_000, 24 * gib) == "8bit"  # 0.13 GB of 8-bit weights << 25% of 24 GiB
    assert choose_quantization(7_000_000_000, 24 * gib) == "4bit"  # 7 GB > 6 GiB
    assert choose_quantization(7_000_000_000, 80 * gib) == "8bit"
    assert choose_quantization(135_000_000, 24 * gib, "4bit") == "4bit"


def test_qlora_model_has_4bit_layers_and_trains(tmp_path, tokenizer):
    import bitsandbytes as bnb
    from peft import get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir(tmp_path, "llama")
    model = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=bnb_quantization_config("4bit"), dtype=torch.float32
    )
    four_bit = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(four_bit) == 2 * 7  # q, k, v, o, gate, up, down per layer
    assert four_bit[0].weight.quant_type == "nf4" and four_bit[0].weight.quant_state.nested  # double quant
    model = get_peft_model(
        prepare_model_for_kbit_training(model, use_gradient_checkpointing=False),
        build_peft_config(AdapterArguments(peft="qlora")),
    )
    ids = torch.randint(5, 600, (2, 12))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_B" in n]
    assert grads and all(g is not None for g in grads)


def test_8bit_choice_loads_int8_layers(tmp_path):
    import bitsandbytes as bnb
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir(tmp_path, "qwen2"), quantization_config=bnb_quantization_config("8bit")
    )
    assert any(isinstance(m, bnb.nn.Linear8bitLt) for m in model.modules())


# --- S2-Attn ------------------------------------------------------------------------------------------------
class _Attention(torch.nn.Module):
    def __init__(self, ratio):
        super().__init__()
        self.config = type("C", (), {"s2_group_size_ratio": ratio})()
        self.num_key_value_groups = 1


def _qkv(seed=0, length=16, heads=4):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, length, 8, generator=gen) for _ in range(3)]


def test_s2_attention_with_one_group_equals_full_causal_attention():
    q, k, v = _qkv()
    module = _Attention(1.0).train()
    out, _ = s2_attention_forward(module, q, k, v, None)
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, full)


def test_s2_attention_is_local_per_group_and_shifted_heads_bridge_groups():
    q, k, v = _qkv()
    module = _Attention(0.25).train()  # groups of 4 tokens
    base, _ = s2_attention_forward(module, q, k, v, None)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 2], v2[:, :, 2] = 5.0, 5.0  # perturb token 2 (group 0 for unshifted heads)
    moved, _ = s2_attention_forward(module, q, k2, v2, None)
    changed = (moved - base).abs().amax(dim=-1)[0]  # (T, H)
    # Unshifted heads 0-1: only tokens 2-3 (same group, causal) see token 2.
    assert changed[2:4, :2].min() > 0 and changed[4:, :2].max() == 0 and changed[:2, :2].max() == 0
    # Shifted heads 2-3 (groups start at 2, 6, ...): tokens 2..5 see it, token 6+ does not.
    assert changed[2:6, 2:].min() > 0 and changed[6:, 2:].max() == 0
    # Causality in original order, also for the wrapped-around group: no token before 2 changes.
    assert changed[:2].max() == 0


def test_s2_attention_is_plain_attention_at_inference(tokenizer):
    model = build_tiny_model(tokenizer, "llama").eval()
    ids = torch.randint(5, 600, (2, 16))
    reference = model(input_ids=ids).logits
    enable_s2_attention(model, 0.25)
    torch.testing.assert_close(model(input_ids=ids).logits, reference)
    model.train()
    assert not torch.allclose(model(input_ids=ids).logits, reference)  # sparse attention while training
    disable_s2_attention(model)
    assert model.config._attn_implementation == "sdpa"
