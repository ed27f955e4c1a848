"""`tfgrpo finetune METHOD`: gradient baselines (SFT ... GSPO) on the same data and rewards; thin over finetune.run."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import ConfigError, deep_merge, drop_unset, load_yaml_value, read_yaml
from tfgrpo.finetune.adapters import AdapterArguments

METHOD_HELP = "sft | dpo | ipo | cdpo | kto | orpo | ppo | grpo | gspo"


def _parse_sets(items: list[str] | None) -> dict[str, Any]:
    """`--set beta=0.2 --set lora_target_modules=[q_proj,v_proj]`: values parsed as YAML scalars/lists."""
    parsed: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        parsed[key.strip().replace("-", "_")] = load_yaml_value(value, option=f"--set {item!r:.80}")
    return parsed


FLAGS = [
    opt.flag(
        "data",
        "-d",
        help="A learn run dir (its rollouts.jsonl), a problem/answer JSONL or bundled name such as "
        "math_l5_train200 (RL methods), or TRL-format JSONL.",
        kind=str,
    ),
    opt.flag("out", "-o", help="Output folder (adapter or model, metrics.jsonl, finetune_summary.json).", kind=str),
    opt.flag("model", "-m", help="Model name or local path (default: the embedded SmolLM2-135M-Instruct).", kind=str),
    opt.flag("peft"),
    opt.flag("lora_r"),
    opt.flag("lora_alpha"),
    # TRL's own fields: their classes import torch, and their defaults depend on METHOD (docs/finetune.md)
    opt.flag("max_steps", help="Optimizer steps (default: epochs).", kind=int),
    opt.flag(
        "learning_rate", "--learning-rate", "--lr", help="Peak learning rate (default: the method's).", kind=float
    ),
    opt.flag("per_device_train_batch_size", "--batch-size", help="Per-device train batch size.", kind=int),
    opt.flag("num_generations", "--group-size", help="GRPO/GSPO/PPO samples per prompt (1-16).", kind=int),
    opt.flag("reward", help="RL reward: a rewards/ name (math, ...) or a reward-model folder.", kind=str),
    opt.flag(
        "tools", help="GRPO/GSPO multi-turn rollouts with tools, e.g. python (repeatable or a,b).", kind=list[str]
    ),
    opt.flag("max_turns", help="Model turns per trajectory with tools (final answer included).", kind=int),
    opt.flag("seed", help="Random seed.", kind=int),
    opt.flag(
        "report_to",
        help="Experiment trackers TRL logs to: none | tensorboard | mlflow | wandb | trackio (repeatable or a,b; "
        "each an extra: pip install 'tfgrpo[NAME]').",
        kind=list[str],
    ),
    opt.flag("run_name", help="The run's name in the trackers (default: the --out folder's name).", kind=str),
]


def register(app: typer.Typer) -> None:
    @listed(app, "finetune")
    @opt.config_options(AdapterArguments, FLAGS)
    def finetune_command(
        overrides: dict[str, Any],
        method: Annotated[str, typer.Argument(help=METHOD_HELP)],
        config: opt.ConfigOpt = None,
        set_: Annotated[
            list[str] | None,
            typer.Option("--set", help="Any config field: KEY=VALUE (repeatable), e.g. --set beta=0.2."),
        ] = None,
    ) -> None:
        from rich.console import Console

        from tfgrpo.finetune.errors import FinetuneError
        from tfgrpo.finetune.run import DATA_OPTIONS, check_inputs, load_method, run_finetune

        file_options = read_yaml(config) if config else {}
        options = deep_merge(deep_merge(file_options, drop_unset(overrides)), _parse_sets(set_))
        model, data, out = (options.pop(key, None) for key in ("model", "data", "out"))
        if not data or not out:
            raise ConfigError("finetune needs --data and --out (or `data:` and `out:` in --config)")
        console = Console(stderr=True, soft_wrap=True)
        try:
            # bad options, data or --out, an unknown method or a missing finetune extra: before anything is printed
            check_inputs(
                method, data=data, out=out, options={k: v for k, v in options.items() if k not in DATA_OPTIONS}
            )
            load_method(method)
            console.print(f"[bold]finetune {method}[/] model={model or 'embedded SmolLM2'} data={data} out={out}")
            summary = run_finetune(method, data=data, out=out, model=model, options=options)
        except FinetuneError as exc:  # the user's input: one line, no traceback
            raise ConfigError(str(exc)) from None
        console.print(
            f"[green]done[/] {summary['steps']} steps on {summary['samples']} samples in {summary['wall_time_s']:.1f}s"
            f" -> {out} ({'adapter' if summary['adapter'] else 'full model'}; finetune_summary.json, metrics.jsonl)"
        )
