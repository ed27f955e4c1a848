"""`tfgrpo library check | ablate | prune`: leaked answers and copied problems, per-experience utility, pruning.

`check LIB --against DATA...` flags leaks; `ablate LIB --data VAL --samples K` measures each experience's
utility (leave-one-out) into the library's metadata; `prune LIB --by-utility` deletes those that hurt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import LIBRARY_COMMANDS, listed
from tfgrpo.core.config import build_config
from tfgrpo.eval.config import EvalConfig

EXIT_LEAKS = 1
ABLATE_FLAGS = [
    opt.flag("samples", "-k"),
    opt.flag("limit"),
    *opt.llm_flags("backend", "model", "base_url", "api_key", "concurrency"),
    *opt.sampling_flags("sampling", "temperature", "max_tokens"),
    opt.flag("seed", also=["sampling.seed"]),
]  # like a linter: a check that found something fails a CI step


def register(library_app: typer.Typer) -> None:
    listed(library_app, "check", LIBRARY_COMMANDS)(check)
    listed(library_app, "ablate", LIBRARY_COMMANDS)(ablate_command)
    listed(library_app, "prune", LIBRARY_COMMANDS)(prune_command)


def check(
    library_path: Annotated[Path, typer.Argument(help="Library JSON file.", show_default=False)],
    against: Annotated[
        list[str],
        typer.Option("--against", help="Problem set (bundled name or file); repeatable.", show_default=False),
    ],
    ngram: Annotated[int, typer.Option("--ngram", help="n of the word n-grams compared for copied problems.")] = 6,
    copy_threshold: Annotated[
        float,
        typer.Option("--copy-threshold", help="Shared n-gram fraction from which an experience copies a problem."),
    ] = 0.5,
    min_integer: Annotated[
        int, typer.Option("--min-integer", help="Integer answers below this (in absolute value) are not compared.")
    ] = 10,
    as_json: Annotated[bool | None, typer.Option("--json", help="Print the findings as JSON lines.")] = None,
) -> None:
    import json

    from rich.console import Console
    from rich.table import Table

    from tfgrpo.core.datasets import load_dataset_rows
    from tfgrpo.experiences import Library
    from tfgrpo.experiences.leakage import LeakageChecker

    library = Library.load(library_path)
    sets = {name: load_dataset_rows(name, require_answer=False) for name in dict.fromkeys(against)}
    try:
        checker = LeakageChecker(sets, ngram=ngram, copy_threshold=copy_threshold, min_integer=min_integer)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    findings = checker.check_library(library)
    console = Console(soft_wrap=True)
    if as_json:
        for finding in findings:
            print(json.dumps(finding.model_dump(), ensure_ascii=False))
    elif findings:
        table = Table(
            title=f"{library_path}: {len(findings)} finding(s) against {checker.size} problems",
            title_justify="left",
        )
        for column in ("id", "kind", "problem", "evidence", "tied by", "text"):
            table.add_column(column, overflow="fold")
        for f in findings:
            table.add_row(f.experience_id or "", f.kind, f"{f.source}:{f.problem_id}", f.evidence, f.tie_label, f.text)
        console.print(table)
    else:
        console.print(
            f"{library_path}: clean ({len(library)} experiences against {checker.size} problems of {', '.join(sets)})"
        )
    if any(f.is_leak for f in findings):
        raise typer.Exit(EXIT_LEAKS)


@opt.config_options(EvalConfig, ABLATE_FLAGS)
def ablate_command(
    overrides: dict[str, Any],
    library_path: Annotated[Path, typer.Argument(help="Library JSON file.", show_default=False)],
    data: Annotated[
        str,
        typer.Option(
            "--data", help="Validation problems (bundled name or file); never the test set.", show_default=False
        ),
    ],
    max_groups: Annotated[
        int,
        typer.Option("--max-groups", help="More experiences than this: leave out groups instead of single ones."),
    ] = 20,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Eval runs of the ablation (default: LIB's stem + '.ablation' beside it)."),
    ] = None,
    config: opt.ConfigOpt = None,
    budget_usd: Annotated[
        float | None, typer.Option("--budget-usd", help="Stop the ablation once this many USD were spent.")
    ] = None,
) -> None:
    from rich.console import Console

    from tfgrpo.eval.ablation import ablate
    from tfgrpo.experiences import Library

    out = out or library_path.with_name(library_path.stem + ".ablation")
    settings = build_config(EvalConfig, config, {**overrides, "data": data, "out": str(out)})
    library = Library.load(library_path)
    console = Console(stderr=True, soft_wrap=True)
    plan = _announce_plan(library, settings, max_groups=max_groups, budget_usd=budget_usd, console=console)
    block = ablate(library_path, settings, plan, budget_usd=budget_usd, console=console, seed=settings.seed)
    if block["full_mean_at_k"] is None:
        raise typer.BadParameter(
            f"--budget-usd {budget_usd} ran out before the full library was evaluated; nothing written"
        )
    library.metadata["ablation"] = block
    library.save(library_path)
    _print_utilities(library, block)
    if not block["complete"]:
        console.print(
            f"budget reached after {len(block['utilities'])} experience(s); rerun with a larger --budget-usd "
            "(measured variants are cached)",
            style="yellow",
            highlight=False,
            markup=False,
        )


def prune_command(
    library_path: Annotated[Path, typer.Argument(help="Library JSON file.", show_default=False)],
    by_utility: Annotated[
        bool, typer.Option("--by-utility", help="Delete experiences whose ablation verdict is 'hurts'.")
    ] = False,
    min_utility: Annotated[
        float | None, typer.Option("--min-utility", help="Also delete those with utility below this.")
    ] = None,
    by_credit: Annotated[
        bool,
        typer.Option(
            "--by-credit",
            help="Retire experiences whose credit (learn's random leave-outs) has its 95% interval below 0.",
        ),
    ] = False,
) -> None:
    from tfgrpo.eval.ablation import prune_by_utility
    from tfgrpo.experiences import History, Library

    if by_utility == by_credit:
        raise typer.BadParameter("say how to prune: --by-utility or --by-credit (one of them)")
    library = Library.load(library_path)
    if by_credit:
        _prune_by_credit(library_path, library)
        return
    if not (library.metadata.get("ablation") or {}).get("utilities"):
        raise typer.BadParameter(
            f"{library_path} has no utilities: run `tfgrpo library ablate {library_path} --data VAL` first"
        )
    result = prune_by_utility(library, min_utility=min_utility)
    history = History.for_library(library_path)
    history.ensure_baseline(library)
    history.commit_result(result)
    result.library.save(library_path)
    removed = [a.ids[0] for a in result.applied]
    typer.echo(
        f"{library_path}: removed {len(removed)} ({', '.join(removed) or 'none'}); version {library.version} -> "
        f"{result.library.version} ({len(result.library)} experiences)"
    )


def _prune_by_credit(library_path: Path, library: Any) -> None:
    from tfgrpo.experiences import History
    from tfgrpo.experiences.credit import DEFAULT_LEVEL, DEFAULT_MIN_GROUPS
    from tfgrpo.learn.credit import prune_by_credit

    result, records = prune_by_credit(library, min_groups=DEFAULT_MIN_GROUPS, level=DEFAULT_LEVEL)
    history = History.for_library(library_path)
    history.ensure_baseline(library)
    history.commit(result.library, records=[*result.log_records(), *records], step=result.library.step)
    result.library.save(library_path)
    measured = sum(e.credit.effect is not None for e in library)
    typer.echo(
        f"{library_path}: retired {len(records)} ({', '.join(r['ids'][0] for r in records) or 'none'}) of {measured} "
        f"with a measured credit; version {library.version} -> {result.library.version} ({len(result.library)} "
        "experiences)"
    )


def _announce_plan(library, settings: EvalConfig, *, max_groups: int, budget_usd: float | None, console):
    """Plan the ablation and print what it will cost before any call."""
    from tfgrpo.core.datasets import load_dataset_rows
    from tfgrpo.eval.ablation import plan_ablation
    from tfgrpo.llm.accounting import resolve_pricing
    from tfgrpo.llm.factory import LOCAL_BACKENDS

    problems = load_dataset_rows(settings.data, limit=settings.limit)
    pricing = resolve_pricing(
        settings.llm.model,
        settings.llm.price_input_per_1m,
        settings.llm.price_output_per_1m,
        local=settings.llm.backend in LOCAL_BACKENDS,
    )
    plan = plan_ablation(library, [p.problem for p in problems], settings, max_groups=max_groups, pricing=pricing)
    cost = "unknown price" if plan.cost_usd is None else f"at most ${plan.cost_usd:.4f}"
    console.print(
        f"ablation plan: {len(plan.groups)} variant(s){' (grouped)' if any(len(g) > 1 for g in plan.groups) else ''} + the full "
        f"library x {plan.problems} problems x {plan.samples} samples = {plan.calls} samples, ~{plan.prompt_tokens:,} prompt "
        f"tokens, <= {plan.completion_tokens:,} completion tokens, {cost}"
        + (f"; capped at ${budget_usd:.4f}" if budget_usd is not None else ""),
        highlight=False,
        markup=False,
    )
    return plan


def _print_utilities(library, block) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"utility on {block['data']} (full library Mean@{block['samples']} = {block['full_mean_at_k']:.3f})",
        title_justify="left",
    )
    for column in ("id", "utility", "95% CI", "verdict", "group", "text"):
        table.add_column(column, overflow="fold")
    for experience in library:
        entry = block["utilities"].get(experience.id)
        if entry is None:
            table.add_row(experience.id, "–", "–", "not measured", "", experience.text)
            continue
        low, high = entry["ci95"]
        group = ",".join(entry["group"]) if len(entry["group"]) > 1 else ""
        table.add_row(
            experience.id,
            f"{entry['utility']:+.3f}",
            f"[{low:+.3f}, {high:+.3f}]",
            entry["verdict"],
            group,
            experience.text,
        )
    Console(soft_wrap=True).print(table)
