"""Each method and each adapter learns: a handful of examples, a few dozen steps on a tiny model, and the
method's own objective improves by the margin stated in tests/helpers/finetune_cells.py (SFT NLL, preference
margin, KTO / ORPO loss, GRPO / GSPO / PPO reward)."""

from __future__ import annotations

import logging

import pytest

from tests.helpers.finetune_cells import ADAPTERS, METHODS, learnable_model_dir, run_cell
from tests.helpers.tiny_models import build_tiny_tokenizer

pytestmark = pytest.mark.timeout(120)

# Every method with LoRA; every adapter with SFT; the adapters that change how the reference model is
# obtained (PiSSA: a frozen copy; none: a frozen copy; LongLoRA: S2-attention) with a preference and an RL method.
CELLS = (
    [(method, "lora") for method in METHODS]
    + [("sft", peft) for peft in ADAPTERS if peft != "lora"]
    + [("dpo", "pissa"), ("dpo", "none"), ("kto", "longlora"), ("grpo", "none"), ("grpo", "pissa"), ("ppo", "none")]
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    return learnable_model_dir(tmp_path_factory.mktemp("learn"), tokenizer)


@pytest.mark.parametrize(("method", "peft"), CELLS, ids=[f"{m}-{p}" for m, p in CELLS])
def test_method_and_adapter_improve_their_own_objective(model_dir, tokenizer, tmp_path, method, peft, caplog):
    caplog.set_level(logging.ERROR)
    result = run_cell(method, peft, model_dir, tokenizer, tmp_path)
    objective = result.objective
    assert result.improved, (
        f"{method}/{peft}: {objective.description} {result.before:.3f} -> {result.after:.3f}, "
        f"gain {result.gain:.3f} < margin {objective.margin}"
    )
