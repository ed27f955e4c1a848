"""`tfgrpo finetune METHOD`: gradient baselines (SFT ... GSPO) on the same data and rewards; thin over finetune.run."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfgrpo.cli.options import ConfigOpt, ModelOpt, SeedOpt

METHOD_HELP = "sft | dpo | ipo | cdpo | kto | orpo | ppo | grpo | gspo"


def _parse_sets(items: list[str] | None) -> dict[str, Any]:
    """`--set beta=0.2 --set lora_target_modules=[q_proj,v_proj]`: values parsed as YAML scalars/lists."""
    import yaml

    from tfgrpo.core.config import ConfigError

    parsed: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        parsed[key.strip().replace("-", "_")] = yaml.safe_load(value)
    return parsed


def register(app: typer.Typer) -> None:
    @app.command("finetune")
    def finetune_command(
        method: Annotated[str, typer.Argument(help=METHOD_HELP)],
        data: Annotated[
            str | None,
            typer.Option(
                "--data",
                "-d",
                help="A learn run dir (its rollouts.jsonl), a "
                "problem/answer JSONL or bundled name such as math_l5_train200 "
                "(RL methods), or TRL-format JSONL.",
            ),
        ] = None,
        out: Annotated[
            str | None,
            typer.Option(
                "--out", "-o", help="Output folder (adapter or model, metrics.jsonl, finetune_summary.json)."
            ),
        ] = None,
        model: ModelOpt = None,
        config: ConfigOpt = None,
        peft: Annotated[
            str | None, typer.Option("--peft", help="lora | rslora | dora | pissa | olora | longlora | qlora | none")
        ] = None,
        max_steps: Annotated[
            int | None, typer.Option("--max-steps", help="Optimizer steps (default: epochs).")
        ] = None,
        learning_rate: Annotated[float | None, typer.Option("--learning-rate", "--lr")] = None,
        batch_size: Annotated[int | None, typer.Option("--batch-size", help="Per-device train batch size.")] = None,
        lora_r: Annotated[int | None, typer.Option("--lora-r")] = None,
        lora_alpha: Annotated[int | None, typer.Option("--lora-alpha")] = None,
        group_size: Annotated[
            int | None, typer.Option("--group-size", help="GRPO/GSPO/PPO samples per prompt (1-16).")
        ] = None,
        reward: Annotated[
            str | None,
            typer.Option("--reward", help="RL reward: a rewards/ name (math, ...) or a reward-model folder."),
        ] = None,
        tools: Annotated[
            list[str] | None,
            typer.Option("--tools", help="GRPO/GSPO multi-turn rollouts with tools, e.g. python (repeatable or a,b)."),
        ] = None,
        max_turns: Annotated[
            int | None,
            typer.Option("--max-turns", help="Model turns per trajectory with tools (final answer included)."),
        ] = None,
        seed: SeedOpt = None,
        set_: Annotated[
            list[str] | None,
            typer.Option("--set", help="Any config field: KEY=VALUE (repeatable), e.g. --set beta=0.2."),
        ] = None,
    ) -> None:
        """Fine-tune a model with METHOD on a learn run's rollouts or a problem file; save adapter + summary."""
        from rich.console import Console

        from tfgrpo.core.config import ConfigError, deep_merge, drop_unset, read_yaml

        file_options = read_yaml(config) if config else {}
        cli_options = drop_unset(
            {
                "peft": peft,
                "max_steps": max_steps,
                "learning_rate": learning_rate,
                "per_device_train_batch_size": batch_size,
                "lora_r": lora_r,
                "lora_alpha": lora_alpha,
                "num_generations": group_size,
                "reward": reward,
                "seed": seed,
                "tools": tools,
                "max_turns": max_turns,
            }
        )
        options = deep_merge(deep_merge(file_options, cli_options), _parse_sets(set_))
        model = model or options.get("model")
        data = data or options.get("data")
        out = out or options.get("out")
        for key in ("model", "data", "out"):
            options.pop(key, None)
        if not data or not out:
            raise ConfigError("finetune needs --data and --out (or `data:` and `out:` in --config)")

        from finetune.errors import FinetuneError
        from finetune.run import load_method, run_finetune

        console = Console(stderr=True, soft_wrap=True)
        try:
            load_method(method)  # an unknown method or a missing finetune extra fails before anything is printed
            console.print(f"[bold]finetune {method}[/] model={model or 'embedded SmolLM2'} data={data} out={out}")
            summary = run_finetune(method, data=data, out=out, model=model, options=options)
        except FinetuneError as exc:  # the user's input: one line, no traceback
            raise ConfigError(str(exc)) from None
        console.print(
            f"[green]done[/] {summary['steps']} steps on {summary['samples']} samples in {summary['wall_time_s']:.1f}s"
            f" -> {out} ({'adapter' if summary['adapter'] else 'full model'}; finetune_summary.json, metrics.jsonl)"
        )
