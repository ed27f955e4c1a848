"""`tfgrpo score --reward math INPUT.jsonl [--out OUT.jsonl]`: add `reward`, `extracted`, `reason` to each row."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import build_config, load_yaml_value
from tfgrpo.llm.config import LLMConfig


def _parse_params(pairs: list[str] | None) -> dict[str, object]:
    """`--param rel_tol=0.01` -> {"rel_tol": 0.01} (values read as YAML scalars)."""
    from tfgrpo.rewards.errors import RewardError

    params: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise RewardError(f"--param expects KEY=VALUE, got {pair!r}")
        params[key.strip()] = load_yaml_value(value, option=f"--param {pair!r:.80}", error=RewardError)
    return params


JUDGE_FLAGS = opt.llm_flags("backend", "model", "base_url", "api_key", "timeout_s", section="")


def register(app: typer.Typer) -> None:
    @listed(app, "score")
    @opt.config_options(LLMConfig, JUDGE_FLAGS)  # the model of `--reward judge`
    def score(
        overrides: dict[str, Any],
        input_path: Annotated[
            str, typer.Argument(metavar="INPUT.jsonl", help="Rows with a completion and a reference answer.")
        ],
        reward_name: Annotated[
            str,
            typer.Option("--reward", "-r", help="math | exact | choice | numeric | format | code | judge | majority."),
        ] = "math",
        out: Annotated[str | None, typer.Option("--out", "-o", help="Output JSONL (default: stdout).")] = None,
        completion_key: Annotated[
            str, typer.Option("--completion-key", help="Key of the completion in each row.")
        ] = "completion",
        answer_key: Annotated[
            str, typer.Option("--answer-key", help="Key of the reference answer in each row.")
        ] = "answer",
        param: Annotated[
            list[str] | None,
            typer.Option("--param", "-p", help="Reward parameter KEY=VALUE (repeatable), e.g. rel_tol=0.01."),
        ] = None,
    ) -> None:
        """Malformed rows are reported by line number; the rest are scored. Exit code 1 when any row was malformed."""
        import itertools
        import json
        import sys
        from pathlib import Path

        from rich.console import Console

        from tfgrpo.core.atomic import file_target
        from tfgrpo.core.textfile import iter_lines
        from tfgrpo.rewards import JudgeReward, get_reward
        from tfgrpo.rewards.errors import RewardError
        from tfgrpo.rewards.jsonl import ScoreSummary, score_lines

        params = _parse_params(param)
        source = Path(input_path)
        if not source.is_file():
            raise RewardError(f"input file not found: {input_path}")
        if out and file_target(out, RewardError).exists() and Path(out).samefile(source):
            raise RewardError(f"--out {out} is the input file; write the scores to another file")
        judge = reward_name == "judge" and "complete" not in params
        reward = get_reward(reward_name, **({**params, "complete": _judge_pending} if judge else params))
        if judge and isinstance(reward, JudgeReward):  # its parameters are checked: now open the model's client
            reward.complete = _judge_callable(overrides)
        console = Console(stderr=True, soft_wrap=True)
        summary = ScoreSummary()
        lines = (line for _number, line in iter_lines(source, error=RewardError))  # bad bytes / huge rows: one line
        rows = score_lines(
            lines, reward, source=input_path, completion_key=completion_key, answer_key=answer_key, summary=summary
        )
        first = next(rows, None)  # an empty input is refused before --out is created
        if first is None and not summary.malformed:
            raise RewardError(f"{input_path}: no rows to score")
        sink = open(out, "w", encoding="utf-8") if out else sys.stdout  # noqa: SIM115
        try:
            for row in itertools.chain([first] if first is not None else [], rows):
                sink.write(json.dumps(row, ensure_ascii=False) + "\n")
        finally:
            if out:
                sink.close()
        for problem in summary.malformed:
            console.print(f"[bold red]error:[/] {problem}", highlight=False, markup=True)
        console.print(f"{reward.name}: {summary.line()}" + (f" -> {out}" if out else ""), highlight=False)
        if summary.malformed:
            raise typer.Exit(1)


def _judge_pending(messages: list[dict[str, str]]) -> str:
    """Stands in for the judge's client while the reward's parameters are checked (never called)."""
    raise RuntimeError("the judge's client was not set")


def _judge_callable(overrides: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The judge's sync `complete(messages) -> str`, over the project's LLM client."""
    from tfgrpo.llm.factory import build_client
    from tfgrpo.rollout.scoring import daemon_loop, judge_completer

    client = build_client(build_config(LLMConfig, None, overrides))
    # One loop for every judge call of this command: async clients must not hop between event loops.
    loop, _ = daemon_loop()
    return judge_completer(client, loop)
