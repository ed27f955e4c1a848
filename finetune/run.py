"""One fine-tuning run, top to bottom: config -> data -> model -> trainer -> train -> save -> summary.

`run_finetune("grpo", model=..., data=..., out=...)` is what `tfgrpo finetune` calls. The output folder
holds the adapter (`adapter_config.json` + `adapter_model.safetensors`, a standard peft adapter) or the
full model, the tokenizer, `metrics.jsonl` (one line per logging step) and `finetune_summary.json`
(method, base model, wall time, samples, steps, tokens processed and in the loss, RL groups filtered) for
`tfgrpo compare`'s cost and training tables.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.core.atomic import folder_target
from tfgrpo.finetune import adapters
from tfgrpo.finetune import data as data_builders
from tfgrpo.finetune.errors import FinetuneDataError, FinetuneError
from tfgrpo.finetune.longlora import disable_s2_attention, s2_call_counts
from tfgrpo.finetune.models import (
    count_parameters,
    device_training_defaults,
    load_model,
    load_tokenizer,
    resolve_model_source,
)
from tfgrpo.finetune.reporting import reporting_options
from tfgrpo.rewards import REWARD_NAMES
from tfgrpo.rollout.tools import BUILTIN_TOOLS, parse_tool_names

logger = logging.getLogger(__name__)

SUMMARY_FILE = "finetune_summary.json"
METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class MethodSpec:
    module: str  # finetune.<module>
    config_class: str
    builder: str
    data: str  # "sft" | "pairs" | "kto" | "prompts"


METHOD_SPECS: dict[str, MethodSpec] = {
    "sft": MethodSpec("sft", "SFTFinetuneConfig", "build_sft_trainer", "sft"),
    "dpo": MethodSpec("dpo", "DPOFinetuneConfig", "build_dpo_trainer", "pairs"),
    "ipo": MethodSpec("dpo", "IPOFinetuneConfig", "build_dpo_trainer", "pairs"),
    "cdpo": MethodSpec("dpo", "CDPOFinetuneConfig", "build_dpo_trainer", "pairs"),
    "kto": MethodSpec("kto", "KTOFinetuneConfig", "build_kto_trainer", "kto"),
    "orpo": MethodSpec("orpo", "ORPOFinetuneConfig", "build_orpo_trainer", "pairs"),
    "ppo": MethodSpec("ppo", "PPOFinetuneConfig", "build_ppo_trainer", "prompts"),
    "grpo": MethodSpec("grpo", "GRPOFinetuneConfig", "build_grpo_trainer", "prompts"),
    "gspo": MethodSpec("grpo", "GSPOFinetuneConfig", "build_grpo_trainer", "prompts"),
}

FINETUNE_EXTRA_PACKAGES = ("trl", "peft", "datasets")
FINETUNE_EXTRA_HINT = "install the finetune extra: pip install 'tfgrpo[finetune]'"

# Keys of the YAML file that are not config fields but choose the data.
DATA_OPTIONS = ("success_threshold", "prompt_source", "max_pairs_per_group")


def method_spec(method: str) -> MethodSpec:
    if method not in METHOD_SPECS:
        raise FinetuneError(f"unknown method {method!r}; choose one of {', '.join(METHOD_SPECS)}")
    return METHOD_SPECS[method]


def require_finetune_extra() -> None:
    """The optional `finetune` extra (trl, peft, datasets) is installed, or one line saying how to get it."""
    for package in FINETUNE_EXTRA_PACKAGES:
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as exc:
            if (exc.name or package).split(".")[0] != package:
                raise  # the package is there but broken: its own traceback says why
            raise FinetuneError(f"{FINETUNE_EXTRA_HINT} (no {package})") from None


def load_method(method: str) -> tuple[type, Any]:
    spec = method_spec(method)
    require_finetune_extra()  # before finetune.<module>, which imports trl at its top
    module = importlib.import_module(f"tfgrpo.finetune.{spec.module}")
    return getattr(module, spec.config_class), getattr(module, spec.builder)


def check_inputs(method: str, *, data: str | Path, out: str | Path, options: dict[str, Any]) -> Path:
    """What can be refused before TRL is imported or anything is written, in one line each: the method, an
    output folder that cannot be made, `check_options`, and data that is neither a file, a learn run nor a
    bundled set. Returns `out` as a Path."""
    method_spec(method)
    out = folder_target(out, FinetuneError)
    check_options(method, options)
    reporting_options(options, out)
    if data_builders.bundled_dataset_name(data) is None:
        data_builders.resolve_data_file(data)
    return out


def check_options(method: str, options: dict[str, Any]) -> None:
    """Options TRL would take without a word or fail on deep inside torch (learning_rate 0 trains nothing, a
    batch size of 0), the adapter settings, and an RL method's reward and tools (else found only after the
    model has loaded), checked without importing TRL."""
    spec = method_spec(method)
    for key, minimum in (("learning_rate", 0.0), ("num_train_epochs", 0.0)):
        value = options.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value > minimum
        ):
            hint = " (YAML reads 1e-4 as text: write 1.0e-4)" if isinstance(value, str) else ""
            raise FinetuneError(f"{method}: {key} must be a number > {minimum:g} (got {value!r}){hint}")
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_steps"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            hint = "; leave it out to train for num_train_epochs" if key == "max_steps" else ""
            raise FinetuneError(f"{method}: {key} must be a whole number >= 1 (got {value!r}){hint}")
    adapter_fields = {f.name for f in dataclasses.fields(adapters.AdapterArguments)}
    try:
        adapters.AdapterArguments(
            **{k: v for k, v in options.items() if k in adapter_fields}
        ).check_adapter_arguments()
    except (ValueError, TypeError) as exc:
        raise FinetuneError(f"{method} config: {exc}") from None
    if spec.data != "prompts":
        return
    reward = options.get("reward")
    if isinstance(reward, str) and reward not in REWARD_NAMES and not Path(reward).is_dir():
        raise FinetuneError(
            f"{method}: reward {reward!r} is neither a reward ({', '.join(REWARD_NAMES)}) nor a reward-model folder"
        )
    unknown = [
        name for name in parse_tool_names(options.get("tools")) if name not in BUILTIN_TOOLS and ":" not in name
    ]
    if unknown:
        raise FinetuneError(
            f"{method}: unknown tool '{unknown[0]}'; available: {', '.join(sorted(BUILTIN_TOOLS))} "
            "(or 'package.module:ClassName' for your own)"
        )


def build_method_config(method: str, options: dict[str, Any]) -> Any:
    """The method's config from `options` (YAML + command line); unknown keys and bad values name the key."""
    check_options(method, options)
    config_class, _ = load_method(method)
    known = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise FinetuneError(
            f"{method}: unknown option(s) {', '.join(unknown)} (not fields of {config_class.__name__})"
        )
    try:
        return config_class(**options)
    except (ValueError, TypeError) as exc:
        raise FinetuneError(f"{method} config: {exc}") from None


