"""LongLoRA's shifted sparse attention (S2-Attn) as a transformers attention function.

During training, the sequence is cut into groups of `ratio * T` tokens and each group attends only to
itself; half of the heads work on the sequence shifted by half a group, so information still flows
between neighbouring groups (Chen et al., 2023, "LongLoRA", §3.2). Cost per layer drops from T² to
T²·ratio. A length that is not a multiple of the group size is padded at the end with keys nobody may
see, so every training forward runs S2-Attn (the first release asserted divisibility; padding keeps the
same groups for the real tokens). At inference (eval mode, cached decoding, `generate`) it is plain SDPA
attention, so a model trained with S2-Attn is used with standard full attention, as in the paper.

Every call is counted on its attention layer ("shifted" or "full"); `s2_call_counts(model)` sums them,
so a run can prove (and log) that the sparse path really ran.

Causality is kept in the *original* token order: in the wrapped-around group of the shifted heads,
the first tokens never see the last ones (the information leak of the first LongLoRA release).

Works for every model whose attention layers call `ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`
(Llama, Qwen2, Mistral, Mixtral, Qwen2-MoE ... in transformers 5).
"""

from __future__ import annotations

import functools
from typing import Any

S2_ATTENTION = "s2_attention"
DEFAULT_GROUP_SIZE_RATIO = 0.25


def s2_attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Same signature and output layout (B, T, H, D) as transformers' `sdpa_attention_forward`."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    batch, heads, length, head_dim = query.shape
    ratio = getattr(getattr(module, "config", None), "s2_group_size_ratio", DEFAULT_GROUP_SIZE_RATIO)
    group = max(int(length * ratio), 2)
    if not module.training or key.shape[2] != length:  # inference / cached decoding: full attention
        _count_call(module, "full")
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    _count_call(module, "shifted")
    true_length = length
    length = -(-length // group) * group  # padded to whole groups; the padding is masked out as keys
    pad = length - true_length
    if pad:
        query, key, value = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (query, key, value))

    if key.shape[1] != heads:  # grouped-query attention: one K/V per query head from here on
        key = repeat_kv(key, heads // key.shape[1])
        value = repeat_kv(value, heads // value.shape[1])
    shift = group // 2
    shifted_heads = heads // 2
    num_groups = length // group

    def shift_half(x: torch.Tensor, amount: int) -> torch.Tensor:
        return torch.cat([x[:, : heads - shifted_heads], x[:, heads - shifted_heads :].roll(amount, dims=2)], dim=1)

    def to_groups(x: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B*n, H, G, D)
        return (
            x.view(batch, heads, num_groups, group, -1).transpose(1, 2).reshape(batch * num_groups, heads, group, -1)
        )

    blocks = _group_masks(attention_mask, batch, heads, true_length, length, group, query.device)
    q, k, v = (to_groups(shift_half(x, -shift)) for x in (query, key, value))
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=blocks, dropout_p=dropout if module.training else 0.0, scale=scaling
    )
    out = out.view(batch, num_groups, heads, group, head_dim).transpose(1, 2).reshape(batch, heads, length, head_dim)
    out = shift_half(out, shift)[:, :, :true_length]
    return out.transpose(1, 2).contiguous(), None


def _group_masks(
    attention_mask: Any, batch: int, heads: int, true_length: int, length: int, group: int, device: Any
) -> Any:
    """Which keys each query may see inside its group, in the shifted order: (B*n, H, G, G) booleans."""
    import torch

    shift, shifted_heads, num_groups = group // 2, heads // 2, length // group
    pad = length - true_length
    allowed = _allowed_pairs(attention_mask, batch, true_length, device)  # (B, 1, T, T), original order
    if pad:  # padded keys are never visible; padded queries see only themselves (eye below), output dropped
        allowed = torch.nn.functional.pad(allowed, (0, pad, 0, pad), value=False)
    allowed = allowed.expand(batch, heads, length, length)
    allowed = torch.cat(
        [allowed[:, : heads - shifted_heads], allowed[:, heads - shifted_heads :].roll((-shift, -shift), dims=(2, 3))],
        dim=1,
    )
    # Diagonal blocks only: each group's queries against the same group's keys.
    blocks = allowed.reshape(batch, heads, num_groups, group, num_groups, group)
    blocks = torch.diagonal(blocks, dim1=2, dim2=4).permute(0, 4, 1, 2, 3)  # (B, n, H, G, G)
    # A query with no visible key (left padding) would give NaN; let it see itself (its output is ignored).
    blocks = blocks | torch.eye(group, dtype=torch.bool, device=device)
    return blocks.reshape(batch * num_groups, heads, group, group)


def _count_call(module: Any, kind: str) -> None:
    counts = module.__dict__.setdefault("s2_calls", {"shifted": 0, "full": 0})
    counts[kind] += 1


def s2_call_counts(model: Any) -> dict[str, int]:
    """Attention calls that ran shifted-sparse vs full, summed over the model's layers since S2 was enabled."""
    totals = {"shifted": 0, "full": 0}
    for module in model.modules():
        for kind, count in module.__dict__.get("s2_calls", {}).items():
            totals[kind] += count
    return totals


def _allowed_pairs(attention_mask: Any, batch: int, length: int, device: Any) -> Any:
    """Boolean (B, 1, T, T): may query i attend to key j (causal + padding), in original positions."""
    import torch

    if attention_mask is None:
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        return causal.view(1, 1, length, length).expand(batch, 1, length, length)
    mask = attention_mask[..., -length:, -length:]
    if mask.dtype != torch.bool:  # additive float mask: 0 = visible, large negative = hidden
        mask = mask == 0
    return mask.expand(batch, mask.shape[1], length, length)[:, :1]


def enable_s2_attention(model: Any, group_size_ratio: float = DEFAULT_GROUP_SIZE_RATIO) -> Any:
    """Switch `model` (a transformers causal LM, possibly peft-wrapped) to S2-Attn for training.

    Registers the attention function under the name "s2_attention" in transformers' attention
    registry (idempotent) and points the model config at it; masks are built as for SDPA. `generate`
    (rollouts of the RL methods) runs with full attention, as the trained model will be used.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(S2_ATTENTION, s2_attention_forward)
    AttentionMaskInterface.register(S2_ATTENTION, sdpa_mask)
    config = model.config
    config.s2_group_size_ratio = group_size_ratio
    config._attn_implementation = S2_ATTENTION
    for module in model.modules():
        module.__dict__.pop("s2_calls", None)
    if not getattr(model.generate, "_full_attention", False):
        model.generate = _generate_with_full_attention(model, model.generate)
    return model


def _generate_with_full_attention(model: Any, generate: Any) -> Any:
    @functools.wraps(generate)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        config = model.config
        implementation = config._attn_implementation
        config._attn_implementation = "sdpa"
        try:
            return generate(*args, **kwargs)
        finally:
            config._attn_implementation = implementation

    wrapper._full_attention = True
    return wrapper


def enable_for_config(model: Any, config: Any) -> Any:
    """`enable_s2_attention` when the method's config asks for `peft: longlora`; the model unchanged otherwise."""
    if getattr(config, "peft", None) == "longlora":
        enable_s2_attention(model, config.s2_group_size_ratio)
    return model


def disable_s2_attention(model: Any) -> Any:
    """Back to plain SDPA (what a saved LongLoRA model uses at inference)."""
    model.config._attn_implementation = "sdpa"
    model.__dict__.pop("generate", None)  # the full-attention wrapper of `enable_s2_attention`
    if hasattr(model.config, "s2_group_size_ratio"):
        del model.config.s2_group_size_ratio
    return model