def build_dataset_rows(kind: str, data: str | Path, data_options: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows in TRL's format for a method's data kind, from rollouts, problems (a file or a bundled dataset
    name such as `math_l5_train200`) or prepared TRL rows."""
    bundled = data_builders.bundled_dataset_name(data)
    if bundled is not None:
        if kind != "prompts":
            raise FinetuneDataError(
                f"{bundled}: a bundled dataset holds problems without completions; only the RL "
                "methods (ppo, grpo, gspo) train on it, sft/dpo/ipo/cdpo/kto/orpo need a learn "
                "run's rollouts.jsonl (or TRL-format rows)"
            )
        return data_builders.prompt_examples(data_builders.load_bundled_problems(bundled))
    path = data_builders.resolve_data_file(data)
    found = data_builders.detect_kind(path)
    threshold = float(data_options.get("success_threshold", 1.0))
    source = data_options.get("prompt_source", "problem")
    if found == "rollouts":
        rollouts = data_builders.load_rollouts(path)
        if kind == "sft":
            rows = data_builders.sft_examples(rollouts, threshold=threshold, prompt_source=source)
        elif kind == "pairs":
            rows = data_builders.preference_pairs(
                rollouts,
                threshold=threshold,
                prompt_source=source,
                max_pairs_per_group=int(data_options.get("max_pairs_per_group", 4)),
            )
        elif kind == "kto":
            rows = data_builders.kto_examples(rollouts, threshold=threshold, prompt_source=source)
        else:
            rows = data_builders.prompt_examples(rollouts, prompt_source=source)
    elif found == "problems":
        if kind != "prompts":
            raise FinetuneDataError(
                f"{path}: problem/answer rows have no completions; methods sft, dpo, ipo, cdpo, "
                "kto, orpo need a learn run's rollouts.jsonl (or TRL-format rows)"
            )
        rows = data_builders.prompt_examples(data_builders.load_problems(path))
    else:
        required = {
            "sft": {"prompt", "completion"},
            "pairs": {"prompt", "chosen", "rejected"},
            "kto": {"prompt", "completion", "label"},
            "prompts": {"prompt"},
        }[kind]
        if kind == "sft" and "messages" in next(iter(data_builders.read_jsonl(path)))[1]:
            required = {"messages"}
        rows = data_builders.load_prepared(path, required)
    if not rows:
        raise FinetuneDataError(
            f"{path}: no usable {kind} examples (e.g. no correct rollouts at reward >= "
            f"{threshold}, or no group with both a correct and a wrong completion)"
        )
    return rows


class MetricsLogCallback:
    """Appends every logged metrics dict (with the step) to `metrics.jsonl`: the run's learning curve."""

    def __new__(cls, path: Path) -> Any:
        from transformers import TrainerCallback

        class _Callback(TrainerCallback):
            def on_log(
                self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
            ) -> None:
                if logs and state.is_world_process_zero:
                    with path.open("a", encoding="utf-8") as handle:
                        handle.write(json.dumps({"step": state.global_step, **logs}, default=float) + "\n")

        return _Callback()


def run_finetune(
    method: str,
    *,
    data: str | Path,
    out: str | Path,
    model: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train `method` on `data`, save into `out`, return the summary written to finetune_summary.json."""
    started = time.perf_counter()
    spec = method_spec(method)
    _refuse_fsdp_on_cpu()
    options = dict(options or {})
    data_options = {key: options.pop(key) for key in DATA_OPTIONS if key in options}
    out = check_inputs(method, data=data, out=out, options=options)  # before TRL loads
    if spec.module != "grpo" and any(options.get(key) for key in ("tools", "tool_options", "max_turns")):
        raise FinetuneError(f"{method}: tools (multi-turn rollouts) work with grpo and gspo only")

    rows = build_dataset_rows(spec.data, data, data_options)  # bad data fails before any model loads
    _, builder = load_method(method)  # also checks that trl / peft / datasets are installed
    source = resolve_model_source(model)
    config, quantization = _training_config(method, options, source, out)
    out.mkdir(parents=True, exist_ok=True)  # every option and the data are checked: nothing is written before
    tokenizer = load_tokenizer(source)
    quantization_config = adapters.bnb_quantization_config(quantization) if quantization else None
    policy = load_model(source, quantization_config=quantization_config)
    check_model_options(method, config, policy)
    trainer = _build_trainer(builder, method, config, policy, tokenizer, rows, out)
    train_result, s2_calls = _train_and_save(trainer, method, config, policy, len(rows), out)
    summary = {
        "method": method,
        "model": source.display,
        "base_model": source.display,
        "peft": getattr(config, "peft", "none"),
        "adapter": (out / "adapter_config.json").is_file(),
        "quantization": quantization,
        "out": str(out),
        "samples": len(rows),
        "steps": trainer.state.global_step,
        "train_loss": train_result.training_loss,
        "wall_time_s": round(time.perf_counter() - started, 3),
        "train_time_s": round(float(train_result.metrics.get("train_runtime", 0.0)), 3),
        "final_metrics": next((h for h in reversed(trainer.state.log_history) if "loss" in h), {}),
        "run_name": out.name,
        "s2_attention_calls": s2_calls,
        **learning_signal(trainer),
        **_processes_finished(trainer.accelerator),
    }
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(str(out))
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=float) + "\n", encoding="utf-8")
    trainer.accelerator.wait_for_everyone()
    check_something_learned(method, config, summary)
    return summary


def _refuse_fsdp_on_cpu() -> None:
    """`accelerate launch --use_fsdp` sets ACCELERATE_USE_FSDP for every process; on CPU accelerate keeps the
    processes plain DDP (MULTI_CPU) and would ignore FSDP without a word, so say it instead."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() not in ("1", "true"):
        return
    import torch

    if not torch.cuda.is_available():
        raise FinetuneError(
            "FSDP needs GPUs: accelerate runs CPU processes as plain DDP; drop --use_fsdp (DDP) or run on GPUs"
        )


def _training_config(method: str, options: dict[str, Any], source: Any, out: Path) -> tuple[Any, str | None]:
    """The method's config (device defaults < QLoRA overrides < options) and the QLoRA base precision, if any."""
    settings = {**device_training_defaults(), "output_dir": str(out)}
    quantization = None
    if options.get("peft") == "qlora":
        settings.update(adapters.qlora_training_overrides())
        requested = options.get("quantization", "auto")
        quantization = adapters.choose_quantization(
            count_parameters(source), adapters.available_memory_bytes(), requested
        )
        logger.info(
            "QLoRA base precision: %s (%s)",
            quantization,
            "as requested" if requested != "auto" else "auto: 8-bit if its weights fit in 25% of free memory",
        )
    return build_method_config(method, {**settings, **options, **reporting_options(options, out)}), quantization


def _build_trainer(
    builder: Any, method: str, config: Any, policy: Any, tokenizer: Any, rows: list[dict[str, Any]], out: Path
) -> Any:
    from datasets import Dataset

    metrics_path = out / METRICS_FILE
    metrics_path.unlink(missing_ok=True)
    try:
        return builder(
            config, policy, tokenizer, Dataset.from_list(rows), callbacks=[MetricsLogCallback(metrics_path)]
        )
    except ValueError as exc:  # TRL's own checks of options against the model and data: one line
        raise FinetuneError(f"{method}: {exc}".splitlines()[0]) from None


def _train_and_save(
    trainer: Any, method: str, config: Any, policy: Any, num_rows: int, out: Path
) -> tuple[Any, dict[str, int] | None]:
    """Train, refuse a run in which no optimizer step ran, save the model; returns (train result, S2 counts)."""
    accelerator = trainer.accelerator
    trained = accelerator.unwrap_model(trainer.model)
    initial_adapter = adapters.save_initial_adapter(trained, getattr(config, "peft", "none"))
    try:
        train_result = trainer.train()
        if trainer.state.global_step == 0:
            raise FinetuneError(
                f"{method}: no optimizer step ran: {num_rows} examples make no full batch (batch "
                f"size {config.per_device_train_batch_size}; RL methods need batch size / group size "
                "distinct prompts); lower the batch size or add data"
            )
        s2_calls = finish_longlora(policy, config)  # the transformers model inside any peft wrapper
        trainer.save_model(str(out))  # the main process writes; the others wait for it
        if initial_adapter is not None and accelerator.is_main_process:
            adapters.save_adapter(trained, out, initial_adapter)  # PiSSA / OLoRA: the plain-LoRA delta on the base
    finally:
        if initial_adapter is not None:
            shutil.rmtree(initial_adapter, ignore_errors=True)
    return train_result, s2_calls


def _processes_finished(accelerator: Any) -> dict[str, Any]:
    """Under `accelerate launch` every process gets here: each reports its rank (a collective, so this also
    proves all of them trained to the end), and only the main process writes files."""
    import torch

    ranks = accelerator.gather(torch.tensor([accelerator.process_index], device=accelerator.device)).tolist()
    return {
        "world_size": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type.value),
        "ranks_finished": sorted(int(rank) for rank in ranks),
    }


def check_model_options(method: str, config: Any, model: Any) -> None:
    """Options that only make sense for some models, refused in one line before TRL trips over them."""
    coefficient = getattr(config, "router_aux_loss_coef", None)
    if coefficient and not hasattr(model.config.get_text_config(), "output_router_logits"):
        raise FinetuneError(
            f"{method}: router_aux_loss_coef={coefficient} needs a Mixture-of-Experts model (its "
            f"router's load-balancing loss); {model.config.model_type} is dense: drop the option"
        )


def finish_longlora(model: Any, config: Any) -> dict[str, int] | None:
    """LongLoRA: how many attention calls ran shifted-sparse vs full; none shifted is an error, not a fallback.
    The saved model goes back to plain attention (how LongLoRA models are used)."""
    if getattr(config, "peft", "none") != "longlora":
        return None
    counts = s2_call_counts(model)
    logger.info(
        "LongLoRA S2-attention: %d attention calls shifted-sparse (training), %d full (eval / decoding)",
        counts["shifted"],
        counts["full"],
    )
    disable_s2_attention(model)
    if counts["shifted"] == 0:
        raise FinetuneError(
            "longlora: no attention call ran shifted sparse attention (the model's attention layers "
            "do not use transformers' attention registry); use peft lora for this model"
        )
    return counts


def learning_signal(trainer: Any) -> dict[str, Any]:
    """What the training saw: `tokens_processed` (TRL's count of tokens through the model), `tokens_in_loss`
    (SFT: the completion tokens the loss is computed on; RL: the completion tokens of groups kept, per
    generation batch), and for RL methods the generation batches, those with nothing to learn and the
    groups filtered for equal rewards (see tfgrpo.finetune.grpo.LearningSignalMixin)."""
    import torch

    signal: dict[str, Any] = {}
    seen = [entry["num_tokens"] for entry in trainer.state.log_history if entry.get("num_tokens") is not None]
    if seen:
        signal["tokens_processed"] = int(seen[-1])
    if hasattr(trainer, "batches_with_nothing_to_learn"):  # RL: counted on every process over all of them
        signal["tokens_in_loss"] = int(trainer.tokens_in_loss_total)
        signal.update(
            rl_batches=trainer.batches_generated, rl_batches_nothing_to_learn=trainer.batches_with_nothing_to_learn
        )
        if getattr(trainer, "groups_total", 0):
            signal["groups"] = {"total": trainer.groups_total, "filtered": trainer.groups_filtered_total}
    elif hasattr(trainer, "tokens_in_loss_total"):  # SFT: each process counted its own batches
        local = torch.tensor([trainer.tokens_in_loss_total], device=trainer.accelerator.device)
        signal["tokens_in_loss"] = int(trainer.accelerator.gather(local).sum().item())
    return signal


def check_something_learned(method: str, config: Any, summary: dict[str, Any]) -> None:
    """A run in which every RL batch had nothing to learn is a failure (after the summary is written)."""
    batches = summary.get("rl_batches", 0)
    if not batches or summary["rl_batches_nothing_to_learn"] < batches:
        return
    message = (
        f"{method}: every step trained nothing ({batches} of {batches} generation batches had no loss token "
        "with a non-zero advantage, e.g. every sample of each group got the same reward); the saved model "
        "equals the start"
    )
    logger.warning(message)
    if not getattr(config, "allow_no_learning", False):
        raise FinetuneError(f"{message}; pass --set allow_no_learning=true to accept such a run")
